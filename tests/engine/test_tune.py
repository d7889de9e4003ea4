"""Tuning on the cluster's own traffic (engine.simulate.tune): the candidates, and the choice per model."""

from __future__ import annotations

import dataclasses

from engine.optimize.spec import ANNOTATION_MIN_REPLICAS
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE
from engine.simulate.outcome import PolicyOutcome
from engine.simulate.records import SimConfig
from engine.simulate.scenario import Scenario, build_scenario, with_slo_attainment
from engine.simulate.tune import Candidate, candidates, choose, with_candidate
from tasks.simulate import read_description
from tests.engine.test_simulate_policies import REPO, small_trace


def small_scenario() -> Scenario:
    """The example cluster under ten minutes of Poisson traffic split over its two models."""
    description = read_description(str(REPO / "deployments" / "examples"), "modelplane-system")
    return build_scenario(description, small_trace(), SimConfig(interval_s=60.0, startup_delay_s=120.0))


def outcome(attainment: dict[str, float], hours: dict[str, float]) -> PolicyOutcome:
    """A replay's outcome as the choice reads it: attainment per model and accelerator-hours per variant."""
    return PolicyOutcome(
        policy="modelplane",
        requests=100,
        attainment=sum(attainment.values()) / len(attainment),
        attainment_by_model=attainment,
        cost=0.0,
        accelerator_hours=hours,
        replica_changes=0,
        unserved=0,
        unserved_share=0.0,
        latency_ms={},
    )


def test_the_cheapest_candidate_that_meets_the_target_is_chosen_per_model() -> None:
    """Three candidates, two models, target 0.85 (by hand: the unit costs and hours below)."""
    scenario = small_scenario()
    scenario = dataclasses.replace(scenario, description=with_slo_attainment(scenario.description, 0.85))
    models = sorted({v.model for v in scenario.variants})
    first = {v.model: v for v in scenario.variants}
    hours = lambda a, b: {first[models[0]].key: a, first[models[1]].key: b}  # noqa: E731
    loop, pinned, floor = Candidate("attainment loop"), Candidate("percentile p90"), Candidate("static floor x1.0")
    replays = [
        (loop, outcome({models[0]: 0.84, models[1]: 0.90}, hours(1.0, 1.0))),  # model 0 misses, model 1 meets cheapest
        (pinned, outcome({models[0]: 0.91, models[1]: 0.95}, hours(3.0, 3.0))),  # both meet, costly
        (floor, outcome({models[0]: 0.86, models[1]: 0.97}, hours(2.0, 4.0))),  # both meet; model 0's cheapest
    ]
    chosen = {c.model: c for c in choose(scenario, replays)}
    assert chosen[models[0]].chosen.candidate is floor and chosen[models[0]].met
    assert chosen[models[1]].chosen.candidate is loop
    cost = (
        first[models[0]].unit_cost
        * first[models[0]].accelerators_per_replica
        / first[models[0]].accelerators_per_replica
    )
    assert chosen[models[0]].chosen.cost == 2.0 * cost
    assert [r.attainment for r in chosen[models[0]].rows] == sorted(r.attainment for r in chosen[models[0]].rows)


def test_when_no_candidate_meets_the_target_the_closest_is_chosen_and_said() -> None:
    scenario = small_scenario()
    scenario = dataclasses.replace(scenario, description=with_slo_attainment(scenario.description, 0.99))
    model = scenario.variants[0].model
    key = scenario.variants[0].key
    a, b = Candidate("a"), Candidate("b")
    choice = next(
        c
        for c in choose(scenario, [(a, outcome({model: 0.90}, {key: 1.0})), (b, outcome({model: 0.95}, {key: 9.0}))])
        if c.model == model
    )
    assert choice.chosen.candidate is b and not choice.met


def test_candidates_span_the_loop_pinned_percentiles_and_static_floors() -> None:
    scenario = small_scenario()
    found = candidates(scenario)
    names = [c.name for c in found]
    assert names[0] == "attainment loop" and any(n.startswith("percentile p") for n in names)
    floors = [c for c in found if c.floors]
    assert floors and all(set(c.floors) <= {v.key for v in scenario.variants} for c in floors)
    tuned = with_candidate(scenario, floors[0])
    annotated = {
        f"{va.metadata.namespace}/{va.metadata.name}": va.metadata.annotations for va in tuned.description.variants
    }
    for key, floor in floors[0].floors.items():
        assert annotated[key][ANNOTATION_MIN_REPLICAS] == str(floor)
    pinned = with_candidate(scenario, next(c for c in found if c.annotations))
    assert all(ANNOTATION_TTFT_PERCENTILE in va.metadata.annotations for va in pinned.description.variants)
    assert all(ANNOTATION_MIN_REPLICAS not in va.metadata.annotations for va in scenario.description.variants)
