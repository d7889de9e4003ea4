"""tasks.clients.metrics against a real Prometheus scraping the fake vLLM exporter, and the metrics file format.

One Prometheus serves the whole session (``tests.servers.promtest.fixture``). The module loads all its models at
once and waits a single time for their counters to span the rate window; every model and namespace
here starts with ``mt`` so other test modules sharing the exporter are not disturbed. The client uses
a 5 s rate window (the production default ``1m`` is checked in the query text instead): with 1 s
scrapes Prometheus' extrapolated ``rate`` is within a few percent once the window is covered.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import math
import pathlib
import textwrap
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tasks.clients.metrics import file as metrics_file_module
from tasks.clients.metrics.file import FileMetrics, write_metrics_file
from tasks.clients.metrics.prometheus import PrometheusMetrics
from tasks.clients.metrics.settings import PROMETHEUS_ENVIRONMENT
from tasks.clients.metrics.snapshot import (
    MetricsFileError,
    MetricsSnapshot,
    MetricsSource,
    MetricsUnavailable,
    ModelKey,
    ModelLoad,
    PodMetrics,
)
from tests.servers.promtest import fixture as promtest_fixture
from tests.servers.promtest.exporter import FakeVllmExporter
from tests.servers.promtest.fixture import PrometheusError, PrometheusProcess, free_port

RATE_WINDOW = "5s"
FALLBACK_WINDOW = "60s"
TOLERANCE = 0.15

LLAMA = ModelKey("mt/llama-3.1-8b", "mt-a")
GRANITE = ModelKey("mt/granite-8b", "mt-b")
BURST = ModelKey("mt/burst", "mt-b")
IDLE = ModelKey("mt/idle", "mt-b")
VANISH = ModelKey("mt/vanish", "mt-b")
UNREQUESTED_SAME_NS = ModelKey("mt/unrequested", "mt-a")
UNREQUESTED_OTHER_NS = ModelKey("mt/elsewhere", "mt-other")
GHOST = ModelKey("mt/ghost", "mt-a")
SLO = ModelKey("mt/slo", "mt-a")
SLO_PER_TOKEN = ModelKey("mt/slo-tokens", "mt-b")
ALL_LOADED = [LLAMA, GRANITE, BURST, IDLE, VANISH, UNREQUESTED_SAME_NS, UNREQUESTED_OTHER_NS, SLO, SLO_PER_TOKEN]


def _set(exporter: FakeVllmExporter, key: ModelKey, pods: list[str], rps: float, tin: float, tout: float) -> None:
    exporter.set_load(key.model_id, key.namespace, pods, rps, tin, tout)


@pytest.fixture(scope="module")
def loaded(vllm_exporter: FakeVllmExporter, prometheus: PrometheusProcess) -> Iterator[FakeVllmExporter]:
    """All the module's loads and gauges, with counters already spanning the rate window."""
    exp = vllm_exporter
    _set(exp, LLAMA, ["llama-a100-0", "llama-a100-1"], 8.0, 128, 256)
    exp.set_pod(LLAMA.model_id, LLAMA.namespace, "llama-a100-0", kv_cache_usage=0.42, waiting=1, running=4)
    exp.set_pod(LLAMA.model_id, LLAMA.namespace, "llama-a100-1", kv_cache_usage=0.9, waiting=6, running=8)
    _set(exp, GRANITE, ["granite-0"], 2.5, 64, 32)
    exp.set_pod(GRANITE.model_id, GRANITE.namespace, "granite-0", kv_cache_usage=0.1, waiting=0, running=1)
    _set(exp, BURST, ["burst-0"], 4.0, 100, 50)
    _set(exp, IDLE, ["idle-0"], 0.0, 0, 0)
    _set(exp, VANISH, ["vanish-0"], 1.0, 10, 10)
    exp.set_pod(VANISH.model_id, VANISH.namespace, "vanish-0", kv_cache_usage=0.5, waiting=2)
    _set(exp, UNREQUESTED_SAME_NS, ["unrequested-0"], 3.0, 10, 10)
    exp.set_pod(UNREQUESTED_SAME_NS.model_id, UNREQUESTED_SAME_NS.namespace, "unrequested-0", kv_cache_usage=0.3)
    _set(exp, UNREQUESTED_OTHER_NS, ["elsewhere-0"], 3.0, 10, 10)
    exp.set_gauge("kthena:queue_depth", {"namespace": "mt-a", "pod": "llama-a100-0"}, 7)
    exp.set_gauge("kthena:queue_depth", {"namespace": "mt-a", "pod": "llama-a100-1"}, 3)
    exp.set_gauge("tokens_per_second", {"namespace": "mt-a", "pod": "llama-a100-0"}, 1500)
    exp.set_gauge("kthena:broken_gauge", {"namespace": "mt-a", "pod": "llama-a100-0"}, -4)
    exp.set_gauge("kthena:broken_gauge", {"namespace": "mt-a", "pod": "llama-a100-1"}, math.nan)
    # Latency histograms: half the requests fast (TTFT 0.1 s, ITL 20 ms), half slow (0.7 s, 40 ms).
    _set(exp, SLO, ["slo-0", "slo-1"], 4.0, 100, 11)
    exp.set_latency(SLO.model_id, SLO.namespace, "slo-0", ttft_s=0.1, itl_s=0.02)
    exp.set_latency(SLO.model_id, SLO.namespace, "slo-1", ttft_s=0.7, itl_s=0.04)
    for pod in ("slo-0", "slo-1"):
        exp.set_pod(SLO.model_id, SLO.namespace, pod, kv_cache_usage=0.2)
    _set(exp, SLO_PER_TOKEN, ["slo-tokens-0"], 2.0, 100, 11)
    exp.set_latency(
        SLO_PER_TOKEN.model_id, SLO_PER_TOKEN.namespace, "slo-tokens-0", 0.1, 0.02, "vllm:time_per_output_token_seconds"
    )
    # Samples spanning more than the 5 s window for every series: then rate() is no longer ramping up.
    prometheus.wait_for_history('vllm:request_success_total{namespace=~"mt-.*"}', 6, timeout=20)
    _set(exp, BURST, ["burst-0"], 0.0, 100, 50)  # from now on only the fallback window sees its tokens
    yield exp
    for key in ALL_LOADED:
        exp.remove_model(key.model_id, key.namespace)
    for pod in ("llama-a100-0", "llama-a100-1"):
        exp.remove_pod(LLAMA.model_id, LLAMA.namespace, pod)


def short_window_client(prometheus: PrometheusProcess, **windows: str) -> PrometheusMetrics:
    """A client with the short test windows (and any other ``windows``) and quick failure."""
    return PrometheusMetrics(
        prometheus.url,
        timeout_s=2,
        retries=2,
        backoff_s=0.05,
        rate_window=RATE_WINDOW,
        fallback_window=FALLBACK_WINDOW,
        **windows,
    )


@pytest.fixture
def metrics(prometheus: PrometheusProcess) -> PrometheusMetrics:
    """A client with the short test windows and quick failure."""
    return short_window_client(prometheus)


def _collect_until(
    client: PrometheusMetrics, keys: list[ModelKey], done: Callable[[MetricsSnapshot], bool], timeout: float = 15
) -> MetricsSnapshot:
    deadline = time.monotonic() + timeout
    while True:
        snapshot = client.collect(keys)
        if done(snapshot) or time.monotonic() > deadline:
            return snapshot
        time.sleep(0.3)


# -- exporter and fixture --------------------------------------------------------------------------


def test_exporter_exposes_real_vllm_names_even_when_openmetrics_is_asked(loaded: FakeVllmExporter) -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    text = requests.get(loaded.url, headers={"Accept": accept}, timeout=5).text
    for name in (
        "vllm:request_success_total{",
        "vllm:request_prompt_tokens_sum{",
        "vllm:request_prompt_tokens_count{",
        "vllm:request_generation_tokens_sum{",
        "vllm:kv_cache_usage_perc{",
        "vllm:num_requests_waiting{",
        "vllm:num_requests_running{",
        "kthena:queue_depth{",
    ):
        assert name in text
    assert 'model_name="mt/llama-3.1-8b",namespace="mt-a",pod="llama-a100-0"' in text


def test_exporter_counts_a_latency_on_a_bucket_bound_within_it_at_every_scrape() -> None:
    """A TTFT of exactly 100 ms stays in the ``le="0.1"`` bucket however many requests have been counted: a bucket
    that dropped to 0 on one scrape would read to Prometheus as a counter reset and inflate its ``increase``."""
    now = [0.0]
    exporter = FakeVllmExporter(clock=lambda: now[0])
    exporter.set_load("m", "ns", ["p-0"], 3.0, 128, 256)
    exporter.set_latency("m", "ns", "p-0", ttft_s=0.1, itl_s=0.025)
    for step in range(1, 400):
        now[0] = step * 0.37
        samples = {
            (sample.name, sample.labels.get("le")): sample.value
            for family in exporter.collect()
            for sample in family.samples
            if sample.name.endswith("_bucket")
        }
        ttft = "vllm:time_to_first_token_seconds_bucket"
        itl = "vllm:request_time_per_output_token_seconds_bucket"
        assert samples[(ttft, "0.1")] == samples[(ttft, "+Inf")] > 0 and samples[(ttft, "0.08")] == 0
        assert samples[(itl, "0.025")] == samples[(itl, "+Inf")] and samples[(itl, "0.01")] == 0


def test_prometheus_fixture_keeps_the_exporters_labels(loaded: FakeVllmExporter, prometheus: PrometheusProcess) -> None:
    assert prometheus.pid and prometheus.url.startswith("http://127.0.0.1:")
    result = prometheus.wait_for('vllm:kv_cache_usage_perc{pod="llama-a100-1"}', lambda r: len(r) == 1, timeout=5)
    labels = result[0]["metric"]
    assert (labels["namespace"], labels["model_name"], labels["job"]) == ("mt-a", LLAMA.model_id, "vllm")
    with pytest.raises(AssertionError, match="still gives"):
        prometheus.wait_for('vllm:kv_cache_usage_perc{pod="no-such-pod"}', bool, timeout=0.3)


def test_missing_prometheus_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setattr(promtest_fixture, "DEFAULT_BINARY", str(tmp_path / "prometheus"))
    monkeypatch.setenv("PROMETHEUS_BIN", str(tmp_path / "also-missing"))
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(PrometheusError, match=r"apt-get install prometheus"):
        promtest_fixture.find_binary()


# -- loads and pods --------------------------------------------------------------------------------


def test_collect_rates_within_tolerance_and_exact_token_averages(
    loaded: FakeVllmExporter, metrics: PrometheusMetrics
) -> None:
    snapshot = metrics.collect([LLAMA, GRANITE])

    llama, granite = snapshot.loads[LLAMA], snapshot.loads[GRANITE]
    assert llama.arrival_rate_rps == pytest.approx(8.0, rel=TOLERANCE)
    assert llama.arrival_rate_rpm == pytest.approx(480.0, rel=TOLERANCE)
    assert (llama.avg_in_tokens, llama.avg_out_tokens) == (pytest.approx(128), pytest.approx(256))
    assert granite.arrival_rate_rps == pytest.approx(2.5, rel=TOLERANCE)
    assert (granite.avg_in_tokens, granite.avg_out_tokens) == (pytest.approx(64), pytest.approx(32))
    assert snapshot.missing == []
    assert llama.sampled_at is not None
    assert abs((snapshot.collected_at - llama.sampled_at).total_seconds()) < 5


def test_collect_returns_the_prompt_histogram_and_the_recent_peak_rate(
    loaded: FakeVllmExporter, metrics: PrometheusMetrics
) -> None:
    """The shape tail-aware and start-up-aware sizing read, from the same load query."""
    from engine.perf.tail_sizing import PromptDistribution

    # The peak is a subquery over aligned steps: on a loaded machine its newest full-window step can lag the
    # instant rate by a scrape, so wait (bounded) for a step that saw the steady rate.
    def peak_caught_up(snapshot: MetricsSnapshot) -> bool:
        load = snapshot.loads.get(LLAMA)
        return (
            load is not None
            and load.recent_peak_rps is not None
            and load.recent_peak_rps >= load.arrival_rate_rps * (1 - TOLERANCE)
        )

    llama = _collect_until(metrics, [LLAMA], peak_caught_up).loads[LLAMA]
    assert llama.prompt_buckets is not None
    buckets = dict(llama.prompt_buckets)
    assert buckets[100.0] == 0.0 and buckets[200.0] > 0 and buckets[200.0] == pytest.approx(buckets[math.inf])
    assert 100.0 < PromptDistribution.from_buckets(llama.prompt_buckets).quantile(0.9) <= 200.0
    assert llama.recent_peak_rps is not None and llama.recent_peak_rps >= llama.arrival_rate_rps * (1 - TOLERANCE)
    assert llama.recent_peak_rps == pytest.approx(8.0, rel=2 * TOLERANCE)
    # The attainment loop's peak hold reads the same peak over every longer look-back, each at least the shortest's.
    from engine.perf.load_peak import HOLD_WINDOWS_S

    assert llama.peaks_rps is not None and set(llama.peaks_rps) == set(HOLD_WINDOWS_S)
    assert all(peak >= llama.recent_peak_rps * (1 - TOLERANCE) for peak in llama.peaks_rps.values())


@pytest.mark.long_wall  # about a minute of Prometheus's clock (tests/grouping.py)
def test_collect_returns_the_rates_recent_change_and_noise(
    vllm_exporter: FakeVllmExporter, prometheus: PrometheusProcess
) -> None:
    """A rate falling step by step after a flat stretch is a sustained fall (engine.perf.load_trend); once it
    is flat again it is not; a stretch without requests is a lowest rate of 0 once the rate is back. The windows
    are the production ones scaled to the 5 s rate window."""
    from engine.perf.load_trend import sustained_fall

    client = short_window_client(prometheus, change_window="10s", noise_window="60s")
    falling = ModelKey("mt/falling", "mt-fall")

    def falls(snapshot: MetricsSnapshot) -> bool:
        load = snapshot.loads.get(falling)
        return load is not None and sustained_fall(load.recent_change_rps, load.change_noise_rps)

    try:
        _set(vllm_exporter, falling, ["falling-0"], 24.0, 10, 10)
        prometheus.wait_for_history('vllm:request_success_total{namespace="mt-fall"}', 6, timeout=20)
        time.sleep(15)  # a flat stretch: the noise window sees changes near 0
        for rate in (18.0, 12.0, 6.0):
            _set(vllm_exporter, falling, ["falling-0"], rate, 10, 10)
            time.sleep(5)
        fell = _collect_until(client, [falling], falls, timeout=10).loads[falling]
        assert fell.recent_change_rps is not None and fell.change_noise_rps is not None
        assert fell.recent_change_rps < -2.0, fell
        assert sustained_fall(fell.recent_change_rps, fell.change_noise_rps)

        time.sleep(15)  # flat again at 6 req/s: the last changes are noise around 0
        flat = client.collect([falling]).loads[falling]
        assert flat.recent_change_rps is not None and abs(flat.recent_change_rps) < 1.5, flat
        assert not sustained_fall(flat.recent_change_rps, flat.change_noise_rps)
        # Never silent so far; then two rate windows without a request make the traffic intermittent (the lowest
        # rate over the longest hold look-back is 0, engine.slo.controller) after the rate is back.
        assert flat.lowest_rps is not None and flat.lowest_rps > 1.0, flat
        _set(vllm_exporter, falling, ["falling-0"], 0.0, 10, 10)
        time.sleep(10)
        _set(vllm_exporter, falling, ["falling-0"], 6.0, 10, 10)

        def silent_minute_seen(snapshot: MetricsSnapshot) -> bool:
            load = snapshot.loads.get(falling)
            return load is not None and load.lowest_rps == 0.0 and load.arrival_rate_rps > 1.0

        back = _collect_until(client, [falling], silent_minute_seen, timeout=20).loads[falling]
        assert back.lowest_rps == 0.0 and back.arrival_rate_rps > 1.0, back
        assert back.peaks_rps is not None and max(back.peaks_rps.values()) >= 20.0, back
    finally:
        vllm_exporter.remove_model(falling.model_id, falling.namespace)


def test_a_burst_inside_the_rate_window_is_read_as_a_burst_rate_above_the_peak(
    vllm_exporter: FakeVllmExporter, prometheus: PrometheusProcess
) -> None:
    """Two models at the same 4 req/s; one of them finishes 60 req/s for two seconds. The 5 s rate's peak sees
    that burst diluted; the most requests in one 2 s burst window, read as the Poisson rate that explains them
    (engine.perf.load_burst), is well above the peak. The steady model's counter climbs evenly: its burst rate
    stays at or below its rate (an even counter is calmer than Poisson arrivals)."""
    client = short_window_client(prometheus, burst_window="2s", peak_window="60s")
    steady, bursty = ModelKey("mt/steady", "mt-burst"), ModelKey("mt/bursty", "mt-burst")

    def burst_seen(snapshot: MetricsSnapshot) -> bool:
        load = snapshot.loads.get(bursty)
        return load is not None and load.burst_rps is not None and load.burst_rps > 20.0

    try:
        _set(vllm_exporter, steady, ["steady-0"], 4.0, 10, 10)
        _set(vllm_exporter, bursty, ["bursty-0"], 4.0, 10, 10)
        prometheus.wait_for_history('vllm:request_success_total{namespace="mt-burst"}', 6, timeout=20)
        _set(vllm_exporter, bursty, ["bursty-0"], 60.0, 10, 10)
        time.sleep(2)
        _set(vllm_exporter, bursty, ["bursty-0"], 4.0, 10, 10)
        snapshot = _collect_until(client, [steady, bursty], burst_seen, timeout=15)
        burst, calm = snapshot.loads[bursty], snapshot.loads[steady]
        assert burst.burst_rps is not None and burst.recent_peak_rps is not None
        assert burst.burst_rps > 1.5 * burst.recent_peak_rps, burst
        assert calm.burst_rps is not None and calm.burst_rps <= calm.arrival_rate_rps * (1 + TOLERANCE), calm
    finally:
        vllm_exporter.remove_model(steady.model_id, steady.namespace)
        vllm_exporter.remove_model(bursty.model_id, bursty.namespace)


def test_pod_gauges_are_returned_per_pod(loaded: FakeVllmExporter, metrics: PrometheusMetrics) -> None:
    snapshot = metrics.collect([LLAMA, GRANITE])

    assert snapshot.pods[LLAMA] == [PodMetrics("llama-a100-0", 0.42, 1.0), PodMetrics("llama-a100-1", 0.9, 6.0)]
    assert snapshot.pods[GRANITE] == [PodMetrics("granite-0", 0.1, 0.0)]


def test_models_not_requested_are_excluded(loaded: FakeVllmExporter, metrics: PrometheusMetrics) -> None:
    snapshot = metrics.collect([LLAMA])

    assert set(snapshot.loads) == {LLAMA}
    assert set(snapshot.pods) == {LLAMA}
    assert not any("unrequested" in line or "elsewhere" in line for line in snapshot.missing)


def test_model_without_samples_is_missing_not_an_error(loaded: FakeVllmExporter, metrics: PrometheusMetrics) -> None:
    snapshot = metrics.collect([LLAMA, GHOST])

    assert GHOST not in snapshot.loads and GHOST not in snapshot.pods
    assert "no vllm:request_success_total samples for mt/ghost in mt-a" in snapshot.missing
    assert snapshot.missing_for(GHOST) == [
        "no vllm:request_success_total samples for mt/ghost in mt-a",
        "no vllm:kv_cache_usage_perc or vllm:num_requests_waiting samples for mt/ghost in mt-a",
    ]
    assert sorted(snapshot.missing) == sorted(snapshot.missing_for(GHOST))
    assert LLAMA in snapshot.loads and snapshot.missing_for(LLAMA) == []


def test_a_model_whose_token_counters_are_not_numbers_is_missing_alone(
    loaded: FakeVllmExporter, metrics: PrometheusMetrics
) -> None:
    """An exporter counting infinite prompt tokens gives a mean of NaN; the sizing refuses such a workload, which
    stopped the whole optimize run for every model. Now that model alone is missing, with a line that says why."""
    bogus = ModelKey("mt/bogus", "mt-a")
    loaded.set_load(bogus.model_id, bogus.namespace, ["bogus-0"], rate_rps=2.0, in_tokens=math.inf, out_tokens=10)
    try:
        snapshot = _collect_until(metrics, [LLAMA, bogus], lambda s: any("mean tokens" in x for x in s.missing))
        assert bogus not in snapshot.loads and LLAMA in snapshot.loads
        line = next(x for x in snapshot.missing_for(bogus) if "mean tokens" in x)
        assert line == (
            "mean tokens per request of mt/bogus in mt-a are not finite numbers >= 0 (vllm:request_prompt_tokens nan)"
        )
    finally:
        loaded.remove_model(bogus.model_id, bogus.namespace)


def test_idle_model_falls_back_to_the_longer_window_for_tokens(
    loaded: FakeVllmExporter, prometheus: PrometheusProcess, metrics: PrometheusMetrics
) -> None:
    prometheus.wait_for(
        f'sum(rate(vllm:request_success_total{{model_name="{BURST.model_id}"}}[{RATE_WINDOW}])) == 0',
        lambda result: len(result) == 1,
        timeout=15,
    )
    snapshot = metrics.collect([BURST, IDLE])

    assert snapshot.loads[BURST] == ModelLoad(0.0, pytest.approx(100), pytest.approx(50))
    assert snapshot.loads[IDLE] == ModelLoad(0.0, 0.0, 0.0)  # never served a request: idle, not missing


def test_model_whose_series_vanish_becomes_missing(
    loaded: FakeVllmExporter, prometheus: PrometheusProcess, metrics: PrometheusMetrics
) -> None:
    before = metrics.collect([VANISH])
    assert VANISH in before.loads and VANISH in before.pods

    loaded.remove_model(VANISH.model_id, VANISH.namespace)
    prometheus.wait_for(f'vllm:request_success_total{{model_name="{VANISH.model_id}"}}', lambda r: r == [], timeout=10)
    after = metrics.collect([VANISH])

    assert VANISH not in after.loads and VANISH not in after.pods
    assert "no vllm:request_success_total samples for mt/vanish in mt-b" in after.missing


def test_samples_older_than_max_age_are_missing(loaded: FakeVllmExporter, prometheus: PrometheusProcess) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=40)
    client = PrometheusMetrics(prometheus.url, max_age_s=10, rate_window="2m", clock=lambda: later)

    snapshot = client.collect([LLAMA])

    assert snapshot.loads == {} and snapshot.pods == {}
    assert any(
        line.startswith("vllm:request_success_total for mt/llama-3.1-8b in mt-a is") and "(max 10s)" in line
        for line in snapshot.missing
    ), snapshot.missing
    assert any("pod llama-a100-0" in line and "s old (max 10s)" in line for line in snapshot.missing)


def test_a_client_evaluated_at_a_past_time_reads_what_prometheus_held_then(
    loaded: FakeVllmExporter, metrics: PrometheusMetrics
) -> None:
    """Every query of a pinned client is evaluated at its time: an hour before the exporter was first scraped
    there is no series, while the client it was made from (unchanged) reads the model now."""
    earlier = metrics.evaluated_at(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))

    then, now = earlier.collect([LLAMA]), metrics.collect([LLAMA])

    assert then.loads == {} and then.pods == {}
    assert "no vllm:request_success_total samples for mt/llama-3.1-8b in mt-a" in then.missing
    assert LLAMA in now.loads and LLAMA in now.pods


# -- instance metrics (Kthena) ---------------------------------------------------------------------


def test_instance_metrics_per_pod(loaded: FakeVllmExporter, metrics: PrometheusMetrics) -> None:
    names = ["kthena:queue_depth", "tokens_per_second", "vllm:num_requests_waiting"]

    by_pod = metrics.instance_metrics(names, "mt-a", ["llama-a100-0", "llama-a100-1", "not-running"])

    assert by_pod == {
        "llama-a100-0": {"kthena:queue_depth": 7.0, "tokens_per_second": 1500.0, "vllm:num_requests_waiting": 1.0},
        "llama-a100-1": {"kthena:queue_depth": 3.0, "vllm:num_requests_waiting": 6.0},
    }
    assert metrics.instance_metrics(names, "mt-b", ["llama-a100-0"]) == {}
    with pytest.raises(ValueError, match="invalid metric names"):
        metrics.instance_metrics(['up{job="x"}'], "mt-a", ["llama-a100-0"])


def test_collect_can_include_instance_metrics(loaded: FakeVllmExporter, metrics: PrometheusMetrics) -> None:
    snapshot = metrics.collect([LLAMA], instance_metric_names=["kthena:queue_depth"])

    assert snapshot.instance_metrics == {
        ("mt-a", "llama-a100-0"): {"kthena:queue_depth": 7.0},
        ("mt-a", "llama-a100-1"): {"kthena:queue_depth": 3.0},
    }


def test_a_negative_or_nan_instance_metric_counts_as_missing_not_as_no_load(
    loaded: FakeVllmExporter, metrics: PrometheusMetrics
) -> None:
    # Kthena's ratio reads -4 or NaN as a load below the target: a scale-down to minReplicas on a broken exporter.
    names = ["kthena:broken_gauge", "kthena:queue_depth"]
    by_pod = metrics.instance_metrics(names, "mt-a", ["llama-a100-0", "llama-a100-1"])
    snapshot = metrics.collect([LLAMA], instance_metric_names=names)

    assert by_pod == {"llama-a100-0": {"kthena:queue_depth": 7.0}, "llama-a100-1": {"kthena:queue_depth": 3.0}}
    assert snapshot.instance_metrics == {
        ("mt-a", "llama-a100-0"): {"kthena:queue_depth": 7.0},
        ("mt-a", "llama-a100-1"): {"kthena:queue_depth": 3.0},
    }
    assert "kthena:broken_gauge for pod llama-a100-0 in mt-a is -4, not a finite value >= 0" in snapshot.missing
    assert "kthena:broken_gauge for pod llama-a100-1 in mt-a is nan, not a finite value >= 0" in snapshot.missing


# -- queries ---------------------------------------------------------------------------------------


def test_query_count_is_constant_and_defaults_follow_wva(
    loaded: FakeVllmExporter, prometheus: PrometheusProcess
) -> None:
    client = PrometheusMetrics(prometheus.url, bearer_token="tok-123")
    sent: list[requests.PreparedRequest] = []
    client.session.hooks["response"].append(lambda response, *args, **kwargs: sent.append(response.request))

    client.collect([LLAMA])
    one_model = len(sent)
    client.collect([LLAMA, GRANITE, BURST, IDLE, GHOST, ModelKey("mt/x", "mt-c"), ModelKey("mt/y", "mt-d")])
    many_models = len(sent) - one_model
    client.collect([LLAMA, GRANITE], instance_metric_names=["kthena:queue_depth", "tokens_per_second"])
    with_instances = len(sent) - one_model - many_models

    assert one_model == many_models == 2
    assert with_instances == 3
    body = urllib.parse.unquote_plus(str(sent[0].body))
    assert "rate(vllm:request_success_total{" in body and "[1m]" in body and "[5m]" in body
    assert "[3m:1m]" in body and "offset 1m" in body and "[2m:1m]" in body and "[30m:1m]" in body
    assert 'namespace=~"mt-a"' in body
    assert all(request.headers["Authorization"] == "Bearer tok-123" for request in sent)


def test_latency_histograms_over_the_window_and_the_recent_range(
    loaded: FakeVllmExporter, prometheus: PrometheusProcess
) -> None:
    """The attainment inputs: one query per distinct SLO window, the TTFT and ITL bucket increases per model."""
    from engine.slo.measure import measure_attainment

    client = short_window_client(prometheus)
    sent: list[requests.PreparedRequest] = []
    client.session.hooks["response"].append(lambda response, *args, **kwargs: sent.append(response.request))
    snapshot = client.collect(
        [LLAMA, SLO, SLO_PER_TOKEN, GHOST], latency_windows={SLO: 3600.0, SLO_PER_TOKEN: 1800.0, GHOST: 3600.0}
    )
    assert len(sent) == 2 + 2  # loads, pods, and one latency query per distinct window (1h, 30m)
    bodies = [urllib.parse.unquote_plus(str(r.body)) for r in sent[2:]]
    assert any("increase(vllm:time_to_first_token_seconds_bucket{" in b and "[1h]" in b and "[2m]" in b for b in bodies)
    assert any("[30m]" in b for b in bodies)
    assert all("increase(vllm:time_to_first_token_seconds_sum{" in b for b in bodies)

    slo = snapshot.latency[SLO]
    # The _sum increases come back beside the buckets: half the requests at 0.1 s, half at 0.7 s, a 0.4 s mean
    # (within what increase()'s per-series extrapolation allows), which shapes a target inside a coarse bucket.
    for total, buckets in ((slo.ttft_window_sum, slo.ttft_window), (slo.itl_window_sum, slo.itl_window)):
        assert total is not None and buckets is not None and buckets[-1][1] > 0
    assert slo.ttft_window_sum is not None and slo.ttft_window is not None
    assert 0.25 < slo.ttft_window_sum / slo.ttft_window[-1][1] < 0.55
    assert slo.itl_metric == "vllm:request_time_per_output_token_seconds" and not slo.itl_per_token
    for ttft, itl in ((slo.ttft_window, slo.itl_window), (slo.ttft_recent, slo.itl_recent)):
        measured = measure_attainment(ttft, itl, 500.0, 25.0)  # bounds of vLLM's buckets: no interpolation
        # Half the requests are fast. increase() extrapolates every bucket series on its own from its first
        # scrape, and the fast and slow pods' series appear a scrape apart on a loaded machine (a 0.73 share was
        # seen once), so the shares are checked for what the reading decides: a share inside (0, 1) per
        # histogram, and the joint one the smaller of the two.
        assert measured.ttft_share is not None and 0.2 < measured.ttft_share < 0.8
        assert measured.itl_share is not None and 0.2 < measured.itl_share < 0.8
        assert measured.attained == pytest.approx(min(measured.ttft_share, measured.itl_share))
        assert measured.requests is not None and measured.requests > 0
    tokens = snapshot.latency[SLO_PER_TOKEN]
    assert tokens.itl_metric == "vllm:time_per_output_token_seconds" and tokens.itl_per_token
    assert "per token" in measure_attainment(tokens.ttft_window, tokens.itl_window, 500.0, 25.0, tokens.itl_metric).note
    assert set(snapshot.latency_missing) == {GHOST} and "mt/ghost" in snapshot.latency_missing[GHOST]
    assert not any("time_to_first_token" in line for line in snapshot.missing)  # apart: it never changes a decision
    assert client.collect([SLO]).latency == {}  # no window asked, no latency query


def test_a_range_longer_than_prometheus_computes_is_read_in_pieces(metrics: PrometheusMetrics) -> None:
    """A range query of 60 days at 5 minutes (17,281 evaluations, what ``calibrate-profiles --lookback 60d`` asks)
    is answered whole: Prometheus refuses more than 11,000 points a series, so the client asks in pieces on one grid
    and joins each series' values in time order, once each."""
    start = 1_700_000_000.0
    end = start + 60 * 86400
    matrix = metrics.query_range('vector(1) or label_replace(vector(2), "series", "b", "", "")', start, end, 300)

    assert len(matrix) == 2  # two series, each joined from its pieces
    for row in matrix:
        times = [float(t) for t, _ in row["values"]]
        assert times == [start + 300 * i for i in range(17_281)]


def test_label_values_are_escaped(loaded: FakeVllmExporter, metrics: PrometheusMetrics) -> None:
    odd = ModelKey('mt/odd"model\\', "mt.a")  # a '.' must not match the '-' of mt-a
    snapshot = metrics.collect([odd, ModelKey(LLAMA.model_id, "mt.a")])

    assert snapshot.loads == {}
    assert len(snapshot.missing) == 4


# -- failures --------------------------------------------------------------------------------------


def test_prometheus_stopped_raises_after_retries_then_recovers(
    loaded: FakeVllmExporter, prometheus: PrometheusProcess, metrics: PrometheusMetrics
) -> None:
    try:
        prometheus.stop()
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable) as raised:
            metrics.collect([LLAMA])
        assert time.monotonic() - started < 3
        message = str(raised.value)
        assert prometheus.url in message and "Connection refused" in message and "3 attempts" in message
    finally:
        prometheus.start()

    snapshot = _collect_until(metrics, [LLAMA], lambda s: LLAMA in s.loads and LLAMA in s.pods)
    assert LLAMA in snapshot.loads and LLAMA in snapshot.pods


def test_unreachable_url_never_leaks_the_bearer_token() -> None:
    secret = "s3cr3t-bearer-value"
    url = f"http://127.0.0.1:{free_port()}"
    client = PrometheusMetrics(url, timeout_s=0.5, retries=1, backoff_s=0.01, bearer_token=secret)

    with pytest.raises(MetricsUnavailable) as raised:
        client.collect([LLAMA])

    assert url in str(raised.value) and "2 attempts" in str(raised.value)
    for text in (str(raised.value), repr(raised.value), raised.value.reason, repr(client)):
        assert secret not in text
    # The requests exception (its PreparedRequest carries the Authorization header) is not chained.
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None or raised.value.__suppress_context__


class _StubPrometheus:
    """An HTTP server answering every query with one fixed status and body, counting requests."""

    def __init__(self, status: int, body: dict[str, object] | str, drip_s: float = 0.0) -> None:
        self.status, self.body, self.requests = status, body, 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                stub.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                payload = (stub.body if isinstance(stub.body, str) else json.dumps(stub.body)).encode()
                self.send_response(stub.status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if not drip_s:
                    self.wfile.write(payload)
                    return
                for byte in payload:  # a byte at a time: every read is within the socket timeout
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(drip_s)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    ("status", "body", "attempts", "expected"),
    [
        (
            400,
            {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
            1,
            "query failed (bad_data: parse error at char 3)",
        ),
        (503, "overloaded", 3, "HTTP 503 Service Unavailable (3 attempts)"),
        (401, "no", 1, "HTTP 401 Unauthorized: check the credentials"),
        (200, "<html>", 1, "HTTP 200: the answer is not JSON (is it the Prometheus base URL?)"),
        (404, "not found", 1, "HTTP 404 Not Found: the answer is not JSON (is it the Prometheus base URL?)"),
    ],
)
def test_prometheus_errors(status: int, body: dict[str, object] | str, attempts: int, expected: str) -> None:
    stub = _StubPrometheus(status, body)
    try:
        client = PrometheusMetrics(stub.url, retries=2, backoff_s=0.01, bearer_token="hidden-token")
        with pytest.raises(MetricsUnavailable) as raised:
            client.collect([LLAMA])
    finally:
        stub.close()
    assert str(raised.value) == f"Prometheus at {stub.url}: {expected}"
    assert stub.requests == attempts


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (["a"], "got data of type list"),
        ({"resultType": "vector", "result": [1, 2]}, "malformed vector row 1"),
        ({"resultType": "vector", "result": [{"metric": None, "value": [1, "2"]}]}, "malformed vector row"),
        ({"resultType": "vector", "result": [{"metric": {"le": None}, "value": [1, "2"]}]}, "malformed vector row"),
        ({"resultType": "vector", "result": [{"metric": {"a": ["b"]}, "value": [1, "2"]}]}, "malformed vector row"),
        ({"resultType": "vector", "result": [{"metric": {}, "value": [1, 2]}]}, "malformed vector row"),
    ],
    ids=["data-list", "rows-int", "metric-null", "label-null", "label-list", "value-not-string"],
)
def test_an_answer_not_shaped_as_prometheuss_makes_the_metrics_unavailable_not_a_traceback(
    data: object, named: str
) -> None:
    """Before, each of these ended the optimize run in an AttributeError or TypeError traceback (exit 1)."""
    stub = _StubPrometheus(200, {"status": "success", "data": data})
    try:
        with pytest.raises(MetricsUnavailable, match=named):
            PrometheusMetrics(stub.url, retries=0).collect([LLAMA])
    finally:
        stub.close()


def test_an_answer_sent_a_byte_at_a_time_ends_at_its_deadline_and_is_retried() -> None:
    """Every read is within the 0.2 s socket timeout, so before, the query lasted as long as the server liked
    (51 s, until the flow's own time-out, which was then reported as a connection failure)."""
    stub = _StubPrometheus(200, {"status": "success", "data": {"resultType": "vector", "result": []}}, drip_s=0.1)
    try:
        _assert_overdue_twice(stub.url, lambda: stub.requests)
    finally:
        stub.close()


def _assert_overdue_twice(url: str, answers: Callable[[], int]) -> None:
    """A query of ``url`` (0.2 s socket timeout, one retry) fails at its 1.2 s answer deadline on each of its two
    attempts, within seconds; ``answers`` counts the exchanges the server saw."""
    client = PrometheusMetrics(url, timeout_s=0.2, retries=1, backoff_s=0.01)
    started = time.monotonic()
    with pytest.raises(MetricsUnavailable, match=r"no complete answer within 1.2s \(2 attempts\)"):
        client.collect([LLAMA])
    assert time.monotonic() - started < 10 and answers() == 2


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="rate_window"):
        PrometheusMetrics("http://127.0.0.1:9", rate_window="1 minute")
    with pytest.raises(ValueError, match="burst_window must be longer than 0s, got '0s'"):
        PrometheusMetrics("http://127.0.0.1:9", burst_window="0s")
    with pytest.raises(ValueError):
        PrometheusMetrics("http://127.0.0.1:9", retries=-1)
    for name in ("timeout_s", "backoff_s", "max_age_s"):
        for value in (math.nan, math.inf):
            with pytest.raises(ValueError, match=f"{name} must be a finite number of seconds"):
                PrometheusMetrics("http://127.0.0.1:9", **{name: value})
    assert repr(PrometheusMetrics("http://user:pw@127.0.0.1:9")) == "PrometheusMetrics('http://127.0.0.1:9')"


def test_from_env(tmp_path: pathlib.Path) -> None:
    assert PrometheusMetrics.from_env(environ={}) is None
    client = PrometheusMetrics.from_env(
        environ={
            "PROMETHEUS_URL": "https://prom.example:9091/",
            "PROMETHEUS_TOKEN": "t0k",
            "PROMETHEUS_RATE_WINDOW": "5s",
            "PROMETHEUS_RETRIES": "1",
            "PROMETHEUS_MAX_AGE_S": "30",
            "PROMETHEUS_CA_BUNDLE": "/etc/ca.pem",
        }
    )
    assert client is not None
    assert (client.url, client.rate_window, client.retries, client.max_age_s, client.verify_tls) == (
        "https://prom.example:9091",
        "5s",
        1,
        30.0,
        "/etc/ca.pem",
    )
    assert "t0k" not in repr(client)
    insecure = PrometheusMetrics.from_env("http://127.0.0.1:9", {"PROMETHEUS_TLS_INSECURE": "true"})
    assert insecure is not None and insecure.verify_tls is False
    with pytest.raises(ValueError, match="PROMETHEUS_RETRIES must be an integer"):
        PrometheusMetrics.from_env("http://127.0.0.1:9", {"PROMETHEUS_RETRIES": "many"})


def test_every_variable_of_the_settings_table_sets_what_it_names() -> None:
    """docs/reference/prometheus.md is rendered from PROMETHEUS_ENVIRONMENT: each variable there must reach the
    client (a row the client ignores would be a documented setting that does nothing)."""
    values = {int: ("7", 7), float: ("2.5", 2.5), str: ("45s", "45s")}
    for setting in PROMETHEUS_ENVIRONMENT:
        if setting.option is None:
            continue
        raw, expected = values[setting.kind]
        client = PrometheusMetrics.from_env("http://127.0.0.1:9", {setting.name: raw})
        assert client is not None and getattr(client, setting.option) == expected, setting.name
    special = {setting.name for setting in PROMETHEUS_ENVIRONMENT if setting.option is None}
    assert special == {
        "PROMETHEUS_URL",
        "PROMETHEUS_TOKEN",
        "PROMETHEUS_TOKEN_FILE",
        "PROMETHEUS_CA_BUNDLE",
        "PROMETHEUS_TLS_INSECURE",
    }
    assert PrometheusMetrics.from_env(environ={"PROMETHEUS_URL": "http://127.0.0.1:9"}) is not None
    with_token = PrometheusMetrics.from_env("http://127.0.0.1:9", {"PROMETHEUS_TOKEN": "t0k"})
    assert with_token is not None and with_token._token == "t0k"
    with_file = PrometheusMetrics.from_env("http://127.0.0.1:9", {"PROMETHEUS_TOKEN_FILE": "/run/token"})
    assert with_file is not None and str(with_file._token_file) == "/run/token"


def test_bearer_token_file_is_reread_for_every_query(
    loaded: FakeVllmExporter, prometheus: PrometheusProcess, tmp_path: pathlib.Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    client = PrometheusMetrics.from_env(prometheus.url, {"PROMETHEUS_TOKEN_FILE": str(token_file)})
    assert client is not None
    sent: list[str] = []
    client.session.hooks["response"].append(lambda r, *a, **k: sent.append(r.request.headers["Authorization"]))

    client.collect([LLAMA])
    token_file.write_text("second-token")
    client.collect([LLAMA])
    token_file.unlink()
    with pytest.raises(MetricsUnavailable, match="cannot read the bearer token file .*token") as raised:
        client.collect([LLAMA])

    assert sent == ["Bearer first-token"] * 2 + ["Bearer second-token"] * 2
    assert "second-token" not in str(raised.value)


# -- file source -----------------------------------------------------------------------------------


def test_both_sources_implement_the_protocol(tmp_path: pathlib.Path) -> None:
    assert isinstance(PrometheusMetrics("http://127.0.0.1:9"), MetricsSource)
    assert isinstance(FileMetrics(tmp_path / "m.yaml"), MetricsSource)


def test_file_round_trip_of_a_live_snapshot(
    loaded: FakeVllmExporter, metrics: PrometheusMetrics, tmp_path: pathlib.Path
) -> None:
    windows = {SLO: 3600.0}
    live = metrics.collect([LLAMA, GRANITE, SLO], instance_metric_names=["kthena:queue_depth"], latency_windows=windows)
    path = tmp_path / "captured.yaml"

    write_metrics_file(path, live)
    replay = FileMetrics(path).collect(
        [LLAMA, GRANITE, SLO], instance_metric_names=["kthena:queue_depth"], latency_windows=windows
    )
    assert SLO in replay.latency

    assert replay.loads == live.loads
    assert replay.pods == live.pods
    assert replay.latency == live.latency
    assert replay.instance_metrics == live.instance_metrics
    assert replay.collected_at == live.collected_at
    assert replay.missing == []


def test_file_format(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "metrics.yaml"
    path.write_text(
        """
collectedAt: 2026-11-22T12:00:00Z
models:
  - model: meta/llama-3.1-8b
    namespace: llm-serving
    arrivalRate: 1200
    avgInputTokens: 128
    avgOutputTokens: 256
    pods:
      - {name: llama-8b-a100-0, kvCacheUsage: 0.42, queueLength: 1}
  - model: ibm/granite-13b
    namespace: llm-serving
    arrivalRateRps: 2.5
    avgInputTokens: 64
    avgOutputTokens: 32
  - model: pods/only
    namespace: llm-serving
    pods: [{name: p-0, kvCacheUsage: 0.1, queueLength: 0}]
  - model: meta/llama-3.1-8b
    namespace: other
    arrivalRate: 60
    avgInputTokens: 1
    avgOutputTokens: 1
instances:
  - {namespace: llm-serving, pod: llama-8b-a100-0, metrics: {"vllm:num_requests_waiting": 3, tps: 12.5}}
"""
    )
    llama, granite, pods_only = (
        ModelKey(m, "llm-serving") for m in ("meta/llama-3.1-8b", "ibm/granite-13b", "pods/only")
    )
    source = FileMetrics(path)

    snapshot = source.collect([llama, granite, pods_only, ModelKey("absent", "llm-serving")])

    assert snapshot.loads == {llama: ModelLoad(20.0, 128.0, 256.0), granite: ModelLoad(2.5, 64.0, 32.0)}
    assert snapshot.pods == {
        llama: [PodMetrics("llama-8b-a100-0", 0.42, 1.0)],
        pods_only: [PodMetrics("p-0", 0.1, 0.0)],
    }
    assert snapshot.collected_at == dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)
    assert snapshot.missing == [
        f"no load for absent in llm-serving in {path}",
        f"no pod metrics for absent in llm-serving in {path}",
        f"no pod metrics for ibm/granite-13b in llm-serving in {path}",
        f"no load for pods/only in llm-serving in {path}",
    ]
    assert snapshot.instance_metrics == {}
    assert source.instance_metrics(["tps"], "llm-serving", ["llama-8b-a100-0", "x"]) == {
        "llama-8b-a100-0": {"tps": 12.5}
    }
    assert source.collect([], ["vllm:num_requests_waiting"], ["llm-serving"]).instance_metrics == {
        ("llm-serving", "llama-8b-a100-0"): {"vllm:num_requests_waiting": 3.0}
    }


def test_the_documented_example_file_parses(tmp_path: pathlib.Path) -> None:
    doc = metrics_file_module.__doc__ or ""
    lines = doc.split("Metrics file format", 1)[1].splitlines()[2:]
    example = textwrap.dedent("\n".join(itertools.takewhile(lambda line: not line or line.startswith("    "), lines)))
    path = tmp_path / "example.yaml"
    path.write_text(example)
    key = ModelKey("meta/llama-3.1-8b", "llm-serving")

    snapshot = FileMetrics(path).collect([key], ["vllm:num_requests_waiting"], latency_windows={key: 3600.0})

    assert snapshot.loads == {key: ModelLoad(20.0, 128.0, 256.0)}
    assert snapshot.instance_metrics == {("llm-serving", "llama-8b-a100-0"): {"vllm:num_requests_waiting": 3.0}}
    assert snapshot.missing == [] and snapshot.latency_missing == {}
    latency = snapshot.latency[key]
    assert latency.ttft_window == ((0.25, 950.0), (0.5, 1140.0), (1.0, 1190.0), (math.inf, 1200.0))
    assert latency.itl_recent == ((0.025, 97.0), (math.inf, 100.0)) and not latency.itl_per_token


def test_file_latency_is_read_only_for_models_asked_and_missing_is_said(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "metrics.yaml"
    path.write_text(
        "models:\n  - model: m\n    namespace: n\n    latency:\n"
        "      itlHistogram: vllm:inter_token_latency_seconds\n"
        "      window: {ttft: {0.5: 8, Inf: 10}}\n"
    )
    asked, other = ModelKey("m", "n"), ModelKey("x", "n")
    snapshot = FileMetrics(path).collect([asked, other], latency_windows={asked: 3600.0, other: 3600.0})
    assert snapshot.latency[asked].ttft_window == ((0.5, 8.0), (math.inf, 10.0))
    assert snapshot.latency[asked].itl_window is None and snapshot.latency[asked].itl_per_token
    assert snapshot.latency_missing == {other: f"no latency histograms for x in n in {path}"}
    assert FileMetrics(path).collect([asked]).latency == {}


def test_empty_file_means_everything_missing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")

    snapshot = FileMetrics(path).collect([GHOST])

    assert snapshot.loads == {} and len(snapshot.missing) == 2


MODEL = "- {model: m, namespace: n, arrivalRate: 60, avgInputTokens: 1, avgOutputTokens: 1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("models: {}", "models: expected a list, got dict"),
        ("[1, 2]", "expected a mapping, got list"),
        ("models: [", "not valid YAML"),
        ("modles: []", "modles: unknown field"),
        (f"models:\n  {MODEL}}}\n  {MODEL}}}", "models[1]: duplicate entry for m in n"),
        ("models:\n  - {model: m}", "models[0].namespace: required"),
        ("models:\n  - {model: '', namespace: n}", "models[0].model: expected a non-empty string, got ''"),
        (
            "models:\n  - {model: m, namespace: n, arrivalRate: 1, avgInputTokens: abc, avgOutputTokens: 1}",
            "models[0].avgInputTokens: expected a finite number >= 0, got 'abc'",
        ),
        (
            "models:\n  - {model: m, namespace: n, arrivalRate: -1, avgInputTokens: 1, avgOutputTokens: 1}",
            "models[0].arrivalRate: expected a finite number >= 0, got -1",
        ),
        (  # an infinite rate failed the whole run ("load_rps must be >= 0, got inf"), not only this model
            "models:\n  - {model: m, namespace: n, arrivalRate: .inf, avgInputTokens: 1, avgOutputTokens: 1}",
            "models[0].arrivalRate: expected a finite number >= 0, got inf",
        ),
        (  # an integer no float holds: an OverflowError traceback
            f"models:\n  - {{model: m, namespace: n, arrivalRate: 1, avgInputTokens: {10**400}, avgOutputTokens: 1}}",
            "models[0].avgInputTokens: expected a finite number >= 0, got 1000",
        ),
        (
            "instances:\n  - {namespace: n, pod: p, metrics: {'vllm:num_requests_waiting': -.inf}}",
            "instances[0].metrics['vllm:num_requests_waiting']: expected a finite number >= 0, got -inf",
        ),
        (  # a load below zero is none: Kthena's ratio would scale the target down to minReplicas
            "instances:\n  - {namespace: n, pod: p, metrics: {'vllm:num_requests_waiting': -1}}",
            "instances[0].metrics['vllm:num_requests_waiting']: expected a finite number >= 0, got -1",
        ),
        (
            "models:\n  - {model: m, namespace: n, arrivalRate: 60, avgInputTokens: 1}",
            "models[0].avgOutputTokens: required with an arrival rate",
        ),
        ("models:\n  - {model: m, namespace: n, avgInputTokens: 1}", "models[0].avgInputTokens: needs arrivalRate"),
        (f"models:\n  {MODEL}, arrivalRateRps: 1}}", "models[0]: give arrivalRate (req/min) or arrivalRateRps"),
        (f"models:\n  {MODEL}, avgInputToken: 1}}", "models[0].avgInputToken: unknown field"),
        (
            "models:\n  - {model: m, namespace: n, latency: {window: {ttft: {0.5: 3}}}}",
            "models[0].latency.window.ttft: a histogram needs its +Inf bucket",
        ),
        (
            "models:\n  - {model: m, namespace: n, latency: {window: {ttft: {fast: 3, +Inf: 4}}}}",
            "models[0].latency.window.ttft['fast']: expected a bucket bound",
        ),
        (
            "models:\n  - {model: m, namespace: n, latency: {window: {ttft: {0.5: -3, +Inf: 4}}}}",
            "models[0].latency.window.ttft[0.5]: expected a finite number >= 0, got -3",
        ),
        (
            "models:\n  - {model: m, namespace: n, latency: {itlHistogram: vllm:foo}}",
            "models[0].latency.itlHistogram: expected one of vllm:request_time_per_output_token_seconds",
        ),
        (
            "models:\n  - {model: m, namespace: n, latency: {window: {tpot: {}}}}",
            "models[0].latency.window.tpot: unknown",
        ),
        (
            f"models:\n  {MODEL}, pods: [{{name: p, kvCacheUsage: 1.5, queueLength: 0}}]}}",
            "models[0].pods[0].kvCacheUsage: expected a finite number within 0..1, got 1.5",
        ),
        (
            f"models:\n  {MODEL}, pods: [{{name: p, kvCacheUsage: true, queueLength: 0}}]}}",
            "models[0].pods[0].kvCacheUsage: expected a finite number within 0..1, got True",
        ),
        (
            "instances:\n  - {namespace: n, pod: p, metrics: {'bad name': 1}}",
            "instances[0].metrics: invalid metric name",
        ),
        ("instances:\n  - {namespace: n, pod: p}", "instances[0].metrics: required"),
        ("collectedAt: yesterday", "collectedAt: expected an ISO 8601 timestamp"),
    ],
)
def test_malformed_files_name_the_path_and_field(tmp_path: pathlib.Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)

    with pytest.raises(MetricsFileError) as raised:
        FileMetrics(path).collect([ModelKey("m", "n")])

    assert str(raised.value).startswith(f"{path}: ")
    assert expected in str(raised.value)


def test_missing_file_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(MetricsFileError, match="nope.yaml: cannot read: No such file or directory"):
        FileMetrics(tmp_path / "nope.yaml").collect([GHOST])


def test_kv_cache_falls_back_to_the_pre_0_10_gauge_name(loaded: FakeVllmExporter, metrics: PrometheusMetrics) -> None:
    """The Prometheus contract: per-pod gauges by model_name, namespace and pod; a pod exposing only
    vllm:gpu_cache_usage_perc (vLLM < 0.10) is read from it, and the new name wins where both exist."""
    legacy = ModelKey("mt/legacy", "mt-a")
    old_only = {"model_name": legacy.model_id, "namespace": legacy.namespace, "pod": "legacy-0"}
    both = {**old_only, "pod": "legacy-1"}
    loaded.set_gauge("vllm:gpu_cache_usage_perc", old_only, 0.65)
    loaded.set_gauge("vllm:num_requests_waiting", old_only, 2)
    loaded.set_gauge("vllm:gpu_cache_usage_perc", both, 0.11)
    loaded.set_gauge("vllm:kv_cache_usage_perc", both, 0.77)
    loaded.set_gauge("vllm:num_requests_waiting", both, 0)
    try:
        snapshot = _collect_until(metrics, [legacy], lambda s: len(s.pods.get(legacy, [])) == 2)
        assert snapshot.pods[legacy] == [PodMetrics("legacy-0", 0.65, 2.0), PodMetrics("legacy-1", 0.77, 0.0)]
    finally:
        for labels in (old_only, both):
            for name in ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:num_requests_waiting"):
                loaded.remove_gauge(name, labels)


def test_a_pod_gauge_that_is_no_share_or_count_leaves_the_pod_out_and_says_why(
    loaded: FakeVllmExporter, metrics: PrometheusMetrics
) -> None:
    """A KV usage of NaN or below 0, or a negative queue, is no reading of the pod's saturation (a KV usage of -5
    reads as spare capacity and makes a scale-down look safe); the pod is left out with a line, as the metrics file
    refuses the same values, and its sound neighbour is read."""
    odd = ModelKey("mt/odd", "mt-a")
    labels = {"model_name": odd.model_id, "namespace": odd.namespace}
    pods = {"nan-kv": (math.nan, 1.0), "negative-kv": (-5.0, 0.0), "negative-queue": (0.4, -2.0), "sound": (0.3, 1.0)}
    for pod, (kv, waiting) in pods.items():
        loaded.set_gauge("vllm:kv_cache_usage_perc", {**labels, "pod": pod}, kv)
        loaded.set_gauge("vllm:num_requests_waiting", {**labels, "pod": pod}, waiting)
    try:

        def reports(snapshot: MetricsSnapshot) -> list[str]:
            return sorted(line for line in snapshot.missing_for(odd) if " reports " in line)

        snapshot = _collect_until(metrics, [odd], lambda s: len(reports(s)) == 3 and len(s.pods.get(odd, [])) == 1)
        assert snapshot.pods[odd] == [PodMetrics("sound", 0.3, 1.0)]
        lines = reports(snapshot)
        assert len(lines) == 3 and all("expected a share 0..1 and a finite count >= 0" in line for line in lines)
        assert "pod negative-kv of mt/odd in mt-a reports vllm:kv_cache_usage_perc -5 and" in lines[1]
    finally:
        for pod in pods:
            for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting"):
                loaded.remove_gauge(name, {**labels, "pod": pod})


def test_requests_waiting_at_the_gateway_are_read_per_model_for_models_without_replicas(
    loaded: FakeVllmExporter, metrics: PrometheusMetrics, prometheus: PrometheusProcess
) -> None:
    """The inference scheduler's flow-control queue, by target_model_name, summed over its priority series: a model
    with no replica (no vLLM series at all) still shows its waiting requests; the deprecated gauge is read for a
    model the current one does not report, and never added to it (both are exported during the rename). A queue
    that is not a finite count (NaN, Inf, negative) is left out."""
    zero = ModelKey("mt/zero", "mt-a")
    legacy = ModelKey("mt/legacy-queue", "mt-a")
    pool = {"namespace": "mt-a", "inference_pool": "pool"}
    gauges = [
        ("llm_d_epp_flow_control_queue_size", {**pool, "target_model_name": zero.model_id, "priority": "0"}, 3.0),
        ("llm_d_epp_flow_control_queue_size", {**pool, "target_model_name": zero.model_id, "priority": "-10"}, 2.0),
        ("inference_extension_flow_control_queue_size", {**pool, "target_model_name": zero.model_id}, 5.0),
        ("inference_extension_flow_control_queue_size", {**pool, "target_model_name": legacy.model_id}, 4.0),
        ("llm_d_epp_flow_control_queue_size", {**pool, "target_model_name": LLAMA.model_id}, 0.0),
        ("llm_d_epp_flow_control_queue_size", {**pool, "target_model_name": GHOST.model_id}, 9.0),  # not asked for
        ("llm_d_epp_flow_control_queue_size", {**pool, "target_model_name": "mt/nan"}, math.nan),
        ("llm_d_epp_flow_control_queue_size", {**pool, "target_model_name": "mt/inf"}, math.inf),
        ("llm_d_epp_flow_control_queue_size", {**pool, "target_model_name": "mt/negative"}, -3.0),
    ]
    broken = [ModelKey(name, "mt-a") for name in ("mt/nan", "mt/inf", "mt/negative")]
    for name, labels, value in gauges:
        loaded.set_gauge(name, labels, value)
    try:
        # Every gauge scraped (the broken ones too) before the client reads them.
        scraped = 'count(llm_d_epp_flow_control_queue_size{namespace="mt-a"})'
        prometheus.wait_for(scraped, lambda r: bool(r) and float(r[0]["value"][1]) == 7, timeout=30)
        snapshot = _collect_until(metrics, [zero, legacy, LLAMA, *broken], lambda s: len(s.gateway_waiting) >= 3)
        assert snapshot.gateway_waiting == {zero: 5.0, legacy: 4.0, LLAMA: 0.0}  # no NaN, Inf or negative count
        assert zero not in snapshot.loads and any("mt/zero" in line for line in snapshot.missing)
        assert LLAMA in snapshot.loads
    finally:
        for name, labels, _ in gauges:
            loaded.remove_gauge(name, labels)


@pytest.mark.parametrize(
    ("change", "noise", "kept"),
    [(-1.5, 0.1, True), (-1e300, 0.0, False), (-1.0, -5.0, False), (-2.3, 0.0, False), (-2.2, 0.0, True)],
    ids=["plausible", "fall-of-1e300", "negative-noise", "fall-beyond-the-peak", "fall-of-the-peak"],
)
def test_a_trend_that_cannot_be_is_no_trend(change: float, noise: float, kept: bool) -> None:
    """A sustained fall skips the scale-down stabilization window. Before, a change of -1e300 req/s at 2 req/s
    (or a negative noise, which a median of absolute changes cannot be) scaled a variant from 2 to 1 at once."""
    from tasks.clients.metrics.shape import with_shape

    load = ModelLoad(2.0, 100.0, 50.0)
    rows: dict[str, dict[tuple[str, ...], float]] = {
        "peak": {("llama", "ns"): 2.2},
        "burst": {},
        "change": {("llama", "ns"): change},
        "noise": {("llama", "ns"): noise},
        "lowest": {},
    }
    shaped = with_shape({ModelKey("llama", "ns"): load}, rows, {}, (30.0, 6))[ModelKey("llama", "ns")]
    assert (shaped.recent_change_rps, shaped.change_noise_rps) == ((change, noise) if kept else (None, None))


def test_a_sample_stamped_in_the_future_or_not_at_all_has_no_usable_age() -> None:
    from tasks.clients.metrics.answers import sample_age

    now = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    assert sample_age(now, now.timestamp() - 30) == 30
    assert sample_age(now, now.timestamp() + 60) == 0  # within the clock skew
    for stamp in (now.timestamp() + 3600, 1e12, math.inf, math.nan, None):
        assert sample_age(now, stamp) is None


def test_an_error_quoting_the_urls_basic_credentials_or_40_kb_is_masked_and_one_bounded_line() -> None:
    """A server that echoes the request's ``Authorization`` (made by requests from the URL's ``user:password@``)
    in its error: the password and the Basic credentials are masked, as the bearer token was. A 40 kB error with
    line breaks is quoted on one line of at most 500 characters; before, copied whole into every variant's
    condition message, where past 32,768 characters it ended the run after it had scaled."""
    basic = base64.b64encode(b"alice:Passw0rd%XYZ").decode()
    error = f"rejected Authorization: Basic {basic} (alice:Passw0rd%XYZ)\n" + "x" * 40_000
    stub = _StubPrometheus(400, {"status": "error", "errorType": "auth", "error": error})
    try:
        url = stub.url.replace("http://", "http://alice:Passw0rd%25XYZ@")
        with pytest.raises(MetricsUnavailable) as raised:
            PrometheusMetrics(url, retries=0).collect([LLAMA])
    finally:
        stub.close()
    message = str(raised.value)
    assert basic not in message and "Passw0rd" not in message and "Basic ***" in message
    assert "\n" not in message and len(message) < 700 and message.endswith("xxx...)")
    with pytest.raises(ValueError, match="not both"):  # requests would send Basic auth in place of the token
        PrometheusMetrics(url, bearer_token="tok")


def test_an_answer_whose_headers_drip_ends_at_its_deadline_and_is_retried() -> None:
    """A server that sends its status line and then a header byte every 0.1 s: every read is within the 0.2 s
    socket timeout and the body deadline never starts, so before, a query lasted until the flow's time limit
    (calibrate-profiles, which had none, until it was killed). The answer's deadline covers the headers too."""
    from tests.downloader.test_deadline import DripServer

    drip = DripServer()
    try:
        _assert_overdue_twice(drip.url.rsplit("/", 1)[0], lambda: drip.dripping)
    finally:
        drip.stop()
