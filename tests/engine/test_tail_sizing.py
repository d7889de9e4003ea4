"""Tail-aware sizing: the prompt histogram, the attainment it predicts (checked against the simulator),
the rate it sizes for, and its hook in the optimize cycle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.optimize.config import ServiceClass, parse_service_class
from engine.optimize.plan import VariantDecision, plan_variants
from engine.optimize.spec import ModelLoad
from engine.perf.queueing import SLO, PerfProfile, Workload
from engine.perf.sizing import max_rate
from engine.perf.tail_sizing import (
    ANNOTATION_TTFT_PERCENTILE,
    DEFAULT_TTFT_PERCENTILE,
    REACH,
    PromptDistribution,
    TailSizingError,
    queue_distribution,
    reaches_model_share,
    refine_cap,
    tail_max_rate,
    ttft_attainment,
    ttft_ceiling,
    ttft_percentile,
)
from engine.simulate.records import SimConfig, Trace, VariantModel
from engine.simulate.replay import simulate
from engine.simulate.windows import PROMPT_TOKEN_BUCKETS
from tests.engine.test_optimize import MODEL, NS, by_name, inputs, va
from tests.factories import variant_autoscaling

A100 = PerfProfile(20.58, 0.41, 5.2, 0.1, 256)
# Heavy-tailed prompts like the conversation trace: most near 1,000 tokens, a tenth at 3,000-4,000.
RNG = np.random.default_rng(7)
PROMPTS = np.concatenate([RNG.integers(600, 1300, 900), RNG.integers(3000, 4200, 100)])
OUTPUTS = 200


def histogram(prompts: np.ndarray) -> PromptDistribution:
    """The vLLM prompt-token histogram (cumulative, +Inf last) of ``prompts``."""
    bounds = (*PROMPT_TOKEN_BUCKETS, math.inf)
    return PromptDistribution.from_buckets([(b, float((prompts <= b).sum())) for b in bounds])


def test_quantile_and_cdf_interpolate_inside_buckets_like_histogram_quantile() -> None:
    dist = PromptDistribution.from_buckets({1000.0: 50, 2000.0: 90, math.inf: 100})
    assert dist.quantile(0.5) == pytest.approx(1000.0)
    assert dist.quantile(0.7) == pytest.approx(1500.0)
    assert dist.cdf(np.array([500.0, 1500.0, 2000.0]))[1] == pytest.approx(0.7)
    assert dist.cdf(np.array([500.0]))[0] == pytest.approx(0.25)
    # The +Inf bucket's mass is never below any finite threshold.
    assert dist.cdf(np.array([1e9]))[0] == pytest.approx(0.9)


def test_decreasing_bucket_counts_are_made_monotone() -> None:
    dist = PromptDistribution.from_buckets([(2000.0, 80), (1000.0, 90), (math.inf, 100)])
    assert dist.cumulative == (90.0, 90.0, 100.0)
    with pytest.raises(ValueError):
        PromptDistribution((1000.0, 500.0), (1.0, 2.0))


def test_bounds_that_are_no_token_counts_are_no_histogram() -> None:
    """A bound NaN or negative, +Inf before the last, a bound given twice, a count that is no number: refused, not
    read as prompts of 0 tokens."""
    bad_buckets: list[list[tuple[float, float]]] = [
        [(math.nan, 100.0), (512.0, 500.0), (math.inf, 1000.0)],
        [(-5.0, 100.0), (512.0, 500.0), (math.inf, 1000.0)],
        [(-math.inf, 0.0), (512.0, 500.0), (math.inf, 1000.0)],
        [(512.0, 500.0), (math.inf, 900.0), (math.inf, 1000.0)],
        [(512.0, 500.0), (512.0, 600.0), (math.inf, 1000.0)],
        [(512.0, math.nan), (math.inf, 1000.0)],
        [(512.0, 500.0), (math.inf, math.inf)],
    ]
    for buckets in bad_buckets:
        with pytest.raises(ValueError, match="PromptDistribution"):
            PromptDistribution.from_buckets(buckets)
    with pytest.raises(ValueError, match="token counts >= 0"):
        PromptDistribution((math.inf, 512.0), (1.0, 2.0))
    # A first bucket at 0 tokens (empty prompts) is one.
    assert PromptDistribution.from_buckets([(0.0, 1.0), (512.0, 5.0), (math.inf, 9.0)]).bounds[0] == 0.0


def test_percentile_annotation_default_mean_and_errors() -> None:
    assert ttft_percentile({}) == DEFAULT_TTFT_PERCENTILE
    assert ttft_percentile({ANNOTATION_TTFT_PERCENTILE: "p95"}) == 95.0
    assert ttft_percentile({ANNOTATION_TTFT_PERCENTILE: "mean"}) is None
    for bad in ("fast", "30", "100"):
        with pytest.raises(TailSizingError, match="between 50 and 99.9"):
            ttft_percentile({ANNOTATION_TTFT_PERCENTILE: bad})


def exact_distribution() -> PromptDistribution:
    """PROMPTS in 10-token buckets: for the chain, the prompt distribution itself."""
    return PromptDistribution.from_buckets([(float(x), float((PROMPTS <= x).sum())) for x in range(0, 5000, 10)])


def replayed_share_within_500ms(rate: float, replicas: int, duration: float, seed: int) -> float:
    """Poisson arrivals at ``rate`` per replica (prompts drawn from PROMPTS) replayed on ``replicas`` A100
    replicas: the share of the requests after a 10 % warm-up whose TTFT is within 500 ms."""
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0, duration, rng.poisson(replicas * rate * duration)))
    prompts = rng.choice(PROMPTS, len(arrivals))
    trace = Trace(arrivals, prompts, np.full(len(arrivals), OUTPUTS), np.zeros(len(arrivals), dtype=np.int64), ("m",))
    variant = VariantModel("ns/v", "m", "v", "A100", 1, 40.0, A100, 256 * 2048)
    result = simulate([variant], trace, SimConfig(horizon_s=duration), {"ns/v": replicas})
    warm = result.arrival_s > 0.1 * duration
    return float(np.mean(result.ttft_s[warm] <= 0.5))


@pytest.mark.parametrize("load", [0.3, 0.6, 0.85])
def test_predicted_attainment_matches_the_simulator(load: float) -> None:
    """One replica, Poisson arrivals, heavy-tailed prompts: the chain's share within 500 ms vs the replay."""
    workload = Workload(float(PROMPTS.mean()), OUTPUTS)
    rate = load * max_rate(A100, workload, SLO(ttft_ms=500, itl_ms=24))
    simulated = replayed_share_within_500ms(rate, replicas=1, duration=6000.0 / rate, seed=3)
    # With the exact prompt distribution the chain agrees with the replay within 3 points ...
    assert ttft_attainment(A100, workload, exact_distribution(), 500.0, rate) == pytest.approx(simulated, abs=0.03)
    # ... and with vLLM's coarse buckets (1,000-2,000 interpolated linearly) it is conservative.
    coarse = ttft_attainment(A100, workload, histogram(PROMPTS), 500.0, rate)
    assert simulated - 0.10 <= coarse <= simulated


def test_tail_rate_is_below_wva_for_heavy_tails_and_meets_the_percentile() -> None:
    workload = Workload(float(PROMPTS.mean()), OUTPUTS)
    slo = SLO(ttft_ms=500, itl_ms=24)
    wva = max_rate(A100, workload, slo)
    dist = histogram(PROMPTS)
    p90 = tail_max_rate(A100, workload, slo, dist, 90.0)
    assert p90 is not None and p90 < 0.8 * wva
    # p90 of the requests that can meet the target at all (alone on the replica: almost all of these prompts).
    ceiling = ttft_ceiling(A100, dist, 500.0)
    assert 0.97 < ceiling < 1.0
    assert ttft_attainment(A100, workload, dist, 500.0, p90) == pytest.approx(0.9 * ceiling, abs=1e-3)
    assert ttft_attainment(A100, workload, dist, 500.0, wva) < 0.85
    # A percentile the mean sizing already meets is capped at WVA's rate (never less strict than WVA).
    assert tail_max_rate(A100, workload, slo, dist, 50.0) == pytest.approx(wva)


def test_no_data_or_no_prompt_within_reach_keeps_wva_sizing() -> None:
    workload = Workload(1000.0, OUTPUTS)
    slo = SLO(ttft_ms=500, itl_ms=24)
    # Every prompt above 5,000 tokens: even alone on a replica the prefill takes 500+ ms.
    hopeless = PromptDistribution.from_buckets({5000.0: 0, 10000.0: 100, math.inf: 100})
    assert ttft_ceiling(A100, hopeless, 500.0) == 0.0
    assert tail_max_rate(A100, workload, slo, hopeless, 90.0) is None
    assert tail_max_rate(A100, workload, slo, PromptDistribution((1000.0,), (0.0,)), 90.0) is None
    assert tail_max_rate(A100, workload, SLO(itl_ms=24), histogram(PROMPTS), 90.0) is None


def test_sizing_rate_is_monotone_in_the_percentile_even_beyond_the_attainment_ceiling() -> None:
    """Issue 18: on a long-prompt trace p95 attained less than p90, because a percentile above what an idle
    replica reaches fell back to WVA's mean sizing (and one just below it asked for more replicas than the
    inventory held).  The percentile is of the achievable requests, so the rate never rises with it."""
    workload = Workload(3000.0, OUTPUTS)
    slo = SLO(ttft_ms=500, itl_ms=24)
    long = histogram(PROMPTS * 3)
    ceiling = ttft_ceiling(A100, long, 500.0)
    assert 0.5 < ceiling < 0.9  # p90 and p95 of all requests are out of reach at any rate
    rates = [tail_max_rate(A100, workload, slo, long, p) for p in (50.0, 70.0, 80.0, 85.0, 90.0, 95.0, 99.0, 99.9)]
    assert all(r is not None and r > 0 for r in rates)
    assert all(a >= b for a, b in zip(rates, rates[1:]))
    assert rates[5] < rates[4] < 0.5 * max_rate(A100, workload, slo)
    for pool in (1, 4):
        p95 = tail_max_rate(A100, workload, slo, long, 95.0, pool)
        assert ttft_attainment(A100, workload, long, 500.0, p95, pool) == pytest.approx(0.95 * ceiling, abs=2e-3)


def test_a_variant_is_sized_for_the_share_the_models_best_variant_reaches() -> None:
    """The percentile is of what the model can attain (its best variant's ceiling), not of what this variant can: a
    variant that cannot prefill the long prompts in time is sized for more of its own share, and only while that
    share is within REACH of its own ceiling (beyond, the rate vanishes)."""
    workload = Workload(3000.0, OUTPUTS)
    slo = SLO(ttft_ms=500, itl_ms=24)
    long = histogram(PROMPTS * 3)
    own = ttft_ceiling(A100, long, 500.0)
    assert 0.5 < own < 0.9
    alone = tail_max_rate(A100, workload, slo, long, 60.0)
    assert alone is not None
    assert tail_max_rate(A100, workload, slo, long, 60.0, model_ceiling=own) == alone  # its own: nothing changes
    assert tail_max_rate(A100, workload, slo, long, 60.0, model_ceiling=0.1) == alone  # a lower one: neither
    stricter = tail_max_rate(A100, workload, slo, long, 60.0, model_ceiling=1.0)
    assert stricter is not None and stricter < alone
    assert ttft_attainment(A100, workload, long, 500.0, stricter) == pytest.approx(0.6, abs=2e-3)
    assert reaches_model_share(own, 1.0, 100.0 * REACH * own - 0.1)
    assert not reaches_model_share(own, 1.0, 100.0 * REACH * own + 0.1)
    assert reaches_model_share(own, own, 99.0)  # the model's best variant: any percentile, as before


def test_optimize_cycle_sizes_for_the_percentile_when_the_histogram_is_collected() -> None:
    mean_only = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS)
    with_tail = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))
    plain = by_name(plan_variants(inputs([va("a100")], {"a100": 1}, loads={(NS, MODEL): mean_only})))["a100"]
    tail = by_name(plan_variants(inputs([va("a100")], {"a100": 1}, loads={(NS, MODEL): with_tail})))["a100"]
    assert tail.desired is not None and plain.desired is not None and tail.desired > plain.desired
    opted_out = va("a100", annotations={ANNOTATION_TTFT_PERCENTILE: "mean"})
    mean = by_name(plan_variants(inputs([opted_out], {"a100": 1}, loads={(NS, MODEL): with_tail})))["a100"]
    assert mean.desired == plain.desired


def test_invalid_percentile_annotation_is_reported_on_that_resource_only() -> None:
    bad = va("bad", annotations={ANNOTATION_TTFT_PERCENTILE: "p10"})
    decisions = by_name(plan_variants(inputs([bad, va("a100")], {"a100": 1, "bad": 1})))
    assert decisions["bad"].reason == "InvalidConfiguration"
    assert f"metadata.annotations[{ANNOTATION_TTFT_PERCENTILE}]" in decisions["bad"].message
    assert decisions["a100"].ready


def test_a_short_inventory_lowers_the_percentile_until_the_plan_fits() -> None:
    """p90 needs more A100s than the inventory holds: the cycle sizes for a lower percentile, says so, serves everything."""
    with_tail = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))
    mean_only = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS)
    unlimited = by_name(plan_variants(inputs([va("a100")], {"a100": 1}, loads={(NS, MODEL): with_tail})))["a100"]
    plain = by_name(plan_variants(inputs([va("a100")], {"a100": 1}, loads={(NS, MODEL): mean_only})))["a100"]
    assert unlimited.desired is not None and plain.desired is not None and unlimited.desired > plain.desired + 1
    short = {"A100": unlimited.desired - 1}
    capped = by_name(plan_variants(inputs([va("a100")], {"a100": 1}, loads={(NS, MODEL): with_tail}, inventory=short)))[
        "a100"
    ]
    assert capped.desired is not None and plain.desired <= capped.desired <= unlimited.desired - 1
    assert (
        "the accelerator inventory and the variants' max-replicas cannot hold the configured TTFT percentile"
        in capped.message
    )
    assert "unserved" not in capped.message


def test_recent_peak_sizes_for_the_highest_rate_of_the_start_up_window() -> None:
    from engine.perf.load_peak import peak_window_s, planning_rate, recent_peak

    window = peak_window_s(120.0, 60.0)
    assert recent_peak([9.0, 2.0, 3.0, 4.0], 60.0, window) == 4.0  # 9 is older than start-up + interval
    assert recent_peak([2.0, 9.0, 3.0, 4.0], 60.0, window) == 9.0
    assert recent_peak([], 60.0, window) is None
    assert planning_rate(5.0, 3.0) == 5.0 and planning_rate(5.0, None) == 5.0 and planning_rate(1.0, 5.0) == 5.0
    quiet = ModelLoad(1.0, 128, 256)
    remembered = ModelLoad(1.0, 128, 256, recent_peak_rps=20.0)
    now = by_name(plan_variants(inputs([va("a100")], {"a100": 4}, loads={(NS, MODEL): quiet})))["a100"]
    held = by_name(plan_variants(inputs([va("a100")], {"a100": 4}, loads={(NS, MODEL): remembered})))["a100"]
    assert now.desired is not None and now.desired < 4
    assert held.desired is not None and held.desired > now.desired


def test_a_model_asking_for_burst_sizing_is_sized_for_its_sub_minute_peaks_and_only_then() -> None:
    """The same load with a burst rate three times its peak: a model annotated ``modelplane.io/burst-sizing: "true"``
    gets the replicas that rate needs, an unannotated one ignores it (the default), and a burst rate below the peak
    changes nothing either way (the plan never sizes below the recent peak)."""
    from engine.optimize.spec import ANNOTATION_BURST_SIZING

    def decided(load: ModelLoad, annotated: bool) -> VariantDecision:
        variant = va("a100")
        if annotated:
            variant["metadata"]["annotations"] = {ANNOTATION_BURST_SIZING: "True"}
        decision = by_name(plan_variants(inputs([variant], {"a100": 4}, loads={(NS, MODEL): load})))["a100"]
        assert decision.desired is not None, decision.message
        return decision

    def desired(load: ModelLoad, annotated: bool) -> int:
        return int(decided(load, annotated).desired or 0)

    bursty = ModelLoad(4.0, 128, 256, recent_peak_rps=6.0, burst_rps=18.0)
    assert desired(bursty, annotated=True) > desired(bursty, annotated=False)
    # The condition says why the model got the burst's replicas, and only when the burst rate set them.
    said = "sized for 18.00 req/s, the burst rate its sub-minute peaks imply"
    assert said in decided(bursty, annotated=True).message
    assert said not in decided(bursty, annotated=False).message
    assert desired(bursty, annotated=False) == desired(ModelLoad(4.0, 128, 256, recent_peak_rps=6.0), annotated=False)
    assert desired(bursty, annotated=True) == desired(ModelLoad(18.0, 128, 256), annotated=False)
    calm = ModelLoad(4.0, 128, 256, recent_peak_rps=6.0, burst_rps=3.0)
    assert desired(calm, annotated=True) == desired(calm, annotated=False)
    assert "burst rate" not in decided(calm, annotated=True).message


def test_the_shape_inside_buckets_is_fitted_to_the_observed_mean() -> None:
    """Prompts bunched just above 1,000 tokens: read as uniform the 1,000-2,000 bucket misplaces them; the mean says where they sit."""
    prompts = np.concatenate(
        [RNG.integers(1000, 1300, 800), RNG.integers(1300, 2000, 100), RNG.integers(3000, 4200, 100)]
    )
    uniform = histogram(prompts)
    fitted = uniform.with_mean(float(prompts.mean()))
    assert uniform.shape == 0.0 and fitted.shape > 1.0
    # The fitted distribution has the observed mean (numerically, from its quantiles) ...
    grid = np.linspace(0.0005, 0.9995, 1000)
    assert np.mean([fitted.quantile(q) for q in grid]) == pytest.approx(prompts.mean(), rel=0.02)
    # ... and its CDF is closer to the prompts' own than the uniform reading, where it matters for TTFT.
    for tokens in (1200.0, 1500.0, 1800.0):
        truth = float(np.mean(prompts <= tokens))
        assert abs(fitted.cdf(np.array([tokens]))[0] - truth) < abs(uniform.cdf(np.array([tokens]))[0] - truth)
    # quantile and cdf stay inverse to each other under the fitted shape.
    assert fitted.cdf(np.array([fitted.quantile(0.7)]))[0] == pytest.approx(0.7, abs=1e-6)
    # A mean the buckets cannot produce clamps the shape instead of failing.
    assert uniform.with_mean(1.0).shape == pytest.approx(6.0) and uniform.with_mean(None) is uniform


def test_pooled_chain_reduces_to_one_replica_and_matches_a_balanced_replay() -> None:
    """A gateway that balances requests over R replicas evens out their batches: the pool's chain sees it, one replica's does not."""
    workload = Workload(float(PROMPTS.mean()), OUTPUTS)
    exact = exact_distribution()
    rate = 0.5 * max_rate(A100, workload, SLO(ttft_ms=500, itl_ms=24))
    single = queue_distribution(A100, workload, rate)
    assert np.allclose(queue_distribution(A100, workload, rate, pool=1), single)
    assert len(queue_distribution(A100, workload, rate, pool=4)) == 4 * (len(single) - 1) + 1
    simulated = replayed_share_within_500ms(rate, replicas=4, duration=4000.0 / rate, seed=5)
    pooled = ttft_attainment(A100, workload, exact, 500.0, rate, pool=4)
    alone = ttft_attainment(A100, workload, exact, 500.0, rate)
    assert pooled == pytest.approx(simulated, abs=0.03)
    assert alone < simulated - 0.03
    slo = SLO(ttft_ms=500, itl_ms=24)
    assert tail_max_rate(A100, workload, slo, exact, 90.0, pool=4) > tail_max_rate(A100, workload, slo, exact, 90.0)


def test_refine_cap_finds_the_highest_whole_percentile_that_fits() -> None:
    tried: list[float] = []

    def fits(cap: float) -> bool:
        tried.append(cap)
        return cap <= 83.0

    assert refine_cap(80.0, 85.0, fits) == 83.0
    assert all(80.0 < cap < 85.0 for cap in tried) and len(tried) <= 3
    assert refine_cap(0.0, 60.0, fits) == 0.0  # below p50 there is no percentile to refine


def test_a_short_inventory_is_used_whole_at_the_highest_percentile_it_holds() -> None:
    with_tail = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))
    at_p90 = va("a100")
    at_p90["metadata"]["annotations"] = {ANNOTATION_TTFT_PERCENTILE: "90"}  # between the ladder's p85 and p90
    unlimited = by_name(plan_variants(inputs([at_p90], {"a100": 1}, loads={(NS, MODEL): with_tail})))["a100"]
    assert unlimited.desired is not None
    for held in range(unlimited.desired - 3, unlimited.desired):
        capped = by_name(
            plan_variants(inputs([at_p90], {"a100": 1}, loads={(NS, MODEL): with_tail}, inventory={"A100": held}))
        )["a100"]
        # Within one replica of the inventory (a whole percentile point may be worth two replicas), not the
        # coarse ladder's next step down (p85 here).
        assert capped.desired is not None and held - 1 <= capped.desired <= held, capped.message
        assert "sized for p8" in capped.message and "sized for p85 " not in capped.message


GRANITE = "ibm/granite-13b"


def premium_for_llama_and_granite() -> dict[tuple[str, str], ServiceClass]:
    """The service classes of the two-model tests: one Premium class with the same SLO for llama and granite."""
    premium = parse_service_class(
        f"name: Premium\npriority: 1\ndata:\n  - model: {MODEL}\n    slo-tpot: 24\n    slo-ttft: 500\n"
        f"  - model: {GRANITE}\n    slo-tpot: 24\n    slo-ttft: 500\n",
        "slo/premium",
    )
    assert isinstance(premium, ServiceClass)
    return {("slo", "premium"): premium}


def granite_va(name: str, accelerator: str, **fields: object) -> dict:
    """A granite VariantAutoscaling in the Premium class of :func:`premium_for_llama_and_granite`."""
    return variant_autoscaling(name, NS, GRANITE, accelerator, sloClassRef={"name": "slo", "key": "premium"}, **fields)


def test_a_model_whose_accelerators_are_not_short_keeps_its_percentile() -> None:
    """llama runs out of A100s; granite runs on H100s with room to spare: only llama is sized for a lower percentile."""
    granite = granite_va("granite-h100", "H100")
    load = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))
    loads = {(NS, MODEL): load, (NS, GRANITE): ModelLoad(30.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))}

    def plan(variants: list[dict], inventory: dict[str, int] | None) -> dict:
        return by_name(
            plan_variants(
                inputs(
                    variants,
                    {"llama-a100": 1, "granite-h100": 1},
                    loads=loads,
                    inventory=inventory,
                    service_classes=premium_for_llama_and_granite(),
                )
            )
        )

    alone = plan([va("llama-a100"), granite], None)
    full_granite = alone["granite-h100"].desired
    llama_needs = alone["llama-a100"].desired
    assert full_granite is not None and llama_needs is not None
    short = plan([va("llama-a100"), granite], {"A100": llama_needs - 3, "H100": full_granite + 2})
    assert short["llama-a100"].desired == llama_needs - 3 or short["llama-a100"].desired == llama_needs - 4
    assert "sized for p" in short["llama-a100"].message
    # granite keeps p90 and its full H100 allocation, though the inventory has H100s to spare either way.
    assert short["granite-h100"].desired == full_granite and "sized for" not in short["granite-h100"].message
    # Capped like llama (the former rule: one cap for every model), granite would have run fewer replicas.
    cap = short["llama-a100"].message.split("sized for p")[1].split(" ")[0]
    capped = granite_va("granite-h100", "H100", annotations={ANNOTATION_TTFT_PERCENTILE: cap})
    assert plan([va("llama-a100"), capped], None)["granite-h100"].desired < full_granite


def test_no_model_is_raised_when_every_accelerator_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raising costs MILP solves: only models with an accelerator that has room left are tried."""
    import engine.optimize.model_based as model_based

    granite = granite_va("granite-a100", "A100")
    load = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))
    seen: list[dict] = []
    original = model_based._model_based_candidates

    def spy(specs, inputs_, result, caps=None):
        seen.append(dict(caps or {}))
        return original(specs, inputs_, result, caps)

    def plan(variants: list[dict], inventory: dict[str, int] | None) -> dict:
        return by_name(
            plan_variants(
                inputs(
                    variants,
                    {"llama-a100": 1, "granite-a100": 1},
                    loads={(NS, MODEL): load, (NS, GRANITE): load},
                    inventory=inventory,
                    service_classes=premium_for_llama_and_granite(),
                )
            )
        )

    mean = {ANNOTATION_TTFT_PERCENTILE: "mean"}
    at_mean = plan([va("llama-a100", annotations=mean), granite_va("granite-a100", "A100", annotations=mean)], None)
    at_p90 = plan([va("llama-a100"), granite], None)
    low, high = (sum(d.desired or 0 for d in p.values()) for p in (at_mean, at_p90))
    assert high > low + 4
    monkeypatch.setattr(model_based, "_model_based_candidates", spy)
    decisions = plan([va("llama-a100"), granite], {"A100": (low + high) // 2})
    assert sum(d.desired or 0 for d in decisions.values()) >= (low + high) // 2 - 2
    assert all("sized for p" in d.message for d in decisions.values()), [d.message for d in decisions.values()]
    assert len(seen) > 2 and all(len(set(caps.values())) <= 1 for caps in seen)  # one common cap in every solve
