"""Shared by the platform tests: what each flow needs to run on the example cluster, and a Kubernetes API
test server holding that cluster."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tasks.clients.cluster import connect
from tasks.manifests import read_manifest_documents
from tests.servers.kubeserver.fixture import KubeServer, start_kube_server
from tests.upstream_crds import upstream_crds

REPO = pathlib.Path(__file__).resolve().parents[2]

# What each flow needs besides `cluster` to run on the example cluster with no network (used by the real
# server test and the RBAC test). A new flow that needs more (a metrics file, the URL of a test server...)
# adds its entry here.
LOCAL_RUN_PARAMETERS: dict[str, dict[str, Any]] = {
    "optimize": {"metrics_file": str(REPO / "deployments" / "example-metrics.yaml")},
    # The example image's metadata ships as an OCI layout (as in ./dev.sh demo): no registry needed.
    # serve-openmodel serves one named OpenModel (a person's request): the example's.
    "serve-openmodel": {"model": "qwen2-5-0-5b-instruct", "namespace": "llm-serving"},
    "discover-models": {"registry_mirrors": {"docker.io": f"oci-layout:{REPO / 'deployments' / 'example-images'}"}},
    # A short watch: the example's Models are announced from the watch's initial state.
    "watch-models": {"watch_seconds": 2},
    # Five minutes of the trace and no knob sweep: these runs prove the deployment runs and what it may call;
    # the replay itself and the frontier are tests/flows/test_simulate_flow.py's (about 11 s of CPU less a run).
    "simulate": {"duration_s": 300, "frontier": False},
    # The same for tune: five minutes of its trace (the whole 20 took 10.7 s of CPU a run, five 3.1 s); the
    # search itself is tests/flows/test_tune_flow.py's.
    "tune": {"duration_s": 300},
}


@pytest.fixture(scope="module")
def cluster_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """A private API server with Modelplane's CRDs (and the upstream ones the rollouts render)."""
    server = start_kube_server(tmp_path_factory.mktemp("examples-kubeserver"))
    try:
        crd_files = sorted((REPO / "deployments" / "crds").glob("*.yaml"))
        server.install_crds(
            [doc for path in crd_files for doc in yaml.safe_load_all(path.read_text()) if doc] + list(upstream_crds())
        )
        yield server
    finally:
        server.stop()


def load_example_cluster(server: KubeServer) -> None:
    """Create every object of deployments/examples (namespaces first, files in order)."""
    server.reset()
    cluster = connect(f"kubeconfig:{server.kubeconfig}")
    documents, errors = read_manifest_documents(REPO / "deployments" / "examples")
    assert not errors, errors
    objects = [doc for _, doc in documents if isinstance(doc, dict) and doc.get("kind")]
    for obj in sorted(objects, key=lambda o: o["kind"] != "Namespace"):
        cluster.create({k: v for k, v in obj.items() if k != "status"})
