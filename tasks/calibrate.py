"""I/O of the calibrate flow: read windows of vLLM metrics (Prometheus range queries or a windows file),
write the outcome back to each VariantAutoscaling.

Prometheus: one ``query_range`` per metric and model, ``sum by (pod) (increase(<metric>[W]))`` at a
step of ``W`` over the lookback, so each (pod, step) is one :class:`engine.simulate.calibrate.Window`: a pod's
own batch, its own latencies; and ``avg by (pod) (avg_over_time(vllm:num_requests_running[W]))``, the
batch a request joins, for that window and (as ``previous_running_avg``) the pod's window before it.
The variant's pods are those named after its scale target (``<target>-...``), as a Deployment names them.
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
from collections.abc import Mapping
from typing import Any, TypeGuard

import yaml

from engine import yaml11
from engine.api.llmd import VariantAutoscaling
from engine.errors import shown
from engine.promql import quote
from engine.simulate.calibrate import CONDITION_CALIBRATED, CalibrationOutcome, Window, opted_in
from engine.status import ConditionUpdate, changed_fields, generation_of, mapping_at, set_conditions
from engine.units import duration_seconds
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


def _by_pod_and_time(matrix: list[dict[str, Any]]) -> dict[tuple[str, float], float]:
    """A range query's matrix as value by (pod, timestamp), keeping only the samples that are counts.

    A sample that is not a finite number >= 0 (``NaN``, ``+Inf``, ``1e999``, a negative increase, text that is no
    number) or stamped at a time that is not a finite number is missing data, as the optimize cycle reads such a
    sample: its window lacks that series (and is left out when the series is required) instead of carrying the
    value into the fit, where one ``NaN`` made every parameter ``nan`` and a non-number failed the whole run.
    """
    values: dict[tuple[str, float], float] = {}
    for row in matrix:
        pod = row["metric"].get("pod", "")
        for t, v in row.get("values", []):
            try:
                at, value = float(t), float(v)
            except (TypeError, ValueError):
                continue
            if math.isfinite(at) and is_count(value):
                values[(pod, at)] = value
    return values


def prometheus_windows(
    client: PrometheusMetrics,
    namespace: str,
    model_id: str,
    end: dt.datetime,
    lookback_s: float,
    window_s: float,
) -> dict[str, list[Window]]:
    """Per pod of the model: one window per step over the lookback (windows missing a series, or whose sample of
    one is not a finite number >= 0, are left out; an optional series' such sample is read as absent).

    Args:
        client: The Prometheus client.
        namespace: The namespace of the model's pods (a ``namespace`` label of the series).
        model_id: The served model's name (the ``model_name`` label of the series).
        end: The end of the lookback.
        lookback_s: How far back windows are read, in seconds.
        window_s: The length of one window (and the query step), in seconds.

    Returns:
        The windows by pod name, oldest first.
    """
    selector = f"{{namespace={quote(namespace)}, model_name={quote(model_id)}}}"
    step = f"{int(window_s)}s"
    stop = end.timestamp()
    start = stop - lookback_s + window_s
    values: dict[str, dict[tuple[str, float], float]] = {}
    for field, series in SERIES.items():
        values[field] = _by_pod_and_time(
            client.query_range(f"sum by (pod) (increase({series}{selector}[{step}]))", start, stop, window_s)
        )
    running = _by_pod_and_time(
        client.query_range(f"avg by (pod) (avg_over_time({RUNNING_GAUGE}{selector}[{step}]))", start, stop, window_s)
    )
    keys = sorted(
        set(values["requests"])
        & set(values["ttft_sum_s"])
        & set(values["itl_sum_s"])
        & set(values["itl_count"])
        & set(values["prompt_tokens_sum"])
    )
    windows: dict[str, list[Window]] = {}
    for pod, t in keys:
        windows.setdefault(pod, []).append(
            Window(
                seconds=window_s,
                requests=values["requests"][(pod, t)],
                ttft_sum_s=values["ttft_sum_s"][(pod, t)],
                queue_sum_s=values["queue_sum_s"].get((pod, t)),
                itl_sum_s=values["itl_sum_s"][(pod, t)],
                itl_count=values["itl_count"][(pod, t)],
                prompt_tokens_sum=values["prompt_tokens_sum"][(pod, t)],
                inference_sum_s=values["inference_sum_s"].get((pod, t)),
                running_avg=running.get((pod, t)),
                previous_running_avg=running.get((pod, t - window_s)),
            )
        )
    return windows


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


@task(name="collect-windows")
def collect_windows(
    variants: list[Accepted[VariantAutoscaling]],
    windows_file: str | None,
    prometheus_url: str | None,
    lookback_text: str,
    window_text: str,
) -> tuple[dict[tuple[str, str], list[Window]], str | None]:
    """The metrics windows of each VariantAutoscaling's pods over the lookback.

    Args:
        variants: The VariantAutoscalings to calibrate (their pods are named after their scale target).
        windows_file: Read the windows from this file instead of Prometheus.
        prometheus_url: Prometheus base URL; defaults to $PROMETHEUS_URL.
        lookback_text: How far back to read, a PromQL duration such as ``24h`` or ``1d``.
        window_text: One window's length, a PromQL duration such as ``5m``.

    Returns:
        Windows per (namespace, name), and why the metrics backend failed (None: it did not).
    """
    if windows_file:
        return read_windows_file(windows_file), None
    lookback, window = duration_seconds(lookback_text), duration_seconds(window_text)
    if not (1.0 <= window <= lookback and window.is_integer()):
        return (
            {},
            f"window {window_text} must be whole seconds, at least 1s, and no longer than the lookback {lookback_text}",
        )
    url = prometheus_url or os.environ.get("PROMETHEUS_URL")
    if not url:
        return (
            {},
            "no metrics source configured (--prometheus-url or --windows-file; parameters prometheus_url, windows_file)",
        )
    client = PrometheusMetrics.from_env(url)
    assert client is not None
    now = dt.datetime.now(dt.UTC)
    result: dict[tuple[str, str], list[Window]] = {}
    by_model: dict[tuple[str, str], dict[str, list[Window]]] = {}
    try:
        for va in variants:
            namespace, model, ref = va.namespace, va.model.spec.model_id, va.model.spec.scale_target_ref
            if ref is None:
                continue
            target = ref.name
            if (namespace, model) not in by_model:
                by_model[(namespace, model)] = prometheus_windows(client, namespace, model, now, lookback, window)
            pods = by_model[(namespace, model)]
            result[(namespace, va.name)] = [
                w for pod, ws in sorted(pods.items()) if pod.startswith(target + "-") for w in ws
            ]
    except MetricsError as exc:
        return result, str(exc)
    return result, None
