"""Tuning on the cluster's own traffic: replay candidate settings, keep per model the cheapest that meets its target.

Why: the attainment loop (:mod:`engine.slo.controller`) corrects the sizing while traffic flows, but it can only
correct what its actuators reach, and it learns from misses it has already paid for.  A replay of the last window's
traffic against the cluster's own VariantAutoscalings answers, before the next window, which setting would have met
each model's target at the lowest cost.  The candidates span the ways Modelplane can be told to size:

* ``attainment loop`` -- the shipped default: the loop moves the percentile and the peak hold;
* ``percentile pNN`` -- the loop off, tail sizing pinned at a percentile (``modelplane.io/ttft-percentile``), for
  the models whose traffic had no silent minute in the window (:func:`candidates` says why);
* ``static floor xH`` -- the loop on top of a floor of static peak's allocation for the window's peak at ``H`` times
  its sizing (``modelplane.io/min-replicas`` per variant; H from 0.6 to 2): static provisioning is among the
  candidates, so on the window it tunes on the choice is never costlier than static peak at the same attainment.
  Where a model's target falls between two floors, one more is replayed for that model at the headroom interpolated
  between them (:func:`interpolated_floors`), so the choice need not overshoot by a grid step.

Why floors: on bursty traffic the loop alone cannot have the capacity of a burst larger than any it has seen, and
it gives capacity back in the silences between bursts; a floor sized on the previous window's peak keeps what the
next day's bursts need (docs/benchmarks.md, "Attainment tracking with the nightly tune").

Each candidate is one replay of the whole cluster (models share the accelerator inventory); the choice is made per
model from its own attainment and cost in that replay.  Costs within :data:`COST_TOLERANCE` of the cheapest that met
the target count as equal, and of those the one attaining least is kept: one window's replay cannot rank costs that
close, and the attainment a costlier-looking floor buys above the target comes back every day after.

Why a calibration: a replay is only as faithful as its traffic and its model of the servers. Traffic rebuilt from
Prometheus has each minute's requests spread evenly over the minute (the counters keep no sub-minute arrival), so
on bursty traffic every candidate's replay reads points above what the cluster would attain under it, and the
cheapest candidate that "meets" the target falls short on the next day.  The cluster measured what it attained over
the window under the settings that ran (the vLLM latency histograms the loop reads), and one more replay,
:data:`AS_CONFIGURED`, says what the replay makes of those settings: per model, the difference
(:class:`Calibration`) is the replay's error on this window, and every candidate is judged by its replayed
attainment less that error (docs/benchmarks.md, "Attainment tracking with the nightly tune from Prometheus").

Pure and deterministic: the replays are :func:`engine.simulate.policies.run_policy`'s.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.optimize.spec import ANNOTATION_MIN_REPLICAS, model_slos, model_targets
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE
from engine.simulate.oracle import attainment_ceiling
from engine.simulate.outcome import PolicyOutcome
from engine.simulate.policies import static_allocation
from engine.simulate.records import Trace
from engine.simulate.scenario import ClusterDescription, Scenario, attainment_targets, joined_key
from engine.slo.controller import DEFAULT_SETTINGS
from engine.slo.measure import LatencyHistograms, MeasuredAttainment, model_attainment
from engine.slo.target import DEFAULT_ATTAINMENT

__all__ = [
    "ANNOTATION_TUNED",
    "AS_CONFIGURED",
    "COST_TOLERANCE",
    "FLOOR_MARGIN",
    "MAX_CALIBRATION",
    "TUNED_ANNOTATIONS",
    "Calibration",
    "Candidate",
    "ModelChoice",
    "TuneRow",
    "calibrations",
    "candidates",
    "choose",
    "goals",
    "interpolated_floors",
    "model_rows",
    "operator_settings",
    "steady_models",
    "tuned_settings",
    "window_attainment",
    "with_candidate",
    "with_choices",
]

TUNED_ANNOTATIONS = (ANNOTATION_TTFT_PERCENTILE, ANNOTATION_MIN_REPLICAS)
"""The annotations a candidate may set; a written choice puts the operator's own value back on those it does not set
(removes them where the operator set none)."""
ANNOTATION_TUNED = "modelplane.io/tuned"
"""VariantAutoscaling annotation the tune flow writes: the candidate chosen for the model, the attainment and cost
its replay reached, the target, when, the calibration offset (``calibration``), what it was judged against when the
target was above the model's attainment ceiling (``reachable``, :func:`goals`), and the operator's own values of
:data:`TUNED_ANNOTATIONS` it replaced (``replaced``) (JSON)."""
PINNED_PERCENTILES = (70.0, 80.0, 90.0, 95.0)
STATIC_HEADROOMS = (-0.4, -0.2, 0.0, 0.2, 0.5, 1.0)
FLOOR_MARGIN = 0.03
"""How far under its model's target a static floor may attain on the tuned window and still count as meeting it (and
where the interpolated floor aims). The loop runs on top of a floor and can only add to it (it never goes below
``min-replicas``): on the next window it tops up a day that falls short and cannot give back a day that does better,
so a floor that met the target exactly landed 1.9-2.6 points above 80 % and 85 % targets on average on the bursty
tuning traces. Chosen there among 0-4 points (docs/benchmarks.md, "Attainment tracking with the nightly tune"): at 3
the worst seed of those nine rows came closest to its target (20.3 points off in all, against 26.4 at 0 and 21.5 at
4) at the lowest cost against static peak's (1.07x on average, against 1.11x at 0)."""


COST_TOLERANCE = 0.10
"""Replayed costs within this share of the cheapest candidate that met a model's target count as equal, and of those
the one attaining least is chosen. One window's replay cannot rank costs that close: the loop's reactive capacity
costs what that window's bursts made it cost (on one bursty tuning trace, llama-3.1-8b's loop replayed at 719 on
one day and 457 on the next, while a floor of 1.2x cost 637 and 640), so the cheapest by a few percent was often a
floor attaining up to 9 points above the target, paid for every day after. Chosen among 0-30 % on the bursty tuning
traces (each model's worst seed over nine rows, 48.8 points from its target in all at 0, 25.2 at 10 % and above,
at a 2 % lower mean cost; docs/benchmarks.md, "Attainment tracking with the nightly tune")."""


MAX_CALIBRATION = 0.10
"""The largest correction a :class:`Calibration` applies (attainment, either way). A larger gap between the replay
of what ran and what the cluster measured says the replay does not describe the window (the settings changed during
it, a profile is far off), which no shift of the target mends: the shift stops here and the log says so."""


@dataclass(frozen=True)
class Candidate:
    """One setting to replay: annotations set on every VariantAutoscaling of every model, and per-variant floors."""

    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Set on every VariantAutoscaling (the ``ttft-percentile`` pin)."""
    floors: Mapping[str, int] = field(default_factory=dict)
    """Variant key (``namespace/name``) -> ``modelplane.io/min-replicas``."""
    headroom: float | None = None
    """A static floor's headroom on static peak (x ``1 + headroom``); None for other candidates."""
    models: frozenset[str] | None = None
    """The models (``namespace/modelID``) the candidate is a setting for (None: every model); its replay says
    nothing about the others, which run under the operator's own settings in it."""
    current: bool = False
    """The settings the VariantAutoscalings carry now (the last choice included), replayed as they are: what ran
    over the window (:data:`AS_CONFIGURED`), never a choice."""

    def settings_for(self, variant_key: str) -> dict[str, str]:
        """The annotations this candidate gives one VariantAutoscaling."""
        settings = dict(self.annotations)
        if variant_key in self.floors:
            settings[ANNOTATION_MIN_REPLICAS] = str(self.floors[variant_key])
        return settings


_OPERATORS = Candidate("the operator's settings")
"""No setting of its own: on a VariantAutoscaling, the operator's own values of :data:`TUNED_ANNOTATIONS`."""
AS_CONFIGURED = Candidate("as configured", current=True)
"""The replay of the settings that ran over the window, which the calibration compares with what was measured."""


@dataclass(frozen=True)
class Calibration:
    """How far the replay reads from the cluster for one model over the tuned window: the attainment the replay of the
    settings that ran (:data:`AS_CONFIGURED`) reached, and the attainment the cluster measured under them."""

    replayed: float
    measured: float

    @property
    def offset(self) -> float:
        """What every candidate's replayed attainment is judged less by: ``replayed - measured``, within
        :data:`MAX_CALIBRATION` either way (positive: the replay reads high)."""
        return min(max(self.replayed - self.measured, -MAX_CALIBRATION), MAX_CALIBRATION)

    @property
    def capped(self) -> bool:
        """Whether the gap exceeded :data:`MAX_CALIBRATION` (the offset stopped there)."""
        return abs(self.replayed - self.measured) > MAX_CALIBRATION


def calibrations(
    replays: Sequence[tuple[Candidate, PolicyOutcome]], measured: Mapping[str, float | None]
) -> dict[str, Calibration]:
    """Per model with a measurement and a replayed attainment: the :class:`Calibration` of the replay of what ran.

    Args:
        replays: The window's replays, :data:`AS_CONFIGURED`'s among them (none: nothing is calibrated).
        measured: Each model's (``namespace/modelID``) attainment the cluster measured over the same window (None:
            not measured: that model's candidates are judged as replayed).

    Returns:
        Per model measured and replayed, its calibration.
    """
    ran = next((outcome for candidate, outcome in replays if candidate.current), None)
    found: dict[str, Calibration] = {}
    if ran is None:
        return found
    for model, attained in measured.items():
        replayed = ran.attainment_by_model.get(model)
        if attained is None or replayed is None or not (math.isfinite(attained) and math.isfinite(replayed)):
            continue
        found[model] = Calibration(replayed, attained)
    return found


def window_attainment(
    description: ClusterDescription,
    latency: Mapping[tuple[str, str], LatencyHistograms],
    missing: Mapping[tuple[str, str], str] | None = None,
) -> dict[str, MeasuredAttainment]:
    """Per model of the description (``namespace/modelID``): what it attained over the histograms' window against its
    service class's TTFT and ITL targets (unknown, with why, without histograms or targets).

    Args:
        description: The cluster (its VariantAutoscalings and service classes give each model's latency targets).
        latency: Per (namespace, modelID): the latency histograms read over the tuned window.
        missing: Per (namespace, modelID) without histograms: the metrics source's reason.

    Returns:
        Per model, its measured attainment over the window (the note says why where it is unknown).
    """
    slos = model_slos(description.variants, description.service_classes)
    return {
        joined_key(key): model_attainment(
            target, latency.get(key), *slos.get(key, (None, None)), (missing or {}).get(key)
        ).window
        for key, target in sorted(model_targets(description.variants, description.service_classes).items())
    }


@dataclass(frozen=True)
class TuneRow:
    """One candidate's replay, seen from one model."""

    candidate: Candidate
    attainment: float
    cost: float
    meets: bool


@dataclass(frozen=True)
class ModelChoice:
    """A model's target, the rows it chose from (its frontier), and the chosen one."""

    model: str
    target: float
    rows: list[TuneRow]
    chosen: TuneRow
    calibration: Calibration | None = None
    """The replay's error on this model's window, which every row was judged less by (None: judged as replayed)."""
    reachable: float | None = None
    """What the rows were judged against when the window's prompts put the target out of reach: the model's
    attainment ceiling on the window less the loop's margin (:func:`goals`); None: the target itself."""

    @property
    def goal(self) -> float:
        """The attainment a row must reach to meet the target: the target, or what is reachable of it."""
        return self.target if self.reachable is None else self.reachable

    @property
    def out_of_reach(self) -> str:
        """Why the rows were judged against less than the target, in words (empty when they were not)."""
        if self.reachable is None:
            return ""
        return f"above the model's attainment ceiling on the window: judged against {100 * self.reachable:.1f} %"

    @property
    def met(self) -> bool:
        """Whether any candidate met the target, or what is reachable of it (else the chosen one is the highest
        attainment)."""
        return self.chosen.meets

    def judged(self, row: TuneRow) -> float:
        """The attainment a row is judged by: its replay's, less the calibration's offset."""
        return row.attainment - (self.calibration.offset if self.calibration is not None else 0.0)

    def verdict(self, row: TuneRow) -> str:
        """How one of its rows stands against the target, as the frontier artifact says it: ``yes``, ``within N points
        (a floor)`` (:data:`FLOOR_MARGIN`) or ``no``."""
        if not row.meets:
            return "no"
        return "yes" if self.judged(row) >= self.goal else f"within {100 * FLOOR_MARGIN:g} points (a floor)"


def candidates(scenario: Scenario) -> list[Candidate]:
    """The loop, pinned percentiles, and static-peak floors at a few headrooms (see the module doc); static peak is
    sized under the operator's own settings, not under a floor an earlier tune wrote.

    Pinned percentiles are candidates only for the models whose traffic had no silent minute in the window
    (:func:`steady_models`): a pinned percentile turns the loop off, and with it the peak hold that keeps capacity
    through the silences of traffic that stops and starts; such a pin that met the target on one day met it on that
    day's silences, and gave its capacity back in the next day's (a pinned p90 replayed at 85.3 % on the day it was
    chosen attained 65.2 % the next). On the bursty traces the tune on traffic rebuilt from Prometheus came 1.52 ->
    1.39 points from the target on average over the tuning rows without them (docs/benchmarks.md)."""
    found = [Candidate("attainment loop")]
    steady = steady_models(scenario.trace)
    if steady:
        found += [
            Candidate(f"percentile p{p:g}", annotations={ANNOTATION_TTFT_PERCENTILE: f"{p:g}"}, models=steady)
            for p in PINNED_PERCENTILES
        ]
    operators = _operators(scenario)
    found += [_static_floor(operators, headroom) for headroom in STATIC_HEADROOMS]
    return found


def steady_models(trace: Trace) -> frozenset[str]:
    """The models of the trace with a request in every minute from their first request to their last (traffic that
    does not stop and start); a model without a request is not one of them."""
    found = set()
    for index, model in enumerate(trace.models):
        arrivals = trace.arrival_s[trace.model_index == index]
        if len(arrivals) and np.bincount(((arrivals - arrivals[0]) // 60.0).astype(int)).min() > 0:
            found.add(model)
    return frozenset(found)


def interpolated_floors(
    scenario: Scenario,
    replays: Sequence[tuple[Candidate, PolicyOutcome]],
    calibration: Mapping[str, Calibration] | None = None,
) -> list[Candidate]:
    """Per model whose target (less :data:`FLOOR_MARGIN`, what a floor must reach; plus the model's calibration
    offset, in replayed attainment) falls between two static floors of the grid (the highest below it, the lowest
    that reaches it), one more floor at the headroom interpolated between them on attainment, for that model only.

    Why: the grid's floors are 20-50 % apart, so the cheapest that meets a target can attain several points more
    than it asks and cost as much more; one replay at the interpolated headroom lands near the target, and the
    choice stays among replayed settings (the interpolation is a candidate, never a choice by itself).
    """
    reachable = goals(scenario)
    operators = _operators(scenario)
    found = []
    for model, rows in sorted(model_rows(scenario, replays).items()):
        target = reachable.get(model, DEFAULT_ATTAINMENT) - FLOOR_MARGIN + _offset(calibration, model)
        floors = [(c.headroom, a) for c, a, _ in rows if c.headroom is not None and not math.isnan(a)]
        below = [(h, a) for h, a in floors if a < target]
        meeting = [(h, a) for h, a in floors if a >= target]
        if not below or not meeting:
            continue
        (low, low_attained), (high, high_attained) = max(below), min(meeting)
        if high <= low or high_attained <= low_attained:
            continue
        headroom = low + (target - low_attained) / (high_attained - low_attained) * (high - low)
        floor = _static_floor(operators, headroom)
        mine = {v.key for v in scenario.variants if v.model == model}
        found.append(
            dataclasses.replace(
                floor,
                floors={k: n for k, n in floor.floors.items() if k in mine},
                models=frozenset({model}),
            )
        )
    return found


def _operators(scenario: Scenario) -> Scenario:
    """The scenario under the operator's own settings (:func:`operator_settings`), not under a floor or a pin an
    earlier tune wrote: what static peak is sized under."""
    return with_candidate(scenario, _OPERATORS)


def _static_floor(operators: Scenario, headroom: float) -> Candidate:
    """The loop over a floor of static peak's allocation at ``headroom``, static peak sized on the scenario under
    the operator's own settings (:func:`_operators`)."""
    floors = static_allocation(dataclasses.replace(operators, static_headroom=headroom))
    multiple = f"{1 + headroom:.2f}"
    return Candidate(
        f"static floor x{multiple[:-1] if multiple.endswith('0') else multiple}",
        floors={k: int(v) for k, v in floors.items()},
        headroom=headroom,
    )


def goals(scenario: Scenario) -> dict[str, float]:
    """Each model's attainment target as the tune judges candidates against it: the target, or the model's attainment
    ceiling on the window (the share of its requests any variant can serve within the SLO at all,
    :func:`engine.simulate.oracle.attainment_ceiling`) less the loop's margin
    (:attr:`engine.slo.controller.ControllerSettings.ceiling_margin`) when that is lower.

    Why: a target above the ceiling is out of reach at any capacity. The loop caps its setpoint there; a tune that
    judged against the target itself met it with no candidate and chose the highest attainment, the costliest floor,
    for tenths of a point (on the bursty tuning traces at a 90 % target, above granite-13b's ceiling of about 84 %:
    floors of 1.5-2x static peak, and a day of the cluster cost 2,509-2,711 on average by trace where judged against
    the ceiling it cost 1,634-1,795, every per-model verdict unchanged; docs/benchmarks.md, "Attainment tracking with
    the nightly tune").
    """
    ceilings = attainment_ceiling(scenario)
    margin = DEFAULT_SETTINGS.ceiling_margin
    return {
        model: min(target, ceilings[model] - margin) if math.isfinite(ceilings.get(model, math.nan)) else target
        for model, target in attainment_targets(scenario.description).items()
    }


def _offset(calibration: Mapping[str, Calibration] | None, model: str) -> float:
    """The model's calibration offset (0 without one)."""
    found = (calibration or {}).get(model)
    return found.offset if found is not None else 0.0


def with_candidate(scenario: Scenario, candidate: Candidate) -> Scenario:
    """The scenario with the candidate's annotations on its VariantAutoscalings (the Modelplane policy reads them);
    a candidate for some models only leaves the others under the operator's own settings, and :data:`AS_CONFIGURED`
    leaves them all as they are."""
    if candidate.current:
        return scenario
    return _with_settings(
        scenario, lambda model: candidate if candidate.models is None or model in candidate.models else _OPERATORS
    )


def with_choices(scenario: Scenario, choices: Sequence[ModelChoice]) -> Scenario:
    """The scenario as the next window runs it once the tune flow has written its choices: each model's
    VariantAutoscalings carry the settings of the candidate chosen for that model (a model without a choice keeps
    its own). The floors are replica counts, so a static floor chosen on one window's peak stays that count."""
    chosen = {choice.model: choice.chosen.candidate for choice in choices}
    return _with_settings(scenario, chosen.get)


def operator_settings(annotations: Mapping[str, str]) -> dict[str, str]:
    """The tuned annotations as the operator set them, before any tune wrote a choice over them.

    Why: a choice replaces ``modelplane.io/min-replicas`` and ``modelplane.io/ttft-percentile``, which an operator
    may have set too (``min-replicas: "0"`` so a variant may stay empty). The first write keeps the operator's
    values in the ``modelplane.io/tuned`` record (``replaced``), so each later tune replays its candidates over the
    operator's settings rather than over last night's choice, and a choice that sets neither gives them back. A
    VariantAutoscaling no tune has written (or a record without ``replaced``): its current values.
    """
    try:
        record = json.loads(annotations.get(ANNOTATION_TUNED, ""))
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder goes: not a record we wrote
        record = None
    replaced = record.get("replaced") if isinstance(record, dict) else None
    if isinstance(replaced, dict):
        return {key: value for key, value in replaced.items() if key in TUNED_ANNOTATIONS and isinstance(value, str)}
    return {key: annotations[key] for key in TUNED_ANNOTATIONS if key in annotations}


def tuned_settings(annotations: Mapping[str, str], candidate: Candidate, variant_key: str) -> dict[str, str | None]:
    """The annotation patch that puts a candidate on one VariantAutoscaling: the operator's own tuned annotations
    (:func:`operator_settings`; None removes one the operator did not set), then the candidate's settings."""
    base = operator_settings(annotations)
    patch: dict[str, str | None] = {key: base.get(key) for key in TUNED_ANNOTATIONS}
    patch.update(candidate.settings_for(variant_key))
    return patch


def _with_settings(scenario: Scenario, candidate_of: Callable[[str], Candidate | None]) -> Scenario:
    """The scenario with, on each VariantAutoscaling, the settings of the candidate given for its model
    (``namespace/modelID``) over the operator's own (:func:`tuned_settings`)."""
    variants = [va.model_copy(deep=True) for va in scenario.description.variants]
    for va in variants:
        namespace = va.metadata.namespace or "default"
        candidate = candidate_of(joined_key((namespace, va.spec.model_id)))
        if candidate is None:
            continue
        patch = tuned_settings(va.metadata.annotations, candidate, joined_key((namespace, va.metadata.name or "")))
        for key, value in patch.items():
            if value is None:
                va.metadata.annotations.pop(key, None)
            else:
                va.metadata.annotations[key] = value
    return dataclasses.replace(scenario, description=dataclasses.replace(scenario.description, variants=variants))


def model_rows(
    scenario: Scenario, replays: Sequence[tuple[Candidate, PolicyOutcome]]
) -> dict[str, list[tuple[Candidate, float, float]]]:
    """Per model (``namespace/modelID``): each candidate's attainment and cost (accelerator cost of its variants)."""
    rows: dict[str, list[tuple[Candidate, float, float]]] = {}
    for candidate, outcome in replays:
        for model, attained in outcome.attainment_by_model.items():
            if candidate.models is not None and model not in candidate.models:
                continue
            cost = sum(
                outcome.accelerator_hours.get(v.key, 0.0) * v.unit_cost for v in scenario.variants if v.model == model
            )
            rows.setdefault(model, []).append((candidate, attained, cost))
    return rows


def choose(
    scenario: Scenario,
    replays: Sequence[tuple[Candidate, PolicyOutcome]],
    calibration: Mapping[str, Calibration] | None = None,
) -> list[ModelChoice]:
    """Per model: of the candidates whose replay met the model's target (a static floor: within :data:`FLOOR_MARGIN`
    of it; a target above the model's attainment ceiling on the window: what :func:`goals` says is reachable of it),
    the one attaining least among those costing within :data:`COST_TOLERANCE` of the cheapest; when none met it, the
    one that came closest (highest attainment, then cheapest).

    Args:
        scenario: The tuned window (its VariantAutoscalings carry the targets).
        replays: Each candidate with its replay's outcome (:data:`AS_CONFIGURED` is left out: it is not a choice).
        calibration: Per model, the replay's error on this window (:func:`calibrations`): each replayed attainment
            is judged less its offset. None or a model without one: judged as replayed.
    """
    targets, reachable = attainment_targets(scenario.description), goals(scenario)
    choices = []
    for model, rows in sorted(model_rows(scenario, replays).items()):
        target = targets.get(model, DEFAULT_ATTAINMENT)
        goal = reachable.get(model, target)
        offset = _offset(calibration, model)
        table = [TuneRow(c, a, cost, _meets(c, a - offset, goal)) for c, a, cost in rows if not c.current]
        meeting = [r for r in table if r.meets]
        chosen = _least_above(meeting) if meeting else max(table, key=lambda r: (r.attainment, -r.cost))
        ordered = sorted(table, key=lambda r: r.attainment)
        capped = goal if goal < target else None
        choices.append(ModelChoice(model, target, ordered, chosen, (calibration or {}).get(model), capped))
    return choices


def _least_above(meeting: Sequence[TuneRow]) -> TuneRow:
    """Of the rows that met the target, the one attaining least among those costing within :data:`COST_TOLERANCE`
    of the cheapest (then the cheaper): one window's replay cannot rank costs that close, and attainment bought
    above the target is capacity paid for every day."""
    cheapest = min(r.cost for r in meeting)
    near = [r for r in meeting if r.cost <= cheapest * (1.0 + COST_TOLERANCE)]
    return min(near, key=lambda r: (r.attainment, r.cost))


def _meets(candidate: Candidate, attained: float, target: float) -> bool:
    """Whether a candidate's replay counts as meeting the target: a static floor within :data:`FLOOR_MARGIN` of it
    (the loop on top tops up a short day), any other candidate at or above it."""
    if math.isnan(attained):
        return False
    return attained >= target - (FLOOR_MARGIN if candidate.headroom is not None else 0.0)
