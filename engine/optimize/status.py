"""What a cycle writes back to a VariantAutoscaling's status, and whether it is worth a write.

Decides the new status (``currentAlloc``, ``desiredOptimizedAlloc``, ``actuation``, the
MetricsAvailable and OptimizationReady conditions; fields of both seed generations) from a
:class:`~engine.optimize.plan.VariantDecision`, and the merge-patch that turns the old status into
it, or none when only the heartbeat timestamp moved recently (no write storm at 1,000 variants).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.api.meta import format_time, parse_time
from engine.optimize.plan import VariantDecision
from engine.status import changed_fields, set_conditions


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
        list(old.get("conditions") or []), (decision.metrics, decision.optimization), now, generation
    )
    return status


def _without_run_time(status: Mapping[str, Any]) -> dict[str, Any]:
    trimmed = dict(status)
    if isinstance(trimmed.get("desiredOptimizedAlloc"), dict):
        trimmed["desiredOptimizedAlloc"] = {
            k: v for k, v in trimmed["desiredOptimizedAlloc"].items() if k != "lastRunTime"
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
        previous = _parse_time((old.get("desiredOptimizedAlloc") or {}).get("lastRunTime"))
        if previous is not None and (now - previous).total_seconds() < heartbeat_s:
            return None
    return changed_fields(old, new)
