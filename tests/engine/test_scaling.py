"""Tests for engine.optimize.scaling (recommendation, behavior, distribution): Kthena recommendation, behaviour correction, distribution, scale to zero.

The parametrized tables are ports of Kthena's own tests
(pkg/autoscaler/algorithm/recommendation_test.go, revision_test.go,
pkg/autoscaler/autoscaler/status_test.go and optimizer_test.go).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine.api.meta import parse_time
from engine.optimize.scaling.behavior import (
    Behavior,
    PanicPolicy,
    Sample,
    ScalingState,
    StablePolicy,
    apply_scale_to_zero,
    correct,
    format_time,
    initialize_state,
    is_panic,
    parse_duration,
)
from engine.optimize.scaling.distribution import Group, distribute, scaling_blocks
from engine.optimize.scaling.recommendation import MAX_RECOMMENDATION, recommend, tolerance_from_percent

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# ============================================================================ recommend
# (name, min, max, current, tolerance, targets, unready, instances, external, expected[, reporters, unreadyByMetric])

REC_TABLE = [
    ("givenInstancesLessThanMinInstances_thenReturnMinInstances", 5, 10, 4, 0.1, {}, 4, [], {}, 5),
    ("givenInstancesGreaterThanMaxInstances_thenReturnMaxInstances", 5, 10, 11, 0.1, {}, 0, [], {}, 10),
    ("givenNoAvailableMetrics_thenSkip", 5, 10, 7, 0.1, {"a": 0.5, "b": 8.0}, 7, [], {}, None),
    (
        "givenMultipleMetrics_thenReturnMaximumRecommendation",
        1,
        1_000_000,
        3,
        0.0,
        {"a": 3.0, "b": 5.0, "c": 4.0},
        0,
        [{"a": 6.0, "b": 500.0, "c": 20.0}] * 3,
        {},
        300,
    ),
    ("givenTargetWithZeroValue_thenReturnMaximumInstances", 1, 100, 1, 0.0, {"a": 0.0}, 0, [{"a": 1.0}], {}, 100),
    (
        "givenTargetWithExtremelySmallValue_thenReturnMaximumInstances",
        1,
        100,
        1,
        0.0,
        {"a": 1e-100},
        0,
        [{"a": 1e100}],
        {},
        100,
    ),
    (
        "givenReadyInstances_shouldCalculateAverage",
        1,
        100,
        3,
        0.0,
        {"a": 1.0},
        0,
        [{"a": 19.1}, {"a": 3.1}, {"a": 7.1}],
        {},
        30,
    ),
    (
        "whenDesiredIsLessThanMinInstances_thenReturnMinInstances",
        5,
        20,
        10,
        0.0,
        {"a": 1.0},
        0,
        [{"a": 0.1}] * 10,
        {},
        5,
    ),
    (
        "whenDesiredIsGreaterThanMaxInstances_thenReturnMaxInstances",
        5,
        20,
        10,
        0.0,
        {"a": 1.0},
        0,
        [{"a": 3.0}] * 10,
        {},
        20,
    ),
    ("noUnreadyNoMissing_withinLowestTolerance_thenCurrent", 1, 100, 9, 0.5, {"a": 1.0}, 0, [{"a": 0.51}] * 10, {}, 9),
    ("noUnreadyNoMissing_outOfLowestTolerance_thenDesired", 1, 100, 9, 0.5, {"a": 1.0}, 0, [{"a": 0.49}] * 10, {}, 5),
    ("noUnreadyNoMissing_withinHighestTolerance_thenCurrent", 1, 100, 9, 0.5, {"a": 1.0}, 0, [{"a": 1.49}] * 10, {}, 9),
    ("noUnreadyNoMissing_outOfHighestTolerance_thenDesired", 1, 100, 9, 0.5, {"a": 1.0}, 0, [{"a": 1.51}] * 10, {}, 16),
    (
        "givenUnreadyInstances_whenShouldScaleDown_thenIgnoreUnready",
        1,
        100,
        58,
        0.0,
        {"a": 1.0},
        50,
        [{"a": 0.15}] * 8,
        {},
        2,
    ),
    (
        "givenUnreadyInstances_whenShouldScaleUp_thenTreatUnreadyAsZero",
        1,
        100,
        18,
        0.0,
        {"a": 1.0},
        10,
        [{"a": 3.9}] * 8,
        {},
        32,
    ),
    (
        "givenTooManyUnreadyInstances_whenEstimateIsOpposite_thenCurrent",
        1,
        100,
        58,
        0.0,
        {"a": 1.0},
        50,
        [{"a": 3.9}] * 8,
        {},
        58,
    ),
    (
        "givenNoReporterCounts_whenAggregatedMetricExceedsTolerance_thenScaleUp",
        2,
        20,
        10,
        0.1,
        {"a": 10.0},
        0,
        [{"a": 105.0}],
        {},
        11,
    ),
    (
        "givenReporterCounts_whenSomeInstancesDoNotReport_thenWeightMissingInstances",
        2,
        20,
        10,
        0.0,
        {"a": 10.0},
        2,
        [{"a": 1.0}],
        {},
        6,
        {"a": 5},
        {"a": 0},
    ),
    (
        "givenMissingInstances_whenShouldScaleDown_thenTreatMissingAsTarget",
        1,
        100,
        10,
        0.0,
        {"a": 1.0},
        0,
        [{}] * 2 + [{"a": 0.5}] * 8,
        {},
        6,
    ),
    (
        "givenMissingInstances_whenShouldScaleUp_thenTreatMissingAsZero",
        1,
        100,
        10,
        0.0,
        {"a": 1.0},
        0,
        [{}] * 2 + [{"a": 2.9}] * 8,
        {},
        24,
    ),
    (
        "givenTooManyMissingInstances_whenEstimateIsOpposite_thenCurrent",
        1,
        100,
        58,
        0.0,
        {"a": 1.0},
        0,
        [{}] * 50 + [{"a": 2.9}] * 8,
        {},
        58,
    ),
    (
        "givenTooManyNonExistingInstances_whenEstimateIsOpposite_thenCurrent",
        1,
        100,
        58,
        0.0,
        {"a": 1.0},
        0,
        [{}] * 4 + [{"a": 2.9}] * 8,
        {},
        58,
    ),
    ("givenExternalMetric_whenWithinLowestTolerance_thenCurrent", 1, 100, 10, 0.51, {"a": 3.0}, 0, [], {"a": 14.9}, 10),
    ("givenExternalMetric_whenOutOfLowestTolerance_thenDesired", 1, 100, 10, 0.49, {"a": 3.0}, 0, [], {"a": 14.9}, 5),
    (
        "givenExternalMetric_whenWithinHighestTolerance_thenCurrent",
        1,
        100,
        10,
        0.51,
        {"a": 3.0},
        0,
        [],
        {"a": 44.9},
        10,
    ),
    ("givenExternalMetric_whenOutOfHighestTolerance_thenDesired", 1, 100, 10, 0.49, {"a": 3.0}, 0, [], {"a": 44.9}, 15),
    ("givenExternalTargetWithZeroValue_thenReturnMaximumInstances", 1, 100, 1, 0.0, {"a": 0.0}, 0, [], {"a": 1.0}, 100),
    (
        "givenExternalTargetWithExtremelySmallValue_thenReturnMaximumInstances",
        1,
        100,
        1,
        0.0,
        {"a": 1e-100},
        0,
        [],
        {"a": 1e100},
        100,
    ),
]


@pytest.mark.parametrize("case", REC_TABLE, ids=[c[0] for c in REC_TABLE])
def test_recommend_kthena_table(case: tuple) -> None:
    _name, low, high, current, tolerance, targets, unready, instances, external, expected, *extra = case
    reporters = extra[0] if extra else None
    unready_by_metric = extra[1] if len(extra) > 1 else None
    got = recommend(
        current,
        low,
        high,
        tolerance,
        targets,
        instances,
        unready,
        external,
        reporter_counts=reporters,
        metric_unready_counts=unready_by_metric,
    )
    assert got == expected


def test_tolerance_is_a_fraction_and_band_edges_are_inclusive() -> None:
    assert tolerance_from_percent(10) == pytest.approx(0.1)
    assert tolerance_from_percent(None) == pytest.approx(0.1)
    # ratio exactly 1.5 with tolerance 0.5 (binary-exact): inside the band -> current.
    assert recommend(4, 1, 100, 0.5, {"a": 2.0}, [{"a": 3.0}] * 4) == 4
    assert recommend(4, 1, 100, 0.5, {"a": 2.0}, [{"a": 1.0}] * 4) == 4  # ratio 0.5
    assert recommend(4, 1, 100, 0.25, {"a": 2.0}, [{"a": 3.0}] * 4) == 6  # ratio 1.5 outside 0.25


def test_recommend_zero_over_zero_and_infinite_do_not_crash() -> None:
    # 0/0 -> NaN ratio -> 0 desired -> clamped to min.
    assert recommend(3, 1, 10, 0.1, {"a": 0.0}, [{"a": 0.0}] * 3) == 1
    assert recommend(1, 1, 10, 0.0, {"a": 1.0}, [{"a": float("inf")}]) == 10
    assert recommend(1, 0, MAX_RECOMMENDATION + 5, 0.0, {"a": 0.0}, [{"a": 1.0}]) == MAX_RECOMMENDATION
    # External metric with current 0: ratio infinite, desired = value / target.
    assert recommend(0, 0, 10, 0.1, {"q": 2.0}, [], external={"q": 5.0}) == 3


def test_recommend_no_data_is_none_but_bounds_win() -> None:
    assert recommend(3, 1, 10, 0.1, {"a": 1.0}, [{}, {}]) is None
    assert recommend(3, 1, 10, 0.1, {}, []) is None
    assert recommend(0, 1, 10, 0.1, {"a": 1.0}, []) == 1
    assert recommend(12, 1, 10, 0.1, {"a": 1.0}, []) == 10


def test_recommend_max_over_metrics_mixed_external() -> None:
    got = recommend(4, 1, 100, 0.0, {"a": 1.0, "q": 10.0}, [{"a": 2.0}] * 4, external={"q": 100.0})
    assert got == 10  # a -> 8, q -> 10


# ============================================================================ durations / state


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15s", 15.0),
        ("1m30s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("0", 0.0),
        ("", 0.0),
        (None, 0.0),
        (42, 42.0),
        (timedelta(minutes=2), 120.0),
        ("1h2m3s", 3723.0),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["15", "s", "1x", "1m 30s", "abc", "-2s"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_state_round_trip() -> None:
    state = ScalingState(
        history=[(at(0), 3, 3), Sample(at(15.5), 5, 4)],
        panic_mode_end=at(60),
        zero_since=None,
    )
    data = state.to_dict()
    assert data == {
        "history": [
            {"time": "2026-01-01T12:00:00Z", "recommended": 3, "corrected": 3},
            {"time": "2026-01-01T12:00:15.500000Z", "recommended": 5, "corrected": 4},
        ],
        "panicModeEnd": "2026-01-01T12:01:00Z",
        "zeroSince": None,
    }
    assert ScalingState.from_dict(data) == state
    assert ScalingState.from_dict({}) == ScalingState()
    assert ScalingState.from_dict(None) == ScalingState()
    assert parse_time("2026-01-01T12:00:00Z") == T0
    assert format_time(T0) == "2026-01-01T12:00:00Z"


def test_behavior_defaults_and_from_spec() -> None:
    b = Behavior()
    assert (b.scale_up.instances, b.scale_up.percent, b.scale_up.period, b.scale_up.select_policy) == (
        1,
        100,
        15.0,
        "Or",
    )
    assert b.scale_up.stabilization_window == 0.0
    assert b.scale_down.stabilization_window == 300.0
    assert (b.panic.percent, b.panic.panic_threshold_percent, b.panic.panic_mode_hold) == (1000, 200, 60.0)
    assert Behavior.from_spec(None) == b
    spec = {
        "scaleUp": {
            "stablePolicy": {"instances": 4, "percent": 50, "period": "30s", "selectPolicy": "And"},
            "panicPolicy": {"percent": 300, "period": "10s", "panicThresholdPercent": 150, "panicModeHold": "2m"},
        },
        "scaleDown": {"instances": 2, "period": "1m", "stabilizationWindow": "10m"},
    }
    parsed = Behavior.from_spec(spec)
    assert parsed.scale_up == StablePolicy(4, 50, 30.0, "And", 0.0)
    assert parsed.scale_down == StablePolicy(2, 100, 60.0, "Or", 600.0)
    assert parsed.panic == PanicPolicy(300, 10.0, 150, 120.0)


# ============================================================================ correct: Kthena tables

BIG = 1e12  # Kthena's tests use "never expire" windows


def kthena_behavior(
    down_i: int, down_p: int, down_sel: str, up_i: int, up_p: int, up_sel: str, panic_p: int
) -> Behavior:
    """makeBehavior() of revision_test.go with never-expiring windows and no automatic panic."""
    return Behavior(
        scale_up=StablePolicy(up_i, up_p, BIG, up_sel, BIG),
        scale_down=StablePolicy(down_i, down_p, BIG, down_sel, BIG),
        panic=PanicPolicy(percent=panic_p, period=BIG, panic_threshold_percent=None, panic_mode_hold=60.0),
    )


NOW = at(1000)
PANIC = ScalingState(panic_mode_end=NOW + timedelta(seconds=30))


def hist(recommended: int, corrected: int, panic: bool = False) -> ScalingState:
    return ScalingState(
        history=[(NOW - timedelta(seconds=1), recommended, corrected)],
        panic_mode_end=PANIC.panic_mode_end if panic else None,
    )


# (name, behavior, state, min, max, current, recommended, expected)
CORRECT_TABLE = [
    ("stable_equal_returns_current", kthena_behavior(2, 20, "Or", 2, 100, "Or", 1000), ScalingState(), 1, 20, 7, 7, 7),
    (
        "stable_down_Or_less_restrictive",
        kthena_behavior(1, 40, "Or", 2, 100, "Or", 1000),
        ScalingState(),
        1,
        20,
        10,
        5,
        6,
    ),
    (
        "stable_down_And_more_restrictive",
        kthena_behavior(1, 40, "And", 2, 100, "Or", 1000),
        ScalingState(),
        1,
        20,
        10,
        5,
        9,
    ),
    (
        "stable_down_unknown_no_constraint",
        kthena_behavior(1, 40, "Unknown", 2, 100, "Or", 1000),
        ScalingState(),
        1,
        20,
        10,
        5,
        5,
    ),
    (
        "stable_down_max_recommendation_history",
        kthena_behavior(2, 20, "Or", 2, 100, "Or", 1000),
        hist(9, 10),
        1,
        20,
        10,
        5,
        9,
    ),
    (
        "stable_down_max_corrected_history",
        kthena_behavior(3, 25, "Or", 2, 100, "Or", 1000),
        hist(3, 12),
        1,
        20,
        10,
        3,
        9,
    ),
    (
        "stable_up_Or_less_restrictive",
        kthena_behavior(2, 20, "Or", 3, 100, "Or", 1000),
        ScalingState(),
        1,
        100,
        5,
        20,
        10,
    ),
    (
        "stable_up_And_more_restrictive",
        kthena_behavior(2, 20, "Or", 3, 100, "And", 1000),
        ScalingState(),
        1,
        100,
        5,
        20,
        8,
    ),
    (
        "stable_up_unknown_no_constraint",
        kthena_behavior(2, 20, "Or", 3, 100, "Unknown", 1000),
        ScalingState(),
        1,
        100,
        5,
        20,
        20,
    ),
    (
        "stable_up_min_recommendation_history",
        kthena_behavior(2, 20, "Or", 3, 100, "Or", 1000),
        hist(12, 5),
        1,
        100,
        5,
        20,
        10,
    ),
    (
        "stable_up_min_corrected_history",
        kthena_behavior(2, 20, "Or", 2, 50, "Or", 1000),
        hist(50, 6),
        1,
        100,
        10,
        50,
        10,
    ),
    ("panic_1000_does_not_limit", kthena_behavior(2, 20, "Or", 2, 100, "Or", 1000), PANIC, 1, 100, 5, 15, 15),
    ("panic_small_percent_limits", kthena_behavior(2, 20, "Or", 2, 100, "Or", 100), PANIC, 1, 100, 5, 15, 10),
    (
        "panic_min_corrected_history",
        kthena_behavior(2, 20, "Or", 2, 100, "Or", 100),
        hist(30, 6, panic=True),
        1,
        100,
        10,
        30,
        12,
    ),
    ("panic_current_zero_no_floor", kthena_behavior(2, 20, "Or", 2, 100, "Or", 100), PANIC, 0, 100, 0, 5, 5),
    (
        "panic_past_sample_zero_guard",
        kthena_behavior(2, 20, "Or", 2, 100, "Or", 100),
        hist(5, 0, panic=True),
        0,
        100,
        0,
        5,
        5,
    ),
    ("panic_never_scales_down", kthena_behavior(2, 20, "Or", 2, 100, "Or", 1000), PANIC, 1, 100, 10, 3, 10),
    ("below_min_returns_min", kthena_behavior(2, 20, "Or", 2, 100, "Or", 1000), ScalingState(), 8, 20, 5, 5, 8),
    ("above_max_returns_max", kthena_behavior(2, 20, "Or", 2, 100, "Or", 1000), ScalingState(), 1, 10, 15, 15, 10),
    ("crd_defaults", Behavior(panic=PanicPolicy(panic_threshold_percent=None)), ScalingState(), 1, 20, 10, 5, 5),
]


@pytest.mark.parametrize("case", CORRECT_TABLE, ids=[c[0] for c in CORRECT_TABLE])
def test_correct_kthena_table(case: tuple) -> None:
    _name, behavior, state, low, high, current, recommended, expected = case
    got, new_state = correct(current, recommended, behavior, state, NOW, min_replicas=low, max_replicas=high)
    assert got == expected
    assert new_state.history[-1] == Sample(NOW, recommended, expected)


def status_behavior(window: float) -> Behavior:
    """defaultBehavior() of status_test.go: windows, no period, no select policy, no panic."""
    policy = StablePolicy(instances=1, percent=100, period=0.0, select_policy="", stabilization_window=window)
    return Behavior(scale_up=policy, scale_down=policy, panic=PanicPolicy(panic_threshold_percent=None))


def test_status_scale_down_blocked_by_stabilization_window() -> None:
    state = initialize_state(10, at(0))
    assert correct(10, 0, status_behavior(1800), state, at(1), min_replicas=1, max_replicas=10)[0] == 10


def test_status_scale_down_reinitialized_with_current() -> None:
    state = initialize_state(1, at(0))
    state = ScalingState(history=[*state.history, (at(1), 1, 1)])
    state = initialize_state(3, at(2), state)
    assert correct(3, 1, status_behavior(1800), state, at(3), min_replicas=1, max_replicas=5)[0] == 3


def test_status_scale_down_window_zero() -> None:
    state = initialize_state(3, at(0))
    assert correct(3, 1, status_behavior(0), state, at(1), min_replicas=1, max_replicas=5)[0] == 1


def test_status_scale_up_blocked_by_stabilization_window() -> None:
    state = initialize_state(1, at(0))
    assert correct(1, 10, status_behavior(1800), state, at(1), min_replicas=1, max_replicas=10)[0] == 1


# ============================================================================ correct: time behaviour


def no_panic(**kw: object) -> Behavior:
    return Behavior(panic=PanicPolicy(panic_threshold_percent=None), **kw)  # type: ignore[arg-type]


def test_scale_down_stabilization_window_expiry() -> None:
    b = no_panic(scale_down=StablePolicy(instances=100, percent=100, period=15, stabilization_window=60))
    state = ScalingState(history=[(at(0), 8, 8)])
    assert correct(8, 2, b, state, at(60))[0] == 8  # sample at the window edge still counts
    assert correct(8, 2, b, state, at(60.001))[0] == 2


def test_scale_up_stabilization_uses_min() -> None:
    b = no_panic(scale_up=StablePolicy(instances=100, percent=100, period=15, stabilization_window=30))
    state = ScalingState(history=[(at(0), 4, 2), (at(10), 6, 2)])
    assert correct(2, 9, b, state, at(20))[0] == 4
    assert correct(2, 9, b, state, at(35))[0] == 6  # first sample out of the window


def test_rate_limit_within_period_uses_lowest_count() -> None:
    # Kthena limits against the corrected counts in effect during the period (a line chart of
    # past corrections), so the previous evaluation at 2 must be in the history.
    b = no_panic(scale_up=StablePolicy(instances=2, percent=0, period=60))
    got, state = correct(2, 10, b, ScalingState(history=[(at(-15), 2, 2)]), at(0))
    assert got == 4
    # 30 s later, still within the period: base is still 2 -> at most 4.
    got, state = correct(4, 10, b, state, at(30))
    assert got == 4
    # After the period has passed since the count was 2, base is 4 -> 6.
    got, _ = correct(4, 10, b, state, at(91))
    assert got == 6


def test_scale_down_rate_limit_uses_highest_count() -> None:
    b = no_panic(scale_down=StablePolicy(instances=1, percent=0, period=60, select_policy="Or", stabilization_window=0))
    got, state = correct(10, 1, b, ScalingState(history=[(at(-15), 10, 10)]), at(0))
    assert got == 9
    got, state = correct(9, 1, b, state, at(20))
    assert got == 9  # base is still 10 within the period
    got, _ = correct(9, 1, b, state, at(81))
    assert got == 8


@pytest.mark.parametrize(("select", "expected_up", "expected_down"), [("Or", 8, 5), ("And", 6, 9)])
def test_or_vs_and(select: str, expected_up: int, expected_down: int) -> None:
    # Up from 4: instances 2 -> 6, percent 100 -> 8.  Down from 10: instances 1 -> 9, percent 50 -> 5.
    b = no_panic(
        scale_up=StablePolicy(instances=2, percent=100, period=15, select_policy=select),
        scale_down=StablePolicy(instances=1, percent=50, period=15, select_policy=select, stabilization_window=0),
    )
    assert correct(4, 20, b, ScalingState(), at(0))[0] == expected_up
    assert correct(10, 1, b, ScalingState(), at(0))[0] == expected_down


def test_panic_entry_hold_and_expiry() -> None:
    b = Behavior(panic=PanicPolicy(percent=100, panic_threshold_percent=200, panic_mode_hold=60))
    # 4 -> 7: 700 < 800, no panic; stable limit (+1 or +100%) -> 7.
    got, state = correct(4, 7, b, ScalingState(), at(0))
    assert (got, state.panic_mode_end) == (7, None)
    # 4 -> 8: exactly the threshold -> panic; panic percent 100 -> at most 8.
    got, state = correct(4, 8, b, ScalingState(), at(0))
    assert got == 8
    assert state.panic_mode_end == at(60)
    assert is_panic(state, at(60)) and not is_panic(state, at(60.5))
    # In panic, a scale-down is refused.
    got, state2 = correct(8, 2, b, state, at(30))
    assert got == 8
    assert state2.panic_mode_end == at(60)  # not re-armed: 2 < 16
    # Still triggering re-arms the hold.
    _, state3 = correct(8, 16, b, state, at(50))
    assert state3.panic_mode_end == at(110)
    # After the hold the stable scale-down applies again (window 300 s blocks it for now).
    got, state4 = correct(8, 2, b, state2, at(61))
    assert state4.panic_mode_end is None
    assert got == 8  # stabilization window still remembers 8
    got, _ = correct(8, 2, Behavior(scale_down=StablePolicy(stabilization_window=0, instances=10)), state2, at(61))
    assert got == 2


def test_panic_hold_zero_disables_panic() -> None:
    b = Behavior(panic=PanicPolicy(panic_mode_hold=0))
    got, state = correct(2, 20, b, ScalingState(), at(0))
    assert state.panic_mode_end is None
    assert got == 4  # stable: +1 or +100% of 2


def test_panic_default_unlimited_growth() -> None:
    got, state = correct(2, 20, Behavior(), ScalingState(), at(0))
    assert got == 20  # default panic percent 1000 -> up to 22
    assert is_panic(state, at(10))


def test_panic_without_period_applies_no_limit() -> None:
    """Kthena's panic window has length ``period``: 0 or unset holds no sample, so no limit applies
    (not ``current * (1 + percent/100)``, which would give 11 here)."""
    got, state = correct(1, 20, Behavior.from_spec({}), ScalingState(), at(0))
    assert got == 20 and is_panic(state, at(0))
    explicit = Behavior.from_spec({"scaleUp": {"panicPolicy": {"percent": 100, "period": "0s"}}})
    assert correct(1, 20, explicit, ScalingState(), at(0))[0] == 20
    # with a period the lowest count within it is the base: 1 + 100% of 1
    limited = Behavior.from_spec({"scaleUp": {"panicPolicy": {"percent": 100, "period": "30s"}}})
    assert correct(1, 20, limited, ScalingState(), at(0))[0] == 2


def test_history_is_pruned() -> None:
    b = no_panic(
        scale_up=StablePolicy(period=10, stabilization_window=0),
        scale_down=StablePolicy(period=10, stabilization_window=20),
    )
    state = ScalingState()
    for i in range(10):
        _, state = correct(3, 3, b, state, at(i * 10))
    assert [s.time for s in state.history] == [at(60), at(70), at(80), at(90)]
    assert all(s.time >= at(90) - timedelta(seconds=40) for s in state.history)


def test_correct_does_not_mutate_input_state() -> None:
    state = ScalingState(history=[(at(0), 3, 3)])
    before = state.to_dict()
    correct(3, 5, Behavior(), state, at(5))
    assert state.to_dict() == before


# ============================================================================ scale to zero


def test_scale_to_zero_grace() -> None:
    state = ScalingState()
    got, state = apply_scale_to_zero(0, state, "60s", at(0))
    assert (got, state.zero_since) == (1, at(0))
    got, state = apply_scale_to_zero(0, state, "60s", at(59))
    assert got == 1
    got, state = apply_scale_to_zero(0, state, "60s", at(60))
    assert got == 0
    got, state = apply_scale_to_zero(0, state, "60s", at(100))
    assert got == 0
    # A rise resets the clock.
    got, state = apply_scale_to_zero(2, state, "60s", at(110))
    assert (got, state.zero_since) == (2, None)
    got, state = apply_scale_to_zero(0, state, "60s", at(120))
    assert (got, state.zero_since) == (1, at(120))


def test_scale_to_zero_no_grace_and_already_zero() -> None:
    assert apply_scale_to_zero(0, None, None, at(0))[0] == 0
    assert apply_scale_to_zero(0, None, 0, at(0))[0] == 0
    assert apply_scale_to_zero(0, ScalingState(), 300, at(0), current=0)[0] == 0
    assert apply_scale_to_zero(3, None, 300, at(0))[0] == 3
    state = ScalingState.from_dict(apply_scale_to_zero(0, None, timedelta(seconds=30), at(0))[1].to_dict())
    assert apply_scale_to_zero(0, state, 30, at(30))[0] == 0


# ============================================================================ distribute


def kparam(cost: int, low: int, high: int) -> Group:
    return Group(cost, low, high)


# Ports of TestRestoreReplicasOfEachBackend (rate, groups, total, expected per group)
RESTORE_TABLE = [
    ("cheaper_fills_first_spills_to_next", 100, [kparam(10, 1, 4), kparam(5, 1, 3)], 5, [2, 3]),
    ("clamping_below_min", 100, [kparam(10, 2, 5)], 0, [2]),
    ("clamping_above_max", 100, [kparam(10, 1, 3)], 999, [3]),
    ("single_backend_full_range", 100, [kparam(10, 1, 4)], 4, [4]),
    ("same_name_other_namespace", 100, [kparam(100, 1, 3), kparam(60, 2, 5)], 8, [3, 5]),
]


@pytest.mark.parametrize("case", RESTORE_TABLE, ids=[c[0] for c in RESTORE_TABLE])
def test_distribute_kthena_table(case: tuple) -> None:
    _name, rate, groups, total, expected = case
    assert distribute(groups, total, rate) == expected


def test_blocks_kthena_meta() -> None:
    assert scaling_blocks([Group(10, 5, 5)], 100) == []  # zero-delta backends produce no blocks
    assert len(scaling_blocks([Group(10, 1, 4), Group(5, 1, 3)], 100)) == 2
    blocks = scaling_blocks([Group(10, 1, 4), Group(5, 1, 3)], 100)
    assert blocks[0][2] <= blocks[1][2]
    assert len(scaling_blocks([Group(10, 1, 5)], 50)) > 1


def test_blocks_geometric_rate_200() -> None:
    # Span 10 at rate 200: sizes 1, 2, 4, 3 (rest), costs cost * size.
    assert scaling_blocks([Group(3, 0, 10)], 200) == [(0, 1, 3), (0, 2, 6), (0, 3, 9), (0, 4, 12)]


def test_blocks_rate_below_100_are_single_replicas() -> None:
    assert scaling_blocks([Group(7, 0, 3)], 50) == [(0, 1, 7)] * 3
    assert scaling_blocks([Group(7, 0, 2)], 0) == [(0, 1, 7)] * 2


def test_distribute_rate_200_interleaves_groups() -> None:
    # A: cost 10, blocks 1 (10), 2 (20), 4 (40).  B: cost 15, blocks 1 (15), 2 (30), 4 (60).
    groups = [Group(10, 0, 7), Group(15, 0, 7)]
    assert distribute(groups, 1) == [1, 0]
    assert distribute(groups, 2) == [1, 1]
    assert distribute(groups, 4) == [3, 1]  # A's 2-block (20) before B's 2-block (30)
    assert distribute(groups, 6) == [3, 3]
    assert distribute(groups, 10) == [7, 3]
    assert distribute(groups, 100) == [7, 7]


def test_distribute_rate_100_whole_block_at_unit_cost() -> None:
    groups = [Group(10, 0, 3), Group(11, 0, 3)]
    assert distribute(groups, 4, 100) == [3, 1]


def test_distribute_rate_below_100_cheapest_first() -> None:
    groups = [Group(10, 1, 3), Group(5, 0, 2)]
    assert distribute(groups, 3, 50) == [1, 2]
    assert distribute(groups, 5, 50) == [3, 2]


def test_distribute_ties_by_group_order_and_inputs() -> None:
    assert distribute([(5, 0, 2), (5, 0, 2)], 3, 100) == [2, 1]

    class Obj:
        def __init__(self, cost: int, low: int, high: int) -> None:
            self.cost, self.min_replicas, self.max_replicas = cost, low, high

    assert distribute([Obj(9, 1, 2), {"cost": 1, "minReplicas": 0, "maxReplicas": 1}], 3) == [2, 1]


def test_distribute_minimums_always_and_totals_beyond_maxima() -> None:
    groups = [Group(1, 2, 4), Group(2, 1, 3)]
    assert distribute(groups, 0) == [2, 1]
    assert distribute(groups, 1000) == [4, 3]
    assert distribute([], 5) == []


def test_panic_period_limits_against_lowest_recent_count() -> None:
    b = Behavior(panic=PanicPolicy(percent=100, period=30, panic_threshold_percent=200, panic_mode_hold=60))
    state = ScalingState(history=[(at(-10), 2, 2)])
    got, state = correct(2, 20, b, state, at(0))
    assert got == 4  # 2 + 100% of 2
    got, state = correct(4, 20, b, state, at(10))
    assert got == 4  # 2 was in effect within the last 30 s
    got, _ = correct(4, 20, b, state, at(41))
    assert got == 8  # now the lowest count in the period is 4


def test_last_count_forgotten_after_twice_the_period() -> None:
    b = no_panic(scale_up=StablePolicy(instances=1, percent=0, period=10))
    state = ScalingState(history=[(at(0), 1, 1)])
    assert correct(3, 9, b, state, at(20))[0] == 3  # base 1 -> 2, then max(., current 3)
    assert correct(3, 9, b, state, at(20.5))[0] == 4  # forgotten: base is current 3 -> 4
