"""The bad-input corpus against the test Kubernetes API server with the generated CRDs installed.

Each invalid manifest is POSTed through the official client; the server must answer 422 Invalid with
a cause naming the expected field. Status violations are sent to the ``/status`` subresource of an
object created without them (a create ignores status, as the real API server does). Unknown fields
are pruned by a CRD rather than rejected, so the unknown-field entries are expected to be created.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
from typing import Any

import pytest

from engine.api.crds import build_crd
from engine.api.registry import KINDS, kind_info
from engine.api.validate import parse_object
from tests.api.helpers import bad_inputs, custom_resource_examples

kubernetes = pytest.importorskip("kubernetes")
from kubernetes.client import CustomObjectsApi  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

CORPUS = bad_inputs()


@pytest.fixture(scope="module")
def custom_api(kube_server: Any) -> CustomObjectsApi:
    kube_server.install_crds([build_crd(info) for info in KINDS])
    return CustomObjectsApi(kube_server.api_client())


def _server_forms(path: str) -> set[str]:
    """Our ``labels["a.b/c"]`` key form as the API server may print it: ``labels[a.b/c]`` or ``labels.a.b/c``."""
    return {path, re.sub(r'\["([^"]+)"\]', r"[\1]", path), re.sub(r'\["([^"]+)"\]', r".\1", path)}


def _create(api: CustomObjectsApi, manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    info = kind_info(manifest["apiVersion"], manifest["kind"])
    if info.namespaced:
        return api.create_namespaced_custom_object(info.group, info.version, namespace, info.plural, manifest)
    return api.create_cluster_custom_object(info.group, info.version, info.plural, manifest)


def _patch_status(api: CustomObjectsApi, manifest: dict[str, Any], namespace: str, status: dict[str, Any]) -> None:
    info = kind_info(manifest["apiVersion"], manifest["kind"])
    name = manifest["metadata"]["name"]
    body = {"status": status}
    if info.namespaced:
        api.patch_namespaced_custom_object_status(info.group, info.version, namespace, info.plural, name, body)
    else:
        api.patch_cluster_custom_object_status(info.group, info.version, info.plural, name, body)


def _causes(exc: ApiException) -> list[dict[str, Any]]:
    body = json.loads(exc.body)
    return body.get("details", {}).get("causes", [])


@pytest.mark.parametrize(("path", "rule", "expected", "manifest"), CORPUS, ids=[p.stem for p, *_ in CORPUS])
def test_server_rejects_with_422_naming_the_field(
    custom_api: CustomObjectsApi,
    kube_namespace: str,
    path: pathlib.Path,
    rule: str,
    expected: str,
    manifest: dict[str, Any],
) -> None:
    manifest = copy.deepcopy(manifest)
    manifest["metadata"].pop("namespace", None)
    info = kind_info(manifest["apiVersion"], manifest["kind"])
    if not info.namespaced:
        manifest["metadata"]["name"] = f"{manifest['metadata']['name']}-{kube_namespace}"

    if rule == "Unknown":
        created = _create(custom_api, manifest, kube_namespace)
        assert expected.rsplit(".", 1)[-1] not in created["spec"], "unknown fields are pruned"
        return

    with pytest.raises(ApiException) as info_exc:
        if expected.startswith("status"):
            status = manifest.pop("status")
            _create(custom_api, manifest, kube_namespace)
            _patch_status(custom_api, manifest, kube_namespace, status)
        else:
            _create(custom_api, manifest, kube_namespace)
    exc = info_exc.value
    assert exc.status == 422, exc.body
    fields = {cause.get("field") for cause in _causes(exc)}
    assert fields & _server_forms(expected), (expected, _causes(exc))


EXAMPLES = custom_resource_examples()


@pytest.mark.parametrize(("source", "manifest"), EXAMPLES, ids=[s for s, _ in EXAMPLES])
def test_server_accepts_examples_with_the_models_defaults(
    custom_api: CustomObjectsApi, kube_namespace: str, source: str, manifest: dict[str, Any]
) -> None:
    manifest = copy.deepcopy(manifest)
    manifest["metadata"].pop("namespace", None)
    info = kind_info(manifest["apiVersion"], manifest["kind"])
    if not info.namespaced:
        manifest["metadata"]["name"] = f"{manifest['metadata']['name']}-{kube_namespace}"
    created = _create(custom_api, manifest, kube_namespace)
    # the server's CRD defaults and the model's defaults come from one source and must agree
    assert parse_object(created).spec == parse_object(manifest).spec
