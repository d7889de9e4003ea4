"""Fixtures running one contract suite against both cluster backends.

``backend`` is parametrized ``local`` (a :class:`LocalCluster` on a temporary directory seeded with
manifest files) and ``kube`` (a :class:`KubeCluster` on the Kubernetes API test server of
``tests.servers.kubeserver``, with Modelplane's CRDs installed and the same objects seeded through the API).
Every test gets its own namespaces, and seeded objects carry a ``suite`` label unique to the test,
so assertions hold on the shared session server too.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tasks.clients.cluster import Cluster, LocalCluster
from tasks.clients.cluster.base import Manifest

KUBESERVER_PLUGIN = "tests.servers.kubeserver.fixture"

try:
    import tests.servers.kubeserver.fixture  # noqa: F401
except ModuleNotFoundError as _missing:
    if _missing.name not in (KUBESERVER_PLUGIN, "tests.servers.kubeserver"):
        raise
    KUBESERVER_MISSING: str | None = f"Kubernetes API test server not available: {KUBESERVER_PLUGIN} is missing"
else:
    KUBESERVER_MISSING = None


def pytest_configure(config: pytest.Config) -> None:
    """Load the test server's fixtures (``kube_server``, ``kube_namespace``) unless already loaded."""
    if KUBESERVER_MISSING is None and not config.pluginmanager.has_plugin(KUBESERVER_PLUGIN):
        config.pluginmanager.import_plugin(KUBESERVER_PLUGIN)


VA = ("llmd.ai/v1alpha1", "VariantAutoscaling")


@dataclass
class Backend:
    """One backend under test: the cluster, the test's namespaces and (kube) the server handle."""

    name: str
    cluster: Cluster
    namespace: str
    other_namespace: str
    suite: str
    server: Any | None = None


def seed_objects(namespace: str, other: str, suite: str) -> list[Manifest]:
    """The objects every test starts with: two namespaces, a ConfigMap, a Deployment, two VAs."""
    labels = {"suite": suite}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "seed-config", "namespace": namespace, "labels": {**labels, "tier": "config"}},
            "data": {"GLOBAL_OPT_INTERVAL": "60s"},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "seed-deploy", "namespace": namespace, "labels": {**labels, "tier": "serving"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "seed"}},
                "template": {
                    "metadata": {"labels": {"app": "seed"}},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.1"}]},
                },
            },
        },
        va_manifest("seed-va", namespace, {**labels, "tier": "model", "accelerator": "A100"}),
        va_manifest("seed-va", other, {**labels, "tier": "model", "accelerator": "H100"}),
    ]


def va_manifest(
    name: str, namespace: str, labels: dict[str, str] | None = None, model: str = "meta/llama-3.1-8b"
) -> Manifest:
    """A valid VariantAutoscaling (the real CRD requires ``spec.modelID``)."""
    return {
        "apiVersion": VA[0],
        "kind": VA[1],
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "modelID": model,
            "accelerator": "A100",
            "acceleratorCount": 1,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "seed-deploy"},
        },
    }


def write_seed_files(root: Path, objects: list[Manifest]) -> None:
    """Seed a state directory the way an operator would: a few hand-written multi-document files."""
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    rest = [o for o in objects if o["kind"] != "Namespace"]
    (root / "00-namespaces.yaml").write_text("# namespaces\n" + yaml.safe_dump_all(namespaces, sort_keys=False))
    (root / "apps").mkdir()
    (root / "apps" / "workloads.yaml").write_text(
        "# workloads and their autoscalers\n---\n" + yaml.safe_dump_all(rest, sort_keys=False)
    )


def crd_manifests() -> list[Manifest]:
    """Modelplane's real CRDs, as rendered by :func:`engine.api.crds.render_crds`."""
    from engine.api.crds import render_crds

    return [yaml.safe_load(text) for text in render_crds().values()]


@pytest.fixture(scope="session")
def kube_crds_installed(request: pytest.FixtureRequest) -> Any:
    """The session's test server with Modelplane's CRDs installed (once)."""
    server = request.getfixturevalue("kube_server")
    server.install_crds(crd_manifests())
    return server


def _local_backend(tmp_path: Path) -> Backend:
    suite = uuid.uuid4().hex[:8]
    namespace, other = f"mp-{suite}", f"mp-{suite}-b"
    objects = seed_objects(namespace, other, suite)
    write_seed_files(tmp_path, objects)
    return Backend("local", LocalCluster(tmp_path), namespace, other, suite)


def _kube_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if KUBESERVER_MISSING:
        pytest.skip(KUBESERVER_MISSING)
    from tasks.clients.cluster.kube import KubeCluster

    server = request.getfixturevalue("kube_crds_installed")
    namespace = request.getfixturevalue("kube_namespace")
    suite = uuid.uuid4().hex[:8]
    other = f"{namespace}-b"
    cluster = KubeCluster(api_client=server.api_client())
    objects = seed_objects(namespace, other, suite)
    for obj in objects:
        if obj["kind"] == "Namespace":
            cluster.apply(copy.deepcopy(obj))  # the test's namespace exists already
        else:
            cluster.create(copy.deepcopy(obj))
    try:
        yield Backend("kube", cluster, namespace, other, suite, server=server)
    finally:
        server.clear_injections()


@pytest.fixture(params=["local", "kube"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The backend under test, seeded (see module docs)."""
    if request.param == "local":
        yield _local_backend(tmp_path)
    else:
        yield from _kube_backend(request)


@pytest.fixture
def cluster(backend: Backend) -> Cluster:
    """The cluster of the backend under test."""
    return backend.cluster


@pytest.fixture
def ns(backend: Backend) -> str:
    """The test's main namespace (seeded)."""
    return backend.namespace
