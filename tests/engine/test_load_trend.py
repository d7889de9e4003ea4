"""engine.perf.load_trend: the sustained fall that lets a scale-down skip the stabilization window."""

from __future__ import annotations

import math

import pytest

from engine.perf.load_trend import rate_changes, sustained_fall


def test_rate_changes_are_the_largest_recent_change_and_the_median_absolute_change() -> None:
    rates = [10.0, 11.0, 10.0, 12.0, 9.0, 7.0]  # changes +1, -1, +2, -3, -2
    largest, noise = rate_changes(rates, fall_intervals=2, noise_intervals=30)
    assert largest == -2.0  # the last two changes are -3 and -2: it fell in both
    assert noise == 2.0  # median of 1, 1, 2, 3, 2
    assert rate_changes(rates, fall_intervals=2, noise_intervals=3) == (-2.0, 2.0)  # |+2|, |-3|, |-2|
    assert rate_changes(rates, fall_intervals=3)[0] == 2.0  # +2 among the last three: not a fall in each


def test_short_histories_give_nothing() -> None:
    assert rate_changes([]) == (None, None)
    assert rate_changes([5.0, 4.0]) == (None, None)  # one change: neither two intervals nor a noise
    assert rate_changes([5.0, 4.0, 3.0]) == (-1.0, None)
    with pytest.raises(ValueError):
        rate_changes([1.0, 2.0], fall_intervals=0)


def test_a_fall_counts_only_beyond_half_the_noise() -> None:
    assert sustained_fall(-1.0, 1.5)
    assert not sustained_fall(-0.7, 1.5)  # within half the noise
    assert not sustained_fall(0.5, 1.5)  # a rise among the recent changes
    assert sustained_fall(-0.1, 0.0)  # flat history: any fall in each interval counts
    assert not sustained_fall(0.0, 0.0)
    assert not sustained_fall(None, 1.0) and not sustained_fall(-1.0, None)
    assert not sustained_fall(math.nan, 1.0) and not sustained_fall(-1.0, math.inf)


def test_flat_noisy_traffic_seldom_falls_and_a_ramp_down_does() -> None:
    """On noise alone a fall in two intervals in a row beyond half the median change is rare; a steady
    descent is one from its second interval on."""
    import random

    generator = random.Random(0)
    flat = [100.0 + generator.gauss(0.0, 5.0) for _ in range(200)]
    fired = sum(sustained_fall(*rate_changes(flat[: i + 1])) for i in range(len(flat)))
    assert fired / len(flat) < 0.2
    descent = flat[:40] + [100.0 - 6.0 * k for k in range(1, 10)]
    assert all(sustained_fall(*rate_changes(descent[: 40 + k + 1])) for k in range(2, 9))
