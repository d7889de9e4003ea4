"""Start-up-aware load: size for the highest recent arrival rate, not the last minute's.

Why: a replica added now serves only after its start-up delay (model load, minutes for a large model),
while the 1-minute arrival rate the optimizer reads moves up and down with the traffic's minute-to-minute
noise (a few percent for Poisson counts alone, more for real traffic).  Sized for the last minute, the
marginal replica of a model is removed on a quiet minute and wanted back the next, and every step back
up leaves the load without that capacity for the whole start-up delay.  Sized for the highest 1-minute
rate of the last ``startup delay + interval``, a replica is removed only once the load has stayed lower
for longer than it would take to bring it back; a rise is followed at once (the current minute is part
of the window).  Stateless per cycle: the window is a Prometheus subquery
(``max_over_time(rate(vllm:request_success_total[1m])[W:1m])``), or the simulator's record of the
rates it exported.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["HOLD_WINDOWS_S", "held_peak", "lowest_rate", "peak_window_s", "planning_rate", "recent_peak"]

HOLD_WINDOWS_S = (180.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)
"""The look-backs over which the highest 1-minute rate is read besides the start-up window, for the attainment
loop's peak hold (:mod:`engine.slo.controller`): one ``max_over_time`` subquery each, so the hold can reach an
hour without reading the rate's whole history."""


def peak_window_s(startup_delay_s: float, interval_s: float) -> float:
    """The look-back of the peak: a replica's start-up delay plus one control interval."""
    if startup_delay_s < 0 or not interval_s > 0:
        raise ValueError("startup delay must be >= 0 and the interval > 0")
    return startup_delay_s + interval_s


def recent_peak(rates: Sequence[float], interval_s: float, window_s: float) -> float | None:
    """The highest of the newest rates (one per interval, oldest first) covering ``window_s``; None when empty."""
    newest = _covering(rates, interval_s, window_s)
    return max(newest) if newest else None


def lowest_rate(rates: Sequence[float], interval_s: float, window_s: float) -> float | None:
    """The lowest of the newest rates covering ``window_s`` (what ``min_over_time`` of the rate returns); None when
    empty. 0 says the model went a whole interval without a request there."""
    newest = _covering(rates, interval_s, window_s)
    return min(newest) if newest else None


def _covering(rates: Sequence[float], interval_s: float, window_s: float) -> Sequence[float]:
    """The newest of ``rates`` (one per interval, oldest first) that cover ``window_s``: at least one, if any."""
    return rates[-max(int(math.ceil(window_s / interval_s - 1e-9)), 1) :]


def planning_rate(current_rps: float, peak_rps: float | None, burst_rps: float | None = None) -> float:
    """The arrival rate a cycle sizes for: the recent peak when known, the burst rate when known and higher
    (:mod:`engine.perf.load_burst`), never below the current rate."""
    known = [r for r in (peak_rps, burst_rps) if r is not None and math.isfinite(r)]
    return max([current_rps, *known])


def held_peak(peaks: dict[float, float] | None, hold_s: float) -> float | None:
    """The highest rate over at least ``hold_s``: the peak of the shortest look-back that covers it (the longest
    when none does); None without peaks."""
    if not peaks:
        return None
    covering = [window for window in peaks if window >= hold_s - 1e-9]
    return peaks[min(covering)] if covering else peaks[max(peaks)]
