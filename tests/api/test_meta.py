"""Shared Kubernetes types: conditions, durations, quantities, times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import TypeAdapter, ValidationError

from engine.api.meta import (
    Condition,
    Duration,
    ObjectMeta,
    Quantity,
    Time,
    format_time,
    get_condition,
    parse_duration,
    set_condition,
)

T0 = datetime(2026, 1, 9, 22, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_set_condition_appends_a_new_condition_at_now() -> None:
    result = set_condition([], "MetricsAvailable", "True", "MetricsAvailable", "metrics ok", T0, observed_generation=3)
    assert len(result) == 1
    assert result[0].type == "MetricsAvailable"
    assert result[0].last_transition_time == T0
    assert result[0].observed_generation == 3


def test_set_condition_keeps_transition_time_when_status_is_unchanged() -> None:
    first = set_condition(None, "OptimizationReady", "True", "OptimizationSucceeded", "target 3", T0)
    second = set_condition(first, "OptimizationReady", "True", "SaturationOnlyMode", "saturation only", T1)
    assert second[0].last_transition_time == T0
    assert second[0].reason == "SaturationOnlyMode"
    assert second[0].message == "saturation only"


def test_set_condition_moves_transition_time_when_status_changes() -> None:
    first = set_condition(None, "MetricsAvailable", "True", "MetricsAvailable", "ok", T0)
    second = set_condition(first, "MetricsAvailable", "False", "MetricsUnavailable", "no metrics", T1)
    assert second[0].status == "False"
    assert second[0].last_transition_time == T1


def test_set_condition_does_not_mutate_and_keeps_other_conditions_in_order() -> None:
    original = [
        {
            "type": "MetricsAvailable",
            "status": "True",
            "reason": "MetricsAvailable",
            "message": "",
            "lastTransitionTime": "2026-01-09T22:00:00Z",
        },
        {
            "type": "OptimizationReady",
            "status": "True",
            "reason": "OptimizationSucceeded",
            "message": "",
            "lastTransitionTime": "2026-01-09T22:00:00Z",
        },
    ]
    snapshot = [dict(item) for item in original]
    result = set_condition(
        original, "MetricsAvailable", "False", "MetricsUnavailable", "gone", T1, observed_generation=2
    )
    assert original == snapshot
    assert [c.type for c in result] == ["MetricsAvailable", "OptimizationReady"]
    assert result[0].last_transition_time == T1 and result[0].observed_generation == 2
    assert result[1].last_transition_time == T0
    assert get_condition(result, "OptimizationReady").reason == "OptimizationSucceeded"
    assert get_condition(result, "Missing") is None


def test_condition_serialises_as_rfc3339_utc() -> None:
    condition = set_condition(None, "Ready", "True", "Ready", "", T0.replace(microsecond=123456))[0]
    assert condition.to_dict()["lastTransitionTime"] == "2026-01-09T22:00:00Z"
    assert format_time(datetime(2026, 1, 9, 23, 0, tzinfo=timezone(timedelta(hours=1)))) == "2026-01-09T22:00:00Z"


@pytest.mark.parametrize("reason", ["", "lower case", "1Starts", "Ends_", "Has-Dash"])
def test_condition_reason_pattern(reason: str) -> None:
    if reason == "Ends_":
        Condition(type="Ready", status="True", reason=reason, message="", last_transition_time=T0)
        return
    with pytest.raises(ValidationError):
        Condition(type="Ready", status="True", reason=reason, message="", last_transition_time=T0)


def test_condition_status_enum() -> None:
    with pytest.raises(ValidationError):
        Condition(type="Ready", status="Yes", reason="Ready", message="", last_transition_time=T0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15.0), ("1m30s", 90.0), ("60s", 60.0), ("1.5h", 5400.0), ("500ms", 0.5), ("0", 0.0), ("2h45m", 9900.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    TypeAdapter(Duration).validate_python(text)


@pytest.mark.parametrize("text", ["", "15", "s", "15 seconds", "1d", "-5s", "1m 30s"])
def test_parse_duration_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
    with pytest.raises(ValidationError):
        TypeAdapter(Duration).validate_python(text)


def test_a_duration_longer_than_go_holds_is_refused() -> None:
    """Go's time.ParseDuration refuses more than an int64 of nanoseconds (2562047h47m16.854775807s); the model
    refused nothing and a 10^23-hour period was used."""
    TypeAdapter(Duration).validate_python("2562047h")
    with pytest.raises(ValidationError, match="longest Go duration"):
        TypeAdapter(Duration).validate_python("99999999999999999999999h")


@pytest.mark.parametrize("value", [5, "5", "100Gi", "500m", "1.5", "2e3", "+1Ki"])
def test_quantity_accepts(value: int | str) -> None:
    assert TypeAdapter(Quantity).validate_python(value) == value


@pytest.mark.parametrize("value", ["forty", "100 Gi", "Gi", 1.5, [1]])
def test_quantity_rejects(value: object) -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(Quantity).validate_python(value)


def test_time_parses_rfc3339_and_assumes_utc_for_naive() -> None:
    adapter = TypeAdapter(Time)
    assert adapter.validate_python("2026-01-09T22:00:00Z") == T0
    assert adapter.validate_python(datetime(2026, 1, 9, 22, 0)) == T0


def test_object_meta_keeps_unknown_fields() -> None:
    meta = ObjectMeta.model_validate({"name": "x", "managedFields": [{"manager": "kubectl"}], "generation": 4})
    assert meta.generation == 4
    assert meta.model_dump(by_alias=True, exclude_none=True)["managedFields"] == [{"manager": "kubectl"}]


def test_object_meta_round_trip_adds_no_empty_collections() -> None:
    from engine.api.llmd import VariantAutoscaling

    va = VariantAutoscaling.model_validate({"metadata": {"name": "v", "namespace": "ns"}, "spec": {"modelID": "m"}})
    assert va.metadata.labels == {} and va.metadata.finalizers == []
    assert va.to_dict()["metadata"] == {"name": "v", "namespace": "ns"}


def test_condition_lists_are_keyed_by_type() -> None:
    from engine.api.validate import ManifestInvalid, parse_object

    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": "2026-01-09T22:00:00Z",
    }
    manifest = {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": "c"},
        "spec": {"sourceUri": "hf://a/b"},
        "status": {"conditions": [condition, dict(condition)]},
    }
    with pytest.raises(ManifestInvalid) as info:
        parse_object(manifest)
    assert info.value.field_path == "status.conditions"
