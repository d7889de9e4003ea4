"""A scale-down hold sized from the traffic's own variability, instead of a fixed window.

Why: capacity given back now is back only after a replica's start-up delay plus a cycle, so a replica
may go once the load it must carry over that horizon fits the smaller allocation.  A fixed hold (the
scheduled deployment's 180 s window on top of the highest rate of the last 3 minutes) keeps every peak
for about six minutes whatever the traffic does: on a steady trace that is paid capacity nobody uses,
on a bursty one it may still be too short.  Here the rate to hold for is an upper quantile of what the
load did over the same horizon in its own recent history:

    peak_i = max(r[i-h+1 .. i])                 (the recent peak the fixed rule sizes for)
    rise_i = max(r[i+1 .. i+h]) / peak_i        for every interval i with h intervals on both sides
    hold   = max(peak_now x quantile_q(rise), r[now])

``h`` intervals cover the start-up delay plus one cycle (:func:`engine.perf.load_peak.peak_window_s`).  A
rise above 1 is a ramp the next start-up would miss; the quantile says how much of the history's ramps
the capacity kept covers, and a quantile below 1 gives back what the history says the recent peak
overstates.  With fewer than ``min_samples`` rises the history says too little, and the caller's fixed
rule (the recent peak) stands.  The ratio makes the rule independent of the rate's scale (the same
traffic at twice the rate holds twice the rate); Poisson noise, relatively smaller at higher rates, is
part of what the history measures.

Measured on the conversation trace (the benchmark's tuning slice): it does not beat the fixed rule, so
the simulator offers it as a knob (``Scenario.hold_quantile``) and the shipped policy keeps the window.

Pure: the caller passes the history of per-interval rates (oldest first).  No I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["DEFAULT_HOLD_QUANTILE", "MIN_RISE_SAMPLES", "hold_rate"]

DEFAULT_HOLD_QUANTILE = 0.9
"""The share of the history's horizon rises the held rate covers."""

MIN_RISE_SAMPLES = 5
"""Fewer rises than this and :func:`hold_rate` declines (the caller keeps its fixed rule)."""


def hold_rate(
    rates: Sequence[float],
    horizon_intervals: int,
    quantile: float = DEFAULT_HOLD_QUANTILE,
    history_intervals: int | None = None,
    min_samples: int = MIN_RISE_SAMPLES,
) -> float | None:
    """The rate to provision for now: the recent peak times the ``quantile`` of the history's horizon rises.

    ``rates`` are per-interval arrival rates, oldest first; only the newest ``history_intervals`` (all
    when None) are read.  Intervals with no arrivals give no ratio.  None when fewer than ``min_samples``
    rises are known or the newest rate is unknown; never below the newest rate (a quantile of falls
    would shrink capacity below the load already there).  ``horizon_intervals`` is both the recent
    peak's look-back and the look-ahead of a rise.
    """
    if horizon_intervals < 1:
        raise ValueError(f"horizon must be at least one interval, got {horizon_intervals}")
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile!r}")
    window = np.asarray(rates if history_intervals is None else rates[-history_intervals:], dtype=float)
    if window.size == 0 or not math.isfinite(float(window[-1])):
        return None
    rises = _horizon_rises(window, horizon_intervals)
    if rises.size < min_samples:
        return None
    peak = float(np.max(window[-horizon_intervals:]))
    return max(peak * float(np.quantile(rises, quantile)), float(window[-1]))


def _horizon_rises(rates: np.ndarray, horizon: int) -> np.ndarray:
    """``max(r[i+1..i+h]) / max(r[i-h+1..i])`` for every ``i`` with ``h`` intervals on both sides and a positive base."""
    count = rates.size - 2 * horizon + 1
    if count <= 0:
        return np.zeros(0)
    behind = np.max(np.stack([rates[k : k + count] for k in range(horizon)]), axis=0)
    ahead = np.max(np.stack([rates[horizon + k : horizon + k + count] for k in range(horizon)]), axis=0)
    positive = behind > 0
    return np.asarray(ahead[positive] / behind[positive], dtype=float)
