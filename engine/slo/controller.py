"""The attainment loop: a per-model correction of the sizing percentile so that measured SLO attainment meets its target.

Why: model-based sizing (:mod:`engine.optimize.model_based`, :mod:`engine.perf.tail_sizing`) answers "how many
replicas keep this share of requests inside the TTFT target at this rate", under the queueing model's assumptions
(Poisson arrivals at the recent rate, the profile's laws, capacity there when asked for).  Real traffic breaks them
in ways the model cannot see -- bursts inside a minute, silences then a crowd, a ramp that outruns a start-up -- so
one sizing percentile attains 90 % on one trace and 57 % on another.  An operator states an attainment over a
window; this loop reads what was attained (:mod:`engine.slo.measure`, from vLLM's latency histograms) and moves
one number, the TTFT percentile the model sizes for, until the measurement meets the target.  The model stays the
feed-forward part (it follows the load at once); the loop corrects its bias slowly.

Why the percentile and not a multiplier on the rate: tail sizing spends capacity where the misses are (the long
prompts at the queue's busy moments).  On the conversation traces the same attainment cost 10-25 % less when
reached by raising the percentile than by multiplying the sized rate (measured when the loop was chosen).

The law (an integral controller in velocity form, on the percentile's log-odds, so a step near 99 % is small)::

    setpoint   = target + budget_weight * (target - window_attained)    clipped to [target - surplus_band,
                                                                                    target + setpoint_band]
    error      = setpoint - recent_attained                             (recent: the last few intervals)
    logit(p')  = logit(p) + gain * error * confidence(requests)
    p'         = clamp(p', min_percentile, max_percentile)

    split range, below the percentile's floor (p = min_percentile and a surplus, or a load factor f < 1):
    log(f')    = log(f) + factor_gain * error * confidence(requests)
    f'         = clamp(f', min_load_factor, 1)                            the model is sized for f x its held peak

* the *setpoint* pays back an error budget already spent in the evaluation window (or spends a surplus), so the
  window's attainment, not only the last minutes', converges on the target; a surplus is spent within a narrower
  band than a deficit is paid back in, because the minutes that over-deliver are the easy ones and the window's
  misses are still to come (a burst);
* ``confidence = requests / (requests + half_confidence)`` weighs a measurement by its size;
* the *load factor* is the range below the floor: at p = min_percentile the plan sizes the mean request (WVA's
  sizing at the recent peak, which tail sizing never undercuts), and on steady traffic that still attains several
  points above an 80 % target; the factor lets the loop give that surplus back, and comes back to 1 before the
  percentile rises again;
* anti-windup: the percentile and the factor are clamped; the loop does not push upwards while
  replicas it already asked for are still starting (their effect is not measured yet: the dead time of a
  start-up), nor while the allocation could not grow (inventory, ``max-replicas``), nor downwards while every
  variant of the model is at its minimum;
* it never acts on a missing measurement: the percentile holds and the message says why.

Pure and deterministic: the caller passes the measurement and the previous percentile (kept in the resource's
status between cycles).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

__all__ = [
    "DEFAULT_SETTINGS",
    "AttainmentSample",
    "ControllerSettings",
    "ControllerStep",
    "feed_forward_percentile",
    "step",
]


@dataclass(frozen=True)
class ControllerSettings:
    """The loop's constants. The defaults were chosen on the tuning traces only (docs/benchmarks.md)."""

    gain: float = 1.0
    """Change of the percentile's log-odds per unit of attainment error, weighted by confidence."""
    budget_weight: float = 1.0
    """How strongly the evaluation window's deficit (or surplus) moves the setpoint."""
    setpoint_band: float = 0.05
    """The setpoint stays within the target + this: a window far short of its target is not paid back at any cost."""
    surplus_band: float = 0.02
    """The setpoint stays within the target - this: a surplus is spent more cautiously than a deficit is paid back."""
    min_percentile: float = 50.0
    max_percentile: float = 99.5
    half_confidence: float = 50.0
    """Requests in the recent range at which a measurement counts half."""
    hold_gain: float = 10.0
    """Change of the hold's log-length per unit of attainment error (see :func:`step`)."""
    hold_release_s: float = 60.0
    """On intermittent traffic, the most a surplus shortens the hold by in one cycle (one control interval at the
    60 s default): a hold that grew to span the lulls between bursts is given back over as long as those lulls, not
    in the few quiet cycles inside one (shortened at the hold's gain, a 30-minute hold was back at 3 minutes six
    cycles after a burst, and the next burst found its capacity gone). Traffic known to have had no silent minute
    has no lull for the hold to span, and gives a surplus's hold back at the hold's gain."""
    ceiling_margin: float = 0.01
    """The setpoint stays this far below the model's attainment ceiling (the share of requests whose prompt any
    of its variants can prefill within the TTFT target at all): a target above it is out of reach at any cost, and
    the ceiling itself is an idle replica's, approached only with unbounded capacity."""
    min_load_factor: float = 0.5
    """The lowest share of its held peak load a model is sized for (see :func:`step`, the load factor)."""
    factor_gain: float = 0.3
    """Change of the load factor's logarithm per unit of attainment error, weighted by confidence (slower than the
    percentile's: whole replicas make the factor's effect arrive in steps, and a faster gain undershot the target
    on the tuning traces)."""
    feed_forward_offset: float = 2.0
    """A model without a loop state starts at ``100 x target / ceiling - offset`` (:func:`feed_forward_percentile`):
    the tail-sized plan's own margins (whole replicas, the recent-peak hold) attain a few points above the
    percentile on steady traffic."""

    def __post_init__(self) -> None:
        if not 0.0 < self.min_percentile <= self.max_percentile < 100.0:
            raise ValueError("percentile bounds must satisfy 0 < min <= max < 100")
        if min(self.gain, self.budget_weight, self.setpoint_band, self.surplus_band) < 0:
            raise ValueError("gain, weight and bands must be >= 0")
        if min(self.half_confidence, self.hold_release_s) < 0:
            raise ValueError("confidence and hold release must be >= 0")
        if not 0.0 < self.min_load_factor <= 1.0 or self.factor_gain < 0:
            raise ValueError("the lowest load factor must be in (0, 1] and its gain >= 0")


DEFAULT_SETTINGS = ControllerSettings()


@dataclass(frozen=True)
class AttainmentSample:
    """What was measured for one model this cycle (None: unknown)."""

    recent: float | None
    """Share of requests within both targets over the recent range."""
    recent_requests: float
    window: float | None = None
    """Share within both targets over the evaluation window so far."""
    window_requests: float = 0.0


@dataclass(frozen=True)
class ControllerStep:
    """The percentile to size with next, how long to hold a peak's capacity, whether either moved, and what the
    loop did in words."""

    percentile: float
    changed: bool
    action: str
    """What the loop did, in words (``sizing percentile raised p80.0 -> p82.1``)."""
    evidence: str
    """Why: what was measured and against what, or why nothing could be."""
    hold_s: float | None = None
    """How far back the recent peak the model is sized for reaches (None: the plan's start-up window)."""
    load_factor: float = 1.0
    """The share of its held peak load the model is sized for: below 1 only once the percentile is at its floor
    and the model still attains more than its target."""
    previous: float | None = None
    """The percentile the step started from (last cycle's, or the feed-forward start)."""

    @property
    def message(self) -> str:
        """The sentence for the model's condition: what the loop did, and why."""
        return f"{self.action}: {self.evidence}"


def feed_forward_percentile(
    target: float, settings: ControllerSettings = DEFAULT_SETTINGS, ceiling: float | None = None
) -> float:
    """Where a model's loop starts: the target's share of the requests the model can serve within its targets at
    all, less the plan's usual margin, within the bounds.

    Why the share: the percentile is of the *achievable* requests (tail sizing leaves out the prompts no replica
    prefills within the TTFT target, :mod:`engine.perf.tail_sizing`). A model whose ceiling is 86 % attains 80 %
    of all its requests only when 93 % of the achievable ones are served in time, so a start at p78 begins the
    loop 15 points low, and a window that starts short is rarely paid back. Without a ceiling (no prompt histogram
    yet) the target itself is the share.

    Args:
        target: The model's attainment target (0-1).
        settings: The loop's constants (the offset and the bounds).
        ceiling: The share of the model's requests its fastest variant can serve within the TTFT target at all
            (0-1), or None when unknown (a ceiling that is not a positive finite share counts as unknown).

    Returns:
        The starting percentile.
    """
    share = target
    if ceiling is not None and math.isfinite(ceiling) and ceiling > 0.0:
        share = min(target / ceiling, settings.max_percentile / 100.0)
    return _clamp(100.0 * share - settings.feed_forward_offset, settings)


def step(
    percentile: float | None,
    target: float,
    sample: AttainmentSample | None,
    settings: ControllerSettings = DEFAULT_SETTINGS,
    *,
    hold_s: float | None = None,
    hold_range_s: tuple[float, float] | None = None,
    ceiling: float | None = None,
    pending: bool = False,
    given_back: bool = False,
    capped_up: bool = False,
    at_minimum: bool = False,
    load_factor: float | None = None,
    intermittent: bool | None = None,
    hold_binds: bool = True,
) -> ControllerStep:
    """One cycle of the loop for one model.

    Two actuators, each for the error it can correct:

    * a shortfall measured while replicas the plan asked for were still starting, after the load was higher
      earlier in the window (``given_back``: a burst after a lull), is capacity that was given back and came back
      too late: the loop holds each peak's capacity for longer (``hold_s``, up to the evaluation window: static
      peak, in the limit). A shortfall while a cold start or a ramp to a new high catches up is not lengthened
      for: no hold would have kept capacity that was never there;
    * a shortfall with the capacity in place is the sizing's: the load factor comes back to 1 first, then the
      percentile rises;
    * a surplus first shortens the hold back towards the start-up window (on intermittent traffic by at most
      ``hold_release_s`` a cycle), then lowers the percentile, and once the percentile is at its floor lowers the
      load factor, the share of the held peak load the model is sized for (split range: on steady traffic the
      floor's sizing, WVA's mean request at the recent peak, still attains several points above an 80 % target,
      and whole replicas bought for that surplus are the cost). A hold that reaches back to no higher peak than
      the start-up window's (``hold_binds`` False) keeps nothing the plan would not keep anyway, so the surplus
      shortens it and moves the sizing in the same cycle: given back a minute a cycle, a 40-minute hold would
      otherwise leave an over-sized model as it is for half an hour while nothing changes;
    * on intermittent traffic (a minute without requests within the longest look-back), a hold at its shortest
      starts again from the longest: capacity given back in a silence comes back a start-up after the next burst
      began, most of a burst late, so the loop keeps the window's peak until a measured surplus shortens it.
      Chosen on the bursty tuning traces (docs/benchmarks.md, "Attainment tracking"); steady and day-shaped
      traffic has no silent minute and is not affected.

    Args:
        percentile: the percentile the model was sized for last cycle (None or invalid: the feed-forward start).
        target: the attainment target, a fraction in (0, 1).
        sample: the measured attainment (None: not measured this cycle).
        hold_s: how far back the recent peak reached last cycle (None: the shortest of ``hold_range_s``).
        hold_range_s: (shortest, longest) hold; None: the loop does not move the hold.
        ceiling: the share of the model's requests that can meet the SLO at all (None: unknown).
        pending: replicas asked for are still starting.
        given_back: the load was higher earlier in the window than over the current hold, so capacity the
            model needs again was given back (a lull between bursts), and a longer hold would have kept it.
        capped_up: the allocation could not give the model what it asked for (inventory, ``max-replicas``).
        at_minimum: every variant of the model sits at its ``min-replicas``.
        load_factor: the share of its held peak load the model was sized for last cycle (None or invalid: 1).
        intermittent: the model's traffic had a minute without requests within the longest hold look-back (None:
            not known, e.g. the lowest rate was not read: the hold is not restarted, and a surplus gives it back no
            faster than on intermittent traffic).
        hold_binds: the peak the hold reaches back to is above the start-up window's, so the hold keeps capacity
            the plan would otherwise give back (the default: when not known, the hold is taken to bind).

    Returns:
        the next percentile and hold, and a message for the model's condition.
    """
    restarted_at = _restarted_hold(hold_s, hold_range_s, intermittent)
    start = _start(percentile, target, settings)
    moved = _step(
        start,
        target,
        sample,
        settings,
        hold_s if restarted_at is None else restarted_at,
        hold_range_s,
        ceiling,
        pending,
        given_back,
        capped_up,
        at_minimum,
        load_factor,
        intermittent,
        hold_binds,
    )
    moved = dataclasses.replace(moved, previous=start)
    if restarted_at is None:
        return moved
    restarted = (
        f"; peak hold restarted at {_duration(restarted_at)}: a minute without requests in the last "
        f"{_duration(restarted_at)} (intermittent traffic)"
    )
    return dataclasses.replace(moved, changed=True, evidence=moved.evidence + restarted)


def _restarted_hold(
    hold_s: float | None, hold_range_s: tuple[float, float] | None, intermittent: bool | None
) -> float | None:
    """The longest hold, when intermittent traffic finds the hold at its shortest (it starts again from there);
    None otherwise."""
    if intermittent is not True or hold_range_s is None or hold_range_s[0] >= hold_range_s[1]:
        return None
    shortest, longest = hold_range_s
    return longest if _hold(hold_s, hold_range_s) == shortest else None


def _start(percentile: float | None, target: float, settings: ControllerSettings) -> float:
    """The percentile a step starts from: last cycle's within the bounds, or the feed-forward start when there is
    none (or it is not a percentile)."""
    if percentile is not None and math.isfinite(percentile) and 0.0 < percentile < 100.0:
        return _clamp(percentile, settings)
    return feed_forward_percentile(target, settings)


def _step(
    previous: float,
    target: float,
    sample: AttainmentSample | None,
    settings: ControllerSettings,
    hold_s: float | None,
    hold_range_s: tuple[float, float] | None,
    ceiling: float | None,
    pending: bool,
    given_back: bool,
    capped_up: bool,
    at_minimum: bool,
    load_factor: float | None,
    intermittent: bool | None,
    hold_binds: bool,
) -> ControllerStep:
    """:func:`step` from the percentile (:func:`_start`) and the hold it starts at (the other arguments as there)."""
    hold = _hold(hold_s, hold_range_s)
    factor = _factor(load_factor, settings)
    held = f"sizing percentile held at p{previous:.1f}{_held_for(hold)}{_factor_note(factor)}"

    def unchanged(why: str) -> ControllerStep:
        return ControllerStep(previous, False, held, why, hold, factor)

    if sample is None or sample.recent is None or not math.isfinite(sample.recent) or sample.recent_requests <= 0:
        why = (
            "no requests in the recent range" if sample is not None and sample.recent_requests <= 0 else "not measured"
        )
        # Nothing learnt: a hold the loop has not chosen yet stays unchosen (the plan's start-up window).
        kept = hold if hold_s is not None else None
        return ControllerStep(previous, False, held, f"attainment {why}", kept, factor)
    setpoint = _setpoint(target, sample, settings)
    reachable = ""
    if ceiling is not None and math.isfinite(ceiling) and setpoint > ceiling - settings.ceiling_margin:
        setpoint = max(ceiling - settings.ceiling_margin, 0.0)
        reachable = f", capped below the ceiling {_pct(ceiling)}: longer prompts cannot meet the TTFT target"
    error = setpoint - sample.recent
    confidence = sample.recent_requests / (sample.recent_requests + settings.half_confidence)
    measured = f"attained {_pct(sample.recent)} over the recent range ({sample.recent_requests:.0f} requests)"
    against = (
        f"against a setpoint of {_pct(setpoint)} (target {_pct(target)}"
        + (f", window {_pct(sample.window)}" if sample.window is not None else "")
        + f"{reachable})"
    )
    why = f"{measured} {against}"
    if error > 0 and capped_up:
        return unchanged(f"{measured}, below {_pct(setpoint)}, and the allocation cannot grow")
    if error > 0 and pending:
        if hold is None or hold_range_s is None or hold >= hold_range_s[1] or not given_back:
            return unchanged(f"{measured}, below {_pct(setpoint)}, while replicas start")
        longer = min(hold * math.exp(settings.hold_gain * error * confidence), hold_range_s[1])
        return ControllerStep(
            previous,
            True,
            f"peak hold lengthened {_duration(hold)} -> {_duration(longer)}",
            f"{measured} while replicas started, {against}",
            longer,
            factor,
        )
    if error < 0 and at_minimum:
        return unchanged(f"{measured}, above {_pct(setpoint)}, every variant at its minimum")
    if error < 0 and hold is not None and hold_range_s is not None and hold > hold_range_s[0]:
        release = math.inf if intermittent is False else settings.hold_release_s
        shorter = max(hold * math.exp(settings.hold_gain * error * confidence), hold - release, hold_range_s[0])
        shortened = f"peak hold shortened {_duration(hold)} -> {_duration(shorter)}"
        if hold_binds:
            return ControllerStep(previous, True, shortened, why, shorter, factor)
        # The hold reaches back to no higher load than the start-up window: shortening it gives nothing back, so
        # the surplus also goes to the sizing, in the same cycle.
        sized = _sizing_step(previous, error * confidence, factor, shorter, settings, why)
        unbound = f"{shortened} (it holds no more load than the start-up window's peak)"
        return dataclasses.replace(sized, changed=True, action=f"{unbound}; {sized.action}")
    return _sizing_step(previous, error * confidence, factor, hold, settings, why)


def _sizing_step(
    previous: float, weighted_error: float, factor: float, hold: float | None, settings: ControllerSettings, why: str
) -> ControllerStep:
    """The sizing's move for an error (weighted by its confidence): the load factor while it is below 1 and the
    model is short, or while the percentile is at its floor and the model has a surplus; else the percentile."""
    if (weighted_error > 0 and factor < 1.0) or (weighted_error < 0 and previous <= settings.min_percentile):
        moved = min(max(factor * math.exp(settings.factor_gain * weighted_error), settings.min_load_factor), 1.0)
        action = _move("load factor", factor, moved, (settings.min_load_factor, 1.0), "{:.2f}")
        return ControllerStep(previous, abs(moved - factor) > 1e-9, f"{action} at p{previous:.1f}", why, hold, moved)
    logit = math.log(previous / (100.0 - previous)) + settings.gain * weighted_error
    new = _clamp(100.0 / (1.0 + math.exp(-logit)), settings)
    action = _move("sizing percentile", previous, new, (settings.min_percentile, settings.max_percentile), "p{:.1f}")
    return ControllerStep(new, abs(new - previous) > 1e-9, action, why, hold, factor)


def _move(knob: str, old: float, new: float, bounds: tuple[float, float], shown: str) -> str:
    """What the loop did to one knob, e.g. ``sizing percentile lowered p80.0 -> p78.1 (at its bound)``."""
    direction = "raised" if new > old else "lowered" if new < old else "held"
    bound = " (at its bound)" if new in bounds else ""
    return f"{knob} {direction} {shown.format(old)} -> {shown.format(new)}{bound}"


def _hold(hold_s: float | None, hold_range_s: tuple[float, float] | None) -> float | None:
    """The hold to start from: the last one within the range, else the shortest (the plan's start-up window)."""
    if hold_range_s is None:
        return None
    shortest, longest = hold_range_s
    if hold_s is None or not math.isfinite(hold_s):
        return shortest
    return min(max(hold_s, shortest), longest)


def _factor(load_factor: float | None, settings: ControllerSettings) -> float:
    """The load factor to start from: the last one within its range, else 1 (the held peak load itself)."""
    if load_factor is None or not math.isfinite(load_factor):
        return 1.0
    return min(max(load_factor, settings.min_load_factor), 1.0)


def _factor_note(factor: float) -> str:
    return "" if factor >= 1.0 else f", load factor {factor:.2f}"


def _held_for(hold: float | None) -> str:
    return "" if hold is None else f", peak hold {_duration(hold)}"


def _duration(seconds: float) -> str:
    return f"{seconds / 60.0:.0f}m" if seconds >= 120 else f"{seconds:.0f}s"


def _setpoint(target: float, sample: AttainmentSample, settings: ControllerSettings) -> float:
    """The target, moved to pay back the evaluation window's deficit (or spend its surplus), within the bands."""
    if sample.window is None or not math.isfinite(sample.window) or sample.window_requests <= 0:
        return target
    shifted = target + settings.budget_weight * (target - sample.window)
    return min(max(shifted, target - settings.surplus_band), min(target + settings.setpoint_band, 0.999))


def _clamp(value: float, settings: ControllerSettings) -> float:
    return min(max(value, settings.min_percentile), settings.max_percentile)


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value * 100:.1f} %"
