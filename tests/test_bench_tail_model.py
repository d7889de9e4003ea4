"""The tail-model benchmark (bench.tail_model): its operating points and its table."""

from __future__ import annotations

import numpy as np
import pytest

from bench.tail_model import POOLS, SHARES, prompt_histogram, render
from engine.perf.queueing import SLO, PerfProfile, Workload
from engine.perf.tail_sizing import tail_max_rate, ttft_attainment, ttft_ceiling

PROFILE = PerfProfile(alpha=20.0, beta=0.4, gamma=5.0, delta=0.1, max_batch=16)


def test_the_operating_point_is_the_rate_sizing_uses_where_the_model_puts_that_share_of_the_achievable_requests() -> (
    None
):
    rng = np.random.default_rng(0)
    prompts = rng.lognormal(7.0, 0.8, 5000).round() + 1  # some beyond what the profile prefills in 300 ms
    histogram, workload = prompt_histogram(prompts), Workload(float(prompts.mean()), 200.0)
    slo = SLO(ttft_ms=300.0, itl_ms=None)
    ceiling = ttft_ceiling(PROFILE, histogram, 300.0)
    assert 0.5 < ceiling < 1.0
    rates = [tail_max_rate(PROFILE, workload, slo, histogram, 100 * share) for share in SHARES]
    assert all(rate is not None for rate in rates)
    assert rates[0] < rates[1] < rates[2]  # a lower share is met at a higher load
    for share, rate in zip(SHARES, rates):
        assert ttft_attainment(PROFILE, workload, histogram, 300.0, rate) == pytest.approx(share * ceiling, abs=1e-3)


def test_each_cell_is_simulated_over_modelled_with_the_models_error() -> None:
    point = {
        "variant": "v-a100",
        "share": 0.9,
        "rate": 0.25,
        "model": [0.90, 0.91, 0.92, 0.93, 0.94],
        "simulated": [0.91, 0.93, 0.95, 0.96, 0.97],
    }
    section = render([point], "python -m bench.tail_model", 6000, 3.0)
    assert "| v-a100 | p90 | 0.25 req/s | 91.0 / 90.0 (-1.0) | 93.0 / 91.0 (-2.0) |" in section
    assert len(POOLS) == 5 and "(from -3.0 to -1.0;" in section and "2.4 points from the simulator" in section
