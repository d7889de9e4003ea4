"""The clairvoyant oracle (minimum-cost schedule under start-up delay and inventory), its measured
per-replica capacity, the oracle frontier, and the attainment ceiling of a trace."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from engine.perf.queueing import SLO, PerfProfile
from engine.simulate.frontier import Limits
from engine.simulate.oracle import (
    CapacityCurve,
    attainment_allowed,
    attainment_ceiling,
    measure_capacity,
    oracle_cost_at,
    oracle_policy,
    solve_schedule,
)
from engine.simulate.outcome import summarize_outcome
from engine.simulate.policies import run_policy
from engine.simulate.records import SimConfig, Trace, VariantModel
from engine.simulate.replay import simulate
from engine.simulate.scenario import ClusterDescription, Scenario, build_scenario
from tasks.simulate import read_description

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = "ns/model"
PROFILE = PerfProfile(alpha=20.0, beta=0.4, gamma=5.0, delta=0.1, max_batch=16)


def scenario_of(
    variants: list[VariantModel], trace: Trace, config: SimConfig, inventory: dict[str, int] | None = None
) -> Scenario:
    description = ClusterDescription(
        variants=[],
        current_replicas={},
        accelerator_costs={},
        service_classes={},
        saturation_data={},
        inventory=inventory,
    )
    return Scenario(description, [], variants, {MODEL: SLO(ttft_ms=500, itl_ms=50)}, {MODEL: 1}, trace, config)


def step_trace() -> Trace:
    """1 req/s for 10 minutes, 3 req/s for 10 minutes, 1 req/s for 10 minutes; one-token requests."""
    arrivals = np.concatenate([np.arange(0, 600, 1.0), np.arange(600, 1200, 1 / 3), np.arange(1200, 1800, 1.0)])
    n = len(arrivals)
    return Trace(arrivals, np.full(n, 10), np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64), (MODEL,))


def test_on_a_step_trace_the_oracle_costs_the_hand_computed_minimum() -> None:
    v = VariantModel("ns/a", MODEL, "a", "A100", 1, 40.0, PROFILE, 10**9)
    config = SimConfig(interval_s=60.0, startup_delay_s=120.0, horizon_s=1800.0)
    scenario = scenario_of([v], step_trace(), config)
    run = oracle_policy(scenario, {"ns/a": 1.0})  # one replica carries 1 req/s
    # One replica throughout; two more from 480 s (ready at 600 s, when the step starts) until the step ends at 1200 s.
    assert [s["ns/a"] for s in run.schedule[:31]] == [1] * 8 + [3] * 12 + [1] * 10 + [0]
    result = simulate([v], scenario.trace, config, run.initial, run.controller)
    hand = (1 * 1800 + 2 * (1200 - 480)) / 3600 * 40.0  # replica-seconds x 40 per hour = 36.0
    assert result.cost() == pytest.approx(hand, rel=1e-4)
    assert result.completed.all() and np.all(result.ttft_s < 0.5)  # every request met the SLO at that cost


def test_the_oracle_keeps_a_replica_through_a_lull_shorter_than_its_startup_and_respects_inventory() -> None:
    a = VariantModel("ns/a", MODEL, "a", "A100", 1, 40.0, PROFILE, 10**9)  # 40 per req/s
    b = VariantModel("ns/b", MODEL, "b", "H100", 1, 100.0, PROFILE, 10**9)  # 50 per req/s
    config = SimConfig(interval_s=60.0, startup_delay_s=120.0)
    scenario = scenario_of([a, b], step_trace(), config, inventory={"A100": 2, "H100": 4})
    # 3 req/s: two A100 (the inventory) and one H100 (140) beat two H100 (200) or an H100 alone (short).
    (one,) = solve_schedule(scenario, {"ns/a": 1.0, "ns/b": 2.0}, np.array([[3.0]]))[0]
    assert one == {"ns/a": 1, "ns/b": 1}
    # A lull of one interval (shorter than the 2-interval start-up): keep the replica rather than restart it.
    rates = np.array([[1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    lull = solve_schedule(scenario, {"ns/a": 1.0, "ns/b": 2.0}, rates)[0]
    assert [s["ns/a"] for s in lull] == [1, 1, 1, 1, 1, 0, 0, 0, 0]
    # With the inventory short, the schedule uses all of it and serves what it can.
    short = solve_schedule(scenario, {"ns/a": 1.0, "ns/b": 2.0}, np.array([[20.0]]))[0]
    assert short == [{"ns/a": 2, "ns/b": 4}]


def test_prompts_too_long_for_the_cheap_variant_are_carried_by_the_fast_one() -> None:
    cheap = VariantModel("ns/a", MODEL, "a", "A100", 1, 40.0, PROFILE, 10**9)  # 500 ms TTFT up to 4,950 tokens
    fast = VariantModel(
        "ns/b", MODEL, "b", "H100", 1, 100.0, PerfProfile(12.0, 0.2, 5.0, 0.05, 16), 10**9
    )  # up to 9,900
    scenario = scenario_of([cheap, fast], step_trace(), SimConfig())
    capacity = {"ns/a": 1.0, "ns/b": 1.0}
    assert solve_schedule(scenario, capacity, np.array([[3.0]]))[0] == [{"ns/a": 3, "ns/b": 0}]
    # 1 of the 3 req/s has a prompt beyond 4,950 tokens: one fast replica for it, the cheap ones for the rest.
    assert solve_schedule(scenario, capacity, np.array([[3.0]]), {(0, 4950.0): np.array([1.0])})[0] == [
        {"ns/a": 2, "ns/b": 1}
    ]


def test_the_same_schedule_is_solved_under_any_cpu_load() -> None:
    """The solve stops on a gap or a node count, never on the clock: the schedule (and where the solve stopped)
    is the same on an idle machine and on one whose CPUs are busy, proven optimal or cut short by the node limit."""
    a = VariantModel("ns/a", MODEL, "a", "A100", 1, 40.0, PROFILE, 10**9)
    b = VariantModel("ns/b", MODEL, "b", "H100", 1, 75.0, PROFILE, 10**9)
    c = VariantModel("ns/c", MODEL, "c", "L40S", 2, 44.0, PROFILE, 10**9)
    config = SimConfig(interval_s=60.0, startup_delay_s=120.0)
    scenario = scenario_of([a, b, c], step_trace(), config, inventory={"A100": 6, "H100": 4, "L40S": 8})
    rng = np.random.default_rng(2)
    rates = (np.abs(np.cumsum(rng.normal(0, 1.0, 45))) + rng.uniform(0.5, 3, 45))[
        None, :
    ]  # a random walk, 0.5-5.4 req/s
    capacity = {"ns/a": 0.93, "ns/b": 1.87, "ns/c": 1.21}  # fractional: the LP relaxation needs branching

    def solves() -> list[tuple[list[dict[str, int]], object]]:
        return [solve_schedule(scenario, capacity, rates, {}, nodes) for nodes in (20_000, 3)]

    idle = solves()
    (_, proven), (_, stopped) = idle
    assert proven.optimal and proven.nodes > 3  # non-trivial: it branched
    assert not stopped.optimal and stopped.nodes == 3  # the node limit cut this one short, its gap unproven
    # Busy: this thread and one process spinning share one CPU, so the solve gets about half of it whatever the
    # machine's other cores do (one spinning process where unpinned it took one per core and more).
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # this thread; the spinning process inherits it
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = solves()
    finally:
        burner.kill()
        burner.wait()
        os.sched_setaffinity(0, cpus)
    assert loaded == idle


def test_capacity_is_read_off_a_measured_curve() -> None:
    curve = CapacityCurve((0.1, 0.2, 0.4), (0.98, 0.9, 0.7))
    assert curve.capacity(0.9) == pytest.approx(0.2)
    assert curve.capacity(0.8) == pytest.approx(0.3)
    assert curve.capacity(0.99) == pytest.approx(0.1)  # unreachable: the best measured rate
    assert curve.capacity(0.5) == pytest.approx(0.4)


def test_measured_capacity_falls_as_the_attainment_target_rises_and_the_replay_meets_its_target() -> None:
    rng = np.random.default_rng(2)
    n = 6000
    arrivals = np.sort(rng.uniform(0, 1800, n))
    trace = Trace(arrivals, rng.integers(50, 1500, n), rng.integers(10, 200, n), np.zeros(n, dtype=np.int64), (MODEL,))
    v = VariantModel("ns/a", MODEL, "a", "A100", 1, 40.0, PROFILE, 16 * 2048)
    scenario = scenario_of([v], trace, SimConfig(interval_s=60.0, startup_delay_s=120.0))
    curve = measure_capacity(scenario)["ns/a"]
    assert list(curve.attainment) == sorted(curve.attainment, reverse=True)
    assert curve.capacity(0.95) < curve.capacity(0.8) < curve.capacity(0.5)
    run = oracle_policy(scenario, {"ns/a": curve.capacity(0.9)})
    result = simulate([v], trace, scenario.config, run.initial, run.controller)
    met = (result.ttft_s <= 0.5) & (result.itl_s <= 0.05) & result.completed
    assert met.mean() > 0.85
    assert measure_capacity(scenario) == measure_capacity(scenario)  # seeded: the same curve every time


def test_oracle_cost_at_equal_attainment_interpolates_its_frontier() -> None:
    frontier = [(0.80, 100.0), (0.90, 150.0), (0.85, 160.0), (0.95, 300.0)]  # (0.85, 160) is dominated
    assert oracle_cost_at(frontier, 0.85) == pytest.approx(125.0)
    assert oracle_cost_at(frontier, 0.80) == pytest.approx(100.0)
    assert oracle_cost_at(frontier, 0.70) is None  # below the oracle's lowest point: unknown
    assert oracle_cost_at(frontier, 0.95) == pytest.approx(300.0)
    assert oracle_cost_at(frontier, 0.96) is None


def test_attainment_ceiling_counts_requests_no_accelerator_serves_within_the_slo_at_batch_one() -> None:
    description = read_description(str(REPO / "deployments" / "examples"), "modelplane-system")
    granite, llama = "llm-serving/ibm/granite-13b", "llm-serving/meta/llama-3.1-8b"
    # llama within 500 ms at batch 1: H100 (3.1 + 0.06 x prompt) up to 8,281 tokens; granite within 800 ms: A100 up to 5,277.
    trace = Trace(
        np.arange(4.0), np.array([8000, 9000, 5000, 6000]), np.full(4, 50), np.array([1, 1, 0, 0]), (granite, llama)
    )
    scenario = build_scenario(description, trace, SimConfig())
    assert attainment_ceiling(scenario) == {"all": 0.5, granite: 0.5, llama: 0.5}


def test_what_the_targets_allow_over_all_requests_counts_each_model_at_its_target_or_its_ceiling() -> None:
    """Attainment over all requests weighs the models by their requests: a target above a model's ceiling caps what
    the mix can reach while every model meets all it can."""
    description = read_description(str(REPO / "deployments" / "examples"), "modelplane-system")
    granite, llama = "llm-serving/ibm/granite-13b", "llm-serving/meta/llama-3.1-8b"
    # granite: 3 requests, 1 within reach (ceiling 1/3); llama: 1 request, within reach (ceiling 1).
    trace = Trace(
        np.arange(4.0), np.array([9000, 9000, 5000, 6000]), np.full(4, 50), np.array([0, 0, 0, 1]), (granite, llama)
    )
    ceilings = attainment_ceiling(build_scenario(description, trace, SimConfig()))
    assert attainment_allowed(trace, ceilings, {granite: 0.9, llama: 0.9}) == pytest.approx((3 * (1 / 3) + 0.9) / 4)
    assert attainment_allowed(trace, ceilings, {granite: 0.2, llama: 0.9}) == pytest.approx((3 * 0.2 + 0.9) / 4)
    # A model without a target counts at its ceiling.
    assert attainment_allowed(trace, ceilings, {granite: 0.2}) == pytest.approx((3 * 0.2 + 1.0) / 4)

    limits = Limits(ceilings, [], {granite: 0.9, llama: 0.9}, 0.475)
    assert limits.beyond_ceiling() == {granite: (0.9, pytest.approx(1 / 3))}
    assert limits.out_of_reach() == (
        f"{granite}'s target 90.0% is above its ceiling 33.3%: every model at its target or ceiling gives 47.5% over "
        "all requests"
    )
    assert Limits(ceilings, [], {granite: 0.3, llama: 0.9}, 0.45).out_of_reach() == ""


def test_the_oracle_policy_runs_on_the_example_cluster() -> None:
    description = read_description(str(REPO / "deployments" / "examples"), "modelplane-system")
    rng = np.random.default_rng(0)
    n = 1800
    trace = Trace(
        np.sort(rng.uniform(0, 600, n)),
        rng.integers(100, 2000, n),
        rng.integers(20, 300, n),
        rng.integers(0, 2, n),
        ("llm-serving/ibm/granite-13b", "llm-serving/meta/llama-3.1-8b"),
    )
    scenario = build_scenario(description, trace, SimConfig())
    outcome = summarize_outcome("oracle", scenario, run_policy("oracle", scenario))
    assert outcome.unserved == 0 and outcome.attainment > 0.8 and outcome.cost > 0
