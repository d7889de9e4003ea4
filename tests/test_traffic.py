"""tasks.clients.metrics.traffic against a real Prometheus holding an hour of vLLM history (backfilled with promtool)."""

from __future__ import annotations

import datetime as dt
import pathlib
import time
from collections.abc import Iterator

import numpy as np
import pytest

from engine.simulate.rebuild import rebuild_trace
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
