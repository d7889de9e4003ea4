"""The policies the simulator compares, on the example cluster: the optimize flow's inputs built from
simulated metrics, saturation-only, Kthena's HPA-style policy, static peak, and the outcome summary."""

from __future__ import annotations

import copy
import dataclasses
import pathlib

import numpy as np
import pytest

from engine.optimize.plan import plan_variants
from engine.optimize.spec import SpecError
from engine.simulate.outcome import requests_met, summarize_outcome
from engine.simulate.policies import POLICIES, cycle_inputs, make_policy, modelplane_policy, peak_loads, run_policy
from engine.simulate.records import Observation, ReplicaGauges, SimConfig, Trace
from engine.simulate.replay import simulate
from engine.simulate.scenario import build_scenario, with_hpa_metric
from tasks.simulate import read_description

REPO = pathlib.Path(__file__).resolve().parents[2]
LLAMA, GRANITE = "llm-serving/meta/llama-3.1-8b", "llm-serving/ibm/granite-13b"
KEYS = [
    "llm-serving/granite-13b-a100",
    "llm-serving/granite-13b-l40s",
    "llm-serving/llama-3-1-8b-a100",
    "llm-serving/llama-3-1-8b-h100",
]


@pytest.fixture(scope="module")
def description():
    return read_description(str(REPO / "deployments" / "examples"), "modelplane-system")


def small_trace(rate: float = 2.0, seconds: float = 600.0, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate * seconds)
    return Trace(
        np.sort(rng.uniform(0, seconds, n)),
        rng.integers(100, 2000, n),
        rng.integers(20, 400, n),
        rng.integers(0, 2, n),
        (GRANITE, LLAMA),
    )


def observation(
    replicas: dict[str, int], running: int = 2, waiting: int = 0, kv: float = 0.1, completed: int = 120
) -> Observation:
    pods = {
        k: [ReplicaGauges(f"{k.split('/')[1]}-{i}", running, waiting, kv, True) for i in range(n)]
        for k, n in replicas.items()
    }
    return Observation(
        time_s=300.0,
        interval_s=60.0,
        replicas=replicas,
        ready=dict(replicas),
        pods=pods,
        completed={LLAMA: completed, GRANITE: completed},
        arrived={LLAMA: completed, GRANITE: completed},
        prompt_tokens={LLAMA: 1000.0 * completed, GRANITE: 800.0 * completed},
        generated_tokens={LLAMA: 200.0 * completed, GRANITE: 150.0 * completed},
    )


def test_cycle_inputs_are_what_the_optimize_flow_builds(description) -> None:
    scenario = build_scenario(description, small_trace(), SimConfig())
    obs = observation(dict(zip(KEYS, [1, 1, 2, 1])))
    inputs = cycle_inputs(scenario, obs)
    assert inputs.current_replicas[("llm-serving", "Deployment", "llama-3-1-8b-a100")] == 2
    load = inputs.loads[("llm-serving", "meta/llama-3.1-8b")]
    assert (load.arrival_rate_rps, load.avg_in_tokens, load.avg_out_tokens) == (2.0, 1000.0, 200.0)
    pods = inputs.pods[("llm-serving", "meta/llama-3.1-8b")]
    assert sorted(p.pod for p in pods) == ["llama-3-1-8b-a100-0", "llama-3-1-8b-a100-1", "llama-3-1-8b-h100-0"]
    decisions = plan_variants(inputs)
    assert all(d.desired is not None and d.ready for d in decisions)
    decide, start = make_policy("modelplane", scenario)
    assert decide(obs) == {f"{d.namespace}/{d.name}": d.desired for d in decisions}
    assert start == dict(zip(KEYS, [1, 1, 2, 1]))  # the Deployments' replicas in the manifests


def test_saturation_only_adds_the_cheapest_replica_when_kv_caches_fill(description) -> None:
    scenario = build_scenario(description, small_trace(), SimConfig())
    decide, _ = make_policy("saturation-only", scenario)
    current = dict(zip(KEYS, [1, 1, 2, 1]))
    calm = decide(observation(current, kv=0.1))
    assert (
        calm[KEYS[0]] == 1 and calm[KEYS[1]] == 1
    )  # granite unchanged (its override: a 2nd non-saturated pod is needed to scale down)
    full = decide(observation(current, kv=0.95, waiting=8))
    assert full["llm-serving/llama-3-1-8b-a100"] == 3  # A100 (40/h) is cheaper than H100 (75/h)
    assert full["llm-serving/llama-3-1-8b-h100"] == 1
    assert description.variants[0].spec.variant_profile, "the scenario's manifests are not modified"


def test_hpa_recommends_from_the_per_replica_metric_and_fills_the_cheapest_group(description) -> None:
    tuned = with_hpa_metric(description, "vllm:num_requests_running", 4.0)
    scenario = build_scenario(tuned, small_trace(), SimConfig())
    decide, _ = make_policy("hpa", scenario)
    current = dict(zip(KEYS, [1, 1, 1, 1]))
    busy = decide(observation(current, running=8))  # 2 pods per model at 2x the target -> 4 per model
    assert busy["llm-serving/llama-3-1-8b-a100"] + busy["llm-serving/llama-3-1-8b-h100"] == 4
    assert busy["llm-serving/llama-3-1-8b-a100"] >= busy["llm-serving/llama-3-1-8b-h100"]
    assert busy["llm-serving/granite-13b-a100"] + busy["llm-serving/granite-13b-l40s"] == 4
    with pytest.raises(ValueError, match="not simulated"):
        with_hpa_metric(description, "vllm:gpu_cache_usage", 1.0)


def test_wva_greedy_scales_from_zero_on_requests_waiting_at_the_gateway() -> None:
    """deployments/simulation (every variant min-replicas 0): 5 minutes of traffic, 10 silent minutes in which
    WVA-greedy scales to zero, then 5 minutes of traffic that it must serve (as WVA's scale-from-zero engine
    does: the gateway's queue brings each variant at zero to one replica, the optimizer sizes it from there)."""
    description = read_description(str(REPO / "deployments" / "simulation"), "modelplane-system")
    busy = small_trace(rate=2.0, seconds=300.0, seed=4)
    later = small_trace(rate=2.0, seconds=300.0, seed=5)
    trace = Trace(
        np.concatenate([busy.arrival_s, later.arrival_s + 900.0]),
        np.concatenate([busy.in_tokens, later.in_tokens]),
        np.concatenate([busy.out_tokens, later.out_tokens]),
        np.concatenate([busy.model_index, later.model_index]),
        busy.models,
    )
    scenario = build_scenario(description, trace, SimConfig(interval_s=60.0, startup_delay_s=120.0))
    assert all(s.min_replicas == 0 for s in scenario.specs)
    result = run_policy("wva-greedy", scenario)
    silent = [c for c in result.cycles if 420.0 <= c.time_s <= 900.0]
    assert any(sum(c.desired.values()) == 0 for c in silent), "the silence takes WVA-greedy to zero replicas"
    after = result.arrival_s >= 900.0
    assert after.sum() > 400
    assert not result.dropped[after].any() and result.completed[after].all()
    # From zero it starts one replica of every variant of the model (WVA scales all inactive variants), 0.1 s
    # after the first request waits (WVA polls the gateway's queue every 100 ms), not at the next cycle.
    first = {m: trace.arrival_s[after & (trace.model_index == i)].min() for i, m in enumerate(trace.models)}
    for model, arrived in first.items():
        woken = next(w for w in result.wakes if w.time_s >= arrived)
        assert woken.time_s == pytest.approx(arrived + 0.1)
        keys = [v.key for v in scenario.variants if v.model == model]
        assert keys and all(woken.desired[k] == 1 for k in keys if woken.replicas[k] == 0)
    waited = result.first_s[after] - result.arrival_s[after]
    assert waited.max() < 120.0 + 0.1 + 5.0  # start-up + poll + prefill: no request waits for a cycle


def test_wva_greedy_leaves_a_model_without_ready_replicas_as_it_is(description) -> None:
    """No ready replica, no vLLM metrics: WVA skips the model, so starting replicas are not taken away."""
    scenario = build_scenario(description, small_trace(), SimConfig())
    decide, _ = make_policy("wva-greedy", scenario)
    current = dict(zip(KEYS, [1, 1, 2, 1]))
    starting = observation(current, completed=0)
    llama = [k for k in KEYS if "llama" in k]
    starting = dataclasses.replace(
        starting,
        ready={k: (0 if k in llama else v) for k, v in current.items()},
        pods={k: ([] if k in llama else p) for k, p in starting.pods.items()},
    )
    decided = decide(starting)
    assert all(decided[k] == current[k] for k in llama)


def test_static_peak_sizes_once_for_the_busiest_interval(description) -> None:
    trace = small_trace(rate=1.0, seconds=900)
    # one busy minute of llama traffic (300 extra requests between 600 s and 660 s)
    times = np.concatenate([trace.arrival_s, np.linspace(600, 659, 300)])
    order = np.argsort(times, kind="stable")
    burst = Trace(
        times[order],
        np.concatenate([trace.in_tokens, np.full(300, 500)])[order],
        np.concatenate([trace.out_tokens, np.full(300, 100)])[order],
        np.concatenate([trace.model_index, np.ones(300, dtype=np.int64)])[order],
        trace.models,
    )
    scenario = build_scenario(description, burst, SimConfig())
    peak = peak_loads(scenario)[("llm-serving", "meta/llama-3.1-8b")]
    assert peak.arrival_rate_rps >= 300 / 60
    result = run_policy("static-peak", scenario)
    assert all(c.desired == c.replicas for c in result.cycles)
    assert sum(result.cycles[0].replicas.values()) > 4


def test_every_policy_runs_and_every_request_is_accounted_for(description) -> None:
    scenario = build_scenario(description, small_trace(rate=3.0, seconds=600), SimConfig(startup_delay_s=60.0))
    for name in POLICIES:
        result = run_policy(name, scenario)
        outcome = summarize_outcome(name, scenario, result)
        assert outcome.requests == len(scenario.trace) == int(result.completed.sum()) + outcome.unserved
        assert 0.0 <= outcome.attainment <= 1.0 and outcome.cost > 0
        assert set(outcome.series["accelerators"]) == {"A100", "H100", "L40S"}
        assert len(outcome.series["time_s"]) == len(result.cycles)


def test_sizing_scale_changes_what_policies_size_for_not_what_is_judged(description) -> None:
    scenario = build_scenario(description, small_trace(), SimConfig(), sizing_ttft_scale=0.5)
    assert scenario.slos[LLAMA].ttft_ms == 500 and scenario.sizing_slo(LLAMA).ttft_ms == 250
    premium = scenario.description.service_classes[("service-classes-config", "premium.yaml")]
    assert premium.slo_for("meta/llama-3.1-8b").ttft_ms == 250
    assert (
        description.service_classes[("service-classes-config", "premium.yaml")].slo_for("meta/llama-3.1-8b").ttft_ms
        == 500
    )


def test_a_variant_without_a_profile_cannot_be_simulated_and_says_which(description) -> None:
    broken = copy.deepcopy(description.variants)
    broken[1].spec.variant_profile = None
    from dataclasses import replace

    with pytest.raises(SpecError, match=r"VariantAutoscaling llm-serving/\S+: required: the simulator serves requests"):
        build_scenario(replace(description, variants=broken), small_trace(), SimConfig())


def test_the_flow_form_offers_exactly_the_simulated_choices() -> None:
    from typing import get_args

    from engine.simulate.bursts import BURSTY_VARIANTS
    from engine.simulate.scenario import HPA_GAUGES
    from flows.simulate import BurstyName, HpaMetric, PolicyName

    assert get_args(PolicyName) == POLICIES
    assert set(get_args(HpaMetric)) == set(HPA_GAUGES)
    assert get_args(BurstyName) == tuple(BURSTY_VARIANTS)


def test_modelplane_keeps_the_scale_down_window_state_between_cycles_as_the_flow_does(description) -> None:
    """The flow writes modelplane.io/scale-down-pending back; the simulated policy must too, or it never scales down."""
    import dataclasses

    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING

    current = dict(zip(KEYS, [7, 4, 1, 3]))
    quiet = observation(current, completed=20)
    from engine.optimize.stabilization import DEFAULT_SCALE_DOWN_WINDOW_S

    scenario = build_scenario(description, small_trace(), SimConfig())
    assert scenario.scale_down_window_s == DEFAULT_SCALE_DOWN_WINDOW_S == 180.0  # the optimize flow's default
    at_once, _ = make_policy("modelplane", dataclasses.replace(scenario, scale_down_window_s=0.0))
    assert sum(at_once(quiet).values()) < sum(current.values())
    decide, _ = make_policy("modelplane", scenario)
    held = [decide(dataclasses.replace(quiet, time_s=300.0 + 60.0 * i)) for i in range(4)]
    assert held[0] == held[1] == held[2] == current  # recommended at 300 s, held through 420 s
    assert sum(held[3].values()) < sum(current.values())  # 480 s: the window has passed
    assert all(ANNOTATION_SCALE_DOWN_PENDING not in v.metadata.annotations for v in description.variants)


def test_after_warmup_counts_only_later_requests_and_later_cost(description) -> None:
    scenario = build_scenario(description, small_trace(rate=3.0, seconds=600), SimConfig(startup_delay_s=60.0))
    result = run_policy("static-peak", scenario)
    whole = summarize_outcome("static-peak", scenario, result)
    later = summarize_outcome("static-peak", scenario, result, warmup_s=300.0)
    assert not whole.after_warmup and later.attainment == whole.attainment
    # Static replicas live the whole replay: the cost from 300 s on is the share of the horizon after it.
    assert later.after_warmup["cost"] == pytest.approx(whole.cost * (result.horizon_s - 300.0) / result.horizon_s)
    ttft_ok = (
        result.ttft_s * 1000.0
        <= np.array([scenario.slos[m].ttft_ms for m in scenario.trace.models])[scenario.trace.model_index]
    )
    itl_ok = (
        result.itl_s * 1000.0
        <= np.array([scenario.slos[m].itl_ms for m in scenario.trace.models])[scenario.trace.model_index]
    ) | (scenario.trace.out_tokens <= 1)
    mask = scenario.trace.arrival_s >= 300.0
    # The per-request verdict every span of a replay is judged by (bench.hourly_attainment reads it per hour).
    assert np.array_equal(requests_met(scenario, result), ttft_ok & itl_ok & result.completed)
    assert later.after_warmup["attainment"] == pytest.approx(
        float(np.mean((ttft_ok & itl_ok & result.completed)[mask]))
    )
    assert later.as_json()["after_warmup"]["warmup_s"] == 300.0


def test_modelplane_hands_the_rates_change_and_noise_to_plan_variants(description, monkeypatch) -> None:
    """The simulated policy gives plan_variants what the flow reads from Prometheus: the largest of the last two
    minute-to-minute changes of the exported rate and their median size (engine.perf.load_trend), so a sustained
    fall skips the scale-down window in both the same way."""
    import dataclasses

    import engine.simulate.policies as policies
    from engine.perf.load_trend import rate_changes, sustained_fall

    seen = []

    def spy(inputs):
        seen.append(inputs.loads[("llm-serving", "meta/llama-3.1-8b")])
        return plan_variants(inputs)

    monkeypatch.setattr(policies, "plan_variants", spy)
    scenario = build_scenario(description, small_trace(), SimConfig())
    decide, _ = make_policy("modelplane", scenario)
    current = dict(zip(KEYS, [7, 4, 1, 3]))
    completions = [120, 123, 123, 120, 120, 90, 60]
    for i, done in enumerate(completions):
        decide(dataclasses.replace(observation(current, completed=done), time_s=60.0 * (i + 1)))
    rates = [c / 60.0 for c in completions]
    assert [(load.recent_change_rps, load.change_noise_rps) for load in seen] == [
        rate_changes(rates[: i + 1]) for i in range(len(rates))
    ]
    assert sustained_fall(seen[-1].recent_change_rps, seen[-1].change_noise_rps)  # -30 twice, noise 3 a minute
    assert not any(sustained_fall(load.recent_change_rps, load.change_noise_rps) for load in seen[:-1])


def test_modelplane_scales_from_zero_at_its_next_cycle_on_requests_waiting_at_the_gateway() -> None:
    """Every variant at zero replicas (min-replicas 0) and 5 silent minutes, then traffic: the requests wait at the
    gateway, and the next optimize cycle reads that queue and starts one replica of each model's cheapest variant
    (engine.optimize.wake), from which the model's own metrics size it. Without the queue a model at zero has no
    metric at all and stayed there, every request dropped."""
    description = read_description(str(REPO / "deployments" / "simulation"), "modelplane-system")
    later = small_trace(rate=2.0, seconds=300.0, seed=5)
    trace = dataclasses.replace(later, arrival_s=later.arrival_s + 300.0)
    scenario = build_scenario(description, trace, SimConfig(interval_s=60.0, startup_delay_s=120.0))
    zero = {v.key: 0 for v in scenario.variants}
    result = simulate(scenario.variants, trace, scenario.config, zero, modelplane_policy(scenario))
    assert all(sum(c.desired.values()) == 0 for c in result.cycles if c.time_s <= 300.0)
    woken = next(c for c in result.cycles if sum(c.desired.values()) > 0)
    assert woken.time_s == 360.0  # the first cycle after the first request
    for model in trace.models:
        assert (
            sum(n for k, n in woken.desired.items() if any(v.key == k and v.model == model for v in scenario.variants))
            == 1
        )
    assert not result.dropped.any() and result.completed.all()
    waited = result.first_s - result.arrival_s
    assert waited.max() < 60.0 + 120.0 + 5.0  # at most a cycle, the start-up and a prefill
