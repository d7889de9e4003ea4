"""The variability-sized hold (engine.perf.load_hold): the held rate follows the history's own rises."""

from __future__ import annotations

import pytest

from engine.perf.load_hold import hold_rate


def test_a_steady_history_holds_the_recent_peak() -> None:
    assert hold_rate([10.0] * 12, horizon_intervals=3) == pytest.approx(10.0)


def test_too_short_a_history_declines() -> None:
    # 5 rates give no rise with 3 intervals on both sides: the caller keeps its fixed rule.
    assert hold_rate([10.0, 12.0, 9.0, 11.0, 10.0], horizon_intervals=3) is None
    assert hold_rate([], horizon_intervals=3) is None


def test_a_history_of_ramps_holds_above_the_recent_peak() -> None:
    # Every 4th interval doubles: over any 3-interval horizon the load rose to 2x what the recent peak was ...
    ramps = [10.0, 10.0, 10.0, 20.0] * 6 + [10.0, 10.0, 10.0]
    held = hold_rate(ramps, horizon_intervals=3, quantile=0.9)
    assert held is not None and held > 10.0
    # ... while a history whose peaks never come back holds less than its recent peak, never below the newest rate.
    falling = [float(r) for r in range(40, 10, -1)]
    lower = hold_rate(falling, horizon_intervals=3, quantile=0.9)
    assert lower is not None and falling[-1] <= lower < max(falling[-3:])


def test_the_quantile_orders_the_held_rate() -> None:
    noisy = [10.0, 14.0, 9.0, 12.0, 8.0, 15.0, 11.0, 9.0, 13.0, 10.0, 16.0, 9.0, 12.0]
    rates = [hold_rate(noisy, 3, q) for q in (0.25, 0.5, 0.75, 1.0)]
    assert all(r is not None for r in rates)
    assert rates == sorted(r for r in rates if r is not None)


def test_the_rule_scales_with_the_rate() -> None:
    noisy = [10.0, 14.0, 9.0, 12.0, 8.0, 15.0, 11.0, 9.0, 13.0, 10.0, 16.0, 9.0, 12.0]
    once, twice = hold_rate(noisy, 3), hold_rate([2 * r for r in noisy], 3)
    assert once is not None and twice == pytest.approx(2 * once)


@pytest.mark.parametrize(("horizon", "quantile"), [(0, 0.9), (3, 0.0), (3, 1.5)])
def test_bad_arguments_name_the_field(horizon: int, quantile: float) -> None:
    with pytest.raises(ValueError, match="horizon|quantile"):
        hold_rate([10.0] * 12, horizon, quantile)
