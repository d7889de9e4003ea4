"""Attainment measured from the simulator's vLLM histograms against the simulator's exact per-request attainment.

Replays of a slice of the conversation trace (deployments/traces) on the simulation cluster: the simulator
exports, per interval, the TTFT and request-ITL bucket counts vLLM would (vLLM's bucket bounds); summed over the
run they are what ``increase(...[W])`` returns over the whole window.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib

import numpy as np
import pytest

from engine.simulate.policies import make_policy
from engine.simulate.records import Observation, SimConfig, SimResult
from engine.simulate.replay import simulate
from engine.simulate.scenario import build_scenario
from engine.simulate.trace import TraceShape
from engine.simulate.windows import ITL_BUCKETS_S, TTFT_BUCKETS_S
from engine.slo.measure import JOINT, JOINT_ESTIMATES, cleaned, measure_attainment, share_within
from tasks.simulate import read_description, read_trace

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACE = REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"
LLAMA, GRANITE = "llm-serving/meta/llama-3.1-8b", "llm-serving/ibm/granite-13b"
# The simulation cluster's premium targets (500 ms / 24 ms, 800 ms / 40 ms) with each ITL moved to the vLLM bucket
# bound above it, and the TTFTs to bucket bounds: on a bound the histogram share is exact.
EDGE_TARGETS = {LLAMA: (500.0, 25.0), GRANITE: (1000.0, 50.0)}


@functools.cache
def replay(policy: str, prompt_scale: int) -> tuple[SimResult, tuple[Observation, ...]]:
    """A 10-minute slice replayed under ``policy``, with every observation the controller saw."""
    description = read_description(str(REPO / "deployments" / "simulation"), "modelplane-system")
    models = {f"{v.metadata.namespace}/{v.spec.model_id}": 1.0 for v in description.variants}
    trace = read_trace(str(TRACE), TraceShape(models, duration_s=600.0))
    trace = dataclasses.replace(trace, in_tokens=trace.in_tokens * prompt_scale)
    # Cycles run on past the last arrival until every request has drained, so every request is observed.
    config = SimConfig(interval_s=60.0, startup_delay_s=120.0, horizon_s=trace.duration_s + 600.0)
    scenario = build_scenario(description, trace, config)
    controller, start = make_policy(policy, scenario)
    seen: list[Observation] = []

    def recording(observation: Observation) -> dict[str, int]:
        seen.append(observation)
        return dict(controller(observation))

    result = simulate(scenario.variants, trace, config, start, recording, routing=scenario.routing)
    return result, tuple(seen)


def exact_attainment(result: SimResult, model: str, ttft_ms: float, itl_ms: float) -> float:
    """The simulator's per-request attainment of the completed requests (engine.simulate.outcome's rule)."""
    trace = result.trace
    served = (trace.model_index == trace.models.index(model)) & result.completed
    met = served & (result.ttft_s * 1000.0 <= ttft_ms) & ((result.itl_s * 1000.0 <= itl_ms) | (trace.out_tokens <= 1))
    return float(met.sum() / served.sum())


def histograms(seen: tuple[Observation, ...], model: str) -> tuple[list[tuple[float, float]], ...]:
    """The run's TTFT and request-ITL bucket increases of ``model`` as ``[(le, count), ..., (inf, total)]``."""
    ttft = np.sum([o.ttft_buckets[model] for o in seen], axis=0)
    itl = np.sum([o.itl_buckets[model] for o in seen], axis=0)
    return (
        list(zip([*TTFT_BUCKETS_S, math.inf], ttft.tolist())),
        list(zip([*ITL_BUCKETS_S, math.inf], itl.tolist())),
    )


@pytest.mark.parametrize("model", [LLAMA, GRANITE])
def test_measured_attainment_is_within_one_point_of_the_exact_one(model: str) -> None:
    result, seen = replay("modelplane", 1)
    ttft, itl = histograms(seen, model)
    ttft_ms, itl_ms = EDGE_TARGETS[model]
    measured = measure_attainment(ttft, itl, ttft_ms, itl_ms)
    exact = exact_attainment(result, model, ttft_ms, itl_ms)
    assert measured.attained is not None and abs(measured.attained - exact) <= 0.01, (measured, exact)
    served = int(((result.trace.model_index == result.trace.models.index(model)) & result.completed).sum())
    assert measured.requests == served and measured.note == ""


def test_joint_estimates_on_replays() -> None:
    """Which joint estimate is closest to the exact attainment: min (the chosen one), product or Fréchet."""
    errors: dict[str, list[float]] = {name: [] for name in JOINT_ESTIMATES}
    for policy, scale in (("modelplane", 3), ("hpa", 1), ("wva-greedy", 2)):
        result, seen = replay(policy, scale)
        for model in (LLAMA, GRANITE):
            ttft, itl = histograms(seen, model)
            for ttft_ms, itl_ms in ((500.0, 25.0), (500.0, 50.0), (1000.0, 50.0), (2500.0, 75.0)):
                a = share_within(ttft, ttft_ms / 1000.0, "TTFT").share
                b = share_within(itl, itl_ms / 1000.0, "ITL").share
                assert a is not None and b is not None
                exact = exact_attainment(result, model, ttft_ms, itl_ms)
                for name, estimate in JOINT_ESTIMATES.items():
                    errors[name].append(abs(estimate(a, b) - exact))
    mean = {name: float(np.mean(e)) for name, e in errors.items()}
    assert min(mean, key=mean.__getitem__) == JOINT == "min", mean
    assert mean["min"] < 0.005 and mean["product"] > 2 * mean["min"] and mean["frechet"] > 2 * mean["min"], mean


def test_a_target_inside_a_coarse_bucket_is_bounded_by_the_bucket_and_said_so() -> None:
    """The premium ITL targets (24 ms, 40 ms) lie inside vLLM's 10-25 and 25-50 ms buckets: the measured share
    is interpolated, so it lies between the shares at the bucket's bounds, and the note says so."""
    _, seen = replay("modelplane", 1)
    for model, target_ms, lower, upper in ((LLAMA, 24.0, 0.010, 0.025), (GRANITE, 40.0, 0.025, 0.050)):
        _, itl = histograms(seen, model)
        inside = share_within(itl, target_ms / 1000.0, "ITL target")
        low, high = share_within(itl, lower, "").share, share_within(itl, upper, "").share
        assert inside.share is not None and low is not None and high is not None
        assert low <= inside.share <= high
        assert inside.note == (
            f"ITL target {target_ms:g} ms lies between buckets {lower * 1000:g} ms and {upper * 1000:g} ms: interpolated"
        )


def test_counts_that_are_no_numbers_leave_the_attainment_unknown() -> None:
    """Bucket increases of +Inf, 1e999 (read as +Inf) or below 0 are no request counts: left out as NaN is, so
    without a +Inf bucket the attainment is unknown (never a count of infinitely many requests)."""
    assert cleaned([(0.5, 10.0), (1.0, math.inf), (2.0, -4.0), (math.inf, 30.0)]) == [(0.5, 10.0), (math.inf, 30.0)]
    for bad in (math.inf, -1.0, math.nan):
        ttft = [(0.5, 900.0), (math.inf, bad)]
        measured = measure_attainment(ttft, [(0.01, 1000.0), (math.inf, 1000.0)], 500.0, 10.0)
        assert measured.attained is None and measured.ttft_share is None, measured
        assert measured.requests is None or math.isfinite(measured.requests), measured
        assert "TTFT" in measured.note, measured
