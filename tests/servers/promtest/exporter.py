"""A fake vLLM metrics exporter for tests, built on ``prometheus_client``.

One exporter stands for many vLLM pods: every series carries the ``model_name``, ``namespace`` and
``pod`` labels (Prometheus scrapes it with ``honor_labels: true`` so these labels win over the
target's). The metric names are the real vLLM ones, colons included: a custom collector yields
metric families, and the exposition reads literally ``vllm:request_success_total{...}``.

The exporter always answers in the Prometheus text format 0.0.4, whatever the ``Accept`` header says:
Prometheus 2.x asks for OpenMetrics first, and ``prometheus_client`` (>= 0.21) then escapes the colons
to underscores (``vllm_request_success_total``), which would hide the real names from the queries.

Series exposed:

- ``vllm:request_success_total`` (counter, plus ``finished_reason="stop"``)
- ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` (histograms: ``_sum``,
  ``_count`` and a ``+Inf`` bucket; the prompt histogram also has vLLM's finite buckets, every
  request counted at the pod's mean prompt size)
- ``vllm:time_to_first_token_seconds`` and one ITL histogram (by default the per-request
  ``vllm:request_time_per_output_token_seconds``; or a per-token one), with vLLM's bucket bounds, for a pod
  given :meth:`FakeVllmExporter.set_latency`: every request the pod counted at its TTFT and ITL
- ``vllm:kv_cache_usage_perc`` (gauge 0..1), ``vllm:num_requests_waiting``,
  ``vllm:num_requests_running`` (gauges)
- any gauge set with :meth:`FakeVllmExporter.set_gauge` (Kthena policy metrics)

Counters advance in real time: :meth:`FakeVllmExporter.set_load` fixes a rate, and each scrape
computes ``value = base + rate x elapsed`` so ``rate(vllm:request_success_total[W])`` in Prometheus
converges to the configured rate once the series has samples spanning the whole window ``W``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from engine.simulate.windows import ITL_BUCKETS_S, TTFT_BUCKETS_S
from engine.slo.measure import ITL_HISTOGRAMS, REQUEST_ITL_HISTOGRAM, TTFT_HISTOGRAM
from tests.servers.quiet import QuietThreadingHTTPServer

POD_LABELS = ("model_name", "namespace", "pod")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

PodKey = tuple[str, str, str]  # (model_name, namespace, pod)


@dataclass
class _PodLoad:
    """Counter state of one pod: values frozen at ``since`` plus a constant rate from then on."""

    rate_rps: float = 0.0
    in_tokens: float = 0.0
    out_tokens: float = 0.0
    base_requests: float = 0.0
    base_prompt_tokens: float = 0.0
    base_generation_tokens: float = 0.0
    since: float = field(default_factory=time.monotonic)

    def values(self, now: float) -> tuple[float, float, float]:
        """(requests, prompt tokens, generation tokens) counted up to ``now``."""
        requests = self.rate_rps * max(now - self.since, 0.0)
        return (
            self.base_requests + requests,
            self.base_prompt_tokens + requests * self.in_tokens,
            self.base_generation_tokens + requests * self.out_tokens,
        )

    def rebase(self, now: float, rate_rps: float, in_tokens: float, out_tokens: float) -> None:
        """Freeze the counters at ``now`` and continue with a new rate and token sizes."""
        self.base_requests, self.base_prompt_tokens, self.base_generation_tokens = self.values(now)
        self.since = now
        self.rate_rps, self.in_tokens, self.out_tokens = rate_rps, in_tokens, out_tokens


@dataclass(frozen=True)
class _PodLatency:
    """The TTFT and ITL (seconds) every request of a pod is counted at, and which ITL histogram is exported."""

    ttft_s: float
    itl_s: float
    itl_histogram: str


@dataclass
class _PodGauges:
    kv_cache_usage: float = 0.0
    waiting: float = 0.0
    running: float = 0.0


class FakeVllmExporter(Collector):
    """Serves vLLM metrics for any number of (model, namespace, pod) on 127.0.0.1."""

    def __init__(self, host: str = "127.0.0.1", clock: Callable[[], float] = time.monotonic) -> None:
        self._host = host
        self._clock = clock
        self._lock = threading.Lock()
        self._loads: dict[PodKey, _PodLoad] = {}
        self._gauges: dict[PodKey, _PodGauges] = {}
        self._latency: dict[PodKey, _PodLatency] = {}
        self._custom: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._server: QuietThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeVllmExporter:
        """Start serving ``/metrics`` on a free port of ``host``."""
        if self._server is None:
            server = QuietThreadingHTTPServer((self._host, 0), _MetricsHandler)
            server.daemon_threads = True
            server.registry = self.registry  # type: ignore[attr-defined]
            self._thread = threading.Thread(target=server.serve_forever, name="fake-vllm-exporter", daemon=True)
            self._server = server
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server, self._thread = None, None

    @property
    def port(self) -> int:
        """The TCP port served (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("exporter is not started")
        return int(self._server.server_port)

    @property
    def address(self) -> str:
        """``host:port``, the scrape target."""
        return f"{self._host}:{self.port}"

    @property
    def url(self) -> str:
        """The metrics URL."""
        return f"http://{self.address}/metrics"

    # -- controls --------------------------------------------------------------------------------

    def set_load(
        self,
        model: str,
        namespace: str,
        pods: Sequence[str],
        rate_rps: float,
        in_tokens: float,
        out_tokens: float,
    ) -> None:
        """Make ``model`` in ``namespace`` complete ``rate_rps`` requests/s, spread evenly over ``pods``.

        Each request has ``in_tokens`` prompt and ``out_tokens`` generated tokens. Pods of the model
        that are not listed keep their counters but stop advancing.
        """
        if rate_rps < 0 or in_tokens < 0 or out_tokens < 0:
            raise ValueError("rate and token sizes must be >= 0")
        if rate_rps > 0 and not pods:
            raise ValueError("a positive rate needs at least one pod")
        per_pod = rate_rps / len(pods) if pods else 0.0
        with self._lock:
            now = self._clock()
            for key, load in self._loads.items():
                if key[:2] == (model, namespace) and key[2] not in pods:
                    load.rebase(now, 0.0, load.in_tokens, load.out_tokens)
            for pod in pods:
                load = self._loads.setdefault((model, namespace, pod), _PodLoad(since=now))
                load.rebase(now, per_pod, in_tokens, out_tokens)

    def set_pod(
        self,
        model: str,
        namespace: str,
        pod: str,
        kv_cache_usage: float,
        waiting: float = 0.0,
        running: float = 0.0,
    ) -> None:
        """Set the saturation gauges of one pod (``kv_cache_usage`` in 0..1)."""
        if not 0.0 <= kv_cache_usage <= 1.0:
            raise ValueError("kv_cache_usage must be within 0..1")
        with self._lock:
            self._gauges[(model, namespace, pod)] = _PodGauges(kv_cache_usage, waiting, running)

    def set_latency(
        self,
        model: str,
        namespace: str,
        pod: str,
        ttft_s: float,
        itl_s: float,
        itl_histogram: str = REQUEST_ITL_HISTOGRAM,
    ) -> None:
        """Export the latency histograms of one pod (which :meth:`set_load` must count requests for): every request
        it has counted at ``ttft_s`` and ``itl_s``; ``itl_histogram`` is the ITL histogram exported (a per-token one
        counts each generated token after the first)."""
        if itl_histogram not in ITL_HISTOGRAMS:
            raise ValueError(f"itl_histogram must be one of {ITL_HISTOGRAMS}")
        with self._lock:
            self._latency[(model, namespace, pod)] = _PodLatency(ttft_s, itl_s, itl_histogram)

    def remove_pod(self, model: str, namespace: str, pod: str) -> None:
        """Drop every series of one pod, its :meth:`set_gauge` gauges included (Prometheus marks them stale)."""
        with self._lock:
            self._loads.pop((model, namespace, pod), None)
            self._gauges.pop((model, namespace, pod), None)
            self._latency.pop((model, namespace, pod), None)
            for key in [key for key in self._custom if _labels_of(key, "namespace", "pod") == (namespace, pod)]:
                del self._custom[key]

    def remove_model(self, model: str, namespace: str) -> None:
        """Drop every vLLM series of ``model`` in ``namespace``."""
        with self._lock:
            for table in (self._loads, self._gauges, self._latency):
                for key in [k for k in table if k[:2] == (model, namespace)]:
                    del table[key]

    def set_gauge(self, name: str, labels: Mapping[str, str], value: float) -> None:
        """Expose an arbitrary gauge, e.g. a Kthena policy metric ``{namespace, pod}``."""
        with self._lock:
            self._custom[_custom_key(name, labels)] = float(value)

    def remove_gauge(self, name: str, labels: Mapping[str, str]) -> None:
        """Stop exposing a gauge set with :meth:`set_gauge`."""
        with self._lock:
            self._custom.pop(_custom_key(name, labels), None)

    # -- exposition ------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """Yield the current metric families (called by ``prometheus_client`` on every scrape)."""
        with self._lock:
            now = self._clock()
            loads = {key: load.values(now) for key, load in self._loads.items()}
            gauges = dict(self._gauges)
            custom = dict(self._custom)
            latency = dict(self._latency)
        yield from _load_families(loads)
        yield from _latency_families(loads, latency)
        yield from _gauge_families(gauges)
        yield from _custom_families(custom)


class _MetricsHandler(BaseHTTPRequestHandler):
    """``GET /metrics`` in text format 0.0.4 (colons kept); anything else is 404."""

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404)
            return
        body = generate_latest(self.server.registry)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature of the base
        """Keep test output quiet."""


def _custom_key(name: str, labels: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    if not _METRIC_NAME.match(name):
        raise ValueError(f"invalid metric name {name!r}")
    bad = [label for label in labels if not _LABEL_NAME.match(label) or label.startswith("__")]
    if bad:
        raise ValueError(f"invalid label names {bad}")
    return name, tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _labels_of(key: tuple[str, tuple[tuple[str, str], ...]], *names: str) -> tuple[str | None, ...]:
    """The values of ``names`` in the labels of a custom gauge key."""
    labels = dict(key[1])
    return tuple(labels.get(name) for name in names)


def _load_families(loads: Mapping[PodKey, tuple[float, float, float]]) -> Iterator[Metric]:
    success = CounterMetricFamily(
        "vllm:request_success",
        "Count of successfully processed requests.",
        labels=[*POD_LABELS, "finished_reason"],
    )
    prompt = Metric("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "histogram")
    generation = Metric("vllm:request_generation_tokens", "Number of generation tokens processed.", "histogram")
    for key, (requests, prompt_tokens, generation_tokens) in sorted(loads.items()):
        success.add_metric([*key, "stop"], requests)
        _add_histogram(prompt, dict(zip(POD_LABELS, key)), prompt_tokens, requests, PROMPT_BUCKETS)
        _add_histogram(generation, dict(zip(POD_LABELS, key)), generation_tokens, requests)
    yield from (success, prompt, generation)


# vLLM's prompt-token buckets (build_1_2_5_buckets); every request of a pod is counted at its mean size.
PROMPT_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)


def _add_histogram(
    family: Metric, labels: dict[str, str], total: float, count: float, bounds: Sequence[float] = ()
) -> None:
    """Every one of ``count`` observations at their mean ``total / count``; a mean on a bound is within it (the
    division's rounding is tolerated: 0.1 * 3 / 3 > 0.1, and a bucket that flickered to 0 between scrapes would read
    to Prometheus as a counter reset, inflating its ``increase``)."""
    mean = total / count if count else 0.0
    for bound in bounds:
        within = mean <= bound * (1.0 + 1e-9)
        family.add_sample(f"{family.name}_bucket", {**labels, "le": f"{float(bound)}"}, count if within else 0.0)
    family.add_sample(f"{family.name}_bucket", {**labels, "le": "+Inf"}, count)
    family.add_sample(f"{family.name}_count", labels, count)
    family.add_sample(f"{family.name}_sum", labels, total)


def _latency_families(
    loads: Mapping[PodKey, tuple[float, float, float]], latency: Mapping[PodKey, _PodLatency]
) -> Iterator[Metric]:
    ttft = Metric(TTFT_HISTOGRAM, "Histogram of time to first token in seconds.", "histogram")
    itl = {name: Metric(name, "Histogram of inter-token latency in seconds.", "histogram") for name in ITL_HISTOGRAMS}
    for key, pod in sorted(latency.items()):
        requests, _, generated = loads.get(key, (0.0, 0.0, 0.0))
        labels = dict(zip(POD_LABELS, key))
        _add_histogram(ttft, labels, pod.ttft_s * requests, requests, TTFT_BUCKETS_S)
        per_token = pod.itl_histogram != REQUEST_ITL_HISTOGRAM
        observed = max(generated - requests, 0.0) if per_token else requests
        _add_histogram(itl[pod.itl_histogram], labels, pod.itl_s * observed, observed, ITL_BUCKETS_S)
    yield from (family for family in (ttft, *itl.values()) if family.samples)


def _gauge_families(gauges: Mapping[PodKey, _PodGauges]) -> Iterator[Metric]:
    kv = GaugeMetricFamily(
        "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels=list(POD_LABELS)
    )
    waiting = GaugeMetricFamily(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels=list(POD_LABELS)
    )
    running = GaugeMetricFamily(
        "vllm:num_requests_running", "Number of requests in model execution batches.", labels=list(POD_LABELS)
    )
    for key, pod in sorted(gauges.items()):
        kv.add_metric(list(key), pod.kv_cache_usage)
        waiting.add_metric(list(key), pod.waiting)
        running.add_metric(list(key), pod.running)
    yield from (kv, waiting, running)


def _custom_families(custom: Mapping[tuple[str, tuple[tuple[str, str], ...]], float]) -> Iterator[Metric]:
    families: dict[str, Metric] = {}
    for (name, labels), value in sorted(custom.items()):
        family = families.setdefault(name, Metric(name, f"Test gauge {name}.", "gauge"))
        family.add_sample(name, dict(labels), value)
    yield from families.values()
