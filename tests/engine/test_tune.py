"""Tuning on the cluster's own traffic (engine.simulate.tune): the candidates, and the choice per model."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from engine.api.llmd import TuningStatus
from engine.api.meta import attribute_docstrings
from engine.optimize.spec import ANNOTATION_MIN_REPLICAS
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE
from engine.simulate.oracle import attainment_ceiling
from engine.simulate.outcome import PolicyOutcome
from engine.simulate.records import SimConfig, Trace
from engine.simulate.scenario import Scenario, build_scenario, joined_key, with_slo_attainment
from engine.simulate.tune import (
    ANNOTATION_TUNED,
    AS_CONFIGURED,
    COST_TOLERANCE,
    FLOOR_MARGIN,
    MAX_CALIBRATION,
    Calibration,
    Candidate,
    ModelChoice,
    TuneRow,
    calibrations,
    candidates,
    choose,
    goals,
    interpolated_floors,
    model_rows,
    operator_settings,
    steady_models,
    tuned_settings,
    with_candidate,
    with_choices,
)
from engine.slo.controller import DEFAULT_SETTINGS
from tasks.simulate import read_description
from tasks.tune import write_choice
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


def test_a_floor_within_the_margin_counts_as_meeting_and_nothing_else_does() -> None:
    """Target 0.85: a static floor at 0.835 (within FLOOR_MARGIN: the loop on top of it tops up a short day) is chosen
    over a costlier floor at 0.86; the loop and a pinned percentile at 0.845 (no loop to top them up, or none under
    a floor) do not count as meeting, cheaper as they are."""
    scenario = small_scenario()
    scenario = dataclasses.replace(scenario, description=with_slo_attainment(scenario.description, 0.85))
    model, key = scenario.variants[0].model, scenario.variants[0].key
    loop, pinned = Candidate("attainment loop"), Candidate("percentile p90", annotations={"x": "y"})
    low = dataclasses.replace(Candidate("static floor x0.8"), headroom=-0.2)
    high = dataclasses.replace(Candidate("static floor x1.0"), headroom=0.0)
    replays = [
        (loop, outcome({model: 0.845}, {key: 1.0})),
        (pinned, outcome({model: 0.845}, {key: 1.0})),
        (low, outcome({model: 0.835}, {key: 2.0})),
        (high, outcome({model: 0.86}, {key: 3.0})),
    ]
    choice = next(c for c in choose(scenario, replays) if c.model == model)
    assert choice.chosen.candidate is low and choice.met
    assert {r.candidate.name: r.meets for r in choice.rows} == {
        "attainment loop": False,
        "percentile p90": False,
        "static floor x0.8": True,
        "static floor x1.0": True,
    }
    assert [choice.verdict(r) for r in choice.rows] == ["within 3 points (a floor)", "no", "no", "yes"]
    below = [(c, outcome({model: 0.815}, {key: 2.0})) if c is low else (c, o) for c, o in replays]
    choice = next(c for c in choose(scenario, below) if c.model == model)
    assert choice.chosen.candidate is high


def test_of_candidates_costing_about_the_same_the_one_attaining_least_is_chosen() -> None:
    """Target 0.85, by hand: the cheapest meeting candidate (cost 2.0) attains 0.95; a floor costing 5 % more attains
    0.86 and is chosen (one window cannot rank costs that close, and the 9 points above the target are paid for every
    day); a floor at 0.855 costing 15 % more is beyond COST_TOLERANCE and is not, nor is the loop that missed."""
    scenario = small_scenario()
    scenario = dataclasses.replace(scenario, description=with_slo_attainment(scenario.description, 0.85))
    model, key = scenario.variants[0].model, scenario.variants[0].key
    loop = Candidate("attainment loop")
    high = dataclasses.replace(Candidate("static floor x1.2"), headroom=0.2)
    near = dataclasses.replace(Candidate("static floor x1.0"), headroom=0.0)
    far = dataclasses.replace(Candidate("static floor x0.8"), headroom=-0.2)
    replays = [
        (loop, outcome({model: 0.84}, {key: 1.0})),
        (high, outcome({model: 0.95}, {key: 2.0})),
        (near, outcome({model: 0.86}, {key: 2.0 * (1 + COST_TOLERANCE / 2)})),
        (far, outcome({model: 0.855}, {key: 2.0 * (1 + 1.5 * COST_TOLERANCE)})),
    ]
    choice = next(c for c in choose(scenario, replays) if c.model == model)
    assert choice.chosen.candidate is near and choice.met
    without = [(c, o) for c, o in replays if c is not near]
    assert next(c for c in choose(scenario, without) if c.model == model).chosen.candidate is high


def long_prompt_scenario(cluster: Path = REPO / "deployments" / "examples") -> Scenario:
    """The example cluster's ten minutes at a 0.90 target, a quarter of the first model's prompts too long for any
    variant to prefill within its TTFT target (its ceiling on the window about 0.75)."""
    description = read_description(str(cluster), "modelplane-system")
    trace = small_trace()
    long = (trace.model_index == 0) & (np.arange(len(trace.in_tokens)) % 4 == 0)
    trace = dataclasses.replace(trace, in_tokens=np.where(long, 120_000, trace.in_tokens))
    scenario = build_scenario(description, trace, SimConfig(interval_s=60.0, startup_delay_s=120.0))
    return dataclasses.replace(scenario, description=with_slo_attainment(scenario.description, 0.90))


def test_a_target_above_the_models_ceiling_is_judged_against_what_the_window_allows() -> None:
    """A 0.90 target above the first model's ceiling (about 0.75) is judged against the ceiling less the loop's
    margin. A cheap floor at that level meets it and is chosen, not the costliest floor at the highest attainment
    (which is what a target nothing can meet got); the other model, whose ceiling allows 0.90, is judged against
    0.90 itself."""
    scenario = long_prompt_scenario()
    short, fine = scenario.trace.models
    ceiling = attainment_ceiling(scenario)[short]
    assert 0.70 < ceiling < 0.80 and attainment_ceiling(scenario)[fine] == 1.0
    reachable = goals(scenario)
    assert reachable[short] == pytest.approx(ceiling - DEFAULT_SETTINGS.ceiling_margin)
    assert reachable[fine] == 0.90
    key = next(v.key for v in scenario.variants if v.model == short)
    cheap = dataclasses.replace(Candidate("static floor x0.8"), headroom=-0.2)
    costly = dataclasses.replace(Candidate("static floor x2.0"), headroom=1.0)
    replays = [
        (cheap, outcome({short: ceiling - 0.02, fine: 0.95}, {key: 1.0})),
        (costly, outcome({short: ceiling - 0.005, fine: 0.95}, {key: 3.0})),
    ]
    choice = next(c for c in choose(scenario, replays) if c.model == short)
    assert choice.chosen.candidate is cheap and choice.met and choice.goal == reachable[short]
    assert "judged against" in choice.out_of_reach and choice.target == 0.90
    assert next(c for c in choose(scenario, replays) if c.model == fine).reachable is None


def test_a_choice_judged_against_the_ceiling_records_what_it_was_judged_against(tmp_path: Path) -> None:
    """Written on the cluster, the model's ``modelplane.io/tuned`` keeps the operator's target and says what the
    choice was judged against (``reachable``); the other model's record has no such key."""
    cluster = tmp_path / "cluster"
    shutil.copytree(REPO / "deployments" / "examples", cluster)
    scenario = long_prompt_scenario(cluster)
    short = scenario.trace.models[0]
    floor = dataclasses.replace(Candidate("static floor x0.8"), headroom=-0.2)
    keys = {v.model: v.key for v in scenario.variants}
    replay = outcome({m: attainment_ceiling(scenario)[m] - 0.02 for m in keys}, {k: 1.0 for k in keys.values()})
    records = {}
    for choice in choose(scenario, [(floor, replay)]):
        written, failed = write_choice.fn(str(cluster), scenario, choice, datetime.now(UTC), "request log")
        assert written and not failed
        records[choice.model] = choice
    tuned = {
        joined_key((va.metadata.namespace or "default", va.spec.model_id)): json.loads(
            va.metadata.annotations[ANNOTATION_TUNED]
        )
        for va in read_description(str(cluster), "modelplane-system").variants
    }
    assert tuned[short]["target"] == 0.90 and tuned[short]["reachable"] == round(records[short].goal, 4)
    assert all("reachable" not in record for model, record in tuned.items() if model != short)


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


def test_pinned_percentiles_are_candidates_only_for_traffic_without_a_silent_minute() -> None:
    """Ten minutes of Poisson traffic over two models; then one model's requests of minutes 4-5 removed: a pinned
    percentile (the loop and its hold off) is a candidate for the other model only, and its replay leaves the
    stopping model under the operator's own settings. With both silent, none is."""
    scenario = small_scenario()
    trace = scenario.trace
    models = tuple(trace.models)
    assert steady_models(trace) == frozenset(models)
    quiet = ~((trace.model_index == 0) & (trace.arrival_s >= 240.0) & (trace.arrival_s < 360.0))
    gap = Trace(
        trace.arrival_s[quiet], trace.in_tokens[quiet], trace.out_tokens[quiet], trace.model_index[quiet], models
    )
    stopping = dataclasses.replace(scenario, trace=gap)
    assert steady_models(gap) == frozenset({models[1]})
    pinned = [c for c in candidates(stopping) if c.annotations]
    assert len(pinned) == 4 and all(c.models == {models[1]} for c in pinned)
    replayed = with_candidate(stopping, pinned[0]).description.variants
    for va in replayed:
        pinned_here = ANNOTATION_TTFT_PERCENTILE in va.metadata.annotations
        assert pinned_here == (f"{va.metadata.namespace}/{va.spec.model_id}" == models[1])
    both = (trace.arrival_s < 240.0) | (trace.arrival_s >= 360.0)
    silent = Trace(
        trace.arrival_s[both], trace.in_tokens[both], trace.out_tokens[both], trace.model_index[both], models
    )
    assert steady_models(silent) == frozenset()
    assert not [c for c in candidates(dataclasses.replace(scenario, trace=silent)) if c.annotations]


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


def with_annotations(scenario: Scenario, annotations: dict[str, str]) -> Scenario:
    """The scenario with the same annotations set on every VariantAutoscaling."""
    variants = [va.model_copy(deep=True) for va in scenario.description.variants]
    for va in variants:
        va.metadata.annotations.update(annotations)
    return dataclasses.replace(scenario, description=dataclasses.replace(scenario.description, variants=variants))


def written(scenario: Scenario, candidate: Candidate) -> Scenario:
    """The scenario after the tune flow wrote ``candidate`` on every VariantAutoscaling (tasks.tune.write_choice's
    patch and record, applied to the objects)."""
    variants = [va.model_copy(deep=True) for va in scenario.description.variants]
    for va in variants:
        key = f"{va.metadata.namespace}/{va.metadata.name}"
        patch = tuned_settings(va.metadata.annotations, candidate, key)
        record = json.dumps({"candidate": candidate.name, "replaced": operator_settings(va.metadata.annotations)})
        for name, value in patch.items():
            if value is None:
                va.metadata.annotations.pop(name, None)
            else:
                va.metadata.annotations[name] = value
        va.metadata.annotations[ANNOTATION_TUNED] = record
    return dataclasses.replace(scenario, description=dataclasses.replace(scenario.description, variants=variants))


def test_a_tune_keeps_the_operators_own_settings_under_its_choice_and_gives_them_back() -> None:
    """An operator's ``min-replicas: "0"`` (a variant may stay empty) survives a static floor written over it: the
    next night replays and sizes static peak over "0", not over last night's floor, and a choice that sets no floor
    puts "0" back (before, the write removed it and the variant's minimum became 1)."""
    scenario = with_annotations(small_scenario(), {ANNOTATION_MIN_REPLICAS: "0"})
    floor = next(c for c in candidates(scenario) if c.floors)
    night_one = written(scenario, floor)
    assert all(
        va.metadata.annotations[ANNOTATION_MIN_REPLICAS]
        == str(floor.floors[f"{va.metadata.namespace}/{va.metadata.name}"])
        for va in night_one.description.variants
    )
    assert all(
        operator_settings(va.metadata.annotations) == {ANNOTATION_MIN_REPLICAS: "0"}
        for va in night_one.description.variants
    )
    # The next night's candidates: static peak sized over the operator's "0", the loop replayed without the floor.
    assert [c.floors for c in candidates(night_one) if c.floors] == [c.floors for c in candidates(scenario) if c.floors]
    loop = with_candidate(night_one, Candidate("attainment loop"))
    assert all(va.metadata.annotations[ANNOTATION_MIN_REPLICAS] == "0" for va in loop.description.variants)
    night_two = written(night_one, Candidate("percentile p90", annotations={ANNOTATION_TTFT_PERCENTILE: "90"}))
    for va in night_two.description.variants:
        assert va.metadata.annotations[ANNOTATION_MIN_REPLICAS] == "0"
        assert va.metadata.annotations[ANNOTATION_TTFT_PERCENTILE] == "90"
        assert json.loads(va.metadata.annotations[ANNOTATION_TUNED])["replaced"] == {ANNOTATION_MIN_REPLICAS: "0"}


def test_an_operator_without_tuned_settings_gets_them_removed_again() -> None:
    scenario = small_scenario()
    night_one = written(scenario, Candidate("percentile p80", annotations={ANNOTATION_TTFT_PERCENTILE: "80"}))
    night_two = written(night_one, Candidate("attainment loop"))
    assert all(
        ANNOTATION_TTFT_PERCENTILE not in va.metadata.annotations
        and ANNOTATION_MIN_REPLICAS not in va.metadata.annotations
        for va in night_two.description.variants
    )


def test_the_next_day_runs_each_models_own_choice() -> None:
    """with_choices: what the next window replays after the tune flow wrote a different choice per model."""
    scenario = small_scenario()
    models = sorted({v.model for v in scenario.variants})
    pinned = Candidate("percentile p95", annotations={ANNOTATION_TTFT_PERCENTILE: "95"})
    loop = Candidate("attainment loop")
    row = TuneRow(pinned, 0.9, 1.0, True)
    choices = [
        ModelChoice(models[0], 0.85, [row], row),
        ModelChoice(models[1], 0.85, [], TuneRow(loop, 0.9, 1.0, True)),
    ]
    tuned = with_choices(scenario, choices)
    for va in tuned.description.variants:
        model = f"{va.metadata.namespace}/{va.spec.model_id}"
        assert (va.metadata.annotations.get(ANNOTATION_TTFT_PERCENTILE) == "95") == (model == models[0])


def test_one_more_floor_is_interpolated_where_a_target_falls_between_two() -> None:
    """Target 0.85, so a floor aims at 0.82 (FLOOR_MARGIN); model 0's floors attain 0.80 at x0.8 and 0.88 at x1.0, so
    x0.85 is replayed for it alone; model 1 reaches 0.82 at its lowest floor, so nothing lies between for it. By
    hand: 0.8 + (0.85 - 0.03 - 0.80) / 0.08 x 0.2 = 0.85. A calibration moves the aim with it."""
    scenario = small_scenario()
    scenario = dataclasses.replace(scenario, description=with_slo_attainment(scenario.description, 0.85))
    models = sorted({v.model for v in scenario.variants})
    low = dataclasses.replace(Candidate("static floor x0.8"), headroom=-0.2)
    high = dataclasses.replace(Candidate("static floor x1.0"), headroom=0.0)
    replays = [
        (low, outcome({models[0]: 0.80, models[1]: 0.90}, {})),
        (high, outcome({models[0]: 0.88, models[1]: 0.95}, {})),
        (Candidate("attainment loop"), outcome({models[0]: 0.80, models[1]: 0.99}, {})),
    ]
    (between,) = interpolated_floors(scenario, replays)
    assert FLOOR_MARGIN == 0.03
    assert between.name == "static floor x0.85" and between.models == {models[0]}
    assert between.headroom is not None and abs(between.headroom + 0.15) < 1e-9
    mine = {v.key for v in scenario.variants if v.model == models[0]}
    assert between.floors and set(between.floors) <= mine
    # Its replay counts for its model only: model 1's attainment in it is not one of model 1's rows.
    rows = model_rows(scenario, [*replays, (between, outcome({models[0]: 0.851, models[1]: 0.5}, {}))])
    assert [c.name for c, _, _ in rows[models[1]]] == ["static floor x0.8", "static floor x1.0", "attainment loop"]
    assert rows[models[0]][-1][0] is between
    # Model 0's replay reading 2 points high: the floor aims at 0.84 in replayed attainment, x0.8 + 0.04 / 0.08 x 0.2.
    (calibrated,) = interpolated_floors(scenario, replays, {models[0]: Calibration(0.86, 0.84)})
    assert calibrated.name == "static floor x0.9" and calibrated.headroom is not None
    assert abs(calibrated.headroom + 0.1) < 1e-9


def test_a_replay_that_read_high_on_the_window_judges_every_candidate_lower() -> None:
    """Target 0.85. The settings that ran replayed at 0.88 for model 0 where the cluster measured 0.84: the replay
    reads 4 points high, so the loop's 0.86 counts as 0.82 (no) and the pinned p90's 0.91 as 0.87 (yes, chosen).
    Model 1 was measured above its replay (0.93 against 0.90): judged 3 points higher, its loop's 0.83 meets. A
    model without a measurement is judged as replayed, and a gap beyond MAX_CALIBRATION stops there. By hand."""
    scenario = small_scenario()
    scenario = dataclasses.replace(scenario, description=with_slo_attainment(scenario.description, 0.85))
    models = sorted({v.model for v in scenario.variants})
    first = {v.model: v for v in scenario.variants}
    hours = lambda a, b: {first[models[0]].key: a, first[models[1]].key: b}  # noqa: E731
    loop, pinned = Candidate("attainment loop"), Candidate("percentile p90")
    replays = [
        (loop, outcome({models[0]: 0.86, models[1]: 0.83}, hours(1.0, 1.0))),
        (pinned, outcome({models[0]: 0.91, models[1]: 0.95}, hours(3.0, 3.0))),
    ]
    ran = outcome({models[0]: 0.88, models[1]: 0.90}, {})
    calibration = calibrations([*replays, (AS_CONFIGURED, ran)], {models[0]: 0.84, models[1]: 0.93})
    assert abs(calibration[models[0]].offset - 0.04) < 1e-9 and abs(calibration[models[1]].offset + 0.03) < 1e-9
    chosen = {c.model: c for c in choose(scenario, [*replays, (AS_CONFIGURED, ran)], calibration)}
    assert chosen[models[0]].chosen.candidate is pinned and chosen[models[0]].met
    assert [chosen[models[0]].verdict(r) for r in chosen[models[0]].rows] == ["no", "yes"]
    assert abs(chosen[models[0]].judged(chosen[models[0]].chosen) - 0.87) < 1e-9
    assert chosen[models[1]].chosen.candidate is loop
    assert all(r.candidate is not AS_CONFIGURED for c in chosen.values() for r in c.rows)  # never a choice
    # Uncalibrated, model 0's loop meets at 0.86 and is the cheapest.
    assert {c.model: c for c in choose(scenario, replays)}[models[0]].chosen.candidate is loop
    assert calibrations([(AS_CONFIGURED, ran)], {models[0]: None}) == {}
    assert calibrations(replays, {models[0]: 0.84}) == {}  # no replay of what ran: nothing to calibrate by
    far = Calibration(replayed=0.95, measured=0.60)
    assert far.capped and far.offset == MAX_CALIBRATION and not Calibration(0.9, 0.85).capped


def test_the_settings_that_ran_are_replayed_as_they_are() -> None:
    """AS_CONFIGURED keeps last night's choice on the VariantAutoscalings (what ran over the window); every other
    candidate is put over the operator's own settings."""
    scenario = small_scenario()
    floor = Candidate("static floor x1.0", floors={scenario.variants[0].key: 3}, headroom=0.0)
    chosen = written(scenario, floor)
    assert with_candidate(chosen, AS_CONFIGURED) is chosen
    first = with_candidate(chosen, Candidate("attainment loop")).description.variants[0].metadata.annotations
    assert first.get(ANNOTATION_MIN_REPLICAS) != "3"


def test_a_tuned_record_that_is_not_ours_reads_as_no_record() -> None:
    """A hand-edited or hostile ``modelplane.io/tuned`` (not JSON, not an object, nested past the decoder's depth,
    ``replaced`` with non-string values) leaves the current values as the operator's; it never raises."""
    current = {ANNOTATION_MIN_REPLICAS: "2"}
    for record in ["", "null", "[1]", "1e999", '{"replaced": []}', "[" * 100_000]:
        assert operator_settings({**current, ANNOTATION_TUNED: record}) == current
    odd = json.dumps({"replaced": {ANNOTATION_MIN_REPLICAS: 5, "other": "1"}})
    assert operator_settings({**current, ANNOTATION_TUNED: odd}) == {}


def test_the_floor_margin_is_stated_as_it_is_where_operators_read_it() -> None:
    """The CRD's ``status.tuning.met`` description and docs/simulate.md say how close a floor must come in prose, which
    cannot take :data:`FLOOR_MARGIN`: a change of the margin fails here until both say the new one."""
    stated = f"within {100 * FLOOR_MARGIN:g} points"
    assert stated in " ".join(attribute_docstrings(TuningStatus)["met"].split())
    assert stated in " ".join((Path(__file__).parents[2] / "docs" / "simulate.md").read_text().split())


def test_the_calibration_bound_is_the_one_the_crd_validates() -> None:
    """``status.tuning.calibration``'s schema bounds and the prose that states them (the CRD description,
    docs/simulate.md) are the engine's :data:`MAX_CALIBRATION`, which the API layer cannot import."""
    bounds = {type(m).__name__: m for m in TuningStatus.model_fields["calibration"].metadata}
    assert bounds["Ge"].ge == -MAX_CALIBRATION and bounds["Le"].le == MAX_CALIBRATION
    assert f"within {MAX_CALIBRATION:g} either way" in " ".join(
        attribute_docstrings(TuningStatus)["calibration"].split()
    )
    docs = " ".join((Path(__file__).parents[2] / "docs" / "simulate.md").read_text().split())
    assert f"stops at {100 * MAX_CALIBRATION:g} points either way" in docs
