"""What a cycle writes back to a VariantAutoscaling's status, and whether it is worth a write.

Decides the new status (``currentAlloc``, ``desiredOptimizedAlloc``, ``actuation``, the
MetricsAvailable and OptimizationReady conditions; fields of both seed generations; Modelplane's ``slo``) from a
:class:`~engine.optimize.plan.VariantDecision`, and the merge-patch that turns the old status into
it, or none when only the heartbeat timestamp (and the SLO's measurement time and small drift) moved recently
(no write storm at 1,000 variants).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.api.meta import format_time, parse_time
from engine.optimize.plan import VariantDecision
from engine.slo.measure import ModelAttainment
from engine.slo.target import format_window
from engine.status import changed_fields, mapping_at, set_conditions


def format_cost(value: float) -> str:
    """A cost as the seed's ``^\\d+(\\.\\d+)?$`` decimal string."""
    return f"{max(value, 0.0):.2f}"


def _parse_time(value: Any) -> datetime | None:
    """A status timestamp, or None when absent or malformed (then the status is simply rewritten)."""
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def variant_status(
    decision: VariantDecision, old: Mapping[str, Any], now: datetime, applied: bool, generation: int | None
) -> dict[str, Any]:
    """The full new status of a VariantAutoscaling after a cycle (fields of both seed generations)."""
    status: dict[str, Any] = {k: v for k, v in old.items()}
    if decision.current is not None and decision.accelerator:
        current: dict[str, Any] = {"accelerator": decision.accelerator, "numReplicas": decision.current}
        if decision.variant_id:
            current = {"variantID": decision.variant_id, **current}
        if decision.max_batch is not None:
            current["maxBatch"] = decision.max_batch
        if decision.variant_cost is not None:
            current["variantCost"] = format_cost(decision.variant_cost)
        status["currentAlloc"] = current
    if decision.desired is not None:
        desired: dict[str, Any] = {"lastRunTime": format_time(now), "numReplicas": decision.desired}
        if decision.variant_id:
            desired["variantID"] = decision.variant_id
        if decision.accelerator and len(decision.accelerator) >= 2:
            desired["accelerator"] = decision.accelerator
        status["desiredOptimizedAlloc"] = desired
    status["actuation"] = {"applied": applied}
    status["conditions"] = set_conditions(
        old.get("conditions"), (decision.metrics, decision.optimization), now, generation
    )
    if decision.slo is not None:
        status["slo"] = slo_status(
            decision.slo,
            mapping_at(old, "slo"),
            now,
            decision.sizing_percentile,
            decision.peak_hold_s,
            decision.loop_message,
            decision.load_factor,
        )
    return status


def slo_status(
    measured: ModelAttainment,
    old: Mapping[str, Any],
    now: datetime,
    sizing_percentile: float | None = None,
    peak_hold_s: float | None = None,
    controller: str | None = None,
    load_factor: float | None = None,
) -> dict[str, Any]:
    """``status.slo``: the target, the attainment over the window (None while unknown, so a merge-patch removes an
    old value), the error budget, the requests counted, when, and the message; the attainment loop's state
    (``sizingPercentile``, ``peakHold``, ``loadFactor`` below 1) and ``controller`` message as it set them this
    cycle, else as they were."""
    window = measured.window
    target = measured.target
    if window.attained is not None:
        message = f"target {target.attainment:g} from {target.source}" + (f"; {window.note}" if window.note else "")
    else:
        message = f"attainment unknown: {window.note}"
    budget = measured.error_budget_remaining
    status: dict[str, Any] = {
        "target": target.attainment,
        "attained": round(window.attained, 4) if window.attained is not None else None,
        "window": target.window,
        "errorBudgetRemaining": round(budget, 4) if budget is not None else None,
        "requests": int(round(window.requests)) if window.requests is not None else None,
        "measuredAt": format_time(now),
        "message": message,
        "sizingPercentile": round(sizing_percentile, 2)
        if sizing_percentile is not None
        else old.get("sizingPercentile"),
        "peakHold": format_window(peak_hold_s) if peak_hold_s is not None else old.get("peakHold"),
        "controller": controller if controller is not None else old.get("controller"),
        "loadFactor": _load_factor(load_factor, sizing_percentile, old),
    }
    return status


def _load_factor(factor: float | None, sizing_percentile: float | None, old: Mapping[str, Any]) -> float | None:
    """``loadFactor`` as the loop set it this cycle (None at 1, the default, so a merge-patch removes an old value),
    else as it was."""
    if sizing_percentile is None:
        return old.get("loadFactor")
    return round(factor, 3) if factor is not None and factor < 1.0 else None


SLO_DRIFT_DIGITS = 3
"""Attainment and error budget changes below this many decimals (0.1 point) alone do not make a status write."""


def _without_run_time(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status without what moves every cycle: ``lastRunTime``, the SLO's ``measuredAt`` and request count, and
    drift of its attainment below a tenth of a point (rewritten with the heartbeat, or with any real change)."""
    trimmed = dict(status)
    if isinstance(trimmed.get("desiredOptimizedAlloc"), dict):
        trimmed["desiredOptimizedAlloc"] = {
            k: v for k, v in trimmed["desiredOptimizedAlloc"].items() if k != "lastRunTime"
        }
    if isinstance(trimmed.get("slo"), dict):
        trimmed["slo"] = {
            k: round(v, SLO_DRIFT_DIGITS) if k in ("attained", "errorBudgetRemaining") else v
            for k, v in trimmed["slo"].items()
            if v is not None and k not in ("measuredAt", "requests")
        }
    return trimmed


def status_patch(
    old: Mapping[str, Any], new: Mapping[str, Any], now: datetime, heartbeat_s: float = 300.0
) -> dict[str, Any] | None:
    """The merge-patch turning ``old`` status into ``new``, or ``None`` when nothing worth writing changed.

    ``lastRunTime`` moves every cycle; writing every object every minute only for that would turn a
    1,000-variant cluster into 1,000 PATCHes per cycle. So a status whose only change is
    ``lastRunTime`` is written at most every ``heartbeat_s`` seconds, which keeps the timestamp an
    honest liveness signal without the write storm.
    """
    if _without_run_time(old) == _without_run_time(new):
        previous = _parse_time(mapping_at(old, "desiredOptimizedAlloc").get("lastRunTime"))
        if previous is not None and (now - previous).total_seconds() < heartbeat_s:
            return None
    return changed_fields(old, new)
