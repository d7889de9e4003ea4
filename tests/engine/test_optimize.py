"""The pure optimize cycle: model-based allocation, saturation arbitration and every safety rule."""

from __future__ import annotations

import copy
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.optimize.config import AcceleratorCost, ConfigError, parse_service_class
from engine.optimize.plan import VariantDecision, plan_variants
from engine.optimize.spec import CycleInputs, ModelLoad, PodSample, SpecError, parse_variant, replica_cost
from engine.optimize.status import status_patch, variant_status
from engine.perf.saturation import DEFAULT_VARIANT_COST, SaturationConfigSet
from tests.factories import PROFILES, parsed_variant, variant_autoscaling

KIND = {"apiVersion": "llmd.ai/v1alpha1", "kind": "VariantAutoscaling"}
NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
NS = "llm"
MODEL = "meta/llama-3.1-8b"
A100 = PROFILES["A100"]
COSTS = {
    "A100": AcceleratorCost("A100", "NVIDIA-A100", 40.0),
    "H100": AcceleratorCost("H100", "NVIDIA-H100", 80.0),
}
PREMIUM = parse_service_class(
    f"name: Premium\npriority: 1\ndata:\n  - model: {MODEL}\n    slo-tpot: 24\n    slo-ttft: 500\n", "slo/premium"
)


def va(
    name: str, accelerator: str = "A100", parms: dict[str, str] | None = None, target: str | None = None, **spec: Any
) -> dict[str, Any]:
    """A VariantAutoscaling of MODEL in NS whose SLO is the ``slo/premium`` class."""
    return variant_autoscaling(
        name, NS, MODEL, accelerator, parms, target=target, **{"sloClassRef": {"name": "slo", "key": "premium"}, **spec}
    )


def pods(count: int, kv: float = 0.3, queue: float = 0.0, prefix: str = "a100") -> list[PodSample]:
    return [PodSample(f"{prefix}-{i}", kv, queue) for i in range(count)]


def inputs(variants: list[dict[str, Any]], current: dict[str, int], **overrides: Any) -> CycleInputs:
    values: dict[str, Any] = dict(
        now=NOW,
        variants=[parsed_variant(v) for v in variants],
        current_replicas={(NS, "Deployment", name): replicas for name, replicas in current.items()},
        accelerator_costs=COSTS,
        service_classes={("slo", "premium"): PREMIUM},
        saturation=SaturationConfigSet.from_configmap({}),
        loads={(NS, MODEL): ModelLoad(arrival_rate_rps=20.0, avg_in_tokens=128, avg_out_tokens=256)},
        pods={(NS, MODEL): pods(2)},
    )
    values.update(overrides)
    return CycleInputs(**values)


def by_name(decisions: list[VariantDecision]) -> dict[str, VariantDecision]:
    return {d.name: d for d in decisions}


def test_load_is_served_by_the_cheapest_capacity() -> None:
    decisions = by_name(plan_variants(inputs([va("a100"), va("h100", "H100")], {"a100": 1, "h100": 1})))
    # A100 sustains ~1.18 req/s within the SLO, H100 ~7.92: H100 is ~3x cheaper per request, so
    # 20 req/s goes to 3 H100 replicas and A100 stays at its floor of 1.
    assert {name: d.desired for name, d in decisions.items()} == {"a100": 1, "h100": 3}
    assert all(d.ready and d.reason == "OptimizationSucceeded" for d in decisions.values())
    assert decisions["a100"].metrics.status == "True"
    assert "Hybrid mode" in decisions["a100"].message
    # Costs reported are unit cost x accelerators x replicas.
    assert decisions["a100"].cost == pytest.approx(40.0 * decisions["a100"].desired)


def test_rising_load_scales_up() -> None:
    low = by_name(plan_variants(inputs([va("a100")], {"a100": 1}, loads={(NS, MODEL): ModelLoad(1.0, 128, 256)})))
    high = by_name(plan_variants(inputs([va("a100")], {"a100": 1}, loads={(NS, MODEL): ModelLoad(60.0, 128, 256)})))
    assert low["a100"].desired == 1
    assert high["a100"].desired > 1 and high["a100"].changes_replicas


def test_falling_load_scales_down_only_when_saturation_says_safe() -> None:
    quiet = {(NS, MODEL): ModelLoad(0.5, 128, 256)}
    safe = by_name(plan_variants(inputs([va("a100")], {"a100": 4}, loads=quiet, pods={(NS, MODEL): pods(4, kv=0.1)})))
    assert safe["a100"].desired < 4 and safe["a100"].reason == "OptimizationSucceeded"
    saturated = by_name(
        plan_variants(inputs([va("a100")], {"a100": 4}, loads=quiet, pods={(NS, MODEL): pods(4, kv=0.95, queue=9)}))
    )
    assert saturated["a100"].desired == 4 and saturated["a100"].reason == "SaturationSafetyOverride"


def test_no_pod_metrics_blocks_scale_down_but_allows_scale_up() -> None:
    down = by_name(
        plan_variants(inputs([va("a100")], {"a100": 4}, loads={(NS, MODEL): ModelLoad(0.5, 128, 256)}, pods={}))
    )
    assert down["a100"].desired == 4 and "no per-pod saturation metrics" in down["a100"].message
    up = by_name(
        plan_variants(inputs([va("a100")], {"a100": 1}, loads={(NS, MODEL): ModelLoad(60.0, 128, 256)}, pods={}))
    )
    assert up["a100"].desired > 1


def test_missing_metrics_hold_current_and_report_unavailable() -> None:
    decision = by_name(plan_variants(inputs([va("a100")], {"a100": 3}, loads={}, pods={})))["a100"]
    assert decision.desired == 3 and not decision.ready and decision.reason == "MetricsUnavailable"
    assert decision.metrics.status == "False" and decision.metrics.reason == "MetricsUnavailable"
    assert "vllm:request_success_total" in decision.metrics.message


def test_metrics_backend_down_holds_everything() -> None:
    decisions = plan_variants(
        inputs([va("a100"), va("h100", "H100")], {"a100": 3, "h100": 2}, metrics_error="connection refused")
    )
    assert [d.desired for d in decisions] == [3, 2]
    assert all(d.metrics.status == "False" and "connection refused" in d.metrics.message for d in decisions)


def test_invalid_resource_gets_its_own_condition_and_others_proceed() -> None:
    bad = va("bad", parms={"alpha": "fast", "beta": "0.4", "gamma": "5", "delta": "0.1"})
    decisions = by_name(plan_variants(inputs([bad, va("a100")], {"a100": 1, "bad": 1})))
    assert decisions["bad"].reason == "InvalidConfiguration" and not decisions["bad"].ready
    assert "spec.variantProfile.perfParms.decodeParms.alpha" in decisions["bad"].message
    assert decisions["a100"].ready and decisions["a100"].desired is not None


@pytest.mark.parametrize(
    ("variant", "fragment"),
    [
        (va("x", accelerator="TPU", parms=A100), "unknown accelerator 'TPU'"),
        (va("x", sloClassRef={"name": "slo", "key": "gold"}), "has no key 'gold'"),
    ],
)
def test_configuration_errors_name_the_field(variant: dict[str, Any], fragment: str) -> None:
    decision = plan_variants(inputs([variant], {"x": 2}))[0]
    assert decision.reason == "InvalidConfiguration" and fragment in decision.message and decision.desired == 2


def test_broken_service_class_is_reported() -> None:
    error = ConfigError("slo/premium", "invalid YAML")
    decision = plan_variants(inputs([va("a100")], {"a100": 2}, service_classes={("slo", "premium"): error}))[0]
    assert decision.reason == "InvalidConfiguration" and "invalid YAML" in decision.message and decision.desired == 2


def test_infeasible_slo_keeps_current_and_names_the_variant() -> None:
    strict = parse_service_class(
        f"name: Strict\npriority: 1\ndata:\n  - model: {MODEL}\n    slo-tpot: 1\n    slo-ttft: 1\n", "slo/premium"
    )
    decision = plan_variants(inputs([va("a100")], {"a100": 2}, service_classes={("slo", "premium"): strict}))[0]
    assert decision.desired == 2 and not decision.ready and decision.reason == "SLOInfeasible"
    assert f"{MODEL}-A100-1" in decision.message


def test_recommend_annotation_disables_actuation() -> None:
    variant = va("a100")
    variant["metadata"]["annotations"] = {"modelplane.io/actuation": "recommend"}
    decision = plan_variants(inputs([variant], {"a100": 1}, loads={(NS, MODEL): ModelLoad(60.0, 128, 256)}))[0]
    assert decision.desired > 1 and decision.actuate is False


def test_min_max_annotations_clamp() -> None:
    variant = va("a100")
    variant["metadata"]["annotations"] = {"modelplane.io/min-replicas": "2", "modelplane.io/max-replicas": "3"}
    high = plan_variants(inputs([variant], {"a100": 2}, loads={(NS, MODEL): ModelLoad(500.0, 128, 256)}))[0]
    assert high.desired == 3
    low = plan_variants(
        inputs(
            [variant], {"a100": 3}, loads={(NS, MODEL): ModelLoad(0.0, 128, 256)}, pods={(NS, MODEL): pods(3, kv=0.05)}
        )
    )[0]
    assert low.desired == 2


def test_scale_to_zero_needs_the_annotation() -> None:
    idle = {(NS, MODEL): ModelLoad(0.0, 128, 256)}
    quiet_pods = {(NS, MODEL): pods(2, kv=0.0)}
    default = plan_variants(inputs([va("a100")], {"a100": 2}, loads=idle, pods=quiet_pods))[0]
    assert default.desired == 1
    variant = va("a100")
    variant["metadata"]["annotations"] = {"modelplane.io/scale-to-zero": "true"}
    zero = plan_variants(inputs([variant], {"a100": 1}, loads=idle, pods={(NS, MODEL): pods(1, kv=0.0)}))[0]
    assert zero.desired == 0 and "Scale to zero" in zero.message
    busy = plan_variants(
        inputs(
            [variant], {"a100": 1}, loads={(NS, MODEL): ModelLoad(0.01, 128, 256)}, pods={(NS, MODEL): pods(1, kv=0.0)}
        )
    )[0]
    assert busy.desired == 1  # any traffic keeps the last replica


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("modelplane.io/scale-to-zero", "yes", "must be true or false, got 'yes'"),
        ("modelplane.io/burst-sizing", "on", "must be true or false, got 'on'"),
        ("modelplane.io/scale-down-stabilization-window", "bogus", "invalid duration 'bogus'"),
        ("modelplane.io/scale-down-stabilization-window", "-3m", "invalid duration '-3m'"),
        ("modelplane.io/scale-down-stabilization-window", "2h", "must be at most 1h"),
        ("modelplane.io/router", "least-latncy", "unknown router 'least-latncy'; choose from least-outstanding"),
    ],
)
def test_an_unreadable_scaling_annotation_makes_the_variant_invalid(key: str, value: str, fragment: str) -> None:
    """A value the plan cannot read is not replaced by a default (``yes`` read as false, a window read as the
    cycle's, a misspelt router as one that predicts no latency): the variant gets no decision, and the condition names the annotation and says why; the other
    variant of the same run is optimized."""
    bad, good = va("a100"), va("h100")
    bad["metadata"]["annotations"] = {key: value}
    decisions = {d.name: d for d in plan_variants(inputs([bad, good], {"a100": 2, "h100": 1}))}

    invalid = decisions[bad["metadata"]["name"]]
    assert invalid.desired is None and invalid.reason == "InvalidConfiguration"
    assert f"metadata.annotations[{key}]" in invalid.message and fragment in invalid.message
    assert decisions[good["metadata"]["name"]].desired is not None


def test_saturation_only_variant_scales_on_pressure() -> None:
    variant = va("a100")
    del variant["spec"]["variantProfile"]
    decision = plan_variants(inputs([variant], {"a100": 2}, pods={(NS, MODEL): pods(2, kv=0.9, queue=8)}))[0]
    assert decision.reason == "SaturationOnlyMode" and decision.desired == 3


def test_missing_target_is_reported_without_actuation() -> None:
    decision = plan_variants(inputs([va("a100", target="gone")], {"a100": 1}))[0]
    assert decision.reason == "TargetNotFound" and decision.desired is None and not decision.actuate


def test_parse_variant_accepts_the_second_generation() -> None:
    spec = parse_variant(
        parsed_variant(
            {
                **KIND,
                "metadata": {
                    "name": "v",
                    "namespace": NS,
                    "labels": {"inference.optimization/acceleratorName": "H100"},
                },
                "spec": {
                    "modelID": MODEL,
                    "scaleTargetRef": {"kind": "Deployment", "name": "v"},
                    "variantCost": "25.5",
                },
            }
        )
    )
    assert spec.accelerator == "H100" and spec.profile is None and spec.variant_cost == 25.5 and spec.min_replicas == 1


def test_parse_variant_requires_a_scale_target() -> None:
    with pytest.raises(SpecError) as info:
        parse_variant(parsed_variant({**KIND, "metadata": {"name": "v"}, "spec": {"modelID": MODEL}}))
    assert info.value.field == "spec.scaleTargetRef.name"


def test_status_has_both_generations_fields_and_skips_heartbeat_only_writes() -> None:
    decision = plan_variants(inputs([va("a100")], {"a100": 1}))[0]
    status = variant_status(decision, {}, NOW, applied=True, generation=1)
    # no spec.variantCost: the cost derives from the A100 unit cost (one cost everywhere, not WVA's 10.00)
    assert status["currentAlloc"]["accelerator"] == "A100" and status["currentAlloc"]["variantCost"] == "40.00"
    assert status["desiredOptimizedAlloc"]["lastRunTime"] == "2026-11-22T12:00:00Z"
    assert status["actuation"] == {"applied": True}
    assert {c["type"] for c in status["conditions"]} == {"MetricsAvailable", "OptimizationReady"}
    assert status_patch({}, status, NOW) == status
    later = NOW + timedelta(seconds=60)
    again = variant_status(decision, copy.deepcopy(status), later, applied=True, generation=1)
    assert status_patch(status, again, later, heartbeat_s=300) is None
    much_later = NOW + timedelta(seconds=301)
    heartbeat = variant_status(decision, copy.deepcopy(status), much_later, applied=True, generation=1)
    assert status_patch(status, heartbeat, much_later, heartbeat_s=300) == {
        "desiredOptimizedAlloc": heartbeat["desiredOptimizedAlloc"]
    }


def test_one_cost_per_replica_everywhere() -> None:
    """Without spec.variantCost the replica cost is unit cost x acceleratorCount in the status, the table and
    the saturation choice; a declared variantCost wins everywhere."""
    two_h100 = va("h100x2", accelerator="H100")
    two_h100["spec"]["acceleratorCount"] = 2
    declared = va("declared", accelerator="A100")
    declared["spec"]["variantCost"] = "12.5"
    decisions = {d.name: d for d in plan_variants(inputs([two_h100, declared], {"h100x2": 1, "declared": 1}))}
    h100 = COSTS["H100"].cost
    assert decisions["h100x2"].variant_cost == 2 * h100
    assert decisions["h100x2"].cost == pytest.approx(2 * h100 * decisions["h100x2"].desired)
    assert decisions["declared"].variant_cost == 12.5
    assert decisions["declared"].cost == pytest.approx(12.5 * decisions["declared"].desired)
    specs = {n: parse_variant(parsed_variant(v)) for n, v in (("h100x2", two_h100), ("declared", declared))}
    assert replica_cost(specs["h100x2"], COSTS) == 2 * h100 and replica_cost(specs["declared"], COSTS) == 12.5
    assert replica_cost(specs["h100x2"], {}) == DEFAULT_VARIANT_COST


def test_invalid_resource_still_reports_its_current_allocation() -> None:
    broken = va("broken", parms={"alpha": "fast", "beta": "0.4", "gamma": "5", "delta": "0.1"})  # schema-valid strings
    decision = plan_variants(inputs([broken], {"broken": 3}))[0]
    assert decision.reason == "InvalidSpec" or not decision.ready
    assert decision.desired is None and decision.current == 3
    status = variant_status(decision, {}, NOW, applied=False, generation=1)
    assert status["currentAlloc"] == {"accelerator": "A100", "numReplicas": 3}
    assert status["actuation"] == {"applied": False}


def test_saturation_veto_counts_capacity_the_plan_adds_on_other_variants() -> None:
    """The model moves to H100 (+2 replicas there) and saturation wants one more replica: the A100
    scale-down is no longer vetoed, since the H100 replicas added this cycle cover both the need and the
    A100 replica removed. Before, the A100 replica stayed (the 327/h-instead-of-287/h ramp)."""
    hot = {(NS, MODEL): pods(2, kv=0.95, queue=9, prefix="a100") + pods(1, kv=0.95, queue=9, prefix="h100")}
    decisions = by_name(plan_variants(inputs([va("a100"), va("h100", "H100")], {"a100": 2, "h100": 1}, pods=hot)))
    assert decisions["h100"].desired == 3
    assert decisions["a100"].desired == 1 and decisions["a100"].reason == "OptimizationSucceeded"
    assert "saturation covered" in decisions["a100"].message
    # Without capacity added elsewhere the veto stands.
    alone = by_name(
        plan_variants(
            inputs(
                [va("a100")],
                {"a100": 4},
                loads={(NS, MODEL): ModelLoad(0.5, 128, 256)},
                pods={(NS, MODEL): pods(4, kv=0.95, queue=9)},
            )
        )
    )
    assert alone["a100"].desired == 4 and alone["a100"].reason == "SaturationSafetyOverride"


def test_scale_down_stabilization_rides_out_a_flapping_recommendation() -> None:
    """rate() lag between cycles seconds apart made the recommendation go 2 -> 1 -> 2 -> 1: with a window
    the replica stays until a scale-down has been recommended for the whole window; state in an annotation."""
    from datetime import timedelta

    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING, stabilize_scale_down

    annotations: dict[str, str] = {}
    desired_seen = []
    for seconds, recommended in ((0, 1), (10, 2), (20, 1), (30, 1), (200, 1)):
        result = stabilize_scale_down(recommended, 2, annotations, 120.0, NOW + timedelta(seconds=seconds))
        desired_seen.append(result.desired)
        if result.changed:
            if result.pending is None:
                annotations.pop(ANNOTATION_SCALE_DOWN_PENDING, None)
            else:
                annotations[ANNOTATION_SCALE_DOWN_PENDING] = result.pending
    assert desired_seen == [2, 2, 2, 2, 1]
    assert ANNOTATION_SCALE_DOWN_PENDING not in annotations
    # no window: at once (a per-resource window is the plan's: test_plan_variants_holds_a_scale_down_within_the_window)
    assert stabilize_scale_down(1, 2, {}, 0.0, NOW).desired == 1
    assert stabilize_scale_down(3, 2, {}, 120.0, NOW).desired == 3  # scale-up passes


def minute_by_minute(recommended: list[int], current: int) -> tuple[list[int], dict[str, str]]:
    """The replicas a 120 s scale-down window leaves each minute under these recommendations, the window's state
    annotation written back between cycles as the flow does; and the annotations at the end."""
    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING, stabilize_scale_down

    annotations: dict[str, str] = {}
    seen = []
    for minute, desired in enumerate(recommended):
        result = stabilize_scale_down(desired, current, annotations, 120.0, NOW + timedelta(minutes=minute))
        if result.changed:
            annotations.pop(ANNOTATION_SCALE_DOWN_PENDING, None)
            if result.pending is not None:
                annotations[ANNOTATION_SCALE_DOWN_PENDING] = result.pending
        current = result.desired
        seen.append(current)
    return seen, annotations


def test_a_scale_down_past_its_window_goes_in_halves_cycle_by_cycle() -> None:
    """8 -> 1 after the window: 8 -> 4 -> 2 -> 1 in three cycles, each without a new wait (the window's state is
    kept as passed); a recommendation that rises meanwhile stops the descent there; with no window (the flow's
    default, WVA's) the whole scale-down passes at once."""
    from engine.optimize.stabilization import stabilize_scale_down

    assert minute_by_minute([1, 1, 1, 1, 1, 1], 8)[0] == [8, 8, 4, 2, 1, 1]
    assert minute_by_minute([1, 1, 1, 3, 3, 3], 8)[0] == [8, 8, 4, 3, 3, 3]
    assert stabilize_scale_down(1, 8, {}, 0.0, NOW).desired == 1
    assert "8 -> 4 this cycle, towards 1" in stabilize_scale_down(1, 8, {}, 120.0, NOW, falling=True).note


def test_a_sustained_fall_drops_the_counts_recommended_before_it() -> None:
    """6 recommended, then a sustained fall recommends 2: 8 -> 4 at once, and the next cycle goes on to 2 instead of
    holding 4 for the 6 still inside the window (the fall says those counts no longer stand)."""
    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING, stabilize_scale_down

    annotations: dict[str, str] = {}
    current, seen = 8, []
    for minute, (desired, falling) in enumerate([(6, False), (2, True), (2, False)]):
        result = stabilize_scale_down(desired, current, annotations, 300.0, NOW + timedelta(minutes=minute), falling)
        annotations = {ANNOTATION_SCALE_DOWN_PENDING: result.pending} if result.pending is not None else {}
        current = result.desired
        seen.append(current)
    assert seen == [8, 4, 2] and not annotations


def test_a_falling_recommendation_is_followed_a_window_behind() -> None:
    """The HPA's rolling window: once a scale-down has waited out the window, each cycle goes to the highest
    recommendation of the last window, without a new wait at each step (9 -> 7 -> 6 -> 5 under recommendations
    8, 7, 6, 5 and a 120 s window; restarting the window after each step held 8 for three cycles); an old
    ``{"since", "max"}`` state reads as one recommendation; the state goes once the recommendation is reached."""
    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING, stabilize_scale_down

    seen, annotations = minute_by_minute([8, 7, 6, 5, 5, 5], 9)
    assert seen == [9, 9, 7, 6, 5, 5]
    assert ANNOTATION_SCALE_DOWN_PENDING not in annotations
    old = {ANNOTATION_SCALE_DOWN_PENDING: json.dumps({"since": "2026-11-22T11:57:00Z", "max": 6})}
    assert stabilize_scale_down(4, 9, old, 120.0, NOW).desired == 5  # passed: 9 -> 5 (half), towards 4
    assert stabilize_scale_down(4, 9, old, 240.0, NOW).desired == 9  # within its window: held
    # a recommendation of the current count still inside the window holds it
    inside = {
        ANNOTATION_SCALE_DOWN_PENDING: json.dumps(
            {"since": "2026-11-22T11:50:00Z", "recommended": [["2026-11-22T11:59:00Z", 5]]}
        )
    }
    kept = stabilize_scale_down(4, 5, inside, 120.0, NOW)
    assert kept.desired == 5 and "5 recommended within it" in kept.note


def test_the_window_state_keeps_only_the_recommendations_that_can_still_decide() -> None:
    """A 10 s cycle under a 10-minute window recommending 3, 2, 3, 2, ... below 5 replicas: the state keeps a
    recommendation only while no later one is as high (the later one outlives it in the window), so it never holds
    more than one entry per replica count, and the replicas stay at 5 within the window."""
    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING, stabilize_scale_down

    annotations: dict[str, str] = {}
    for cycle in range(60):
        result = stabilize_scale_down(3 - cycle % 2, 5, annotations, 600.0, NOW + timedelta(seconds=10 * cycle))
        assert result.desired == 5 and result.pending is not None
        annotations[ANNOTATION_SCALE_DOWN_PENDING] = result.pending
        kept = [count for _, count in json.loads(result.pending)["recommended"]]
        assert kept == ([3] if cycle % 2 == 0 else [3, 2])


def test_a_window_state_dated_in_the_future_lasts_one_window_from_now() -> None:
    """A state whose times lie after this cycle (a writer's clock ahead of ours, or a hand edit to year 9999) reads
    as if written now: the scale-down is held for one window, then passes, instead of waiting until that date."""
    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING, stabilize_scale_down

    ahead = {
        ANNOTATION_SCALE_DOWN_PENDING: json.dumps(
            {"since": "9999-01-01T00:00:00Z", "recommended": [["9999-01-01T00:00:00Z", 4]]}
        )
    }
    held = stabilize_scale_down(2, 4, ahead, 120.0, NOW)
    assert held.desired == 4 and held.pending is not None
    assert json.loads(held.pending)["since"] == "2026-11-22T12:00:00Z"
    later = stabilize_scale_down(2, 4, {ANNOTATION_SCALE_DOWN_PENDING: held.pending}, 120.0, NOW + timedelta(minutes=3))
    assert later.desired == 2


@pytest.mark.parametrize(
    "state",
    [
        "not json",
        "[]",
        "null",
        '{"since": null, "recommended": []}',
        '{"since": "2026-11-22T11:50:00Z", "max": 1e309}',
        '{"since": "2026-11-22T11:50:00Z", "recommended": 5}',
        '{"since": "2026-11-22T11:50:00Z", "recommended": [["yesterday", 3]]}',
    ],
)
def test_an_unreadable_window_state_starts_a_new_window(state: str) -> None:
    """A scale-down-pending annotation that does not read (hand-edited, truncated, null or out-of-range fields)
    neither raises nor decides: the scale-down starts a new window, holding the current count, and the state is
    rewritten."""
    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING, stabilize_scale_down

    result = stabilize_scale_down(2, 4, {ANNOTATION_SCALE_DOWN_PENDING: state}, 120.0, NOW)
    assert result.desired == 4 and result.changed and result.pending is not None
    assert json.loads(result.pending)["since"] == "2026-11-22T12:00:00Z"


def test_plan_variants_holds_a_scale_down_within_the_window() -> None:
    quiet = {(NS, MODEL): ModelLoad(0.5, 128, 256)}
    cycle = inputs(
        [va("a100")], {"a100": 4}, loads=quiet, pods={(NS, MODEL): pods(4, kv=0.1)}, scale_down_window_s=120.0
    )
    held = by_name(plan_variants(cycle))["a100"]
    assert held.desired == 4 and held.stabilization_changed and "stabilization window" in held.message
    assert held.stabilization is not None and '"recommended":' in held.stabilization
    at_once = va("a100")
    at_once["metadata"]["annotations"] = {"modelplane.io/scale-down-stabilization-window": "0s"}
    cycle = inputs([at_once], {"a100": 4}, loads=quiet, pods={(NS, MODEL): pods(4, kv=0.1)}, scale_down_window_s=120.0)
    assert by_name(plan_variants(cycle))["a100"].desired < 4  # the per-resource window wins over the cycle's


def test_plan_variants_skips_the_window_on_a_sustained_fall() -> None:
    """A rate that fell in each recent interval beyond its noise (engine.perf.load_trend) is not noise: the
    scale-down passes at once and a pending window is cleared; a fall within the noise is still held."""
    from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING

    pending = {ANNOTATION_SCALE_DOWN_PENDING: '{"since":"2026-01-01T00:00:00Z","max":4}'}

    def decide(change: float, noise: float, annotations: dict[str, str] | None = None):
        quiet = {(NS, MODEL): ModelLoad(0.5, 128, 256, recent_change_rps=change, change_noise_rps=noise)}
        variant = va("a100")
        variant["metadata"].setdefault("annotations", {}).update(annotations or {})
        cycle = inputs(
            [variant], {"a100": 4}, loads=quiet, pods={(NS, MODEL): pods(4, kv=0.1)}, scale_down_window_s=120.0
        )
        return by_name(plan_variants(cycle))["a100"]

    fell = decide(-1.0, 0.4, pending)
    assert fell.desired == 2 and "window skipped" in fell.message  # at once, half the replicas a cycle
    assert fell.stabilization is not None and fell.stabilization_changed
    assert json.loads(fell.stabilization)["recommended"][-1][1] == 1  # kept: the rest follows next cycle
    assert decide(-0.1, 0.4).desired == 4  # a fall smaller than half the noise: held by the window
    assert decide(0.2, 0.4).desired == 4  # not a fall


def test_plan_cycle_decides_variants_and_bindings_in_one_call() -> None:
    """The optimize flow's one engine call: the variants' and the bindings' decisions, what was sized for,
    the service classes' targets and the summary line, nothing left for the flow to decide."""
    from engine.api.kthena import AutoscalingPolicySpec
    from engine.optimize.bindings import BindingInputs, BindingTarget
    from engine.optimize.plan import plan_cycle

    policy = AutoscalingPolicySpec.model_validate(
        {"tolerancePercent": 10, "metrics": [{"metricName": "vllm:num_requests_waiting", "targetValue": "5"}]}
    )
    binding = BindingInputs(
        namespace=NS,
        name="b",
        generation=1,
        policy_name="p",
        policy=policy,
        heterogeneous=False,
        targets=[BindingTarget("kthena", NS, "apps/v1", "Deployment", 2, 1, 10, priced=False)],
        instances=[{"vllm:num_requests_waiting": 10.0}, {"vllm:num_requests_waiting": 10.0}],
    )
    cycle = inputs([va("a100"), va("h100", "H100")], {"a100": 1, "h100": 1})
    plan = plan_cycle(cycle, [binding])
    assert [(d.name, d.desired) for d in plan.variants] == [(d.name, d.desired) for d in plan_variants(cycle)]
    assert [t.desired for b in plan.bindings for t in b.targets] == [4]
    assert plan.loads == {(NS, MODEL): (20.0, 128, 256)}
    assert plan.slos == {(NS, MODEL): (500.0, 24.0)}
    total = sum(d.cost for d in plan.variants)  # the homogeneous binding gives its target no cost: unpriced
    assert plan.summary == (
        f"2 variants: 1 to scale, 0 not ready; 1 binding targets: 1 to scale; total cost {total:.2f} per hour"
        " (1 binding targets unpriced: their binding gives no cost)"
    )
    assert plan_cycle(cycle).bindings == [] and "binding" not in plan_cycle(cycle).summary
    priced = dataclasses.replace(binding, targets=[BindingTarget("kthena", NS, "apps/v1", "Deployment", 2, 1, 10, 7.5)])
    with_cost = plan_cycle(cycle, [priced])
    assert with_cost.summary.endswith(f"total cost {total + 7.5 * 4:.2f} per hour")  # every row in the total


def test_an_unreadable_inventory_entry_holds_its_accelerators_variants_instead_of_lifting_their_limit() -> None:
    """``accelerator-inventory`` with ``A100: "O"`` (a letter): read as no entry, A100 would be unlimited and the
    20 req/s would go to A100s the cluster may not have. Its variants hold; the other accelerators are planned."""
    unreadable = {"A100": 'accelerator-inventory/A100: count must be an integer, got "O"'}
    variants = [va("a100"), va("h100", "H100")]
    decisions = by_name(
        plan_variants(inputs(variants, {"a100": 1, "h100": 1}, inventory={"H100": 8}, unreadable_inventory=unreadable))
    )

    held = decisions["a100"]
    assert held.desired is None and held.current == 1 and not held.changes_replicas
    assert held.reason == "InvalidConfiguration" and not held.ready
    assert held.message.startswith("accelerator-inventory/A100: count must be an integer")
    assert "its replicas are held" in held.message
    assert decisions["h100"].reason == "OptimizationSucceeded" and decisions["h100"].desired >= 1
