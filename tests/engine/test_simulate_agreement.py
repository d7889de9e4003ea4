"""The simulator against the analytic queueing model (``engine.perf.queueing.analyze``) at steady Poisson load.

Stated tolerances (docs/simulate.md explains the differences):

* throughput within 2 %, mean ITL within 3 % at every batch size and load tested;
* mean TTFT within 5 % while the batch is rarely full (the batch limit is not what makes requests wait);
* once the batch saturates, requests queue for a free slot and the analytic TTFT is *higher* than the
  simulated one, up to about twice: the Markov chain gives every request an exponentially distributed
  service time, while a request's real service time is nearly fixed by its token counts, and queueing
  delay grows with service-time variance (Pollaczek-Khinchine).  The test pins that direction and bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.perf.queueing import PerfProfile, Workload, analyze
from engine.simulate.records import SimConfig, VariantModel, poisson_trace
from engine.simulate.replay import simulate

IN, OUT = 1000, 200
REQUESTS = 20000


def service_capacity_rps(profile: PerfProfile) -> float:
    """mu(B): requests per second a full batch completes (the analytic model's upper rate)."""
    b = profile.max_batch
    return b / ((profile.gamma + profile.delta * IN * b) + (OUT - 1) * (profile.alpha + profile.beta * b)) * 1000.0


def measure(profile: PerfProfile, rate: float, seed: int = 1) -> tuple[float, float, float, float]:
    """(throughput req/s, mean TTFT ms, mean ITL ms, share of admissions into a full batch) after warm-up."""
    duration = REQUESTS / rate
    trace = poisson_trace(rate, duration, IN, OUT, seed=seed)
    v = VariantModel("ns/v", "default/model", "v", "A100", 1, 40.0, profile, 10**12)
    result = simulate([v], trace, SimConfig(horizon_s=duration), {"ns/v": 1})
    warm = result.arrival_s > 0.1 * duration
    ttft = float(np.mean(result.ttft_s[warm])) * 1000
    itl = float(np.sum((result.done_s - result.first_s)[warm]) / np.sum(trace.out_tokens[warm] - 1)) * 1000
    throughput = warm.sum() / (result.done_s[warm].max() - result.arrival_s[warm].min())
    queued = float(np.mean(result.admit_s[warm] > result.arrival_s[warm] + 1e-9))
    return throughput, ttft, itl, queued


@pytest.mark.parametrize("batch", [16, 64, 256])
@pytest.mark.parametrize("load", [0.3, 0.6])
def test_agrees_with_the_analytic_model_while_the_batch_is_not_full(batch: int, load: float) -> None:
    profile = PerfProfile(alpha=20.58, beta=0.41, gamma=5.2, delta=0.1, max_batch=batch)
    rate = load * service_capacity_rps(profile)
    throughput, ttft, itl, queued = measure(profile, rate)
    model = analyze(profile, Workload(IN, OUT), rate)
    assert queued < 0.05, "precondition: requests rarely wait for a slot"
    assert throughput == pytest.approx(model.throughput_rps, rel=0.02)
    assert itl == pytest.approx(model.itl_ms, rel=0.03)
    assert ttft == pytest.approx(model.ttft_ms, rel=0.05)


@pytest.mark.parametrize(("batch", "load"), [(4, 0.6), (4, 0.85), (16, 0.85)])
def test_analytic_ttft_is_pessimistic_once_requests_queue_for_a_slot(batch: int, load: float) -> None:
    profile = PerfProfile(alpha=20.58, beta=0.41, gamma=5.2, delta=0.1, max_batch=batch)
    rate = load * service_capacity_rps(profile)
    throughput, ttft, itl, queued = measure(profile, rate)
    model = analyze(profile, Workload(IN, OUT), rate)
    assert queued > 0.2, "precondition: the batch is often full"
    assert throughput == pytest.approx(model.throughput_rps, rel=0.02)
    assert itl == pytest.approx(model.itl_ms, rel=0.03)
    assert model.ttft_ms > ttft and model.ttft_ms < 2.2 * ttft
