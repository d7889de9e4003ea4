"""Conditions on plain status dicts, as the flows read and write them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.api.meta import set_condition


def set_condition_dict(
    conditions: list[dict[str, Any]], type: str, status: str, reason: str, message: str, now: datetime,
    observed_generation: int | None = None,
) -> list[dict[str, Any]]:
    """:func:`engine.api.meta.set_condition` on plain status dicts, returning dicts in API JSON shape.

    Unchanged conditions serialize byte-for-byte as they were read, so comparing old and new status
    dicts tells whether a write is needed.
    """
    updated = set_condition(conditions, type, status, reason, message, now, observed_generation=observed_generation)
    return [c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in updated]
