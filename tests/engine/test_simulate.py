"""The serving simulator's invariants: every request accounted for, batch and KV limits, start-up delay,
drain on scale-down, gateway timeout, determinism, and the metrics it exports."""

from __future__ import annotations

import numpy as np
import pytest

from engine.perf.queueing import PerfProfile
from engine.simulate.records import Observation, SimConfig, Trace, VariantModel, poisson_trace
from engine.simulate.replay import simulate
from engine.simulate.windows import window_aggregates

PROFILE = PerfProfile(alpha=20.0, beta=0.4, gamma=5.0, delta=0.1, max_batch=16)


def variant(
    key: str = "ns/a", profile: PerfProfile = PROFILE, kv: int = 10**9, model: str = "default/model"
) -> VariantModel:
    return VariantModel(key, model, key.split("/")[1], "A100", 1, 40.0, profile, kv)


def varied_trace(rate: float, seconds: float, seed: int = 3) -> Trace:
    """Poisson arrivals with prompt and output lengths drawn from a skewed distribution."""
    rng = np.random.default_rng(seed)
    return poisson_trace(rate, seconds, rng.integers(10, 2000, 500), rng.integers(1, 400, 500), seed=seed)


def test_every_request_completes_once_in_order_of_its_phases() -> None:
    trace = varied_trace(3.0, 600)
    result = simulate([variant()], trace, SimConfig(horizon_s=600), {"ns/a": 2})
    assert result.completed.all() and not result.dropped.any()
    assert np.all(result.arrival_s <= result.admit_s)
    assert np.all(result.admit_s <= result.first_s) and np.all(result.first_s <= result.done_s)
    # one-token requests finish at their first token; the others decode out-1 tokens at >= alpha each
    single = trace.out_tokens == 1
    assert np.allclose(result.done_s[single], result.first_s[single])
    decode = (result.done_s - result.first_s)[~single]
    assert np.all(decode >= (trace.out_tokens[~single] - 1) * PROFILE.alpha / 1000.0 * (1 - 1e-9))
    assert set(result.replica_index.tolist()) <= {0, 1}


def test_batch_never_exceeds_max_batch_and_the_excess_queues() -> None:
    small = PerfProfile(alpha=20.0, beta=0.4, gamma=5.0, delta=0.1, max_batch=2)
    trace = poisson_trace(4.0, 300, 200, 100, seed=1)
    result = simulate([variant(profile=small)], trace, SimConfig(horizon_s=300), {"ns/a": 1})
    assert max(result.max_running_seen.values()) == 2
    assert np.max(result.admit_s - result.arrival_s) > 1.0  # requests waited in the queue
    # with two slots, never more than two requests between admission and completion at any instant
    events = sorted([(t, 1) for t in result.admit_s] + [(t, -1) for t in result.done_s], key=lambda e: (e[0], e[1]))
    running = np.cumsum([d for _, d in events])
    assert running.max() <= 2


def test_kv_cache_capacity_limits_admission() -> None:
    # 3 prompts of 1,000 tokens fit in 3,500 tokens of KV cache; the fourth waits although slots are free.
    trace = Trace(
        np.array([0.0, 0.001, 0.002, 0.003]),
        np.full(4, 1000),
        np.full(4, 50),
        np.zeros(4, dtype=np.int64),
        ("default/model",),
    )
    result = simulate([variant(kv=3500)], trace, SimConfig(horizon_s=1.0), {"ns/a": 1})
    assert result.completed.all()
    assert np.all(result.admit_s[:3] < 0.01)
    assert result.admit_s[3] >= result.done_s[:3].min() - 1e-9


def test_new_replicas_become_ready_after_the_startup_delay_and_only_then_serve() -> None:
    trace = poisson_trace(2.0, 900, 300, 100, seed=2)
    config = SimConfig(interval_s=60.0, startup_delay_s=150.0, horizon_s=900)
    result = simulate([variant()], trace, config, {"ns/a": 1}, controller=lambda obs: {"ns/a": 3})
    new = np.flatnonzero(result.replica_created_s > 0)
    assert len(new) == 2
    assert np.allclose(result.replica_created_s[new], 60.0)
    assert np.allclose(result.replica_ready_s[new] - result.replica_created_s[new], 150.0)
    for replica in new:
        served = result.replica_index == replica
        assert served.any(), "a ready replica takes traffic"
        assert result.arrival_s[served].min() >= 210.0 - 1e-9


def test_removed_replicas_drain_and_nothing_is_lost() -> None:
    trace = poisson_trace(6.0, 600, 500, 200, seed=4)
    decisions = iter([{"ns/a": 3}, {"ns/a": 1}])

    def controller(obs: Observation) -> dict[str, int]:
        return next(decisions, {"ns/a": 1})

    config = SimConfig(interval_s=120.0, startup_delay_s=0.0, horizon_s=600)
    result = simulate([variant()], trace, config, {"ns/a": 3}, controller)
    assert result.completed.all() and not result.dropped.any()
    removed = np.flatnonzero(~np.isnan(result.replica_removed_s))
    assert len(removed) == 2
    for replica in removed:
        served = result.replica_index == replica
        # it was busy when removed at t=240, finished what it had, and took nothing after
        assert result.replica_removed_s[replica] > 240.0
        assert np.isclose(result.replica_removed_s[replica], result.done_s[served].max())
        assert result.arrival_s[served].max() <= 240.0
    # cost: the drained replicas are paid until they left
    hours = result.accelerator_hours()["ns/a"]
    expected = (600 + sum(result.replica_removed_s[r] for r in removed)) / 3600
    assert hours == pytest.approx(expected)


def test_without_a_ready_replica_requests_wait_at_the_gateway_then_time_out() -> None:
    trace = poisson_trace(1.0, 600, 100, 20, seed=5)
    config = SimConfig(interval_s=300.0, startup_delay_s=30.0, gateway_timeout_s=120.0, horizon_s=600)
    result = simulate([variant()], trace, config, {"ns/a": 0}, controller=lambda obs: {"ns/a": 1})
    # the replica requested at t=300 is ready at 330: requests older than 120 s by then were dropped
    ready = 330.0
    assert np.all(result.dropped == (result.arrival_s < ready - 120.0))
    assert result.completed[result.arrival_s >= ready - 120.0].all()
    waited = (~result.dropped) & (result.arrival_s < ready)
    assert np.all(result.admit_s[waited] >= ready) and result.admit_s[waited].min() == ready


def test_the_controller_sees_the_requests_waiting_at_the_gateway() -> None:
    trace = poisson_trace(1.0, 600, 100, 20, seed=5)
    seen: list[Observation] = []

    def controller(obs: Observation) -> dict[str, int]:
        seen.append(obs)
        return {"ns/a": 1} if obs.time_s >= 300 else {}

    config = SimConfig(interval_s=100.0, startup_delay_s=150.0, gateway_timeout_s=120.0, horizon_s=600)
    result = simulate([variant()], trace, config, {"ns/a": 0}, controller)
    arrivals = result.arrival_s
    for obs in seen:
        t = obs.time_s
        # With no ready replica: what arrived within the timeout; with the replica ready (t >= 450): nothing.
        held = ((arrivals <= t) & (arrivals >= t - 120.0)).sum() if t < 450 else 0
        assert obs.gateway_waiting == {"default/model": held}, t
    assert [o.gateway_waiting["default/model"] > 0 for o in seen] == [True, True, True, True, False, False]


def test_a_gateway_hook_scales_from_zero_between_cycles() -> None:
    """The hook sees the cluster gateway_poll_s after a request starts waiting for a model with a variant at zero;
    once that variant has a replica (starting), waiting requests do not call it again."""
    trace = poisson_trace(1.0, 600, 100, 20, seed=5)
    seen: list[float] = []

    def hook(obs: Observation) -> dict[str, int]:
        seen.append(obs.time_s)
        return {"ns/a": 1} if obs.replicas["ns/a"] == 0 and obs.gateway_waiting["default/model"] else {}

    config = SimConfig(interval_s=300.0, startup_delay_s=30.0, horizon_s=600, gateway_poll_s=0.1)
    result = simulate([variant()], trace, config, {"ns/a": 0}, controller=lambda obs: {}, gateway_hook=hook)
    first = float(result.arrival_s[0])
    assert seen == [pytest.approx(first + 0.1)]
    assert [(w.time_s, w.replicas, w.desired) for w in result.wakes] == [(seen[0], {"ns/a": 0}, {"ns/a": 1})]
    assert result.replica_ready_s.tolist() == [pytest.approx(first + 30.1)]
    assert not result.dropped.any() and result.completed.all()


def test_same_seed_same_result_and_jitter_changes_it() -> None:
    trace = varied_trace(3.0, 300)
    config = SimConfig(horizon_s=300, prefill_jitter=0.1, seed=7)
    a = simulate([variant()], trace, config, {"ns/a": 2})
    b = simulate([variant()], trace, config, {"ns/a": 2})
    c = simulate([variant()], trace, SimConfig(horizon_s=300, prefill_jitter=0.1, seed=8), {"ns/a": 2})
    assert np.array_equal(a.done_s, b.done_s) and np.array_equal(a.first_s, b.first_s)
    assert not np.array_equal(a.first_s, c.first_s)


def test_router_sends_each_request_to_the_least_loaded_replica_of_its_model() -> None:
    trace = Trace(
        np.array([0.0, 0.0, 0.0, 0.0]), np.full(4, 100), np.full(4, 500), np.array([0, 0, 1, 1]), ("m/one", "m/two")
    )
    one, two = variant("ns/one", model="m/one"), variant("ns/two", model="m/two")
    result = simulate([one, two], trace, SimConfig(horizon_s=1.0), {"ns/one": 2, "ns/two": 1})
    assert sorted(result.replica_index[:2].tolist()) == [0, 1]  # spread over model one's two replicas
    assert result.replica_index[2:].tolist() == [2, 2]
    assert result.variant_index.tolist() == [0, 0, 1, 1]


def test_controller_sees_the_gauges_vllm_exports() -> None:
    seen: list[Observation] = []

    def controller(obs: Observation) -> dict[str, int]:
        seen.append(obs)
        return {}

    small = PerfProfile(alpha=20.0, beta=0.4, gamma=5.0, delta=0.1, max_batch=4)
    trace = poisson_trace(3.0, 300, 1000, 300, seed=6)
    simulate(
        [variant(profile=small, kv=8000)], trace, SimConfig(interval_s=60.0, horizon_s=300), {"ns/a": 1}, controller
    )
    assert [o.time_s for o in seen] == [60.0, 120.0, 180.0, 240.0, 300.0]
    gauges = [g for o in seen for g in o.pods["ns/a"]]
    assert all(g.running <= 4 and 0.0 <= g.kv_cache_usage <= 1.0 for g in gauges)
    assert any(g.waiting > 0 for g in gauges), "an overloaded replica shows a queue"
    assert sum(o.arrived["default/model"] for o in seen) == int((trace.arrival_s < 300).sum())
    assert all(o.completed["default/model"] > 0 for o in seen)


def test_window_aggregates_match_the_request_records() -> None:
    trace = varied_trace(2.0, 1200)
    result = simulate([variant()], trace, SimConfig(horizon_s=1200), {"ns/a": 1})
    agg = window_aggregates(result, 300.0)["ns/a"]
    inside = result.done_s < 1200
    assert agg["count"].sum() == inside.sum()
    assert agg["ttft_sum"].sum() == pytest.approx(result.ttft_s[inside].sum())
    assert agg["itl_count"].sum() == (trace.out_tokens[inside] - 1).sum()
    # Little's law: mean running x window = time spent running by everyone inside the window
    occupancy = sum(max(0.0, min(d, 1200) - a) for a, d in zip(result.admit_s, result.done_s))
    assert agg["running_avg"].sum() * 300 == pytest.approx(occupancy, rel=1e-9)
    assert np.all(np.diff(agg["ttft_buckets"], axis=1) >= 0)  # cumulative buckets


def test_per_replica_histograms_add_up_to_the_variant() -> None:
    trace = varied_trace(4.0, 900)
    result = simulate([variant()], trace, SimConfig(horizon_s=900), {"ns/a": 3})
    per_variant = window_aggregates(result, 300.0)["ns/a"]
    per_pod = window_aggregates(result, 300.0, by="replica")
    assert sorted(per_pod) == ["a-0", "a-1", "a-2"]
    for key in ("count", "ttft_sum", "itl_count", "itl_buckets", "ttft_buckets", "running_avg"):
        assert np.allclose(sum(p[key] for p in per_pod.values()), per_variant[key]), key
    # every output token after the first is in the ITL histogram's last bucket
    assert np.allclose(per_variant["itl_buckets"][:, -1], per_variant["itl_count"])
