"""How calibrate-profiles reads Prometheus: one model at a time (a model whose queries fail costs only its own
variants), every k-th window past the per-variant limit, each answer folded per pod as it arrives, long ranges
in pieces under the sample limit."""

from __future__ import annotations

import json
import math
import pathlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import tasks.calibrate as calibrate_task
from engine.simulate.calibrate import Window
from flows.cli import app
from tasks.calibrate import SERIES, collect_windows, prometheus_windows, write_windows_file
from tasks.clients.metrics.snapshot import MetricsUnavailable

NAMESPACE = "llm-serving"
END = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def batch(t: np.ndarray, pod: int) -> np.ndarray:
    """The mean batch of pod number ``pod`` at times ``t``: a daily cycle and a faster one, phase per pod."""
    phase = 0.37 * pod
    daily = 30.0 * (1.0 + np.sin(2 * math.pi * t / 86400.0 + phase)) / 2
    return 1.0 + daily + 8.0 * (1.0 + np.sin(2 * math.pi * t / 3600.0 * 1.7 + phase)) / 2


def sample(series: str, t: np.ndarray, window: float, pod: int) -> np.ndarray:
    """The value of ``series``'s query over the window ending at ``t`` (a profile alpha 20.58, beta 0.41)."""
    b = batch(t, pod)
    requests = b * window / 8.0
    per_request = {
        SERIES["requests"]: 1.0,
        SERIES["ttft_sum_s"]: (5.2 + 9.0 * (b + 1.0)) / 1000.0,
        SERIES["queue_sum_s"]: 0.001,
        SERIES["itl_sum_s"]: 180.0 * (20.58 + 0.41 * b) / 1000.0,
        SERIES["itl_count"]: 180.0,
        SERIES["prompt_tokens_sum"]: 900.0,
    }
    if series == SERIES["inference_sum_s"]:
        return b * window
    if series == "vllm:num_requests_running":
        return b
    return requests * per_request[series]


@dataclass
class Query:
    model: str
    promql: str
    step: float
    samples: int


class FakePrometheus:
    """Range queries as Prometheus answers them (evaluations ``start + i*step`` up to ``end``, ``[W]`` windows,
    ``offset``), over ``pods`` per model; with ``fail_first``, every query for the model asked first is refused."""

    def __init__(self, pods: dict[str, list[str]], fail_first: bool = False) -> None:
        self.pods = pods
        self.fail_first = fail_first
        self.failing: set[str] = set()
        self.queries: list[Query] = []

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        model = re.search(r'model_name="([^"]*)"', promql)
        series = re.search(r"\((vllm:[a-z_:]+)\{", promql)
        window = re.search(r"\[(\d+)s\]", promql)
        assert model and series and window, promql
        offset = re.search(r"offset (\d+)s", promql)
        pods = self.pods.get(model.group(1), [])
        times = start + step_s * np.arange(math.floor((end - start) / step_s + 1e-9) + 1)
        self.queries.append(Query(model.group(1), promql, step_s, len(pods) * len(times)))
        if self.fail_first and not self.failing:
            self.failing.add(model.group(1))
        if model.group(1) in self.failing:
            raise MetricsUnavailable("http://prometheus.test", "the answer is larger than 268435456 bytes")
        at = times - (float(offset.group(1)) if offset else 0.0)
        rows = []
        for i, pod in enumerate(pods):
            values = sample(series.group(1), at, float(window.group(1)), i).tolist()
            rows.append({"metric": {"pod": pod}, "values": [[t, repr(v)] for t, v in zip(times.tolist(), values)]})
        return rows[::-1]  # in no particular order


def pods_of(targets: dict[str, int]) -> list[str]:
    return [f"{target}-7d9f-{i:03d}" for target, count in targets.items() for i in range(count)]


def test_past_the_limit_every_kth_window_is_read_and_no_variant_passes_it() -> None:
    """Two variants of one model (4 and 2 pods, and a pod of neither) over 2,000 one-minute windows, at most 1,000
    windows per variant: the queries step 8 minutes (still one-minute windows, the one before each asked with
    ``offset``), the larger variant gets 1,000 windows, each pod's every 8th window with its own values. Before,
    every window of every pod was asked for, held as a dict entry per (pod, time) and per series, and reached the
    fit (31 days of one-minute windows of 100 pods took 9.4 GB and 7 minutes)."""
    prometheus = FakePrometheus({"m": pods_of({"a": 4, "b": 2, "c": 1})})  # c: no variant's

    pods, _ = prometheus_windows(prometheus, NAMESPACE, "m", END, 2000 * 60.0, 60.0, ("a", "b"), 1000)  # type: ignore[arg-type]

    assert sum(len(ws) for pod, ws in pods.items() if pod.startswith("a-")) == 1000
    assert sum(len(ws) for pod, ws in pods.items() if pod.startswith("b-")) == 500
    assert not any(pod.startswith("c-") for pod in pods)
    probe, *rest = prometheus.queries
    assert probe.samples <= 7 * calibrate_task.PROBE_POINTS and "[60s]" in probe.promql
    assert {q.step for q in rest} == {480.0} and all("[60s]" in q.promql for q in rest)
    asked = sum(q.samples for q in prometheus.queries)
    assert asked <= 7 * calibrate_task.PROBE_POINTS + 10 * 7 * 250  # not 8 x 14,000
    start = END.timestamp() - 2000 * 60.0 + 60.0
    times = start + 480.0 * np.arange(250)
    for i, pod in enumerate(sorted(pods)):  # a-7d9f-000 ... b-7d9f-001: pod numbers 0-5 in this order
        windows = pods[pod]
        assert all(w.seconds == 60.0 for w in windows)
        assert [w.requests for w in windows] == pytest.approx(sample(SERIES["requests"], times, 60.0, i).tolist())
        assert [w.running_avg for w in windows] == pytest.approx(batch(times, i).tolist())
        assert [w.previous_running_avg for w in windows] == pytest.approx(batch(times - 60.0, i).tolist())


def test_a_long_range_is_read_in_pieces_under_the_sample_limit_and_folded_per_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six pods over 3,000 windows, at most 1,000 samples a query: after the first query (which learns the pods)
    each piece asks at most 1,000 samples, and the windows are the ones read in one piece. Before, a range was
    split by evaluations per series only (11,000), so 7 days of one-minute windows of 800 pods was one answer over
    the client's 256 MiB limit."""
    whole = FakePrometheus({"m": pods_of({"a": 6})})
    expected, _ = prometheus_windows(whole, NAMESPACE, "m", END, 3000 * 60.0, 60.0)  # type: ignore[arg-type]
    monkeypatch.setattr(calibrate_task, "MAX_PIECE_SAMPLES", 1000)
    pieces = FakePrometheus({"m": pods_of({"a": 6})})

    pods, _ = prometheus_windows(pieces, NAMESPACE, "m", END, 3000 * 60.0, 60.0)  # type: ignore[arg-type]

    assert pods == expected and sum(len(ws) for ws in pods.values()) == 18000
    assert max(q.samples for q in pieces.queries[1:]) <= 1000 < max(q.samples for q in whole.queries[1:])
    assert {q.step for q in pieces.queries[1:]} == {60.0}


def test_a_windows_file_past_the_limit_is_thinned_evenly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    windows = [Window(60.0, 10.0 + i, 1.0, 0.0, 2.0, 100.0, 900.0) for i in range(200)]
    write_windows_file(tmp_path / "w.yaml", 60.0, {(NAMESPACE, "v"): windows})
    monkeypatch.setattr(calibrate_task, "MAX_WINDOWS_PER_VARIANT", 50)

    collected = collect_windows.fn([], str(tmp_path / "w.yaml"), None, "1d", "1m")

    assert [w.requests for w in collected.windows[(NAMESPACE, "v")]] == [10.0 + 4 * i for i in range(50)]
    assert collected.notes[(NAMESPACE, "v")] == "50 of 200 windows used, evenly spaced (at most 50 per variant)"


def test_one_models_failed_queries_leave_the_other_models_read_and_fitted(
    example_cluster: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first model's query fails (an answer over the size limit): its variants say why, and the other model
    is still read and fitted. Before, the failure ended the loop over models: the later model was never asked,
    and its variants also said "no metrics for this variant's pods"."""
    targets: dict[str, list[str]] = {}
    for file in sorted(example_cluster.glob("*.yaml")):
        for doc in yaml.safe_load_all(file.read_text()):
            if doc and doc.get("kind") == "VariantAutoscaling" and doc["spec"].get("scaleTargetRef"):
                targets.setdefault(doc["spec"]["modelID"], []).append(doc["spec"]["scaleTargetRef"]["name"])
    pods = {model: pods_of(dict.fromkeys(names, 2)) for model, names in targets.items()}
    prometheus = FakePrometheus(pods, fail_first=True)

    monkeypatch.setattr(calibrate_task.PrometheusMetrics, "from_env", staticmethod(lambda url: prometheus))
    args = ["calibrate-profiles", "--cluster", str(example_cluster), "--prometheus-url", "http://prometheus.test"]
    result = CliRunner().invoke(app, [*args, "--lookback", "1d", "--window", "5m", "--dry-run", "--json"])

    assert result.exit_code == 3, result.output  # degraded: the failed model's variants have no profile
    assert sorted({q.model for q in prometheus.queries}) == sorted(targets)  # every model was asked
    (failed,) = prometheus.failing
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    for model, names in targets.items():
        for name in names:
            if model == failed:
                assert rows[name]["reason"] == "MetricsUnavailable"
                assert "the answer is larger than 268435456 bytes" in rows[name]["message"]
            else:
                assert rows[name]["reason"] == "ProfileProposed", rows[name]["message"]
                assert rows[name]["fit"]["alpha"]["value"] == pytest.approx(20.58, rel=0.05)
                assert rows[name]["fit"]["windows"] == 2 * 288


@pytest.mark.parametrize("microsecond", [0, 499_600, 999_600])
def test_a_day_of_five_minute_windows_is_288_windows_whatever_the_fraction_of_a_second(microsecond: int) -> None:
    prometheus = FakePrometheus({"m": pods_of({"a": 1})})
    end = END.replace(microsecond=microsecond)

    pods, _ = prometheus_windows(prometheus, NAMESPACE, "m", end, 86400.0, 300.0)  # type: ignore[arg-type]

    assert [len(ws) for ws in pods.values()] == [288]
