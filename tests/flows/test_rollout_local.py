"""The README's main command on the example cluster (local manifests backend): the Kthena Model is rolled
out, the optimize cycle scales its backend through the binding, and a second rollout changes nothing.

(One CLI invocation per test: Prefect's console log handler keeps the first CliRunner's stream.)
"""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

from engine.rollout.workloads import ANNOTATION_LAST_APPLIED, value_digest
from flows.cli import app
from flows.optimize import optimize
from flows.rollout_models import rollout_models
from flows.serve_openmodel import ServeError, serve_openmodel
from tasks.clients.cluster import LocalCluster, NotFound

DEPLOYMENT = "deepseek-r1-distill-qwen-7b-vllm-a100"


def snapshot(directory: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): p.read_text()
        for p in sorted(directory.rglob("*.yaml"))
        if not p.name.startswith(".")
    }


def test_demo_rolls_out_the_kthena_model_and_optimize_scales_it(
    example_cluster: pathlib.Path, example_metrics: pathlib.Path, prefect_harness: None
) -> None:
    result = CliRunner().invoke(app, ["rollout-models", "--cluster", str(example_cluster)], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert f"+Deployment/{DEPLOYMENT}" in result.stdout and "0 failed" in result.stdout

    cluster = LocalCluster(str(example_cluster))
    pod = cluster.get("apps/v1", "Deployment", DEPLOYMENT, "llm-serving")["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["command"][:3] == ["modelplane", "cache", "fill"]
    assert pod["volumes"][0] == {
        "name": "cache",
        "hostPath": {"path": "/var/cache/models", "type": "DirectoryOrCreate"},
    }
    model = cluster.get("registry.volcano.sh/v1alpha1", "Model", "deepseek-r1-distill-qwen-7b", "llm-serving")
    assert {c["type"]: c["status"] for c in model["status"]["conditions"]} == {"Initialized": "True", "Active": "False"}

    before = snapshot(example_cluster)
    assert rollout_models(cluster=str(example_cluster)).summary == "1 models, 0 changed, 0 failed"
    assert snapshot(example_cluster) == before  # nothing written
    named_thrice = ["llm-serving"] * 3  # each Model was reconciled once per time its namespace was named
    assert rollout_models(cluster=str(example_cluster), namespaces=named_thrice).summary.startswith("1 models")

    optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))
    scaled = LocalCluster(str(example_cluster)).get("apps/v1", "Deployment", DEPLOYMENT, "llm-serving")
    assert scaled["spec"]["replicas"] == 2  # 8 waiting on one pod against a target of 5


def test_failed_model_exits_non_zero(example_cluster: pathlib.Path, prefect_harness: None) -> None:
    model = example_cluster / "20-kthena.yaml"
    model.write_text(model.read_text().replace("scalingCost: 40", "scalingCost: 40\n      scaleToZeroGracePeriod: 45m"))
    result = CliRunner().invoke(app, ["rollout-models", "--cluster", str(example_cluster)], terminal_width=250)
    assert result.exit_code == 3 and "spec.backends[0].scaleToZeroGracePeriod" in result.stdout


def test_openmodel_waits_for_its_cache_and_a_missing_one_is_a_clear_error(
    example_cluster: pathlib.Path, prefect_harness: None
) -> None:
    report = serve_openmodel(model="qwen2-5-0-5b-instruct", namespace="llm-serving", cluster=str(example_cluster))
    assert report.state == "WaitingForCache"
    caches = LocalCluster(str(example_cluster)).list("aim.silogen.ai/v1alpha1", "ModelCache", "llm-serving")
    assert any(c["spec"]["sourceUri"].startswith("hf://Qwen/Qwen2.5-0.5B-Instruct") for c in caches)
    with pytest.raises(ServeError, match="not found"):
        serve_openmodel(model="no-such-model", namespace="llm-serving", cluster=str(example_cluster))
    result = CliRunner().invoke(
        app, ["serve-openmodel", "no-such-model", "-n", "llm-serving", "--cluster", str(example_cluster)]
    )
    assert (
        result.exit_code == 2
        and "OpenModel 'no-such-model' not found" in result.output
        and "Traceback" not in result.output
    )


HOSTILE_MODEL = """
---
apiVersion: registry.volcano.sh/v1alpha1
kind: Model
metadata:
  name: {name}
  namespace: llm-serving
spec:
  backends:
    - name: b
      type: vLLM
      modelURI: hf://org/m
      minReplicas: 1
      maxReplicas: 1
      workers:
        - type: server
          image: vllm/vllm-openai:v0.10.1
          replicas: 1
          pods: 1
"""


def files_beside(cluster: pathlib.Path) -> set[pathlib.Path]:
    """Every path below the cluster folder's parent that is not in the cluster folder."""
    return {p for p in cluster.parent.rglob("*") if cluster not in (p, *p.parents)}


def test_a_hostile_model_name_writes_nothing_outside_and_the_others_roll_out(
    example_cluster: pathlib.Path, prefect_harness: None
) -> None:
    outside = example_cluster.parent / "outside"
    outside.mkdir()
    name = "zz/" + "../" * 40 + str(outside).lstrip("/") + "/escaped"  # ../ up to / then down to `outside`
    (example_cluster / "20-kthena.yaml").open("a").write(HOSTILE_MODEL.format(name=name))
    around = files_beside(example_cluster)
    result = CliRunner().invoke(app, ["rollout-models", "--cluster", str(example_cluster)], terminal_width=250)
    assert result.exit_code == 3, result.output
    assert list(outside.iterdir()) == []  # before the fix: outside/escaped-route.yaml
    assert files_beside(example_cluster) == around
    assert "20-kthena.yaml:" in result.output and "invalid: metadata.name" in result.output
    assert f"Model llm-serving/{name}" in result.output
    assert f"+Deployment/{DEPLOYMENT}" in result.stdout  # the valid Model still rolled out
    assert "escaped" not in "".join(p.name for p in example_cluster.rglob("*"))
    hostile = LocalCluster(str(example_cluster)).get("registry.volcano.sh/v1alpha1", "Model", name, "llm-serving")
    assert "status" not in hostile  # never addressed, not even to be marked


def annotations_of_every_object(cluster: LocalCluster) -> str:
    kinds = [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("v1", "ConfigMap"),
        ("aim.silogen.ai/v1alpha1", "ModelCache"),
    ]
    kinds += [("registry.volcano.sh/v1alpha1", k) for k in ("AutoscalingPolicy", "AutoscalingPolicyBinding")]
    return json.dumps([o["metadata"].get("annotations") for kind in kinds for o in cluster.list(*kind)])


def test_a_plain_credential_in_a_model_env_never_reaches_annotations(
    example_cluster: pathlib.Path, prefect_harness: None
) -> None:
    token, secret = "hf_plainTokenValue0123456789", "plain/aws+secret/value/0123456789"
    manifest = example_cluster / "20-kthena.yaml"
    plain = f"""        - name: HF_TOKEN
          value: {token}
        - name: AWS_SECRET_ACCESS_KEY
          value: {secret}
      minReplicas: 1"""
    manifest.write_text(manifest.read_text().replace("      minReplicas: 1", plain, 1))

    assert rollout_models(cluster=str(example_cluster)).summary == "1 models, 1 changed, 0 failed"
    cluster = LocalCluster(str(example_cluster))
    deployment = cluster.get("apps/v1", "Deployment", DEPLOYMENT, "llm-serving")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"] == token  # the workload runs with what the Model says, as Kthena's would
    annotations = annotations_of_every_object(cluster)
    assert token not in annotations and secret not in annotations  # before: in modelplane.io/last-applied
    assert value_digest("HF_TOKEN", token) in deployment["metadata"]["annotations"][ANNOTATION_LAST_APPLIED]
    warnings = [e for e in cluster.list("v1", "Event", "llm-serving") if e["reason"] == "PlainTextCredential"]
    assert {e["involvedObject"]["kind"] for e in warnings} == {"Model"} and {e["type"] for e in warnings} == {"Warning"}
    messages = " ".join(e["message"] for e in warnings)
    assert "HF_TOKEN" in messages and "AWS_SECRET_ACCESS_KEY" in messages and "HF_ENDPOINT" not in messages
    assert token not in messages and secret not in messages

    manifest.write_text(manifest.read_text().replace(token, token + "-rotated"))  # a changed value still rolls out
    assert rollout_models(cluster=str(example_cluster)).summary == "1 models, 1 changed, 0 failed"
    rotated = LocalCluster(str(example_cluster)).get("apps/v1", "Deployment", DEPLOYMENT, "llm-serving")
    env = {e["name"]: e.get("value") for e in rotated["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"] == token + "-rotated"
    assert value_digest("HF_TOKEN", token + "-rotated") in rotated["metadata"]["annotations"][ANNOTATION_LAST_APPLIED]
    assert token not in annotations_of_every_object(LocalCluster(str(example_cluster)))


def test_a_model_too_large_for_its_workloads_annotations_is_invalid_and_nothing_is_written(
    example_cluster: pathlib.Path, prefect_harness: None
) -> None:
    """What a workload renders is kept in its last-applied annotation, and an object's annotations may hold 256 KiB
    in all: a Model whose spec renders more is refused before any write, its condition saying what is too large
    (before: the API server's 422 on the Deployment, after its Services were written)."""
    manifest = example_cluster / "20-kthena.yaml"
    large = "        - name: VLLM_EXTRA_NOTES\n          value: " + "n" * 300_000 + "\n      minReplicas: 1"
    manifest.write_text(manifest.read_text().replace("      minReplicas: 1", large, 1))
    before = snapshot(example_cluster)

    report = rollout_models(cluster=str(example_cluster))
    assert report.summary.endswith(", 1 failed")  # its status written, nothing else
    cluster = LocalCluster(str(example_cluster))
    model = cluster.get("registry.volcano.sh/v1alpha1", "Model", "deepseek-r1-distill-qwen-7b", "llm-serving")
    failed = {c["type"]: c for c in model["status"]["conditions"]}["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "InvalidModel")
    assert failed["message"].startswith(f"Deployment/{DEPLOYMENT}: metadata.annotations: Too long: must have at most")
    assert f"the largest {ANNOTATION_LAST_APPLIED} " in failed["message"]
    after = snapshot(example_cluster)
    changed = {path for path in after if after[path] != before.get(path)}
    assert changed <= {"20-kthena.yaml"}  # only the Model's status (and no child) was written
    with pytest.raises(NotFound):
        cluster.get("apps/v1", "Deployment", DEPLOYMENT, "llm-serving")


def test_a_model_being_deleted_gets_no_workloads_and_a_hand_written_generation_one_line(
    example_cluster: pathlib.Path, prefect_harness: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A Model a finalizer holds in deletion gets no workloads (they would outlive it; a foreground deletion would
    wait on each one made). Before, the rollout created its Deployment, Service, route and binding. A second Model
    whose ``metadata.generation`` is text is reported on one line, as a document no API server could decode; before,
    pydantic's four-line ``Condition`` error."""
    model = example_cluster / "20-kthena.yaml"
    model.write_text(
        model.read_text().replace(
            "  name: deepseek-r1-distill-qwen-7b\n  namespace: llm-serving\n",
            "  name: deepseek-r1-distill-qwen-7b\n  namespace: llm-serving\n"
            "  finalizers: [example.com/hold]\n  deletionTimestamp: '2026-01-01T00:00:00Z'\n",
            1,
        )
        + HOSTILE_MODEL.format(name="numbered").replace(
            "  namespace: llm-serving\n", "  namespace: llm-serving\n  generation: two\n", 1
        )
    )
    before = snapshot(example_cluster)
    result = CliRunner().invoke(app, ["rollout-models", "--cluster", str(example_cluster)], terminal_width=250)
    assert result.exit_code == 3, result.output
    assert "Model llm-serving/deepseek-r1-distill-qwen-7b is being deleted: left alone" in caplog.messages
    degraded = [line for line in result.output.splitlines() if line.startswith("degraded:")]
    assert len(degraded) == 1 and degraded[0].endswith(
        "/20-kthena.yaml: document at line 138: metadata.generation: must be an integer: left out, unreadable"
    )
    cluster = LocalCluster(str(example_cluster))
    with pytest.raises(NotFound):
        cluster.get("apps/v1", "Deployment", DEPLOYMENT, "llm-serving")
    held = cluster.get("registry.volcano.sh/v1alpha1", "Model", "deepseek-r1-distill-qwen-7b", "llm-serving")
    assert "status" not in held
    assert {p for p in snapshot(example_cluster) if p not in before} == set()  # no file of a new object
