"""I/O of the calibrate flow: read windows of vLLM metrics (Prometheus range queries or a windows file),
write the outcome back to each VariantAutoscaling.

Prometheus, one model at a time: one ``query_range`` per metric, ``sum by (pod) (increase(<metric>[W]))`` at a
step of ``W`` over the lookback, so each (pod, step) is one :class:`engine.simulate.calibrate.Window`: a pod's
own batch, its own latencies; and ``avg by (pod) (avg_over_time(vllm:num_requests_running[W]))``, the
batch a request joins, for that window and (as ``previous_running_avg``) the pod's window before it.
The variant's pods are those named after its scale target (``<target>-...``), as a Deployment names them.
A first query of the request counts at a coarse step says how many windows each variant holds; past
:data:`MAX_WINDOWS_PER_VARIANT` the queries step ``k*W`` (still ``[W]`` windows: every k-th window, the one before
each read with ``offset W``). Each answer is folded into per-pod arrays as it arrives, in pieces of at most
:data:`MAX_PIECE_SAMPLES` samples.
Connection settings (token, TLS, timeouts, retries) are the optimize flow's
(:meth:`tasks.clients.metrics.prometheus.PrometheusMetrics.from_env`).

Windows file (YAML), for local and CI runs and for exports of the simulator::

    windowSeconds: 300
    variants:
      - namespace: llm-serving
        name: llama-3-1-8b-a100            # the VariantAutoscaling
        windows:
          - {requests: 41, ttftSum: 12.3, queueSum: 0.0, itlSum: 180.2, itlCount: 8600,
             promptTokensSum: 47000, inferenceSum: 190.1, runningAvg: 0.63, previousRunningAvg: 0.58}

``runningAvg`` and ``previousRunningAvg`` (the gauge's average over the window and over the one before
it) are optional, as are ``queueSum`` and ``inferenceSum``.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import pathlib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeGuard

import numpy as np
import yaml

from engine import yaml11
from engine.api.llmd import VariantAutoscaling
from engine.errors import shown
from engine.promql import MAX_RANGE_POINTS, quote
from engine.simulate.calibrate import CONDITION_CALIBRATED, CalibrationOutcome, Window, opted_in
from engine.status import ConditionUpdate, changed_fields, generation_of, mapping_at, set_conditions
from engine.units import duration_seconds, format_duration
from tasks.boundary import Accepted
from tasks.clients.cluster import Cluster, ObjectRef
from tasks.clients.cluster.retry import retry_on_conflict
from tasks.clients.inputs import InputFileError, read_text
from tasks.clients.metrics.answers import is_count
from tasks.clients.metrics.prometheus import PrometheusMetrics
from tasks.clients.metrics.snapshot import MetricsError
from tasks.tracking import task

# Window field -> vLLM series whose increase over the window it is.
SERIES = {
    "requests": "vllm:time_to_first_token_seconds_count",
    "ttft_sum_s": "vllm:time_to_first_token_seconds_sum",
    "queue_sum_s": "vllm:request_queue_time_seconds_sum",
    "itl_sum_s": "vllm:time_per_output_token_seconds_sum",
    "itl_count": "vllm:time_per_output_token_seconds_count",
    "prompt_tokens_sum": "vllm:request_prompt_tokens_sum",
    "inference_sum_s": "vllm:request_inference_time_seconds_sum",
}
_FILE_KEYS = {
    "requests": "requests",
    "ttftSum": "ttft_sum_s",
    "queueSum": "queue_sum_s",
    "itlSum": "itl_sum_s",
    "itlCount": "itl_count",
    "promptTokensSum": "prompt_tokens_sum",
    "inferenceSum": "inference_sum_s",
    "runningAvg": "running_avg",
    "previousRunningAvg": "previous_running_avg",
}
RUNNING_GAUGE = "vllm:num_requests_running"
_REQUIRED = ("requests", "ttftSum", "itlSum", "itlCount", "promptTokensSum")


MAX_WINDOWS_FILE_BYTES = 64 << 20
"""The largest windows file read (64 MiB, about 300,000 windows); a larger one, or one that is not a regular file, is
refused unread."""


class WindowsFileError(ValueError):
    """A windows file that cannot be used; the message names the file and the field."""


MAX_WINDOWS_PER_VARIANT = 100_000
"""The most windows of one variant that reach the fit. A longer lookback, a shorter window or more pods are read
evenly sampled: every k-th window of the lookback (each still one window long), k the smallest that keeps every
variant of the model within the limit, and a variant still over it is thinned evenly to it. More windows buy
nothing: a day of five-minute windows (288 per pod) already gives 95 % intervals narrower than the fit's own bias
(docs/simulate.md, "Calibration"), while each window read cost about 1 KB and 50 us (31 days of one-minute windows
of 100 pods per model took 9.4 GB and 7 minutes before the limit; docs/reference/limits.md)."""
PROBE_POINTS = 500
"""Evaluations per pod of the first query of a model (the request counts at a coarse step over the lookback): how
many windows its variants hold, hence the sampling step of the other queries."""
MAX_PIECE_SAMPLES = 250_000
"""The most samples (pods x evaluations) asked for in one range query: a longer range is read in consecutive pieces
(each about 10 MB of answer, well under the client's answer limit), each folded into the pods' arrays before the
next is asked for."""
_ROWS = (*SERIES, "running_avg", "previous_running_avg")
"""The rows of a pod's array, one a field of :class:`Window`; its columns are the evaluations of the grid."""
_REQUIRED_ROWS = [_ROWS.index(f) for f in ("requests", "ttft_sum_s", "itl_sum_s", "itl_count", "prompt_tokens_sum")]


@dataclass(frozen=True)
class _Grid:
    """The evaluations of a range query: ``points`` of them, ``step`` seconds apart from ``start``."""

    start: float
    step: float
    points: int

    def pieces(self, pods: int) -> Iterator[tuple[int, int]]:
        """Consecutive index ranges ``[first, stop)`` of at most :data:`engine.promql.MAX_RANGE_POINTS` evaluations
        and :data:`MAX_PIECE_SAMPLES` samples for ``pods`` series."""
        size = max(1, min(MAX_RANGE_POINTS, MAX_PIECE_SAMPLES // max(pods, 1)))
        for first in range(0, self.points, size):
            yield first, min(first + size, self.points)


def _read(
    client: PrometheusMetrics,
    promql: str,
    grid: _Grid,
    row: int,
    arrays: dict[str, np.ndarray],
    pods: int,
    prefixes: tuple[str, ...],
) -> int:
    """Run ``promql`` over ``grid`` piece by piece (sized for ``pods`` series), folding each answer into ``arrays``
    (one per pod, one row a field, one column an evaluation; NaN where missing) at ``row`` before the next piece is
    asked for; a pod whose name starts with none of ``prefixes`` (when there are any) is not kept. Returns the most
    series an answer held.

    A sample that is not a finite number >= 0 (``NaN``, ``+Inf``, ``1e999``, a negative increase, text that is no
    number), or stamped at a time that is not a finite number or not an evaluation of the grid, is missing data, as
    the optimize cycle reads such a sample: its window lacks that series (and is left out when the series is
    required) instead of carrying the value into the fit, where one ``NaN`` made every parameter ``nan``.
    """
    for first, stop in grid.pieces(pods):
        matrix = client.query_range(
            promql, grid.start + first * grid.step, grid.start + (stop - 1) * grid.step, grid.step
        )
        pods = max(pods, len(matrix))
        for series in matrix:
            pod = series["metric"].get("pod", "")
            values = arrays.get(pod)
            if values is None:
                if prefixes and not pod.startswith(prefixes):  # no variant's: never reaches a fit
                    continue
                values = arrays[pod] = np.full((len(_ROWS), grid.points), np.nan)
            for t, v in series.get("values", []):
                try:
                    at, value = float(t), float(v)
                except (TypeError, ValueError):
                    continue
                if math.isfinite(at) and is_count(value):
                    index = round((at - grid.start) / grid.step)
                    if 0 <= index < grid.points:
                        values[row, index] = value
        del matrix  # the next piece's answer arrives without this one
    return pods


def _present(value: float) -> float | None:
    return None if math.isnan(value) else value


def _windows_of(values: np.ndarray, seconds: float) -> list[Window]:
    """The windows of one pod's array: one per evaluation holding every required field."""
    keep = np.flatnonzero(np.isfinite(values[_REQUIRED_ROWS]).all(axis=0))
    return [
        Window(
            seconds=seconds,
            requests=col[0],
            ttft_sum_s=col[1],
            queue_sum_s=_present(col[2]),
            itl_sum_s=col[3],
            itl_count=col[4],
            prompt_tokens_sum=col[5],
            inference_sum_s=_present(col[6]),
            running_avg=_present(col[7]),
            previous_running_avg=_present(col[8]),
        )
        for col in values[:, keep].T.tolist()
    ]


def prometheus_windows(
    client: PrometheusMetrics,
    namespace: str,
    model_id: str,
    end: dt.datetime,
    lookback_s: float,
    window_s: float,
    targets: Collection[str] = (),
    max_windows: int = MAX_WINDOWS_PER_VARIANT,
) -> tuple[dict[str, list[Window]], int]:
    """Per pod of the model: one window per step over the lookback (windows missing a series, or whose sample of
    one is not a finite number >= 0, are left out; an optional series' such sample is read as absent), every k-th
    step when the variants hold more than ``max_windows`` windows each.

    Each query's answer is folded into one array per pod on the query's grid before the next piece is asked for, so
    what is held while reading is 72 bytes per pod and evaluation, never the answers' samples.

    Args:
        client: The Prometheus client.
        namespace: The namespace of the model's pods (a ``namespace`` label of the series).
        model_id: The served model's name (the ``model_name`` label of the series).
        end: The end of the lookback.
        lookback_s: How far back windows are read, in seconds.
        window_s: The length of one window (and the query step), in seconds.
        targets: The scale targets of the model's variants (a variant's pods are ``<target>-...``); empty: all the
            model's pods are one variant.
        max_windows: The most windows per variant: k is the smallest stride that keeps every variant's windows (as
            the request counts at a coarse step count them) within it.

    Returns:
        The windows by pod name, oldest first, and the stride k (1: every window of the lookback).

    Raises:
        MetricsError: A query failed (:meth:`tasks.clients.metrics.prometheus.PrometheusMetrics.query_range`).
    """
    selector = f"{{namespace={quote(namespace)}, model_name={quote(model_id)}}}"
    span = f"{int(window_s)}s"
    start = end.timestamp() - lookback_s + window_s
    steps = math.floor((lookback_s - window_s) / window_s + 1e-9) + 1  # as Prometheus counts them from start to end

    def grid(stride: int) -> _Grid:
        return _Grid(start, window_s * stride, (steps - 1) // stride + 1)

    def increase(field: str) -> str:
        return f"sum by (pod) (increase({SERIES[field]}{selector}[{span}]))"

    # The request counts at a coarse step: how many windows each variant (its pods, "<target>-...") holds.
    prefixes = tuple(f"{target}-" for target in targets)
    probe_stride = max(1, math.ceil(steps / PROBE_POINTS))
    arrays: dict[str, np.ndarray] = {}
    pods = _read(client, increase("requests"), grid(probe_stride), 0, arrays, 0, prefixes)
    seen = {pod: int(np.isfinite(values[0]).sum()) * probe_stride for pod, values in arrays.items()}
    groups = [[n for pod, n in seen.items() if pod.startswith(p)] for p in prefixes] or [list(seen.values())]
    stride = max(1, max(math.ceil(sum(group) / max(max_windows, 1)) for group in groups))
    if stride != probe_stride:  # read again at the step that keeps every variant within the limit
        arrays = {pod: np.full((len(_ROWS), grid(stride).points), np.nan) for pod in arrays}
        pods = _read(client, increase("requests"), grid(stride), 0, arrays, pods, prefixes)
    queries = [(increase(field), row) for row, field in enumerate(SERIES) if field != "requests"]
    running = f"avg by (pod) (avg_over_time({RUNNING_GAUGE}{selector}[{span}]"
    queries.append((running + "))", _ROWS.index("running_avg")))
    if stride > 1:  # the window before each one read is not read: ask for it
        queries.append((running + f" offset {span}))", _ROWS.index("previous_running_avg")))
    for promql, row in queries:
        pods = _read(client, promql, grid(stride), row, arrays, pods, prefixes)
    windows: dict[str, list[Window]] = {}
    for pod in sorted(arrays):
        values = arrays.pop(pod)
        if stride == 1:
            values[-1, 1:] = values[-2, :-1]
        if pod_windows := _windows_of(values, window_s):
            windows[pod] = pod_windows
    return windows, stride


def read_windows_file(path: str | pathlib.Path) -> dict[tuple[str, str], list[Window]]:
    """Windows per VariantAutoscaling (namespace, name) from a windows file (format in the module doc).

    Args:
        path: The windows file (YAML).

    Returns:
        The windows of every VariantAutoscaling in the file, by (namespace, name); the namespace defaults to
        ``default``.

    Raises:
        WindowsFileError: The file cannot be read, is not a regular file, is larger than
            :data:`MAX_WINDOWS_FILE_BYTES`, is not UTF-8 or not YAML, or an entry or window is missing a field, has a
            negative, non-finite or non-numeric value (a boolean or null too), a name or namespace that is not a
            string, an unknown key (the message names the entry and the field), or a VariantAutoscaling listed twice.
    """
    file = pathlib.Path(path)
    try:
        doc = yaml11.safe_load(read_text(file, MAX_WINDOWS_FILE_BYTES, "a windows file").text)
    except OSError as exc:
        raise WindowsFileError(f"{file}: cannot read ({exc.strerror or type(exc).__name__})") from None
    except InputFileError as exc:
        raise WindowsFileError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise WindowsFileError(f"{file}: invalid YAML ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("variants"), list):
        raise WindowsFileError(f"{file}: expected a mapping with 'windowSeconds' and a 'variants' list")
    seconds = doc.get("windowSeconds")
    if not _is_number(seconds) or seconds <= 0:
        raise WindowsFileError(f"{file}: windowSeconds must be a finite number > 0, got {shown(seconds)}")
    result: dict[tuple[str, str], list[Window]] = {}
    for i, entry in enumerate(doc["variants"]):
        where = f"{file}: variants[{i}]"
        if not isinstance(entry, dict) or not entry.get("name") or not isinstance(entry.get("windows"), list):
            raise WindowsFileError(f"{where}: needs 'name', 'namespace' and a 'windows' list")
        for key in ("name", "namespace"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise WindowsFileError(f"{where}.{key}: expected a string, got {shown(entry[key])}")
        windows = [_window(raw, f"{where}.windows[{j}]", float(seconds)) for j, raw in enumerate(entry["windows"])]
        variant = (entry.get("namespace") or "default", entry["name"])
        if variant in result:  # a second entry would silently replace the first one's windows
            raise WindowsFileError(
                f"{where}: {variant[0]}/{variant[1]} is listed twice; put all its windows in one entry"
            )
        result[variant] = windows
    return result


def _is_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is a finite number as YAML reads one (a boolean is not a number)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _window(raw: object, where: str, seconds: float) -> Window:
    """One window of the file (``where`` names it in errors): a mapping of the known keys, each a finite number
    >= 0, the required ones present; :class:`WindowsFileError` naming the field otherwise."""
    if not isinstance(raw, dict):
        raise WindowsFileError(f"{where}: expected a mapping")
    unknown = set(raw) - set(_FILE_KEYS)
    if unknown:
        raise WindowsFileError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    for key in (*_REQUIRED, *sorted(set(raw) - set(_REQUIRED))):
        value = raw.get(key)
        if not _is_number(value) or value < 0:
            raise WindowsFileError(f"{where}.{key}: expected a finite number >= 0, got {shown(value)}")
    fields = {_FILE_KEYS[k]: float(v) for k, v in raw.items()}
    queue_sum_s = fields.pop("queue_sum_s", None)
    return Window(seconds=seconds, queue_sum_s=queue_sum_s, **fields)


def write_windows_file(path: pathlib.Path, window_s: float, variants: Mapping[tuple[str, str], list[Window]]) -> None:
    """Write windows in the file format :func:`read_windows_file` reads (e.g. from a simulation).

    Args:
        path: The file to write (replaced when it exists).
        window_s: The length of every window, in seconds.
        variants: The windows of each VariantAutoscaling, by (namespace, name).
    """
    inverse = {v: k for k, v in _FILE_KEYS.items()}
    doc = {
        "windowSeconds": window_s,
        "variants": [
            {
                "namespace": ns,
                "name": name,
                "windows": [
                    {inverse[f]: round(float(getattr(w, f)), 6) for f in inverse if getattr(w, f, None) is not None}
                    for w in windows
                ],
            }
            for (ns, name), windows in sorted(variants.items())
        ],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def write_outcome(cluster: Cluster, obj: dict[str, Any], outcome: CalibrationOutcome, now: dt.datetime) -> bool:
    """Write the spec patch (only when the resource opted in) and the ProfileCalibrated condition.

    Both writes re-read the object and carry its resourceVersion (retry on conflict); the opt-in is
    checked again on the object being written, so removing the annotation meanwhile stops the write.

    Args:
        cluster: The cluster the VariantAutoscaling lives in.
        obj: The VariantAutoscaling as read.
        outcome: The calibration's result: the spec patch (None when nothing is written) and the condition.
        now: The condition's transition time when it changes.

    Returns:
        Whether the spec was written (False when there was no patch or the resource did not opt in).
    """
    ref = ObjectRef.of(obj)
    wrote_spec = False
    if outcome.spec_patch is not None:

        def mutate_spec(current: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal wrote_spec
            meta = current.get("metadata")  # re-read as the API returns it: the opt-in may be gone meanwhile
            wrote_spec = opted_in((meta.get("annotations") if isinstance(meta, dict) else None) or {})
            return {"spec": outcome.spec_patch} if wrote_spec else None

        retry_on_conflict(cluster, ref, mutate_spec, write="spec")
    update = ConditionUpdate(CONDITION_CALIBRATED, outcome.status, outcome.reason, outcome.message)

    def mutate_status(current: dict[str, Any]) -> dict[str, Any] | None:
        old = mapping_at(current, "status")
        conditions = set_conditions(old.get("conditions"), [update], now, generation_of(current))
        return changed_fields(old, {**old, "conditions": conditions})

    retry_on_conflict(cluster, ref, mutate_status, write="status")
    return wrote_spec


class Collected(NamedTuple):
    """What :func:`collect_windows` read, by VariantAutoscaling (namespace, name)."""

    windows: dict[tuple[str, str], list[Window]]
    """The windows of each variant whose metrics were read (at most :data:`MAX_WINDOWS_PER_VARIANT`)."""
    errors: dict[tuple[str, str], str]
    """Why a variant's metrics could not be read (its model's query failed, or the source is unusable)."""
    notes: dict[tuple[str, str], str]
    """How a variant's windows were sampled, when they were (for its condition)."""


def _thin(windows: list[Window], limit: int) -> tuple[list[Window], str | None]:
    """At most ``limit`` of ``windows``, evenly spaced, and a note saying so when some were left out."""
    if len(windows) <= limit:
        return windows, None
    kept = [windows[i * len(windows) // limit] for i in range(limit)]
    return kept, f"{limit:,} of {len(windows):,} windows used, evenly spaced (at most {limit:,} per variant)"


@task(name="collect-windows")
def collect_windows(
    variants: list[Accepted[VariantAutoscaling]],
    windows_file: str | None,
    prometheus_url: str | None,
    lookback_text: str,
    window_text: str,
) -> Collected:
    """The metrics windows of each VariantAutoscaling's pods over the lookback, one model at a time.

    A model whose queries fail (Prometheus unreachable, a refused query, an answer too large) is an error for its own
    variants; the other models are still read. A variant holds at most :data:`MAX_WINDOWS_PER_VARIANT` windows: more
    are read evenly sampled (:func:`prometheus_windows`) and, from a windows file, thinned evenly.

    Args:
        variants: The VariantAutoscalings to calibrate (their pods are named after their scale target).
        windows_file: Read the windows from this file instead of Prometheus.
        prometheus_url: Prometheus base URL; defaults to $PROMETHEUS_URL.
        lookback_text: How far back to read, a PromQL duration such as ``24h`` or ``1d``.
        window_text: One window's length, a PromQL duration such as ``5m``.

    Returns:
        The windows, the errors and the sampling notes by (namespace, name).

    Raises:
        WindowsFileError: The windows file cannot be used (:func:`read_windows_file`).
    """
    result = Collected({}, {}, {})
    if windows_file:
        for key, windows in read_windows_file(windows_file).items():
            result.windows[key], note = _thin(windows, MAX_WINDOWS_PER_VARIANT)
            if note:
                result.notes[key] = note
        return result
    lookback, window = duration_seconds(lookback_text), duration_seconds(window_text)
    url = prometheus_url or os.environ.get("PROMETHEUS_URL")
    why = None
    if not (1.0 <= window <= lookback and window.is_integer()):
        why = (
            f"window {window_text} must be whole seconds, at least 1s, and no longer than the lookback {lookback_text}"
        )
    elif not url:
        why = (
            "no metrics source configured (--prometheus-url or --windows-file; parameters prometheus_url, windows_file)"
        )
    if why:
        result.errors.update({(va.namespace, va.name): why for va in variants})
        return result
    client = PrometheusMetrics.from_env(url)
    assert client is not None
    now = dt.datetime.now(dt.UTC)
    by_model: dict[tuple[str, str], dict[tuple[str, str], str]] = {}  # model -> variant -> its scale target
    for va in variants:
        if va.model.spec.scale_target_ref is not None:
            by_model.setdefault((va.namespace, va.model.spec.model_id), {})[(va.namespace, va.name)] = (
                va.model.spec.scale_target_ref.name
            )
    for (namespace, model_id), targets in by_model.items():
        try:
            pods, stride = prometheus_windows(
                client, namespace, model_id, now, lookback, window, targets.values(), MAX_WINDOWS_PER_VARIANT
            )
        except MetricsError as exc:  # this model's variants only: the next model is still read
            result.errors.update(dict.fromkeys(targets, str(exc)))
            continue
        for key, target in targets.items():
            windows = [w for pod, ws in pods.items() if pod.startswith(target + "-") for w in ws]
            result.windows[key], note = _thin(windows, MAX_WINDOWS_PER_VARIANT)
            if stride > 1:
                note = (
                    f"one {format_duration(window)} window every {format_duration(stride * window)} read "
                    f"(at most {MAX_WINDOWS_PER_VARIANT:,} windows per variant)" + (f"; {note}" if note else "")
                )
            if note:
                result.notes[key] = note
        del pods  # released before the next model is read
    return result
