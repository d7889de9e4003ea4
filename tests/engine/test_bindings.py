"""Kthena AutoscalingPolicyBinding cycles: recommendation, correction, distribution and safety holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine.api.kthena import AutoscalingPolicyMetric, AutoscalingPolicySpec, ModelSpec
from engine.optimize.bindings import (
    ANNOTATION_SCALE_GROUPS,
    BindingInputs,
    BindingTarget,
    GroupMember,
    binding_status,
    group_count,
    group_instances,
    parse_scale_groups,
    plan_binding,
)
from engine.optimize.scaling.behavior import ScalingState

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
POLICY = AutoscalingPolicySpec.model_validate(
    {
        "tolerancePercent": 10,
        "metrics": [{"metricName": "vllm:num_requests_waiting", "targetValue": "5"}],
        "behavior": {"scaleUp": {"stablePolicy": {"instances": 10, "percent": 1000, "period": "15s"}}},
    }
)


def with_behavior(behavior: dict) -> AutoscalingPolicySpec:
    """POLICY with another ``behavior``."""
    return AutoscalingPolicySpec.model_validate({**POLICY.to_dict(), "behavior": behavior})


def target(
    name: str = "llama", current: int | None = 2, low: int = 1, high: int = 10, cost: float = 0.0
) -> BindingTarget:
    return BindingTarget(name, "ns", "apps/v1", "Deployment", current, low, high, cost)


def inputs(**overrides: object) -> BindingInputs:
    values: dict[str, object] = dict(
        namespace="ns",
        name="b",
        generation=3,
        policy_name="p",
        policy=POLICY,
        heterogeneous=False,
        targets=[target()],
        instances=[{"vllm:num_requests_waiting": 10.0}, {"vllm:num_requests_waiting": 10.0}],
    )
    values.update(overrides)
    return BindingInputs(**values)  # type: ignore[arg-type]


def test_homogeneous_scales_up_when_metric_doubles_target() -> None:
    decision = plan_binding(inputs(), NOW)
    assert decision.ready and decision.reason == "OptimizationSucceeded"
    assert decision.recommended == 4
    assert [t.desired for t in decision.targets] == [4]
    assert decision.state is not None and decision.state.history[-1].recommended == 4


def test_within_tolerance_keeps_current() -> None:
    decision = plan_binding(
        inputs(instances=[{"vllm:num_requests_waiting": 5.4}, {"vllm:num_requests_waiting": 5.4}]), NOW
    )
    assert [t.desired for t in decision.targets] == [2]


def test_missing_policy_holds_and_says_so() -> None:
    decision = plan_binding(inputs(policy=None), NOW)
    assert not decision.ready and decision.reason == "PolicyNotFound"
    assert [t.desired for t in decision.targets] == [2] and "'p'" in decision.message


def test_metrics_error_never_scales_down() -> None:
    decision = plan_binding(inputs(metrics_error="prometheus down", instances=[]), NOW)
    assert decision.reason == "MetricsUnavailable" and [t.desired for t in decision.targets] == [2]


def test_no_samples_holds() -> None:
    decision = plan_binding(inputs(instances=[]), NOW)
    assert decision.reason == "MetricsUnavailable" and [t.desired for t in decision.targets] == [2]


def test_missing_target_holds() -> None:
    decision = plan_binding(inputs(targets=[target(current=None)]), NOW)
    assert decision.reason == "TargetNotFound" and not decision.ready


def test_bad_target_value_is_reported_with_field() -> None:
    # The boundary reader refuses such a policy; the planner still names the field if one gets through.
    bad = AutoscalingPolicyMetric.model_construct(metric_name="m", target_value="lots")
    policy = POLICY.model_copy(update={"metrics": [bad]})
    decision = plan_binding(inputs(policy=policy), NOW)
    assert decision.reason == "InvalidConfiguration" and "spec.metrics[0].targetValue" in decision.message


@pytest.mark.parametrize("value", ["0", "-1", "-5", "1e400", 0])
def test_a_target_value_kthena_refuses_holds_replicas_and_names_the_field(value: str | int) -> None:
    """Kthena's webhook refuses a target value that is not above 0, or infinite; a target of 0 or below read any
    load as none and scaled down (a target of -1 took a Deployment from 6 to 5 on metrics at target)."""
    bad = AutoscalingPolicyMetric.model_validate({"metricName": "vllm:num_requests_waiting", "targetValue": value})
    decision = plan_binding(inputs(policy=POLICY.model_copy(update={"metrics": [bad]})), NOW)
    assert decision.reason == "InvalidConfiguration" and not decision.ready
    assert "spec.metrics[0].targetValue: metric target value must be greater than 0" in decision.message
    assert [t.desired for t in decision.targets] == [2]


def test_a_metric_named_twice_holds_replicas_and_names_the_field() -> None:
    metrics = [{"metricName": "vllm:num_requests_waiting", "targetValue": v} for v in ("5", "50")]
    policy = AutoscalingPolicySpec.model_validate({**POLICY.to_dict(), "metrics": metrics})
    decision = plan_binding(inputs(policy=policy), NOW)
    assert decision.reason == "InvalidConfiguration" and [t.desired for t in decision.targets] == [2]
    assert "spec.metrics[1].metricName: duplicate metric name vllm:num_requests_waiting" in decision.message


@pytest.mark.parametrize(
    ("behavior", "field"),
    [
        ({"scaleDown": {"period": "31m"}}, "spec.behavior.scaleDown.period"),
        ({"scaleDown": {"stabilizationWindow": "2h"}}, "spec.behavior.scaleDown.stabilizationWindow"),
        ({"scaleUp": {"stablePolicy": {"period": "1801s"}}}, "spec.behavior.scaleUp.stablePolicy.period"),
        ({"scaleUp": {"panicPolicy": {"period": "40m"}}}, "spec.behavior.scaleUp.panicPolicy.period"),
        ({"scaleUp": {"panicPolicy": {"panicModeHold": "24h"}}}, "spec.behavior.scaleUp.panicPolicy.panicModeHold"),
    ],
)
def test_a_period_or_window_over_30_minutes_holds_replicas_and_names_the_field(behavior: dict, field: str) -> None:
    decision = plan_binding(inputs(policy=with_behavior(behavior)), NOW)
    assert decision.reason == "InvalidConfiguration" and [t.desired for t in decision.targets] == [2]
    assert f"{field}: " in decision.message and "must be between 0 and 30 minutes" in decision.message


def test_a_window_of_exactly_30_minutes_is_kept() -> None:
    decision = plan_binding(inputs(policy=with_behavior({"scaleDown": {"stabilizationWindow": "30m"}})), NOW)
    assert decision.ready


def test_an_invalid_policy_is_reported_as_invalid_not_as_missing() -> None:
    decision = plan_binding(
        inputs(policy=None, policy_invalid="spec.behavior.scaleUp.panicPolicy.panicThresholdPercent: too low"), NOW
    )
    assert decision.reason == "InvalidConfiguration" and [t.desired for t in decision.targets] == [2]
    assert decision.message == (
        "AutoscalingPolicy p is invalid: spec.behavior.scaleUp.panicPolicy.panicThresholdPercent: too low"
    )


def test_heterogeneous_distributes_total_cheapest_first() -> None:
    targets = [target("h100", current=1, low=1, high=4, cost=80), target("a100", current=1, low=1, high=4, cost=40)]
    instances = [{"vllm:num_requests_waiting": 10.0}] * 2  # ratio 2 over 2 replicas -> 4 in total
    decision = plan_binding(inputs(targets=targets, heterogeneous=True, instances=instances), NOW)
    assert decision.recommended == 4
    desired = {t.name: t.desired for t in decision.targets}
    assert sum(desired.values()) == 4 and desired["a100"] >= desired["h100"] >= 1


def test_status_persists_window_state_and_conditions() -> None:
    decision = plan_binding(inputs(), NOW)
    decision.targets[0].applied = decision.targets[0].scaled = True
    status = binding_status(decision, {}, NOW, 3, True, "ok")
    assert status["observedGeneration"] == 3 and status["desiredReplicas"] == 4 and status["currentReplicas"] == 2
    assert status["lastScaleTime"] == "2026-11-22T12:00:00Z"
    assert status["targets"] == [{"name": "llama", "namespace": "ns", "replicas": 4, "actuation": {"applied": True}}]
    state = ScalingState.from_dict(status)
    assert state.history[-1].corrected == 4
    types = {c["type"]: c for c in status["conditions"]}
    assert types["OptimizationReady"]["status"] == "True" and types["MetricsAvailable"]["reason"] == "MetricsAvailable"
    # The next run reads the persisted state back: a scale-down within the stabilization window is held.
    later = plan_binding(
        inputs(
            targets=[target(current=4)],
            instances=[{"vllm:num_requests_waiting": 1.0}] * 4,
            old_status=status,
            policy=with_behavior({"scaleDown": {"stabilizationWindow": "5m", "period": "15s"}}),
        ),
        NOW + timedelta(seconds=60),
    )
    assert [t.desired for t in later.targets] == [4]


def test_scale_to_zero_waits_for_the_grace_period_with_state_in_status() -> None:
    """A binding with min 0 whose policy recommends 0 reaches 0 only after the grace period, and the
    clock survives between cycles in status (each cycle is a fresh process)."""
    from engine.api.meta import format_time

    policy = with_behavior({"scaleDown": {"stabilizationWindow": "0s"}})
    idle = [{"vllm:num_requests_waiting": 0.0}]
    status: dict = {}
    replicas = []
    for seconds, current in ((0, 1), (30, 1), (61, 1)):
        now = NOW + timedelta(seconds=seconds)
        decision = plan_binding(
            inputs(
                policy=policy,
                targets=[target(current=current, low=0)],
                instances=idle,
                scale_to_zero_grace_s=60.0,
                old_status=status,
            ),
            now,
        )
        replicas.append(decision.targets[0].desired)
        status = binding_status(decision, status, now, 3, True, "ok")
    assert replicas == [1, 1, 0]
    assert status["zeroSince"] == format_time(NOW)
    immediate = plan_binding(inputs(policy=policy, targets=[target(current=1, low=0)], instances=idle), NOW)
    assert immediate.targets[0].desired == 0  # no grace period configured: as before


def test_grace_period_from_annotation_or_owning_model() -> None:
    from engine.optimize.bindings import ANNOTATION_SCALE_TO_ZERO_GRACE, scale_to_zero_grace

    workers = [{"type": "server"}]
    model = ModelSpec.model_validate(
        {
            "backends": [
                {"name": "a", "type": "vLLM", "workers": workers, "scaleToZeroGracePeriod": "30s"},
                {"name": "b", "type": "vLLM", "workers": workers, "scaleToZeroGracePeriod": "2m"},
                {"name": "c", "type": "vLLM", "workers": workers},
            ]
        }
    )
    assert scale_to_zero_grace({ANNOTATION_SCALE_TO_ZERO_GRACE: "45s"}, model) == 45.0
    assert scale_to_zero_grace({}, model) == 120.0
    assert scale_to_zero_grace({}, None) is None


def pd_group(prefill: int | None, decode: int | None, low: int = 1, high: int = 4, cost: float = 30.0) -> BindingTarget:
    """A P/D backend as one group: 2 prefill + 1 decode per group."""
    members = (
        GroupMember("pd-prefill", "apps/v1", "Deployment", 2, prefill),
        GroupMember("pd-decode", "apps/v1", "Deployment", 1, decode),
    )
    return BindingTarget("pd-prefill", "ns", "apps/v1", "Deployment", group_count(members), low, high, cost, members)


@pytest.mark.parametrize("waiting", [6.0, 11.0, 16.0, 30.0, 100.0])
def test_prefill_decode_group_keeps_its_ratio_at_any_total(waiting: float) -> None:
    """A 2:1 P/D group beside a plain backend: whatever total the optimizer pours, prefill = 2 x decode,
    and the group's cost is counted once per group."""
    targets = [pd_group(2, 1), target("plain", current=1, low=1, high=4, cost=100.0)]
    instances = group_instances([{"vllm:num_requests_waiting": waiting}] * 3, 1) + [
        {"vllm:num_requests_waiting": waiting}
    ]
    decision = plan_binding(inputs(targets=targets, heterogeneous=True, instances=instances), NOW)
    assert decision.ready
    by_name = {t.name: t for t in decision.targets}
    assert set(by_name) == {"pd-prefill", "pd-decode", "plain"}
    groups = by_name["pd-decode"].desired
    assert groups is not None and 1 <= groups <= 4 and by_name["pd-prefill"].desired == 2 * groups
    assert by_name["pd-prefill"].cost == 30.0 * groups and by_name["pd-decode"].cost == 0.0


def test_a_broken_ratio_is_restored_and_a_hold_keeps_members_where_they_are() -> None:
    # Someone scaled prefill to 5 by hand: 2 whole groups (decode 2); the cycle writes 2:1 again.
    decision = plan_binding(inputs(targets=[pd_group(5, 2)], instances=[{"vllm:num_requests_waiting": 5.0}] * 2), NOW)
    assert [(t.name, t.current, t.desired) for t in decision.targets] == [("pd-prefill", 5, 4), ("pd-decode", 2, 2)]
    held = plan_binding(inputs(targets=[pd_group(5, 2)], policy=None), NOW)
    assert [(t.name, t.desired) for t in held.targets] == [("pd-prefill", 5), ("pd-decode", 2)]
    assert (
        group_count(
            (GroupMember("a", "apps/v1", "Deployment", 2, 4), GroupMember("b", "apps/v1", "Deployment", 1, None))
        )
        is None
    )


def test_scale_groups_annotation_is_parsed_or_rejected_with_its_name() -> None:
    groups = parse_scale_groups(
        {
            ANNOTATION_SCALE_GROUPS: '{"p": [{"name": "p", "perGroup": 2}, {"name": "w", "perGroup": 1, "serves": false}]}'
        }
    )
    assert groups == {"p": [("p", 2, True), ("w", 1, False)]}
    with pytest.raises(ValueError, match="modelplane.io/scale-groups"):
        parse_scale_groups({ANNOTATION_SCALE_GROUPS: '{"p": [{"name": "p", "perGroup": 0}]}'})
