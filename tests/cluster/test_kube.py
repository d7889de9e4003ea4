"""Kube-backend specifics: wire format, discovery, paging, error hygiene and configuration loading.

The contract suite shows the kube backend *behaves* like the local one; these tests pin down *how* it
talks to the server (merge-patch content type, ``/status`` and ``/scale`` subresources), that it
reaches kinds it has never heard of through discovery, and that its errors never carry credentials
or Secret data.
"""

from __future__ import annotations

import socket
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.clients.cluster import (
    ClusterError,
    Forbidden,
    Invalid,
    LocalCluster,
    NotFound,
    ObjectRef,
    Unavailable,
    connect,
)
from tests.cluster.conftest import KUBESERVER_MISSING, VA, va_manifest

pytestmark = pytest.mark.skipif(bool(KUBESERVER_MISSING), reason=KUBESERVER_MISSING or "")

TOKEN = "kubeserver-test-token"  # the bearer token in the test server's kubeconfig

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.modelplane.io"},
    "spec": {
        "group": "example.modelplane.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                },
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "replicas": {"type": "integer"},
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="session")
def widget_server(kube_crds_installed: Any) -> Any:
    """The session's test server with Modelplane's CRDs and the Widget CRD (unknown to the table)."""
    kube_crds_installed.install_crds([WIDGET_CRD])
    return kube_crds_installed


@pytest.fixture
def server(widget_server: Any) -> Iterator[Any]:
    yield widget_server
    widget_server.clear_injections()


@pytest.fixture
def kube(server: Any) -> Any:
    from tasks.clients.cluster.kube import KubeCluster

    return KubeCluster(api_client=server.api_client())


@pytest.fixture
def ns(kube: Any, kube_namespace: str) -> str:
    kube.get("v1", "Namespace", kube_namespace)  # created by the fixture
    return kube_namespace


def record_requests(kube: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str | None]]:
    """Spy on the REST layer: (method, url, content type) of every request the client sends."""
    seen: list[tuple[str, str, str | None]] = []
    rest = kube.api_client.rest_client
    original = rest.request

    def spy(method: str, url: str, headers: dict | None = None, *args: Any, **kwargs: Any) -> Any:
        seen.append((method, url, (headers or {}).get("Content-Type")))
        return original(method, url, headers, *args, **kwargs)

    monkeypatch.setattr(rest, "request", spy)
    return seen


def test_patches_are_merge_patches_on_the_right_subresource(
    kube: Any, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.create(va_manifest("va", ns))
    kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}, "data": {"a": "1"}}
    )
    seen = record_requests(kube, monkeypatch)
    ref = ObjectRef(*VA, "va", ns)
    kube.patch_spec(ref, {"spec": {"variantCost": "1"}})
    kube.patch_status(
        ref, {"actuation": {"applied": True}}, resource_version=kube.get(*VA, "va", ns)["metadata"]["resourceVersion"]
    )
    kube.patch_spec(ObjectRef("v1", "ConfigMap", "cm", ns), {"data": {"b": "2"}})
    patches = [(url.split("?")[0], ctype) for method, url, ctype in seen if method == "PATCH"]
    assert [ctype for _, ctype in patches] == ["application/merge-patch+json"] * 3
    assert patches[0][0].endswith(f"/apis/llmd.ai/v1alpha1/namespaces/{ns}/variantautoscalings/va")
    assert patches[1][0].endswith("/variantautoscalings/va/status")
    assert patches[2][0].endswith(f"/api/v1/namespaces/{ns}/configmaps/cm")


def test_unknown_kind_is_found_by_discovery(kube: Any, ns: str) -> None:
    created = kube.create(
        {
            "apiVersion": "example.modelplane.io/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": ns},
            "spec": {"size": 2, "replicas": 1},
        }
    )
    assert created["metadata"]["generation"] == 1
    ref = ObjectRef("example.modelplane.io/v1", "Widget", "w", ns)
    assert kube.patch_status(ref, {"replicas": 1})["status"] == {"replicas": 1}
    assert kube.set_scale(ref, 4).replicas == 4
    scale = kube.get_scale(ref)
    assert (scale.replicas, scale.status_replicas) == (4, 1)
    with pytest.raises(Invalid) as info:
        kube.create(
            {
                "apiVersion": "example.modelplane.io/v1",
                "kind": "Widget",
                "metadata": {"name": "x", "namespace": ns},
                "spec": {},
            }
        )
    assert info.value.field == "spec.size"
    with pytest.raises(NotFound, match="unknown kind"):
        kube.get("example.modelplane.io/v1", "Gadget", "g", ns)


def test_list_follows_continue_tokens(kube: Any, server: Any, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.clients.cluster.kube as kube_module

    for i in range(5):
        kube.create(va_manifest(f"va-{i}", ns))
        kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": ns}})
    monkeypatch.setattr(kube_module, "_LIST_PAGE", 2)
    assert [o["metadata"]["name"] for o in kube.list(*VA, namespace=ns)] == [f"va-{i}" for i in range(5)]
    assert [o["metadata"]["name"] for o in kube.list("v1", "ConfigMap", namespace=ns)] == [f"cm-{i}" for i in range(5)]
    server.inject("GET", rf"/namespaces/{ns}/variantautoscalings$", 410)  # continue token expired
    assert len(kube.list(*VA, namespace=ns)) == 5


def test_errors_carry_no_token_and_no_chained_context(kube: Any, server: Any, ns: str) -> None:
    server.inject("GET", r".*/variantautoscalings/va$", 401)
    with pytest.raises(Forbidden) as info:
        kube.get(*VA, "va", ns)
    rendered = "".join(traceback.format_exception(info.value))
    assert TOKEN not in rendered and "Authorization" not in rendered
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_secret_errors_do_not_quote_the_server_message(kube: Any, server: Any, ns: str) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf-token", "namespace": ns},
            "stringData": {"token": "x"},
        }
    )
    server.inject("PATCH", r".*/secrets/hf-token$", 422, message='data[token]: Invalid value: "hunter2-secret"')
    with pytest.raises(Invalid) as info:
        kube.patch_spec(ObjectRef("v1", "Secret", "hf-token", ns), {"stringData": {"token": "hunter2-secret"}})
    assert "hunter2" not in "".join(traceback.format_exception_only(info.value))
    assert info.value.__context__ is None and info.value.reason == "Invalid"
    server.inject("PATCH", r".*/configmaps/cm$", 422, message="data: Invalid value: visible")
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}})
    with pytest.raises(Invalid, match="visible"):
        kube.patch_spec(ObjectRef("v1", "ConfigMap", "cm", ns), {"data": {"a": "b"}})


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _client(host: str) -> Any:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = host
    configuration.api_key = {"BearerToken": f"Bearer {TOKEN}"}
    configuration.retries = 0
    return client.ApiClient(configuration)


def test_unreachable_server_is_unavailable() -> None:
    from tasks.clients.cluster.kube import KubeCluster

    kube = KubeCluster(api_client=_client(f"http://127.0.0.1:{_closed_port()}"), request_timeout=2)
    for call in (lambda: kube.get(*VA, "va", "ns"), lambda: kube.list("v1", "ConfigMap")):
        with pytest.raises(Unavailable) as info:
            call()
        assert TOKEN not in "".join(traceback.format_exception(info.value))


def test_timeout_is_unavailable() -> None:
    from tasks.clients.cluster.kube import KubeCluster

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        kube = KubeCluster(api_client=_client(f"http://127.0.0.1:{silent.getsockname()[1]}"), request_timeout=0.3)
        with pytest.raises(Unavailable):
            kube.get("v1", "ConfigMap", "cm", "ns")


def test_connect_targets(server: Any, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.clients.cluster.kube import KubeCluster

    by_path = connect(f"kubeconfig:{server.kubeconfig}#kubeserver")
    assert isinstance(by_path, KubeCluster) and by_path.get("v1", "Namespace", ns)["metadata"]["name"] == ns
    monkeypatch.setenv("KUBECONFIG", server.kubeconfig)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("MODELPLANE_CLUSTER", raising=False)
    for target in (None, "", "  ", "kube", "kubeconfig"):  # empty is the kubeconfig, never the working directory
        assert connect(target).get("v1", "Namespace", ns)["metadata"]["name"] == ns
    assert isinstance(connect(str(tmp_path)), LocalCluster)
    assert isinstance(connect(str(tmp_path / "state.yaml")), LocalCluster)
    # The laptop default: $MODELPLANE_CLUSTER when no cluster is named; an explicit "kube" still means the kubeconfig.
    monkeypatch.setenv("MODELPLANE_CLUSTER", str(tmp_path / "laptop"))
    for target in (None, ""):
        chosen = connect(target)
        assert isinstance(chosen, LocalCluster) and chosen.path == tmp_path / "laptop"
    assert isinstance(connect("kube"), KubeCluster)


def test_no_cluster_configured_is_one_line_naming_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("MODELPLANE_CLUSTER", "KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for target in (None, "", " "):
        with pytest.raises(ClusterError) as info:
            connect(target)
        assert info.value.reason == "NoCluster" and "\n" not in info.value.message
        assert "MODELPLANE_CLUSTER" in info.value.message and "--cluster" in info.value.message
    assert list(tmp_path.iterdir()) == []


def test_in_cluster_config_is_used_inside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.clients.cluster.kube as kube_module

    calls: list[Any] = []

    def fake_incluster(client_configuration: Any = None, **_: Any) -> None:
        calls.append(client_configuration)
        client_configuration.host = "https://10.0.0.1:443"

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setattr(kube_module.config, "load_incluster_config", fake_incluster)
    cluster = connect("kube")
    assert calls and cluster.api_client.configuration.host == "https://10.0.0.1:443"


def test_bad_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: s3cr3t-token}\n")
    with pytest.raises(ClusterError) as info:
        connect(f"kubeconfig:{path}#missing-context")
    assert info.value.reason == "ConfigError" and "s3cr3t" not in str(info.value)
    assert info.value.__context__ is None


def test_retry_after_is_honoured(kube: Any, server: Any, ns: str) -> None:
    """Writes are not retried by the client library (reads with Retry-After are, like client-go)."""
    from tasks.clients.cluster import retry_unavailable

    ref = ObjectRef(*VA, "va", ns)
    kube.create(va_manifest("va", ns))
    server.inject("PATCH", r"/variantautoscalings/va/status$", 429, retry_after=2)
    with pytest.raises(Unavailable) as info:
        kube.patch_status(ref, {"actuation": {"applied": True}})
    assert info.value.retry_after == 2.0  # type: ignore[attr-defined]
    server.inject("PATCH", r"/variantautoscalings/va/status$", 503, retry_after=3)
    waits: list[float] = []
    written = retry_unavailable(
        lambda: kube.patch_status(ref, {"actuation": {"applied": True}}), base_delay=0.01, sleep=waits.append
    )
    assert written["status"]["actuation"] == {"applied": True}
    assert waits == [3.0]


def test_event_satisfies_api_server_event_validation(kube: Any, ns: str) -> None:
    va = kube.create(va_manifest("va", ns))
    event = kube.post_event(va, "Scaled" * 40, "é" * 2000, "Warning")
    assert event["action"] == event["reason"] and len(event["reason"].encode()) <= 128
    assert len(event["message"].encode()) <= 1024 and event["message"] == "é" * 512
    assert event["reportingComponent"] == "modelplane" and event["reportingInstance"]
    assert event["eventTime"].endswith("Z") and "." in event["eventTime"]


def test_a_hostile_name_is_never_sent_to_the_api_server(kube: Any, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_requests(kube, monkeypatch)
    hostile = "zz/../../configmaps/other"
    with pytest.raises(Invalid, match="metadata.name"):
        kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": hostile, "namespace": ns}})
    with pytest.raises(Invalid, match="metadata.name"):
        kube.patch_status(ObjectRef(*VA, hostile, ns), {"actuation": {"applied": True}})
    with pytest.raises(Invalid, match="metadata.namespace"):
        kube.get("v1", "ConfigMap", "cm", "../kube-system")
    with pytest.raises(Invalid, match="metadata.name"):
        kube.delete(ObjectRef("v1", "ConfigMap", hostile, ns))
    assert seen == []


def test_a_dry_run_client_changes_nothing_on_the_server(kube: Any, server: Any, ns: str) -> None:
    from tasks.clients.cluster.kube import KubeCluster

    kube.create(va_manifest("va", ns))
    before = kube.get(*VA, "va", ns)
    dry = KubeCluster(api_client=server.api_client(), dry_run=True)
    created = dry.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}})
    assert created["metadata"]["name"] == "cm"  # answered as if stored
    dry.patch_status(ObjectRef(*VA, "va", ns), {"actuation": {"applied": True}})
    dry.patch_spec(ObjectRef(*VA, "va", ns), {"spec": {"variantCost": "9"}})
    dry.delete(ObjectRef(*VA, "va", ns))
    with pytest.raises(NotFound):
        kube.get("v1", "ConfigMap", "cm", ns)
    assert kube.get(*VA, "va", ns) == before
