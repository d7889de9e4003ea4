"""Actuation modes (engine.optimize.actuation) and what a cycle publishes (engine.cycle_metrics), pure."""

from __future__ import annotations

import json

import pytest

from engine.cycle_metrics import CycleFacts, MetricSet, hold_value, optimize_cycle_metrics, wva_targets
from engine.optimize.actuation import (
    BOTH,
    METRICS,
    RECOMMEND,
    SCALE,
    Actuation,
    ActuationModeError,
    default_mode,
    desired_ratio,
    resource_mode,
    target_modes,
)
from engine.optimize.bindings import BindingDecision, TargetDecision
from engine.optimize.plan import plan_variants
from engine.optimize.spec import SpecError, parse_variant
from tests.engine.test_optimize import NS, inputs, va
from tests.factories import parsed_variant


@pytest.mark.parametrize(
    ("mode", "scale_ok", "published", "applied"),
    [
        (SCALE, True, False, True),
        (SCALE, False, True, False),
        (METRICS, False, True, True),
        (METRICS, True, False, False),
        (BOTH, True, True, True),
        (BOTH, True, False, False),
        (BOTH, False, True, False),
        (RECOMMEND, True, True, False),
    ],
)
def test_applied_is_what_wva_reports_for_each_mode(mode: str, scale_ok: bool, published: bool, applied: bool) -> None:
    assert Actuation(mode, scale_ok, published).applied is applied


def test_annotation_wins_over_the_configmap_default() -> None:
    assert resource_mode({}, METRICS) == METRICS
    assert resource_mode({"modelplane.io/actuation": " Both "}, METRICS) == BOTH
    with pytest.raises(ActuationModeError, match=r"metadata.annotations\[modelplane.io/actuation\]"):
        resource_mode({"modelplane.io/actuation": "metric"})


def test_a_malformed_default_never_falls_back_to_scaling() -> None:
    assert default_mode(None) == (SCALE, None)
    assert default_mode({"actuation-mode": "metrics"}) == (METRICS, None)
    mode, error = default_mode({"actuation-mode": "metric"})
    assert mode == RECOMMEND and error and "modelplane-optimizer-config/actuation-mode" in error


def test_binding_targets_can_override_the_binding_mode() -> None:
    annotations = {"modelplane.io/actuation-targets": json.dumps({"gpu-a": "metrics"})}
    assert target_modes(annotations, SCALE) == {"gpu-a": METRICS}
    with pytest.raises(ActuationModeError, match="actuation-targets"):
        target_modes({"modelplane.io/actuation-targets": "[1]"}, SCALE)


def test_a_variant_with_an_unknown_mode_is_invalid_naming_the_annotation() -> None:
    variant = va("a100")
    variant["metadata"]["annotations"] = {"modelplane.io/actuation": "hpa"}
    with pytest.raises(SpecError) as raised:
        parse_variant(parsed_variant(variant))
    assert raised.value.field == "metadata.annotations[modelplane.io/actuation]"
    decision = plan_variants(inputs([variant], {"a100": 2}))[0]
    assert decision.desired is None and decision.reason == "InvalidConfiguration"


def test_wva_ratio_follows_wva() -> None:
    assert desired_ratio(3, 2) == 1.5
    assert desired_ratio(2, 0) == 2.0  # 0 -> N is published as N


def test_published_desired_follows_the_safety_rules() -> None:
    """Missing metrics hold the current replicas, and that hold is what is published; a resource with no
    decision publishes its current replicas (WVA's safety net) rather than no series at all."""
    held = plan_variants(inputs([va("a100")], {"a100": 4}, loads={}, pods={}))[0]
    assert held.desired == 4
    assert hold_value(held.desired, held.current) == (4, 4)
    assert hold_value(None, 3) == (3, 3)
    assert hold_value(None, None) is None


def test_the_cycle_publishes_the_wva_family_and_operational_gauges() -> None:
    decisions = plan_variants(inputs([va("a100"), va("h100", "H100")], {"a100": 1, "h100": 1}))
    binding = BindingDecision(
        NS, "b", "p", [TargetDecision("gpu", NS, "apps/v1", "Deployment", 2, 3)], "OptimizationSucceeded", "", True
    )
    facts = CycleFacts(
        started=1700000000.0,
        stages={"decide": 0.5, "total": 1.0},
        loads={(NS, "m"): (20.0, 128.0, 256.0)},
        writes={("VariantAutoscaling", "scaled"): 1},
        applied={(NS, "h100"): True},
        degraded=(),
    )
    metrics = optimize_cycle_metrics(decisions, [binding], facts)
    labels = {"variant_name": "h100", "namespace": NS, "accelerator_type": "H100"}
    assert metrics.value("wva_desired_replicas", **labels) == 3
    assert metrics.value("wva_current_replicas", **labels) == 1
    assert metrics.value("wva_desired_ratio", **labels) == 3
    assert metrics.value("wva_desired_replicas", variant_name="gpu", namespace=NS, accelerator_type="") == 3
    assert metrics.value("modelplane_solver_status", status="optimal") == 1
    assert metrics.value("modelplane_cycle_duration_seconds", flow="optimize", stage="decide") == 0.5
    assert metrics.value("modelplane_decisions", kind="VariantAutoscaling", reason="OptimizationSucceeded") == 2
    assert metrics.value("modelplane_writes", kind="VariantAutoscaling", outcome="scaled") == 1
    assert metrics.value("modelplane_variant_actuation_applied", variant_name="h100", namespace=NS) == 1
    assert metrics.value("modelplane_cycle_degraded", flow="optimize") == 0
    assert metrics.value("modelplane_model_arrival_rate_rps", namespace=NS, model="m") == 20.0
    assert metrics.value("modelplane_unserved_load_rps", namespace=NS, model="meta/llama-3.1-8b") == 0.0
    assert {t.variant_name for t in wva_targets(decisions, [binding])} == {"a100", "h100", "gpu"}


def test_unknown_metric_names_are_refused() -> None:
    with pytest.raises(KeyError):
        MetricSet().set("wva_desired_replica", 1)


def test_serving_group_members_take_their_group_targets_mode() -> None:
    from engine.api.kthena import AutoscalingPolicyBinding
    from tasks.optimize.bindings import binding_modes

    binding = {
        "metadata": {
            "name": "b",
            "namespace": NS,
            "annotations": {
                "modelplane.io/actuation": "metrics",
                "modelplane.io/actuation-targets": json.dumps({"pd": "both"}),
                "modelplane.io/scale-groups": json.dumps(
                    {"pd": [{"name": "prefill", "perGroup": 2}, {"name": "decode", "perGroup": 1}]}
                ),
            },
        },
        "spec": {
            "policyRef": {"name": "p"},
            "scalingConfiguration": {"target": {"targetRef": {"name": "pd"}}, "minReplicas": 1, "maxReplicas": 4},
        },
    }
    modes, binding_mode, error = binding_modes(AutoscalingPolicyBinding.model_validate(binding), SCALE)
    assert error is None and binding_mode == METRICS
    assert modes == {"pd": BOTH, "prefill": BOTH, "decode": BOTH}
