"""Scale from zero (engine.optimize.wake): a model with no replica and requests waiting at its gateway gets one
replica on its cheapest variant that may run one; nothing else changes."""

from __future__ import annotations

from engine.optimize.plan import plan_variants
from engine.optimize.spec import ModelLoad
from tests.engine.test_optimize import MODEL, NS, by_name, inputs, va

ZERO = {"modelplane.io/scale-to-zero": "true"}
WAITING = {(NS, MODEL): 7.0}


def plan(current: dict[str, int], waiting: dict | None = None, **overrides) -> dict:
    """Two variants of the model at scale-to-zero (the A100 half the H100's price), no load metrics (no pod runs)."""
    variants = overrides.pop("variants", [va("a100", annotations=ZERO), va("h100", "H100", annotations=ZERO)])
    values = dict(loads={}, pods={}, gateway_waiting=waiting or {}) | overrides
    return by_name(plan_variants(inputs(variants, current, **values)))


def test_requests_waiting_for_a_model_at_zero_wake_its_cheapest_variant() -> None:
    decisions = plan({"a100": 0, "h100": 0}, WAITING)
    assert decisions["a100"].desired == 1 and decisions["h100"].desired == 0
    assert decisions["a100"].ready and decisions["a100"].reason == "OptimizationSucceeded"
    assert "Scale from zero: 7 request(s) wait at the gateway for meta/llama-3.1-8b" in decisions["a100"].message
    assert decisions["a100"].changes_replicas and decisions["a100"].cost > 0


def test_without_waiting_requests_a_model_at_zero_stays_there() -> None:
    decisions = plan({"a100": 0, "h100": 0})
    assert decisions["a100"].desired == 0 and decisions["h100"].desired == 0
    assert "Scale from zero" not in decisions["a100"].message


def test_a_model_with_a_replica_is_left_to_its_own_metrics() -> None:
    """One replica starting (no metrics yet): it will serve the queue; nothing more is woken."""
    decisions = plan({"a100": 0, "h100": 1}, WAITING)
    assert decisions["a100"].desired == 0 and decisions["h100"].desired == 1
    assert all("Scale from zero" not in d.message for d in decisions.values())


def test_an_invalid_variant_is_not_woken() -> None:
    """The cheaper variant names an accelerator with no price: it is reported, and the other one wakes."""
    unpriced = va("a100", "B200", {"alpha": "20.58", "beta": "0.41", "gamma": "5.2", "delta": "0.1"}, annotations=ZERO)
    decisions = plan(
        {"a100": 0, "h100": 0},
        WAITING,
        variants=[unpriced, va("h100", "H100", annotations=ZERO)],
        loads={(NS, MODEL): ModelLoad(0.0, 128, 256)},
    )
    assert decisions["a100"].desired == 0 and decisions["a100"].reason == "InvalidConfiguration"
    assert decisions["h100"].desired == 1


def test_a_replica_starting_for_waiting_requests_is_not_scaled_back_to_zero() -> None:
    """The replica woken last cycle has served nothing yet, so the model's rate reads 0; while requests still wait
    at the gateway that is not idleness, and scale-to-zero does not take the replica away."""
    idle = {(NS, MODEL): ModelLoad(0.0, 128, 256)}
    waiting = plan({"a100": 1, "h100": 0}, WAITING, loads=idle)
    assert waiting["a100"].desired == 1
    quiet = plan({"a100": 1, "h100": 0}, loads=idle)
    assert quiet["a100"].desired == 0 and "Scale to zero" in quiet["a100"].message


def test_the_cheapest_variant_with_room_in_the_inventory_is_woken() -> None:
    """The A100s are all taken by another model's replicas: the H100 variant wakes instead (a replica that could not
    be placed would leave the requests waiting)."""
    other = va("other", annotations=ZERO)
    other["spec"]["modelID"] = "other/model"
    variants = [va("a100", annotations=ZERO), va("h100", "H100", annotations=ZERO), other]
    decisions = plan({"a100": 0, "h100": 0, "other": 2}, WAITING, variants=variants, inventory={"A100": 2, "H100": 1})
    assert decisions["a100"].desired == 0 and decisions["h100"].desired == 1
    assert "the cheapest with room (h100) gets one" in decisions["h100"].message


def test_with_no_accelerator_free_nothing_is_woken_and_the_condition_says_why() -> None:
    decisions = plan({"a100": 0, "h100": 0}, WAITING, inventory={"A100": 0, "H100": 0})
    assert decisions["a100"].desired == 0 and decisions["h100"].desired == 0
    assert decisions["a100"].message.endswith(
        "7 request(s) wait at the gateway for meta/llama-3.1-8b and none of its variants has a replica, but no"
        " accelerator it runs on has room in the inventory"
    )
