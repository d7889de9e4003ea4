"""Each policy's cost-attainment curve over its own knob, the clairvoyant schedule (policy ``oracle``) among them,
and cost ratios to that schedule.

Why: one run per policy is one point; a cheaper policy that attains less is neither better nor worse
until the reader sees what the other policies cost at that attainment.  Every policy has a knob that
trades cost for attainment:

* ``modelplane`` / ``saturation-only``: the share of requests sized to meet the TTFT target
  (``modelplane.io/ttft-percentile``);
* ``hpa``: the target per replica of ``vllm:num_requests_running`` (a direct handle on the batch size);
* ``wva-greedy``: the TTFT target it sizes for, as a multiple of the one attainment is judged against;
* ``static-peak``: headroom over the peak interval's rate;
* ``oracle``: the attainment each replica's load is sized for (:mod:`engine.simulate.oracle`).

:func:`knob_settings` lists the scenarios, :func:`limits` turns the outcomes into the frontier and
the ratio of each cost to the clairvoyant schedule's at equal attainment (a reference, not a lower bound: see
:mod:`engine.simulate.oracle`).  Pure: the caller runs the replays.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.simulate.oracle import (
    ORACLE_TARGETS,
    attainment_allowed,
    attainment_ceiling,
    measure_capacity,
    oracle_cost_at,
)
from engine.simulate.outcome import PolicyOutcome, json_number
from engine.simulate.scenario import (
    Scenario,
    attainment_targets,
    scaled_ttft,
    with_hpa_metric,
    with_ttft_percentile,
)

__all__ = ["FrontierPoint", "Limits", "KNOBS", "knob_settings", "limits", "with_oracle_curves"]

KNOBS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "modelplane": ("modelplane.io/ttft-percentile", ("70", "85", "90", "95")),
    "saturation-only": ("modelplane.io/ttft-percentile", ()),
    "hpa": ("vllm:num_requests_running target", (2.0, 3.0, 4.0, 6.0)),
    "wva-greedy": ("sized for TTFT x", (0.75, 0.5)),
    "static-peak": ("headroom over the peak rate", (-0.2, -0.1, 0.2, 0.5, 1.0)),
    "oracle": ("attainment target", ORACLE_TARGETS),
}
"""Per policy: the knob's name and the values the frontier sweeps besides the configured setting (the shipped
percentile p80, TTFT x 1, headroom 0, the cluster's HPA metric; the oracle's configured target is skipped).  Static
peak's headroom reaches +100 % so its curve spans the attainments the other policies reach (a cost compared at an
attainment is interpolated on a curve, never extrapolated beyond it)."""


@dataclass(frozen=True)
class FrontierPoint:
    """One replay: the policy, its knob setting, SLO attainment and cost."""

    policy: str
    setting: str
    attainment: float
    cost: float
    replica_changes: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "setting": self.setting,
            "slo_attainment": json_number(self.attainment, 4),
            "cost": round(self.cost, 2),
            "replica_changes": self.replica_changes,
        }


@dataclass
class Limits:
    """The attainment ceiling (overall and per model), every policy's frontier points (the oracle's among them), and
    each model's attainment target with the share of all requests the targets allow."""

    ceiling: dict[str, float]
    frontier: list[FrontierPoint] = field(default_factory=list)
    targets: dict[str, float] = field(default_factory=dict)
    """Each model's attainment target."""
    allowed: float = math.nan
    """The share of all requests within the SLO when every model attains its target, or its ceiling where that is
    lower (:func:`engine.simulate.oracle.attainment_allowed`)."""

    def beyond_ceiling(self) -> dict[str, tuple[float, float]]:
        """The models whose target is above their attainment ceiling: model -> (target, ceiling)."""
        return {
            model: (target, self.ceiling[model])
            for model, target in sorted(self.targets.items())
            if target > self.ceiling.get(model, math.inf)
        }

    def out_of_reach(self) -> str:
        """One sentence naming each model whose target is above its ceiling and what that allows over all requests;
        empty when every target is within reach."""
        beyond = self.beyond_ceiling()
        if not beyond:
            return ""
        named = ", ".join(f"{model}'s target {t:.1%} is above its ceiling {c:.1%}" for model, (t, c) in beyond.items())
        return f"{named}: every model at its target or ceiling gives {self.allowed:.1%} over all requests"

    def oracle_points(self) -> list[tuple[float, float]]:
        """The oracle's (attainment, cost) points."""
        return [(p.attainment, p.cost) for p in self.frontier if p.policy == "oracle"]

    def cost_ratio(self, attainment: float, cost: float) -> float | None:
        """``cost`` over the oracle's cost at ``attainment`` (None where the oracle's frontier does not reach it)."""
        reference = oracle_cost_at(self.oracle_points(), attainment)
        return cost / reference if reference else None

    def as_json(self) -> dict[str, Any]:
        return {
            "attainment_ceiling": {k: json_number(v, 4) for k, v in self.ceiling.items()},  # None: no request
            "attainment_targets": {k: round(v, 4) for k, v in self.targets.items()},
            "attainment_allowed": json_number(self.allowed, 4),
            "frontier": [p.as_json() for p in self.frontier],
        }


def with_oracle_curves(scenario: Scenario) -> Scenario:
    """The scenario with the oracle's capacity curves measured once (every oracle setting reuses them)."""
    if scenario.oracle_curves is not None:
        return scenario
    return dataclasses.replace(scenario, oracle_curves=measure_capacity(scenario))


def knob_settings(scenario: Scenario, policy: str) -> list[tuple[str, Scenario]]:
    """The policy's knob settings: a label and the scenario to replay it on (the configured one not repeated)."""
    _, values = KNOBS.get(policy, ("", ()))
    settings: list[tuple[str, Scenario]] = []
    for value in values:
        if policy in ("modelplane", "saturation-only"):
            tuned = dataclasses.replace(scenario, description=with_ttft_percentile(scenario.description, str(value)))
        elif policy == "hpa":
            tuned = dataclasses.replace(
                scenario, description=with_hpa_metric(scenario.description, "vllm:num_requests_running", value)
            )
        elif policy == "wva-greedy":
            tuned = dataclasses.replace(
                scenario, sizing_slos={m: scaled_ttft(s, value) for m, s in scenario.sizing_slos.items()}
            )
        elif policy == "static-peak":
            tuned = dataclasses.replace(scenario, static_headroom=value)
        elif policy == "oracle":
            if value == scenario.oracle_target:
                continue
            tuned = dataclasses.replace(scenario, oracle_target=value)
        else:
            continue
        settings.append((_label(policy, value), tuned))
    return settings


_FORMATS = {
    "modelplane": "ttft-percentile {}",
    "saturation-only": "ttft-percentile {}",
    "hpa": "num_requests_running target {:g}",
    "wva-greedy": "sized for TTFT x {:g}",
    "static-peak": "headroom {:+.0%}",
    "oracle": "attainment target {:.0%}",
}


def _label(policy: str, value: Any) -> str:
    return _FORMATS[policy].format(value)


def limits(
    scenario: Scenario, configured: Sequence[PolicyOutcome], swept: Sequence[tuple[str, str, PolicyOutcome]]
) -> Limits:
    """The ceiling, the models' targets and what they allow over all requests, and the frontier: the policies as
    configured (``configured``) and each knob setting replayed (``swept``: policy, setting label, outcome)."""
    points = [FrontierPoint(o.policy, "as configured", o.attainment, o.cost, o.replica_changes) for o in configured]
    points += [FrontierPoint(policy, setting, o.attainment, o.cost, o.replica_changes) for policy, setting, o in swept]
    points = [p for p in points if not math.isnan(p.attainment)]
    ceilings, targets = attainment_ceiling(scenario), attainment_targets(scenario.description)
    return Limits(ceilings, points, targets, attainment_allowed(scenario.trace, ceilings, targets))
