"""engine.aim.service_plan, template_plan and discovery_plan: one pure decision per object, everything
the flows write for it (caches to request, rendered children and their patches, retired objects, status)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine.aim.discovery import METADATA_ANNOTATION, DiscoveryRecord, parse_image_labels
from engine.aim.discovery_plan import DiscoveryWorld, images_to_read, plan_model, previous_record
from engine.aim.service_plan import ServiceWorld, plan_service
from engine.aim.template_plan import TemplateWorld, plan_model_readiness, plan_template
from engine.api.identity import TOTAL_ANNOTATION_SIZE, annotations_size
from engine.api.views import HTTPRoute, InferenceService
from tests.aim.test_resolution import DEPLOYMENTS, NOW, model, node, typed

SOURCE = "hf://meta-llama/Llama-3.1-8B-Instruct"
GATEWAY = {"name": "gw", "namespace": "gw-ns"}


def service(**spec: object) -> dict[str, Any]:
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMService",
        "metadata": {"name": "chat", "namespace": "ns", "uid": "s-1"},
        "spec": {"model": "meta/llama:1", "templateRef": "t", **spec},
    }


def template(status: str = "Available", **spec: object) -> dict[str, Any]:
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMServiceTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"model": "meta/llama:1", "gpuModel": "MI300X", "gpusPerReplica": 1, "metric": "latency", **spec},
        "status": {"status": status, "modelSources": [SOURCE]},
    }


def config(**spec: object) -> dict[str, Any]:
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMNamespaceConfig",
        "metadata": {"name": "default", "namespace": "ns"},
        "spec": {"routing": {"gateway": GATEWAY}, **spec},
    }


def cache(status: str, name: str = "c1") -> dict[str, Any]:
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"sourceUri": SOURCE},
        "status": {"status": status, "persistentVolumeClaim": f"{name}-pvc"},
    }


def world(
    caches: list[dict[str, Any]], isvcs: list[dict[str, Any]] | None = None, routes: list[dict[str, Any]] | None = None
) -> ServiceWorld:
    return ServiceWorld.of(
        models=[typed(model())],
        templates=[typed(template())],
        configs=[typed(config())],
        caches=[typed(c) for c in caches],
        nodes=[node("a", **{"amd.com/gpu.device-id": "74a1"})],
        isvcs=[InferenceService.read(i) for i in isvcs or []],
        routes=[HTTPRoute.read(r) for r in routes or []],
    )


def owner_ref(name: str = "chat", uid: str = "s-1", kind: str = "AIMService") -> dict[str, Any]:
    """The controller reference Modelplane writes on an AIMService's children (:func:`engine.aim.names.owner_reference`)."""
    return {"apiVersion": "aim.silogen.ai/v1alpha1", "kind": kind, "name": name, "uid": uid, "controller": True}


def child(kind: str, name: str, namespace: str, ref: dict[str, Any]) -> dict[str, Any]:
    """An InferenceService or HTTPRoute controlled by ``ref``."""
    api = "serving.kserve.io/v1beta1" if kind == "InferenceService" else "gateway.networking.k8s.io/v1"
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [ref]},
    }


def test_a_service_without_its_cache_requests_it_and_waits() -> None:
    svc = service()
    plan = plan_service(typed(svc), world([]))
    assert [r.source for r in plan.cache_requests] == [SOURCE]
    assert plan.cache_requests[0].requested_by == "AIMService/ns/chat"
    assert (plan.outcome.status, plan.reason, plan.isvc, plan.action) == (
        "Starting",
        "WaitingForCache",
        None,
        "unchanged",
    )
    # cacheModel: false downloads at runtime instead: nothing requested, the workload is rendered at once.
    svc = service(cacheModel=False)
    plan = plan_service(typed(svc), world([]))
    assert plan.cache_requests == () and plan.isvc is not None and plan.action == "created"


def test_a_ready_service_renders_its_children_mounts_its_cache_and_retires_old_names() -> None:
    svc = service(replicas=2)
    old = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "chat-old", "namespace": "ns", "ownerReferences": [owner_ref()]},
    }
    plan = plan_service(typed(svc), world([cache("Available")], [old]))
    assert plan.isvc is not None and plan.route is not None and plan.cache_requests == ()
    predictor = plan.isvc.desired["spec"]["predictor"]
    assert predictor["minReplicas"] == 2
    assert [v["persistentVolumeClaim"]["claimName"] for v in predictor["volumes"][1:]] == ["c1-pvc"]
    assert [c.metadata.name for c in plan.mounted] == ["c1"] and [r.object for r in plan.retire] == [old]
    assert (plan.outcome.status, plan.reason, plan.action) == ("Starting", "CreatingRuntime", "created")
    assert plan.route.desired["spec"]["parentRefs"] == [GATEWAY]
    # Written as rendered, the next plan changes nothing.
    again = world([cache("Available")], [{**plan.isvc.desired, "status": {}}])
    replan = plan_service(typed(svc), again)
    assert replan.isvc is not None and replan.isvc.patch is None and replan.mounted == ()


def test_a_failed_cache_fails_the_service_and_another_controller_blocks_it() -> None:
    svc = service()
    plan = plan_service(typed(svc), world([cache("Failed")]))
    assert (plan.outcome.status, plan.reason, plan.isvc) == ("Failed", "CacheFailed", None)
    name = plan_service(typed(svc), world([cache("Available")])).workload
    foreign = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"controller": True, "uid": "other"}]},
    }
    blocked = plan_service(typed(svc), world([cache("Available")], [foreign]))
    assert blocked.blocked and (blocked.outcome.status, blocked.reason, blocked.action) == (
        "Failed",
        "ValidationFailed",
        "none",
    )
    assert blocked.workload == "" and blocked.isvc is None


def test_a_warm_template_requests_caches_in_its_default_configs_storage_class() -> None:
    cfg = config(cacheStorageClassName="fast")
    tworld = TemplateWorld.of(
        models=[typed(model())],
        configs=[typed(cfg)],
        caches=[],
        nodes=[node("a", **{"amd.com/gpu.device-id": "74a1"})],
    )
    tmpl = template(status="Pending", warmCache=True)
    plan = plan_template(typed(tmpl), tworld)
    assert [(r.source, r.storage_class) for r in plan.cache_requests] == [(SOURCE, "fast")]
    assert plan.status_fields == {"status": "Progressing", "modelSources": [SOURCE]}
    cold = template(status="Pending")
    assert plan_template(typed(cold), tworld).outcome.status == "Available"


def test_model_readiness_follows_its_auto_templates() -> None:
    mdl = typed(model())
    auto = {
        **template(),
        "metadata": {
            "name": "t",
            "namespace": "ns",
            "labels": {"aim.silogen.ai/model": "llama", "aim.silogen.ai/origin": "auto-generated"},
        },
    }
    tworld = TemplateWorld.of(models=[mdl], configs=[], caches=[], nodes=[])
    [(obj, ready)] = plan_model_readiness([mdl], [typed(auto)], {("ns", "t"): "Available"}, tworld.catalog)
    assert obj is mdl and ready.status == "True"
    [(_, waiting)] = plan_model_readiness([mdl], [typed(auto)], {("ns", "t"): "Progressing"}, tworld.catalog)
    assert waiting.status == "False"


def test_discovery_creates_the_missing_templates_and_leaves_a_persons_alone() -> None:
    mdl = model()
    llama = typed(mdl)
    plan = plan_model(llama, None, False, DiscoveryWorld.of([], ["ns"]))
    assert (plan.result, plan.create, plan.persist) == ("not read", (), None)  # never read: nothing to create
    found = previous_record(llama)
    assert found is not None
    plan = plan_model(llama, found, True, DiscoveryWorld.of([], ["ns"]))
    assert plan.result == "ok" and plan.persist is found and len(plan.create) == plan.templates == 3
    persons = {**plan.create[0], "metadata": {**plan.create[0]["metadata"], "labels": {}}}
    again = plan_model(llama, found, False, DiscoveryWorld.of([typed(persons)], ["ns"]))
    assert len(again.create) == 2 and len(again.skipped) == 1 and "not created by discovery" in again.skipped[0]
    # An image read a moment ago is not read again; a changed spec.image is.
    assert images_to_read([llama], NOW + timedelta(minutes=1), timedelta(days=1)) == {}
    moved = {**mdl, "spec": {**mdl["spec"], "image": "r.io/llama:2"}}
    assert list(images_to_read([typed(moved)], NOW, timedelta(days=1))) == ["r.io/llama:2"]


def _labelled(**texts: str) -> DiscoveryRecord:
    """A read of an image whose AIM labels (``com.amd.aim.<suffix>``) and OCI labels are ``texts`` (``_`` for ``.``),
    next to its recommended deployments."""
    labels = {"com.amd.aim.model.recommendedDeployments": DEPLOYMENTS}
    for key, text in texts.items():
        suffix = key.replace("_", ".")
        labels[suffix if suffix.startswith("org.") else f"com.amd.aim.{suffix}"] = text
    return DiscoveryRecord(image="r.io/llama:1", read_at=NOW, digest="sha256:2", metadata=parse_image_labels(labels))


def test_labels_too_large_for_the_models_annotations_are_its_failure_never_written() -> None:
    """Each AIM label may hold 64 KiB (the OCI labels any size), all of them together more than the 256 KiB of
    annotations the API server lets an object have: discovery would have written a record it refuses (422)."""
    big = "x" * 65_536  # each at the bound a label may hold
    record = _labelled(title=big, description_full=big, release_notes=big, org_opencontainers_image_description=big)
    assert record.ok and len(record.to_json()) > TOTAL_ANNOTATION_SIZE
    plan = plan_model(typed(model()), record, True, DiscoveryWorld.of([], ["ns"]))
    persisted = plan.persist
    assert persisted is not None and not persisted.ok and persisted.reason == "MetadataExtractionFailed"
    assert len(persisted.to_json()) < 1000  # what is written instead fits, whatever the labels held
    assert plan.create == () and plan.result == "MetadataExtractionFailed"
    extracted, ready = plan.conditions
    assert (extracted.status, extracted.reason) == ("False", "MetadataExtractionFailed")
    assert (ready.status, ready.reason) == ("False", "MetadataExtractionFailed")  # terminal: read at the resync
    message = extracted.message
    assert f"too large to keep in the {METADATA_ANNOTATION} annotation" in message
    assert f"above the {TOTAL_ANNOTATION_SIZE} (256 KiB) Kubernetes allows an object" in message
    largest = "description.full (65538 bytes), org.opencontainers.image.description (65538 bytes), release.notes"
    assert f"the largest labels: {largest}" in message  # by name, as the label-size check names its label


def test_the_models_other_annotations_count_and_a_record_that_fits_is_kept() -> None:
    record = _labelled(description_full="x" * 60_000)
    llama = model()
    plan = plan_model(typed(llama), record, True, DiscoveryWorld.of([], ["ns"]))
    assert plan.persist is record and plan.result == "ok" and len(plan.create) == 3
    # The same read on a model whose own annotations (kubectl's last-applied copy, say) already hold 202 kB.
    annotations = {**llama["metadata"]["annotations"], "example.com/notes": "y" * 202_000}
    crowded = {**llama, "metadata": {**llama["metadata"], "annotations": annotations}}
    plan = plan_model(typed(crowded), record, True, DiscoveryWorld.of([], ["ns"]))
    assert plan.persist is not None and plan.persist.reason == "MetadataExtractionFailed" and plan.create == ()
    after = {**annotations, METADATA_ANNOTATION: record.to_json()}
    assert f"would hold {annotations_size(after)} bytes" in plan.conditions[0].message
    assert "description.full (60002 bytes)" in plan.conditions[0].message


def _created(plan_create: tuple[dict[str, Any], ...], status: str) -> list[Any]:
    """The templates a plan creates, as the next run reads them back with ``status``."""
    return [typed({**t, "status": {"status": status}}) for t in plan_create]


def test_repeated_recommended_deployments_make_one_template_counted_once() -> None:
    """A label repeating one deployment (5x the same, 20,000x ``{}``) wants one template per namespace: before, each
    repeat was created again ("created concurrently", once per repeat and namespace), counted in ``templates``, and
    padded ``Ready`` with Pending templates that never come, so discover-models and resolve-templates flipped it."""
    one = "{'gpuModel': 'MI300X', 'gpuCount': 1, 'metric': 'latency', 'precision': 'fp8'}"
    for label, repeats in ((", ".join([one] * 5), 4), ("[" + ",".join(["{}"] * 20_000) + "]", 19_999)):
        metadata = parse_image_labels({"com.amd.aim.model.recommendedDeployments": label})
        record = DiscoveryRecord(image="r.io/llama:1", read_at=NOW, digest="sha256:3", metadata=metadata)
        llama = typed(model())
        plan = plan_model(llama, record, True, DiscoveryWorld.of([], ["a", "b"]))
        assert [(t["metadata"]["namespace"]) for t in plan.create] == ["a", "b"]
        assert len({t["metadata"]["name"] for t in plan.create}) == 1
        assert (plan.templates, plan.deployments) == (2, len(metadata.recommended_deployments))
        [duplicates] = plan.skipped  # the repeats are named once, not once per repeat and namespace
        assert duplicates.startswith(f"llama: {repeats} recommendedDeployments entries repeat an earlier one")
        assert len(duplicates) < 300
        ready = plan.conditions[1]
        assert (ready.reason, ready.message) == ("TemplatesProgressing", "2 templates pending or progressing")
        # Once both exist and are Available, discovery and resolve-templates agree: no status flips between them.
        available = _created(plan.create, "Available")
        again = plan_model(llama, record, False, DiscoveryWorld.of(available, ["a", "b"]))
        assert again.create == () and again.templates == 2
        ready = again.conditions[1]
        assert (ready.status, ready.reason, ready.message) == ("True", "AllTemplatesReady", "2 templates available")
        catalog = TemplateWorld.of(models=[llama], configs=[], caches=[], nodes=[]).catalog
        [(_, resolved)] = plan_model_readiness([llama], available, {}, catalog)
        assert (resolved.reason, resolved.message) == (ready.reason, ready.message)
        # A run for namespace c only counts the template it creates there next to a's and b's, as resolve-templates will.
        elsewhere = plan_model(llama, record, False, DiscoveryWorld.of(available, ["c"]))
        assert [t["metadata"]["namespace"] for t in elsewhere.create] == ["c"]
        assert elsewhere.conditions[1].message == "2 of 3 templates available"


def test_only_the_services_own_children_are_retired_and_a_shared_uid_deletes_nothing() -> None:
    """Children are retired by their whole controller reference (uid, kind, group, name) and their namespace, owner
    references being namespace-local. Before, the uid alone decided, across namespaces: a copied AIMService with
    another's uid (a snapshot) deleted that service's InferenceService and HTTPRoute on every run, and back."""
    svc = service(cacheModel=False)
    own_old = child("InferenceService", "chat-old", "ns", owner_ref())
    own_old_route = child("HTTPRoute", "chat-old", "ns", owner_ref())
    plan = plan_service(typed(svc), world([], [own_old], [own_old_route]))
    assert not plan.blocked and [r.object for r in plan.retire] == [own_old, own_old_route]
    # The children of another service with this uid: in this namespace (another name), in another namespace (even
    # under this name, which there is another object), or naming another kind as their controller.
    for foreign in (
        child("InferenceService", "copy-1234", "ns", owner_ref(name="copy")),
        child("HTTPRoute", "copy-1234", "ns", owner_ref(name="copy")),
        child("InferenceService", "chat-5678", "other-ns", owner_ref()),
        child("HTTPRoute", "chat-5678", "other-ns", owner_ref()),
        child("InferenceService", "x", "ns", owner_ref(kind="AIMServiceTemplate")),
    ):
        isvcs, routes = ([foreign], []) if foreign["kind"] == "InferenceService" else ([], [foreign])
        plan = plan_service(typed(svc), world([], [own_old, *isvcs], [own_old_route, *routes]))
        assert plan.retire == () and plan.isvc is None and plan.route is None  # nothing deleted, nothing written
        assert plan.blocked and (plan.outcome.status, plan.reason) == ("Failed", "ValidationFailed")
        ready = next(c for c in plan.outcome.conditions if c.type == "Ready")
        meta = foreign["metadata"]
        assert f"{foreign['kind']} {meta['namespace']}/{meta['name']}" in ready.message
        assert "uid s-1" in ready.message


def test_a_route_of_the_wanted_name_another_object_controls_is_left_alone() -> None:
    """The InferenceService of the wanted name was checked for another controller; the HTTPRoute was patched
    whoever controlled it. Now it is left alone and the service says why (RoutingReady False, RouteFailed)."""
    svc = service(cacheModel=False)
    name = plan_service(typed(svc), world([])).route.desired["metadata"]["name"]  # type: ignore[union-attr]
    foreign = child("HTTPRoute", name, "ns", owner_ref(name="someone-else", uid="u-9", kind="Gateway"))
    plan = plan_service(typed(svc), world([], [], [foreign]))
    assert plan.route is None and plan.isvc is not None and plan.retire == ()
    routing = next(c for c in plan.outcome.conditions if c.type == "RoutingReady")
    assert (routing.status, routing.reason) == ("False", "RouteFailed")
    assert f"HTTPRoute {name!r} exists and is controlled by another object (uid u-9)" in routing.message
    own = child("HTTPRoute", name, "ns", owner_ref())
    assert plan_service(typed(svc), world([], [], [own])).route is not None  # its own route is still written
