"""``--dry-run`` writes nothing, anywhere: not one byte of the cluster folder changes (manifests, status, the
bookkeeping sidecar and its journal, annotations, lock files) and no file appears or goes, with invalid objects
in it that a real run would mark. Every command that has ``--dry-run`` is run (one CLI invocation per test:
Prefect's console log handler keeps the first CliRunner's stream)."""

from __future__ import annotations

import pathlib

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from flows.cli import app
from tasks.calibrate import write_windows_file

REPO = pathlib.Path(__file__).resolve().parents[2]

BAD_OBJECTS = """
---
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata:
  name: bad-model-id
  namespace: llm-serving
spec:
  modelID: 123
---
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata:
  name: zz/../../escaped
  namespace: llm-serving
spec:
  modelID: m
---
apiVersion: registry.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata:
  name: bad-binding
  namespace: llm-serving
spec:
  policyRef: 5
"""


def dry_run_args(name: str, tmp_path: pathlib.Path) -> list[str]:
    """What each command with ``--dry-run`` needs beside the cluster to run offline."""
    if name == "optimize-allocation":
        return ["--metrics", str(REPO / "deployments" / "example-metrics.yaml")]
    if name == "tune-sizing":
        return ["--trace", str(REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"), "--duration", "60"]
    if name == "calibrate-profiles":
        windows = tmp_path / "windows.yaml"
        write_windows_file(windows, 300.0, {})
        return ["--windows", str(windows)]
    raise AssertionError(f"{name} has --dry-run: add what it needs to run here")


def commands_with_dry_run() -> list[str]:
    group = get_command(app)
    return sorted(
        name
        for name, command in group.commands.items()  # type: ignore[attr-defined]
        if not command.hidden and any("--dry-run" in getattr(p, "opts", ()) for p in command.params)
    )


def every_file(root: pathlib.Path) -> dict[str, bytes]:
    """Every file below ``root``, hidden ones included, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_dry_run_commands_are_the_ones_tested() -> None:
    assert commands_with_dry_run() == ["calibrate-profiles", "optimize-allocation", "tune-sizing"]


@pytest.mark.parametrize("name", ["calibrate-profiles", "optimize-allocation", "tune-sizing"])
def test_a_dry_run_changes_no_byte_of_the_cluster_folder(
    name: str, example_cluster: pathlib.Path, tmp_path: pathlib.Path, prefect_harness: None
) -> None:
    (example_cluster / "90-bad.yaml").write_text(BAD_OBJECTS)
    before = every_file(example_cluster)
    result = CliRunner().invoke(
        app, [name, "--cluster", str(example_cluster), "--dry-run", *dry_run_args(name, tmp_path)], terminal_width=250
    )
    assert result.exit_code == 3, result.output  # degraded: the bad objects are reported, not written
    assert result.stdout.rstrip().endswith("dry run: nothing was written"), result.stdout[-500:]
    after = every_file(example_cluster)
    assert sorted(after) == sorted(before)  # no state journal, no lock file, no new manifest
    assert [f for f in before if after[f] != before[f]] == []
