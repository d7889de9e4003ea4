"""The tune flow end to end on a manifests folder: replay, choose per model, write the choice (or not, dry run)."""

from __future__ import annotations

import datetime
import json
import pathlib
import shutil
import time

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from engine.optimize.spec import ANNOTATION_MIN_REPLICAS
from engine.simulate.tune import ANNOTATION_TUNED, COST_TOLERANCE, FLOOR_MARGIN, MAX_CALIBRATION
from flows.cli import app
from tests.servers.promtest.backfill import ModelHistory, backfilled_prometheus, openmetrics

REPO = pathlib.Path(__file__).resolve().parents[2]
SIMULATION = REPO / "deployments" / "simulation"
TRACE = REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"


def short_log(tmp_path: pathlib.Path, rows: int = 1500) -> pathlib.Path:
    """The first rows of the shipped 20-minute request log (a few minutes of traffic)."""
    lines = TRACE.read_text().splitlines()
    path = tmp_path / "requests.csv"
    path.write_text("\n".join(lines[: rows + 1]) + "\n")
    return path


def annotations(folder: pathlib.Path) -> dict[str, dict[str, str]]:
    found = {}
    for path in folder.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "VariantAutoscaling":
                found[doc["metadata"]["name"]] = dict(doc["metadata"].get("annotations") or {})
    return found


@pytest.mark.usefixtures("prefect_harness")
def test_tune_writes_each_models_choice_and_a_dry_run_writes_nothing(tmp_path: pathlib.Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(SIMULATION, cluster)
    log = short_log(tmp_path)
    before = {p.name: p.read_bytes() for p in cluster.iterdir() if p.is_file()}
    dry = CliRunner().invoke(
        app, ["tune", "--cluster", str(cluster), "--trace", str(log), "--slo-attainment", "0.85", "--dry-run", "--json"]
    )
    assert dry.exit_code == 0, dry.output
    report = json.loads(dry.output[dry.output.index("{") :])
    assert report["dry_run"] and not report["written"]
    assert {p.name: p.read_bytes() for p in cluster.iterdir() if p.is_file()} == before
    for model in report["models"]:
        for row in model["frontier"]:  # a static floor meets within FLOOR_MARGIN, anything else at the target
            margin = FLOOR_MARGIN if row["candidate"].startswith("static floor") else 0.0
            if abs(row["attainment"] - (0.85 - margin)) > 1e-4:  # the JSON rounds to 4 digits: no call at the edge
                assert row["meets"] == (row["attainment"] >= 0.85 - margin), row
        costs = [row["cost"] for row in model["frontier"] if row["meets"]]
        if model["met"]:  # of those within COST_TOLERANCE of the cheapest that met the target, the least attaining
            near = [r for r in model["frontier"] if r["meets"] and r["cost"] <= min(costs) * (1 + COST_TOLERANCE)]
            assert model["attainment"] == min(r["attainment"] for r in near)
    real = CliRunner().invoke(app, ["tune", "--cluster", str(cluster), "--trace", str(log), "--slo-attainment", "0.85"])
    assert real.exit_code == 0, real.output
    written = annotations(cluster)
    assert written and all(ANNOTATION_TUNED in a for a in written.values())
    record = json.loads(next(iter(written.values()))[ANNOTATION_TUNED])
    assert {"candidate", "attainment", "cost", "target", "at"} <= set(record) and record["target"] == 0.85
    # The manifests' own min-replicas "0" is kept under the choice: a floor replaces it, any other choice leaves it.
    for name, annotated in written.items():
        record = json.loads(annotated[ANNOTATION_TUNED])
        assert record["replaced"] == {ANNOTATION_MIN_REPLICAS: "0"}
        if not record["candidate"].startswith("static floor"):
            assert annotated[ANNOTATION_MIN_REPLICAS] == "0", name


def test_tune_refuses_a_bad_target_a_missing_log_and_an_endless_one_in_one_line(tmp_path: pathlib.Path) -> None:
    bad = CliRunner().invoke(
        app, ["tune", "--cluster", str(SIMULATION), "--trace", str(TRACE), "--slo-attainment", "1.5"]
    )
    assert bad.exit_code == 2 and "--slo-attainment" in bad.output
    missing = CliRunner().invoke(app, ["tune", "--cluster", str(SIMULATION), "--trace", str(tmp_path / "none.csv")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    # A timestamp off by centuries asked for more memory than any machine has (a MemoryError traceback).
    far = tmp_path / "far.csv"
    far.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,10\n1e18,10,10\n")
    long = CliRunner().invoke(app, ["tune", "--cluster", str(SIMULATION), "--trace", str(far), "--dry-run"])
    assert long.exit_code == 2 and "at most 366 days" in long.output and "Traceback" not in long.output


def statuses(folder: pathlib.Path) -> dict[str, dict[str, object]]:
    found = {}
    for path in folder.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "VariantAutoscaling":
                found[doc["metadata"]["name"]] = dict(doc.get("status") or {})
    return found


@pytest.mark.usefixtures("prefect_harness")
def test_tune_without_a_log_rebuilds_the_window_from_prometheus(tmp_path: pathlib.Path) -> None:
    """Twenty minutes of granite's traffic in Prometheus (backfilled), none of llama's: granite is tuned on its
    rebuilt window (annotations and status.tuning), llama keeps its settings."""
    cluster = tmp_path / "cluster"
    shutil.copytree(SIMULATION, cluster)
    rng = np.random.default_rng(0)
    granite = ModelHistory(
        "ibm/granite-13b",
        "llm-serving",
        per_minute=[int(c) for c in rng.poisson(90, 20)],
        prompt_tokens=[int(x) for x in rng.lognormal(6.8, 0.9, 2200)],
        output_tokens=[int(x) + 1 for x in rng.lognormal(5.0, 0.8, 2200)],
    )
    end = int(time.time() // 60) * 60 - 60
    process = backfilled_prometheus(tmp_path / "prometheus", openmetrics([granite], end - 20 * 60))
    try:
        result = CliRunner().invoke(
            app,
            ["tune", "--cluster", str(cluster), "--prometheus-url", process.url, "--window", "20m", "--json"],
        )
    finally:
        process.stop()
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    assert [m["model"] for m in report["models"]] == ["llm-serving/ibm/granite-13b"]
    written, status = annotations(cluster), statuses(cluster)
    tuned = {name for name, a in written.items() if ANNOTATION_TUNED in a}
    assert tuned == {name for name in written if name.startswith("granite")} and tuned
    for name in tuned:
        tuning = status[name]["tuning"]
        assert tuning["candidate"] == report["models"][0]["chosen"]
        # The window read, to the minute the run started in: enough to tune on the same traffic again (--end).
        length, _, until = tuning["traffic"].removesuffix(" from Prometheus").partition(" to ")
        ended = datetime.datetime.strptime(until, "%Y-%m-%dT%H:%MZ").replace(tzinfo=datetime.UTC).timestamp()
        assert length == "20m" and end < ended <= time.time()
        assert tuning["attained"] == report["models"][0]["attainment"] and "tunedAt" in tuning
        assert "calibration" not in tuning  # no latency histograms in this Prometheus: judged as replayed
    assert all("tuning" not in status[name] for name in written if name not in tuned)


@pytest.mark.usefixtures("prefect_harness")
def test_tune_from_prometheus_judges_candidates_by_what_the_cluster_attained(tmp_path: pathlib.Path) -> None:
    """Granite's window in Prometheus with its latency histograms: 40 % of its requests took 2 s to the first token
    (its target is 800 ms), so the cluster attained 60 % where the replay of the settings that ran reads far higher.
    The calibration stops at MAX_CALIBRATION, every candidate is judged that much lower, and the choice is the
    cheapest that meets the target so judged. A tuning for another target still replays the settings that ran under
    the targets they ran with."""
    rng = np.random.default_rng(1)
    per_minute = [int(c) for c in rng.poisson(90, 20)]
    total = sum(per_minute)
    granite = ModelHistory(
        "ibm/granite-13b",
        "llm-serving",
        per_minute=per_minute,
        prompt_tokens=[int(x) for x in rng.lognormal(6.8, 0.9, total)],
        output_tokens=[int(x) + 1 for x in rng.lognormal(5.0, 0.8, total)],
        ttft_s=[2.0 if i % 5 < 2 else 0.3 for i in range(total)],
        itl_s=[0.02] * total,
    )
    cluster = tmp_path / "cluster"
    shutil.copytree(SIMULATION, cluster)
    end = int(time.time() // 60) * 60 - 60
    process = backfilled_prometheus(tmp_path / "prometheus", openmetrics([granite], end - 20 * 60))
    # --end: both runs read the same 20 minutes, wherever the clock turns a minute between them.
    until = datetime.datetime.fromtimestamp(end, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = ["tune", "--cluster", str(cluster), "--prometheus-url", process.url, "--window", "20m", "--json"]
    command += ["--end", until]
    try:
        other = CliRunner().invoke(app, [*command, "--dry-run", "--slo-attainment", "0.8"])
        result = CliRunner().invoke(app, command)
    finally:
        process.stop()
    assert result.exit_code == 0, result.output
    assert other.exit_code == 0, other.output
    (model,) = json.loads(result.output[result.output.index("{") :])["models"]
    (for_other,) = json.loads(other.output[other.output.index("{") :])["models"]
    assert for_other["target"] == 0.8 and for_other["calibration"] == model["calibration"]
    calibration = model["calibration"]
    assert abs(calibration["measured"] - 0.60) < 0.01 and calibration["replayed"] > 0.60 + MAX_CALIBRATION
    assert calibration["capped"] and calibration["offset"] == MAX_CALIBRATION
    assert "as configured" not in {row["candidate"] for row in model["frontier"]}  # never a choice
    for row in model["frontier"]:
        assert abs(row["judged"] - (row["attainment"] - MAX_CALIBRATION)) < 2e-4
        margin = FLOOR_MARGIN if row["candidate"].startswith("static floor") else 0.0
        if abs(row["judged"] - (model["target"] - margin)) > 1e-4:  # rounded to 4 digits: no call at the edge
            assert row["meets"] == (row["judged"] >= model["target"] - margin), row
    if model["met"]:
        assert model["cost"] == min(row["cost"] for row in model["frontier"] if row["meets"])
    # The written record and status.tuning carry the offset the choice was judged by.
    written, status = annotations(cluster), statuses(cluster)
    granite = [name for name in written if name.startswith("granite")]
    assert granite and all(json.loads(written[n][ANNOTATION_TUNED])["calibration"] == MAX_CALIBRATION for n in granite)
    assert all(status[n]["tuning"]["calibration"] == MAX_CALIBRATION for n in granite)
    assert all(status[n]["tuning"]["traffic"] == f"20m to {until[:-4]}Z from Prometheus" for n in granite)


def test_the_default_window_reaches_prometheus(tmp_path: pathlib.Path) -> None:
    """``--window`` defaults to a day, which the command passes on as ``1d``: the flow reads it as a PromQL duration
    and goes on to Prometheus (unreachable here: one line, exit 2), instead of refusing its own default."""
    result = CliRunner().invoke(
        app, ["tune", "--cluster", str(SIMULATION), "--prometheus-url", "http://127.0.0.1:9", "--dry-run"]
    )
    assert result.exit_code == 2, result.output
    assert "Prometheus at http://127.0.0.1:9" in result.output and "invalid duration" not in result.output


def test_tune_without_a_log_or_a_prometheus_is_one_line(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before a flow run starts: no traffic source, or a window Prometheus cannot be read by the minute for."""
    monkeypatch.delenv("PROMETHEUS_URL", raising=False)
    result = CliRunner().invoke(app, ["tune", "--cluster", str(SIMULATION)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: no traffic to replay: give --trace (a request log) or --prometheus-url ($PROMETHEUS_URL)"
    )
    for window in ("0s", "90s"):
        odd = CliRunner().invoke(
            app, ["tune", "--cluster", str(SIMULATION), "--prometheus-url", "http://127.0.0.1:9", "--window", window]
        )
        assert odd.exit_code == 2, odd.output
        assert odd.output.strip().startswith(f"error: --window {window}: whole minutes"), odd.output


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        ("yesterday", "error: --end 'yesterday': not an ISO 8601 time such as 2026-11-30T06:00Z"),
        ("2999-01-01T00:00Z", "error: --end: end 2999-01-01T00:00:00Z is later than now: Prometheus holds no traffic"),
    ],
)
def test_an_end_that_is_not_a_past_time_is_one_line(end: str, expected: str) -> None:
    """Refused before a flow run starts, as the flow itself would refuse it."""
    result = CliRunner().invoke(
        app, ["tune", "--cluster", str(SIMULATION), "--prometheus-url", "http://127.0.0.1:9", "--end", end]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith(expected) and len(result.output.strip().splitlines()) == 1, result.output


def test_an_end_with_a_request_log_is_one_line(tmp_path: pathlib.Path) -> None:
    """A request log is replayed whole: an end would be ignored, so it is refused."""
    result = CliRunner().invoke(
        app, ["tune", "--cluster", str(SIMULATION), "--trace", str(short_log(tmp_path)), "--end", "2026-11-30T06:00Z"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: --end: the end of a window rebuilt from Prometheus; a request log (--trace) is replayed whole"
    )
