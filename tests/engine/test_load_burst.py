"""Burst-aware load (engine.perf.load_burst): the Poisson rate behind a sub-minute peak."""

from __future__ import annotations

import numpy as np
import pytest

from engine.perf.load_burst import burst_rate
from engine.perf.load_peak import planning_rate


@pytest.mark.parametrize("rate", [2.0, 10.0, 50.0])
def test_on_poisson_traffic_the_burst_rate_is_about_the_rate(rate: float) -> None:
    """The typical highest 15 s count of three minutes of Poisson arrivals gives back the rate within 5 %."""
    counts = np.random.default_rng(0).poisson(rate * 15.0, size=(4000, 12)).max(axis=1)
    estimates = [burst_rate(float(c), 15.0, 12) for c in counts]
    assert float(np.median(estimates)) == pytest.approx(rate, rel=0.05)


def test_a_cluster_raises_the_burst_rate_well_above_the_minute_rate() -> None:
    """67 requests within one scrape in three minutes that average 2 req/s: sized as a Poisson rate of about 4."""
    assert burst_rate(67.0, 15.0, 12) > 1.7 * 2.0
    assert burst_rate(0.0, 15.0, 12) == 0.0
    with pytest.raises(ValueError):
        burst_rate(5.0, 0.0, 12)


def test_the_planning_rate_takes_the_highest_known_rate() -> None:
    assert planning_rate(2.0, None, None) == 2.0
    assert planning_rate(2.0, 3.0, 4.5) == 4.5
    assert planning_rate(2.0, 3.0, float("nan")) == 3.0
    assert planning_rate(5.0, 3.0, 4.0) == 5.0
