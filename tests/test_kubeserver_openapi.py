"""The Kubernetes API test server's OpenAPI documents, read by the real ``kubectl``: ``kubectl apply`` (with its
default validation, no ``--validate=false``) and ``kubectl explain`` work against it as against a cluster."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import urllib.request

import pytest
import yaml

from tests.servers.kubeserver.fixture import KubeServer

REPO = pathlib.Path(__file__).resolve().parents[1]
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


@pytest.fixture(scope="module")
def server(kube_server: KubeServer) -> KubeServer:
    crds = [yaml.safe_load(path.read_text()) for path in sorted((REPO / "deployments" / "crds").glob("*.yaml"))]
    kube_server.install_crds(crds)
    return kube_server


def kubectl(server: KubeServer, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--kubeconfig", server.kubeconfig, "--context", "kubeserver", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(pathlib.Path(server.kubeconfig).parent)},
    )


def test_kubectl_apply_validates_through_the_server(server: KubeServer, kube_namespace: str) -> None:
    example = (REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml").read_text()
    manifests = example.replace("namespace: llm-serving", f"namespace: {kube_namespace}")
    server.reset_stats()
    applied = kubectl(server, "apply", "-n", kube_namespace, "-f", "-", stdin=manifests)
    assert applied.returncode == 0, applied.stderr
    assert "variantautoscaling.llmd.ai/llama-3-1-8b-a100 created" in applied.stdout
    creates = [r["path"] for r in server.requests() if r["method"] == "POST" and "variantautoscalings" in r["path"]]
    assert creates and all("fieldValidation=Strict" in path for path in creates)  # the server validates
    again = kubectl(server, "apply", "-n", kube_namespace, "-f", "-", stdin=manifests)
    assert again.returncode == 0 and "llama-3-1-8b-a100 unchanged" in again.stdout, again.stderr
    unknown = manifests.replace("  modelID: meta/llama-3.1-8b\n", "  modelID: meta/llama-3.1-8b\n  bogus: 1\n", 1)
    refused = kubectl(server, "apply", "-n", kube_namespace, "-f", "-", stdin=unknown)
    assert refused.returncode != 0 and 'unknown field "spec.bogus"' in refused.stderr


def test_kubectl_explain_reads_the_crds_and_the_built_in_kinds(server: KubeServer) -> None:
    spec = kubectl(server, "explain", "variantautoscalings.spec")
    assert spec.returncode == 0, spec.stderr
    assert "KIND:       VariantAutoscaling" in spec.stdout and "modelID\t<string> -required-" in spec.stdout
    deployment = kubectl(server, "explain", "deployments.metadata.name")
    assert deployment.returncode == 0 and "GROUP:      apps" in deployment.stdout, deployment.stderr


def test_the_documents_tag_every_served_kind(server: KubeServer) -> None:
    def fetch(path: str, accept: str = "application/json") -> dict:
        request = urllib.request.Request(server.url + path, headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    index = fetch("/openapi/v3")["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/llmd.ai/v1alpha1"} <= set(index)
    document = fetch(index["apis/llmd.ai/v1alpha1"]["serverRelativeURL"])
    tagged = {
        (gvk["group"], gvk["kind"])
        for schema in document["components"]["schemas"].values()
        for gvk in schema.get("x-kubernetes-group-version-kind", ())
    }
    assert ("llmd.ai", "VariantAutoscaling") in tagged
    swagger = fetch("/openapi/v2")
    assert swagger["swagger"] == "2.0"
    kinds = {g["kind"] for d in swagger["definitions"].values() for g in d.get("x-kubernetes-group-version-kind", ())}
    assert {"Deployment", "ConfigMap", "VariantAutoscaling", "Lease", "Role"} <= kinds
