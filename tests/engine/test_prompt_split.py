"""Heterogeneous, prompt-aware sizing (engine.perf.prompt_split): a floor on the variant that serves the long
prompts in time, when the cheaper variant cannot, and only where the gateway routes by predicted latency."""

from __future__ import annotations

import numpy as np
import pytest

from engine.optimize.plan import plan_variants
from engine.optimize.spec import ModelLoad
from engine.perf.prompt_split import (
    ANNOTATION_PROMPT_SPLIT,
    ANNOTATION_ROUTER,
    long_prompt_floor,
    prompt_limit_tokens,
    prompt_split_enabled,
)
from engine.perf.queueing import PerfProfile
from tests.engine.test_optimize import MODEL, NS, by_name, inputs, va
from tests.engine.test_tail_sizing import OUTPUTS, histogram

# 9 in 10 prompts at 600-1,300 tokens, 1 in 10 at 5,000-6,000: beyond the A100's 4,948-token limit at 500 ms.
RNG = np.random.default_rng(11)
PROMPTS = np.concatenate([RNG.integers(600, 1300, 900), RNG.integers(5000, 6000, 100)])
# Slower to decode than the A100 but quicker to prefill (limit 9,800 tokens), at twice its cost: the optimizer
# never picks it on cost.
LONG_PARMS = {"alpha": "22.0", "beta": "0.45", "gamma": "10.0", "delta": "0.05"}


def test_the_limit_and_the_floor() -> None:
    assert prompt_limit_tokens(PerfProfile(20.58, 0.41, 5.2, 0.1, 256), 500.0) == pytest.approx(4948.0)
    assert prompt_limit_tokens(PerfProfile(20.58, 0.41, 600.0, 0.1, 256), 500.0) == 0.0
    prompts = histogram(PROMPTS)
    # 10 req/s, a tenth beyond 4,948 tokens (the histogram's 5,000-10,000 bucket): 1 req/s, 0.4 per replica -> 3.
    assert long_prompt_floor(10.0, prompts, 4948.0, 0.4) == 3
    assert long_prompt_floor(10.0, prompts, 20000.0, 0.4) == 0  # no prompt is longer
    assert long_prompt_floor(0.0, prompts, 4948.0, 0.4) == 0


def test_switch_defaults_off_and_follows_the_router_on_auto() -> None:
    assert not prompt_split_enabled({})
    assert not prompt_split_enabled({ANNOTATION_ROUTER: "least-latency"})
    assert prompt_split_enabled({ANNOTATION_PROMPT_SPLIT: "auto", ANNOTATION_ROUTER: "least-latency"})
    assert not prompt_split_enabled({ANNOTATION_PROMPT_SPLIT: "auto", ANNOTATION_ROUTER: "least-outstanding"})
    assert prompt_split_enabled({ANNOTATION_PROMPT_SPLIT: "true"})
    with pytest.raises(ValueError, match="auto, true or false"):
        prompt_split_enabled({ANNOTATION_PROMPT_SPLIT: "yes"})


def plan(split: str | None) -> dict:
    notes = {"modelplane.io/min-replicas": "0"} | ({ANNOTATION_PROMPT_SPLIT: split} if split else {})
    variants = [va("a100", annotations=notes), va("long", "H100", LONG_PARMS, annotations=notes)]
    load = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))
    return by_name(plan_variants(inputs(variants, {"a100": 4, "long": 0}, loads={(NS, MODEL): load})))


def test_the_long_prompts_get_a_replica_that_serves_them_in_time() -> None:
    without, split = plan(None), plan("true")
    assert without["long"].desired == 0 and without["a100"].desired  # on cost alone: A100s only
    assert split["long"].desired is not None and split["long"].desired >= 1
    assert split["a100"].desired is not None and split["a100"].desired <= without["a100"].desired


def test_an_invalid_switch_is_reported_on_that_resource() -> None:
    decisions = plan("maybe")
    assert decisions["a100"].reason == "InvalidConfiguration"
    assert f"metadata.annotations[{ANNOTATION_PROMPT_SPLIT}]" in decisions["a100"].message


def plan_at(percentile: str, long_notes: dict[str, str] | None = None, long_accelerator: str = "H100") -> dict:
    """The plan at a TTFT percentile for A100s that prefill 90 % of the prompts in time beside a variant that
    prefills them all (at twice the cost), 6 req/s, 4 A100 replicas running, no inventory configured."""
    notes = {"modelplane.io/min-replicas": "0", "modelplane.io/ttft-percentile": percentile}
    variants = [
        va("a100", annotations=notes),
        va("long", long_accelerator, LONG_PARMS, annotations=notes | (long_notes or {})),
    ]
    load = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))
    return by_name(plan_variants(inputs(variants, {"a100": 4, "long": 0}, loads={(NS, MODEL): load})))


def test_a_percentile_only_the_faster_prefill_reaches_is_served_by_it() -> None:
    """p95 of what the model can serve in time is 95 % of its prompts; A100s prefill only 90 % of them within
    500 ms, so however many there are they cannot attain it: the plan provisions the variant that can, at twice the
    cost, and says why the A100s are held at their minimum."""
    decisions = plan_at("95")
    assert decisions["long"].desired is not None and decisions["long"].desired >= 1
    assert decisions["a100"].desired == 0
    assert "held at its min-replicas (0): it prefills 90.0% of" in decisions["a100"].message
    assert "short of p95 of the 100.0%" in decisions["a100"].message


def test_a_percentile_both_variants_reach_is_served_on_cost() -> None:
    """At p80 the A100s reach 80 % of the prompts (their ceiling is 90 %): they stay the cheaper option."""
    decisions = plan_at("80")
    assert decisions["long"].desired == 0 and decisions["a100"].desired
    assert "held at" not in decisions["a100"].message


def test_a_capped_faster_variant_lowers_the_percentile_instead_of_buying_slow_replicas() -> None:
    """With the variant that reaches p95 capped at one replica and no inventory set, the A100s are not sized for a
    share they cannot reach (that asked for 25,066 replicas): the load goes down the shortage ladder, which sizes
    for the highest percentile the A100s reach, and the count stays that of sizing against their own ceiling."""
    decisions = plan_at("95", {"modelplane.io/max-replicas": "1"})
    own = plan_at("85")  # p85 of the model's prompts: within the A100s' reach
    assert decisions["a100"].desired is not None and 1 <= decisions["a100"].desired <= 2 * (own["a100"].desired or 0)
    assert decisions["a100"].desired <= 20
    assert "the accelerator inventory and the variants' max-replicas cannot hold" in decisions["a100"].message


def test_an_invalid_variant_does_not_set_the_models_ceiling() -> None:
    """The faster variant on an accelerator with no price is reported invalid and takes no part in the sizing: the
    A100s are sized against their own ceiling, as if it were not there."""
    alone = plan_at("95", long_accelerator="H100")  # the valid pair: A100s held
    invalid = plan_at("95", long_accelerator="B200")
    assert alone["a100"].desired == 0
    assert invalid["long"].reason == "InvalidConfiguration" and "spec.accelerator" in invalid["long"].message
    assert invalid["a100"].desired and "held at" not in invalid["a100"].message


def test_under_the_prompt_split_a_variant_is_not_held_for_the_prompts_it_never_gets() -> None:
    """With the prompt split, the gateway sends the prompts beyond the A100's limit to the variant that serves them
    in time, so at p90 the A100s still carry the short prompts (sized against their own ceiling) and the long-prompt
    floor provisions the other variant; without the split the A100s are held and the faster variant takes it all."""
    both = {"modelplane.io/min-replicas": "0", "modelplane.io/ttft-percentile": "90", ANNOTATION_PROMPT_SPLIT: "true"}
    variants = [va("a100", annotations=both), va("long", "H100", LONG_PARMS, annotations=both)]
    load = ModelLoad(6.0, float(PROMPTS.mean()), OUTPUTS, histogram(PROMPTS))
    split = by_name(plan_variants(inputs(variants, {"a100": 4, "long": 0}, loads={(NS, MODEL): load})))
    assert split["a100"].desired and "held at" not in split["a100"].message
    assert split["long"].desired is not None and split["long"].desired >= 1
    unsplit = plan_at("90")
    assert unsplit["a100"].desired == 0 and unsplit["long"].desired is not None
    assert split["long"].desired < unsplit["long"].desired
