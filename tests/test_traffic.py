"""tasks.clients.metrics.traffic against a real Prometheus holding an hour of vLLM history (backfilled with promtool)."""

from __future__ import annotations

import datetime as dt
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from engine.simulate.rebuild import TrafficError, rebuild_trace
from tasks.clients.metrics.prometheus import PrometheusMetrics
from tasks.clients.metrics.snapshot import MetricsUnavailable, ModelKey
from tasks.clients.metrics.traffic import read_traffic
from tests.servers.promtest.backfill import ModelHistory, backfilled_prometheus, openmetrics
from tests.servers.promtest.fixture import PrometheusProcess

MINUTES = 60
RNG = np.random.default_rng(7)
BUSY = ModelHistory(
    "ibm/granite-13b",
    "tr-a",
    per_minute=[int(c) for c in RNG.poisson(20, MINUTES)],
    prompt_tokens=[int(x) for x in RNG.lognormal(6.5, 1.0, 20 * MINUTES + 200)],
    output_tokens=[int(x) + 1 for x in RNG.lognormal(5.0, 0.8, 20 * MINUTES + 200)],
)
BURSTY = ModelHistory(
    "meta/llama-3.1-8b",
    "tr-b",
    per_minute=[0] * 20 + [120, 60, 30] + [0] * 37,
    prompt_tokens=[300] * 210,
    output_tokens=[50] * 210,
)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusProcess, dt.datetime]]:
    """A Prometheus whose storage holds the last hour of both models, ending at a whole minute in the past."""
    end = int(time.time() // 60) * 60 - 120
    start = end - 60 * MINUTES
    process = backfilled_prometheus(tmp_path_factory.mktemp("traffic"), openmetrics([BUSY, BURSTY], start))
    yield process, dt.datetime.fromtimestamp(end, dt.UTC)
    process.stop()


def test_requests_per_minute_and_token_histograms_come_back_per_model(
    history: tuple[PrometheusProcess, dt.datetime],
) -> None:
    process, end = history
    busy, bursty = ModelKey(BUSY.model_name, BUSY.namespace), ModelKey(BURSTY.model_name, BURSTY.namespace)
    absent = ModelKey("never/served", "tr-a")
    traffic = read_traffic(PrometheusMetrics(process.url), [busy, bursty, absent], 3600.0, end)
    assert set(traffic) == {busy, bursty}, "a model without series is not invented"
    for key, model in ((busy, BUSY), (bursty, BURSTY)):
        record = traffic[key]
        assert len(record.counts) == MINUTES and record.step_s == 60.0
        # increase() over a minute of minute-spaced samples extrapolates; the running total stays within a request.
        assert abs(record.requests - sum(model.per_minute)) <= 2
        assert np.allclose(record.counts, model.per_minute, atol=0.5 + 0.05 * max(model.per_minute))
    assert traffic[bursty].counts[20] > 100 and traffic[bursty].counts[10] == 0
    prompts = traffic[busy].prompt_tokens
    assert prompts is not None and prompts.mean is not None
    served = BUSY.prompt_tokens[: sum(BUSY.per_minute)]
    assert abs(prompts.mean - np.mean(served)) / np.mean(served) < 0.05
    assert abs(prompts.quantile(0.5) - np.median(served)) / np.median(served) < 0.35  # coarse 500-1000 bucket


def test_the_rebuilt_trace_replays_the_hours_shape(history: tuple[PrometheusProcess, dt.datetime]) -> None:
    process, end = history
    keys = [ModelKey(BUSY.model_name, BUSY.namespace), ModelKey(BURSTY.model_name, BURSTY.namespace)]
    traffic = read_traffic(PrometheusMetrics(process.url), keys, 3600.0, end)
    trace = rebuild_trace({f"{k.namespace}/{k.model_id}": v for k, v in traffic.items()}, seed=0)
    llama = trace.model_index == trace.models.index("tr-b/meta/llama-3.1-8b")
    minutes = np.bincount(np.floor(trace.arrival_s[llama] / 60).astype(int), minlength=MINUTES)
    assert minutes[:20].sum() == 0 and minutes[20] >= 110 and minutes[23:].sum() == 0
    prompts = trace.in_tokens[llama]
    # Every prompt was 300 tokens: the 200-500 bucket, shaped by the histogram's mean.
    assert prompts.min() >= 200 and prompts.max() <= 500 and abs(prompts.mean() - 300) < 25


def test_a_prometheus_that_is_down_is_an_error_not_an_empty_window(tmp_path: pathlib.Path) -> None:
    metrics = PrometheusMetrics("http://127.0.0.1:9", retries=0, timeout_s=1.0)
    with pytest.raises(MetricsUnavailable, match="127.0.0.1:9"):
        read_traffic(metrics, [ModelKey("m", "ns")], 3600.0, dt.datetime.now(dt.UTC))


def test_a_window_must_be_whole_steps() -> None:
    with pytest.raises(ValueError, match="whole number of steps"):
        read_traffic(PrometheusMetrics("http://127.0.0.1:9"), [ModelKey("m", "ns")], 90.0, dt.datetime.now(dt.UTC))


class AnsweringMetrics(PrometheusMetrics):
    """A Prometheus client whose instant queries get fixed answers (the tokens query's rows, every minute of the
    counts subquery at ``per_minute``): what a broken or hostile server may send, without one."""

    def __init__(self, token_rows: list[dict[str, Any]], per_minute: str) -> None:
        super().__init__("http://127.0.0.1:9", retries=0)
        self.token_rows, self.per_minute = token_rows, per_minute

    def query(self, promql: str, at: dt.datetime, result_type: str = "vector") -> list[dict[str, Any]]:
        if result_type == "matrix":
            minutes = [[at.timestamp() - 60 * i, self.per_minute] for i in range(10)]
            return [{"metric": {"model_name": "m", "namespace": "ns"}, "values": minutes[::-1]}]
        return self.token_rows


def token_rows(prompt_bounds: tuple[str, ...]) -> list[dict[str, Any]]:
    """The tokens query's answer for model ``m``: a prompt histogram with ``prompt_bounds`` and a sane output one."""
    rows = []
    for tag, bounds in (("prompt", prompt_bounds), ("output", ("128", "512", "2048", "+Inf"))):
        for bound, count in zip(bounds, ("100", "500", "900", "1000")):
            labels = {"model_name": "m", "namespace": "ns", "mp_field": tag, "le": bound}
            rows.append({"metric": labels, "value": [0.0, count]})
    return rows


def test_token_histograms_whose_bounds_are_no_token_counts_are_no_histogram() -> None:
    """Bounds le="NaN", "-5", "1e999" (beside +Inf) read as a histogram gave every rebuilt request 0 prompt tokens
    and a replay that met every target: the tune flow's read refuses them, and the error says which bound."""
    end = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)
    key = ModelKey("m", "ns")
    hostile = read_traffic(AnsweringMetrics(token_rows(("NaN", "-5", "1e999", "+Inf")), "100"), [key], 600.0, end)
    assert hostile[key].prompt_tokens is None and hostile[key].output_tokens is not None
    with pytest.raises(TrafficError, match='1000 requests in the window but no prompt-token histogram .*le="NaN"'):
        rebuild_trace({"ns/m": hostile[key]})
    sane = read_traffic(AnsweringMetrics(token_rows(("128", "512", "2048", "+Inf")), "100"), [key], 600.0, end)
    assert len(rebuild_trace({"ns/m": sane[key]})) == 1000


def test_a_window_counting_more_requests_than_a_replay_holds_is_one_error() -> None:
    end = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)
    key = ModelKey("m", "ns")
    huge = read_traffic(AnsweringMetrics(token_rows(("128", "512", "2048", "+Inf")), "6e6"), [key], 600.0, end)
    with pytest.raises(TrafficError, match="the window holds 60,000,000 requests .*at most 50,000,000"):
        rebuild_trace({"ns/m": huge[key]})
