"""The follower bound: an ideal load follower's cost against static provisioning, mean(r)^2 / mean(r^2)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.simulate.follower import arrival_counts, follower_bound


def test_step_trace_bound_is_the_hand_computed_ratio() -> None:
    # 10 requests a minute for two minutes, then 30 for two: mean 20, mean square (2 x 100 + 2 x 900) / 4 = 500
    assert follower_bound(np.array([10, 10, 30, 30])) == pytest.approx(400 / 500)


def test_flat_load_has_nothing_to_save_and_more_variation_saves_more() -> None:
    assert follower_bound(np.full(10, 7)) == pytest.approx(1.0)
    assert follower_bound(np.array([0, 0, 0, 0])) == 1.0
    assert follower_bound(np.array([5, 15])) > follower_bound(np.array([1, 19]))


def test_counts_per_whole_interval_leave_out_the_partial_tail() -> None:
    arrivals = np.concatenate([np.linspace(0, 59, 10), np.linspace(60, 119, 30), [125.0, 130.0]])
    counts = arrival_counts(arrivals, 60.0)
    assert counts.tolist() == [10, 30]  # 125 s and 130 s lie in a partial third minute
    assert follower_bound(counts) == pytest.approx(400 / 500)
    assert arrival_counts(np.array([3.0, 5.0]), 60.0).tolist() == [2]  # shorter than one interval: one bin
    with pytest.raises(ValueError, match="interval_s"):
        arrival_counts(arrivals, 0.0)
