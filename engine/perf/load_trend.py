"""Sustained fall: when a model's arrival rate has fallen in each of the last intervals by more than its noise.

Why: the scale-down stabilization window (:func:`engine.optimize.stabilization.stabilize_scale_down`) holds a
scale-down for a whole window so that a recommendation flapping with the minute-to-minute noise of
``rate()`` never removes a replica the next minute needs.  On a sustained fall (the end of a day's peak)
the window only delays giving capacity back: each step down waits a window, on top of the start-up-aware
recent peak (:mod:`engine.perf.load_peak`), so the allocation trails the fall by several minutes.  A fall is
*sustained* when the rate fell in each of the last :data:`FALL_INTERVALS` intervals by more than
:data:`NOISE_FRACTION` of the median absolute interval-to-interval change over the last
:data:`NOISE_INTERVALS` intervals (the trace's own noise, so flat traffic seldom qualifies); then the
window is skipped for that model's variants.  The recent peak still sizes the load, so a fall that turns
is followed at once.  Chosen on the day-shaped tuning slice against the recorded one (what the rule does is
described in docs/explanation/how-modelplane-decides.md, "scale-down stabilization").

The two inputs are what Prometheus answers (``engine.promql``): the largest of the last changes,
``max_over_time((R - R offset 1m)[2m:1m])``, and the noise, ``quantile_over_time(0.5, abs(R - R offset
1m)[30m:1m])``, with ``R`` the per-model 1-minute request rate; the simulator derives the same from the
rates it exported (:func:`rate_changes`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["FALL_INTERVALS", "NOISE_FRACTION", "NOISE_INTERVALS", "rate_changes", "sustained_fall"]

FALL_INTERVALS = 2
"""How many consecutive intervals the rate must have fallen in."""
NOISE_INTERVALS = 30
"""The look-back of the noise: interval-to-interval changes over the last half hour."""
NOISE_FRACTION = 0.5
"""A fall counts when it exceeds this share of the median absolute change (0.25-0.75 measured alike)."""
MIN_NOISE_CHANGES = 3
"""Fewer changes than this in the look-back say nothing about the noise: no fall is declared."""


def rate_changes(
    rates: Sequence[float], fall_intervals: int = FALL_INTERVALS, noise_intervals: int = NOISE_INTERVALS
) -> tuple[float | None, float | None]:
    """The largest of the last ``fall_intervals`` changes of ``rates`` (one per interval, oldest first) and
    the median absolute change over the last ``noise_intervals``: what the flow's two PromQL subqueries
    return. None where the history is too short."""
    if fall_intervals < 1 or noise_intervals < 1:
        raise ValueError("fall_intervals and noise_intervals must be >= 1")
    tail = rates[-(max(fall_intervals, noise_intervals) + 1) :]  # the only rates either figure reads
    changes = [after - before for before, after in zip(tail, tail[1:], strict=False)]
    largest = max(changes[-fall_intervals:]) if len(changes) >= fall_intervals else None
    recent = changes[-noise_intervals:]
    noise = statistics.median(abs(c) for c in recent) if len(recent) >= MIN_NOISE_CHANGES else None
    return largest, noise


def sustained_fall(largest_change: float | None, noise: float | None, fraction: float = NOISE_FRACTION) -> bool:
    """True when every recent change was a fall larger than ``fraction`` of the noise (both known and finite)."""
    if largest_change is None or noise is None:
        return False
    if not (math.isfinite(largest_change) and math.isfinite(noise)):
        return False
    return largest_change < 0 and largest_change < -fraction * noise
