"""The SLO attainment target (annotations, service class, default) and its measurement from vLLM's histograms."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from engine.api.llmd import VariantAutoscalingStatus
from engine.optimize.config import ConfigError, parse_service_class
from engine.optimize.plan import CyclePlan, plan_cycle
from engine.optimize.spec import SpecError, model_targets, parse_variant
from engine.optimize.status import status_patch, variant_status
from engine.slo.measure import (
    LEGACY_TOKEN_ITL_HISTOGRAM,
    LatencyHistograms,
    MeasuredAttainment,
    burn_rate,
    error_budget_remaining,
    measure_attainment,
    share_within,
)
from engine.slo.target import (
    ANNOTATION_SLO_ATTAINMENT,
    ANNOTATION_SLO_WINDOW,
    AttainmentTarget,
    format_window,
    parse_window,
)
from tests.engine.test_optimize import NOW, NS
from tests.engine.test_optimize import inputs as optimize_inputs
from tests.factories import parsed_variant, variant_autoscaling

MODEL = "meta/llama-3.1-8b"
ITL = [(0.01, 10.0), (0.025, 40.0), (0.05, 90.0), (math.inf, 100.0)]


def va(name: str = "v", annotations: dict[str, str] | None = None, key: str = "premium.yaml"):
    return parsed_variant(variant_autoscaling(name, "ns", MODEL, "A100", annotations=annotations, slo_key=key))


def service_class(name: str, priority: int, attainment: str | None) -> object:
    extra = f"\n    slo-attainment: {attainment}" if attainment is not None else ""
    return parse_service_class(
        f"name: {name}\npriority: {priority}\ndata:\n  - model: {MODEL}\n    slo-ttft: 500\n    slo-tpot: 24{extra}",
        f"service-classes-config/{name}.yaml",
    )


# -- the target ------------------------------------------------------------------------------------


def test_annotations_are_parsed_onto_the_spec() -> None:
    spec = parse_variant(va(annotations={ANNOTATION_SLO_ATTAINMENT: "0.95", ANNOTATION_SLO_WINDOW: "30m"}))
    assert spec.slo_attainment == 0.95 and spec.slo_window_s == 1800.0
    plain = parse_variant(va())
    assert plain.slo_attainment is None and plain.slo_window_s is None


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        (ANNOTATION_SLO_ATTAINMENT, "90", "between 0.5 and 0.999"),
        (ANNOTATION_SLO_ATTAINMENT, "0.4999", "between 0.5 and 0.999"),
        (ANNOTATION_SLO_ATTAINMENT, "0.9999", "between 0.5 and 0.999"),
        (ANNOTATION_SLO_ATTAINMENT, "ninety", "decimal fraction"),
        (ANNOTATION_SLO_ATTAINMENT, "nan", "decimal fraction"),
        (ANNOTATION_SLO_WINDOW, "4m", "between 5m and 30d"),
        (ANNOTATION_SLO_WINDOW, "31d", "between 5m and 30d"),
        (ANNOTATION_SLO_WINDOW, "an hour", "duration such as"),
        (ANNOTATION_SLO_WINDOW, "1w", "duration such as"),
    ],
)
def test_each_invalid_annotation_is_a_spec_error_naming_it(key: str, value: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_variant(va(annotations={key: value}))
    assert info.value.field == f"metadata.annotations[{key}]" and fragment in info.value.detail


@pytest.mark.parametrize(
    ("text", "seconds", "shown"),
    [
        ("90m", 5400, "90m"),
        ("1h", 3600, "1h"),
        ("7d", 604800, "7d"),
        ("300s", 300, "5m"),
        ("1h30m", 5400, "90m"),
        ("30d", 2592000, "30d"),
    ],
)
def test_windows_parse_and_format(text: str, seconds: float, shown: str) -> None:
    assert parse_window(text) == seconds and format_window(seconds) == shown


def test_the_annotation_wins_over_the_service_class_which_wins_over_the_default() -> None:
    classes = {("service-classes-config", "premium.yaml"): service_class("premium", 1, "0.95")}
    both = model_targets([va(annotations={ANNOTATION_SLO_ATTAINMENT: "0.99"})], classes)
    assert both[("ns", MODEL)] == AttainmentTarget(0.99, 3600.0, "annotation")
    assert model_targets([va()], classes)[("ns", MODEL)] == AttainmentTarget(0.95, 3600.0, "service class premium")
    assert model_targets([va()], {})[("ns", MODEL)] == AttainmentTarget(0.90, 3600.0, "default")


def test_variants_that_disagree_get_the_strictest_reading_and_the_highest_priority_class() -> None:
    variants = [
        va("a", {ANNOTATION_SLO_ATTAINMENT: "0.9", ANNOTATION_SLO_WINDOW: "2h"}),
        va("b", {ANNOTATION_SLO_ATTAINMENT: "0.97", ANNOTATION_SLO_WINDOW: "30m"}),
        va("bad", {ANNOTATION_SLO_ATTAINMENT: "2"}),  # invalid: reported by parse_variant, left out here
    ]
    assert model_targets(variants, {})[("ns", MODEL)] == AttainmentTarget(0.97, 1800.0, "annotation")
    classes = {
        ("service-classes-config", "premium.yaml"): service_class("premium", 1, "0.95"),
        ("service-classes-config", "bronze.yaml"): service_class("bronze", 3, "0.8"),
    }
    mixed = [va("a", key="bronze.yaml"), va("b", key="premium.yaml")]
    assert model_targets(mixed, classes)[("ns", MODEL)].source == "service class premium"


@pytest.mark.parametrize("value", ["1.5", "0.2", "high", "true"])
def test_a_service_class_with_a_bad_attainment_names_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        service_class("premium", 1, value)
    assert "slo-attainment" in str(info.value) and "data[0]" in info.value.source
    assert service_class("premium", 1, "0.9").slo_for(MODEL).attainment == 0.9  # type: ignore[attr-defined]


# -- interpolation ---------------------------------------------------------------------------------


def test_a_target_on_a_bucket_edge_is_read_exactly() -> None:
    share = share_within(ITL, 0.025, "ITL target")
    assert share.share == 0.40 and share.note == "" and share.total == 100.0


def test_a_target_inside_a_coarse_bucket_is_interpolated_and_said_so() -> None:
    share = share_within(ITL, 0.024, "ITL target")
    assert share.share == pytest.approx((10 + 30 * 14 / 15) / 100)  # 0.38
    assert share.note == "ITL target 24 ms lies between buckets 10 ms and 25 ms: interpolated"


def test_below_the_lowest_bucket_interpolates_from_zero_and_above_the_highest_is_a_lower_bound() -> None:
    assert share_within(ITL, 0.005, "ITL target").share == pytest.approx(0.05)
    above = share_within(ITL, 0.2, "ITL target")
    assert above.share == 0.9 and "above the highest bucket 50 ms" in above.note and "lower bound" in above.note


def test_counts_that_cross_after_increase_are_made_monotone() -> None:
    crossed = [(0.01, 10.2), (0.025, 9.9), (0.05, 90.0), (math.inf, 100.0)]
    assert share_within(crossed, 0.025, "ITL target").share == pytest.approx(0.102)


def test_attainment_joins_the_two_shares_and_counts_the_requests() -> None:
    ttft = [(0.25, 50.0), (0.5, 80.0), (math.inf, 100.0)]
    measured = measure_attainment(ttft, ITL, 500.0, 25.0)
    assert measured == MeasuredAttainment(0.40, 0.80, 0.40, 100.0, "")
    only_ttft = measure_attainment(ttft, None, 500.0, None)
    assert only_ttft.attained == 0.8 and only_ttft.requests == 100.0


def test_unknown_attainment_says_why() -> None:
    ttft = [(0.5, 0.0), (math.inf, 0.0)]
    assert measure_attainment(ttft, ITL, 500.0, 24.0).note == "no requests in the range"
    missing = measure_attainment([(0.5, 8.0), (math.inf, 10.0)], None, 500.0, 24.0)
    assert missing.attained is None and "vllm:request_time_per_output_token_seconds_bucket" in missing.note
    assert measure_attainment(None, None, None, None).note.startswith("no latency target")


def test_per_token_itl_is_said_to_be_per_token() -> None:
    ttft = [(0.5, 90.0), (math.inf, 100.0)]
    tokens = [(0.025, 4000.0), (math.inf, 5000.0)]
    measured = measure_attainment(ttft, tokens, 500.0, 25.0, LEGACY_TOKEN_ITL_HISTOGRAM)
    assert measured.attained == 0.8 and measured.requests == 100.0 and "per token" in measured.note


def test_error_budget_and_burn_rate() -> None:
    assert error_budget_remaining(0.95, 0.90) == pytest.approx(0.5)
    assert error_budget_remaining(0.80, 0.90) == pytest.approx(-1.0)  # twice the allowed misses: negative
    assert burn_rate(0.80, 0.90) == pytest.approx(2.0) and burn_rate(1.0, 0.9) == 0.0


# -- the plan and status.slo -----------------------------------------------------------------------

LATENCY = LatencyHistograms(
    ttft_window=[(0.5, 950.0), (math.inf, 1000.0)],
    ttft_recent=[(0.5, 80.0), (math.inf, 100.0)],
    itl_window=[(0.01, 980.0), (0.025, 980.0), (math.inf, 1000.0)],
    itl_recent=[(0.01, 100.0), (0.025, 100.0), (math.inf, 100.0)],
)
ITL_NOTE = "ITL target 24 ms lies between buckets 10 ms and 25 ms: interpolated"


def cycle(latency: dict | None = None, annotations: dict[str, str] | None = None, **overrides: object) -> CyclePlan:
    return plan_cycle(
        optimize_inputs(
            [
                variant_autoscaling(
                    "a100", NS, MODEL, "A100", annotations=annotations, sloClassRef={"name": "slo", "key": "premium"}
                )
            ],
            {"a100": 2},
            latency={(NS, MODEL): LATENCY} if latency is None else latency,
            **overrides,
        )
    )


def test_the_plan_carries_each_models_attainment_on_its_decisions() -> None:
    plan = cycle(annotations={ANNOTATION_SLO_ATTAINMENT: "0.9", ANNOTATION_SLO_WINDOW: "2h"})
    measured = plan.attainment[(NS, MODEL)]
    assert measured.target == AttainmentTarget(0.9, 7200.0, "annotation")
    assert measured.window.attained == pytest.approx(0.95) and measured.window.requests == 1000.0
    assert measured.recent.attained == pytest.approx(0.8)
    assert measured.error_budget_remaining == pytest.approx(0.5) and measured.burn_rate == pytest.approx(2.0)
    assert plan.variants[0].slo is measured


def test_missing_histograms_leave_attainment_unknown_and_change_no_decision() -> None:
    known = cycle()
    missing = cycle(latency={}, latency_missing={(NS, MODEL): "no histograms for the model"})
    measured = missing.attainment[(NS, MODEL)]
    assert measured.window.attained is None and measured.window.note == "no histograms for the model"
    assert measured.error_budget_remaining is None and measured.burn_rate is None
    assert [(d.desired, d.reason, d.message) for d in missing.variants] == [
        (d.desired, d.reason, d.message) for d in known.variants
    ]
    down = cycle(latency={}, metrics_error="connection refused").attainment[(NS, MODEL)]
    assert down.window.attained is None and "connection refused" in down.window.note


def test_an_invalid_resource_gets_no_slo_and_says_which_annotation() -> None:
    decision = cycle(annotations={ANNOTATION_SLO_ATTAINMENT: "95%"}).variants[0]
    assert decision.reason == "InvalidConfiguration" and decision.slo is None
    assert f"metadata.annotations[{ANNOTATION_SLO_ATTAINMENT}]" in decision.message


def test_status_slo_fields_and_what_the_controller_set_passes_through() -> None:
    decision = cycle().variants[0]
    status = variant_status(decision, {}, NOW, applied=True, generation=1)
    assert status["slo"] == {
        "target": 0.9,
        "attained": 0.95,
        "window": "1h",
        "errorBudgetRemaining": 0.5,
        "requests": 1000,
        "measuredAt": "2026-11-22T12:00:00Z",
        "message": f"target 0.9 from default; {ITL_NOTE}",
        "sizingPercentile": decision.sizing_percentile and round(decision.sizing_percentile, 2),
        "peakHold": None,
        "controller": decision.loop_message,
        "loadFactor": None,
    }
    VariantAutoscalingStatus.model_validate(status)  # the API model (and so the CRD) accepts it
    previous = {**status["slo"], "sizingPercentile": 91.5, "peakHold": "10m", "controller": "raised: burn rate 2.0"}
    decision.sizing_percentile = decision.peak_hold_s = decision.loop_message = None  # the loop set nothing
    kept = variant_status(decision, {"slo": previous}, NOW, applied=True, generation=1)["slo"]
    assert (kept["sizingPercentile"], kept["peakHold"], kept["controller"]) == (91.5, "10m", "raised: burn rate 2.0")
    decision.sizing_percentile, decision.peak_hold_s, decision.loop_message = 88.0, 180.0, "lowered"
    new = variant_status(decision, {"slo": previous}, NOW, applied=True, generation=1)["slo"]
    assert (new["sizingPercentile"], new["peakHold"], new["controller"]) == (88.0, "3m", "lowered")
    # The load factor is recorded below 1 only, and the loop's 1 removes an old value; the loop off keeps it.
    decision.load_factor = 0.8234
    assert variant_status(decision, {"slo": previous}, NOW, applied=True, generation=1)["slo"]["loadFactor"] == 0.823
    decision.load_factor = 1.0
    assert (
        variant_status(decision, {"slo": {**previous, "loadFactor": 0.7}}, NOW, applied=True, generation=1)["slo"][
            "loadFactor"
        ]
        is None
    )
    decision.sizing_percentile = decision.load_factor = None
    kept = variant_status(decision, {"slo": {**previous, "loadFactor": 0.7}}, NOW, applied=True, generation=1)["slo"]
    assert kept["loadFactor"] == 0.7
    VariantAutoscalingStatus.model_validate({**status, "slo": {**status["slo"], "loadFactor": 0.7}})


def test_unknown_attainment_removes_the_old_value_and_says_why() -> None:
    decision = cycle(latency={}, latency_missing={(NS, MODEL): "no TTFT samples"}).variants[0]
    old = {"slo": {"target": 0.9, "attained": 0.95, "window": "1h", "errorBudgetRemaining": 0.5}}
    slo = variant_status(decision, old, NOW, applied=True, generation=1)["slo"]
    assert slo["attained"] is None and slo["errorBudgetRemaining"] is None  # null in a merge-patch: removed
    assert slo["message"] == "attainment unknown: no TTFT samples"


def test_only_measuredAt_or_small_drift_is_not_worth_a_write_before_the_heartbeat() -> None:  # noqa: N802
    decision = cycle().variants[0]
    old = variant_status(decision, {}, NOW, applied=True, generation=1)
    later = NOW + timedelta(seconds=60)
    drift = {**old["slo"], "attained": 0.9502, "requests": 1010, "measuredAt": "2026-11-22T12:01:00Z"}
    assert status_patch(old, {**old, "slo": drift}, later) is None
    moved = {**old["slo"], "attained": 0.94, "errorBudgetRemaining": 0.4}
    assert status_patch(old, {**old, "slo": moved}, later) == {"slo": moved}
    assert status_patch(old, {**old, "slo": drift}, NOW + timedelta(seconds=301)) is not None  # the heartbeat
