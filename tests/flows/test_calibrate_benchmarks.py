"""``modelplane calibrate --from-benchmark``: profiles printed from benchmark results, and offered to
VariantAutoscalings of the example cluster with ``--apply`` (written only where opted in)."""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tests.flows.test_calibrate_flow import NAMESPACE, condition, documents, opt_in

REPORTS = pathlib.Path(__file__).resolve().parents[1] / "engine" / "benchmark_reports"
BLIS = pathlib.Path(__file__).resolve().parents[2] / "deployments" / "benchmarks" / "planner-granite-3.1-8b-h100.json"
SWEEP = REPORTS / "vllm-sweep.jsonl"


def test_planner_rows_of_one_configuration_print_a_profile() -> None:
    result = CliRunner().invoke(
        app,
        ["calibrate", "--from-benchmark", str(BLIS), "--benchmark-config", "granite-3.1-8b-instruct H100x2"],
        terminal_width=250,
    )
    assert result.exit_code == 0, result.output
    assert "ibm-granite/granite-3.1-8b-instruct H100x2" in result.stdout and "H100x1" not in result.stdout
    assert "perfParms:" in result.stdout and "decodeParms:" in result.stdout and "512/256, 4096/512" in result.stdout
    assert "undetermined" not in result.stdout  # two prompt lengths and a rate sweep determine all four


def test_json_has_every_configuration_with_its_undetermined_parameters() -> None:
    result = CliRunner().invoke(app, ["calibrate", "--from-benchmark", str(BLIS), "--json"])
    assert result.exit_code == 0, result.output
    entries = {e["configuration"]: e for e in json.loads(result.stdout)}
    assert set(entries) == {"ibm-granite/granite-3.1-8b-instruct H100x1", "ibm-granite/granite-3.1-8b-instruct H100x2"}
    h2 = entries["ibm-granite/granite-3.1-8b-instruct H100x2"]
    assert h2["format"] == "llm-d planner table" and h2["points"] == 20 and h2["undetermined"] == {}
    h1 = entries["ibm-granite/granite-3.1-8b-instruct H100x1"]  # one 4,096-token row: the ITL slope is not pinned
    assert set(h1["undetermined"]) == {"beta"} and "does not grow measurably" in h1["undetermined"]["beta"]
    assert float(h2["perfParms"]["decodeParms"]["alpha"]) == pytest.approx(h2["fit"]["alpha"]["value"], rel=1e-3)


def test_apply_writes_only_the_opted_in_variant(example_cluster: pathlib.Path) -> None:
    opt_in(example_cluster, "llama-3-1-8b-h100")
    before = documents(example_cluster)
    result = CliRunner().invoke(
        app,
        [
            "calibrate",
            "--from-benchmark",
            str(SWEEP),
            "--cluster",
            str(example_cluster),
            "--apply",
            f"{NAMESPACE}/llama-3-1-8b-h100",
            "--apply",
            f"{NAMESPACE}/llama-3-1-8b-a100",
            "--apply",
            f"{NAMESPACE}/no-such-variant",
        ],
        terminal_width=250,
    )
    assert result.exit_code == 3, result.output  # the missing one is reported; the others proceeded
    assert "no-such-variant" in result.output
    after = documents(example_cluster)
    written = after["llama-3-1-8b-h100"]
    assert condition(written)["reason"] == "ProfileApplied"
    parms = written["spec"]["variantProfile"]["perfParms"]
    assert float(parms["decodeParms"]["alpha"]) == pytest.approx(8.0, rel=0.01)
    assert float(parms["prefillParms"]["delta"]) == pytest.approx(0.002, rel=0.01)
    proposed = after["llama-3-1-8b-a100"]
    assert condition(proposed)["reason"] == "ProfileProposed"
    assert proposed["spec"] == before["llama-3-1-8b-a100"]["spec"]


def test_apply_dry_run_writes_nothing(example_cluster: pathlib.Path) -> None:
    opt_in(example_cluster, "llama-3-1-8b-h100")
    before = {f.name: f.read_text() for f in example_cluster.glob("*.yaml")}
    result = CliRunner().invoke(
        app,
        ["calibrate", "--from-benchmark", str(SWEEP), "--cluster", str(example_cluster), "--dry-run"]
        + ["--apply", f"{NAMESPACE}/llama-3-1-8b-h100"],
        terminal_width=250,
    )
    assert result.exit_code == 0, result.output
    assert "ProfileApplied" in result.stdout and "dry run: nothing was written" in result.stdout
    assert {f.name: f.read_text() for f in example_cluster.glob("*.yaml")} == before


def test_cannot_run_is_one_line(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": []}))
    for args, message in [
        (["--from-benchmark", str(bad)], "not a benchmark report"),
        (["--from-benchmark", str(BLIS), "--benchmark-config", "nothing-like-this"], "no benchmark points"),
        (["--from-benchmark", str(BLIS), "--apply", "ns/v"], "exactly one configuration"),
        (["--from-benchmark", str(SWEEP), "--apply", "no-slash"], "expected NAMESPACE/NAME"),
        (["--apply", "ns/v"], "go with --from-benchmark"),
        (["--from-benchmark", str(SWEEP), "--prometheus-url", "http://p:9090"], "--prometheus-url: metrics options"),
        (["--from-benchmark", str(SWEEP), "--window", "7m", "--namespace", "a"], "--namespace, --window: metrics"),
    ]:
        result = CliRunner().invoke(app, ["calibrate", *args])
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
