"""Tests for the test Kubernetes API server (tests/servers/kubeserver), driven through the official client.

Every behaviour other tests rely on is pinned here: status codes, Status bodies, resourceVersion and
generation arithmetic, status isolation, selectors, patches, finalizers, scale, watch, CRD schema
handling and the ``/_test/`` controls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.servers.kubeserver.fixture import REPO, KubeServer

GROUP = "test.kubeserver.io"
VERSION = "v1alpha1"
PLURAL = "widgets"
CPLURAL = "gadgets"

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["modelID"],
            "properties": {
                "modelID": {"type": "string", "minLength": 1, "maxLength": 63},
                "replicas": {"type": "integer", "minimum": 0, "default": 1},
                "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                "accelerator": {"type": "string", "pattern": "^[A-Z][A-Za-z0-9]*$"},
                "ratio": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMaximum": True},
                "port": {"x-kubernetes-int-or-string": True},
                "startAfter": {"type": "string", "format": "date-time"},
                "note": {"type": "string", "nullable": True},
                "tags": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "string"}},
                "env": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 2},
                "variantProfile": {
                    "type": "object",
                    "properties": {
                        "maxBatchSize": {"type": "integer", "minimum": 1},
                        "slo": {
                            "type": "object",
                            "properties": {"ttftMs": {"type": "integer", "default": 500}},
                            "default": {},
                        },
                    },
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer", "minimum": 0},
                "selector": {"type": "string"},
                "phase": {"type": "string"},
                "conditions": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                    "items": {
                        "type": "object",
                        "required": ["type", "status"],
                        "properties": {
                            "type": {"type": "string"},
                            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                            "lastTransitionTime": {"type": "string", "format": "date-time"},
                        },
                    },
                },
            },
        },
    },
}


def _crd(plural: str, kind: str, scope: str, schema: dict[str, Any], scale: bool) -> dict[str, Any]:
    sub: dict[str, Any] = {"status": {}}
    if scale:
        sub["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
                "shortNames": [kind.lower()[:3]],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": sub,
                }
            ],
        },
    }


WIDGET_CRD = _crd(PLURAL, "Widget", "Namespaced", WIDGET_SCHEMA, scale=True)
GADGET_CRD = _crd(
    CPLURAL, "Gadget", "Cluster", {"type": "object", "x-kubernetes-preserve-unknown-fields": True}, scale=False
)


# ------------------------------------------------------------------------------------------ helpers


@pytest.fixture(scope="module")
def server(kube_server: KubeServer) -> KubeServer:
    kube_server.install_crds([WIDGET_CRD, GADGET_CRD])
    return kube_server


@pytest.fixture(scope="module")
def api(server: KubeServer) -> client.ApiClient:
    return server.api_client()


@pytest.fixture
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture
def apps(api):
    return client.AppsV1Api(api)


@pytest.fixture
def co(api):
    return client.CustomObjectsApi(api)


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"modelID": "m", **spec},
    }


def deployment(name: str, replicas: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    sel = {"app": name}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": sel},
            "template": {
                "metadata": {"labels": sel},
                "spec": {"containers": [{"name": "main", "image": "vllm:1"}, {"name": "side", "image": "s:1"}]},
            },
        },
    }


def raw(
    api: client.ApiClient, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> tuple[int, Any, dict[str, str]]:
    """An arbitrary request through ApiClient.call_api; returns (status, decoded body, headers)."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    resp = api.call_api(method, api.configuration.host + path, header_params=headers, body=body)
    resp.read()
    data = resp.data
    return resp.status, (json.loads(data) if data else None), dict(resp.getheaders())


def expect_error(code: int, fn, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call ``fn`` expecting an ApiException with ``code``; return the decoded Status body."""
    with pytest.raises(ApiException) as info:
        fn(*args, **kwargs)
    assert info.value.status == code, info.value.body
    body = json.loads(info.value.body)
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == code
    return body


# --------------------------------------------------------------------------------------- discovery


def test_discovery_endpoints(server, api):
    assert client.VersionApi(api).get_code().major == "1"
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    core_names = {r.name for r in client.CoreV1Api(api).get_api_resources().resources}
    assert {
        "namespaces",
        "configmaps",
        "secrets",
        "persistentvolumeclaims",
        "services",
        "events",
        "pods",
        "pods/status",
    } <= core_names
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert {"apps", "batch", "apiextensions.k8s.io", "events.k8s.io", GROUP} <= set(groups)
    assert groups[GROUP].preferred_version.group_version == f"{GROUP}/{VERSION}"
    apps_res = {r.name: r for r in client.AppsV1Api(api).get_api_resources().resources}
    assert {"deployments", "deployments/scale", "deployments/status"} <= set(apps_res)
    assert apps_res["deployments/scale"].kind == "Scale"
    assert {r.name for r in client.BatchV1Api(api).get_api_resources().resources} >= {"jobs", "jobs/status"}
    custom = client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION).resources
    by_name = {r.name: r for r in custom}
    assert {PLURAL, f"{PLURAL}/status", f"{PLURAL}/scale", CPLURAL, f"{CPLURAL}/status"} == set(by_name)
    assert by_name[PLURAL].namespaced is True and by_name[CPLURAL].namespaced is False
    assert by_name[PLURAL].short_names == ["wid"]
    status, _, _ = raw(api, "GET", "/apis/nonexistent.io/v1")
    assert status == 404


# ------------------------------------------------------------------------------------------- CRDs


def test_crd_lifecycle_serves_and_stops_serving(server, api):
    ext = client.ApiextensionsV1Api(api)
    crd = _crd(
        "sprockets",
        "Sprocket",
        "Namespaced",
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        scale=False,
    )
    created, code, _ = ext.create_custom_resource_definition_with_http_info(crd)
    assert code == 201
    conds = {c.type: c.status for c in created.status.conditions}
    assert conds["Established"] == "True" and conds["NamesAccepted"] == "True"
    assert created.status.accepted_names.kind == "Sprocket" and created.metadata.generation == 1
    names = [c.metadata.name for c in ext.list_custom_resource_definition().items]
    assert f"sprockets.{GROUP}" in names and f"{PLURAL}.{GROUP}" in names
    expect_error(409, ext.create_custom_resource_definition, crd)

    co = client.CustomObjectsApi(api)
    server.create_namespace("ns1")
    obj = co.create_namespaced_custom_object(
        GROUP,
        VERSION,
        "ns1",
        "sprockets",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Sprocket",
            "metadata": {"name": "s1"},
            "spec": {"anything": {"goes": 1}},
        },
    )
    assert obj["spec"] == {"anything": {"goes": 1}}  # preserve-unknown-fields keeps everything
    ext.delete_custom_resource_definition(f"sprockets.{GROUP}")
    expect_error(404, ext.read_custom_resource_definition, f"sprockets.{GROUP}")
    expect_error(404, co.list_namespaced_custom_object, GROUP, VERSION, "ns1", "sprockets")


def test_crd_name_must_match_plural_and_group(server, api):
    crd = _crd("doohickeys", "Doohickey", "Namespaced", {"type": "object"}, scale=False)
    crd["metadata"]["name"] = "wrong.example.com"
    body = expect_error(422, client.ApiextensionsV1Api(api).create_custom_resource_definition, crd)
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"


def test_install_crds_is_idempotent(server, api):
    before = client.ApiextensionsV1Api(api).read_custom_resource_definition(f"{PLURAL}.{GROUP}")
    server.install_crds([WIDGET_CRD, GADGET_CRD])
    after = client.ApiextensionsV1Api(api).read_custom_resource_definition(f"{PLURAL}.{GROUP}")
    assert after.metadata.uid == before.metadata.uid


# --------------------------------------------------------------------------------- create/get/list


def test_create_is_201_with_server_metadata(server, api, core, co, kube_namespace):
    cm, code, _ = core.create_namespaced_config_map_with_http_info(
        kube_namespace, {"metadata": {"name": "cfg", "labels": {"a": "1"}}, "data": {"k": "v"}}
    )
    assert code == 201
    assert cm.metadata.uid and cm.metadata.creation_timestamp and cm.metadata.namespace == kube_namespace
    assert int(cm.metadata.resource_version) > 0
    got = core.read_namespaced_config_map("cfg", kube_namespace)
    assert got.data == {"k": "v"} and got.metadata.resource_version == cm.metadata.resource_version

    w = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("w1"))
    assert w["metadata"]["generation"] == 1 and w["kind"] == "Widget"
    assert int(w["metadata"]["resourceVersion"]) > int(cm.metadata.resource_version)  # one global counter

    gen = core.create_namespaced_config_map(kube_namespace, {"metadata": {"generateName": "gen-"}})
    assert gen.metadata.name.startswith("gen-") and len(gen.metadata.name) == 9


def test_create_existing_is_409_already_exists(server, core, kube_namespace):
    core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "s"}, "stringData": {"a": "b"}})
    body = expect_error(409, core.create_namespaced_secret, kube_namespace, {"metadata": {"name": "s"}})
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'secrets "s" already exists'
    assert body["details"] == {"name": "s", "group": "", "kind": "secrets"}


def test_get_missing_is_404_not_found(server, apps, co, kube_namespace):
    body = expect_error(404, apps.read_namespaced_deployment, "nope", kube_namespace)
    assert body["reason"] == "NotFound" and body["message"] == 'deployments.apps "nope" not found'
    body = expect_error(404, co.get_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "nope")
    assert body["message"] == f'{PLURAL}.{GROUP} "nope" not found'


def test_invalid_names_and_bad_requests(server, api, core, kube_namespace):
    body = expect_error(422, core.create_namespaced_config_map, kube_namespace, {"metadata": {"name": "Bad_Name"}})
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    status, body, _ = raw(api, "POST", f"/api/v1/namespaces/{kube_namespace}/configmaps", body="{not json")
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = raw(
        api,
        "POST",
        f"/api/v1/namespaces/{kube_namespace}/configmaps",
        body={"metadata": {"name": "x", "namespace": "other"}},
    )
    assert status == 400
    status, body, _ = raw(api, "GET", f"/api/v1/namespaces/{kube_namespace}/nothings")
    assert status == 404 and body["kind"] == "Status"


def test_list_namespaced_and_all_namespaces(server, co, kube_namespace):
    other = kube_namespace + "-b"
    server.create_namespace(other)
    for ns in (kube_namespace, other):
        for i in range(3):
            co.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, widget(f"w{i}"))
    listing = co.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL)
    assert listing["kind"] == "WidgetList" and [i["metadata"]["name"] for i in listing["items"]] == ["w0", "w1", "w2"]
    assert int(listing["metadata"]["resourceVersion"]) >= max(
        int(i["metadata"]["resourceVersion"]) for i in listing["items"]
    )
    everywhere = co.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    mine = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]}
    assert {(kube_namespace, "w0"), (other, "w2")} <= mine
    page = co.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, limit=2)
    assert len(page["items"]) == 2 and page["metadata"]["continue"]
    rest = co.list_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, limit=2, _continue=page["metadata"]["continue"]
    )
    assert [i["metadata"]["name"] for i in rest["items"]] == ["w2"] and not rest["metadata"].get("continue")


def test_label_selectors(server, core, kube_namespace):
    specs = {"a": {"app": "x", "tier": "web"}, "b": {"app": "x", "tier": "db"}, "c": {"app": "y"}, "d": {}}
    for name, labels in specs.items():
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": name, "labels": labels}})

    def names(sel: str) -> list[str]:
        return sorted(
            i.metadata.name for i in core.list_namespaced_config_map(kube_namespace, label_selector=sel).items
        )

    assert names("app=x") == ["a", "b"]
    assert names("app==x") == ["a", "b"]
    assert names("app!=x") == ["c", "d"]
    assert names("tier in (web,db)") == ["a", "b"]
    assert names("tier notin (web)") == ["b", "c", "d"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c", "d"]
    assert names("app=x,tier!=web") == ["b"]
    assert names("app in (x, y),!tier") == ["c"]
    body = expect_error(400, core.list_namespaced_config_map, kube_namespace, label_selector="app in x")
    assert body["reason"] == "BadRequest"


def test_field_selectors(server, core, kube_namespace):
    for name in ("one", "two"):
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": name}})
    server.create_namespace(kube_namespace + "-z")
    core.create_namespaced_config_map(kube_namespace + "-z", {"metadata": {"name": "one"}})
    items = core.list_namespaced_config_map(kube_namespace, field_selector="metadata.name=one").items
    assert [i.metadata.name for i in items] == ["one"]
    items = core.list_namespaced_config_map(kube_namespace, field_selector="metadata.name!=one").items
    assert [i.metadata.name for i in items] == ["two"]
    items = core.list_config_map_for_all_namespaces(
        field_selector=f"metadata.namespace={kube_namespace}-z,metadata.name==one"
    ).items
    assert [(i.metadata.namespace, i.metadata.name) for i in items] == [(kube_namespace + "-z", "one")]
    body = expect_error(400, core.list_namespaced_config_map, kube_namespace, field_selector="spec.foo=bar")
    assert "field label not supported" in body["message"]


# ------------------------------------------------------------------------------------ update/patch


def test_put_conflict_on_stale_resource_version_and_unconditional_put(server, core, kube_namespace):
    cm = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "c"}, "data": {"v": "1"}})
    rv1 = cm.metadata.resource_version
    cm.data = {"v": "2"}
    updated = core.replace_namespaced_config_map("c", kube_namespace, cm)
    assert updated.data == {"v": "2"} and int(updated.metadata.resource_version) > int(rv1)
    cm.data = {"v": "stale"}  # still carries rv1
    body = expect_error(409, core.replace_namespaced_config_map, "c", kube_namespace, cm)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    unconditional = core.replace_namespaced_config_map(
        "c", kube_namespace, {"metadata": {"name": "c"}, "data": {"v": "3"}}
    )
    assert unconditional.data == {"v": "3"} and unconditional.metadata.uid == cm.metadata.uid
    expect_error(404, core.replace_namespaced_config_map, "missing", kube_namespace, {"metadata": {"name": "missing"}})
    status, _, _ = raw(
        core.api_client,
        "PUT",
        f"/api/v1/namespaces/{kube_namespace}/configmaps/c",
        body={"metadata": {"name": "other"}},
    )
    assert status == 400


def test_noop_update_keeps_resource_version(server, core, kube_namespace):
    cm = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "n"}, "data": {"v": "1"}})
    again = core.patch_namespaced_config_map("n", kube_namespace, {"data": {"v": "1"}})
    assert again.metadata.resource_version == cm.metadata.resource_version


def test_generation_tracks_spec_changes_only(server, co, kube_namespace):
    args = (GROUP, VERSION, kube_namespace, PLURAL, "g")
    w = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("g"))
    assert w["metadata"]["generation"] == 1
    w = co.patch_namespaced_custom_object(*args, {"metadata": {"labels": {"x": "y"}, "annotations": {"a": "b"}}})
    assert w["metadata"]["generation"] == 1 and w["metadata"]["labels"] == {"x": "y"}
    w = co.patch_namespaced_custom_object(*args, {"spec": {"replicas": 4}})
    assert w["metadata"]["generation"] == 2
    w = co.patch_namespaced_custom_object_status(*args, {"status": {"replicas": 4, "phase": "Ready"}})
    assert w["metadata"]["generation"] == 2 and w["status"]["phase"] == "Ready"
    w["spec"]["modelID"] = "other"
    w = co.replace_namespaced_custom_object(*args, w)
    assert w["metadata"]["generation"] == 3


def test_status_isolation_for_custom_resources(server, co, kube_namespace):
    args = (GROUP, VERSION, kube_namespace, PLURAL, "iso")
    body = widget("iso")
    body["status"] = {"phase": "Bogus"}
    created = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, body)
    assert "status" not in created  # status is dropped on create

    # a main-resource write ignores status
    w = co.patch_namespaced_custom_object(*args, {"spec": {"replicas": 2}, "status": {"phase": "Sneaky"}})
    assert w["spec"]["replicas"] == 2 and "status" not in w

    # a status write changes only status: spec, labels and generation stay
    w["spec"]["replicas"] = 9
    w["metadata"]["labels"] = {"from": "status"}
    w["status"] = {"phase": "Ready", "replicas": 2}
    s = co.replace_namespaced_custom_object_status(*args, w)
    assert s["status"] == {"phase": "Ready", "replicas": 2}
    assert s["spec"]["replicas"] == 2 and "labels" not in s["metadata"] and s["metadata"]["generation"] == 2

    # the status survives a full replace of the main resource that omits it
    s.pop("status")
    r = co.replace_namespaced_custom_object(*args, s)
    assert r["status"] == {"phase": "Ready", "replicas": 2}
    assert co.get_namespaced_custom_object_status(*args)["status"]["phase"] == "Ready"


def test_status_isolation_for_deployments(server, apps, kube_namespace):
    d = apps.create_namespaced_deployment(kube_namespace, deployment("web", replicas=2))
    assert d.metadata.generation == 1
    d = apps.patch_namespaced_deployment_status(
        "web",
        kube_namespace,
        {"spec": {"replicas": 7}, "status": {"replicas": 2, "readyReplicas": 1, "observedGeneration": 1}},
    )
    assert d.spec.replicas == 2 and d.status.ready_replicas == 1 and d.metadata.generation == 1
    d = apps.patch_namespaced_deployment(
        "web", kube_namespace, {"spec": {"replicas": 3}, "status": {"readyReplicas": 0}}
    )
    assert d.spec.replicas == 3 and d.status.ready_replicas == 1 and d.metadata.generation == 2


def test_merge_json_and_strategic_patches(server, apps, co, kube_namespace):
    apps.create_namespaced_deployment(kube_namespace, deployment("p"))
    # dict body from AppsV1Api is sent as a strategic merge patch: containers merge by name
    d = apps.patch_namespaced_deployment(
        "p", kube_namespace, {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "vllm:2"}]}}}}
    )
    assert [(c.name, c.image) for c in d.spec.template.spec.containers] == [("main", "vllm:2"), ("side", "s:1")]
    # merge patch replaces lists wholesale
    d = apps.patch_namespaced_deployment(
        "p",
        kube_namespace,
        {"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "o:1"}]}}}},
        _content_type="application/merge-patch+json",
    )
    assert [c.name for c in d.spec.template.spec.containers] == ["only"]
    # JSON patch
    d = apps.patch_namespaced_deployment(
        "p",
        kube_namespace,
        [
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "add", "path": "/metadata/labels", "value": {"patched": "yes"}},
        ],
    )
    assert d.spec.replicas == 5 and d.metadata.labels == {"patched": "yes"}
    expect_error(
        422,
        apps.patch_namespaced_deployment,
        "p",
        kube_namespace,
        [{"op": "test", "path": "/spec/replicas", "value": 1}],
    )

    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("cp", tags=["a"]))
    args = (GROUP, VERSION, kube_namespace, PLURAL, "cp")
    w = co.patch_namespaced_custom_object(*args, {"spec": {"accelerator": "H100", "tags": None}})
    assert w["spec"]["accelerator"] == "H100" and "tags" not in w["spec"]
    w = co.patch_namespaced_custom_object(
        *args, [{"op": "add", "path": "/spec/tags", "value": ["x", "y"]}], _content_type="application/json-patch+json"
    )
    assert w["spec"]["tags"] == ["x", "y"]
    body = expect_error(
        415,
        co.patch_namespaced_custom_object,
        *args,
        {"spec": {"replicas": 1}},
        _content_type="application/strategic-merge-patch+json",
    )
    assert body["reason"] == "UnsupportedMediaType"


def test_resource_version_in_patch_is_a_precondition(server, co, core, kube_namespace):
    w = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("pre"))
    rv = w["metadata"]["resourceVersion"]
    args = (GROUP, VERSION, kube_namespace, PLURAL, "pre")
    w2 = co.patch_namespaced_custom_object(*args, {"metadata": {"resourceVersion": rv}, "spec": {"replicas": 3}})
    assert w2["spec"]["replicas"] == 3
    body = expect_error(
        409,
        co.patch_namespaced_custom_object_status,
        *args,
        {"metadata": {"resourceVersion": rv}, "status": {"phase": "x"}},
    )
    assert body["reason"] == "Conflict"
    assert co.get_namespaced_custom_object(*args)["spec"]["replicas"] == 3


# ---------------------------------------------------------------------------------------- validation


def test_schema_validation_rejects_with_real_messages(server, co, kube_namespace):
    body = expect_error(
        422, co.create_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, widget("bad", modelID="")
    )
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        f'Widget.{GROUP} "bad" is invalid: spec.modelID: Invalid value: "": '
        "spec.modelID in body should be at least 1 chars long"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.modelID",
            "message": 'Invalid value: "": spec.modelID in body should be at least 1 chars long',
        }
    ]
    assert body["details"]["kind"] == "Widget" and body["details"]["group"] == GROUP

    cases = {
        "spec.variantProfile.maxBatchSize": {"variantProfile": {"maxBatchSize": 0}},
        "spec.replicas": {"replicas": "three"},
        "spec.mode": {"mode": "warp"},
        "spec.accelerator": {"accelerator": "h100"},
        "spec.ratio": {"ratio": 1},
        "spec.port": {"port": 1.5},
        "spec.startAfter": {"startAfter": "yesterday"},
        "spec.tags": {"tags": []},
        "spec.env": {"env": {"a": "1", "b": "2", "c": "3"}},
        "spec.env.a": {"env": {"a": 1}},
    }
    for field, spec in cases.items():
        body = expect_error(
            422, co.create_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, widget("bad", **spec)
        )
        assert [c["field"] for c in body["details"]["causes"]] == [field], (field, body)
    body = expect_error(
        422,
        co.create_namespaced_custom_object,
        GROUP,
        VERSION,
        kube_namespace,
        PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": "bad"}, "spec": {}},
    )
    assert body["details"]["causes"][0] == {
        "reason": "FieldValueRequired",
        "field": "spec.modelID",
        "message": "Required value",
    }
    assert (
        "spec.variantProfile.maxBatchSize: Invalid value: 0: spec.variantProfile.maxBatchSize in body should be "
        "greater than or equal to 1"
        in expect_error(
            422,
            co.create_namespaced_custom_object,
            GROUP,
            VERSION,
            kube_namespace,
            PLURAL,
            widget("bad", variantProfile={"maxBatchSize": 0}),
        )["message"]
    )
    # valid edge values pass
    ok = co.create_namespaced_custom_object(
        GROUP,
        VERSION,
        kube_namespace,
        PLURAL,
        widget("edge", port="http", note=None, startAfter="2026-01-02T03:04:05Z", ratio=0.5, tags=["a", "b", "c"]),
    )
    assert ok["spec"]["port"] == "http" and ok["spec"]["note"] is None


def test_schema_validation_on_update_patch_and_status(server, co, kube_namespace):
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("v"))
    args = (GROUP, VERSION, kube_namespace, PLURAL, "v")
    expect_error(422, co.patch_namespaced_custom_object, *args, {"spec": {"replicas": -1}})
    cur = co.get_namespaced_custom_object(*args)
    cur["spec"]["modelID"] = ""
    expect_error(422, co.replace_namespaced_custom_object, *args, cur)
    body = expect_error(
        422,
        co.patch_namespaced_custom_object_status,
        *args,
        {"status": {"conditions": [{"type": "Ready", "status": "Maybe"}]}},
    )
    assert body["details"]["causes"][0]["field"] == "status.conditions[0].status"
    body = expect_error(
        422,
        co.patch_namespaced_custom_object_status,
        *args,
        {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]}},
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueDuplicate",
            "field": "status.conditions[1]",
            "message": 'Duplicate value: map[string]interface {}{"type":"Ready"}',
        }
    ]
    assert co.get_namespaced_custom_object(*args)["spec"]["modelID"] == "m"


def test_schema_defaults_and_pruning(server, co, kube_namespace):
    w = widget("d", unknownField=1, variantProfile={"maxBatchSize": 4, "bogus": True}, extra={"free": {"form": 1}})
    w["topLevelJunk"] = "x"
    w["metadata"]["labels"] = {"keep": "me"}
    created = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, w)
    spec = created["spec"]
    assert spec["replicas"] == 1 and spec["mode"] == "fast"  # defaults
    assert spec["variantProfile"] == {"maxBatchSize": 4, "slo": {"ttftMs": 500}}  # nested default; bogus pruned
    assert "unknownField" not in spec and "topLevelJunk" not in created  # pruned
    assert spec["extra"] == {"free": {"form": 1}}  # x-kubernetes-preserve-unknown-fields
    assert created["metadata"]["labels"] == {"keep": "me"}
    s = co.patch_namespaced_custom_object_status(
        GROUP, VERSION, kube_namespace, PLURAL, "d", {"status": {"phase": "A", "junk": 1}}
    )
    assert s["status"] == {"phase": "A"}


# --------------------------------------------------------------------------------- delete/finalizers


def test_delete_returns_object_or_status(server, core, co, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "gone"}})
    status, body, _ = raw(core.api_client, "DELETE", f"/api/v1/namespaces/{kube_namespace}/configmaps/gone")
    assert status == 200 and body["kind"] == "Status" and body["details"]["kind"] == "configmaps"  # finalizeDelete
    core.create_namespaced_service_account(kube_namespace, {"metadata": {"name": "gone"}})
    status, body, _ = raw(core.api_client, "DELETE", f"/api/v1/namespaces/{kube_namespace}/serviceaccounts/gone")
    assert status == 200 and body["kind"] == "ServiceAccount"  # ReturnDeletedObject
    expect_error(404, core.read_namespaced_config_map, "gone", kube_namespace)
    expect_error(404, core.delete_namespaced_config_map, "gone", kube_namespace)

    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("x"))
    res = co.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "x")
    assert res["kind"] == "Status" and res["status"] == "Success" and res["details"]["name"] == "x"
    expect_error(404, co.get_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "x")


def test_delete_with_preconditions(server, core, kube_namespace):
    cm = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "pc"}})
    body = expect_error(
        409,
        core.delete_namespaced_config_map,
        "pc",
        kube_namespace,
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1")),
    )
    assert "Precondition failed" in body["message"]
    core.delete_namespaced_config_map(
        "pc", kube_namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=cm.metadata.uid))
    )


def test_finalizers_delay_deletion(server, co, kube_namespace):
    w = widget("fin")
    w["metadata"]["finalizers"] = ["test.kubeserver.io/cleanup"]
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, w)
    args = (GROUP, VERSION, kube_namespace, PLURAL, "fin")
    co.delete_namespaced_custom_object(*args)
    pending = co.get_namespaced_custom_object(*args)
    assert pending["metadata"]["deletionTimestamp"]
    assert pending["metadata"]["finalizers"] == ["test.kubeserver.io/cleanup"]
    again = co.delete_namespaced_custom_object(*args)  # deleting again is harmless
    assert again["metadata"]["deletionTimestamp"] == pending["metadata"]["deletionTimestamp"]
    co.patch_namespaced_custom_object(*args, {"metadata": {"finalizers": None}})
    expect_error(404, co.get_namespaced_custom_object, *args)


def test_delete_collection(server, core, kube_namespace):
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": name, "labels": {"app": app}}})
    core.delete_collection_namespaced_config_map(kube_namespace, label_selector="app=x")
    assert [i.metadata.name for i in core.list_namespaced_config_map(kube_namespace).items] == ["c"]


# --------------------------------------------------------------------------------------------- scale


def test_deployment_scale_subresource(server, apps, kube_namespace):
    apps.create_namespaced_deployment(kube_namespace, deployment("sc", replicas=2))
    scale = apps.read_namespaced_deployment_scale("sc", kube_namespace)
    assert scale.kind == "Scale" and scale.api_version == "autoscaling/v1"
    assert scale.spec.replicas == 2 and scale.status.replicas == 0 and scale.status.selector == "app=sc"
    apps.patch_namespaced_deployment_status("sc", kube_namespace, {"status": {"replicas": 2}})
    scale = apps.read_namespaced_deployment_scale("sc", kube_namespace)
    assert scale.status.replicas == 2
    scale.spec.replicas = 4
    new = apps.replace_namespaced_deployment_scale("sc", kube_namespace, scale)
    assert new.spec.replicas == 4
    d = apps.read_namespaced_deployment("sc", kube_namespace)
    assert d.spec.replicas == 4 and d.metadata.generation == 2
    body = expect_error(409, apps.replace_namespaced_deployment_scale, "sc", kube_namespace, scale)  # stale rv
    assert body["reason"] == "Conflict"
    patched = apps.patch_namespaced_deployment_scale("sc", kube_namespace, {"spec": {"replicas": 0}})
    assert patched.spec.replicas == 0
    assert apps.read_namespaced_deployment("sc", kube_namespace).metadata.generation == 3
    expect_error(422, apps.patch_namespaced_deployment_scale, "sc", kube_namespace, {"spec": {"replicas": -1}})


def test_custom_resource_scale_subresource(server, co, kube_namespace):
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("cs", replicas=1))
    args = (GROUP, VERSION, kube_namespace, PLURAL, "cs")
    co.patch_namespaced_custom_object_status(*args, {"status": {"replicas": 1, "selector": "app=cs"}})
    scale = co.get_namespaced_custom_object_scale(*args)
    assert scale["spec"] == {"replicas": 1} and scale["status"] == {"replicas": 1, "selector": "app=cs"}
    scaled = co.patch_namespaced_custom_object_scale(*args, {"spec": {"replicas": 3}})
    assert scaled["spec"]["replicas"] == 3
    obj = co.get_namespaced_custom_object(*args)
    assert obj["spec"]["replicas"] == 3 and obj["metadata"]["generation"] == 2
    scale = co.get_namespaced_custom_object_scale(*args)
    scale["spec"]["replicas"] = 5
    assert co.replace_namespaced_custom_object_scale(*args, scale)["spec"]["replicas"] == 5
    expect_error(409, co.replace_namespaced_custom_object_scale, *args, scale)


# ------------------------------------------------------------------------------------------- kinds


def test_builtin_kinds_crud(server, api, core, kube_namespace):
    ns_name = kube_namespace + "-obj"
    ns = core.create_namespace({"metadata": {"name": ns_name}})
    assert ns.status.phase == "Active"
    assert ns_name in [n.metadata.name for n in core.list_namespace().items]
    pvc = core.create_namespaced_persistent_volume_claim(
        kube_namespace,
        {
            "metadata": {"name": "cache"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    assert pvc.status.phase == "Pending"
    svc = core.create_namespaced_service(
        kube_namespace, {"metadata": {"name": "svc"}, "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}
    )
    assert svc.spec.ports[0].target_port == 80 and svc.spec.type == "ClusterIP"
    pod = core.create_namespaced_pod(
        kube_namespace, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    assert pod.status.phase == "Pending"
    pod = core.patch_namespaced_pod_status("p", kube_namespace, {"status": {"phase": "Running"}})
    assert pod.status.phase == "Running"
    assert [
        p.metadata.name for p in core.list_namespaced_pod(kube_namespace, field_selector="status.phase=Running").items
    ] == ["p"]
    ev = core.create_namespaced_event(
        kube_namespace,
        {"metadata": {"name": "e1"}, "reason": "Scaled", "involvedObject": {"kind": "Deployment", "name": "x"}},
    )
    assert ev.reason == "Scaled"
    assert len(core.list_namespaced_event(kube_namespace, field_selector="involvedObject.name=x").items) == 1
    ev2 = client.EventsV1Api(api).create_namespaced_event(
        kube_namespace,
        {
            "metadata": {"name": "e2"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reason": "R",
            "action": "A",
            "reportingController": "modelplane",
            "reportingInstance": "i",
        },
    )
    assert ev2.reason == "R"
    sec = core.create_namespaced_secret(
        kube_namespace, {"metadata": {"name": "tok"}, "stringData": {"token": "hf_x"}, "data": {"other": "YQ=="}}
    )
    assert sec.data == {"other": "YQ==", "token": "aGZfeA=="} and sec.string_data is None and sec.type == "Opaque"
    sa = core.create_namespaced_service_account(kube_namespace, {"metadata": {"name": "sa"}})
    assert sa.metadata.name == "sa"
    core.delete_namespace(ns_name)
    expect_error(404, core.read_namespace, ns_name)


def test_job_status_subresource(server, api, kube_namespace):
    batch = client.BatchV1Api(api)
    job = batch.create_namespaced_job(
        kube_namespace,
        {
            "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}},
        },
    )
    assert job.metadata.generation == 1 and job.spec.backoff_limit == 6
    job = batch.patch_namespaced_job_status(
        "j", kube_namespace, {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
    )
    assert job.status.succeeded == 1 and job.metadata.generation == 1
    job = batch.patch_namespaced_job("j", kube_namespace, {"status": {"succeeded": 0}, "spec": {"suspend": True}})
    assert job.status.succeeded == 1 and job.spec.suspend is True and job.metadata.generation == 2


def test_deployment_validation(server, apps, kube_namespace):
    bad = deployment("v")
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    body = expect_error(422, apps.create_namespaced_deployment, kube_namespace, bad)
    assert body["message"].startswith('Deployment.apps "v" is invalid: spec.template.metadata.labels')


def test_cluster_scoped_custom_resource(server, api, co):
    name = f"gadget-{os.getpid()}-{time.monotonic_ns() % 100000}"
    g = co.create_cluster_custom_object(
        GROUP,
        VERSION,
        CPLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Gadget", "metadata": {"name": name}, "spec": {"x": 1}},
    )
    assert "namespace" not in g["metadata"]
    g = co.patch_cluster_custom_object_status(GROUP, VERSION, CPLURAL, name, {"status": {"ok": True}, "spec": {"x": 2}})
    assert g["status"] == {"ok": True} and g["spec"] == {"x": 1}
    status, _, _ = raw(api, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/default/{CPLURAL}/{name}")
    assert status == 404
    co.delete_cluster_custom_object(GROUP, VERSION, CPLURAL, name)
    expect_error(404, co.get_cluster_custom_object, GROUP, VERSION, CPLURAL, name)


# --------------------------------------------------------------------------------------------- watch


def test_watch_streams_events_from_resource_version(server, api, co, kube_namespace):
    listing = co.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL)
    rv = listing["metadata"]["resourceVersion"]

    def writer() -> None:
        time.sleep(0.2)
        co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("wa"))
        co.patch_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "wa", {"spec": {"replicas": 2}})
        co.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "wa")
        server.create_namespace(kube_namespace + "-other")
        co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace + "-other", PLURAL, widget("elsewhere"))

    t = threading.Thread(target=writer)
    t.start()
    w = watch.Watch()
    seen = []
    for ev in w.stream(
        client.CustomObjectsApi(server.api_client()).list_namespaced_custom_object,
        GROUP,
        VERSION,
        kube_namespace,
        PLURAL,
        resource_version=rv,
        timeout_seconds=3,
    ):
        seen.append((ev["type"], ev["object"]["metadata"]["name"], ev["object"]["spec"]["replicas"]))
        if ev["type"] == "DELETED":
            w.stop()
    t.join()
    assert seen == [("ADDED", "wa", 1), ("MODIFIED", "wa", 2), ("DELETED", "wa", 2)]


def test_watch_typed_with_initial_state_and_label_selector(server, api, core, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "pre", "labels": {"w": "1"}}})
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "unlabelled"}})

    def writer() -> None:
        time.sleep(0.2)
        core.patch_namespaced_config_map("unlabelled", kube_namespace, {"metadata": {"labels": {"w": "1"}}})
        core.patch_namespaced_config_map("pre", kube_namespace, {"metadata": {"labels": {"w": "2"}}})

    t = threading.Thread(target=writer)
    t.start()
    events = []
    w = watch.Watch()
    for ev in w.stream(
        client.CoreV1Api(server.api_client()).list_namespaced_config_map,
        kube_namespace,
        label_selector="w=1",
        timeout_seconds=2,
    ):
        events.append((ev["type"], ev["object"].metadata.name))
        assert isinstance(ev["object"], client.V1ConfigMap)
        if len(events) == 3:
            w.stop()
    t.join()
    # no resourceVersion: the current state first; label changes turn into ADDED / DELETED for the selector
    assert events == [("ADDED", "pre"), ("ADDED", "unlabelled"), ("DELETED", "pre")]


def test_watch_times_out_and_too_old_is_410(server, api, co, kube_namespace):
    start = time.monotonic()
    events = list(
        watch.Watch().stream(
            co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            kube_namespace,
            PLURAL,
            resource_version="999999999",
            timeout_seconds=1,
        )
    )
    assert events == [] and 0.8 < time.monotonic() - start < 3
    server.reset()  # compacts history: older resourceVersions are gone
    with pytest.raises(ApiException) as info:
        list(
            watch.Watch().stream(
                co.list_namespaced_custom_object,
                GROUP,
                VERSION,
                kube_namespace,
                PLURAL,
                resource_version="1",
                timeout_seconds=1,
            )
        )
    assert info.value.status == 410
    status, body, _ = raw(
        api,
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{kube_namespace}/{PLURAL}?watch=true&resourceVersion=1&timeoutSeconds=1",
    )
    assert status == 200
    assert body["type"] == "ERROR" and body["object"]["code"] == 410 and body["object"]["reason"] == "Expired"


# -------------------------------------------------------------------------------------- test controls


def test_stats_count_requests_by_verb_and_resource(server, co, apps, kube_namespace):
    server.reset_stats()
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("st"))
    co.get_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "st")
    co.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL)
    co.patch_namespaced_custom_object_status(GROUP, VERSION, kube_namespace, PLURAL, "st", {"status": {"phase": "x"}})
    co.patch_namespaced_custom_object_status(GROUP, VERSION, kube_namespace, PLURAL, "st", {"status": {"phase": "y"}})
    co.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "st")
    expect_error(404, apps.read_namespaced_deployment_scale, "none", kube_namespace)
    stats = server.stats()
    assert stats["by_verb"] == {"create": 1, "get": 2, "list": 1, "patch": 2, "delete": 1}
    assert stats["total"] == 7
    assert stats["by_key"]["patch widgets/status"] == 2
    assert server.count("patch", PLURAL, "status") == 2 and server.count("get", "deployments", "scale") == 1
    assert server.count("patch", PLURAL, "") == 0
    log = server.requests()
    assert [(r["method"], r["verb"], r["code"]) for r in log] == [
        ("POST", "create", 201),
        ("GET", "get", 200),
        ("GET", "list", 200),
        ("PATCH", "patch", 200),
        ("PATCH", "patch", 200),
        ("DELETE", "delete", 200),
        ("GET", "get", 404),
    ]
    assert log[-1]["path"] == f"/apis/apps/v1/namespaces/{kube_namespace}/deployments/none/scale"
    assert server.requests(limit=2) == log[-2:]
    server.reset_stats()
    assert server.stats()["total"] == 0 and server.requests() == []


def test_injected_failures(server, co, core, kube_namespace):
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("inj"))
    args = (GROUP, VERSION, kube_namespace, PLURAL, "inj")
    server.inject("PATCH", r".*/status$", 409, times=1)
    body = expect_error(409, co.patch_namespaced_custom_object_status, *args, {"status": {"phase": "x"}})
    assert body["reason"] == "Conflict" and "the object has been modified" in body["message"]
    assert co.patch_namespaced_custom_object_status(*args, {"status": {"phase": "x"}})["status"]["phase"] == "x"

    server.inject("GET", rf"/namespaces/{kube_namespace}/configmaps$", 403, times=2)
    for _ in range(2):
        assert expect_error(403, core.list_namespaced_config_map, kube_namespace)["reason"] == "Forbidden"
    core.list_namespaced_config_map(kube_namespace)

    server.inject("*", rf"/namespaces/{kube_namespace}/", 503, times=5)
    assert expect_error(503, co.get_namespaced_custom_object, *args)["reason"] == "ServiceUnavailable"
    server.clear_injections()
    assert co.get_namespaced_custom_object(*args)["metadata"]["name"] == "inj"


def test_reset_drops_objects_but_keeps_crds(server, co, core, kube_namespace):
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("r"))
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "r"}})
    rv_before = int(core.list_namespaced_config_map(kube_namespace).metadata.resource_version)
    server.reset()
    assert co.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL)["items"] == []
    assert core.list_namespaced_config_map(kube_namespace).items == []
    assert int(core.list_namespaced_config_map(kube_namespace).metadata.resource_version) > rv_before
    client.ApiextensionsV1Api(co.api_client).read_custom_resource_definition(f"{PLURAL}.{GROUP}")


# ------------------------------------------------------------------------------- process/performance


def test_kubeconfig_and_fixture_attributes(server):
    assert server.url == f"http://127.0.0.1:{server.port}" and server.pid > 0 and server.alive()
    text = open(server.kubeconfig).read()
    assert "current-context: kubeserver" in text and server.url in text
    assert server.api_client().configuration.host == server.url


def test_server_exits_when_parent_dies(tmp_path):
    ready = tmp_path / "port"
    script = textwrap.dedent(f"""
        import subprocess, sys, time, os
        p = subprocess.Popen([sys.executable, "-m", "tests.servers.kubeserver", "--port", "0", "--ready-file", {str(ready)!r}])
        while not os.path.exists({str(ready)!r}):
            time.sleep(0.02)
        print(p.pid, flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=20)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail("kubeserver survived its parent")


def test_throughput_is_adequate(server, co, apps, kube_namespace):
    n = 200
    start = time.perf_counter()
    for i in range(n):
        co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget(f"t{i}"))
        apps.create_namespaced_deployment(kube_namespace, deployment(f"t{i}"))
    for i in range(n):
        co.patch_namespaced_custom_object_status(
            GROUP, VERSION, kube_namespace, PLURAL, f"t{i}", {"status": {"replicas": 1}}
        )
        apps.patch_namespaced_deployment_scale(f"t{i}", kube_namespace, {"spec": {"replicas": 2}})
    assert len(co.list_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL)["items"]) == n
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"{4 * n} requests took {elapsed:.1f}s"


def test_owner_references_cascade_on_delete(server, co, apps, core, kube_namespace):
    owner = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("owner"))
    ref = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    dep = deployment("owned")
    dep["metadata"]["ownerReferences"] = [ref]
    apps.create_namespaced_deployment(kube_namespace, dep)
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "kept", "ownerReferences": [ref]}})
    other = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "other-owner"}})
    core.patch_namespaced_config_map(
        "kept",
        kube_namespace,
        {
            "metadata": {
                "ownerReferences": [
                    ref,
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other-owner", "uid": other.metadata.uid},
                ]
            }
        },
    )
    co.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "owner")
    expect_error(404, apps.read_namespaced_deployment, "owned", kube_namespace)  # sole owner gone: collected
    core.read_namespaced_config_map("kept", kube_namespace)  # still has a live owner

    orphan_owner = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "parent"}})
    core.create_namespaced_config_map(
        kube_namespace,
        {
            "metadata": {
                "name": "child",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": orphan_owner.metadata.uid}
                ],
            }
        },
    )
    core.delete_namespaced_config_map("parent", kube_namespace, propagation_policy="Orphan")
    core.read_namespaced_config_map("child", kube_namespace)


def test_server_side_apply_and_dry_run(server, api, co, kube_namespace):
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube_namespace}/{PLURAL}/ssa?fieldManager=test"
    status, body, _ = raw(api, "PATCH", path, widget("ssa", replicas=2), "application/apply-patch+yaml")
    assert status == 201 and body["spec"]["replicas"] == 2
    status, body, _ = raw(api, "PATCH", path, widget("ssa", replicas=3), "application/apply-patch+yaml")
    assert status == 200 and body["spec"]["replicas"] == 3 and body["metadata"]["generation"] == 2
    dry = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("dry"), dry_run="All")
    assert dry["metadata"]["name"] == "dry" and dry["spec"]["mode"] == "fast"
    expect_error(404, co.get_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "dry")
    co.patch_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, "ssa", {"spec": {"replicas": 9}}, dry_run="All"
    )
    assert co.get_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "ssa")["spec"]["replicas"] == 3


def test_concurrent_writers_with_same_resource_version_one_wins(server, api, core, kube_namespace):
    cm = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "race"}, "data": {"n": "0"}})
    rv = cm.metadata.resource_version
    results: list[int] = []
    lock = threading.Lock()

    def writer(i: int) -> None:
        c = client.CoreV1Api(server.api_client())
        body = {"metadata": {"name": "race", "resourceVersion": rv}, "data": {"n": str(i + 1)}}
        try:
            c.replace_namespaced_config_map("race", kube_namespace, body)
            code = 200
        except ApiException as exc:
            code = exc.status
        with lock:
            results.append(code)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] + [409] * 7


def test_multi_version_crd_and_embedded_resources(server, api):
    ext = client.ApiextensionsV1Api(api)
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                },
            }
        },
    }
    crd = _crd("blueprints", "Blueprint", "Namespaced", schema, scale=False)
    v2 = dict(crd["spec"]["versions"][0], name="v1beta1", storage=False)
    crd["spec"]["versions"].append(v2)
    server.install_crds([crd])
    co = client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Blueprint",
        "metadata": {"name": "b"},
        "spec": {
            "template": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"labels": {"a": "b"}},
                "spec": {"x": 1},
                "junk": 1,
            }
        },
    }
    server.create_namespace("mv")
    created = co.create_namespaced_custom_object(GROUP, VERSION, "mv", "blueprints", body)
    assert created["spec"]["template"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {"a": "b"}},
        "spec": {"x": 1},
    }
    other = co.get_namespaced_custom_object(GROUP, "v1beta1", "mv", "blueprints", "b")
    assert other["apiVersion"] == f"{GROUP}/v1beta1" and other["metadata"]["uid"] == created["metadata"]["uid"]
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert {v.version for v in groups[GROUP].versions} == {VERSION, "v1beta1"}
    ext.delete_custom_resource_definition(f"blueprints.{GROUP}")


def test_watch_requests_are_counted(server, co, kube_namespace):
    server.reset_stats()
    list(
        watch.Watch().stream(
            co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            kube_namespace,
            PLURAL,
            resource_version="0",
            timeout_seconds=1,
        )
    )
    assert server.count("watch", PLURAL) == 1 and server.count("list") == 0


def test_watch_bookmarks_and_send_initial_events(server, api, core, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "one"}})
    path = (
        f"/api/v1/namespaces/{kube_namespace}/configmaps?watch=true&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    resp = api.call_api("GET", api.configuration.host + path, header_params={"Accept": "application/json"})
    resp.read()
    events = [json.loads(line) for line in resp.data.decode().splitlines() if line]
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(events[2]["object"]["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line for line in fh if line.startswith("Threads:")).split()[1])


def _settled_threads(pid: int, quiet: float = 1.5, limit: float = 10.0) -> int:
    """The server's thread count once it has not changed for ``quiet`` seconds: connections other tests
    left behind close when their client pools are collected, and a watch whose client went away ends at
    the server's next heartbeat (about a second): neither may happen inside the measurement."""
    deadline = time.monotonic() + limit
    last, since = _threads(pid), time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.05)
        count = _threads(pid)
        if count != last:
            last, since = count, time.monotonic()
    return last


def test_abandoned_watches_release_their_threads(server, kube_namespace):
    import gc

    gc.collect()  # close the connection pools of clients earlier tests dropped ...
    gc.disable()  # ... and let no collection close one during the measurement
    try:
        _abandon_watches_and_count(server, kube_namespace)
    finally:
        gc.enable()


def _abandon_watches_and_count(server, kube_namespace: str) -> None:
    import socket

    baseline = _settled_threads(server.pid)
    socks = []
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(
            f"GET /api/v1/namespaces/{kube_namespace}/configmaps?watch=true&timeoutSeconds=600 HTTP/1.1\r\n"
            "Host: x\r\n\r\n".encode()
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        socks.append(s)
    assert _threads(server.pid) >= baseline + 5
    for s in socks:
        s.close()
    deadline = time.monotonic() + 5
    while _threads(server.pid) > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _threads(server.pid) <= baseline


def test_defaults_reapplied_on_update_and_generation_on_graceful_delete(server, apps, co, kube_namespace):
    apps.create_namespaced_deployment(kube_namespace, deployment("dflt", replicas=3))
    body = deployment("dflt")
    del body["spec"]["replicas"]
    d = apps.replace_namespaced_deployment("dflt", kube_namespace, body)
    assert d.spec.replicas == 1 and d.spec.revision_history_limit == 10 and d.metadata.generation == 2
    w = widget("gdel")
    w["metadata"]["finalizers"] = ["x/y"]
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, w)
    co.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "gdel")
    pending = co.get_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "gdel")
    assert pending["metadata"]["generation"] == 2
    co.patch_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "gdel", {"metadata": {"finalizers": []}})
    expect_error(404, co.get_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "gdel")


def test_schema_one_of_and_any_of(server, co, api, kube_namespace):
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                "properties": {
                    "a": {"type": "string"},
                    "b": {"type": "string"},
                    "q": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
                },
            }
        },
    }
    server.install_crds([_crd("choices", "Choice", "Namespaced", schema, scale=False)])

    def make(spec: dict[str, Any]) -> Any:
        return co.create_namespaced_custom_object(
            GROUP,
            VERSION,
            kube_namespace,
            "choices",
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Choice", "metadata": {"generateName": "c-"}, "spec": spec},
        )

    assert make({"a": "x", "q": 5})["spec"] == {"a": "x", "q": 5}
    assert make({"b": "y", "q": "5Gi"})["spec"]["q"] == "5Gi"
    body = expect_error(422, make, {"a": "x", "b": "y"})
    assert body["details"]["causes"][0]["field"] == "spec"
    assert "must validate one and only one schema (oneOf). Found 2 valid alternatives" in body["message"]
    assert "Found none valid" in expect_error(422, make, {})["message"]
    assert expect_error(422, make, {"a": "x", "q": [1]})["details"]["causes"][0]["field"] == "spec.q"


def test_strategic_patch_merges_finalizers_like_the_real_server(server, core, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "f", "finalizers": ["a/x"]}})
    cm = core.patch_namespaced_config_map("f", kube_namespace, {"metadata": {"finalizers": ["b/y"]}})
    assert cm.metadata.finalizers == ["a/x", "b/y"]  # strategic merge: union
    cm = core.patch_namespaced_config_map(
        "f", kube_namespace, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}}
    )
    assert cm.metadata.finalizers == ["b/y"]
    cm = core.patch_namespaced_config_map(
        "f", kube_namespace, {"metadata": {"finalizers": []}}, _content_type="application/merge-patch+json"
    )
    assert cm.metadata.finalizers is None


# ------------------------------------------------------------------- semantics a real cluster enforces


def test_put_custom_resource_without_resource_version_is_422(server, co, kube_namespace):
    created = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("put"))
    body = dict(created)
    body["metadata"] = {k: v for k, v in created["metadata"].items() if k != "resourceVersion"}
    error = expect_error(422, co.replace_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "put", body)
    assert error["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    assert co.replace_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "put", created)  # with it: fine


def test_create_with_resource_version_is_rejected(server, api, kube_namespace):
    status, body, _ = raw(
        api,
        "POST",
        f"/api/v1/namespaces/{kube_namespace}/configmaps",
        body={"metadata": {"name": "rv", "resourceVersion": "12"}},
    )
    assert status == 500 and body["message"] == "resourceVersion should not be set on objects to be created"


def test_no_new_finalizer_on_an_object_being_deleted(server, co, kube_namespace):
    co.create_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, {**widget("fin"), "metadata": {"name": "fin", "finalizers": ["a/b"]}}
    )
    co.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "fin")
    error = expect_error(
        422,
        co.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        kube_namespace,
        PLURAL,
        "fin",
        {"metadata": {"finalizers": ["a/b", "c/d"]}},
    )
    assert error["details"]["causes"][0]["field"] == "metadata.finalizers" and "c/d" in error["message"]
    co.patch_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "fin", {"metadata": {"finalizers": []}})
    expect_error(404, co.get_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "fin")


def test_deployment_generation_bumps_on_annotations(server, apps, kube_namespace):
    apps.create_namespaced_deployment(kube_namespace, deployment("gen"))
    labelled = apps.patch_namespaced_deployment("gen", kube_namespace, {"metadata": {"labels": {"x": "y"}}})
    assert labelled.metadata.generation == 1
    annotated = apps.patch_namespaced_deployment("gen", kube_namespace, {"metadata": {"annotations": {"x": "y"}}})
    assert annotated.metadata.generation == 2


def test_field_validation_strict_and_warn(server, api, kube_namespace):
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube_namespace}/{PLURAL}"
    body = widget("fv", junk=1)
    status, error, _ = raw(api, "POST", path + "?fieldValidation=Strict", body=body)
    assert status == 400 and 'unknown field "spec.junk"' in error["message"]
    status, created, headers = raw(api, "POST", path, body=body)  # default: Warn
    assert status == 201 and "junk" not in created["spec"]
    assert headers.get("Warning") == '299 - "unknown field \\"spec.junk\\""'
    status, _, headers = raw(api, "POST", path + "?fieldValidation=Ignore", body=widget("fv2", junk=1))
    assert status == 201 and "Warning" not in headers


def test_create_in_a_missing_namespace_is_404(server, core, co):
    body = expect_error(404, core.create_namespaced_config_map, "no-such-namespace", {"metadata": {"name": "x"}})
    assert body["message"] == 'namespaces "no-such-namespace" not found'
    expect_error(404, co.create_namespaced_custom_object, GROUP, VERSION, "no-such-namespace", PLURAL, widget("x"))
    assert core.read_namespace("default").metadata.name == "default"
