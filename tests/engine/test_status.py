"""Condition write-back (engine.status): what a person wrote by hand into a status is replaced, never a crash."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engine.status import ConditionUpdate, changed_fields, previous_conditions, set_conditions, status_with_conditions

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HELD = {
    "type": "Active",
    "status": "True",
    "reason": "ModelAvailable",
    "message": "Model is ready",
    "lastTransitionTime": "2025-01-01T00:00:00Z",
}


@pytest.mark.parametrize(
    "malformed",
    [
        {"type": "Ready", "status": "Maybe"},
        {"type": "Ready", "status": "True", "reason": "bad reason!", "message": "m", "lastTransitionTime": "2025"},
        {"type": "Bad Type", **{k: v for k, v in HELD.items() if k != "type"}},
        {**HELD, "type": "Active", "status": "False"},  # a second condition of one type
        5,
        {"status": "True"},
    ],
)
def test_a_malformed_condition_is_dropped_and_the_update_written(malformed: Any) -> None:
    conditions = set_conditions([HELD, malformed], [ConditionUpdate("Ready", "True", "Ok", "fine")], NOW, 3)
    assert [(c["type"], c["status"]) for c in conditions] == [("Active", "True"), ("Ready", "True")]
    assert conditions[0] == HELD  # a valid condition not updated is kept as it was read
    assert previous_conditions([HELD, malformed]) == [HELD]


def test_status_with_conditions_replaces_a_malformed_list_even_when_the_updates_hold() -> None:
    obj: dict[str, Any] = {"metadata": {}, "status": {"conditions": [HELD, {"type": "Ready", "status": "Maybe"}]}}
    update = ConditionUpdate(HELD["type"], HELD["status"], HELD["reason"], HELD["message"])
    assert status_with_conditions(obj, [update], NOW)["conditions"] == [HELD]
    obj["status"]["conditions"] = [HELD]
    assert status_with_conditions(obj, [update], NOW)["conditions"] is obj["status"]["conditions"]  # nothing to write


def test_changed_fields_of_a_status_that_is_no_mapping_is_every_field() -> None:
    assert changed_fields(5, {"conditions": []}) == {"conditions": []}


def test_a_message_of_40_kb_with_line_breaks_is_written_on_one_bounded_line_and_then_holds() -> None:
    """A condition message quoting a server's 40 kB error: the Condition model refused it (32,768 characters at
    most), which ended an optimize run after it had scaled. It is written on one line, cut to the bound, and the
    same update on the next run is recognized as held (no rewrite every cycle)."""
    update = ConditionUpdate("MetricsAvailable", "False", "MetricsMissing", "parse error\nline2 " + "x" * 40_000)
    [written] = set_conditions([], [update], NOW, 3)
    assert len(written["message"]) == 32_768 and written["message"].endswith("x...")
    assert written["message"].startswith("parse error line2 xxx") and "\n" not in written["message"]
    again = ConditionUpdate("MetricsAvailable", "False", "MetricsMissing", "parse error\nline2 " + "x" * 40_000)
    obj = {"metadata": {"generation": 3}, "status": {"conditions": [written]}}
    assert status_with_conditions(obj, [again], NOW)["conditions"] == [written]
