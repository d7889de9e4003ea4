"""The AIM lifecycles on the bundled example cluster with the local backend, offline: the image's
metadata comes from the OCI image layout in deployments/example-images (what ./dev.sh demo runs)."""

from __future__ import annotations

import json
import pathlib
import re
import shutil

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
    result = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(example_cluster), "--registry-mirror", MIRROR])
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
    result = CliRunner().invoke(
        app, ["discover-models", "--cluster", str(example_cluster), "--registry-mirror", "docker.io"]
    )
    assert result.exit_code == 2
    assert "expected HOST=MIRROR" in result.output and "Traceback" not in result.output


def test_a_missing_cluster_path_is_one_line_and_exit_2(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(app, ["rollout-services", "--cluster", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert (
        result.output.strip().startswith("error:")
        and "does not exist" in result.output
        and "Traceback" not in result.output
    )


BAD_OBJECTS = """\
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMClusterModel
metadata: {name: no-image}
spec: {name: broken/model:1}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMServiceTemplate
metadata: {name: string-gpus, namespace: llm-serving}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", metric: latency, gpuModel: MI300X, gpusPerReplica: "1"}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: spec-string, namespace: llm-serving}
spec: "llama please"
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: cache-no, namespace: llm-serving}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", templateRef: docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215, cacheModel: "no"}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: replicas-three, namespace: llm-serving}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", templateRef: docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215, replicas: "three"}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: replicas-negative, namespace: llm-serving}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", templateRef: docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215, replicas: -2}
"""
"""Issue 22's reproductions, next to the example's valid objects (the example's gpu-node-1 labels
``amd.com/gpu.count: "8"``, which met the string ``gpusPerReplica`` in a comparison)."""


def _volatile_removed(value: object) -> object:
    """An object without what differs between two runs: times and the discovery record's read time."""
    if isinstance(value, dict):
        return {
            k: _volatile_removed(v)
            for k, v in value.items()
            if k
            not in ("lastTransitionTime", "lastUsed", "resourceVersion", "uid", "creationTimestamp", "ownerReferences")
        }
    if isinstance(value, list):
        return [_volatile_removed(v) for v in value]
    if isinstance(value, str):
        return re.sub(r'"readAt":"[^"]*"', "", value)
    return value


def _events_said(objects: dict[tuple[str, str, str], dict]) -> set[tuple[str, str, str, str, str]]:
    """(kind, name, type, reason, message) of every Event among ``objects``."""
    return {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["type"], e["reason"], e["message"])
        for key, e in objects.items()
        if key[0] == "Event"
    }


def _all_objects(cluster: pathlib.Path) -> dict[tuple[str, str, str], dict]:
    found = {}
    for path in cluster.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind"):
                meta = doc.get("metadata") or {}
                found[(doc["kind"], meta.get("namespace") or "", meta.get("name") or "")] = doc
    return found


def test_invalid_objects_get_a_condition_naming_the_field_and_the_others_proceed(
    example_cluster: pathlib.Path, tmp_path: pathlib.Path, prefect_harness: None
) -> None:
    clean = tmp_path / "clean"
    shutil.copytree(example_cluster, clean)
    (example_cluster / "99-bad.yaml").write_text(BAD_OBJECTS)
    baseline = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(clean), "--registry-mirror", MIRROR])
    assert baseline.exit_code == 3, (
        baseline.output
    )  # the example alone: a template waits for its cache, services not Running yet
    result = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(example_cluster), "--registry-mirror", MIRROR])
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output

    objects = _all_objects(example_cluster)

    def failure(kind: str, name: str, namespace: str = "llm-serving") -> str:
        obj = objects[(kind, namespace, name)]
        # The boundary reader (tasks/boundary.py) marks what does not parse: Ready=False, reason InvalidSpec.
        [cond] = [c for c in obj["status"]["conditions"] if c["reason"] == "InvalidSpec"]
        return cond["message"]

    assert "spec.image" in failure("AIMClusterModel", "no-image", "")
    assert "spec.gpusPerReplica" in failure("AIMServiceTemplate", "string-gpus")
    assert objects[("AIMServiceTemplate", "llm-serving", "string-gpus")]["status"]["status"] == "Failed"
    assert "spec:" in failure("AIMService", "spec-string") or "spec: " in failure("AIMService", "spec-string")
    assert "spec.cacheModel" in failure("AIMService", "cache-no")
    assert "spec.replicas" in failure("AIMService", "replicas-three")
    assert "spec.replicas" in failure("AIMService", "replicas-negative")
    for name in ("spec-string", "cache-no", "replicas-three", "replicas-negative"):
        assert objects[("AIMService", "llm-serving", name)]["status"]["status"] == "Failed"
    assert [
        i["metadata"]["labels"]["aim.silogen.ai/service"] for i in _objects(example_cluster, "InferenceService")
    ] == ["llama-batch"]
    # Every valid object ends as it does without the invalid ones.
    # Events are named at random when posted: compared by what they say, the others as stored.
    expected = {key: _volatile_removed(obj) for key, obj in _all_objects(clean).items() if key[0] != "Event"}
    after = {key: _volatile_removed(obj) for key, obj in objects.items() if key in expected}
    assert after == expected
    assert _events_said(_all_objects(clean)) <= _events_said(objects)

    # validate agrees with the flows: the string gpusPerReplica is not valid.
    checked = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(example_cluster), "--json"])
    assert checked.exit_code == 3
    invalid = {row["name"]: row["result"] for row in json.loads(checked.stdout) if row["result"] != "valid"}
    assert "spec.gpusPerReplica" in invalid["string-gpus"] and "spec.cacheModel" in invalid["cache-no"]


def test_aim_takes_the_discovery_options(example_cluster: pathlib.Path, prefect_harness: None) -> None:
    """``aim`` has ``-n``, ``--resync-seconds`` and ``--insecure-registry`` as ``discover-models`` has."""
    result = CliRunner().invoke(
        app,
        [
            "reconcile-aim",
            "--cluster",
            str(example_cluster),
            "--registry-mirror",
            MIRROR,
            "-n",
            "other-namespace",
            "--resync-seconds",
            "3600",
            "--insecure-registry",
            "localhost:5000",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # Templates are created, resolved and rolled out in -n only: none of the example's llm-serving objects is touched.
    assert {t["namespace"] for t in report["templates"]} == {"other-namespace"} and report["services"] == []
    templates = _objects(example_cluster, "AIMServiceTemplate")
    assert {t["metadata"]["namespace"] for t in templates} == {"llm-serving", "other-namespace"}
    assert all("status" not in t for t in templates if t["metadata"]["namespace"] == "llm-serving")
    short = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(example_cluster), "--resync-seconds", "0"])
    assert short.exit_code == 2 and "Traceback" not in short.output
