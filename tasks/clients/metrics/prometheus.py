"""Live load and saturation of vLLM models from the Prometheus HTTP API (``POST /api/v1/query``).

:class:`PrometheusMetrics` is the production :class:`~tasks.clients.metrics.snapshot.MetricsSource`. One
:meth:`~PrometheusMetrics.collect` costs two PromQL queries however many models are asked for (three with
instance metrics; the query text is in :mod:`engine.promql`), restricted to the requested
namespaces and evaluated at the same instant; this module runs them and assembles the answer per model:

- :class:`~tasks.clients.metrics.snapshot.ModelLoad` holds the arrival rate in **req/s** (``arrival_rate_rps``;
  Prometheus and WVA report req/min, ``arrival_rate_rpm``) and the mean tokens per request. A model with
  arrival rate 0 and no token data in either window is idle: its load is all zeros (WVA replaces NaN by 0
  the same way). A positive rate without token data is reported missing. The recent peak rate and the
  prompt histogram become ``ModelLoad.recent_peak_rps`` and ``ModelLoad.prompt_buckets`` (None when absent:
  sizing then falls back to the last minute and the mean request); the most requests in one ``burst_window``
  over the peak window becomes ``ModelLoad.burst_rps`` (:func:`engine.perf.load_burst.burst_rate`).
- per pod: KV-cache usage (0..1) and requests waiting as :class:`~tasks.clients.metrics.snapshot.PodMetrics`.
- instance metrics (Kthena AutoscalingPolicy ``spec.metrics``): any metric name, summed per pod.
- latency histograms (SLO attainment): with ``latency_windows``, the TTFT and ITL bucket increases of those
  models over their window and over the recent 2 minutes, one more query per distinct window, as
  ``snapshot.latency``; a model without them is in ``snapshot.latency_missing`` with the reason.

The Prometheus contract (what the scrape configuration must deliver): every vLLM series carries
``model_name`` (the served model name = VariantAutoscaling ``spec.modelID``) and ``namespace`` (the
workload's namespace); the per-pod gauges (KV cache, waiting requests) and Kthena instance metrics also
carry ``pod`` (the pod name, which starts with the scale target's name). The usual Kubernetes
service-discovery relabelling (``__meta_kubernetes_namespace`` -> ``namespace``,
``__meta_kubernetes_pod_name`` -> ``pod``) provides them; series without them are not seen.

Missing data is not an exception (see :mod:`tasks.clients.metrics.snapshot`). Samples older than ``max_age_s``
(seconds, by their Prometheus timestamps, against the evaluation instant) count as missing: after a
Prometheus restart the last values of a vanished target stay queryable for the 5 minute lookback. Only an
unreachable or failing Prometheus raises :class:`~tasks.clients.metrics.snapshot.MetricsUnavailable` (after
``retries`` retries with exponential backoff for connection errors, timeouts, 5xx and 429). Messages name
the URL and what failed; the bearer token never appears in a message, a log line or ``repr``.

Note on ``rate``: Prometheus divides the (extrapolated) increase by the whole window, so a series younger
than the window under-reports (a pod up for 20 s shows a third of its rate over ``[1m]``). WVA has the
same bias; tests use a short window (``rate_window="5s"``).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import math
import os
import pathlib
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import requests
import urllib3

from engine.api.meta import one_line
from engine.promql import (
    GENERATION_TOKENS,
    KV_CACHE_USAGE,
    LATENCY_LABELS,
    LATENCY_SUM_TAGS,
    LOAD_TAGS,
    MODEL_LABELS,
    POD_LABELS,
    POD_TAGS,
    PROMPT_TOKENS,
    REQUEST_SUCCESS,
    REQUESTS_WAITING,
    instance_query,
    instance_rows,
    latency_histograms,
    latency_query,
    load_query,
    pod_query,
    prompt_buckets,
    quote,
    range_pieces,
    regex_union,
    tagged_buckets,
    tagged_rows,
)
from engine.redaction import redact
from engine.slo.measure import RECENT_WINDOW_S, TTFT_HISTOGRAM, LatencyHistograms
from engine.slo.target import format_window
from engine.units import duration_seconds
from tasks.clients.metrics.answers import (
    ANSWER_DEADLINE_TIMEOUTS,
    MAX_ANSWER_BYTES,
    QUOTED_ERROR_MAX,
    is_count,
    is_row,
    sample_age,
)
from tasks.clients.metrics.credentials import url_secrets, without_userinfo
from tasks.clients.metrics.settings import env_options
from tasks.clients.metrics.shape import with_shape
from tasks.clients.metrics.snapshot import (
    InstanceKey,
    MetricsRequest,
    MetricsSnapshot,
    MetricsSource,
    MetricsUnavailable,
    Missing,
    ModelKey,
    ModelLoad,
    PodMetrics,
    checked_metric_names,
    from_epoch,
)
from tasks.clients.streams import BodyOverdue, BodyTooLarge, answer_within, read_bounded

log = logging.getLogger("tasks.clients.metrics")  # one logger for every metrics source


_DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d)$")
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")\]]+")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class PrometheusMetrics(MetricsSource):
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
        change_window: str = "2m",
        noise_window: str = "30m",
        burst_window: str = "30s",
        max_age_s: float = 120.0,
        session: requests.Session | None = None,
        clock: Callable[[], dt.datetime] = _utcnow,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        for name, window in (
            ("rate_window", rate_window),
            ("fallback_window", fallback_window),
            ("peak_window", peak_window),
            ("change_window", change_window),
            ("noise_window", noise_window),
            ("burst_window", burst_window),
        ):
            if not _DURATION.match(window):
                raise ValueError(f"{name} must be a PromQL duration such as 1m or 30s, got {window!r}")
        burst_s = duration_seconds(burst_window)
        if burst_s <= 0:  # an increase over no time counts nothing, and the burst rate divides by it
            raise ValueError(f"burst_window must be longer than 0s, got {burst_window!r}")
        for name, seconds in (("timeout_s", timeout_s), ("backoff_s", backoff_s), ("max_age_s", max_age_s)):
            if not math.isfinite(seconds):  # NaN passes every comparison below; inf makes requests or sleep raise
                raise ValueError(f"{name} must be a finite number of seconds, got {seconds!r}")
        if retries < 0 or timeout_s <= 0 or backoff_s < 0 or max_age_s <= 0:
            raise ValueError("retries and backoff_s must be >= 0, timeout_s and max_age_s > 0")
        if bearer_token and bearer_token_file:
            raise ValueError("give bearer_token or bearer_token_file, not both")
        if (bearer_token or bearer_token_file) and url_secrets(url):
            # requests would send the URL's user and password as Basic auth in place of the bearer token
            raise ValueError("give a bearer token or a user and password in the URL, not both")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.answer_deadline_s = ANSWER_DEADLINE_TIMEOUTS * timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.verify_tls = verify_tls
        self.rate_window = rate_window
        self.fallback_window = fallback_window
        self.peak_window = peak_window
        self.change_window = change_window
        self.noise_window = noise_window
        self.burst_window = burst_window
        # The burst window in seconds, and how many of them end to end make the peak window (at least one).
        self._burst_bins = (burst_s, max(int(duration_seconds(peak_window) // burst_s), 1))
        self.max_age_s = max_age_s
        self.session = session or requests.Session()
        self._token = bearer_token
        self._token_file = pathlib.Path(bearer_token_file) if bearer_token_file else None
        self._clock = clock
        self._sleep = sleep
        self._display_url = without_userinfo(self.url)

    def evaluated_at(self, when: dt.datetime) -> PrometheusMetrics:
        """This client with every query evaluated at ``when`` instead of at the time it is sent.

        Why: a read of a past window in several queries (the tune's traffic, then what was attained over the same
        window) must see the same minutes in each, however long the read takes and wherever the clock turns a
        minute between them. The copy shares this client's session and settings.
        """
        pinned = copy.copy(self)
        pinned._clock = lambda: when
        return pinned

    def __repr__(self) -> str:
        auth = ", bearer_token=***" if self._token else ""
        if self._token_file:
            auth = f", bearer_token_file={str(self._token_file)!r}"
        return f"PrometheusMetrics({self._display_url!r}{auth})"

    @classmethod
    def from_env(cls, url: str | None = None, environ: Mapping[str, str] | None = None) -> PrometheusMetrics | None:
        """A client configured from the environment, or None without a URL.

        ``url`` (else ``PROMETHEUS_URL``), then every variable of
        :data:`~tasks.clients.metrics.settings.PROMETHEUS_ENVIRONMENT` (docs/reference/prometheus.md): the bearer
        token or its file (re-read on every query, as projected service-account tokens rotate), the CA bundle or
        ``PROMETHEUS_TLS_INSECURE=true``, and the numbers and windows that override the defaults (tests use
        ``PROMETHEUS_RATE_WINDOW=5s``).
        """
        env = os.environ if environ is None else environ
        url = url or env.get("PROMETHEUS_URL")
        if not url:
            return None
        verify: bool | str = env.get("PROMETHEUS_CA_BUNDLE") or True
        if env.get("PROMETHEUS_TLS_INSECURE", "").lower() in ("1", "true", "yes"):
            verify = False
        return cls(
            url,
            verify_tls=verify,
            bearer_token=env.get("PROMETHEUS_TOKEN") or None,
            bearer_token_file=env.get("PROMETHEUS_TOKEN_FILE") or None,
            **env_options(env),
        )

    # -- public API --------------------------------------------------------------------------------

    def collect_request(self, request: MetricsRequest) -> MetricsSnapshot:
        """Loads and pod saturation of the request's models in a constant number of queries (see the module doc)."""
        keys = request.models
        names = request.instance_metric_names
        namespaces = sorted({key.namespace for key in keys})
        instance_ns = request.instance_namespaces
        now = self._clock()
        missing = Missing()
        loads: dict[ModelKey, ModelLoad] = {}
        pods: dict[ModelKey, list[PodMetrics]] = {}
        gateway: dict[ModelKey, float] = {}
        if keys:
            selector = f"namespace=~{quote(regex_union(namespaces))}"
            query = load_query(
                selector,
                self.rate_window,
                self.fallback_window,
                self.peak_window,
                self.change_window,
                self.noise_window,
                self.burst_window,
            )
            raw_loads = self._query(query, now)
            load_rows = tagged_rows(raw_loads, MODEL_LABELS, LOAD_TAGS)
            pod_rows = tagged_rows(self._query(pod_query(selector), now), POD_LABELS, POD_TAGS)
            loads = with_shape(
                self._assemble_loads(keys, load_rows, now, missing),
                load_rows,
                prompt_buckets(raw_loads),
                self._burst_bins,
            )
            pods = self._assemble_pods(keys, pod_rows, now, missing)
            waiting = load_rows["gateway"]
            gateway = {  # a queue length that is not a finite count (NaN, Inf, negative) says nothing
                key: count
                for key in keys
                if math.isfinite(count := waiting.get((key.model_id, key.namespace), math.nan)) and count >= 0
            }
        instances: dict[InstanceKey, dict[str, float]] = {}
        if names and instance_ns:
            selector = f"namespace=~{quote(regex_union(instance_ns))}"
            instances = self._instances(names, selector, now, missing)
        latency, latency_missing = self._latency(request.latency_windows, now)
        return MetricsSnapshot(
            loads, pods, instances, now, missing.lines, missing.by_model, latency, latency_missing, gateway
        )

    def _latency(
        self, windows: Mapping[ModelKey, float], now: dt.datetime
    ) -> tuple[dict[ModelKey, LatencyHistograms], dict[ModelKey, str]]:
        """The latency histograms of every model of ``windows``: one query per distinct window."""
        by_window: dict[str, list[ModelKey]] = {}
        for key, seconds in sorted(windows.items()):
            by_window.setdefault(format_window(seconds), []).append(key)
        found: dict[ModelKey, LatencyHistograms] = {}
        absent: dict[ModelKey, str] = {}
        recent = format_window(RECENT_WINDOW_S)
        for window, keys in sorted(by_window.items()):
            selector = (
                f"namespace=~{quote(regex_union(sorted({k.namespace for k in keys})))}, "
                f"model_name=~{quote(regex_union(sorted({k.model_id for k in keys})))}"
            )
            rows = self._query(latency_query(selector, window, recent), now)
            buckets, sums = tagged_buckets(rows), tagged_rows(rows, LATENCY_LABELS, LATENCY_SUM_TAGS)
            for key in keys:
                labels = (key.model_id, key.namespace)
                histograms = latency_histograms(
                    buckets.get(labels, {}),
                    {tag: by_model[labels] for tag, by_model in sums.items() if labels in by_model},
                )
                if histograms is None:
                    absent[key] = f"no {TTFT_HISTOGRAM}_bucket or ITL histogram samples for {key} in the last {window}"
                else:
                    found[key] = histograms
        return found, absent

    def instance_metrics(
        self, metric_names: Iterable[str], namespace: str, pods: Iterable[str]
    ) -> dict[str, dict[str, float]]:
        """``{pod: {metric: value}}`` for ``pods`` of ``namespace``, in one query; see :class:`MetricsSource`."""
        names = checked_metric_names(metric_names)
        pod_names = sorted(set(pods))
        if not names or not pod_names:
            return {}
        selector = f"namespace={quote(namespace)}, pod=~{quote(regex_union(pod_names))}"
        ignored = Missing()
        values = self._instances(names, selector, self._clock(), ignored)
        for note in ignored.lines:
            log.debug("instance metrics: %s", note)
        return {pod: metrics for (_, pod), metrics in values.items()}

    def _instances(
        self, names: list[str], selector: str, now: dt.datetime, missing: Missing
    ) -> dict[InstanceKey, dict[str, float]]:
        values, seen = instance_rows(self._query(instance_query(names, selector), now))
        result: dict[InstanceKey, dict[str, float]] = {}
        for (namespace, pod, name), value in sorted(values.items()):
            stamp = seen.get((namespace, pod, name))
            age = sample_age(now, stamp)
            if stamp is not None and age is None:
                missing.add(f"{name} for pod {pod} in {namespace} is stamped {stamp:g}, not a current time")
                continue
            if age is not None and age > self.max_age_s:
                missing.add(f"{name} for pod {pod} in {namespace} is {age:.0f}s old (max {self.max_age_s:g}s)")
                continue
            if not is_count(value):  # a NaN or negative load would read as none at all: a scale-down to minReplicas
                missing.add(f"{name} for pod {pod} in {namespace} is {value:g}, not a finite value >= 0")
                continue
            result.setdefault((namespace, pod), {})[name] = value
        return result

    # -- assembly ----------------------------------------------------------------------------------

    def _assemble_loads(
        self, keys: list[ModelKey], rows: dict[str, dict[tuple[str, ...], float]], now: dt.datetime, missing: Missing
    ) -> dict[ModelKey, ModelLoad]:
        loads: dict[ModelKey, ModelLoad] = {}
        for key in keys:
            label_key = (key.model_id, key.namespace)
            seen = rows["seen"].get(label_key)
            age = sample_age(now, seen)
            rate = rows["rate"].get(label_key)
            if seen is None or age is None:
                stamped = "" if seen is None else f" with a usable time (stamped {seen:g})"
                missing.add(f"no {REQUEST_SUCCESS} samples for {key}{stamped}", key)
            elif age > self.max_age_s:
                missing.add(f"{REQUEST_SUCCESS} for {key} is {age:.0f}s old (max {self.max_age_s:g}s)", key)
            elif rate is None or math.isnan(rate):
                missing.add(f"{REQUEST_SUCCESS} for {key} has fewer than 2 samples in the last {self.rate_window}", key)
            elif not is_count(rate):
                missing.add(
                    f"{REQUEST_SUCCESS} for {key} gives an arrival rate of {rate:g}, not a finite rate >= 0", key
                )
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
        missing: Missing,
    ) -> ModelLoad | None:
        sampled_at = from_epoch(seen)
        means = ((PROMPT_TOKENS, tokens_in), (GENERATION_TOKENS, tokens_out))
        odd = [(name, value) for name, value in means if value is not None and not is_count(value)]
        if odd:  # one model's bogus series must not stop the cycle for every model (the sizing refuses it)
            shown = ", ".join(f"{name} {value:g}" for name, value in odd)
            missing.add(f"mean tokens per request of {key} are not finite numbers >= 0 ({shown})", key)
            return None
        if tokens_in is not None and tokens_out is not None:
            return ModelLoad(rate, tokens_in, tokens_out, sampled_at)
        if rate == 0.0:
            return ModelLoad(0.0, tokens_in or 0.0, tokens_out or 0.0, sampled_at)
        absent = PROMPT_TOKENS if tokens_in is None else GENERATION_TOKENS
        missing.add(f"no {absent} samples for {key} in the last {self.fallback_window}", key)
        return None

    def _assemble_pods(
        self, keys: list[ModelKey], rows: dict[str, dict[tuple[str, ...], float]], now: dt.datetime, missing: Missing
    ) -> dict[ModelKey, list[PodMetrics]]:
        wanted: dict[tuple[str, ...], ModelKey] = {(key.model_id, key.namespace): key for key in keys}
        pods: dict[ModelKey, list[PodMetrics]] = {}
        for label_key in sorted(set(rows["kv"]) | set(rows["waiting"])):
            key = wanted.get(label_key[:2])
            if key is None:
                continue
            pod = self._pod(key, one_line(label_key[2], 253), label_key, rows, now, missing)  # a name as quoted
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
        missing: Missing,
    ) -> PodMetrics | None:
        for metric, tag in ((KV_CACHE_USAGE, "kv"), (REQUESTS_WAITING, "waiting")):
            if label_key not in rows[tag]:
                missing.add(f"pod {pod} of {key} has no {metric} sample", key)
                return None
        seen = [rows[tag].get(label_key) for tag in ("kv_seen", "waiting_seen")]
        oldest = min((s for s in seen if s is not None), default=None)
        age = sample_age(now, oldest)
        if oldest is None or age is None or age > self.max_age_s:
            shown = "of unknown age" if age is None else f"{age:.0f}s old"
            missing.add(f"metrics of pod {pod} of {key} are {shown} (max {self.max_age_s:g}s)", key)
            return None
        kv, waiting = rows["kv"][label_key], rows["waiting"][label_key]
        if not (0.0 <= kv <= 1.0 and is_count(waiting)):  # NaN fails both, as the metrics file's reader
            missing.add(
                f"pod {pod} of {key} reports {KV_CACHE_USAGE} {kv:g} and {REQUESTS_WAITING} {waiting:g}: "
                "expected a share 0..1 and a finite count >= 0",
                key,
            )
            return None
        return PodMetrics(pod, kv, waiting, from_epoch(oldest))

    # -- HTTP --------------------------------------------------------------------------------------

    def query(self, promql: str, at: dt.datetime, result_type: str = "vector") -> list[dict[str, Any]]:
        """Run one instant query at ``at`` (retries, credentials and errors as every query of this client);
        ``data.result``, which must be of ``result_type`` (``matrix`` for a subquery)."""
        return self._query(promql, at, result_type)

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        """Run one range query (``/api/v1/query_range``) with this client's credentials, TLS, timeout and retries.

        A range of more than :data:`engine.promql.MAX_RANGE_POINTS` evaluations is asked for in consecutive pieces
        of at most that many (Prometheus refuses a longer one), and each series' values are joined in time order.

        Args:
            promql: The expression.
            start: The range's first evaluation, in epoch seconds.
            end: Its last, in epoch seconds.
            step_s: Seconds between evaluations.

        Returns:
            ``data.result``, a matrix: one row a series, its ``values`` as ``[time, "value"]`` pairs.

        Raises:
            MetricsUnavailable: Prometheus could not be reached after the retries, refused the query or answered
                something else than a matrix.
        """
        series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for piece_start, piece_end in range_pieces(start, end, step_s):
            data = {"query": promql, "start": f"{piece_start:.3f}", "end": f"{piece_end:.3f}", "step": f"{step_s:g}"}
            for row in self._post("query_range", data, "matrix"):
                labels = tuple(sorted((row.get("metric") or {}).items()))
                joined = series.setdefault(labels, {"metric": row.get("metric") or {}, "values": []})
                joined["values"].extend(row.get("values") or [])
        return list(series.values())

    def _query(self, promql: str, at: dt.datetime, result_type: str = "vector") -> list[dict[str, Any]]:
        """Run one instant query at ``at`` with retries; return ``data.result`` (a vector unless told otherwise)."""
        return self._post("query", {"query": promql, "time": f"{at.timestamp():.3f}"}, result_type)

    def _post(self, endpoint: str, data: dict[str, str], result_type: str) -> list[dict[str, Any]]:
        """POST ``data`` to ``/api/v1/<endpoint>``, retrying timeouts, refused connections, 5xx and 429."""
        token = self._bearer_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                with answer_within(self.answer_deadline_s):  # its headers too: a byte a second never ends them
                    response = self.session.post(
                        f"{self.url}/api/v1/{endpoint}",
                        data=data,
                        headers=headers,
                        timeout=self.timeout_s,
                        verify=self.verify_tls,
                        stream=True,
                    )
                    body = self._answer(response)
            except requests.Timeout:
                failure = f"timed out after {self.timeout_s:g}s"
                continue
            except requests.ConnectionError as exc:
                failure = f"connection failed ({self._describe(exc)})"
                continue
            except requests.RequestException as exc:
                raise self._unavailable(f"request failed ({self._describe(exc)})") from None
            except BodyOverdue as exc:
                failure = str(exc)
                continue
            if response.status_code >= 500 or response.status_code == 429:
                failure = f"HTTP {response.status_code} {response.reason}"
                continue
            return self._decode(response, body, result_type)
        attempts = self.retries + 1
        raise self._unavailable(f"{failure} ({attempts} attempt{'s' if attempts > 1 else ''})")

    def _answer(self, response: requests.Response) -> bytes:
        """The answer's body, at most :data:`MAX_ANSWER_BYTES`, arrived whole within :attr:`answer_deadline_s`
        (:func:`tasks.clients.streams.read_bounded`: ``BodyOverdue`` is retried as a timeout is); a transport
        failure while it arrives is a ``requests.ConnectionError``, retried as one."""
        try:
            return read_bounded(response, MAX_ANSWER_BYTES, self.answer_deadline_s)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise requests.ConnectionError(exc) from None
        except BodyTooLarge as exc:
            raise self._unavailable(f"the answer is {exc}") from None
        finally:
            response.close()

    def _decode(self, response: requests.Response, raw: bytes, result_type: str = "vector") -> list[dict[str, Any]]:
        if response.status_code in (401, 403):
            raise self._unavailable(f"HTTP {response.status_code} {response.reason}: check the credentials")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            status = (
                f"HTTP {response.status_code} {response.reason}"
                if response.status_code >= 400
                else (f"HTTP {response.status_code}")
            )
            raise self._unavailable(f"{status}: the answer is not JSON (is it the Prometheus base URL?)") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", "no error message") if isinstance(body, dict) else "malformed answer"
            kind = body.get("errorType", "error") if isinstance(body, dict) else "error"
            raise self._unavailable(f"query failed ({kind}: {self._redact(one_line(error, QUOTED_ERROR_MAX))})")
        result = body.get("data") or {}
        if not isinstance(result, dict):
            raise self._unavailable(f"expected a {result_type} result, got data of type {type(result).__name__}")
        if result.get("resultType") != result_type or not isinstance(result.get("result"), list):
            raise self._unavailable(f"expected a {result_type} result, got {result.get('resultType')!r}")
        rows = list(result["result"])
        malformed = next((row for row in rows if not is_row(row, result_type)), None)
        if malformed is not None:  # one malformed series spoils the answer: its shape is not Prometheus's
            raise self._unavailable(f"malformed {result_type} row {str(malformed)[:200]}")
        return rows

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
        """``text`` without the bearer token nor the URL's password, as written or as the Basic ``Authorization``
        header that requests makes of it (a server may echo the header in its error)."""
        return redact(text, (self._token, *url_secrets(self.url)))
