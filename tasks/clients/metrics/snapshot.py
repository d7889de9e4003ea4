"""What one metrics collection returns, and the contract both metrics sources keep.

The optimizer reads live load through :class:`MetricsSource`, implemented by
:class:`tasks.clients.metrics.prometheus.PrometheusMetrics` (vLLM metrics in Prometheus) and
:class:`tasks.clients.metrics.file.FileMetrics` (a YAML file, for local and CI runs). Both answer with a
:class:`MetricsSnapshot`, so the flow and the planner never know which one was used.

Missing data is not an exception. A requested model without usable samples is absent from
``snapshot.loads`` (or ``snapshot.pods``), never reported as zero, and a sentence saying why is appended to
``snapshot.missing`` (and to ``snapshot.missing_by_model[key]``, so callers need not match model names
inside the text). Only a source that cannot answer at all raises a :class:`MetricsError`:
:class:`MetricsUnavailable` for an unreachable or failing Prometheus, :class:`MetricsFileError` for an
unreadable or malformed file.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.slo.measure import LatencyHistograms

InstanceKey = tuple[str, str]  # (namespace, pod)

METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
"""A valid Prometheus metric name (instance metric names are checked against it before any query)."""


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
    burst_rps: float | None = field(default=None, compare=False)
    """The Poisson rate that explains the most requests in one ``burst_window`` over the last ``peak_window``
    (burst-aware sizing, :mod:`engine.perf.load_burst`)."""
    recent_change_rps: float | None = field(default=None, compare=False)
    """Largest change of the ``rate_window`` arrival rate from one step to the next over the last ``change_window``."""
    change_noise_rps: float | None = field(default=None, compare=False)
    """Median absolute step-to-step change of the arrival rate over the last ``noise_window`` (its noise)."""
    peaks_rps: dict[float, float] | None = field(default=None, compare=False)
    """Highest ``rate_window`` arrival rate per look-back in seconds (the attainment loop's peak hold)."""
    lowest_rps: float | None = field(default=None, compare=False)
    """Lowest ``rate_window`` arrival rate over the longest of those look-backs (0: a silent stretch)."""

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
    latency: dict[ModelKey, LatencyHistograms] = field(default_factory=dict)
    """Per model asked with a latency window: its TTFT and ITL bucket increases over that window and recently."""
    latency_missing: dict[ModelKey, str] = field(default_factory=dict)
    """Why a model asked with a latency window has no histograms (its attainment is then unknown; kept apart
    from ``missing``, which is about the load and saturation data decisions are made from)."""
    gateway_waiting: dict[ModelKey, float] = field(default_factory=dict)
    """Per model asked for whose gateway exports a flow-control queue: the requests waiting in it (a model with
    no replica has no vLLM metric; this is how a cycle sees its traffic)."""

    def missing_for(self, key: ModelKey) -> list[str]:
        """Why ``key`` has no load or pod data (empty when everything was found)."""
        return list(self.missing_by_model.get(key, []))


class Missing:
    """Collects the "missing data" sentences of one snapshot, in order and per model."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.by_model: dict[ModelKey, list[str]] = {}

    def add(self, message: str, key: ModelKey | None = None) -> None:
        """Record why data is missing; against ``key`` too when it concerns one model."""
        self.lines.append(message)
        if key is not None:
            self.by_model.setdefault(key, []).append(message)


@dataclass(frozen=True)
class MetricsRequest:
    """What one :meth:`MetricsSource.collect` asks for, normalised once for every source."""

    models: list[ModelKey]
    """The models, sorted and distinct."""
    instance_metric_names: list[str]
    """The instance metrics, checked (:func:`checked_metric_names`), sorted and distinct."""
    instance_namespaces: list[str]
    """Where the instance metrics are read, sorted and distinct: the models' namespaces unless named."""
    latency_windows: dict[ModelKey, float]
    """The models whose latency histograms are read, each with its window in seconds, in model order."""


class MetricsSource(ABC):
    """Where the optimizer gets live load: :class:`PrometheusMetrics` or :class:`FileMetrics`."""

    def collect(
        self,
        models: Iterable[ModelKey],
        instance_metric_names: Iterable[str] = (),
        instance_namespaces: Iterable[str] | None = None,
        latency_windows: Mapping[ModelKey, float] | None = None,
    ) -> MetricsSnapshot:
        """Loads and pod saturation of ``models``; plus, when ``instance_metric_names`` is given, those
        metrics for every pod of ``instance_namespaces`` (default: the models' namespaces); plus, for every model
        of ``latency_windows``, its latency histograms over that window (seconds) and over the recent range
        (:data:`engine.slo.measure.RECENT_WINDOW_S`)."""
        keys = sorted(set(models))
        namespaces = instance_namespaces if instance_namespaces is not None else (key.namespace for key in keys)
        request = MetricsRequest(
            keys,
            checked_metric_names(instance_metric_names),
            sorted(set(namespaces)),
            dict(sorted((latency_windows or {}).items())),
        )
        return self.collect_request(request)

    @abstractmethod
    def collect_request(self, request: MetricsRequest) -> MetricsSnapshot:
        """:meth:`collect` of a normalised request: what each source implements."""

    @abstractmethod
    def instance_metrics(
        self, metric_names: Iterable[str], namespace: str, pods: Iterable[str]
    ) -> dict[str, dict[str, float]]:
        """Per-pod values of arbitrary metrics (Kthena policy metrics): ``{pod: {metric: value}}``.

        Pods (or metrics) without fresh data are absent from the answer.
        """


def checked_metric_names(names: Iterable[str]) -> list[str]:
    """Check the names of the instance metrics a collection asks for.

    Args:
        names: Prometheus metric names.

    Returns:
        The names sorted and deduplicated.

    Raises:
        ValueError: Naming every one that is not a metric name (they are spliced into PromQL).
    """
    checked = sorted(set(names))
    bad = [name for name in checked if not METRIC_NAME.match(name)]
    if bad:
        raise ValueError(f"invalid metric names: {', '.join(map(repr, bad))}")
    return checked


def from_epoch(epoch: float) -> dt.datetime:
    """A UTC datetime from a Unix timestamp.

    Args:
        epoch: Seconds since the epoch (Prometheus sample times, file mtimes).

    Returns:
        The same instant, timezone-aware in UTC.
    """
    return dt.datetime.fromtimestamp(epoch, dt.UTC)
