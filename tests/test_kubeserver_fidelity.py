"""The test API server answers as a real kube-apiserver where the product's tests could otherwise pass
against a lenient oracle: identity changes in patches, label syntax, future resourceVersions, the body of a
delete, foreground deletion, unknown metadata fields and namespaced paths without a namespace."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.servers.kubeserver.fixture import KubeServer
from tests.test_kubeserver import GADGET_CRD, GROUP, PLURAL, VERSION, WIDGET_CRD, expect_error, raw, widget


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
def co(api):
    return client.CustomObjectsApi(api)


def test_merge_patch_may_not_change_name_or_uid(core, co, kube_namespace):
    cm = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "ident"}})
    body = expect_error(400, core.patch_namespaced_config_map, "ident", kube_namespace, {"metadata": {"name": "other"}})
    assert body["message"] == "the name of the object (other) does not match the name on the URL (ident)"
    body = expect_error(
        422,
        core.patch_namespaced_config_map,
        "ident",
        kube_namespace,
        {"metadata": {"uid": "00000000-0000-0000-0000-000000000000"}},
    )
    assert body["details"]["causes"][0]["field"] == "metadata.uid" and "field is immutable" in body["message"]
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("w"))
    expect_error(
        400, co.patch_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "w", {"metadata": {"name": "x"}}
    )
    replaced = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="ident", uid="1-2-3"))
    expect_error(422, core.replace_namespaced_config_map, "ident", kube_namespace, replaced)
    assert core.read_namespaced_config_map("ident", kube_namespace).metadata.uid == cm.metadata.uid


def test_label_selectors_and_values_are_validated(core, kube_namespace):
    body = expect_error(400, core.list_namespaced_config_map, kube_namespace, label_selector="env in ()")
    assert "values set can't be empty" in body["message"]
    expect_error(400, core.list_namespaced_config_map, kube_namespace, label_selector="env=" + "a" * 64)
    core.list_namespaced_config_map(kube_namespace, label_selector="env=" + "a" * 63)
    body = expect_error(
        422,
        core.create_namespaced_config_map,
        kube_namespace,
        {"metadata": {"name": "long", "labels": {"env": "a" * 64}}},
    )
    assert body["details"]["causes"][0]["field"] == "metadata.labels"
    assert "must be no more than 63 characters" in body["message"]
    expect_error(
        422, core.create_namespaced_config_map, kube_namespace, {"metadata": {"name": "bad", "labels": {"env": "-x"}}}
    )
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "ok", "labels": {"a.b/c": "a" * 63}}})


def test_future_resource_version_is_too_large(core, api, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "rv"}})
    current = int(core.list_namespaced_config_map(kube_namespace).metadata.resource_version)
    future = str(current + 1000)
    body = expect_error(504, core.list_namespaced_config_map, kube_namespace, resource_version=future)
    assert body["reason"] == "Timeout" and body["message"].startswith(f"Too large resource version: {future}")
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    path = f"/api/v1/namespaces/{kube_namespace}/configmaps/rv?resourceVersion={future}"
    assert raw(api, "GET", path)[0] == 504
    status, body, _ = raw(api, "GET", f"/api/v1/namespaces/{kube_namespace}/configmaps/rv?resourceVersion={current}")
    assert status == 200 and body["metadata"]["name"] == "rv"
    status, event, _ = raw(
        api,
        "GET",
        f"/api/v1/namespaces/{kube_namespace}/configmaps?watch=true"
        f"&resourceVersion={future}&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan&timeoutSeconds=10",
    )
    assert status == 200 and event["type"] == "ERROR" and event["object"]["code"] == 504  # the stream's one event


def test_delete_answers_status_for_most_kinds(core, api, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "del"}})
    status, body, _ = raw(api, "DELETE", f"/api/v1/namespaces/{kube_namespace}/configmaps/del")
    assert status == 200 and body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "del" and body["details"]["kind"] == "configmaps" and body["details"]["uid"]
    assert "group" not in body["details"]
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "fin", "finalizers": ["x.io/y"]}})
    status, body, _ = raw(api, "DELETE", f"/api/v1/namespaces/{kube_namespace}/configmaps/fin")
    assert body["kind"] == "ConfigMap" and body["metadata"]["deletionTimestamp"]  # not gone yet: the object


def test_foreground_deletion_waits_for_blocking_dependents(core, co, kube_namespace):
    owner = co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("fg"))
    ref = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "name": "fg",
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "blocker", "ownerReferences": [ref], "finalizers": ["x.io/hold"]}}
    )
    core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "plain", "ownerReferences": [dict(ref, blockOwnerDeletion=False)]}}
    )
    co.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "fg", propagation_policy="Foreground")
    pending = co.get_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "fg")
    assert pending["metadata"]["deletionTimestamp"] and pending["metadata"]["finalizers"] == ["foregroundDeletion"]
    expect_error(404, core.read_namespaced_config_map, "plain", kube_namespace)  # deleted, not waited for
    blocker = core.read_namespaced_config_map("blocker", kube_namespace)
    assert blocker.metadata.deletion_timestamp  # being deleted, held by its own finalizer
    core.patch_namespaced_config_map("blocker", kube_namespace, {"metadata": {"finalizers": None}})
    expect_error(404, core.read_namespaced_config_map, "blocker", kube_namespace)
    expect_error(404, co.get_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "fg")
    co.create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, widget("alone"))
    co.delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "alone", propagation_policy="Foreground")
    expect_error(404, co.get_namespaced_custom_object, GROUP, VERSION, kube_namespace, PLURAL, "alone")


def test_unknown_metadata_fields_are_dropped(core, co, api, kube_namespace):
    status, body, headers = raw(
        api, "POST", f"/api/v1/namespaces/{kube_namespace}/configmaps", {"metadata": {"name": "meta", "colour": "red"}}
    )
    assert status == 201 and "colour" not in body["metadata"]
    assert 'unknown field \\"metadata.colour\\"' in headers.get("Warning", "")
    created = co.create_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, dict(widget("wm"), metadata={"name": "wm", "shape": "round"})
    )
    assert "shape" not in created["metadata"]
    patched = core.patch_namespaced_config_map("meta", kube_namespace, {"metadata": {"size": 3}})
    assert patched.metadata.name == "meta"
    assert "size" not in raw(api, "GET", f"/api/v1/namespaces/{kube_namespace}/configmaps/meta")[1]["metadata"]
    status, _, _ = raw(
        api,
        "POST",
        f"/api/v1/namespaces/{kube_namespace}/configmaps?fieldValidation=Strict",
        {"metadata": {"name": "strict", "colour": "red"}},
    )
    assert status == 400


def test_namespaced_get_without_namespace_is_not_found(core, api, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "nons"}})
    for method in ("GET", "PUT", "PATCH", "DELETE"):
        status, body, _ = raw(
            api,
            method,
            "/api/v1/configmaps/nons",
            {"metadata": {"name": "nons"}},
            "application/merge-patch+json" if method == "PATCH" else "application/json",
        )
        assert status == 404 and body["reason"] == "NotFound", method
    assert raw(api, "POST", "/api/v1/configmaps", {"metadata": {"name": "x"}})[0] == 405
    assert raw(api, "GET", "/api/v1/configmaps")[0] == 200  # listing across namespaces is served
