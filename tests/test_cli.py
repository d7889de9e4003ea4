"""The `modelplane` CLI's validation and CRD commands."""

from __future__ import annotations

import pathlib
import shutil

import yaml
from typer.testing import CliRunner

from flows.cli import app

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_validate_accepts_the_example_cluster() -> None:
    result = CliRunner().invoke(app, ["validate", "--cluster", str(REPO / "deployments" / "examples")])
    assert result.exit_code == 0, result.output
    assert "0 invalid" in result.stdout and "VariantAutoscaling" in result.stdout


def test_validate_reports_each_bad_document_and_keeps_the_good(tmp_path: pathlib.Path) -> None:
    shutil.copy(REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml", tmp_path)
    bad = sorted((REPO / "tests" / "api" / "bad_inputs").glob("*.yaml"))[0]
    expected_path = next(line.split(":", 1)[1].strip() for line in bad.read_text().splitlines() if line.startswith("# expect-path:"))
    shutil.copy(bad, tmp_path / "bad.yaml")
    (tmp_path / "broken.yaml").write_text("a: [\n")
    result = CliRunner().invoke(app, ["validate", "--cluster", str(tmp_path)], terminal_width=250)
    assert result.exit_code == 3  # ran, degraded: some resources are invalid (flows/exitcodes.py)
    assert "4 valid, 2 invalid" in result.stdout
    assert expected_path in result.stdout and "broken.yaml" in result.stdout


def test_crds_prints_every_checked_in_crd() -> None:
    result = CliRunner().invoke(app, ["crds"])
    assert result.exit_code == 0
    printed = [d for d in yaml.safe_load_all(result.stdout) if d]
    on_disk = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "deployments" / "crds").glob("*.yaml"))]
    assert sorted(d["metadata"]["name"] for d in printed) == sorted(d["metadata"]["name"] for d in on_disk)
    assert {d["metadata"]["name"]: d for d in printed} == {d["metadata"]["name"]: d for d in on_disk}
