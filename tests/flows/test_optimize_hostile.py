"""Hostile manifests in the optimize flow: one bad object is reported naming its field, the others are written.

Each case edits one document of the bundled example cluster and runs ``modelplane optimize`` on it: never a
traceback, never a whole-run failure for one object's value.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tests.flows.test_optimize_local import by_kind

LLAMA = "10-llama-3.1-8b.yaml"
A100_VA = "kind: VariantAutoscaling\nmetadata:\n  name: llama-3-1-8b-a100\n"
A100_DEPLOYMENT = "kind: Deployment\nmetadata:\n  name: llama-3-1-8b-a100\n"


def edit(cluster: pathlib.Path, name: str, old: str, new: str) -> None:
    """Replace the first ``old`` in the cluster file ``name`` with ``new``."""
    path = cluster / name
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def run(cluster: pathlib.Path, metrics: pathlib.Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["optimize", "--cluster", str(cluster), "--metrics", str(metrics), *extra], terminal_width=250
    )
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, " ".join(result.output.split())


def a100_refusal(cluster: pathlib.Path, field: str) -> dict[str, str]:
    """The False condition of the A100 VariantAutoscaling naming ``field`` (the boundary's ``Ready``/``InvalidSpec``
    or the planner's ``OptimizationReady``/``InvalidConfiguration``)."""
    status = by_kind(cluster, "VariantAutoscaling")["llama-3-1-8b-a100"]["status"]
    refusals = [c for c in status["conditions"] if c["status"] == "False" and field in c["message"]]
    assert refusals and refusals[0]["reason"] in ("InvalidSpec", "InvalidConfiguration"), status
    return refusals[0]


def others_written(cluster: pathlib.Path) -> None:
    variants = by_kind(cluster, "VariantAutoscaling")
    for name in ("llama-3-1-8b-h100", "granite-13b-a100", "granite-13b-l40s"):
        conditions = {c["type"]: c for c in variants[name]["status"]["conditions"]}
        assert conditions["OptimizationReady"]["status"] == "True", name


VALUE_CASES: dict[str, tuple[Callable[[pathlib.Path], None], str]] = {
    "acceleratorCount beyond the solver": (
        lambda c: edit(c, LLAMA, "acceleratorCount: 1\n", "acceleratorCount: 1000000000000000000000000000000\n"),
        "spec.acceleratorCount",
    ),
    "maxBatchSize beyond memory": (
        lambda c: edit(c, LLAMA, "maxBatchSize: 256\n", "maxBatchSize: 100000000\n"),
        "spec.variantProfile.maxBatchSize",
    ),
    "profile overflowing to inf": (
        lambda c: edit(c, LLAMA, 'alpha: "20.58"\n        beta: "0.41"', 'alpha: "1e308"\n        beta: "1e308"'),
        "spec.variantProfile.perfParms.decodeParms.alpha",
    ),
    "profile underflowing to a denormal": (
        lambda c: edit(c, LLAMA, 'beta: "0.41"', 'beta: "1e-320"'),
        "spec.variantProfile.perfParms.decodeParms.beta",
    ),
    "target replicas negative": (
        lambda c: edit(c, LLAMA, "replicas: 2\n", "replicas: -1\n"),
        "spec.replicas",
    ),
    "target replicas a word": (
        lambda c: edit(c, LLAMA, "replicas: 2\n", 'replicas: "two"\n'),
        "spec.replicas",
    ),
    "target replicas beyond any cluster": (
        lambda c: edit(c, LLAMA, "replicas: 2\n", "replicas: 100000000000000000000000000000\n"),
        "spec.replicas",
    ),
}


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_an_out_of_range_value_invalidates_its_variant_only(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path, case: str
) -> None:
    make, field = VALUE_CASES[case]
    make(example_cluster)
    code, _ = run(example_cluster, example_metrics, "--dry-run")
    assert code == 3
    code, output = run(example_cluster, example_metrics)
    assert code == 3, output
    a100_refusal(example_cluster, field)
    others_written(example_cluster)


def test_a_status_conditions_scalar_is_replaced(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    edit(
        example_cluster,
        "20-kthena.yaml",
        "kind: AutoscalingPolicyBinding\nmetadata:\n  name: qwen2-5-7b-instruct\n  namespace: llm-serving\n",
        "kind: AutoscalingPolicyBinding\nmetadata:\n  name: qwen2-5-7b-instruct\n  namespace: llm-serving\n"
        "status:\n  conditions: 5\n",
    )
    code, output = run(example_cluster, example_metrics)
    assert code == 0, output
    binding = by_kind(example_cluster, "AutoscalingPolicyBinding")["qwen2-5-7b-instruct"]
    assert {c["type"] for c in binding["status"]["conditions"]} == {"MetricsAvailable", "OptimizationReady"}
    assert binding["status"]["desiredReplicas"] == 3


def test_a_recursive_alias_is_refused_with_file_and_line(
    prefect_harness: None,
    example_cluster: pathlib.Path,
    example_metrics: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    edit(example_cluster, LLAMA, A100_DEPLOYMENT, A100_DEPLOYMENT + "  annotations: &r {x: *r}\n")
    line = next(
        i for i, text in enumerate((example_cluster / LLAMA).read_text().splitlines(), 1) if "&r {x: *r}" in text
    )
    code, output = run(example_cluster, example_metrics)
    assert code == 3, output
    said = output + " ".join(r.getMessage() for r in caplog.records)
    assert f"{LLAMA}: document at line" in said and f"at line {line}, column" in said and "recursive alias" in said
    assert "&r" in (example_cluster / LLAMA).read_text()  # the file is left as written
    others = by_kind(example_cluster, "VariantAutoscaling")
    assert others["granite-13b-a100"]["status"]["conditions"]


NOT_OBJECTS = """kind: VariantAutoscaling
metadata: {name: no-api, namespace: llm-serving}
spec: {modelID: m}
---
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
spec: {modelID: m}
---
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: "oops"
spec: {modelID: m}
---
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: {namespace: llm-serving}
spec: {modelID: m}
---
- a
- b
---
just a scalar
---
apiVersion: 123
kind: VariantAutoscaling
metadata: {name: num-api, namespace: llm-serving}
spec: {modelID: m}
"""
NOT_OBJECT_LINES = {
    1: "apiVersion: Required value",
    5: "metadata: Required value",
    9: "metadata: must be a mapping",
    14: "metadata.name: Required value",
    19: "a manifest must be a mapping",
    22: "a manifest must be a mapping",
    24: "apiVersion: must be a string",
}


@pytest.mark.parametrize(
    "command",
    [["optimize", "--dry-run"], ["rollout-models"], ["reconcile-aim"], ["validate-manifests"]],
    ids=lambda c: c[0],
)
def test_documents_that_are_no_object_are_reported_by_every_flow(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path, command: list[str]
) -> None:
    (example_cluster / "90-bad.yaml").write_text(NOT_OBJECTS)
    extra = ["--metrics", str(example_metrics)] if command[0] == "optimize" else []
    result = CliRunner().invoke(app, [*command, "--cluster", str(example_cluster), *extra], terminal_width=400)
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    for line, problem in NOT_OBJECT_LINES.items():
        if command[0] == "validate-manifests":  # its table: file#document and the reason
            assert any("90-bad.yaml#" in text and problem.split(": ")[-1] in text for text in lines), problem
        else:
            assert any(f"90-bad.yaml: document at line {line}: " in t and problem in t for t in lines), (
                line,
                result.output,
            )


@pytest.mark.parametrize(
    "command", [["optimize", "--dry-run"], ["rollout-models"], ["warm-caches"], ["reconcile-aim"]], ids=lambda c: c[0]
)
def test_an_unreadable_manifest_fails_every_flow_naming_the_file(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path, command: list[str]
) -> None:
    (example_cluster / "91-broken.yaml").write_text(
        "apiVersion: workload.serving.volcano.sh/v1alpha1\nkind: Model\nmetadata: {name: broken, namespace: llm-serving}\n"
        "spec: {backends: [\n"
    )
    extra = ["--metrics", str(example_metrics)] if command[0] == "optimize" else []
    result = CliRunner().invoke(app, [*command, "--cluster", str(example_cluster), *extra], terminal_width=400)
    assert result.exit_code == 3, result.output
    assert any(
        "degraded: " in t and "91-broken.yaml: document at line 1: invalid YAML at line 5" in t
        for t in result.output.splitlines()
    ), result.output


def test_the_same_object_in_two_files_names_both(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    (example_cluster / "92-copy.yaml").write_text("# a copy\n" + (example_cluster / "00-namespaces.yaml").read_text())
    result = CliRunner().invoke(app, ["rollout-models", "--cluster", str(example_cluster)], terminal_width=400)
    assert result.exit_code == 3, result.output
    said = " ".join(result.output.split())
    assert (
        "92-copy.yaml: document at line" in said
        and "duplicate object" in said
        and "00-namespaces.yaml (document at line" in said
    )


def test_a_broken_saturation_configmap_degrades_the_run_naming_the_defaults_used(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    edit(example_cluster, "01-optimizer-config.yaml", "    kvCacheThreshold: 0.80\n", "    kvCacheThreshold: 5\n")
    edit(example_cluster, "01-optimizer-config.yaml", "    kvCacheThreshold: 0.75\n", "    kvCacheThreshold: [oops]\n")
    code, output = run(example_cluster, example_metrics, "--dry-run")
    assert code == 3, output
    assert "ConfigMap saturation-scaling-config: default: kv_cache_threshold must be between 0 and 1, got 5" in output
    assert "using the built-in defaults kvCacheThreshold=0.8, queueLengthThreshold=5, kvSpareTrigger=0.1" in output
    assert "ConfigMap saturation-scaling-config: granite-13b: kvCacheThreshold must be a number" in output
    assert "that override is skipped" in output
