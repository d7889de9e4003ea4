"""Load and saturation read from a YAML file: the metrics source for local and CI runs, and its writer.

:class:`FileMetrics` is the :class:`~tasks.clients.metrics.snapshot.MetricsSource` behind ``modelplane optimize
--metrics FILE``; :func:`write_metrics_file` writes a snapshot in the same format, so live metrics can be
captured once from Prometheus and replayed. The file is re-read on every call, so it can be edited between
runs; ``max_age_s`` does not apply to it.

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
        latency:                          # SLO attainment: vLLM's latency bucket increases, {le: count}
          itlHistogram: vllm:request_time_per_output_token_seconds   # the default; or a per-token one
          window:                         # over the SLO window (modelplane.io/slo-window)
            ttft: {0.25: 950, 0.5: 1140, 1.0: 1190, +Inf: 1200}
            itl: {0.025: 1130, 0.05: 1190, +Inf: 1200}
            ttftSum: 228.5                # optional: the histograms' _sum increases (seconds): they shape
            itlSum: 24.1                  #   a target that falls inside a bucket
          recent:                         # over the last 2 minutes
            ttft: {0.25: 80, 0.5: 96, +Inf: 100}
            itl: {0.025: 97, +Inf: 100}
    instances:                            # Kthena policy metrics per pod
      - namespace: llm-serving
        pod: llama-8b-a100-0
        metrics: {"vllm:num_requests_waiting": 3}

A model entry needs ``model`` and ``namespace``; a pod entry all three of its keys; an instance entry
``namespace``, ``pod`` and ``metrics``. Numbers must be non-negative (``kvCacheUsage`` within 0..1), instance
metric values too (a load below zero is not one; read from Prometheus, such a sample counts as missing); unknown
keys, duplicate models and wrong types are rejected with :class:`~tasks.clients.metrics.snapshot.MetricsFileError` naming the file and the field
(``metrics.yaml: models[0].avgInputTokens: expected a finite number >= 0, got 'abc'``). In ``latency``, each range
(``window``, ``recent``) and each histogram in it may be left out; a histogram needs its ``+Inf`` bucket
(``+Inf``, ``Inf`` or ``.inf``); ``itlHistogram`` is one of ``vllm:request_time_per_output_token_seconds``
(per request), ``vllm:inter_token_latency_seconds`` or ``vllm:time_per_output_token_seconds`` (per token). The
file states the increases as they are: the window they cover is whatever it was captured over. The file must be a
regular file of at most 4 MiB (:data:`MAX_METRICS_FILE_BYTES`) in UTF-8; anything else is refused unread, naming it.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import pathlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from engine import yaml11
from engine.errors import shown
from engine.slo.measure import ITL_HISTOGRAMS, REQUEST_ITL_HISTOGRAM, Buckets, LatencyHistograms
from tasks.clients.files import write_atomically
from tasks.clients.inputs import InputFileError, read_text
from tasks.clients.metrics.snapshot import (
    METRIC_NAME,
    InstanceKey,
    MetricsFileError,
    MetricsRequest,
    MetricsSnapshot,
    MetricsSource,
    Missing,
    ModelKey,
    ModelLoad,
    PodMetrics,
    checked_metric_names,
    from_epoch,
)

MAX_METRICS_FILE_BYTES = 4 << 20
"""The largest metrics file read (4 MiB: 60,000 pods, read in about 19 s on a loaded 2-core machine; at 17 MiB the
cycle ran past its 50 s time-out, so a larger limit promised what the cycle cannot do): a larger one, or one that
is not a regular file (a directory, a named pipe, ``/dev/zero``), is refused unread with a
:class:`MetricsFileError`."""


@dataclass(frozen=True)
class _FileModel:
    key: ModelKey
    load: ModelLoad | None
    pods: list[PodMetrics]
    latency: LatencyHistograms | None = None


@dataclass(frozen=True)
class _FileDocument:
    collected_at: dt.datetime
    models: dict[ModelKey, _FileModel]
    instances: dict[InstanceKey, dict[str, float]]


class FileMetrics(MetricsSource):
    """A :class:`MetricsSource` backed by a YAML file (format in the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)

    def __repr__(self) -> str:
        return f"FileMetrics({str(self.path)!r})"

    def collect_request(self, request: MetricsRequest) -> MetricsSnapshot:
        """The file's loads and pods for the request's models; see :class:`MetricsSource`."""
        document = self.read()
        loads: dict[ModelKey, ModelLoad] = {}
        pods: dict[ModelKey, list[PodMetrics]] = {}
        missing = Missing()
        for key in request.models:
            entry = document.models.get(key)
            if entry is None or entry.load is None:
                missing.add(f"no load for {key} in {self.path}", key)
            else:
                loads[key] = entry.load
            if entry is None or not entry.pods:
                missing.add(f"no pod metrics for {key} in {self.path}", key)
            else:
                pods[key] = list(entry.pods)
        names = set(request.instance_metric_names)
        namespaces = set(request.instance_namespaces)
        instances = {
            key: picked
            for key, values in document.instances.items()
            if key[0] in namespaces and (picked := {n: v for n, v in values.items() if n in names})
        }
        latency: dict[ModelKey, LatencyHistograms] = {}
        latency_missing: dict[ModelKey, str] = {}
        for key in request.latency_windows:
            entry = document.models.get(key)
            if entry is not None and entry.latency is not None:
                latency[key] = entry.latency
            else:
                latency_missing[key] = f"no latency histograms for {key} in {self.path}"
        return MetricsSnapshot(
            loads, pods, instances, document.collected_at, missing.lines, missing.by_model, latency, latency_missing
        )

    def instance_metrics(
        self, metric_names: Iterable[str], namespace: str, pods: Iterable[str]
    ) -> dict[str, dict[str, float]]:
        """``{pod: {metric: value}}`` from the file's ``instances``; see :class:`MetricsSource`."""
        names = set(checked_metric_names(metric_names))
        document = self.read()
        result: dict[str, dict[str, float]] = {}
        for pod in sorted(set(pods)):
            values = document.instances.get((namespace, pod), {})
            picked = {name: value for name, value in values.items() if name in names}
            if picked:
                result[pod] = picked
        return result

    def read(self) -> _FileDocument:
        """Parse and validate the file; raise :class:`MetricsFileError` on any problem (not a regular file, larger
        than :data:`MAX_METRICS_FILE_BYTES`, not UTF-8, not YAML, a field out of its range)."""
        try:
            read = read_text(self.path, MAX_METRICS_FILE_BYTES, "a metrics file")
        except OSError as exc:
            raise MetricsFileError(self.path, "", f"cannot read: {exc.strerror or exc}") from None
        except InputFileError as exc:
            raise MetricsFileError(self.path, "", exc.problem) from None
        text, mtime = read.text, from_epoch(read.mtime_s)
        try:
            raw = yaml11.safe_load(text)
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
            optional=("arrivalRate", "arrivalRateRps", "avgInputTokens", "avgOutputTokens", "pods", "latency"),
        )
        key = ModelKey(self.text(item["model"], f"{where}.model"), self.text(item["namespace"], f"{where}.namespace"))
        pods = [
            self.pod(p, f"{where}.pods[{i}]", collected_at)
            for i, p in enumerate(self.sequence(item.get("pods", []), f"{where}.pods"))
        ]
        names = [pod.pod for pod in pods]
        if len(set(names)) != len(names):
            raise self.fail(f"{where}.pods", "duplicate pod names")
        latency = self.latency(item["latency"], f"{where}.latency") if "latency" in item else None
        return _FileModel(key, self.load(item, where, collected_at), pods, latency)

    def latency(self, raw: Any, where: str) -> LatencyHistograms:
        item = self.mapping(raw, where, required=(), optional=("itlHistogram", "window", "recent"))
        itl_metric = item.get("itlHistogram", REQUEST_ITL_HISTOGRAM)
        if itl_metric not in ITL_HISTOGRAMS:
            raise self.fail(
                f"{where}.itlHistogram", f"expected one of {', '.join(ITL_HISTOGRAMS)}, got {shown(itl_metric)}"
            )
        ranges: dict[str, dict[str, Buckets]] = {}
        sums: dict[str, dict[str, float]] = {}
        for name in ("window", "recent"):
            spans = self.mapping(
                item.get(name, {}), f"{where}.{name}", required=(), optional=("ttft", "itl", "ttftSum", "itlSum")
            )
            ranges[name] = {h: self.buckets(spans[h], f"{where}.{name}.{h}") for h in ("ttft", "itl") if h in spans}
            sums[name] = {h: self.number(spans[h], f"{where}.{name}.{h}") for h in ("ttftSum", "itlSum") if h in spans}
        return LatencyHistograms(
            ranges["window"].get("ttft"),
            ranges["recent"].get("ttft"),
            ranges["window"].get("itl"),
            ranges["recent"].get("itl"),
            itl_metric,
            ttft_window_sum=sums["window"].get("ttftSum"),
            ttft_recent_sum=sums["recent"].get("ttftSum"),
            itl_window_sum=sums["window"].get("itlSum"),
            itl_recent_sum=sums["recent"].get("itlSum"),
        )

    def buckets(self, raw: Any, where: str) -> Buckets:
        """``{le: count}`` as ``((le, count), ...)`` by increasing ``le``; the ``+Inf`` bucket is required."""
        pairs = []
        for bound, count in self.mapping(raw, where, required=(), optional=None).items():
            try:
                le = float(bound) if not isinstance(bound, bool) else math.nan
            except ValueError:
                le = math.nan
            if math.isnan(le) or le < 0:
                raise self.fail(f"{where}[{shown(bound)}]", "expected a bucket bound (a number >= 0 or +Inf)")
            pairs.append((le, self.number(count, f"{where}[{shown(bound)}]")))
        if not pairs or not math.isinf(max(pairs)[0]):
            raise self.fail(where, "a histogram needs its +Inf bucket (the total)")
        return tuple(sorted(pairs))

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
            if not isinstance(name, str) or not METRIC_NAME.match(name):
                raise self.fail(f"{where}.metrics", f"invalid metric name {shown(name)}")
            values[name] = self.number(value, f"{where}.metrics[{shown(name)}]")
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
            raise self.fail(where, f"expected a non-empty string, got {shown(raw)}")
        return raw

    def number(self, raw: Any, where: str, minimum: float = 0.0, maximum: float = math.inf) -> float:
        """A finite number within the bounds (``.inf``, ``.nan`` and an integer too large for a float are not)."""
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise self.fail(where, _expected_number(raw, minimum, maximum))
        try:
            value = float(raw)
        except OverflowError:
            raise self.fail(where, _expected_number(raw, minimum, maximum)) from None
        if not math.isfinite(value) or not minimum <= value <= maximum:
            raise self.fail(where, _expected_number(raw, minimum, maximum))
        return value

    def timestamp(self, raw: Any, where: str) -> dt.datetime:
        if isinstance(raw, str):
            try:
                raw = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                raise self.fail(where, f"expected an ISO 8601 timestamp, got {shown(raw)}") from None
        if not isinstance(raw, dt.datetime):
            raise self.fail(where, f"expected an ISO 8601 timestamp, got {shown(raw)}")
        return raw if raw.tzinfo else raw.replace(tzinfo=dt.UTC)


def _expected_number(raw: Any, minimum: float, maximum: float) -> str:
    """What :meth:`number` says of ``raw``, made only when it is refused."""
    return f"expected a finite number{_bounds(minimum, maximum)}, got {shown(raw)}"


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind(raw: Any) -> str:
    return "nothing" if raw is None else type(raw).__name__


def _bounds(minimum: float, maximum: float) -> str:
    if maximum != math.inf:
        return f" within {minimum:g}..{maximum:g}"
    return f" >= {minimum:g}" if minimum != -math.inf else ""


def snapshot_document(snapshot: MetricsSnapshot) -> dict[str, Any]:
    """A snapshot in the metrics file format (rates as ``arrivalRateRps``, exact).

    Args:
        snapshot: What a collection returned.

    Returns:
        The document :class:`FileMetrics` reads back as the same snapshot.
    """
    keys = sorted(set(snapshot.loads) | set(snapshot.pods) | set(snapshot.latency))
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
        if key in snapshot.latency:
            entry["latency"] = _latency_document(snapshot.latency[key])
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


def _latency_document(histograms: LatencyHistograms) -> dict[str, Any]:
    """Latency histograms in the metrics file format (``+Inf`` as ``.inf``, which YAML reads back as infinity)."""
    document: dict[str, Any] = {"itlHistogram": histograms.itl_metric}
    for name, ttft, itl, ttft_sum, itl_sum in (
        (
            "window",
            histograms.ttft_window,
            histograms.itl_window,
            histograms.ttft_window_sum,
            histograms.itl_window_sum,
        ),
        (
            "recent",
            histograms.ttft_recent,
            histograms.itl_recent,
            histograms.ttft_recent_sum,
            histograms.itl_recent_sum,
        ),
    ):
        spans: dict[str, Any] = {
            h: {float(le): float(c) for le, c in b} for h, b in (("ttft", ttft), ("itl", itl)) if b is not None
        }
        spans.update({h: float(v) for h, v in (("ttftSum", ttft_sum), ("itlSum", itl_sum)) if v is not None})
        if spans:
            document[name] = spans
    return document


def write_metrics_file(path: str | os.PathLike[str], snapshot: MetricsSnapshot) -> None:
    """Write ``snapshot`` to ``path`` in the metrics file format, atomically.

    Args:
        path: The metrics file.
        snapshot: What a collection returned.

    Raises:
        OSError: The file cannot be written (the old one is left as it was).
    """
    write_atomically(pathlib.Path(path), yaml.safe_dump(snapshot_document(snapshot), sort_keys=False))
