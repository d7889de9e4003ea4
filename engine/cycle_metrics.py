"""What a flow run publishes to Prometheus, as plain data (``tasks/clients/pushgateway.py`` pushes it).

Two families:

* **WVA's**, with WVA's names, types and labels (llm-d workload-variant-autoscaler
  ``internal/metrics/metrics.go``): gauges ``wva_desired_replicas``, ``wva_current_replicas`` and
  ``wva_desired_ratio`` labelled ``variant_name``, ``namespace``, ``accelerator_type``. One series per
  VariantAutoscaling (``variant_name`` = its name, as WVA) and per AutoscalingPolicyBinding target
  (``variant_name`` = the target's name, ``accelerator_type`` empty), so the same HPA/KEDA
  configuration serves both. The ratio is desired/current, and desired when current is 0 (WVA's rule).
  WVA's counter ``wva_replica_scaling_total`` is not published: a flow run is a fresh process, a
  pushed counter would restart at every cycle; ``modelplane_decisions`` says the same per cycle.
* **Modelplane's own**, gauges describing the last run (``modelplane_`` prefix): see :data:`HELP`.

Every value here is about one run: the Pushgateway keeps the last push of a group, and a series that
is not in a push disappears with it (the push replaces the whole group), which is how a deleted
variant's series goes away.
"""

from __future__ import annotations

import builtins
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from engine.api.registry import AUTOSCALING_POLICY_BINDING, VARIANT_AUTOSCALING
from engine.optimize.actuation import desired_ratio
from engine.optimize.bindings import BindingDecision
from engine.optimize.plan import VariantDecision
from engine.slo.measure import ModelAttainment

WVA_LABELS = ("variant_name", "namespace", "accelerator_type")

HELP: dict[str, str] = {
    "wva_desired_replicas": "Desired number of replicas for each variant",
    "wva_current_replicas": "Current number of replicas for each variant",
    "wva_desired_ratio": "Ratio of the desired number of replicas and the current number of replicas for each variant",
    "modelplane_cycle_duration_seconds": 'Wall time of each stage of the last run, and of the whole run (stage="total")',
    "modelplane_cycle_timestamp_seconds": "When the last run started (Unix time)",
    "modelplane_cycle_degraded": "1 when the last run ran degraded (exit code 3), else 0",
    "modelplane_cycle_degraded_reasons": "Number of reasons the last run ran degraded",
    "modelplane_solver_status": "1 for the status of the last allocation solve (optimal, feasible, infeasible)",
    "modelplane_solver_gap_ratio": "Proven relative optimality gap of each stage of the allocation solve: one per priority level, then cost",
    "modelplane_unserved_load_rps": "Load of a model (req/s) the last plan left unserved because the accelerator inventory ran out",
    "modelplane_decisions": "Decisions of the last run by kind and reason",
    "modelplane_writes": "Writes of the last run by kind and outcome",
    "modelplane_variant_cost": "Cost of a variant's desired replicas (replicas x cost per replica)",
    "modelplane_variant_actuation_applied": "1 when the variant's actuation was applied (status.actuation.applied)",
    "modelplane_model_arrival_rate_rps": "Arrival rate of a model (req/s) the last run sized for",
    "modelplane_model_avg_input_tokens": "Average prompt tokens per request of a model in the last run",
    "modelplane_model_avg_output_tokens": "Average generated tokens per request of a model in the last run",
    "modelplane_model_slo_ttft_ms": "TTFT target (ms) of a model's service class",
    "modelplane_model_slo_itl_ms": "Inter-token latency target (ms) of a model's service class",
    "modelplane_slo_attainment": "Share of a model's requests within its TTFT and ITL targets over its SLO window (absent while unknown)",
    "modelplane_slo_attainment_target": "Share of a model's requests that must meet its latency targets (the SLO's attainment target)",
    "modelplane_slo_error_budget_remaining": "1 - (1 - attained) / (1 - target) over the SLO window; negative once the misses exceed the allowance",
    "modelplane_slo_burn_rate": "(1 - attained over the last 2 minutes) / (1 - target): 1 spends the error budget exactly at the target's pace",
    "modelplane_cache_fills": "Cache fills of the last warm-caches run by outcome (filled, started, failed)",
    "modelplane_cache_bytes": "Capacity in bytes of each model cache's volume seen by the last warm-caches run",
}
"""Every metric Modelplane publishes, with its help text (all gauges)."""

METRIC_NAMES = frozenset(HELP)


@dataclass(frozen=True)
class Sample:
    """One series value: a metric name from :data:`HELP`, its labels, a value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass
class MetricSet:
    """The samples of one push, in insertion order; a later sample of the same series replaces the earlier."""

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set one series (``name`` must be in :data:`HELP`); non-finite values are dropped."""
        if name not in HELP:
            raise KeyError(f"unknown metric {name!r}")
        if not math.isfinite(float(value)):
            return
        self.samples[(name, tuple(sorted((k, str(v)) for k, v in labels.items())))] = float(value)

    def __iter__(self) -> Iterator[Sample]:
        return iter(Sample(name, labels, value) for (name, labels), value in self.samples.items())

    def names(self) -> builtins.set[str]:
        """The metric names with at least one sample."""
        return {name for name, _ in self.samples}

    def value(self, name: str, **labels: str) -> float | None:
        """The value of one series, or None (tests and reports)."""
        return self.samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


@dataclass(frozen=True)
class TargetReplicas:
    """Desired and current replicas of one scale target, as WVA publishes them."""

    variant_name: str
    namespace: str
    accelerator_type: str
    current: int
    desired: int


def hold_value(desired: int | None, current: int | None) -> tuple[int, int] | None:
    """(desired, current) to publish for a target, or None when there is nothing safe to publish.

    A target with a decision publishes it (a hold already equals the current replicas); a target
    without one (invalid resource, target missing) publishes its current replicas as desired, WVA's
    "safety net": what an HPA reads then keeps the target where it is instead of finding no series.
    """
    if current is None:
        return None
    return (desired if desired is not None else current), current


def add_wva_family(metrics: MetricSet, targets: Iterable[TargetReplicas]) -> None:
    """``wva_desired_replicas``, ``wva_current_replicas``, ``wva_desired_ratio`` per target."""
    for t in targets:
        labels = {"variant_name": t.variant_name, "namespace": t.namespace, "accelerator_type": t.accelerator_type}
        metrics.set("wva_desired_replicas", t.desired, **labels)
        metrics.set("wva_current_replicas", t.current, **labels)
        metrics.set("wva_desired_ratio", desired_ratio(t.desired, t.current), **labels)


def add_stage_durations(metrics: MetricSet, stages: Mapping[str, float], flow: str) -> None:
    """``modelplane_cycle_duration_seconds{flow, stage}``."""
    for stage, seconds in stages.items():
        metrics.set("modelplane_cycle_duration_seconds", seconds, flow=flow, stage=stage)


def add_counts(metrics: MetricSet, name: str, counts: Mapping[tuple[tuple[str, str], ...], int]) -> None:
    """One gauge series per label combination of ``counts``."""
    for labels, count in counts.items():
        metrics.set(name, count, **dict(labels))


def count_by(rows: Iterable[Mapping[str, str]]) -> Counter[tuple[tuple[str, str], ...]]:
    """How many rows have each label combination (rows are label dicts)."""
    return Counter(tuple(sorted(row.items())) for row in rows)


def add_solver(metrics: MetricSet, status: str | None, stage_gaps: Mapping[str, float | None]) -> None:
    """``modelplane_solver_status{status}`` = 1 and ``modelplane_solver_gap_ratio{stage}`` per stage.

    The allocation is one lexicographic solve whose stages are the priority levels (``"priority 1"``
    first, 1 = highest) and then ``"cost"``; a stage without a proven bound publishes no gap.
    """
    if status is None:
        return
    metrics.set("modelplane_solver_status", 1, status=status)
    for stage, gap in sorted(stage_gaps.items()):
        if gap is not None:
            metrics.set("modelplane_solver_gap_ratio", gap, stage=stage)


def wva_targets(decisions: Iterable[VariantDecision], bindings: Iterable[BindingDecision]) -> list[TargetReplicas]:
    """What the WVA family publishes for one optimize cycle: every VariantAutoscaling and binding target
    with a known current replica count (see :func:`hold_value`)."""
    targets: list[TargetReplicas] = []
    for d in decisions:
        value = hold_value(d.desired, d.current)
        if value is not None:
            targets.append(TargetReplicas(d.name, d.namespace, d.accelerator or "", value[1], value[0]))
    for b in bindings:
        for t in b.targets:
            value = hold_value(t.desired, t.current)
            if value is not None:
                targets.append(TargetReplicas(t.name, t.namespace, "", value[1], value[0]))
    return targets


@dataclass(frozen=True)
class CycleFacts:
    """Everything about one optimize run that its metrics report, besides the decisions."""

    started: float
    """Unix time the run started."""
    stages: Mapping[str, float]
    """Seconds per stage (``read``, ``metrics``, ``decide``, ``publish``, ``write``, ``total``)."""
    loads: Mapping[tuple[str, str], tuple[float, float, float]] = field(default_factory=dict)
    """(namespace, model) -> (arrival rate req/s, average input tokens, average output tokens)."""
    slos: Mapping[tuple[str, str], tuple[float | None, float | None]] = field(default_factory=dict)
    """(namespace, model) -> (TTFT target ms, ITL target ms) of its service class."""
    writes: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """(kind, outcome) -> count; empty before the writes."""
    applied: Mapping[tuple[str, str], bool] = field(default_factory=dict)
    """(namespace, VariantAutoscaling) -> status.actuation.applied; empty before the writes."""
    degraded: tuple[str, ...] | None = None
    """Why the run was degraded; None before it is known."""
    attainment: Mapping[tuple[str, str], ModelAttainment] = field(default_factory=dict)
    """(namespace, model) -> its SLO target and measured attainment."""


def optimize_cycle_metrics(
    decisions: list[VariantDecision], bindings: list[BindingDecision], facts: CycleFacts, flow: str = "optimize"
) -> MetricSet:
    """The whole push of one optimize run: the WVA family and Modelplane's operational gauges."""
    metrics = MetricSet()
    add_wva_family(metrics, wva_targets(decisions, bindings))
    add_stage_durations(metrics, facts.stages, flow)
    metrics.set("modelplane_cycle_timestamp_seconds", facts.started, flow=flow)
    if facts.degraded is not None:
        metrics.set("modelplane_cycle_degraded", 1 if facts.degraded else 0, flow=flow)
        metrics.set("modelplane_cycle_degraded_reasons", len(facts.degraded), flow=flow)
    solved = next((d for d in decisions if d.solver_status is not None), None)
    if solved is not None:
        add_solver(metrics, solved.solver_status, solved.solver_stage_gaps)
    reasons = [{"kind": VARIANT_AUTOSCALING, "reason": d.reason} for d in decisions]
    reasons += [{"kind": AUTOSCALING_POLICY_BINDING, "reason": b.reason} for b in bindings]
    add_counts(metrics, "modelplane_decisions", count_by(reasons))
    add_counts(metrics, "modelplane_writes", {(("kind", k), ("outcome", o)): n for (k, o), n in facts.writes.items()})
    unserved: dict[tuple[str, str], float] = {}
    for d in decisions:
        labels = {"variant_name": d.name, "namespace": d.namespace}
        metrics.set("modelplane_variant_cost", d.cost, **labels)
        if (d.namespace, d.name) in facts.applied:
            metrics.set(
                "modelplane_variant_actuation_applied", 1 if facts.applied[(d.namespace, d.name)] else 0, **labels
            )
        if d.model_id and d.solver_status is not None:
            unserved[(d.namespace, d.model_id)] = d.unserved_rps
    for (namespace, model), rps in sorted(unserved.items()):
        metrics.set("modelplane_unserved_load_rps", rps, namespace=namespace, model=model)
    for (namespace, model), (rate, tokens_in, tokens_out) in sorted(facts.loads.items()):
        metrics.set("modelplane_model_arrival_rate_rps", rate, namespace=namespace, model=model)
        metrics.set("modelplane_model_avg_input_tokens", tokens_in, namespace=namespace, model=model)
        metrics.set("modelplane_model_avg_output_tokens", tokens_out, namespace=namespace, model=model)
    for (namespace, model), (ttft, itl) in sorted(facts.slos.items()):
        if ttft is not None:
            metrics.set("modelplane_model_slo_ttft_ms", ttft, namespace=namespace, model=model)
        if itl is not None:
            metrics.set("modelplane_model_slo_itl_ms", itl, namespace=namespace, model=model)
    add_attainment(metrics, facts.attainment)
    return metrics


def add_attainment(metrics: MetricSet, attainment: Mapping[tuple[str, str], ModelAttainment]) -> None:
    """``modelplane_slo_*{namespace, model}``: the target always; attainment, error budget and burn rate where known."""
    for (namespace, model), measured in sorted(attainment.items()):
        labels = {"namespace": namespace, "model": model}
        metrics.set("modelplane_slo_attainment_target", measured.target.attainment, **labels)
        for name, value in (
            ("modelplane_slo_attainment", measured.window.attained),
            ("modelplane_slo_error_budget_remaining", measured.error_budget_remaining),
            ("modelplane_slo_burn_rate", measured.burn_rate),
        ):
            if value is not None:
                metrics.set(name, value, **labels)
