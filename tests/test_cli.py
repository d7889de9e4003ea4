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
    expected_path = next(
        line.split(":", 1)[1].strip() for line in bad.read_text().splitlines() if line.startswith("# expect-path:")
    )
    shutil.copy(bad, tmp_path / "bad.yaml")
    (tmp_path / "broken.yaml").write_text("a: [\n")
    result = CliRunner().invoke(app, ["validate", "--cluster", str(tmp_path)], terminal_width=250)
    assert result.exit_code == 3  # ran, degraded: some resources are invalid (flows/exitcodes.py)
    assert "4 valid, 2 invalid" in result.stdout
    assert expected_path in result.stdout and "broken.yaml" in result.stdout


def test_validate_json_lists_every_resource_and_says_what_is_invalid(tmp_path: pathlib.Path) -> None:
    import json

    shutil.copy(REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml", tmp_path)
    (tmp_path / "broken.yaml").write_text("a: [\n")
    result = CliRunner().invoke(app, ["validate", "--cluster", str(tmp_path), "--json"])
    assert result.exit_code == 3
    rows = json.loads(result.stdout)
    assert [r["result"] for r in rows].count("valid") == 4 and len(rows) == 5
    broken = next(r for r in rows if r["result"] != "valid")
    assert broken["source"] == "broken.yaml"
    assert [line for line in result.stderr.splitlines() if line.startswith("degraded: ")] == [
        f"degraded: broken.yaml: {broken['result']}"
    ]


def test_crds_prints_every_checked_in_crd() -> None:
    result = CliRunner().invoke(app, ["crds"])
    assert result.exit_code == 0
    printed = [d for d in yaml.safe_load_all(result.stdout) if d]
    on_disk = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "deployments" / "crds").glob("*.yaml"))]
    assert sorted(d["metadata"]["name"] for d in printed) == sorted(d["metadata"]["name"] for d in on_disk)
    assert {d["metadata"]["name"]: d for d in printed} == {d["metadata"]["name"]: d for d in on_disk}


def test_validate_checks_the_items_of_a_list(tmp_path: pathlib.Path) -> None:
    """A `kubectl get -o yaml` List is validated item by item, as the local backend loads it."""
    documents = [
        d for d in yaml.safe_load_all((REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml").read_text()) if d
    ]
    variant = next(d for d in documents if d["kind"] == "VariantAutoscaling")
    variant["spec"]["variantProfile"]["maxBatchSize"] = 0
    (tmp_path / "dump.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": documents, "metadata": {}})
    )
    result = CliRunner().invoke(app, ["validate", "--cluster", str(tmp_path)], terminal_width=250)
    assert result.exit_code == 3, result.output
    assert "3 valid, 1 invalid" in result.stdout and "spec.variantProfile.maxBatchSize" in result.stdout
    assert "items[1]" in result.stdout


def test_unquoted_number_for_a_string_is_invalid_for_validate_and_optimize(tmp_path: pathlib.Path) -> None:
    from engine.optimize.spec import SpecError, parse_variant

    documents = [
        d for d in yaml.safe_load_all((REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml").read_text()) if d
    ]
    variant = next(d for d in documents if d["kind"] == "VariantAutoscaling")
    variant["spec"]["variantCost"] = 40  # unquoted: the CRD wants a string
    (tmp_path / "va.yaml").write_text(yaml.safe_dump(variant))
    result = CliRunner().invoke(app, ["validate", "--cluster", str(tmp_path)], terminal_width=250)
    assert result.exit_code == 3 and "spec.variantCost" in result.stdout
    try:
        parse_variant(variant)
    except SpecError as exc:
        assert exc.field == "spec.variantCost"
    else:
        raise AssertionError("the optimizer accepted what validate rejects")
