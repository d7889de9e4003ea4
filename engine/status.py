"""Status write-back helpers shared by every kind the flows report on: conditions and status diffs.

Flows read and write status as plain dicts in API JSON shape; these helpers keep unchanged
conditions byte-for-byte as they were read, so comparing old and new status tells whether a write
is needed at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

from pydantic import BaseModel

from engine.api.identity import is_integer
from engine.api.meta import Condition, ConditionStatus, condition_message, set_condition

# OptimizationReady=False reasons shared by VariantAutoscalings and AutoscalingPolicyBindings (the seed's
# own reasons and MetricsAvailable/MetricsUnavailable live in engine.perf.saturation).
REASON_INVALID = "InvalidConfiguration"
REASON_TARGET_MISSING = "TargetNotFound"


_CONDITION_STATUSES: dict[str, ConditionStatus] = {"True": "True", "False": "False", "Unknown": "Unknown"}
"""A condition's ``status`` as written (``ConditionUpdate.status``) -> the API's enum value."""


def _condition_status(value: str) -> ConditionStatus:
    """``value`` as the API's condition status; ``ValueError`` for any other string (as the API model raises)."""
    found = _CONDITION_STATUSES.get(value)
    if found is None:
        raise ValueError(f"condition status {value!r} is not one of True, False, Unknown")
    return found


def mapping_at(obj: object, key: str) -> dict[str, Any]:
    """``obj[key]`` when ``obj`` and it are mappings, else an empty dict: a part written by hand as no mapping
    (``status: 5``, ``status: {slo: text}``) reads as absent, so the next write replaces it instead of failing."""
    if not isinstance(obj, Mapping):
        return {}
    value = obj.get(key)
    if isinstance(value, dict):
        return value
    return dict(value) if isinstance(value, Mapping) else {}


def status_as_read(model: BaseModel) -> dict[str, Any]:
    """A parsed object's status in API JSON shape: what of the status as written parsed
    (:func:`engine.api.validate.with_status` left out the rest), so the engine decides from checked state only."""
    status = getattr(model, "status", None)
    return status.model_dump(by_alias=True, exclude_none=True, mode="json") if isinstance(status, BaseModel) else {}


def condition_is_true(obj: Mapping[str, Any], condition_type: str) -> bool:
    """Whether ``obj``'s status holds a ``condition_type`` condition whose status is ``True`` (a Pod's ``Ready``, a
    Deployment's ``Available``: the verdict of the controller that owns it); a status, a condition list or an entry
    that is malformed holds none."""
    conditions = mapping_at(obj, "status").get("conditions")
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") == condition_type and c.get("status") == "True" for c in conditions
    )


def _whole(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a whole number >= 0 (a count or a generation; a bool is none)."""
    return is_integer(value) and value >= 0


def count_at(obj: Mapping[str, Any], key: str) -> int:
    """The whole count ``obj[key]`` (a status's ``replicas``), or 0 when it is absent or no whole number >= 0."""
    value = obj.get(key)
    return value if _whole(value) else 0


def generation_of(obj: object) -> int | None:
    """``obj``'s ``metadata.generation`` when it is a whole number >= 0 (the API server's), else None: what a status
    records as ``observedGeneration``; a hand-written ``generation: abc`` or ``-3`` is no generation to record."""
    value = mapping_at(obj, "metadata").get("generation")
    return value if _whole(value) else None


@dataclass(frozen=True)
class ConditionUpdate:
    """A condition to set on a resource; its message as it is written (:func:`engine.api.meta.condition_message`),
    so an update compares equal to the condition it wrote."""

    type: str
    status: str
    reason: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", condition_message(self.message))


def set_conditions(
    conditions: Sequence[Condition | dict[str, Any]] | object,
    updates: Iterable[ConditionUpdate],
    now: datetime,
    observed_generation: int | None,
) -> list[dict[str, Any]]:
    """Apply ``updates`` with :func:`engine.api.meta.set_condition` (``lastTransitionTime`` moves only
    when a status changes) and return the conditions as dicts in API JSON shape. ``conditions`` are the
    previous ones, typed (a parsed status) or as written; what is not a condition there (``conditions: 5``,
    an entry without a ``type``, one the API model refuses such as ``status: Maybe``, a second of one type)
    is dropped (:func:`previous_conditions`), so a hand-written status is replaced, never a crash."""
    current = previous_conditions(conditions)
    for update in updates:
        current = [
            *set_condition(
                current,
                update.type,
                _condition_status(update.status),
                update.reason,
                update.message,
                now,
                observed_generation=observed_generation,
            )
        ]
    return [_as_json(c) for c in current]


def previous_conditions(conditions: object) -> list[Condition | dict[str, Any]]:
    """The conditions of ``conditions`` as read that are conditions: typed ones and dicts the API model accepts
    (``{type: Ready, status: Maybe}`` is not one), the first of each type; nothing else, so what a person wrote
    by hand is replaced by the next write instead of failing it."""
    if not isinstance(conditions, (list, tuple)):
        return []
    kept: list[Condition | dict[str, Any]] = []
    types: set[str] = set()
    for condition in conditions:
        if _is_condition(condition) and _type_of(condition) not in types:
            types.add(_type_of(condition))
            kept.append(condition)
    return kept


def _is_condition(value: object) -> bool:
    """Whether ``value`` is a condition: a typed one, or a dict :class:`engine.api.meta.Condition` validates."""
    if isinstance(value, Condition):
        return True
    if not isinstance(value, dict):
        return False
    try:
        Condition.model_validate(value)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return False
    return True


def _type_of(condition: Condition | dict[str, Any]) -> str:
    return condition.type if isinstance(condition, Condition) else str(condition["type"])


def _as_json(condition: Condition | dict[str, Any]) -> dict[str, Any]:
    """A condition in API JSON shape (one already in that shape is returned as it is)."""
    if isinstance(condition, dict):
        return condition
    return condition.model_dump(by_alias=True, exclude_none=True, mode="json")


def changed_fields(old: Mapping[str, Any] | object, new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The top-level status fields of ``new`` that differ from ``old`` (a merge-patch), or ``None``; an ``old``
    that is no mapping (``status: 5`` written by hand) has none of them."""
    held = old if isinstance(old, Mapping) else {}
    return {key: value for key, value in new.items() if held.get(key) != value} or None


def conditions_hold(
    conditions: Sequence[Mapping[str, Any]], updates: Sequence[ConditionUpdate], generation: int | None
) -> bool:
    """Whether every update is already recorded as it is (the common case of an unchanged run)."""
    by_type = {c.get("type"): c for c in conditions}
    for update in updates:
        held = by_type.get(update.type)
        if held is None or (held.get("status"), held.get("reason"), held.get("message") or "") != (
            update.status,
            update.reason,
            update.message,
        ):
            return False
        if generation is not None and held.get("observedGeneration") != generation:
            return False
    return True


def status_with_conditions(
    obj: Mapping[str, Any], updates: Sequence[ConditionUpdate], now: datetime, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The object's status with ``updates`` applied and ``observedGeneration`` set; the conditions held are kept
    as they are when every update is already among them and nothing else there is malformed."""
    old = mapping_at(obj, "status")
    generation = generation_of(obj)
    status: dict[str, Any] = dict(old)
    status.update(extra or {})
    held = old.get("conditions") or []
    valid = previous_conditions(held) == held
    status["conditions"] = (
        held if valid and conditions_hold(held, updates, generation) else set_conditions(held, updates, now, generation)
    )
    if generation is not None:
        status["observedGeneration"] = generation
    return status
