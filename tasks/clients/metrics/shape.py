"""What the load query's shape rows make of each model's load: the recent peak rate, the burst rate, the rate's
recent change and noise, the peak per hold look-back, the lowest rate and the prompt histogram.

Why apart from the client (:mod:`tasks.clients.metrics.prometheus`): the client sends the queries and decides
whether a model's load is there at all (samples, their age, the token means); these rows only refine a load that
is, and each is optional (a model without one is sized without what it says). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from engine.perf.load_burst import burst_rate
from engine.perf.load_peak import HOLD_WINDOWS_S
from engine.promql import HOLD_TAGS
from tasks.clients.metrics.snapshot import ModelKey, ModelLoad

__all__ = ["with_shape"]


def with_shape(
    loads: dict[ModelKey, ModelLoad],
    rows: Mapping[str, Mapping[tuple[str, ...], float]],
    buckets: Mapping[tuple[str, str], tuple[tuple[float, float], ...]],
    burst_bins: tuple[float, int],
) -> dict[ModelKey, ModelLoad]:
    """The loads with what the shape rows say of each, where Prometheus has it.

    Args:
        loads: Each model's load as the client assembled it (rate and token means).
        rows: The load query's answer by tag (:func:`engine.promql.tagged_rows`), keyed by (model, namespace).
        buckets: Each model's prompt-length histogram, ``(le, requests)``.
        burst_bins: The burst window in seconds, and how many of them end to end make the peak window.

    Returns:
        The loads with their recent peak rate, burst rate, the rate's recent change and noise, the peak per hold
        look-back, the lowest rate and the prompt histogram (each None where Prometheus has none).
    """
    shaped: dict[ModelKey, ModelLoad] = {}
    for key, load in loads.items():
        label_key = (key.model_id, key.namespace)
        histogram = buckets.get(label_key)
        peak, peaks = _finite(rows["peak"].get(label_key)), _peaks(rows, label_key)
        change, noise = _trend(
            _finite(rows["change"].get(label_key)),
            _finite(rows["noise"].get(label_key)),
            max([load.arrival_rate_rps, peak or 0.0, *(peaks or {}).values()]),
        )
        shaped[key] = dataclasses.replace(
            load,
            recent_peak_rps=peak,
            burst_rps=_burst(rows["burst"].get(label_key), *burst_bins),
            recent_change_rps=change,
            change_noise_rps=noise,
            peaks_rps=peaks,
            lowest_rps=_finite(rows["lowest"].get(label_key)),
            prompt_buckets=histogram if histogram and histogram[-1][1] > 0 else None,
        )
    return shaped


def _trend(change: float | None, noise: float | None, highest_rps: float) -> tuple[float | None, float | None]:
    """The rate's recent change and its noise, or neither when they cannot be: a noise is a median of absolute
    changes (never below 0), and a one-minute change of the rate is never larger than the highest rate the model
    had (a fall of 1e300 req/s at 2 req/s). A sustained fall lets a scale-down skip its stabilization window
    (:func:`engine.perf.load_trend.sustained_fall`), so a trend that cannot be is no trend at all."""
    if change is None or noise is None:
        return change, noise
    if noise < 0 or abs(change) > highest_rps * (1 + TREND_SLACK) + TREND_SLACK:
        return None, None
    return change, noise


TREND_SLACK = 0.01
"""Rounding room when a change is compared with the highest rate (Prometheus evaluates them at slightly different
instants): 1 % and 0.01 req/s."""


def _burst(count: float | None, window_s: float, bins: int) -> float | None:
    """The Poisson rate that explains the highest count in one burst window (:func:`burst_rate`); None when
    Prometheus has no count (or one that is not a finite count)."""
    value = _finite(count)
    return None if value is None or value < 0 else burst_rate(value, window_s, bins)


def _peaks(
    rows: Mapping[str, Mapping[tuple[str, ...], float]], label_key: tuple[str, str]
) -> dict[float, float] | None:
    """The peak rate per look-back that Prometheus has (None when it has none)."""
    peaks = {
        window: value
        for window, tag in zip(HOLD_WINDOWS_S, HOLD_TAGS)
        if (value := _finite(rows.get(tag, {}).get(label_key))) is not None
    }
    return peaks or None


def _finite(value: float | None) -> float | None:
    """The value when it is a finite number, else None (absent series, NaN of an empty window)."""
    return value if value is not None and math.isfinite(value) else None
