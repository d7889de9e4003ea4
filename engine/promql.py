"""The PromQL the Prometheus source asks, and how its answers are taken apart (text only, no HTTP).

One :meth:`~tasks.clients.metrics.prometheus.PrometheusMetrics.collect` costs two queries however many models are
asked for (three with instance metrics): :func:`load_query` for the loads grouped ``by (model_name,
namespace)``, :func:`pod_query` for the pods grouped ``by (model_name, namespace, pod)``, and
:func:`instance_query` for Kthena policy metrics summed per pod. Each is a union of tagged
sub-expressions (``label_replace(..., "mp_field", "<tag>", "", "")``), so values and sample timestamps come
back together in one answer; :func:`tagged_rows` sorts the rows back by tag. Namespaces and pods are
matched with an anchored RE2 alternation (:func:`regex_union`) of the escaped names.

What is measured (the WVA conventions, vLLM metric names):

- arrival rate: ``sum by (model_name, namespace) (rate(vllm:request_success_total[1m]))``.
- average tokens per request: ``sum(rate(vllm:request_prompt_tokens_sum[1m])) /
  sum(rate(vllm:request_prompt_tokens_count[1m]))`` (same for ``vllm:request_generation_tokens``). With no
  request in the window the ratio is undefined, so it falls back to ``increase`` over a longer window (5m).
- shape of the load: the highest 1-minute arrival rate over the last ``peak_window`` (3m: a replica's
  start-up plus one cycle), ``max_over_time(sum by (...) (rate(...[1m]))[3m:1m])``, and the prompt-token
  histogram over the fallback window, ``sum by (..., le) (increase(vllm:request_prompt_tokens_bucket[5m]))``.
- the rate's trend (a sustained fall skips the scale-down window, :mod:`engine.perf.load_trend`): with ``D`` the
  change of the 1-minute rate from one minute to the next, ``max_over_time(D[2m:1m])`` (the largest of the last
  two changes: negative when the rate fell in both) and ``quantile_over_time(0.5, abs(D)[30m:1m])`` (its noise).
- per pod: ``vllm:kv_cache_usage_perc`` (max over a pod's series; for a pod that only exposes the pre-0.10
  name ``vllm:gpu_cache_usage_perc``, that one) and ``vllm:num_requests_waiting`` (summed).
- instance metrics (Kthena AutoscalingPolicy ``spec.metrics``): any metric name, summed per pod.
- requests waiting at the gateway (scale from zero, :mod:`engine.optimize.wake`): the inference scheduler's
  flow-control queue ``llm_d_epp_flow_control_queue_size`` summed ``by (namespace, target_model_name)`` (the
  model's name as ``model_name``), or, for a model that one does not report, the deprecated
  ``inference_extension_flow_control_queue_size``; part of :func:`load_query`.
- SLO attainment (:mod:`engine.slo.measure`), :func:`latency_query`: the bucket increases of the TTFT histogram
  and of each ITL histogram vLLM may export, ``sum by (model_name, namespace, le) (increase(..._bucket[W]))``, over
  the SLO's evaluation window ``W`` and over the recent 2 minutes, with the increases of each histogram's ``_sum``
  (where inside a coarse bucket the observations sit), in one query per distinct window.

A range query (the calibrate flow's windows) of more than Prometheus's 11,000 evaluations a series is asked in
pieces on one grid (:func:`range_pieces`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from engine.perf.load_peak import HOLD_WINDOWS_S
from engine.slo.measure import ITL_HISTOGRAMS, REQUEST_ITL_HISTOGRAM, TTFT_HISTOGRAM, LatencyHistograms

REQUEST_SUCCESS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:request_prompt_tokens"
GENERATION_TOKENS = "vllm:request_generation_tokens"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
KV_CACHE_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"
"""The same gauge under its name before vLLM 0.10; read for a pod only when the new name is absent."""
REQUESTS_WAITING = "vllm:num_requests_waiting"
GATEWAY_QUEUE = "llm_d_epp_flow_control_queue_size"
"""The inference scheduler's (llm-d EPP) flow-control queue: requests held at the gateway, by ``target_model_name``."""
GATEWAY_QUEUE_LEGACY = "inference_extension_flow_control_queue_size"
"""Its deprecated name (Gateway API Inference Extension), read for a model the new name does not report."""


MODEL_LABELS = ("model_name", "namespace")
POD_LABELS = ("model_name", "namespace", "pod")
HOLD_TAGS = tuple(f"peak_{int(window)}s" for window in HOLD_WINDOWS_S)
"""One tag per look-back of the attainment loop's peak hold (:data:`engine.perf.load_peak.HOLD_WINDOWS_S`)."""
LOAD_TAGS = ("rate", "seen", "in", "out", "peak", "burst", "change", "noise", *HOLD_TAGS, "lowest", "gateway")
POD_TAGS = ("kv", "kv_seen", "waiting", "waiting_seen")
LATENCY_LABELS = ("model_name", "namespace")
LATENCY_HISTOGRAMS = (TTFT_HISTOGRAM, *ITL_HISTOGRAMS)
"""The histograms :func:`latency_query` reads: TTFT, then the ITL ones in order of preference."""
LATENCY_RANGES = ("window", "recent")
LATENCY_BY = "model_name, namespace"
TAG = "mp_field"
"""The label that tells the sub-expressions of one union query apart."""
METRIC_TAG = "mp_metric"
"""The label that carries the metric name of an instance-metric row."""
_REGEX_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def load_query(
    selector: str,
    rate_window: str,
    fallback_window: str,
    peak_window: str,
    change_window: str = "2m",
    noise_window: str = "30m",
    burst_window: str = "30s",
) -> str:
    """Arrival rate, its newest sample time, mean tokens in and out, recent peak rate, the most requests in one
    ``burst_window`` over the peak window (sub-minute bursts), the peak and lowest rate over the peak hold's
    look-backs, the rate's recent changes and noise, and the prompt histogram."""
    by = "model_name, namespace"

    def arrival_rate(offset: str = "") -> str:
        return f"sum by ({by}) (rate({REQUEST_SUCCESS}{{{selector}}}[{rate_window}]{offset}))"

    rate = arrival_rate()
    change = f"({rate} - {arrival_rate(f' offset {rate_window}')})"
    return union(
        {
            "rate": rate,
            "seen": f"max by ({by}) (timestamp({REQUEST_SUCCESS}{{{selector}}}))",
            "in": _tokens_expr(PROMPT_TOKENS, selector, by, rate_window, fallback_window),
            "out": _tokens_expr(GENERATION_TOKENS, selector, by, rate_window, fallback_window),
            # Start-up-aware sizing (engine.perf.load_peak) and tail-aware sizing (engine.perf.tail_sizing).
            "peak": f"max_over_time(({rate})[{peak_window}:{rate_window}])",
            # Burst-aware sizing (engine.perf.load_burst): the highest count in one burst window, windows end to end.
            "burst": (
                f"max_over_time((sum by ({by}) (increase({REQUEST_SUCCESS}{{{selector}}}[{burst_window}])))"
                f"[{peak_window}:{burst_window}])"
            ),
            # The attainment loop's peak hold (engine.slo.controller): the same peak over longer look-backs.
            **{
                tag: f"max_over_time(({rate})[{int(window)}s:{rate_window}])"
                for tag, window in zip(HOLD_TAGS, HOLD_WINDOWS_S)
            },
            # ... and whether the traffic is intermittent: the lowest rate over the longest look-back (0: a silence).
            "lowest": f"min_over_time(({rate})[{int(max(HOLD_WINDOWS_S))}s:{rate_window}])",
            # Sustained fall (engine.perf.load_trend): the largest recent change and the changes' median size.
            "change": f"max_over_time({change}[{change_window}:{rate_window}])",
            "noise": f"quantile_over_time(0.5, abs({change})[{noise_window}:{rate_window}])",
            "bucket": f"sum by ({by}, le) (increase({PROMPT_TOKENS}_bucket{{{selector}}}[{fallback_window}]))",
            # Scale from zero (engine.optimize.wake): a model with no replica exports no vLLM metric at all.
            "gateway": gateway_queue_expr(selector),
        }
    )


def gateway_queue_expr(selector: str) -> str:
    """Requests waiting in the gateway's flow-control queue per model, labelled ``model_name`` and ``namespace``:
    the current gauge, or the deprecated one for a model the current one does not report (both are exported
    during the rename, and adding them would count every request twice)."""
    queued = " or ".join(
        f"sum by (namespace, target_model_name) ({name}{{{selector}}})"
        for name in (GATEWAY_QUEUE, GATEWAY_QUEUE_LEGACY)
    )
    return f'label_replace({queued}, "model_name", "$1", "target_model_name", "(.+)")'


def latency_query(selector: str, window: str, recent: str) -> str:
    """The bucket increases of every latency histogram over ``window`` and ``recent``, tagged
    ``<histogram>|<range>`` (read back with :func:`latency_buckets`), and the increases of their ``_sum``, tagged
    ``<histogram>|<range>|sum``: the sum says where inside a coarse bucket the observations sit."""
    parts: dict[str, str] = {}
    for histogram in LATENCY_HISTOGRAMS:
        for name, span in zip(LATENCY_RANGES, (window, recent)):
            tag_name = latency_tag(histogram, name)
            parts[tag_name] = f"sum by ({LATENCY_BY}, le) (increase({histogram}_bucket{{{selector}}}[{span}]))"
            parts[f"{tag_name}|sum"] = f"sum by ({LATENCY_BY}) (increase({histogram}_sum{{{selector}}}[{span}]))"
    return union(parts)


def latency_tag(histogram: str, range_name: str) -> str:
    """The tag of one histogram over one range in :func:`latency_query`."""
    return f"{histogram}|{range_name}"


LATENCY_SUM_TAGS = tuple(f"{latency_tag(h, r)}|sum" for h in LATENCY_HISTOGRAMS for r in LATENCY_RANGES)
"""The tags of the ``_sum`` rows of a :func:`latency_query` answer (read with :func:`tagged_rows`)."""


def latency_histograms(
    by_tag: Mapping[str, tuple[tuple[float, float], ...]], sums: Mapping[str, float] | None = None
) -> LatencyHistograms | None:
    """One model's histograms from its :func:`tagged_buckets` of a :func:`latency_query` answer: TTFT, and the
    first ITL histogram of :data:`~engine.slo.measure.ITL_HISTOGRAMS` it has, with the ``_sum`` increases
    (``sums``: tag -> value) where they were read; None when it has none of the histograms."""
    sums = sums or {}

    def over(histogram: str, range_name: str) -> tuple[tuple[float, float], ...] | None:
        pairs = by_tag.get(latency_tag(histogram, range_name))
        return pairs if pairs and math.isinf(pairs[-1][0]) else None  # a histogram without +Inf is not one

    def total(histogram: str | None, range_name: str) -> float | None:
        value = sums.get(f"{latency_tag(histogram, range_name)}|sum") if histogram else None
        return value if value is not None and math.isfinite(value) and value >= 0 else None

    itl = next((h for h in ITL_HISTOGRAMS if over(h, "window") or over(h, "recent")), None)
    ttft_window, ttft_recent = over(TTFT_HISTOGRAM, "window"), over(TTFT_HISTOGRAM, "recent")
    if ttft_window is None and ttft_recent is None and itl is None:
        return None
    return LatencyHistograms(
        ttft_window,
        ttft_recent,
        over(itl, "window") if itl else None,
        over(itl, "recent") if itl else None,
        itl or REQUEST_ITL_HISTOGRAM,
        ttft_window_sum=total(TTFT_HISTOGRAM, "window"),
        ttft_recent_sum=total(TTFT_HISTOGRAM, "recent"),
        itl_window_sum=total(itl, "window"),
        itl_recent_sum=total(itl, "recent"),
    )


def _tokens_expr(histogram: str, selector: str, by: str, rate_window: str, fallback_window: str) -> str:
    """Mean tokens per request over ``rate_window``, else (no request in it) over ``fallback_window``."""

    def ratio(function: str, window: str) -> str:
        total = f"sum by ({by}) ({function}({histogram}_sum{{{selector}}}[{window}]))"
        count = f"sum by ({by}) ({function}({histogram}_count{{{selector}}}[{window}]))"
        return f"({total} / ({count} > 0))"

    return f"{ratio('rate', rate_window)} or {ratio('increase', fallback_window)}"


def traffic_counts_query(selector: str, window: str, step: str) -> str:
    """Requests finished per ``step`` over the last ``window``, per model: a subquery, so the answer is a matrix
    (one sample per step) from one instant query."""
    by = "model_name, namespace"
    return f"(sum by ({by}) (increase({REQUEST_SUCCESS}{{{selector}}}[{step}])))[{window}:{step}]"


TRAFFIC_TAGS = ("prompt", "prompt_sum", "prompt_count", "output", "output_sum", "output_count")


def traffic_tokens_query(selector: str, window: str) -> str:
    """The prompt- and output-token histograms over the last ``window``, per model, with their sums and counts
    (the means that shape a bucket's inside): tagged ``prompt``, ``prompt_sum``, ... (:data:`TRAFFIC_TAGS`)."""
    parts: dict[str, str] = {}
    for name, histogram in (("prompt", PROMPT_TOKENS), ("output", GENERATION_TOKENS)):
        parts[name] = f"sum by (model_name, namespace, le) (increase({histogram}_bucket{{{selector}}}[{window}]))"
        for suffix in ("sum", "count"):
            parts[f"{name}_{suffix}"] = (
                f"sum by (model_name, namespace) (increase({histogram}_{suffix}{{{selector}}}[{window}]))"
            )
    return union(parts)


def pod_query(selector: str) -> str:
    """KV-cache usage and waiting requests per pod, each with its newest sample time."""
    by = "model_name, namespace, pod"
    return union(
        {
            # vLLM < 0.10 named the gauge vllm:gpu_cache_usage_perc: used per pod where the new name is absent
            "kv": f"(max by ({by}) ({KV_CACHE_USAGE}{{{selector}}}) or max by ({by}) ({KV_CACHE_USAGE_LEGACY}{{{selector}}}))",
            "kv_seen": f"(max by ({by}) (timestamp({KV_CACHE_USAGE}{{{selector}}}))"
            f" or max by ({by}) (timestamp({KV_CACHE_USAGE_LEGACY}{{{selector}}})))",
            "waiting": f"sum by ({by}) ({REQUESTS_WAITING}{{{selector}}})",
            "waiting_seen": f"max by ({by}) (timestamp({REQUESTS_WAITING}{{{selector}}}))",
        }
    )


def instance_query(names: list[str], selector: str) -> str:
    """Each metric of ``names`` summed per (namespace, pod), with its newest sample time."""
    parts = []
    for name in names:
        value = f"sum by (namespace, pod) ({name}{{{selector}}})"
        seen = f"max by (namespace, pod) (timestamp({name}{{{selector}}}))"
        parts.append(tag(tag(value, TAG, "value"), METRIC_TAG, name))
        parts.append(tag(tag(seen, TAG, "seen"), METRIC_TAG, name))
    return " or ".join(parts)


def instance_rows(
    rows: list[dict[str, Any]],
) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str, str], float]]:
    """The values and sample times of an :func:`instance_query` answer, keyed by (namespace, pod, metric)."""
    values: dict[tuple[str, str, str], float] = {}
    seen: dict[tuple[str, str, str], float] = {}
    for row in rows:
        labels = row.get("metric", {})
        key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get(METRIC_TAG, ""))
        target = values if labels.get(TAG) == "value" else seen
        target[key] = sample_value(row)
    return values, seen


def quote(value: str) -> str:
    """A PromQL double-quoted string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def regex_union(values: Iterable[str]) -> str:
    """An RE2 alternation matching exactly ``values`` (Prometheus anchors label regexes)."""
    return "|".join(_REGEX_SPECIAL.sub(r"\\\1", value) for value in values)


def tag(expr: str, label: str, value: str) -> str:
    """``expr`` with the constant label ``label="value"`` added (``label_replace`` on an empty source)."""
    return f'label_replace({expr}, "{label}", {quote(value)}, "", "")'


def union(parts: Mapping[str, str]) -> str:
    """One query returning every part, each tagged with ``mp_field=<tag>`` so the rows can be told apart."""
    return " or ".join(tag(expr, TAG, name) for name, expr in parts.items())


def tagged_rows(
    rows: list[dict[str, Any]], labels: tuple[str, ...], tags: Iterable[str]
) -> dict[str, dict[tuple[str, ...], float]]:
    """``{tag: {label values: sample value}}`` from the answer of a :func:`union` query."""
    grouped: dict[str, dict[tuple[str, ...], float]] = {tag: {} for tag in tags}
    for row in rows:
        metric = row.get("metric", {})
        key = tuple(metric.get(label, "") for label in labels)
        grouped.setdefault(metric.get(TAG, ""), {})[key] = sample_value(row)
    return grouped


def prompt_buckets(rows: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[tuple[float, float], ...]]:
    """Per (model_name, namespace): the prompt-token histogram's ``(le, count)`` pairs, by increasing ``le``."""
    return {key: by_tag["bucket"] for key, by_tag in tagged_buckets(rows).items() if "bucket" in by_tag}


def tagged_buckets(
    rows: list[dict[str, Any]],
) -> dict[tuple[str, str], dict[str, tuple[tuple[float, float], ...]]]:
    """Per (model_name, namespace) and tag: the ``(le, count)`` pairs of the rows that carry ``le``, by increasing
    ``le``; only the histograms :func:`read_buckets` accepts."""
    return read_buckets(rows)[0]


def read_buckets(
    rows: list[dict[str, Any]],
) -> tuple[
    dict[tuple[str, str], dict[str, tuple[tuple[float, float], ...]]],
    dict[tuple[str, str], dict[str, str]],
]:
    """The histograms of the rows that carry ``le``, per (model_name, namespace) and tag, and why the others are none.

    A bucket whose count is not a finite number >= 0 (NaN, ``+Inf``, ``1e999``, negative: Prometheus computes none
    of them from a counter) is left out, as a bucket never exported. What is left is a histogram only when its
    bounds are finite numbers >= 0, each different, ending with ``+Inf``: a bound ``NaN`` or ``-5`` is no number of
    tokens or seconds, and read as one it put every observation in the first bucket (prompts of 0 tokens, a replay
    that met every target).

    Returns:
        The accepted histograms, ``(le, count)`` by increasing ``le``; and per model and tag, for a refused one,
        why (naming the bound).
    """
    buckets: dict[tuple[tuple[str, str], str], list[tuple[float, float, str]]] = {}
    for row in rows:
        metric = row.get("metric", {})
        if "le" not in metric:
            continue
        key = (metric.get("model_name", ""), metric.get("namespace", ""))
        pairs = buckets.setdefault((key, metric.get(TAG, "")), [])
        label = str(metric["le"])
        try:
            bound = float(label)
        except ValueError:
            bound = math.nan  # refused below with the label as it came
        value = sample_value(row)
        if math.isfinite(value) and value >= 0:
            pairs.append((bound, value, label))
    accepted: dict[tuple[str, str], dict[str, tuple[tuple[float, float], ...]]] = {}
    refused: dict[tuple[str, str], dict[str, str]] = {}
    for (key, tag_name), pairs in buckets.items():
        problem = bucket_bounds_problem(pairs)
        if problem is None:
            accepted.setdefault(key, {})[tag_name] = tuple(sorted((bound, value) for bound, value, _ in pairs))
        else:
            refused.setdefault(key, {})[tag_name] = problem
    return accepted, refused


def bucket_bounds_problem(pairs: Iterable[tuple[float, float, str]]) -> str | None:
    """Why buckets ``(le, count, le as labelled)`` are no histogram, or None when they are one: their bounds must
    be finite numbers >= 0, all different, and the last ``+Inf``."""
    rows = list(pairs)
    for bound, _, label in rows:
        if not bound >= 0:  # NaN, negative, -Inf or no number at all; +Inf can only be last (or a duplicate)
            return f"bucket bound le={_shown(label)} is not a number >= 0"
    ordered = sorted(rows, key=lambda row: row[0])
    for (low, _, low_label), (high, _, high_label) in zip(ordered, ordered[1:]):
        if high <= low:
            return f"bucket bounds le={_shown(low_label)} and le={_shown(high_label)} are the same bound"
    if not ordered or ordered[-1][0] != math.inf:
        return "no +Inf bucket with a count"
    return None


def _shown(label: str) -> str:
    """A label value as a message quotes it: at most 40 characters, control characters escaped (it comes from the
    server, and the message goes to a log line)."""
    return json.dumps(label if len(label) <= 40 else label[:40] + "...")


def sample_value(row: Mapping[str, Any]) -> float:
    """The value of one instant-vector row; NaN when it has none."""
    try:
        return float(row["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan


def matrix_samples(row: Mapping[str, Any]) -> list[tuple[float, float]]:
    """The ``(time, value)`` samples of one range-vector row (a subquery's answer), oldest first: a sample whose
    time is not a number is left out, a value that is not one is NaN (as :func:`sample_value`)."""
    samples = []
    for pair in row.get("values") or []:
        try:
            time_s = float(pair[0])
        except (IndexError, TypeError, ValueError):
            continue
        samples.append((time_s, sample_value({"value": pair})))
    return samples


MAX_RANGE_POINTS = 11_000
"""The most evaluations Prometheus computes for one series of a range query (its ``query_range`` answers "exceeded
maximum resolution of 11,000 points per timeseries" beyond): 38 days at 5 minutes, 7.6 days at 1 minute."""


def range_pieces(start: float, end: float, step_s: float) -> list[tuple[float, float]]:
    """``[start, end]`` at ``step_s`` as consecutive ranges of at most :data:`MAX_RANGE_POINTS` evaluations each, on
    the same grid (every piece starts a whole number of steps after ``start``) and without overlap.

    Args:
        start: The first evaluation, in epoch seconds.
        end: The last, in epoch seconds.
        step_s: Seconds between evaluations (> 0).

    Returns:
        The pieces' (start, end) in time order; the one range itself when it is short enough, or when the step is
        not a positive number (Prometheus then refuses the query and says why).
    """
    if not 0.0 < step_s < math.inf:
        return [(start, end)]
    span = (MAX_RANGE_POINTS - 1) * step_s
    pieces = []
    piece_start = start
    while piece_start + span < end:
        pieces.append((piece_start, piece_start + span))
        piece_start += span + step_s
    pieces.append((piece_start, end))
    return pieces
