"""Tests for engine.perf.saturation: WVA saturation analysis, targets and hybrid arbitration."""

from __future__ import annotations

import pytest

from engine.perf.saturation import (
    REASON_METRICS_AVAILABLE,
    REASON_METRICS_UNAVAILABLE,
    REASON_OPTIMIZATION_SUCCEEDED,
    REASON_SAFETY_OVERRIDE,
    REASON_SATURATION_ONLY,
    Decision,
    ReplicaMetrics,
    SaturationConfig,
    SaturationConfigSet,
    VariantState,
    analyze_model,
    arbitrate,
    arbitrate_all,
    config_for,
    is_saturated,
    is_scale_down_safe,
    metrics_condition,
    parse_saturation_config,
    saturation_targets,
    should_scale_up,
)

CFG = SaturationConfig()


def rm(pod: str, kv: float, queue: float = 0, variant: str = "v") -> ReplicaMetrics:
    return ReplicaMetrics(pod=pod, variant=variant, kv_cache_usage=kv, queue_length=queue)


# ----------------------------------------------------------------------------- config


def test_defaults() -> None:
    assert (CFG.kv_cache_threshold, CFG.queue_length_threshold, CFG.kv_spare_trigger, CFG.queue_spare_trigger) == (
        0.80,
        5,
        0.1,
        3,
    )


def test_parse_missing_configmap_gives_defaults() -> None:
    assert parse_saturation_config(None).default == SaturationConfig()
    assert parse_saturation_config({}).config_for("m", "ns") == SaturationConfig()


def test_parse_default_and_partial_overrides() -> None:
    data = {
        "default": "kvCacheThreshold: 0.75\nqueueLengthThreshold: 10\nkvSpareTrigger: 0.15\nqueueSpareTrigger: 5\n",
        "granite-13b-production": "model_id: ibm/granite-13b\nnamespace: production\nkvCacheThreshold: 0.85\n",
        "llama-lab": "model_id: meta/llama-70b\nnamespace: lab\nqueueLengthThreshold: 20\nqueueSpareTrigger: 10\n",
    }
    configs = parse_saturation_config(data)
    assert configs.errors == ()
    assert configs.default == SaturationConfig(0.75, 10, 0.15, 5)
    assert configs.config_for("ibm/granite-13b", "production") == SaturationConfig(0.85, 10, 0.15, 5)
    assert configs.config_for("meta/llama-70b", "lab") == SaturationConfig(0.75, 20, 0.15, 10)
    # Same model, other namespace -> default.
    assert configs.config_for("ibm/granite-13b", "dev") == configs.default
    assert config_for(data, "meta/llama-70b", "lab").queue_length_threshold == 20
    assert SaturationConfigSet.from_configmap(data) == configs


def test_parse_invalid_entries_are_skipped() -> None:
    data = {
        "default": "kvCacheThreshold: 1.5\n",
        "bad": "model_id: test/model\nnamespace: test\nkvCacheThreshold: 1.5\n",
        "no-model": "namespace: test\nkvCacheThreshold: 0.9\n",
        "inconsistent": "model_id: a\nnamespace: b\nkvCacheThreshold: 0.05\nkvSpareTrigger: 0.1\n",
        "garbage": "[1, 2",
        "ok": {"model_id": "x", "namespace": "y", "queueSpareTrigger": 1},
    }
    configs = parse_saturation_config(data)
    assert configs.default == SaturationConfig()
    assert set(configs.overrides) == {("x", "y")}
    assert configs.config_for("x", "y").queue_spare_trigger == 1
    assert len(configs.errors) == 5


def test_validate_rules() -> None:
    SaturationConfig().validate()
    for bad in (
        SaturationConfig(kv_cache_threshold=-0.1),
        SaturationConfig(kv_spare_trigger=1.1),
        SaturationConfig(queue_length_threshold=-1),
        SaturationConfig(queue_spare_trigger=-1),
        SaturationConfig(kv_cache_threshold=0.05, kv_spare_trigger=0.1),
    ):
        with pytest.raises(ValueError):
            bad.validate()


def test_to_dict_round_trip() -> None:
    assert SaturationConfig().merged(SaturationConfig(0.7, 4, 0.2, 2).to_dict()) == SaturationConfig(0.7, 4, 0.2, 2)


# ----------------------------------------------------------------------------- analysis


@pytest.mark.parametrize(
    ("kv", "queue", "saturated"),
    [(0.79, 4, False), (0.80, 0, True), (0.0, 5, True), (0.81, 6, True), (0.0, 4.99, False)],
)
def test_is_saturated_boundaries(kv: float, queue: float, saturated: bool) -> None:
    assert is_saturated(rm("p", kv, queue), CFG) is saturated


def test_analysis_averages_over_non_saturated_replicas() -> None:
    a = analyze_model([rm("a", 0.65, 1), rm("b", 0.72, 2), rm("c", 0.95, 0)], CFG, "m", "ns")
    assert a.total_replicas == 3
    assert a.non_saturated_count == 2
    assert a.saturated_replicas == ("c",)
    assert a.avg_spare_kv == pytest.approx(0.115)
    assert a.avg_spare_queue == pytest.approx(3.5)
    assert a.should_scale_up is False
    assert a.variants["v"].max_kv_cache_usage == 0.95


def test_scale_up_kv_trigger_doc_example() -> None:
    # Spare 0.15 and 0.05 -> 0.10, not below the trigger; 0.05 and 0.049 -> below.
    a = analyze_model([rm("a", 0.65), rm("b", 0.76)], CFG)
    assert a.avg_spare_kv == pytest.approx(0.095)
    assert a.should_scale_up is True
    assert "KV" in a.scale_up_reason


def test_scale_up_queue_trigger() -> None:
    a = analyze_model([rm("a", 0.1, 3), rm("b", 0.1, 2)], CFG)  # spare queue (2 + 3) / 2 = 2.5 < 3
    assert a.should_scale_up is True
    assert "queue" in a.scale_up_reason


def test_should_scale_up_exact_trigger_is_not_scale_up() -> None:
    assert should_scale_up(0.1, 3, CFG) == (False, "")
    up, reason = should_scale_up(0.05, 1, CFG)
    assert up and reason.startswith("both")


def test_all_saturated_means_scale_up_and_unsafe_down() -> None:
    a = analyze_model([rm("a", 0.9), rm("b", 0.1, 7)], CFG)
    assert a.non_saturated_count == 0
    assert a.should_scale_up is True
    assert a.scale_down_safe is False


def test_no_replicas_no_decision() -> None:
    a = analyze_model([], CFG, "m", "ns")
    assert a.should_scale_up is False
    assert a.scale_down_safe is False
    assert metrics_condition(a)[0] == REASON_METRICS_UNAVAILABLE
    assert metrics_condition(analyze_model([rm("a", 0.1)]))[0] == REASON_METRICS_AVAILABLE


def test_scale_down_needs_two_non_saturated() -> None:
    assert analyze_model([rm("a", 0.0)], CFG).scale_down_safe is False
    assert analyze_model([rm("a", 0.0), rm("b", 0.0)], CFG).scale_down_safe is True


def test_scale_down_redistribution_simulation() -> None:
    # 3 replicas at kv 0.4, queue 0: after removal load 0.6 -> spare 0.2 >= 0.1: safe.
    assert analyze_model([rm(str(i), 0.4) for i in range(3)], CFG).scale_down_safe is True
    # 2 replicas at kv 0.4: after removal load 0.8 -> spare 0 < 0.1: unsafe.
    assert analyze_model([rm(str(i), 0.4) for i in range(2)], CFG).scale_down_safe is False
    # Queue: 2 replicas at queue 1 -> load 2 -> spare 3 >= 3: safe (boundary inclusive).
    assert is_scale_down_safe(2, 0.8, 4.0, CFG) is True
    assert is_scale_down_safe(2, 0.8, 3.9, CFG) is False
    # KV boundary (binary-exact numbers): load 0.25 -> 0.5 -> spare exactly 0.25 == trigger.
    cfg = SaturationConfig(kv_cache_threshold=0.75, kv_spare_trigger=0.25)
    assert is_scale_down_safe(2, 0.5, 5, cfg) is True
    assert is_scale_down_safe(2, 0.49, 5, cfg) is False


def test_analysis_groups_variants() -> None:
    a = analyze_model([rm("a", 0.2, variant="x"), rm("b", 0.9, variant="y"), rm("c", 0.4, variant="y")], CFG)
    assert set(a.variants) == {"x", "y"}
    assert a.variants["y"].saturated_replicas == ("b",)
    assert a.variants["y"].non_saturated_count == 1
    assert a.avg_spare_kv == pytest.approx(((0.8 - 0.2) + (0.8 - 0.4)) / 2)


# ----------------------------------------------------------------------------- targets

UP = analyze_model([rm("a", 0.79, 4)], CFG)  # needs scale-up
DOWN = analyze_model([rm(str(i), 0.05) for i in range(4)], CFG)  # safe to scale down
HOLD = analyze_model([rm(str(i), 0.5, 1) for i in range(2)], CFG)  # neither


def test_fixture_verdicts() -> None:
    assert UP.should_scale_up and not UP.scale_down_safe
    assert DOWN.scale_down_safe and not DOWN.should_scale_up
    assert not HOLD.should_scale_up and not HOLD.scale_down_safe


def test_scale_up_cheapest_variant() -> None:
    states = [VariantState("h100", 40.0, 2), VariantState("a100", 20.0, 1), VariantState("l4", 30.0, 1)]
    assert saturation_targets(UP, states) == {"h100": 2, "a100": 2, "l4": 1}


def test_scale_up_tie_by_name_and_default_cost() -> None:
    states = [VariantState("b", current_replicas=1), VariantState("a", current_replicas=1)]
    assert VariantState("x").cost == 10.0
    assert saturation_targets(UP, states) == {"a": 2, "b": 1}


def test_pending_replicas_put_model_in_transition() -> None:
    # WVA TestCalculatesaturationTargets_PendingReplicasBlocksScaling
    states = [VariantState("v1-expensive", 20.0, 3, pending_replicas=1), VariantState("v2-cheap", 5.0, 2)]
    assert saturation_targets(UP, states) == {"v1-expensive": 3, "v2-cheap": 2}


def test_desired_mismatch_puts_model_in_transition() -> None:
    # WVA TestCalculatesaturationTargets_ModelLevelTransitionBlocking
    states = [
        VariantState("v1-expensive", 20.0, 2, desired_replicas=4),
        VariantState("v2-cheap", 5.0, 2, desired_replicas=0),
    ]
    assert saturation_targets(UP, states) == {"v1-expensive": 4, "v2-cheap": 2}
    # desired == current is not a transition
    states = [VariantState("a", 20.0, 2, desired_replicas=2), VariantState("b", 5.0, 2)]
    assert saturation_targets(UP, states) == {"a": 2, "b": 3}


def test_wva_cheapest_and_most_expensive() -> None:
    states = [VariantState("v1-expensive", 20, 2), VariantState("v2-cheap", 5, 2), VariantState("v3-medium", 15, 2)]
    assert saturation_targets(UP, states) == {"v1-expensive": 2, "v2-cheap": 3, "v3-medium": 2}
    assert saturation_targets(DOWN, states) == {"v1-expensive": 1, "v2-cheap": 2, "v3-medium": 2}


def test_bounds_clamp_after_the_choice() -> None:
    # The cheapest variant is chosen even at its max, then clamped back (WVA).
    states = [VariantState("a", 1.0, 3, max_replicas=3), VariantState("b", 2.0, 1)]
    assert saturation_targets(UP, states) == {"a": 3, "b": 1}
    states = [VariantState("a", 1.0, 3, max_replicas=0), VariantState("b", 2.0, 1)]  # 0 = unbounded
    assert saturation_targets(UP, states) == {"a": 4, "b": 1}
    states = [VariantState("a", 9.0, 2, min_replicas=2), VariantState("b", 1.0, 3)]
    assert saturation_targets(DOWN, states) == {"a": 2, "b": 3}
    assert saturation_targets(HOLD, [VariantState("a", 1.0, 1, min_replicas=2)]) == {"a": 2}


def test_scale_down_most_expensive_with_more_than_one() -> None:
    states = [VariantState("cheap", 10.0, 3), VariantState("pricey", 50.0, 1), VariantState("mid", 30.0, 2)]
    assert saturation_targets(DOWN, states) == {"cheap": 3, "pricey": 1, "mid": 1}


def test_scale_down_tie_takes_last_name() -> None:
    states = [VariantState("a", 10.0, 2), VariantState("b", 10.0, 2)]
    assert saturation_targets(DOWN, states) == {"a": 2, "b": 1}


def test_no_change_and_no_metrics() -> None:
    states = [VariantState("a", 10.0, 2)]
    assert saturation_targets(HOLD, states) == {"a": 2}
    assert saturation_targets(analyze_model([]), [VariantState("a", 1.0, 2, pending_replicas=1)]) == {"a": 2}


# WVA analyzer_test.go tables (thresholds 0.80 / 5 / 0.10 / 3)
WVA_SCALE_UP = [
    ("low_kv_spare", [(0.75, 2), (0.76, 2)], True),
    ("low_queue_spare", [(0.50, 3), (0.50, 3)], True),
    ("healthy", [(0.50, 1), (0.50, 1)], False),
]


@pytest.mark.parametrize(("name", "pods", "expected"), WVA_SCALE_UP, ids=[c[0] for c in WVA_SCALE_UP])
def test_wva_scale_up_table(name: str, pods: list, expected: bool) -> None:
    a = analyze_model([rm(f"p{i}", kv, q) for i, (kv, q) in enumerate(pods)], CFG)
    assert a.should_scale_up is expected


WVA_SCALE_DOWN = [
    ("adequate_headroom", [(0.20, 1), (0.30, 1), (0.25, 1)], True),
    ("insufficient_headroom", [(0.70, 2), (0.75, 2)], False),
    ("one_non_saturated", [(0.50, 2)], False),
]


@pytest.mark.parametrize(("name", "pods", "expected"), WVA_SCALE_DOWN, ids=[c[0] for c in WVA_SCALE_DOWN])
def test_wva_scale_down_table(name: str, pods: list, expected: bool) -> None:
    a = analyze_model([rm(f"p{i}", kv, q) for i, (kv, q) in enumerate(pods)], CFG)
    assert a.scale_down_safe is expected


def test_wva_saturated_replicas_and_all_saturated() -> None:
    v = analyze_model([rm("pod-1", 0.85, 2), rm("pod-2", 0.50, 6), rm("pod-3", 0.60, 2)], CFG).variants["v"]
    assert (v.replica_count, v.non_saturated_count, set(v.saturated_replicas)) == (3, 1, {"pod-1", "pod-2"})
    a = analyze_model([rm("pod-1", 0.85, 2), rm("pod-2", 0.50, 6), rm("pod-3", 0.90, 7)], CFG)
    assert (a.avg_spare_kv, a.avg_spare_queue, a.should_scale_up, a.scale_down_safe) == (0.0, 0.0, True, False)


# ----------------------------------------------------------------------------- arbitration


def test_saturation_only_mode() -> None:
    d = arbitrate(2, 3, None, True)
    assert d == Decision(
        3, REASON_SATURATION_ONLY, "Saturation-only mode: scale-up decision (target: 3 replicas)", "scale-up"
    )
    assert arbitrate(2, 2).action == "no-change"
    assert arbitrate(2, 1).action == "scale-down"


def test_saturation_up_vetoes_model_down() -> None:
    d = arbitrate(3, 4, 1, True)
    assert (d.target, d.reason, d.action) == (3, REASON_SAFETY_OVERRIDE, "no-change")


def test_unsafe_scale_down_blocked() -> None:
    d = arbitrate(3, 3, 1, False)
    assert d.target == 3
    assert d.reason == REASON_SAFETY_OVERRIDE
    assert d.action == "no-change"
    assert d.message == "Saturation safety override: model-based scale-down to 1 blocked, holding 3 replicas"
    assert arbitrate(VariantState("a", 1.0, 3), 3, 1, HOLD).reason == REASON_SAFETY_OVERRIDE


def test_safe_model_scale_down_followed() -> None:
    d = arbitrate(3, 3, 1, True)
    assert (d.target, d.reason, d.action) == (1, REASON_OPTIMIZATION_SUCCEEDED, "scale-down")


def test_model_scale_up_followed() -> None:
    d = arbitrate(1, 2, 3, False)
    assert d == Decision(
        3, REASON_OPTIMIZATION_SUCCEEDED, "Hybrid mode: scale-up decision (target: 3 replicas)", "scale-up"
    )


def test_saturation_up_when_model_holds() -> None:
    d = arbitrate(2, 3, 2, True)
    assert (d.target, d.reason, d.action) == (3, REASON_OPTIMIZATION_SUCCEEDED, "scale-up")


def test_nothing_to_do() -> None:
    d = arbitrate(2, 2, 2, False)
    assert (d.target, d.action) == (2, "no-change")
    assert d.message == "Hybrid mode: no-change decision (target: 2 replicas)"


def test_arbitrate_all() -> None:
    states = [VariantState("a", 5.0, 1), VariantState("b", 9.0, 2)]
    decisions = arbitrate_all(UP, states, {"a": 1, "b": 1})
    assert decisions["a"].target == 2 and decisions["a"].reason == REASON_OPTIMIZATION_SUCCEEDED
    # b: model wants down, scale-down unsafe under UP -> blocked.
    assert decisions["b"].target == 2 and decisions["b"].reason == REASON_SAFETY_OVERRIDE
    only = arbitrate_all(DOWN, states)
    assert only["b"] == Decision(
        1, REASON_SATURATION_ONLY, "Saturation-only mode: scale-down decision (target: 1 replicas)", "scale-down"
    )
