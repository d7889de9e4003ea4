"""Live load and saturation metrics for the optimizer: from Prometheus (vLLM metrics) or from a file.

Two sources implement :class:`MetricsSource`:

- :class:`PrometheusMetrics` queries ``/api/v1/query`` with ``requests``. One :meth:`~PrometheusMetrics.collect`
  costs two PromQL queries however many models are asked for (three with instance metrics): one for
  the loads grouped ``by (model_name, namespace)``, one for the pods grouped
  ``by (model_name, namespace, pod)``, both restricted to the requested namespaces with a regex
  matcher and evaluated at the same instant. Each query is a union of tagged sub-expressions
  (``label_replace(..., "mp_field", "<tag>", "", "")``), so values and sample timestamps come back
  together.
- :class:`FileMetrics` reads the same data from a YAML file, for local and CI runs
  (``modelplane optimize --metrics FILE``). :func:`write_metrics_file` writes a snapshot in that format,
  so live metrics can be captured once and replayed.

What is measured (the WVA conventions, vLLM metric names):

- arrival rate: ``sum by (model_name, namespace) (rate(vllm:request_success_total[1m]))``. Prometheus and
  WVA report req/min; :class:`ModelLoad` holds **req/s** (``arrival_rate_rps``), with
  ``arrival_rate_rpm`` for the WVA unit.
- average tokens per request: ``sum(rate(vllm:request_prompt_tokens_sum[1m])) /
  sum(rate(vllm:request_prompt_tokens_count[1m]))`` (same for ``vllm:request_generation_tokens``). With no
  request in the window the ratio is undefined, so it falls back to ``increase`` over a longer window
  (5m). A model with arrival rate 0 and no token data in either window is idle: its load is all zeros
  (WVA replaces NaN by 0 the same way). A positive rate without token data is reported missing.
- shape of the load (optional, in the same query): the highest 1-minute arrival rate over the last
  ``peak_window`` (3m: a replica's start-up plus one cycle), ``max_over_time(sum by (...) (rate(...[1m]))[3m:1m])``,
  and the prompt-token histogram over the fallback window, ``sum by (..., le)
  (increase(vllm:request_prompt_tokens_bucket[5m]))``, as ``ModelLoad.recent_peak_rps`` and
  ``ModelLoad.prompt_buckets`` (None when absent: sizing then falls back to the last minute and the mean request).
- per pod: ``vllm:kv_cache_usage_perc`` (0..1, max over a pod's series; for a pod that only exposes
  the pre-0.10 name ``vllm:gpu_cache_usage_perc``, that one) and ``vllm:num_requests_waiting``
  (summed) as :class:`PodMetrics`.
- instance metrics (Kthena AutoscalingPolicy ``spec.metrics``): any metric name, summed per pod.

The Prometheus contract (what the scrape configuration must deliver): every vLLM series carries
``model_name`` (the served model name = VariantAutoscaling ``spec.modelID``) and ``namespace`` (the
workload's namespace); the per-pod gauges (KV cache, waiting requests) and Kthena instance metrics also
carry ``pod`` (the pod name, which starts with the scale target's name). The usual Kubernetes
service-discovery relabelling (``__meta_kubernetes_namespace`` -> ``namespace``,
``__meta_kubernetes_pod_name`` -> ``pod``) provides them; series without them are not seen.

Missing data is not an exception. A requested model without fresh samples is absent from
``snapshot.loads`` (or ``snapshot.pods``) and a sentence saying why is appended to
``snapshot.missing`` (and to ``snapshot.missing_by_model[key]``). Samples older than ``max_age_s`` (seconds, by their Prometheus timestamps, against
the evaluation instant) count as missing: after a Prometheus restart the last values of a vanished
target stay queryable for the 5 minute lookback. Only an unreachable or failing Prometheus raises
:class:`MetricsUnavailable` (after ``retries`` retries with exponential backoff for connection errors,
timeouts, 5xx and 429). Messages name the URL and what failed; the bearer token never appears in a
message, a log line or ``repr``.

Note on ``rate``: Prometheus divides the (extrapolated) increase by the whole window, so a series younger
than the window under-reports (a pod up for 20 s shows a third of its rate over ``[1m]``). WVA has the
same bias; tests use a short window (``rate_window="5s"``).

Metrics file format (YAML; ``models``, ``instances`` and ``collectedAt`` may each be left out)::

    collectedAt: 2026-11-22T12:00:00Z    # when the numbers were taken; default: the file's mtime
    models:
      - model: meta/llama-3.1-8b          # the vLLM model_name label (VariantAutoscaling modelID)
        namespace: llm-serving
        arrivalRate: 1200                 # req/min, as WVA and Prometheus report it ...
        # arrivalRateRps: 20              # ... or req/s; exactly one of the two gives the model a load
        avgInputTokens: 128               # required with an arrival rate
        avgOutputTokens: 256              # required with an arrival rate
        pods:                             # saturation inputs, one entry per vLLM pod
          - {name: llama-8b-a100-0, kvCacheUsage: 0.42, queueLength: 1}
    instances:                            # Kthena policy metrics per pod
      - namespace: llm-serving
        pod: llama-8b-a100-0
        metrics: {"vllm:num_requests_waiting": 3}

A model entry needs ``model`` and ``namespace``; a pod entry all three of its keys; an instance entry
``namespace``, ``pod`` and ``metrics``. Numbers must be non-negative (``kvCacheUsage`` within 0..1;
instance metric values may be any number); unknown keys, duplicate models and wrong
types are rejected with :class:`MetricsFileError` naming the file and the field
(``metrics.yaml: models[0].avgInputTokens: expected a number >= 0, got 'abc'``). The file is re-read on
every call, so it can be edited between runs; ``max_age_s`` does not apply to it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import os
import pathlib
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

import requests
import yaml

from tasks.files import write_atomically

log = logging.getLogger(__name__)

REQUEST_SUCCESS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:request_prompt_tokens"
GENERATION_TOKENS = "vllm:request_generation_tokens"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
KV_CACHE_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"
"""The same gauge under its name before vLLM 0.10; read for a pod only when the new name is absent."""
REQUESTS_WAITING = "vllm:num_requests_waiting"

InstanceKey = tuple[str, str]  # (namespace, pod)

_MODEL_LABELS = ("model_name", "namespace")
_POD_LABELS = ("model_name", "namespace", "pod")
_LOAD_TAGS = ("rate", "seen", "in", "out", "peak")
_POD_TAGS = ("kv", "kv_seen", "waiting", "waiting_seen")
_TAG = "mp_field"
_METRIC_TAG = "mp_metric"
# libyaml's parser when available: a metrics file for 500 models parses ~10x faster than pure Python.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d)$")
_REGEX_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")\]]+")


# -- errors ----------------------------------------------------------------------------------------


class MetricsError(Exception):
    """Base class of the metrics errors."""


class MetricsUnavailable(MetricsError):
    """Prometheus could not be reached or refused the query; the flow must not act on missing load."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"Prometheus at {url}: {reason}")
        self.url = url
        self.reason = reason


class MetricsFileError(MetricsError, ValueError):
    """A metrics file is unreadable or malformed; ``field`` is the offending path inside it."""

    def __init__(self, path: str | os.PathLike[str], field: str, problem: str) -> None:
        location = f"{path}: {field}" if field else str(path)
        super().__init__(f"{location}: {problem}")
        self.path = str(path)
        self.field = field
        self.problem = problem


# -- data types ------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class ModelKey:
    """One served model: the vLLM ``model_name`` label and the namespace of its pods."""

    model_id: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.model_id} in {self.namespace}"


@dataclass(frozen=True)
class ModelLoad:
    """The load on one model: arrival rate in **requests per second** and mean tokens per request.

    ``sampled_at`` is the timestamp of the newest sample behind it (not part of equality).
    """

    arrival_rate_rps: float
    avg_in_tokens: float
    avg_out_tokens: float
    sampled_at: dt.datetime | None = field(default=None, compare=False)
    prompt_buckets: tuple[tuple[float, float], ...] | None = field(default=None, compare=False)
    """``(le, requests)`` of ``vllm:request_prompt_tokens_bucket`` over the fallback window, for tail-aware sizing."""
    recent_peak_rps: float | None = field(default=None, compare=False)
    """Highest ``rate_window`` arrival rate over the last ``peak_window`` (start-up-aware sizing)."""

    @property
    def arrival_rate_rpm(self) -> float:
        """The arrival rate in requests per minute, the unit WVA and its Prometheus queries use."""
        return self.arrival_rate_rps * 60.0


@dataclass(frozen=True)
class PodMetrics:
    """Saturation of one vLLM pod: KV-cache usage (0..1) and requests waiting in its queue."""

    pod: str
    kv_cache_usage: float
    queue_length: float
    sampled_at: dt.datetime | None = field(default=None, compare=False)


@dataclass(frozen=True)
class MetricsSnapshot:
    """Everything one optimization cycle reads, taken at ``collected_at`` (UTC).

    ``missing`` explains every requested model (or pod) that has no usable data; such a model is
    absent from ``loads`` (respectively ``pods``), never reported as zero. ``missing_by_model`` holds
    the same sentences keyed by model, so callers need not match model names inside the text.
    """

    loads: dict[ModelKey, ModelLoad]
    pods: dict[ModelKey, list[PodMetrics]]
    instance_metrics: dict[InstanceKey, dict[str, float]]
    collected_at: dt.datetime
    missing: list[str]
    missing_by_model: dict[ModelKey, list[str]] = field(default_factory=dict)

    def missing_for(self, key: ModelKey) -> list[str]:
        """Why ``key`` has no load or pod data (empty when everything was found)."""
        return list(self.missing_by_model.get(key, []))


class _Missing:
    """Collects the "missing data" sentences of one snapshot, in order and per model."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.by_model: dict[ModelKey, list[str]] = {}

    def add(self, message: str, key: ModelKey | None = None) -> None:
        self.lines.append(message)
        if key is not None:
            self.by_model.setdefault(key, []).append(message)


@runtime_checkable
class MetricsSource(Protocol):
    """Where the optimizer gets live load: :class:`PrometheusMetrics` or :class:`FileMetrics`."""

    def collect(
        self,
        models: Iterable[ModelKey],
        instance_metric_names: Iterable[str] = (),
        instance_namespaces: Iterable[str] | None = None,
    ) -> MetricsSnapshot:
        """Loads and pod saturation of ``models``; plus, when ``instance_metric_names`` is given, those
        metrics for every pod of ``instance_namespaces`` (default: the models' namespaces)."""
        ...

    def instance_metrics(
        self, metric_names: Iterable[str], namespace: str, pods: Iterable[str]
    ) -> dict[str, dict[str, float]]:
        """Per-pod values of arbitrary metrics (Kthena policy metrics): ``{pod: {metric: value}}``.

        Pods (or metrics) without fresh data are absent from the answer.
        """
        ...


# -- Prometheus --------------------------------------------------------------------------------------


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class PrometheusMetrics:
    """Reads vLLM metrics from the Prometheus HTTP API (``POST /api/v1/query``).

    ``retries`` is the number of retries after the first attempt; the n-th retry waits
    ``backoff_s * 2**(n-1)`` seconds. ``rate_window`` and ``fallback_window`` are PromQL durations
    (WVA: ``1m``; the token fallback ``5m``); ``max_age_s`` is the oldest sample still used.
    ``verify_tls`` is ``requests``' ``verify`` (a bool or a CA bundle path). The bearer token is given
    directly or as ``bearer_token_file``, re-read before every query. ``clock`` gives the evaluation
    instant of a cycle's queries (``time=`` parameter), so they all see the same moment.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        bearer_token: str | None = None,
        verify_tls: bool | str = True,
        *,
        bearer_token_file: str | os.PathLike[str] | None = None,
        rate_window: str = "1m",
        fallback_window: str = "5m",
        peak_window: str = "3m",
        max_age_s: float = 120.0,
        session: requests.Session | None = None,
        clock: Callable[[], dt.datetime] = _utcnow,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        for name, window in (
            ("rate_window", rate_window),
            ("fallback_window", fallback_window),
            ("peak_window", peak_window),
        ):
            if not _DURATION.match(window):
                raise ValueError(f"{name} must be a PromQL duration such as 1m or 30s, got {window!r}")
        if retries < 0 or timeout_s <= 0 or backoff_s < 0 or max_age_s <= 0:
            raise ValueError("retries and backoff_s must be >= 0, timeout_s and max_age_s > 0")
        if bearer_token and bearer_token_file:
            raise ValueError("give bearer_token or bearer_token_file, not both")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.verify_tls = verify_tls
        self.rate_window = rate_window
        self.fallback_window = fallback_window
        self.peak_window = peak_window
        self.max_age_s = max_age_s
        self.session = session or requests.Session()
        self._token = bearer_token
        self._token_file = pathlib.Path(bearer_token_file) if bearer_token_file else None
        self._clock = clock
        self._sleep = sleep
        self._display_url = _strip_userinfo(self.url)

    def __repr__(self) -> str:
        auth = ", bearer_token=***" if self._token else ""
        if self._token_file:
            auth = f", bearer_token_file={str(self._token_file)!r}"
        return f"PrometheusMetrics({self._display_url!r}{auth})"

    @classmethod
    def from_env(cls, url: str | None = None, environ: Mapping[str, str] | None = None) -> PrometheusMetrics | None:
        """A client configured from the environment, or None without a URL.

        ``url`` (else ``PROMETHEUS_URL``); ``PROMETHEUS_TOKEN`` or ``PROMETHEUS_TOKEN_FILE`` (re-read on
        every query, as projected service-account tokens rotate); ``PROMETHEUS_CA_BUNDLE`` or
        ``PROMETHEUS_TLS_INSECURE=true``; ``PROMETHEUS_TIMEOUT_S``, ``PROMETHEUS_RETRIES``,
        ``PROMETHEUS_BACKOFF_S``, ``PROMETHEUS_RATE_WINDOW``, ``PROMETHEUS_FALLBACK_WINDOW`` and
        ``PROMETHEUS_MAX_AGE_S`` override the defaults (tests use ``PROMETHEUS_RATE_WINDOW=5s``).
        """
        env = os.environ if environ is None else environ
        url = url or env.get("PROMETHEUS_URL")
        if not url:
            return None
        verify: bool | str = env.get("PROMETHEUS_CA_BUNDLE") or True
        if env.get("PROMETHEUS_TLS_INSECURE", "").lower() in ("1", "true", "yes"):
            verify = False
        options: dict[str, Any] = {}
        for name, option, kind in _ENV_OPTIONS:
            if env.get(name):
                options[option] = _env_value(name, env[name], kind)
        return cls(
            url,
            verify_tls=verify,
            bearer_token=env.get("PROMETHEUS_TOKEN") or None,
            bearer_token_file=env.get("PROMETHEUS_TOKEN_FILE") or None,
            **options,
        )

    # -- public API --------------------------------------------------------------------------------

    def collect(
        self,
        models: Iterable[ModelKey],
        instance_metric_names: Iterable[str] = (),
        instance_namespaces: Iterable[str] | None = None,
    ) -> MetricsSnapshot:
        """Loads and pod saturation of ``models`` in a constant number of queries (see the module doc)."""
        keys = sorted(set(models))
        names = _checked_metric_names(instance_metric_names)
        namespaces = sorted({key.namespace for key in keys})
        instance_ns = sorted(set(instance_namespaces)) if instance_namespaces is not None else namespaces
        now = self._clock()
        missing = _Missing()
        loads: dict[ModelKey, ModelLoad] = {}
        pods: dict[ModelKey, list[PodMetrics]] = {}
        if keys:
            selector = f"namespace=~{_quote(_regex_union(namespaces))}"
            raw_loads = self._query(self._load_query(selector), now)
            load_rows = _tagged_rows(raw_loads, _MODEL_LABELS, _LOAD_TAGS)
            pod_rows = _tagged_rows(self._query(self._pod_query(selector), now), _POD_LABELS, _POD_TAGS)
            loads = _with_shape(
                self._assemble_loads(keys, load_rows, now, missing), load_rows["peak"], _prompt_buckets(raw_loads)
            )
            pods = self._assemble_pods(keys, pod_rows, now, missing)
        instances: dict[InstanceKey, dict[str, float]] = {}
        if names and instance_ns:
            selector = f"namespace=~{_quote(_regex_union(instance_ns))}"
            instances = self._instances(names, selector, now, missing)
        return MetricsSnapshot(loads, pods, instances, now, missing.lines, missing.by_model)

    def instance_metrics(
        self, metric_names: Iterable[str], namespace: str, pods: Iterable[str]
    ) -> dict[str, dict[str, float]]:
        """``{pod: {metric: value}}`` for ``pods`` of ``namespace``, in one query; see :class:`MetricsSource`."""
        names = _checked_metric_names(metric_names)
        pod_names = sorted(set(pods))
        if not names or not pod_names:
            return {}
        selector = f"namespace={_quote(namespace)}, pod=~{_quote(_regex_union(pod_names))}"
        ignored = _Missing()
        values = self._instances(names, selector, self._clock(), ignored)
        for note in ignored.lines:
            log.debug("instance metrics: %s", note)
        return {pod: metrics for (_, pod), metrics in values.items()}

    # -- PromQL ------------------------------------------------------------------------------------

    def _load_query(self, selector: str) -> str:
        by = "model_name, namespace"
        return _union(
            {
                "rate": f"sum by ({by}) (rate({REQUEST_SUCCESS}{{{selector}}}[{self.rate_window}]))",
                "seen": f"max by ({by}) (timestamp({REQUEST_SUCCESS}{{{selector}}}))",
                "in": self._tokens_expr(PROMPT_TOKENS, selector, by),
                "out": self._tokens_expr(GENERATION_TOKENS, selector, by),
                # Start-up-aware sizing (engine.perf.load_peak) and tail-aware sizing (engine.perf.tail_sizing).
                "peak": f"max_over_time((sum by ({by}) (rate({REQUEST_SUCCESS}{{{selector}}}[{self.rate_window}])))"
                f"[{self.peak_window}:{self.rate_window}])",
                "bucket": f"sum by ({by}, le) (increase({PROMPT_TOKENS}_bucket{{{selector}}}[{self.fallback_window}]))",
            }
        )

    def _tokens_expr(self, histogram: str, selector: str, by: str) -> str:
        def ratio(function: str, window: str) -> str:
            total = f"sum by ({by}) ({function}({histogram}_sum{{{selector}}}[{window}]))"
            count = f"sum by ({by}) ({function}({histogram}_count{{{selector}}}[{window}]))"
            return f"({total} / ({count} > 0))"

        return f"{ratio('rate', self.rate_window)} or {ratio('increase', self.fallback_window)}"

    @staticmethod
    def _pod_query(selector: str) -> str:
        by = "model_name, namespace, pod"
        return _union(
            {
                # vLLM < 0.10 named the gauge vllm:gpu_cache_usage_perc: used per pod where the new name is absent
                "kv": f"(max by ({by}) ({KV_CACHE_USAGE}{{{selector}}}) or max by ({by}) ({KV_CACHE_USAGE_LEGACY}{{{selector}}}))",
                "kv_seen": f"(max by ({by}) (timestamp({KV_CACHE_USAGE}{{{selector}}}))"
                f" or max by ({by}) (timestamp({KV_CACHE_USAGE_LEGACY}{{{selector}}})))",
                "waiting": f"sum by ({by}) ({REQUESTS_WAITING}{{{selector}}})",
                "waiting_seen": f"max by ({by}) (timestamp({REQUESTS_WAITING}{{{selector}}}))",
            }
        )

    def _instances(
        self, names: list[str], selector: str, now: dt.datetime, missing: _Missing
    ) -> dict[InstanceKey, dict[str, float]]:
        parts = []
        for name in names:
            value = f"sum by (namespace, pod) ({name}{{{selector}}})"
            seen = f"max by (namespace, pod) (timestamp({name}{{{selector}}}))"
            parts.append(_tag(_tag(value, _TAG, "value"), _METRIC_TAG, name))
            parts.append(_tag(_tag(seen, _TAG, "seen"), _METRIC_TAG, name))
        rows = self._query(" or ".join(parts), now)
        values: dict[tuple[str, str, str], float] = {}
        seen: dict[tuple[str, str, str], float] = {}
        for row in rows:
            labels = row.get("metric", {})
            key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get(_METRIC_TAG, ""))
            target = values if labels.get(_TAG) == "value" else seen
            target[key] = _sample_value(row)
        result: dict[InstanceKey, dict[str, float]] = {}
        for (namespace, pod, name), value in sorted(values.items()):
            age = _age(now, seen.get((namespace, pod, name)))
            if age is not None and age > self.max_age_s:
                missing.add(f"{name} for pod {pod} in {namespace} is {age:.0f}s old (max {self.max_age_s:g}s)")
                continue
            result.setdefault((namespace, pod), {})[name] = value
        return result

    # -- assembly ----------------------------------------------------------------------------------

    def _assemble_loads(
        self, keys: list[ModelKey], rows: dict[str, dict[tuple[str, ...], float]], now: dt.datetime, missing: _Missing
    ) -> dict[ModelKey, ModelLoad]:
        loads: dict[ModelKey, ModelLoad] = {}
        for key in keys:
            label_key = (key.model_id, key.namespace)
            seen = rows["seen"].get(label_key)
            age = _age(now, seen)
            rate = rows["rate"].get(label_key)
            if seen is None or age is None:
                missing.add(f"no {REQUEST_SUCCESS} samples for {key}", key)
            elif age > self.max_age_s:
                missing.add(f"{REQUEST_SUCCESS} for {key} is {age:.0f}s old (max {self.max_age_s:g}s)", key)
            elif rate is None or math.isnan(rate):
                missing.add(f"{REQUEST_SUCCESS} for {key} has fewer than 2 samples in the last {self.rate_window}", key)
            else:
                load = self._load(key, rate, rows["in"].get(label_key), rows["out"].get(label_key), seen, missing)
                if load is not None:
                    loads[key] = load
        return loads

    def _load(
        self,
        key: ModelKey,
        rate: float,
        tokens_in: float | None,
        tokens_out: float | None,
        seen: float,
        missing: _Missing,
    ) -> ModelLoad | None:
        sampled_at = _from_epoch(seen)
        if tokens_in is not None and tokens_out is not None:
            return ModelLoad(rate, tokens_in, tokens_out, sampled_at)
        if rate == 0.0:
            return ModelLoad(0.0, tokens_in or 0.0, tokens_out or 0.0, sampled_at)
        absent = PROMPT_TOKENS if tokens_in is None else GENERATION_TOKENS
        missing.add(f"no {absent} samples for {key} in the last {self.fallback_window}", key)
        return None

    def _assemble_pods(
        self, keys: list[ModelKey], rows: dict[str, dict[tuple[str, ...], float]], now: dt.datetime, missing: _Missing
    ) -> dict[ModelKey, list[PodMetrics]]:
        wanted = {(key.model_id, key.namespace): key for key in keys}
        pods: dict[ModelKey, list[PodMetrics]] = {}
        for label_key in sorted(set(rows["kv"]) | set(rows["waiting"])):
            key = wanted.get(label_key[:2])
            if key is None:
                continue
            pod = self._pod(key, label_key[2], label_key, rows, now, missing)
            if pod is not None:
                pods.setdefault(key, []).append(pod)
        reported = {label_key[:2] for label_key in set(rows["kv"]) | set(rows["waiting"])}
        for key in keys:
            if (key.model_id, key.namespace) not in reported:
                missing.add(f"no {KV_CACHE_USAGE} or {REQUESTS_WAITING} samples for {key}", key)
        return pods

    def _pod(
        self,
        key: ModelKey,
        pod: str,
        label_key: tuple[str, ...],
        rows: dict[str, dict[tuple[str, ...], float]],
        now: dt.datetime,
        missing: _Missing,
    ) -> PodMetrics | None:
        for metric, tag in ((KV_CACHE_USAGE, "kv"), (REQUESTS_WAITING, "waiting")):
            if label_key not in rows[tag]:
                missing.add(f"pod {pod} of {key} has no {metric} sample", key)
                return None
        seen = [rows[tag].get(label_key) for tag in ("kv_seen", "waiting_seen")]
        oldest = min((s for s in seen if s is not None), default=None)
        age = _age(now, oldest)
        if oldest is None or age is None or age > self.max_age_s:
            shown = "of unknown age" if age is None else f"{age:.0f}s old"
            missing.add(f"metrics of pod {pod} of {key} are {shown} (max {self.max_age_s:g}s)", key)
            return None
        return PodMetrics(pod, rows["kv"][label_key], rows["waiting"][label_key], _from_epoch(oldest))

    # -- HTTP --------------------------------------------------------------------------------------

    def _query(self, promql: str, at: dt.datetime) -> list[dict[str, Any]]:
        """Run one instant query at ``at`` with retries; return ``data.result`` (a vector)."""
        data = {"query": promql, "time": f"{at.timestamp():.3f}"}
        token = self._bearer_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.session.post(
                    f"{self.url}/api/v1/query",
                    data=data,
                    headers=headers,
                    timeout=self.timeout_s,
                    verify=self.verify_tls,
                )
            except requests.Timeout:
                failure = f"timed out after {self.timeout_s:g}s"
                continue
            except requests.ConnectionError as exc:
                failure = f"connection failed ({self._describe(exc)})"
                continue
            except requests.RequestException as exc:
                raise self._unavailable(f"request failed ({self._describe(exc)})") from None
            if response.status_code >= 500 or response.status_code == 429:
                failure = f"HTTP {response.status_code} {response.reason}"
                continue
            return self._decode(response)
        attempts = self.retries + 1
        raise self._unavailable(f"{failure} ({attempts} attempt{'s' if attempts > 1 else ''})")

    def _decode(self, response: requests.Response) -> list[dict[str, Any]]:
        if response.status_code in (401, 403):
            raise self._unavailable(f"HTTP {response.status_code} {response.reason}: check the credentials")
        try:
            body = response.json()
        except ValueError:
            status = (
                f"HTTP {response.status_code} {response.reason}"
                if response.status_code >= 400
                else (f"HTTP {response.status_code}")
            )
            raise self._unavailable(f"{status}: the answer is not JSON (is it the Prometheus base URL?)") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", "no error message") if isinstance(body, dict) else "malformed answer"
            kind = body.get("errorType", "error") if isinstance(body, dict) else "error"
            raise self._unavailable(f"query failed ({kind}: {self._redact(str(error))})")
        result = body.get("data") or {}
        if result.get("resultType") != "vector" or not isinstance(result.get("result"), list):
            raise self._unavailable(f"expected a vector result, got {result.get('resultType')!r}")
        return list(result["result"])

    def _bearer_token(self) -> str | None:
        if self._token_file is None:
            return self._token
        try:
            self._token = self._token_file.read_text().strip() or None
        except OSError as exc:
            raise self._unavailable(
                f"cannot read the bearer token file {self._token_file} ({exc.strerror or type(exc).__name__})"
            ) from None
        return self._token

    def _unavailable(self, reason: str) -> MetricsUnavailable:
        return MetricsUnavailable(self._display_url, self._redact(reason))

    def _describe(self, exc: Exception) -> str:
        match = _ERRNO.search(str(exc))
        return self._redact(match.group(0) if match else type(exc).__name__)

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text


_ENV_OPTIONS: tuple[tuple[str, str, type], ...] = (
    ("PROMETHEUS_TIMEOUT_S", "timeout_s", float),
    ("PROMETHEUS_RETRIES", "retries", int),
    ("PROMETHEUS_BACKOFF_S", "backoff_s", float),
    ("PROMETHEUS_RATE_WINDOW", "rate_window", str),
    ("PROMETHEUS_FALLBACK_WINDOW", "fallback_window", str),
    ("PROMETHEUS_PEAK_WINDOW", "peak_window", str),
    ("PROMETHEUS_MAX_AGE_S", "max_age_s", float),
)


def _env_value(name: str, raw: str, kind: type) -> Any:
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be a{'n integer' if kind is int else ' number'}, got {raw!r}") from None


# -- PromQL helpers ---------------------------------------------------------------------------------


def _quote(value: str) -> str:
    """A PromQL double-quoted string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _regex_union(values: Iterable[str]) -> str:
    """An RE2 alternation matching exactly ``values`` (Prometheus anchors label regexes)."""
    return "|".join(_REGEX_SPECIAL.sub(r"\\\1", value) for value in values)


def _tag(expr: str, label: str, value: str) -> str:
    """``expr`` with the constant label ``label="value"`` added (``label_replace`` on an empty source)."""
    return f'label_replace({expr}, "{label}", {_quote(value)}, "", "")'


def _union(parts: Mapping[str, str]) -> str:
    """One query returning every part, each tagged with ``mp_field=<tag>`` so the rows can be told apart."""
    return " or ".join(_tag(expr, _TAG, tag) for tag, expr in parts.items())


def _tagged_rows(
    rows: list[dict[str, Any]], labels: tuple[str, ...], tags: Iterable[str]
) -> dict[str, dict[tuple[str, ...], float]]:
    """``{tag: {label values: sample value}}`` from the answer of a :func:`_union` query."""
    grouped: dict[str, dict[tuple[str, ...], float]] = {tag: {} for tag in tags}
    for row in rows:
        metric = row.get("metric", {})
        key = tuple(metric.get(label, "") for label in labels)
        grouped.setdefault(metric.get(_TAG, ""), {})[key] = _sample_value(row)
    return grouped


def _prompt_buckets(rows: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[tuple[float, float], ...]]:
    """Per (model_name, namespace): the prompt-token histogram's ``(le, count)`` pairs, by increasing ``le``."""
    buckets: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row in rows:
        metric = row.get("metric", {})
        if metric.get(_TAG) != "bucket":
            continue
        try:
            bound = float(metric.get("le", ""))
        except ValueError:
            continue
        value = _sample_value(row)
        if not math.isnan(value):
            buckets.setdefault((metric.get("model_name", ""), metric.get("namespace", "")), []).append((bound, value))
    return {key: tuple(sorted(pairs)) for key, pairs in buckets.items()}


def _with_shape(
    loads: dict[ModelKey, ModelLoad],
    peaks: Mapping[tuple[str, ...], float],
    buckets: Mapping[tuple[str, str], tuple[tuple[float, float], ...]],
) -> dict[ModelKey, ModelLoad]:
    """The loads with their recent peak rate and prompt histogram, where Prometheus has them."""
    shaped: dict[ModelKey, ModelLoad] = {}
    for key, load in loads.items():
        label_key = (key.model_id, key.namespace)
        peak = peaks.get(label_key)
        histogram = buckets.get(label_key)
        shaped[key] = dataclasses.replace(
            load,
            recent_peak_rps=peak if peak is not None and math.isfinite(peak) else None,
            prompt_buckets=histogram if histogram and histogram[-1][1] > 0 else None,
        )
    return shaped


def _sample_value(row: Mapping[str, Any]) -> float:
    try:
        return float(row["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan


def _checked_metric_names(names: Iterable[str]) -> list[str]:
    checked = sorted(set(names))
    bad = [name for name in checked if not _METRIC_NAME.match(name)]
    if bad:
        raise ValueError(f"invalid metric names: {', '.join(map(repr, bad))}")
    return checked


def _age(now: dt.datetime, epoch: float | None) -> float | None:
    if epoch is None or math.isnan(epoch):
        return None
    return max(now.timestamp() - epoch, 0.0)


def _from_epoch(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


def _strip_userinfo(url: str) -> str:
    """The URL without ``user:password@`` (for messages)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


# -- file ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FileModel:
    key: ModelKey
    load: ModelLoad | None
    pods: list[PodMetrics]


@dataclass(frozen=True)
class _FileDocument:
    collected_at: dt.datetime
    models: dict[ModelKey, _FileModel]
    instances: dict[InstanceKey, dict[str, float]]


class FileMetrics:
    """A :class:`MetricsSource` backed by a YAML file (format in the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)

    def __repr__(self) -> str:
        return f"FileMetrics({str(self.path)!r})"

    def collect(
        self,
        models: Iterable[ModelKey],
        instance_metric_names: Iterable[str] = (),
        instance_namespaces: Iterable[str] | None = None,
    ) -> MetricsSnapshot:
        """The file's loads and pods for ``models``; see :class:`MetricsSource`."""
        document = self.read()
        keys = sorted(set(models))
        loads: dict[ModelKey, ModelLoad] = {}
        pods: dict[ModelKey, list[PodMetrics]] = {}
        missing = _Missing()
        for key in keys:
            entry = document.models.get(key)
            if entry is None or entry.load is None:
                missing.add(f"no load for {key} in {self.path}", key)
            else:
                loads[key] = entry.load
            if entry is None or not entry.pods:
                missing.add(f"no pod metrics for {key} in {self.path}", key)
            else:
                pods[key] = list(entry.pods)
        names = set(_checked_metric_names(instance_metric_names))
        namespaces = set(instance_namespaces) if instance_namespaces is not None else {k.namespace for k in keys}
        instances = {
            key: picked
            for key, values in document.instances.items()
            if key[0] in namespaces and (picked := {n: v for n, v in values.items() if n in names})
        }
        return MetricsSnapshot(loads, pods, instances, document.collected_at, missing.lines, missing.by_model)

    def instance_metrics(
        self, metric_names: Iterable[str], namespace: str, pods: Iterable[str]
    ) -> dict[str, dict[str, float]]:
        """``{pod: {metric: value}}`` from the file's ``instances``; see :class:`MetricsSource`."""
        names = set(_checked_metric_names(metric_names))
        document = self.read()
        result: dict[str, dict[str, float]] = {}
        for pod in sorted(set(pods)):
            values = document.instances.get((namespace, pod), {})
            picked = {name: value for name, value in values.items() if name in names}
            if picked:
                result[pod] = picked
        return result

    def read(self) -> _FileDocument:
        """Parse and validate the file; raise :class:`MetricsFileError` on any problem."""
        try:
            text = self.path.read_text()
            mtime = _from_epoch(self.path.stat().st_mtime)
        except OSError as exc:
            raise MetricsFileError(self.path, "", f"cannot read: {exc.strerror or exc}") from None
        try:
            raw = yaml.load(text, Loader=_YAML_LOADER)
        except yaml.YAMLError as exc:
            raise MetricsFileError(self.path, "", f"not valid YAML: {exc}") from None
        return _FileParser(self.path).document(raw if raw is not None else {}, mtime)


class _FileParser:
    """Validates a metrics document, raising :class:`MetricsFileError` with the field path."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> MetricsFileError:
        return MetricsFileError(self.path, where, problem)

    def document(self, raw: Any, mtime: dt.datetime) -> _FileDocument:
        doc = self.mapping(raw, "", required=(), optional=("collectedAt", "models", "instances"))
        collected_at = self.timestamp(doc["collectedAt"], "collectedAt") if "collectedAt" in doc else mtime
        models: dict[ModelKey, _FileModel] = {}
        for index, item in enumerate(self.sequence(doc.get("models", []), "models")):
            entry = self.model(item, f"models[{index}]", collected_at)
            if entry.key in models:
                raise self.fail(f"models[{index}]", f"duplicate entry for {entry.key}")
            models[entry.key] = entry
        instances: dict[InstanceKey, dict[str, float]] = {}
        for index, item in enumerate(self.sequence(doc.get("instances", []), "instances")):
            key, values = self.instance(item, f"instances[{index}]")
            if key in instances:
                raise self.fail(f"instances[{index}]", f"duplicate entry for pod {key[1]} in {key[0]}")
            instances[key] = values
        return _FileDocument(collected_at, models, instances)

    def model(self, raw: Any, where: str, collected_at: dt.datetime) -> _FileModel:
        item = self.mapping(
            raw,
            where,
            required=("model", "namespace"),
            optional=("arrivalRate", "arrivalRateRps", "avgInputTokens", "avgOutputTokens", "pods"),
        )
        key = ModelKey(self.text(item["model"], f"{where}.model"), self.text(item["namespace"], f"{where}.namespace"))
        pods = [
            self.pod(p, f"{where}.pods[{i}]", collected_at)
            for i, p in enumerate(self.sequence(item.get("pods", []), f"{where}.pods"))
        ]
        names = [pod.pod for pod in pods]
        if len(set(names)) != len(names):
            raise self.fail(f"{where}.pods", "duplicate pod names")
        return _FileModel(key, self.load(item, where, collected_at), pods)

    def load(self, item: Mapping[str, Any], where: str, collected_at: dt.datetime) -> ModelLoad | None:
        if "arrivalRate" in item and "arrivalRateRps" in item:
            raise self.fail(where, "give arrivalRate (req/min) or arrivalRateRps (req/s), not both")
        if "arrivalRate" in item:
            rate_rps = self.number(item["arrivalRate"], f"{where}.arrivalRate") / 60.0
        elif "arrivalRateRps" in item:
            rate_rps = self.number(item["arrivalRateRps"], f"{where}.arrivalRateRps")
        else:
            for token_field in ("avgInputTokens", "avgOutputTokens"):
                if token_field in item:
                    raise self.fail(f"{where}.{token_field}", "needs arrivalRate or arrivalRateRps")
            return None
        tokens = []
        for token_field in ("avgInputTokens", "avgOutputTokens"):
            if token_field not in item:
                raise self.fail(f"{where}.{token_field}", "required with an arrival rate")
            tokens.append(self.number(item[token_field], f"{where}.{token_field}"))
        return ModelLoad(rate_rps, tokens[0], tokens[1], collected_at)

    def pod(self, raw: Any, where: str, collected_at: dt.datetime) -> PodMetrics:
        item = self.mapping(raw, where, required=("name", "kvCacheUsage", "queueLength"), optional=())
        kv = self.number(item["kvCacheUsage"], f"{where}.kvCacheUsage", maximum=1.0)
        queue = self.number(item["queueLength"], f"{where}.queueLength")
        return PodMetrics(self.text(item["name"], f"{where}.name"), kv, queue, collected_at)

    def instance(self, raw: Any, where: str) -> tuple[InstanceKey, dict[str, float]]:
        item = self.mapping(raw, where, required=("namespace", "pod", "metrics"), optional=())
        key = (self.text(item["namespace"], f"{where}.namespace"), self.text(item["pod"], f"{where}.pod"))
        metrics = self.mapping(item["metrics"], f"{where}.metrics", required=(), optional=None)
        values: dict[str, float] = {}
        for name, value in metrics.items():
            if not isinstance(name, str) or not _METRIC_NAME.match(name):
                raise self.fail(f"{where}.metrics", f"invalid metric name {name!r}")
            values[name] = self.number(value, f"{where}.metrics[{name!r}]", minimum=-math.inf)
        return key, values

    def mapping(self, raw: Any, where: str, required: Iterable[str], optional: Iterable[str] | None) -> dict[str, Any]:
        """``raw`` as a mapping with the ``required`` keys and no keys beyond ``optional`` (None: any)."""
        if not isinstance(raw, dict):
            raise self.fail(where, f"expected a mapping, got {_kind(raw)}")
        for key in required:
            if key not in raw:
                raise self.fail(_join(where, str(key)), "required")
        if optional is not None:
            allowed = set(required) | set(optional)
            unknown = sorted(str(key) for key in raw if key not in allowed)
            if unknown:
                raise self.fail(_join(where, unknown[0]), f"unknown field (allowed: {', '.join(sorted(allowed))})")
        return raw

    def sequence(self, raw: Any, where: str) -> list[Any]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.fail(where, f"expected a list, got {_kind(raw)}")
        return raw

    def text(self, raw: Any, where: str) -> str:
        if not isinstance(raw, str) or not raw:
            raise self.fail(where, f"expected a non-empty string, got {raw!r}")
        return raw

    def number(self, raw: Any, where: str, minimum: float = 0.0, maximum: float = math.inf) -> float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or math.isnan(raw):
            raise self.fail(where, f"expected a number{_bounds(minimum, maximum)}, got {raw!r}")
        value = float(raw)
        if not minimum <= value <= maximum:
            raise self.fail(where, f"expected a number{_bounds(minimum, maximum)}, got {raw!r}")
        return value

    def timestamp(self, raw: Any, where: str) -> dt.datetime:
        if isinstance(raw, str):
            try:
                raw = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                raise self.fail(where, f"expected an ISO 8601 timestamp, got {raw!r}") from None
        if not isinstance(raw, dt.datetime):
            raise self.fail(where, f"expected an ISO 8601 timestamp, got {raw!r}")
        return raw if raw.tzinfo else raw.replace(tzinfo=dt.UTC)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind(raw: Any) -> str:
    return "nothing" if raw is None else type(raw).__name__


def _bounds(minimum: float, maximum: float) -> str:
    if maximum != math.inf:
        return f" within {minimum:g}..{maximum:g}"
    return f" >= {minimum:g}" if minimum != -math.inf else ""


def snapshot_document(snapshot: MetricsSnapshot) -> dict[str, Any]:
    """A snapshot in the metrics file format (rates as ``arrivalRateRps``, exact)."""
    keys = sorted(set(snapshot.loads) | set(snapshot.pods))
    models = []
    for key in keys:
        entry: dict[str, Any] = {"model": key.model_id, "namespace": key.namespace}
        load = snapshot.loads.get(key)
        if load is not None:
            entry.update(
                arrivalRateRps=load.arrival_rate_rps,
                avgInputTokens=load.avg_in_tokens,
                avgOutputTokens=load.avg_out_tokens,
            )
        if snapshot.pods.get(key):
            entry["pods"] = [
                {"name": p.pod, "kvCacheUsage": p.kv_cache_usage, "queueLength": p.queue_length}
                for p in snapshot.pods[key]
            ]
        models.append(entry)
    instances = [
        {"namespace": ns, "pod": pod, "metrics": dict(sorted(values.items()))}
        for (ns, pod), values in sorted(snapshot.instance_metrics.items())
    ]
    return {"collectedAt": snapshot.collected_at.isoformat(), "models": models, "instances": instances}


def write_metrics_file(path: str | os.PathLike[str], snapshot: MetricsSnapshot) -> None:
    """Write ``snapshot`` to ``path`` in the metrics file format, atomically."""
    write_atomically(pathlib.Path(path), yaml.safe_dump(snapshot_document(snapshot), sort_keys=False))
