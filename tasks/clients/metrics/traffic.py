"""A window of each model's traffic as Prometheus keeps it: requests per minute and the token histograms.

The tune flow replays the cluster's own recent traffic (:mod:`engine.simulate.rebuild` turns what this module
reads into a trace). Two instant queries, at the window's end, however many models are asked for (the text is in
:mod:`engine.promql`):

- :func:`~engine.promql.traffic_counts_query`: ``increase(vllm:request_success_total[1m])`` summed per model,
  as a subquery over the window, so one answer holds every minute of every model;
- :func:`~engine.promql.traffic_tokens_query`: the prompt- and output-token histograms
  (``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``) over the window, with their sums and counts.
  A histogram whose bucket bounds are no token counts (``le="NaN"``, ``le="-5"``) is refused as no histogram, with
  the reason kept for the error that follows (:func:`~engine.promql.read_buckets`).

A model Prometheus has no series for is absent from the answer (the caller says so); Prometheus down or failing
raises :class:`~tasks.clients.metrics.snapshot.MetricsUnavailable`, as every query of
:class:`~tasks.clients.metrics.prometheus.PrometheusMetrics` does.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from typing import Any

from engine.perf.tail_sizing import PromptDistribution
from engine.promql import (
    MODEL_LABELS,
    TRAFFIC_TAGS,
    matrix_samples,
    quote,
    read_buckets,
    regex_union,
    tagged_rows,
    traffic_counts_query,
    traffic_tokens_query,
)
from engine.simulate.rebuild import ModelTraffic
from engine.slo.target import format_window
from tasks.clients.metrics.prometheus import PrometheusMetrics
from tasks.clients.metrics.snapshot import ModelKey

__all__ = ["read_traffic"]


def read_traffic(
    metrics: PrometheusMetrics,
    models: Iterable[ModelKey],
    window_s: float,
    end: dt.datetime,
    step_s: float = 60.0,
) -> dict[ModelKey, ModelTraffic]:
    """Per model asked for that Prometheus has series of: its requests per step over ``[end - window_s, end]``
    and its token histograms over the window.

    Args:
        metrics: the Prometheus client (its URL, credentials, retries).
        models: the models to read (``model_name`` and ``namespace`` labels).
        window_s: the window's length in seconds (a whole number of steps).
        end: the window's end, the evaluation instant of both queries.
        step_s: the length of one step in seconds (a whole number of seconds).

    Returns:
        per model, a :class:`~engine.simulate.rebuild.ModelTraffic` with ``window_s / step_s`` steps.

    Raises:
        MetricsUnavailable: Prometheus cannot be reached or answers with an error.
        ValueError: a window that is not a whole number of steps.
    """
    keys = sorted(set(models))
    steps = window_s / step_s
    if step_s < 1 or steps < 1 or abs(steps - round(steps)) > 1e-9 or step_s != int(step_s):
        raise ValueError(f"the window ({window_s:g}s) must be a whole number of steps of whole seconds ({step_s:g}s)")
    if not keys:
        return {}
    selector = f"namespace=~{quote(regex_union(sorted({key.namespace for key in keys})))}"
    window, step = format_window(window_s), f"{int(step_s)}s"
    series = metrics.query(traffic_counts_query(selector, window, step), end, "matrix")
    counts = _counts_per_step(series, end.timestamp() - window_s, step_s, int(round(steps)))
    token_rows = metrics.query(traffic_tokens_query(selector, window), end)
    (histograms, refused), totals = read_buckets(token_rows), tagged_rows(token_rows, MODEL_LABELS, TRAFFIC_TAGS)
    traffic: dict[ModelKey, ModelTraffic] = {}
    for key in keys:
        labels = (key.model_id, key.namespace)
        if labels not in counts and labels not in histograms and labels not in refused:
            continue
        buckets, problems = histograms.get(labels, {}), refused.get(labels, {})
        traffic[key] = ModelTraffic(
            counts=tuple(counts.get(labels, [0.0] * int(round(steps)))),
            step_s=step_s,
            prompt_tokens=_distribution(buckets.get("prompt"), totals, "prompt", labels),
            output_tokens=_distribution(buckets.get("output"), totals, "output", labels),
            prompt_refused=problems.get("prompt"),
            output_refused=problems.get("output"),
        )
    return traffic


def _counts_per_step(
    series: list[dict[str, Any]], start_s: float, step_s: float, steps: int
) -> dict[tuple[str, str], list[float]]:
    """Per (model_name, namespace): the subquery's samples placed in the window's steps (a step without a sample
    had no request, or no series yet: 0). A sample at time ``t`` counts the step that ends at ``t``."""
    counts: dict[tuple[str, str], list[float]] = {}
    for row in series:
        labels = row.get("metric")
        if not isinstance(labels, dict):
            continue
        per_step = counts.setdefault((labels.get("model_name", ""), labels.get("namespace", "")), [0.0] * steps)
        for time_s, number in matrix_samples(row):
            index = int(math.ceil((time_s - start_s) / step_s - 1e-9)) - 1
            if 0 <= index < steps and math.isfinite(number):
                per_step[index] += max(number, 0.0)
    return counts


def _distribution(
    buckets: tuple[tuple[float, float], ...] | None,
    totals: dict[str, dict[tuple[str, ...], float]],
    name: str,
    labels: tuple[str, str],
) -> PromptDistribution | None:
    """One token histogram with its mean (``_sum / _count``) where both are known; None without a ``+Inf``
    bucket or without an observation (``buckets`` are those :func:`~engine.promql.read_buckets` accepts: bounds
    that are token counts, increasing to ``+Inf``)."""
    if not buckets or not math.isinf(buckets[-1][0]) or buckets[-1][1] <= 0:
        return None
    total, count = totals.get(f"{name}_sum", {}).get(labels), totals.get(f"{name}_count", {}).get(labels)
    mean = total / count if total is not None and count and math.isfinite(total) and count > 0 else None
    return PromptDistribution.from_buckets(buckets, mean)
