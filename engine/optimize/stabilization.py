"""Scale-down stabilization: a window against the load's noise, its state kept in an annotation.

The allocation re-plans every cycle with the load's noise; a replica removed and wanted back within its start-up
is capacity missing for two minutes. :func:`stabilize_scale_down` holds a scale-down until it has been recommended
for a whole window (the HPA's ``scaleDown.stabilizationWindowSeconds``), lets a sustained fall of the rate skip the
wait, and then removes at most half the replicas a cycle (the HPA's ``scaleDown.policies``). Its state between
cycles is the :data:`ANNOTATION_SCALE_DOWN_PENDING` annotation on the VariantAutoscaling.

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
the conversation trace the window halved Modelplane's replica changes (docs/simulate.md)."""
MAX_SCALE_DOWN_SHARE = 0.5
"""With a stabilization window, the largest share of a variant's replicas one cycle removes (at least one): a
scale-down that has waited out its window goes in halves, cycle by cycle, so the attainment measured after each
step reaches the loop before the next (the HPA's ``scaleDown.policies`` of ``Percent`` per period; its default is
100 %, which the flow's window of 0 keeps).  Chosen on the attainment benchmark's tuning rows against 25 %, 34 %,
67 %, one replica and no limit (docs/benchmarks.md, "Attainment tracking")."""
ANNOTATION_SCALE_DOWN_PENDING = "modelplane.io/scale-down-pending"
"""VariantAutoscaling annotation written by Modelplane: since when a scale-down has been recommended and
the highest replica count recommended since, as JSON ``{"since": RFC3339, "max": N}`` (the window's state:
each cycle is a fresh process, and the seed's status has no field for it)."""


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
    """Hold a scale-down until it has been recommended for a whole window (HPA's scale-down stabilization).

    Scale-ups and holds pass at once and end a pending scale-down. A scale-down first seen now starts
    the window and holds ``current``; once the window has passed, the target goes to the highest
    replica count recommended during it, so a recommendation flapping with the lag of ``rate()`` (2 -> 1
    -> 2 -> 1) never removes a replica it needs again a cycle later. The state is the
    :data:`ANNOTATION_SCALE_DOWN_PENDING` annotation; ``changed`` says when it must be written. With
    ``falling`` (the model's rate is in a sustained fall, :func:`engine.perf.load_trend.sustained_fall`) the
    scale-down passes at once: the window guards against noise, and the fall is not noise. A scale-down that
    passes removes at most :data:`MAX_SCALE_DOWN_SHARE` of the replicas (at least one) this cycle; the window's
    state is kept as passed, so the rest follows next cycle (:func:`_in_steps`). ``window_s`` is the window that
    applies to the variant: its ``modelplane.io/scale-down-stabilization-window`` (read with the resource,
    :func:`engine.optimize.spec.parse_variant`), else the cycle's.
    """
    raw_pending = annotations.get(ANNOTATION_SCALE_DOWN_PENDING)
    pending = _parse_pending(raw_pending)
    if desired >= current or window_s <= 0:
        return Stabilized(desired, "", None, raw_pending is not None)
    if falling:
        note = "; scale-down window skipped: the arrival rate fell beyond its noise in each recent interval"
        return _in_steps(desired, current, now - timedelta(seconds=window_s), raw_pending, note)
    if pending is None:
        since, highest = now, desired
    else:
        since, highest = pending[0], max(pending[1], desired)
    waited = (now - since).total_seconds()
    if waited >= window_s:
        return _in_steps(
            min(highest, current), current, since, raw_pending, f"; scale-down stabilized over {window_s:.0f}s"
        )
    value = json.dumps({"since": format_time(since), "max": highest}, separators=(",", ":"))
    note = f"; scale-down to {highest} held by the {window_s:.0f}s stabilization window ({waited:.0f}s so far)"
    return Stabilized(current, note, value, value != raw_pending)


def _in_steps(target: int, current: int, since: datetime, raw_pending: str | None, note: str) -> Stabilized:
    """A scale-down to ``target`` that may pass now: at most :data:`MAX_SCALE_DOWN_SHARE` of ``current`` (at least one
    replica) goes this cycle; when that stops short of ``target``, the window's state is written as passed
    (``since``, the target as its highest count) so that the next cycle goes on without waiting again."""
    lowest = current - max(1, math.floor(current * MAX_SCALE_DOWN_SHARE))
    if target >= lowest:
        return Stabilized(target, note, None, raw_pending is not None)
    value = json.dumps({"since": format_time(since), "max": target}, separators=(",", ":"))
    stepped = f"{note}; {current} -> {lowest} this cycle, towards {target} (at most half the replicas a cycle)"
    return Stabilized(lowest, stepped, value, value != raw_pending)


def _parse_pending(raw: str | None) -> tuple[datetime, int] | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return parse_time(data["since"]), int(data["max"])
    except (ValueError, KeyError, TypeError):
        return None  # unreadable state: start a new window
