"""The cluster contract: one suite, run unchanged against the local and the kube backend.

Whatever a flow can observe through :class:`tasks.clients.cluster.Cluster` must be the same on a laptop
(YAML manifests) and on a real API server: object shape, resourceVersion/generation bookkeeping,
conflicts, status isolation, selectors, scale, Events and typed errors. A few checks need the test
server's fault injection or CRD schema validation and skip on the local backend, saying so.
"""

from __future__ import annotations

import pytest

from tasks.clients.cluster import (
    Cluster,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ObjectRef,
    Unavailable,
    retry_on_conflict,
    retry_unavailable,
)
from tests.cluster.conftest import VA, Backend, va_manifest

DEPLOYMENT = ("apps/v1", "Deployment")


def va_ref(namespace: str, name: str = "seed-va") -> ObjectRef:
    return ObjectRef(VA[0], VA[1], name, namespace)


def needs_server(backend: Backend) -> None:
    """Skip on the local backend: the check relies on the test server (fault injection, schemas)."""
    if backend.server is None:
        pytest.skip("needs the Kubernetes API test server (fault injection / CRD schema validation)")


# ---------------------------------------------------------------------------- reads


def test_backend_implements_the_protocol(cluster: Cluster) -> None:
    assert isinstance(cluster, Cluster)


def test_get_returns_api_shaped_object(cluster: Cluster, ns: str) -> None:
    obj = cluster.get(*VA, "seed-va", ns)
    assert (obj["apiVersion"], obj["kind"]) == VA
    meta = obj["metadata"]
    assert meta["name"] == "seed-va" and meta["namespace"] == ns
    assert meta["uid"] and meta["creationTimestamp"] and isinstance(meta["creationTimestamp"], str)
    assert isinstance(meta["resourceVersion"], str) and meta["resourceVersion"]
    assert meta["generation"] == 1
    assert obj["spec"]["modelID"] == "meta/llama-3.1-8b"


def test_get_core_and_cluster_scoped_kinds(backend: Backend, cluster: Cluster, ns: str) -> None:
    config = cluster.get("v1", "ConfigMap", "seed-config", ns)
    assert config["data"] == {"GLOBAL_OPT_INTERVAL": "60s"}
    namespace = cluster.get("v1", "Namespace", ns)
    assert namespace["metadata"]["name"] == ns and "namespace" not in namespace["metadata"]
    names = {n["metadata"]["name"] for n in cluster.list("v1", "Namespace")}
    assert {ns, backend.other_namespace} <= names


def test_get_missing_raises_not_found(backend: Backend, cluster: Cluster, ns: str) -> None:
    with pytest.raises(NotFound):
        cluster.get(*VA, "no-such-va", ns)
    with pytest.raises(NotFound):
        cluster.get("v1", "ConfigMap", "seed-config", backend.other_namespace)


def test_unknown_kind_raises_not_found(cluster: Cluster, ns: str) -> None:
    with pytest.raises(NotFound):
        cluster.get("example.invalid/v1", "Nothing", "x", ns)


def test_list_one_namespace(backend: Backend, cluster: Cluster, ns: str) -> None:
    items = cluster.list(*VA, namespace=ns)
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items] == [(ns, "seed-va")]
    assert all((i["apiVersion"], i["kind"]) == VA for i in items)
    other = cluster.list(*VA, namespace=backend.other_namespace)
    assert [i["metadata"]["labels"]["accelerator"] for i in other] == ["H100"]


def test_list_all_namespaces(backend: Backend, cluster: Cluster, ns: str) -> None:
    items = cluster.list(*VA, label_selector=f"suite={backend.suite}")
    assert sorted(i["metadata"]["namespace"] for i in items) == sorted([ns, backend.other_namespace])


def test_list_builtin_items_carry_kind(cluster: Cluster, ns: str) -> None:
    items = cluster.list("v1", "ConfigMap", namespace=ns, label_selector="tier=config")
    assert [(i["apiVersion"], i["kind"], i["metadata"]["name"]) for i in items] == [("v1", "ConfigMap", "seed-config")]
    deployments = cluster.list(*DEPLOYMENT, namespace=ns)
    assert [(d["apiVersion"], d["kind"]) for d in deployments] == [DEPLOYMENT]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("accelerator=A100", {"A100"}),
        ("accelerator==H100", {"H100"}),
        ("accelerator!=A100", {"H100"}),
        ("accelerator in (A100, H100)", {"A100", "H100"}),
        ("accelerator notin (A100)", {"H100"}),
        ("tier", {"A100", "H100"}),
        ("!tier", set()),
        ("!nolabel", {"A100", "H100"}),
        ("tier=model,accelerator in (H100,B200)", {"H100"}),
        ("accelerator in(A100)", {"A100"}),
        ("accelerator notin(A100)", {"H100"}),
    ],
)
def test_label_selectors(backend: Backend, cluster: Cluster, selector: str, expected: set[str]) -> None:
    items = cluster.list(*VA, label_selector=f"suite={backend.suite},{selector}")
    assert {i["metadata"]["labels"]["accelerator"] for i in items} == expected


@pytest.mark.parametrize("selector", ["accelerator in ()", "accelerator notin ()", "accelerator in ( , )"])
def test_an_empty_value_set_is_refused(cluster: Cluster, selector: str) -> None:
    """As the API server's labels.Parse: ``in ()`` would select nothing and ``notin ()`` everything, silently."""
    with pytest.raises(Invalid, match="values set can't be empty"):
        cluster.list(*VA, label_selector=selector)


# ---------------------------------------------------------------------------- create / apply


def test_create_returns_stored_object(cluster: Cluster, ns: str) -> None:
    created = cluster.create(va_manifest("new-va", ns, {"made": "here"}))
    meta = created["metadata"]
    assert meta["uid"] and meta["resourceVersion"] and meta["creationTimestamp"]
    assert meta["generation"] == 1 and meta["labels"] == {"made": "here"}
    fetched = cluster.get(*VA, "new-va", ns)
    assert fetched["metadata"]["uid"] == meta["uid"]
    assert fetched["metadata"]["resourceVersion"] == meta["resourceVersion"]
    assert fetched["spec"] == created["spec"]


def test_create_ignores_status(cluster: Cluster, ns: str) -> None:
    manifest = va_manifest("with-status", ns)
    manifest["status"] = {"actuation": {"applied": True}}
    created = cluster.create(manifest)
    assert "actuation" not in (created.get("status") or {})


def test_create_existing_conflicts(cluster: Cluster, ns: str) -> None:
    with pytest.raises(Conflict):
        cluster.create(va_manifest("seed-va", ns))


def test_apply_creates_then_merges(cluster: Cluster, ns: str) -> None:
    first = cluster.apply(va_manifest("applied", ns, {"a": "1"}))
    assert first["metadata"]["generation"] == 1
    desired = va_manifest("applied", ns, {"b": "2"}, model="ibm/granite-13b")
    second = cluster.apply(desired)
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert second["spec"]["modelID"] == "ibm/granite-13b"
    assert second["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert second["metadata"]["generation"] == 2
    third = cluster.apply(desired)
    assert third["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]  # no-op


# ---------------------------------------------------------------------------- spec / status


def test_patch_spec_bumps_generation_and_ignores_status(cluster: Cluster, ns: str) -> None:
    before = cluster.get(*VA, "seed-va", ns)
    after = cluster.patch_spec(
        va_ref(ns), {"spec": {"variantCost": "40.00"}, "status": {"actuation": {"applied": True}}}
    )
    assert after["spec"]["variantCost"] == "40.00"
    assert after["spec"]["modelID"] == before["spec"]["modelID"]
    assert after["metadata"]["generation"] == 2
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert "actuation" not in (cluster.get(*VA, "seed-va", ns).get("status") or {})


def test_metadata_patch_does_not_bump_generation(cluster: Cluster, ns: str) -> None:
    after = cluster.patch_spec(va_ref(ns), {"metadata": {"labels": {"extra": "yes"}}})
    assert after["metadata"]["labels"]["extra"] == "yes" and after["metadata"]["labels"]["tier"] == "model"
    assert after["metadata"]["generation"] == 1


def test_patch_status_leaves_spec_and_generation(cluster: Cluster, ns: str) -> None:
    before = cluster.get(*VA, "seed-va", ns)
    after = cluster.patch_status(va_ref(ns), {"actuation": {"applied": True}})
    assert after["status"]["actuation"] == {"applied": True}
    assert after["spec"] == before["spec"]
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"]["generation"] == 1
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    merged = cluster.patch_status(va_ref(ns), {"desiredOptimizedAlloc": {"numReplicas": 3}})
    assert merged["status"]["actuation"] == {"applied": True}  # merge, not replace
    assert merged["status"]["desiredOptimizedAlloc"]["numReplicas"] == 3


def test_status_survives_spec_writes(cluster: Cluster, ns: str) -> None:
    cluster.patch_status(va_ref(ns), {"actuation": {"applied": True}})
    after = cluster.patch_spec(va_ref(ns), {"spec": {"variantCost": "1.00"}})
    assert after["status"]["actuation"] == {"applied": True}


@pytest.mark.parametrize("write", ["spec", "status"])
def test_stale_resource_version_conflicts(cluster: Cluster, ns: str, write: str) -> None:
    stale = cluster.get(*VA, "seed-va", ns)["metadata"]["resourceVersion"]
    fresh = cluster.patch_status(va_ref(ns), {"actuation": {"applied": False}})["metadata"]["resourceVersion"]
    assert fresh != stale
    if write == "spec":
        with pytest.raises(Conflict):
            cluster.patch_spec(va_ref(ns), {"spec": {"variantCost": "2.00"}}, resource_version=stale)
        done = cluster.patch_spec(va_ref(ns), {"spec": {"variantCost": "2.00"}}, resource_version=fresh)
        assert done["spec"]["variantCost"] == "2.00"
    else:
        with pytest.raises(Conflict):
            cluster.patch_status(va_ref(ns), {"actuation": {"applied": True}}, resource_version=stale)
        done = cluster.patch_status(va_ref(ns), {"actuation": {"applied": True}}, resource_version=fresh)
        assert done["status"]["actuation"] == {"applied": True}


def test_patch_status_of_kind_without_status_subresource(cluster: Cluster, ns: str) -> None:
    with pytest.raises(NotFound):
        cluster.patch_status(ObjectRef("v1", "ConfigMap", "seed-config", ns), {"x": 1})


@pytest.mark.parametrize(
    "call",
    [
        lambda c, ref: c.patch_spec(ref, {"spec": {"variantCost": "1"}}),
        lambda c, ref: c.patch_status(ref, {"actuation": {"applied": True}}),
        lambda c, ref: c.delete(ref),
    ],
    ids=["patch_spec", "patch_status", "delete"],
)
def test_writes_to_missing_object_raise_not_found(cluster: Cluster, ns: str, call) -> None:
    with pytest.raises(NotFound):
        call(cluster, va_ref(ns, "missing"))


# ---------------------------------------------------------------------------- retry on conflict


def test_retry_on_conflict_after_concurrent_update(cluster: Cluster, ns: str) -> None:
    calls: list[str] = []

    def mutate(obj: dict) -> dict:
        calls.append(obj["metadata"]["resourceVersion"])
        if len(calls) == 1:  # someone else writes between our read and our write
            cluster.patch_status(va_ref(ns), {"desiredOptimizedAlloc": {"numReplicas": 7}})
        return {"actuation": {"applied": True}}

    result = retry_on_conflict(cluster, va_ref(ns), mutate, write="status", backoff=lambda _: 0)
    assert len(calls) == 2 and calls[0] != calls[1]
    assert result["status"]["actuation"] == {"applied": True}
    assert result["status"]["desiredOptimizedAlloc"]["numReplicas"] == 7  # the concurrent update survived


def test_retry_on_conflict_spec_write(cluster: Cluster, ns: str) -> None:
    calls: list[int] = []

    def mutate(obj: dict) -> dict:
        calls.append(1)
        if len(calls) == 1:
            cluster.patch_spec(va_ref(ns), {"metadata": {"labels": {"touched": "yes"}}})
        return {"spec": {"acceleratorCount": obj["spec"]["acceleratorCount"] + 1}}

    result = retry_on_conflict(cluster, va_ref(ns), mutate, write="spec", backoff=lambda _: 0)
    assert len(calls) == 2
    assert result["spec"]["acceleratorCount"] == 2 and result["metadata"]["labels"]["touched"] == "yes"


def test_retry_on_conflict_gives_up(cluster: Cluster, ns: str) -> None:
    calls: list[int] = []

    def mutate(obj: dict) -> dict:
        calls.append(1)
        cluster.patch_status(va_ref(ns), {"desiredOptimizedAlloc": {"numReplicas": len(calls)}})
        return {"actuation": {"applied": True}}

    with pytest.raises(Conflict):
        retry_on_conflict(cluster, va_ref(ns), mutate, attempts=3, backoff=lambda _: 0)
    assert len(calls) == 3


def test_retry_on_conflict_nothing_to_write(cluster: Cluster, ns: str) -> None:
    before = cluster.get(*VA, "seed-va", ns)
    result = retry_on_conflict(cluster, va_ref(ns), lambda obj: None)
    assert result["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_retry_on_conflict_after_injected_409(backend: Backend, cluster: Cluster, ns: str) -> None:
    needs_server(backend)
    backend.server.inject("PATCH", ".*/status$", 409)
    calls: list[int] = []

    def mutate(obj: dict) -> dict:
        calls.append(1)
        return {"actuation": {"applied": True}}

    result = retry_on_conflict(cluster, va_ref(ns), mutate, backoff=lambda _: 0)
    assert len(calls) == 2 and result["status"]["actuation"] == {"applied": True}


# ---------------------------------------------------------------------------- scale


def test_scale_read_and_write(cluster: Cluster, ns: str) -> None:
    ref = ObjectRef(*DEPLOYMENT, "seed-deploy", ns)
    scale = cluster.get_scale(ref)
    assert scale.replicas == 2 and scale.resource_version
    assert scale.status_replicas == 0 and scale.selector == "app=seed"  # nothing has run it yet
    cluster.patch_status(ref, {"replicas": 2, "readyReplicas": 2})
    assert cluster.get_scale(ref).status_replicas == 2
    written = cluster.set_scale(ref, 5)
    assert written.replicas == 5
    assert cluster.get_scale(ref).replicas == 5
    deployment = cluster.get(*DEPLOYMENT, "seed-deploy", ns)
    assert deployment["spec"]["replicas"] == 5
    assert deployment["metadata"]["generation"] == 2


def test_scale_of_kind_without_scale_subresource(cluster: Cluster, ns: str) -> None:
    with pytest.raises(NotFound):
        cluster.get_scale(va_ref(ns))


def test_scale_of_missing_object(cluster: Cluster, ns: str) -> None:
    with pytest.raises(NotFound):
        cluster.get_scale(ObjectRef(*DEPLOYMENT, "missing", ns))


def test_status_write_to_kind_without_status_subresource(cluster: Cluster, ns: str) -> None:
    ref = ObjectRef("v1", "ConfigMap", "seed-config", ns)
    before = cluster.get("v1", "ConfigMap", "seed-config", ns)
    with pytest.raises(NotFound) as info:
        cluster.patch_status(ref, {"phase": "x"})
    assert info.value.message == "configmaps.core has no status subresource"
    assert cluster.get("v1", "ConfigMap", "seed-config", ns) == before


def test_create_with_invalid_name_names_the_field(cluster: Cluster, ns: str) -> None:
    with pytest.raises(Invalid) as info:
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_Name", "namespace": ns}})
    assert info.value.field == "metadata.name"
    assert info.value.message.startswith("metadata.name: Invalid value: ")


# ---------------------------------------------------------------------------- events / delete


def test_post_event_is_listed(cluster: Cluster, ns: str) -> None:
    obj = cluster.get(*VA, "seed-va", ns)
    event = cluster.post_event(obj, "OptimizationSucceeded", "2 replicas of A100", "Normal")
    assert event["metadata"]["name"].startswith("seed-va.")
    events = [
        e for e in cluster.list("v1", "Event", namespace=ns) if e["metadata"]["name"] == event["metadata"]["name"]
    ]
    assert len(events) == 1
    listed = events[0]
    assert listed["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert listed["involvedObject"]["kind"] == VA[1] and listed["involvedObject"]["name"] == "seed-va"
    assert listed["involvedObject"]["namespace"] == ns
    assert (listed["reason"], listed["message"], listed["type"]) == (
        "OptimizationSucceeded",
        "2 replicas of A100",
        "Normal",
    )
    assert listed["source"]["component"] == "modelplane" and listed["count"] == 1
    assert listed["firstTimestamp"] and listed["lastTimestamp"]
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "Event")


def test_post_warning_event_for_core_object(cluster: Cluster, ns: str) -> None:
    config = cluster.get("v1", "ConfigMap", "seed-config", ns)
    event = cluster.post_event(config, "BadConfig", "unit cost missing", "Warning")
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "ConfigMap"


def test_delete(backend: Backend, cluster: Cluster, ns: str) -> None:
    cluster.delete(va_ref(ns))
    with pytest.raises(NotFound):
        cluster.get(*VA, "seed-va", ns)
    assert cluster.list(*VA, namespace=ns) == []
    assert len(cluster.list(*VA, namespace=backend.other_namespace)) == 1
    with pytest.raises(NotFound):
        cluster.delete(va_ref(ns))
    recreated = cluster.create(va_manifest("seed-va", ns))
    assert recreated["metadata"]["generation"] == 1


def test_no_finalizer_is_added_to_an_object_being_deleted(cluster: Cluster, ns: str) -> None:
    """The API server refuses a new finalizer once deletion started (it could hold the object forever); removing
    the last one lets the object go."""
    ref = ObjectRef("v1", "ConfigMap", "held", ns)
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "held", "namespace": ns, "finalizers": ["example.com/a"]},
        }
    )
    cluster.delete(ref)
    assert cluster.get("v1", "ConfigMap", "held", ns)["metadata"]["deletionTimestamp"]
    with pytest.raises(Invalid) as refused:
        cluster.patch_spec(ref, {"metadata": {"finalizers": ["example.com/a", "example.com/b"]}})
    assert refused.value.field == "metadata.finalizers"
    assert (
        'no new finalizers can be added if the object is being deleted, found new finalizers []string{"example.com/b"}'
        in str(refused.value)
    )
    assert cluster.get("v1", "ConfigMap", "held", ns)["metadata"]["finalizers"] == ["example.com/a"]
    cluster.patch_spec(ref, {"metadata": {"finalizers": []}})
    with pytest.raises(NotFound):
        cluster.get("v1", "ConfigMap", "held", ns)


def test_delete_core_object(cluster: Cluster, ns: str) -> None:
    cluster.delete(ObjectRef("v1", "ConfigMap", "seed-config", ns))
    with pytest.raises(NotFound):
        cluster.get("v1", "ConfigMap", "seed-config", ns)


# ---------------------------------------------------------------------------- errors from the server


def test_invalid_reports_field(backend: Backend, cluster: Cluster, ns: str) -> None:
    manifest = va_manifest("broken", ns)
    del manifest["spec"]["modelID"]
    with pytest.raises(Invalid) as info:
        cluster.create(manifest)
    assert info.value.field == "spec.modelID"
    assert info.value.status == 422
    assert 'VariantAutoscaling.llmd.ai "broken" is invalid: spec.modelID: Required value' in info.value.message
    with pytest.raises(NotFound):
        cluster.get(*VA, "broken", ns)


# ---------------------------------------------------------------------------- CRD schema: validate, default, prune


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("variantID", "nope", "should match"),
        ("acceleratorCount", 0, "should be greater than or equal to 1"),
        ("acceleratorCount", "2", "must be of type integer"),
    ],
)
def test_schema_rejects_invalid_create_and_patch(
    cluster: Cluster, ns: str, field: str, value: object, message: str
) -> None:
    manifest = va_manifest("checked", ns)
    manifest["spec"][field] = value
    with pytest.raises(Invalid) as info:
        cluster.create(manifest)
    assert info.value.field == f"spec.{field}" and message in info.value.message
    before = cluster.get(*VA, "seed-va", ns)
    with pytest.raises(Invalid) as info:
        cluster.patch_spec(va_ref(ns), {"spec": {field: value}})
    assert info.value.field == f"spec.{field}"
    assert cluster.get(*VA, "seed-va", ns) == before  # nothing written


def test_schema_validates_status_writes(cluster: Cluster, ns: str) -> None:
    with pytest.raises(Invalid) as info:
        cluster.patch_status(
            va_ref(ns),
            {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Maybe",
                        "reason": "X",
                        "message": "",
                        "lastTransitionTime": "2025-01-01T00:00:00Z",
                    }
                ]
            },
        )
    assert info.value.field == "status.conditions[0].status"


AIM = "aim.silogen.ai/v1alpha1"


def test_schema_defaults_are_filled_in(cluster: Cluster, ns: str) -> None:
    template = cluster.create(
        {
            "apiVersion": AIM,
            "kind": "AIMServiceTemplate",
            "metadata": {"name": "tpl", "namespace": ns},
            "spec": {"model": "meta-llama-3-8b"},
        }
    )
    assert template["spec"]["precision"] == "auto" and template["spec"]["warmCache"] is False
    service = cluster.create(
        {
            "apiVersion": AIM,
            "kind": "AIMService",
            "metadata": {"name": "svc", "namespace": ns},
            "spec": {"model": "meta-llama-3-8b", "templateRef": "tpl"},
        }
    )
    assert service["spec"]["replicas"] == 1 and service["spec"]["configRef"] == "default"
    assert cluster.get(AIM, "AIMService", "svc", ns)["spec"]["replicas"] == 1


def test_schema_prunes_unknown_fields(cluster: Cluster, ns: str) -> None:
    manifest = va_manifest("pruned", ns)
    manifest["spec"]["junk"] = {"a": 1}
    created = cluster.create(manifest)
    assert "junk" not in created["spec"]
    patched = cluster.patch_spec(va_ref(ns, "pruned"), {"spec": {"alsoJunk": True}})
    assert "alsoJunk" not in patched["spec"]
    assert "junk" not in cluster.get(*VA, "pruned", ns)["spec"]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (403, Forbidden),
        (401, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (429, Unavailable),
        (500, Unavailable),
        (503, Unavailable),
    ],
)
def test_http_errors_become_typed_errors(backend: Backend, cluster: Cluster, ns: str, status: int, error: type) -> None:
    needs_server(backend)
    backend.server.inject("GET", r".*/variantautoscalings/seed-va$", status)
    with pytest.raises(error):
        cluster.get(*VA, "seed-va", ns)
    assert cluster.get(*VA, "seed-va", ns)["metadata"]["name"] == "seed-va"  # injected once only


def test_retry_unavailable_rides_out_transient_errors(backend: Backend, cluster: Cluster, ns: str) -> None:
    needs_server(backend)
    backend.server.inject("GET", r".*/configmaps/seed-config$", 503, times=2)
    config = retry_unavailable(lambda: cluster.get("v1", "ConfigMap", "seed-config", ns), attempts=3, base_delay=0.01)
    assert config["data"] == {"GLOBAL_OPT_INTERVAL": "60s"}


def test_writes_are_json_shaped(cluster: Cluster, ns: str) -> None:
    """Python values a flow may hand over are stored as JSON would carry them, on both backends."""
    import datetime

    stamp = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    after = cluster.patch_status(
        va_ref(ns),
        {"desiredOptimizedAlloc": {"lastRunTime": stamp, "numReplicas": 2}, "conditions": ()},
    )
    assert after["status"]["desiredOptimizedAlloc"] == {"lastRunTime": "2025-01-02T03:04:05+00:00", "numReplicas": 2}
    with pytest.raises(Invalid) as info:
        cluster.patch_spec(va_ref(ns), {"spec": {"variantCost": object()}})
    assert info.value.field == "spec.variantCost"
    with pytest.raises(Invalid):
        cluster.patch_status(va_ref(ns), {"desiredOptimizedAlloc": {"numReplicas": float("nan")}})


def test_builtin_defaults_applied_on_write(cluster: Cluster, ns: str) -> None:
    """The defaults flows read back: Secret stringData folded into data, workload replicas."""
    import base64

    secret = cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf", "namespace": ns},
            "stringData": {"token": "abc"},
        }
    )
    assert secret["data"] == {"token": base64.b64encode(b"abc").decode()} and "stringData" not in secret
    assert secret["type"] == "Opaque"
    patched = cluster.patch_spec(ObjectRef("v1", "Secret", "hf", ns), {"stringData": {"other": "x"}})
    assert set(patched["data"]) == {"token", "other"} and "stringData" not in patched
    deployment = cluster.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "defaulted", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]},
                },
            },
        }
    )
    assert deployment["spec"]["replicas"] == 1
    assert cluster.get_scale(ObjectRef(*DEPLOYMENT, "defaulted", ns)).replicas == 1


def test_generation_only_where_the_api_server_keeps_one(cluster: Cluster, ns: str) -> None:
    """ConfigMaps (and other core kinds) have no generation; custom resources and workloads do."""
    config = cluster.get("v1", "ConfigMap", "seed-config", ns)
    assert "generation" not in config["metadata"]
    created = cluster.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain", "namespace": ns}, "data": {"a": "1"}}
    )
    assert "generation" not in created["metadata"]
    patched = cluster.patch_spec(ObjectRef("v1", "ConfigMap", "plain", ns), {"data": {"a": "2"}})
    assert "generation" not in patched["metadata"]
    assert cluster.get(*DEPLOYMENT, "seed-deploy", ns)["metadata"]["generation"] == 1


def test_deployment_generation_follows_annotations(cluster: Cluster, ns: str) -> None:
    """apps/v1 bumps a Deployment's generation on annotation changes too; labels do not count."""
    ref = ObjectRef(*DEPLOYMENT, "seed-deploy", ns)
    labelled = cluster.patch_spec(ref, {"metadata": {"labels": {"extra": "x"}}})
    assert labelled["metadata"]["generation"] == 1
    annotated = cluster.patch_spec(ref, {"metadata": {"annotations": {"note": "x"}}})
    assert annotated["metadata"]["generation"] == 2
    va = cluster.patch_spec(va_ref(ns), {"metadata": {"annotations": {"note": "x"}}})
    assert va["metadata"]["generation"] == 1


def test_create_from_a_snapshot_drops_server_owned_metadata(cluster: Cluster, ns: str) -> None:
    """A manifest taken from `kubectl get -o yaml` can be created again (the server would reject its resourceVersion)."""
    snapshot = cluster.get(*VA, "seed-va", ns)
    snapshot["metadata"]["name"] = "copied"
    copied = cluster.create(snapshot)
    assert copied["metadata"]["uid"] != snapshot["metadata"]["uid"]
    assert copied["metadata"]["resourceVersion"] != snapshot["metadata"]["resourceVersion"]


# ---------------------------------------------------------------------------- watch


def test_watch_sends_the_current_objects_then_each_change_until_its_timeout(
    backend: Backend, cluster: Cluster, ns: str
) -> None:
    """A bounded watch (the watch-models flow's): every object now as ADDED, then a spec change (new
    generation) as MODIFIED, a delete as DELETED, a create as ADDED; the stream ends by itself."""
    import time

    started = time.monotonic()
    stream = cluster.watch(*VA, namespace=ns, timeout_s=3)
    seen: list[tuple[str, str, int | None]] = []
    for event in stream:
        meta = event.object["metadata"]
        assert (event.object["apiVersion"], event.object["kind"]) == VA and meta["namespace"] == ns
        seen.append((event.type, meta["name"], meta.get("generation")))
        if seen[-1] == ("ADDED", "seed-va", 1):  # the initial state: change it while the watch is open
            cluster.patch_spec(va_ref(ns), {"spec": {"acceleratorCount": 2}})
        elif seen[-1] == ("MODIFIED", "seed-va", 2):
            cluster.delete(va_ref(ns))
        elif seen[-1][0] == "DELETED":
            cluster.create(va_manifest("later-va", ns))
    elapsed = time.monotonic() - started
    assert seen == [
        ("ADDED", "seed-va", 1),
        ("MODIFIED", "seed-va", 2),
        ("DELETED", "seed-va", 2),
        ("ADDED", "later-va", 1),
    ]
    assert 2.5 <= elapsed < 15, f"the watch ends after its timeout, not before or long after ({elapsed:.1f}s)"


def test_watch_all_namespaces_and_core_kinds(backend: Backend, cluster: Cluster, ns: str) -> None:
    names = {(e.object["metadata"]["namespace"], e.type) for e in cluster.watch(*VA, timeout_s=1)}
    assert {(ns, "ADDED"), (backend.other_namespace, "ADDED")} <= names
    configs = [e for e in cluster.watch("v1", "ConfigMap", namespace=ns, timeout_s=1)]
    assert [(e.type, e.object["kind"], e.object["metadata"]["name"]) for e in configs] == [
        ("ADDED", "ConfigMap", "seed-config")
    ]
