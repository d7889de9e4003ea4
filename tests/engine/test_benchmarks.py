"""Benchmark reports become points and profiles: each format's fields read as its tool writes them.

The fixtures in ``benchmark_reports/``: a rate sweep (1, 4, 8, 12 requests/s, 1,000 prompt and 200 output
tokens) of a replica with the profile ``alpha=8, beta=0.05, gamma=20, delta=0.002`` (the queueing model's
means), written as ``vllm bench serve --save-result``/``--append-result`` results, a guidellm report and
inference-perf stage reports; and rows of the llm-d planner's ``benchmarks_BLIS.json`` (granite-3.1-8b on
one and two H100s, as published; ``deployments/benchmarks/``).
"""

from __future__ import annotations

import json
import pathlib

import pytest

from engine.perf.queueing import PerfProfile, Workload, analyze
from engine.simulate.benchmarks import (
    NOMINAL_REQUESTS,
    BenchmarkFormatError,
    BenchmarkPoint,
    fit_benchmark,
    group_points,
    points_from_document,
)
from engine.simulate.calibrate import Unidentifiable
from tasks.benchmarks import read_benchmark_files

REPORTS = pathlib.Path(__file__).parent / "benchmark_reports"
TRUE = PerfProfile(alpha=8.0, beta=0.05, gamma=20.0, delta=0.002, max_batch=256)
RATES = [1.0, 4.0, 8.0, 12.0]


PLANNER = (
    pathlib.Path(__file__).resolve().parents[2] / "deployments" / "benchmarks" / "planner-granite-3.1-8b-h100.json"
)


def _load(name: str) -> object:
    return json.loads((REPORTS / name).read_text())


def _load_planner() -> object:
    return json.loads(PLANNER.read_text())


def test_vllm_result_fields() -> None:
    name, points = points_from_document(_load("vllm-4qps.json"), "vllm-4qps.json")
    assert name == "vllm bench serve result"
    (point,) = points
    doc = _load("vllm-4qps.json")
    assert isinstance(doc, dict)
    assert point.config == "meta-llama/Llama-3.1-8B-Instruct"
    assert point.rate_rps == 4.0
    assert point.throughput_rps == pytest.approx(doc["completed"] / doc["duration"])
    assert (point.in_tokens, point.out_tokens) == (1000.0, 200.0)
    assert point.ttft_ms == doc["mean_ttft_ms"] and point.itl_ms == doc["mean_itl_ms"]
    assert point.e2e_ms == doc["mean_e2el_ms"] and point.requests == 200


def test_vllm_infinite_rate_and_tpot_fallback() -> None:
    doc = dict(_load("vllm-4qps.json"))  # type: ignore[arg-type]
    doc["request_rate"] = "inf"
    del doc["mean_itl_ms"]
    (point,) = points_from_document(doc, "f")[1]
    assert point.rate_rps is None and point.itl_ms == doc["mean_tpot_ms"]


def test_vllm_missing_field_is_named() -> None:
    doc = dict(_load("vllm-4qps.json"))  # type: ignore[arg-type]
    del doc["total_input_tokens"]
    with pytest.raises(BenchmarkFormatError, match=r"run\.json: missing total_input_tokens"):
        points_from_document(doc, "run.json")


def test_guidellm_report_fields() -> None:
    name, points = points_from_document(_load("guidellm-benchmarks.json"), "g.json")
    assert name == "guidellm report"
    assert [p.rate_rps for p in points] == RATES
    first = _load("guidellm-benchmarks.json")["benchmarks"][0]["metrics"]  # type: ignore[index]
    assert points[0].ttft_ms == first["time_to_first_token_ms"]["successful"]["mean"]
    assert points[0].itl_ms == first["inter_token_latency_ms"]["successful"]["mean"]
    assert points[0].concurrency == first["request_concurrency"]["successful"]["mean"]
    assert points[0].e2e_ms == pytest.approx(first["request_latency"]["successful"]["mean"] * 1000)
    assert points[0].requests == 300


def test_inference_perf_report_fields_in_seconds() -> None:
    name, points = points_from_document(_load("inference-perf-stage_1_lifecycle_metrics.json"), "ip.json")
    assert name == "inference-perf report"
    (point,) = points
    expected = analyze(TRUE, Workload(1000, 200), 4.0)
    assert point.rate_rps == 4.0 and point.requests == 240
    assert point.ttft_ms == pytest.approx(expected.ttft_ms) and point.itl_ms == pytest.approx(expected.itl_ms)
    assert (point.in_tokens, point.out_tokens) == (1000.0, 200.0)


def test_planner_table_rows_and_configurations() -> None:
    name, points = points_from_document(_load_planner(), "blis.json")
    assert name == "llm-d planner table"
    groups = group_points(points)
    assert list(groups) == ["ibm-granite/granite-3.1-8b-instruct H100x1", "ibm-granite/granite-3.1-8b-instruct H100x2"]
    first = groups["ibm-granite/granite-3.1-8b-instruct H100x1"][0]
    assert (first.rate_rps, first.throughput_rps, first.ttft_ms, first.itl_ms) == (1.0, 0.991, 21.951, 10.764)
    assert first.requests == NOMINAL_REQUESTS  # the table does not count requests: equal weights


def test_unknown_document_is_refused_naming_the_file() -> None:
    with pytest.raises(BenchmarkFormatError, match=r"^x\.json: not a benchmark report"):
        points_from_document({"results": []}, "x.json")


def test_little_law_batch() -> None:
    point = BenchmarkPoint("c", 2.0, 2.0, 100, 11, ttft_ms=50.0, itl_ms=10.0)
    assert point.batch == pytest.approx(2.0 * (50 + 100) / 1000)
    window = point.window()
    assert window.batch == pytest.approx(point.batch)
    assert window.itl_sum_s / window.itl_count * 1000 == pytest.approx(10.0)


@pytest.mark.parametrize(
    "files",
    [
        ["vllm-sweep.jsonl"],
        ["guidellm-benchmarks.json"],
        [f"inference-perf-stage_{i}_lifecycle_metrics.json" for i in range(4)],
    ],
)
def test_every_format_recovers_the_decode_law(files: list[str]) -> None:
    """The sweep's ITL is the model's alpha + beta*c: the fit returns both within 1 %."""
    read = read_benchmark_files([REPORTS / f for f in files])
    groups = group_points([p for _, p in read])
    assert len(groups) == 1
    fit = fit_benchmark(next(iter(groups.values())))
    assert "alpha" not in fit.undetermined and "beta" not in fit.undetermined
    assert fit.alpha.value == pytest.approx(TRUE.alpha, rel=0.01)
    assert fit.beta.value == pytest.approx(TRUE.beta, rel=0.01)


def test_one_prompt_length_with_flat_ttft_leaves_delta_undetermined() -> None:
    """The planner's 512/256 rows of granite on one H100: TTFT does not grow with the batch, so delta is unknown."""
    points = [
        p
        for p in points_from_document(_load_planner(), "blis.json")[1]
        if p.config.endswith("H100x1") and p.in_tokens == 512
    ]
    fit = fit_benchmark(points)
    assert set(fit.undetermined) == {"delta"}
    assert "does not grow measurably" in fit.undetermined["delta"]
    assert fit.gamma.value == pytest.approx(22.0, rel=0.05)


def test_two_prompt_lengths_determine_gamma_and_delta() -> None:
    points = group_points(points_from_document(_load_planner(), "blis.json")[1])
    fit = fit_benchmark(points["ibm-granite/granite-3.1-8b-instruct H100x2"])
    assert "gamma" not in fit.undetermined and "delta" not in fit.undetermined
    assert fit.delta.low > 0


def test_too_few_points_is_unidentifiable() -> None:
    points = points_from_document(_load("vllm-4qps.json"), "f")[1]
    with pytest.raises(Unidentifiable, match="need runs at 3 or more request rates below capacity"):
        fit_benchmark(points)


def test_json_lines_and_bad_files(tmp_path: pathlib.Path) -> None:
    assert len(read_benchmark_files([REPORTS / "vllm-sweep.jsonl"])) == 4
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BenchmarkFormatError, match=r"bad\.json: invalid JSON"):
        read_benchmark_files([bad])
    with pytest.raises(BenchmarkFormatError, match="cannot read"):
        read_benchmark_files([tmp_path / "missing.json"])


def test_blis_bench_measures_the_highest_rate_and_predicts_it(tmp_path: pathlib.Path) -> None:
    """bench/blis.py on the shipped granite rows: the interpolated crossing, a censored sweep, the missing-table error."""
    from bench.blis import TableMissing, evaluate_table, measured_max_rate, read_table

    rows = {r.config: r for r in evaluate_table(_load_planner())}  # type: ignore[arg-type]
    one_row = rows["ibm-granite/granite-3.1-8b-instruct H100x1"]  # a single 4,096/512 row: errors, no highest rate
    assert one_row.fit is not None and one_row.ttft_mape is not None and one_row.actual is None
    two = rows["ibm-granite/granite-3.1-8b-instruct H100x2"]
    assert two.censored and two.actual == 3.0 and two.predicted is not None and two.rate_error is None
    points = [BenchmarkPoint("c", r, r, 4096, 512, ttft_ms=100.0, itl_ms=10.0 + 4 * r) for r in (1.0, 2.0, 3.0)]
    # load max(TTFT/T, ITL/I) per rate: 14/17.5 = 0.8, 18/17.5 > 1: crossing interpolated between rates 1 and 2
    rate, censored = measured_max_rate(points, ttft=1000.0, itl=17.5)
    assert not censored and rate == pytest.approx(1.0 + (1.0 - 0.8) / (18 / 17.5 - 0.8))
    with pytest.raises(TableMissing, match="no such file"):
        read_table(tmp_path / "missing.json")


def test_runs_past_capacity_are_left_out_of_the_fit() -> None:
    """A run served 20 % short of its rate (requests queued without bound) would read its wait as prefill time."""
    read = [p for _, p in read_benchmark_files([REPORTS / "vllm-sweep.jsonl"])]
    past = BenchmarkPoint("c", 20.0, 15.0, 1000.0, 200.0, ttft_ms=9000.0, itl_ms=40.0, requests=200)
    assert past.saturated and not any(p.saturated for p in read)
    fit = fit_benchmark([*read, past])
    assert fit.gamma.value == pytest.approx(TRUE.gamma, rel=0.01) and fit.windows == len(read)
    assert any("1 point(s) past capacity left out" in note for note in fit.notes)
