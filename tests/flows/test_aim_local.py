"""The AIM lifecycles on the bundled example cluster with the local backend, offline: the image's
metadata comes from the OCI image layout in deployments/example-images (what ./dev.sh demo runs)."""

from __future__ import annotations

import pathlib

import yaml
from typer.testing import CliRunner

from flows.cli import app

REPO = pathlib.Path(__file__).resolve().parents[2]
MIRROR = f"docker.io=oci-layout:{REPO / 'deployments' / 'example-images'}"


def _objects(cluster: pathlib.Path, kind: str) -> list[dict]:
    found = []
    for path in cluster.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == kind:
                found.append(doc)
    return found


def test_demo_discovers_resolves_and_rolls_out_offline(example_cluster: pathlib.Path, prefect_harness: None) -> None:
    result = CliRunner().invoke(app, ["aim", "--cluster", str(example_cluster), "--registry-mirror", MIRROR])
    assert result.exit_code == 3, result.output  # ran; a template waits for its cache, services not Running yet
    templates = {t["metadata"]["name"]: t for t in _objects(example_cluster, "AIMServiceTemplate")}
    auto = "docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215"
    assert auto in templates and templates[auto]["status"]["status"] == "Available"
    assert templates[auto]["status"]["modelSources"] == ["hf://meta-llama/Llama-3.1-8B-Instruct"]
    (isvc,) = _objects(example_cluster, "InferenceService")
    assert isvc["metadata"]["labels"]["aim.silogen.ai/service"] == "llama-batch"
    assert len(_objects(example_cluster, "HTTPRoute")) == 1
    services = {s["metadata"]["name"]: s for s in _objects(example_cluster, "AIMService")}
    assert services["llama-batch"]["status"]["status"] == "Starting"
    assert services["llama-chat"]["status"]["status"] == "Pending"  # its template waits for the model cache


def test_a_malformed_mirror_is_one_line_and_exit_2(example_cluster: pathlib.Path) -> None:
    result = CliRunner().invoke(app, ["discover-models", "--cluster", str(example_cluster), "--registry-mirror", "docker.io"])
    assert result.exit_code == 2
    assert "expected HOST=MIRROR" in result.output and "Traceback" not in result.output


def test_a_missing_cluster_path_is_one_line_and_exit_2(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(app, ["rollout-services", "--cluster", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert result.output.strip().startswith("error:") and "does not exist" in result.output and "Traceback" not in result.output
