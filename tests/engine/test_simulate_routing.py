"""The simulated gateway's routers: least outstanding requests (default), llm-d/Kthena-style queue and
KV-cache load, and latency prediction from each replica's profile."""

from __future__ import annotations

import numpy as np
import pytest

from engine.perf.queueing import PerfProfile
from engine.simulate.records import Routing, SimConfig, Trace, VariantModel, poisson_trace
from engine.simulate.replay import simulate

FAST = PerfProfile(alpha=12.0, beta=0.2, gamma=3.0, delta=0.06, max_batch=64)
SLOW = PerfProfile(alpha=20.0, beta=0.4, gamma=5.0, delta=0.18, max_batch=64)
MODEL = "default/model"


def variant(key: str, profile: PerfProfile, kv: int = 64 * 2048) -> VariantModel:
    return VariantModel(key, MODEL, key.split("/")[1], "A100", 1, 40.0, profile, kv)


def test_least_load_sends_the_next_request_away_from_the_replica_whose_kv_cache_is_full() -> None:
    # r0 (10,000-token prompt) -> replica 0; r1 (10 tokens) -> replica 1; r2 sees one outstanding request on each.
    trace = Trace(
        np.array([0.0, 0.001, 0.002]),
        np.array([10_000, 10, 10]),
        np.array([500, 500, 500]),
        np.zeros(3, dtype=np.int64),
        (MODEL,),
    )
    pool = [variant("ns/a", FAST), variant("ns/b", FAST)]
    start = {"ns/a": 1, "ns/b": 1}
    balanced = simulate(pool, trace, SimConfig(horizon_s=1.0), start)
    loaded = simulate(pool, trace, SimConfig(horizon_s=1.0), start, routing=Routing("least-load"))
    assert balanced.replica_index.tolist() == [0, 1, 0]  # a tie on outstanding requests: the first replica
    assert loaded.replica_index.tolist() == [0, 1, 1]  # replica 0 holds 10,000 tokens of KV cache


def test_least_latency_routes_long_prompts_to_the_faster_replica_and_meets_more_of_the_slo() -> None:
    rng = np.random.default_rng(5)
    trace = poisson_trace(1.5, 900, rng.integers(200, 4000, 400), rng.integers(20, 200, 400), seed=5)
    pool = [variant("ns/slow", SLOW), variant("ns/fast", FAST)]
    start = {"ns/slow": 1, "ns/fast": 1}
    slo = (0.5, 0.03)  # TTFT 500 ms, ITL 30 ms
    outcomes = {}
    for router in ("least-outstanding", "least-latency"):
        result = simulate(pool, trace, SimConfig(horizon_s=900), start, routing=Routing(router, slo_s={MODEL: slo}))
        met = (result.ttft_s <= slo[0]) & ((result.itl_s <= slo[1]) | (trace.out_tokens <= 1)) & result.completed
        slow = result.variant_index == 0
        long = trace.in_tokens > 2000
        outcomes[router] = (float(met.mean()), float(slow.mean()), float(slow[long].mean()))
    balanced, predicted = outcomes["least-outstanding"], outcomes["least-latency"]
    assert 0.4 < balanced[1] < 0.6  # requests balanced: about half on the slow replica
    assert predicted[2] < balanced[2] - 0.2  # long prompts move to the fast replica (44 % -> 12 %)
    assert predicted[0] > balanced[0] + 0.05  # and more requests meet the SLO (72.7 % -> 83.7 %)


def test_an_unknown_router_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown router 'random'"):
        Routing("random")
    with pytest.raises(ValueError, match="unknown router 'x'"):
        Routing(per_model={MODEL: "x"})
    assert Routing(per_model={MODEL: "least-load"}).router_of(MODEL) == "least-load"
    assert Routing(per_model={MODEL: "least-load"}).router_of("other/model") == "least-outstanding"


def test_the_cluster_says_which_router_a_model_is_behind() -> None:
    import copy
    import dataclasses
    import pathlib

    from engine.optimize.spec import SpecError
    from engine.simulate.scenario import build_scenario
    from tasks.simulate import read_description, routed_models

    granite, llama = "llm-serving/ibm/granite-13b", "llm-serving/meta/llama-3.1-8b"
    description = read_description(
        str(pathlib.Path(__file__).resolve().parents[2] / "deployments" / "examples"), "modelplane-system"
    )
    trace = Trace(np.array([0.0, 1.0]), np.array([100, 100]), np.array([10, 10]), np.array([0, 1]), (granite, llama))
    plain = build_scenario(description, trace, SimConfig())
    assert plain.routing.router_of(granite) == plain.routing.router_of(llama) == "least-outstanding"
    assert plain.routing.slo_s[llama] == (0.5, 0.024)
    # A Kthena ModelRoute for granite puts it behind Kthena's router; an annotation names llama's.
    route = {"metadata": {"namespace": "llm-serving", "name": "granite"}, "spec": {"modelName": "ibm/granite-13b"}}
    variants = copy.deepcopy(description.variants)
    llama_va = next(v for v in variants if v.spec.model_id == "meta/llama-3.1-8b")
    llama_va.metadata.annotations["modelplane.io/router"] = "least-latency"
    said = dataclasses.replace(description, variants=variants, routed_models=routed_models([route]))
    routing = build_scenario(said, trace, SimConfig()).routing
    assert (routing.router_of(granite), routing.router_of(llama)) == ("least-load", "least-latency")
    assert (
        build_scenario(said, trace, SimConfig(), router="least-outstanding").routing.router_of(granite)
        == "least-outstanding"
    )
    llama_va.metadata.annotations["modelplane.io/router"] = "fastest"
    with pytest.raises(SpecError, match=r"VariantAutoscaling llm-serving/llama-3-1-8b-\S+: unknown router 'fastest'"):
        build_scenario(dataclasses.replace(said, variants=variants), trace, SimConfig())
