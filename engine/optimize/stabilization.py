"""Scale-down stabilization: a window against the load's noise, its state kept in an annotation.

The allocation re-plans every cycle with the load's noise; a replica removed and wanted back within its start-up
is capacity missing for two minutes. :func:`stabilize_scale_down` holds a scale-down until it has been recommended
for a whole window, then follows the highest recommendation of the last window (the HPA's
``scaleDown.stabilizationWindowSeconds``), lets a sustained fall of the rate skip the wait, and removes at most half
the replicas a cycle (the HPA's ``scaleDown.policies``). Its state between cycles is the
:data:`ANNOTATION_SCALE_DOWN_PENDING` annotation on the VariantAutoscaling.

Pure: the caller passes the clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.api.meta import format_time, parse_time

__all__ = [
    "ANNOTATION_SCALE_DOWN_PENDING",
    "DEFAULT_SCALE_DOWN_WINDOW_S",
    "MAX_SCALE_DOWN_SHARE",
    "Stabilized",
    "stabilize_scale_down",
]

DEFAULT_SCALE_DOWN_WINDOW_S = 180.0
"""The scale-down stabilization window of the scheduled optimize deployment (``deployments/prefect.yaml``) and
of the simulated Modelplane policy: a replica's start-up (model load, ~2 min) plus one 60 s cycle, the same
look-back as the start-up-aware load (:mod:`engine.perf.load_peak`).  The flow's own default stays 0 (WVA, which
leaves this to the HPA it actuates through, whose default is 300 s), so a one-off run or a CI preview
decides as WVA does.  Why a window in the loop: the allocation re-plans every minute with the load's
noise, and a replica removed and wanted back within its start-up is capacity missing for two minutes; on
the conversation trace the window cuts Modelplane's replica changes by about a third (docs/benchmarks.md, "The
knobs")."""
MAX_SCALE_DOWN_SHARE = 0.5
"""With a stabilization window, the largest share of a variant's replicas one cycle removes (at least one): a
scale-down that has waited out its window goes in halves, cycle by cycle, so the attainment measured after each
step reaches the loop before the next (the HPA's ``scaleDown.policies`` of ``Percent`` per period; its default is
100 %, which the flow's window of 0 keeps).  Chosen on the attainment benchmark's tuning rows against 25 %, 34 %,
67 %, one replica and no limit (docs/benchmarks.md, "Attainment tracking"), and checked again with the rolling
window against 34 %, 67 % and no limit: none tracked better at no higher cost."""
ANNOTATION_SCALE_DOWN_PENDING = "modelplane.io/scale-down-pending"
"""VariantAutoscaling annotation written by Modelplane: since when a scale-down has been recommended and the replica
counts recommended within the last window that no later one covers, as JSON ``{"since": RFC3339, "recommended":
[[RFC3339, N], ...]}`` (the window's state: each cycle is a fresh process, and the seed's status has no field for
it)."""


@dataclass(frozen=True)
class Stabilized:
    """The outcome of the scale-down stabilization of one variant."""

    desired: int
    note: str
    pending: str | None
    changed: bool


def stabilize_scale_down(
    desired: int,
    current: int,
    annotations: Mapping[str, str],
    window_s: float,
    now: datetime,
    falling: bool = False,
) -> Stabilized:
    """Hold a scale-down to the highest replica count recommended within the last window (HPA's scale-down
    stabilization).

    Scale-ups and holds pass at once and end a pending scale-down. A scale-down first seen now starts the window
    and holds ``current``: the recommendations before it were at least ``current``. Once the window has passed
    since then, the target is the highest recommendation of the last window, as the HPA's rolling window has it:
    a recommendation flapping with the lag of ``rate()`` (2 -> 1 -> 2 -> 1) never removes a replica it needs again
    a cycle later, and a recommendation that keeps falling is followed a window behind, cycle by cycle, without
    waiting a new window at each step. The state (when the scale-down was first recommended, and the
    recommendations within the last window that no later one covers: each above every later one, so one per replica
    count at most, however often the cycle runs) is the :data:`ANNOTATION_SCALE_DOWN_PENDING` annotation; ``changed``
    says when it must be written. With ``falling`` (the model's rate is in a sustained fall,
    :func:`engine.perf.load_trend.sustained_fall`) the scale-down passes at once: the window guards against noise,
    and the fall is not noise. A scale-down that passes removes at most :data:`MAX_SCALE_DOWN_SHARE` of the
    replicas (at least one) this cycle, and the state is kept until the target is reached. ``window_s`` is the
    window that applies to the variant: its ``modelplane.io/scale-down-stabilization-window`` (read with the
    resource, :func:`engine.optimize.spec.parse_variant`), else the cycle's.
    """
    raw_pending = annotations.get(ANNOTATION_SCALE_DOWN_PENDING)
    if desired >= current or window_s <= 0:
        return Stabilized(desired, "", None, raw_pending is not None)
    cutoff = now - timedelta(seconds=window_s)
    since, earlier = _parse_pending(raw_pending, now) or (now, [])
    recommended = [(at, count) for at, count in earlier if at > cutoff and count > desired] + [(now, desired)]
    highest = max(count for _, count in recommended)
    if falling:  # the fall is not noise: the higher counts recommended before it no longer stand
        since, recommended = min(since, cutoff), [(now, desired)]
        target = desired
        note = "; scale-down window skipped: the arrival rate fell beyond its noise in each recent interval"
    elif since > cutoff:
        waited = (now - since).total_seconds()
        note = f"; scale-down to {highest} held by the {window_s:.0f}s stabilization window ({waited:.0f}s so far)"
        return _kept(current, note, since, recommended, raw_pending)
    elif highest >= current:
        note = f"; scale-down held by the {window_s:.0f}s stabilization window: {current} recommended within it"
        return _kept(current, note, since, recommended, raw_pending)
    else:
        target = highest
        note = f"; scale-down stabilized over {window_s:.0f}s"
    lowest = current - max(1, math.floor(current * MAX_SCALE_DOWN_SHARE))
    if target == desired and target >= lowest:
        return Stabilized(target, note, None, raw_pending is not None)
    if target < lowest:
        note = f"{note}; {current} -> {lowest} this cycle, towards {target} (at most half the replicas a cycle)"
    return _kept(max(target, lowest), note, since, recommended, raw_pending)


def _kept(
    replicas: int, note: str, since: datetime, recommended: list[tuple[datetime, int]], raw_pending: str | None
) -> Stabilized:
    """``replicas`` now, with the window's state kept for the next cycle: the scale-down goes on from there."""
    value = json.dumps(
        {"since": format_time(since), "recommended": [[format_time(at), count] for at, count in recommended]},
        separators=(",", ":"),
    )
    return Stabilized(replicas, note, value, value != raw_pending)


def _parse_pending(raw: str | None, now: datetime) -> tuple[datetime, list[tuple[datetime, int]]] | None:
    """The window's state: when the scale-down was first recommended, and the recommendations since (within the
    last window). The earlier form ``{"since", "max"}`` reads as one recommendation of ``max`` at ``since``. A time
    after ``now`` (a clock ahead of ours wrote it, or a hand edit) reads as ``now``: a window never lasts longer
    than its length from this cycle on."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        since = min(parse_time(data["since"]), now)
        if "recommended" in data:
            return since, [(min(parse_time(at), now), int(count)) for at, count in data["recommended"]]
        return since, [(since, int(data["max"]))]
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return None  # unreadable state (not JSON, a field missing, null or out of range): start a new window
