"""The cycle's decisions: the desired replicas of every VariantAutoscaling and why, as one pure plan.

Decides, per variant: the model-based target (:mod:`engine.optimize.model_based`), the saturation
target (KV-cache and queue headroom, :mod:`engine.perf.saturation`), their arbitration, and the safety rules:

* missing or stale metrics never scale down: the variant holds its current replicas;
* an infeasible SLO keeps the current allocation and says which variant and which SLO;
* one invalid resource (bad perf params, unknown accelerator, missing ConfigMap key) gets its own
  condition and the rest of the cycle proceeds;
* min/max replicas and scale-to-zero settings are respected;
* a scale-down waits out the stabilization window, then goes in halves (:mod:`engine.optimize.stabilization`).

Beside the decisions, the plan carries each model's SLO attainment (:mod:`engine.slo`): its target and what vLLM's
histograms say was attained over the window and recently, for ``status.slo`` and the pushed gauges, and the
attainment loop's step (:mod:`engine.optimize.attainment`), which sets the TTFT percentile and peak hold the model
is sized with. A model whose attainment is unknown says why, and the loop holds for it.

:func:`plan_cycle` is the one call of the optimize flow: the VariantAutoscalings' decisions and the
Kthena bindings' (:mod:`engine.optimize.bindings`) together, with what the cycle sized for. Nothing
here does I/O or reads the clock; ``now`` is an input.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.api.llmd import VariantAutoscaling
from engine.optimize.attainment import held_at_caps, held_loads, loop_steps
from engine.optimize.bindings import BindingDecision, BindingInputs, plan_binding
from engine.optimize.config import AcceleratorCost
from engine.optimize.model_based import ModelBasedTargets, model_based_targets
from engine.optimize.spec import (
    COST_UNIT,
    CycleInputs,
    SpecError,
    VariantSpec,
    clamp,
    model_slos,
    model_targets,
    parse_variant,
    replica_cost,
)
from engine.optimize.stabilization import stabilize_scale_down
from engine.optimize.wake import variants_to_wake, woken_decision
from engine.perf.load_trend import sustained_fall
from engine.perf.saturation import REASON_METRICS_AVAILABLE as METRICS_AVAILABLE
from engine.perf.saturation import REASON_METRICS_UNAVAILABLE as METRICS_UNAVAILABLE
from engine.perf.saturation import REASON_OPTIMIZATION_SUCCEEDED as REASON_SUCCEEDED
from engine.perf.saturation import (
    REASON_SAFETY_OVERRIDE,
    ModelAnalysis,
    ReplicaMetrics,
    VariantState,
    analyze_model,
    arbitrate,
    saturation_targets,
)
from engine.slo.controller import ControllerStep
from engine.slo.measure import ModelAttainment, model_attainment
from engine.status import REASON_INVALID, REASON_TARGET_MISSING, ConditionUpdate

# OptimizationReady=False reason beyond the shared ones in engine.status and engine.optimize.model_based.
REASON_NO_METRICS = METRICS_UNAVAILABLE


@dataclass
class VariantDecision:
    """The outcome for one VariantAutoscaling."""

    namespace: str
    name: str
    model_id: str | None
    variant_id: str | None
    accelerator: str | None
    max_batch: int | None
    variant_cost: float | None
    current: int | None
    desired: int | None
    reason: str
    message: str
    ready: bool
    metrics: ConditionUpdate
    actuate: bool = True
    target: tuple[str, str, str] | None = None  # (apiVersion, kind, name)
    cost: float = 0.0
    stabilization: str | None = None
    """New value of the ``modelplane.io/scale-down-pending`` annotation (None: remove it)."""
    stabilization_changed: bool = False
    """Whether that annotation must be written this cycle (only on transitions)."""
    solver_status: str | None = None
    """Status of the allocation MILP that sized this variant (None: not sized by it this cycle)."""
    solver_gap: float | None = None
    """That solve's proven relative optimality gap, when the solver reports one."""
    solver_stage_gaps: Mapping[str, float | None] = field(default_factory=dict)
    """That solve's proven gap per stage (``"priority 1"``, ..., ``"cost"``)."""
    unserved_rps: float = 0.0
    """Load of this variant's model (req/s) the plan leaves unserved (accelerator inventory exhausted)."""
    sizing_percentile: float | None = None
    """The TTFT percentile the attainment loop sized this variant's model for this cycle (None: the loop is off)."""
    peak_hold_s: float | None = None
    """How far back the recent peak the model was sized for reached (None: the loop is off or has no hold)."""
    loop_message: str | None = None
    """What the attainment loop did for the model this cycle, and why (None: the loop is off)."""
    load_factor: float | None = None
    """The share of its held peak load the loop sized the model for this cycle (None: the loop is off)."""
    slo: ModelAttainment | None = None
    """Its model's SLO target and measured attainment (``status.slo``); None for a resource that is invalid."""
    accelerator_count: int = 1
    """Accelerators per replica (``spec.acceleratorCount``)."""
    held: str = ""
    """Why a scale-down waits (the stabilization window holds it), for a person: empty when none waits."""

    @property
    def optimization(self) -> ConditionUpdate:
        """The OptimizationReady condition this decision implies."""
        return ConditionUpdate("OptimizationReady", "True" if self.ready else "False", self.reason, self.message)

    @property
    def changes_replicas(self) -> bool:
        """Whether the target must be scaled."""
        return self.desired is not None and self.current is not None and self.desired != self.current


# --------------------------------------------------------------------------------------------
# Saturation targets
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Saturation:
    """Saturation verdict of one model and its per-variant capacity targets."""

    analysis: ModelAnalysis
    targets: dict[tuple[str, str], int]


def _owner_of(pod: str, specs: list[VariantSpec]) -> str:
    """The variant whose scale target the pod belongs to (by the Deployment's pod-name prefix)."""
    owners = [spec for spec in specs if pod.startswith(spec.target_name + "-")]
    return max(owners, key=lambda spec: len(spec.target_name)).name if owners else ""


def _saturation_for_model(
    model_key: tuple[str, str], specs: list[VariantSpec], inputs: CycleInputs
) -> _Saturation | None:
    """Saturation analysis and capacity targets of one model, or None without pod metrics."""
    samples = inputs.pods.get(model_key)
    if not samples:
        return None
    namespace, model = model_key
    config = inputs.saturation.config_for(model, namespace)
    replicas = [ReplicaMetrics(s.pod, _owner_of(s.pod, specs), s.kv_cache_usage, s.queue_length) for s in samples]
    analysis = analyze_model(replicas, config, model=model, namespace=namespace)
    states = []
    for spec in specs:
        current = inputs.current_replicas.get(spec.target_key, 0)
        ready = inputs.ready_replicas.get(spec.target_key, current)
        states.append(
            VariantState(
                name=spec.name,
                cost=replica_cost(spec, inputs.accelerator_costs),
                current_replicas=current,
                min_replicas=spec.min_replicas,
                max_replicas=spec.max_replicas,
                pending_replicas=max(current - ready, 0),
            )
        )
    targets = saturation_targets(analysis, states)
    return _Saturation(analysis, {spec.key: targets[spec.name] for spec in specs})


# --------------------------------------------------------------------------------------------
# One variant's decision: conditions, arbitration, safety rules
# --------------------------------------------------------------------------------------------


def _metrics_condition(spec: VariantSpec, inputs: CycleInputs) -> ConditionUpdate:
    if inputs.metrics_error:
        return ConditionUpdate(
            METRICS_AVAILABLE, "False", METRICS_UNAVAILABLE, f"Metrics backend unavailable: {inputs.metrics_error}"
        )
    has_load = spec.model_key in inputs.loads
    has_pods = bool(inputs.pods.get(spec.model_key))
    if has_load and has_pods:
        return ConditionUpdate(
            METRICS_AVAILABLE, "True", METRICS_AVAILABLE, "Saturation metrics data is available for scaling decisions"
        )
    missing = inputs.missing_metrics.get(spec.model_key)
    what = []
    if not has_load:
        what.append("arrival rate and token averages (vllm:request_success_total, vllm:request_*_tokens)")
    if not has_pods:
        what.append("per-pod saturation gauges (vllm:kv_cache_usage_perc, vllm:num_requests_waiting)")
    message = f"No {' or '.join(what)} for model {spec.model_id} in namespace {spec.namespace}"
    if missing:
        message += f" ({missing})"
    if has_load or has_pods:
        # Partial data still drives decisions; report what is missing, but the data that exists is usable.
        return ConditionUpdate(METRICS_AVAILABLE, "True", METRICS_AVAILABLE, f"Partial metrics: {message}")
    return ConditionUpdate(METRICS_AVAILABLE, "False", METRICS_UNAVAILABLE, message)


def _invalid_decision(
    va: VariantAutoscaling, message: str, current_replicas: Mapping[tuple[str, str, str], int]
) -> VariantDecision:
    """The decision for a resource that cannot be optimized as written: nothing to scale, its own
    condition, and (when its scale target exists) the replicas it runs now, so ``currentAlloc`` stays true."""
    spec, ref = va.spec, va.spec.scale_target_ref
    namespace = va.metadata.namespace or "default"
    current = current_replicas.get((namespace, ref.kind if ref else "Deployment", ref.name if ref else ""))
    accelerator = spec.accelerator if spec.accelerator is not None and len(spec.accelerator) >= 2 else None
    return VariantDecision(
        namespace=namespace,
        name=va.metadata.name or "",
        model_id=spec.model_id,
        variant_id=None,  # may be what is invalid; the status must stay writable to carry the condition
        accelerator=accelerator,
        max_batch=None,
        variant_cost=None,
        current=current,
        desired=None,
        reason=REASON_INVALID,
        message=message,
        ready=False,
        metrics=ConditionUpdate(METRICS_AVAILABLE, "Unknown", REASON_INVALID, "Not evaluated: the resource is invalid"),
        actuate=False,
    )


def _decide(
    spec: VariantSpec,
    current: int,
    model_based: ModelBasedTargets,
    saturation: _Saturation | None,
    metrics: ConditionUpdate,
    idle: bool,
    added_elsewhere: int = 0,
    saturation_need: int = 0,
) -> tuple[int, str, str, bool]:
    """(desired, reason, message, ready) for one variant with a readable target.

    ``added_elsewhere`` is how many replicas the model-based plan adds this cycle on the model's other
    variants and ``saturation_need`` how many the saturation analysis asks for the whole model: a
    model-based scale-down here is not vetoed (nor blocked as unsafe) when the replicas added elsewhere
    cover both the saturation need and the replicas removed here, since the model's capacity does not
    drop. Without that, moving a model to a cheaper variant left the old replica behind.
    """
    if spec.key in model_based.errors:
        reason, message = model_based.errors[spec.key]
        return current, reason, f"{message}; holding {current} replicas", False
    mb_target = model_based.targets.get(spec.key)
    if mb_target == 0 and spec.min_replicas == 0 and idle:
        # No request in the metrics window: saturation safety protects traffic there is none of.
        return (
            0,
            REASON_SUCCEEDED,
            "Scale to zero: no requests in the metrics window (modelplane.io/scale-to-zero)",
            True,
        )
    if mb_target is None and saturation is None:
        message = metrics.message if metrics.status != "True" else "No load metrics for this model"
        return (
            current,
            REASON_NO_METRICS,
            f"{message}; holding {current} replicas (no scale-down without metrics)",
            False,
        )
    if saturation is None:
        # Load metrics but no per-pod gauges: scale-down safety cannot be verified, so only scale up.
        decision = arbitrate(current, current, mb_target, scale_down_safe=False)
        if decision.reason == REASON_SAFETY_OVERRIDE:
            decision_message = f"{decision.message}: no per-pod saturation metrics to verify the scale-down is safe"
        else:
            decision_message = decision.message
    elif mb_target is not None and mb_target < current and added_elsewhere >= saturation_need + (current - mb_target):
        decision = arbitrate(current, current, mb_target, scale_down_safe=True)
        decision_message = (
            f"{decision.message}; saturation covered by the {added_elsewhere} replica(s) the plan adds "
            f"on other variants of {spec.model_id} this cycle"
        )
    else:
        decision = arbitrate(current, saturation.targets[spec.key], mb_target, scale_down_safe=saturation.analysis)
        decision_message = decision.message
    desired = clamp(decision.target, spec)
    message = decision_message
    if desired != decision.target:
        upper = spec.max_replicas if spec.max_replicas is not None else "inf"
        message += f"; clamped to {desired} by min/max replicas [{spec.min_replicas}, {upper}]"
    if spec.model_key in model_based.unserved and mb_target is not None:
        message += f"; {model_based.unserved[spec.model_key]:.2f} req/s of {spec.model_id} unserved: accelerator inventory or max-replicas exhausted"
    if mb_target is not None:
        message += model_based.note_for(spec)
    if mb_target is not None and model_based.status != "optimal":
        gap = f" (gap {model_based.gap:.2%})" if model_based.gap is not None else ""
        message += f"; solver status {model_based.status}{gap}"
    return desired, decision.reason, message, True


# --------------------------------------------------------------------------------------------
# The cycle
# --------------------------------------------------------------------------------------------


def _decision(spec: VariantSpec, costs: Mapping[str, AcceleratorCost], **outcome: Any) -> VariantDecision:
    """A decision for ``spec``: its identity fields from the spec, the rest from ``outcome``."""
    return VariantDecision(
        namespace=spec.namespace,
        name=spec.name,
        model_id=spec.model_id,
        variant_id=spec.variant_id,
        accelerator=spec.accelerator,
        accelerator_count=spec.accelerator_count,
        max_batch=spec.max_batch,
        variant_cost=replica_cost(spec, costs),
        **outcome,
    )


def _va_key(va: VariantAutoscaling) -> tuple[str, str]:
    """(namespace, name) of a VariantAutoscaling, as :attr:`VariantSpec.key`."""
    return (va.metadata.namespace or "default", va.metadata.name or "")


def plan_variants(inputs: CycleInputs) -> list[VariantDecision]:
    """Decide the desired replicas of every VariantAutoscaling of the cycle, in input order."""
    specs: list[VariantSpec] = []
    decisions: dict[tuple[str, str], VariantDecision] = {}
    order: list[tuple[str, str]] = []
    for va in inputs.variants:
        key = _va_key(va)
        order.append(key)
        try:
            specs.append(parse_variant(va))
        except SpecError as exc:
            decisions[key] = _invalid_decision(va, str(exc), inputs.current_replicas)

    steps = loop_steps(inputs, specs)
    inputs = dataclasses.replace(inputs, loads=held_loads(inputs.loads, steps))
    specs = [
        dataclasses.replace(spec, ttft_percentile=steps[spec.model_key].percentile) if spec.model_key in steps else spec
        for spec in specs
    ]
    readable: list[VariantSpec] = []
    for spec in specs:
        if spec.target_key in inputs.invalid_targets:
            decisions[spec.key] = _invalid_decision(
                next(va for va in inputs.variants if _va_key(va) == spec.key),
                f"spec.scaleTargetRef: {inputs.invalid_targets[spec.target_key]}",
                inputs.current_replicas,
            )
        elif (spec.accelerator or "") in inputs.unreadable_inventory:
            decisions[spec.key] = _invalid_decision(
                next(va for va in inputs.variants if _va_key(va) == spec.key),
                f"{inputs.unreadable_inventory[spec.accelerator or '']}: the inventory of its accelerator is "
                "unreadable, so its replicas are held",
                inputs.current_replicas,
            )
        elif spec.target_key not in inputs.current_replicas:
            decisions[spec.key] = _decision(
                spec,
                inputs.accelerator_costs,
                current=None,
                desired=None,
                reason=REASON_TARGET_MISSING,
                message=f"scale target {spec.target_kind}/{spec.target_name} not found in namespace {spec.namespace}",
                ready=False,
                metrics=_metrics_condition(spec, inputs),
                actuate=False,
            )
        else:
            readable.append(spec)

    # With the metrics backend down there is no load to size for: every variant holds (see _decide).
    model_based = model_based_targets([] if inputs.metrics_error else readable, inputs)
    steps = held_at_caps(steps, model_based.caps)

    woken = variants_to_wake(readable, inputs, model_based.targets, model_based.errors)
    by_model: dict[tuple[str, str], list[VariantSpec]] = defaultdict(list)
    for spec in readable:
        by_model[spec.model_key].append(spec)
    for model_key, model_specs in by_model.items():
        saturation = None if inputs.metrics_error else _saturation_for_model(model_key, model_specs, inputs)
        added = {
            spec.key: max(model_based.targets[spec.key] - inputs.current_replicas[spec.target_key], 0)
            for spec in model_specs
            if spec.key in model_based.targets
        }
        grow = saturation.targets if saturation is not None else {}
        need = sum(max(grow.get(s.key, 0) - inputs.current_replicas[s.target_key], 0) for s in model_specs)
        for spec in model_specs:
            current = inputs.current_replicas[spec.target_key]
            metrics = _metrics_condition(spec, inputs)
            load = inputs.loads.get(spec.model_key)
            idle = load is not None and load.arrival_rate_rps == 0 and not inputs.gateway_waiting.get(spec.model_key)
            elsewhere = sum(n for key, n in added.items() if key != spec.key)
            desired, reason, message, ready = _decide(
                spec, current, model_based, saturation, metrics, idle, elsewhere, need
            )
            desired, reason, message, ready = woken_decision(woken.get(spec.key), desired, reason, message, ready)
            falling = load is not None and sustained_fall(load.recent_change_rps, load.change_noise_rps)
            window_s = inputs.scale_down_window_s if spec.scale_down_window_s is None else spec.scale_down_window_s
            stable = stabilize_scale_down(desired, current, spec.annotations, window_s, inputs.now, falling)
            if ready:
                desired, message = stable.desired, message + stable.note
            cost = replica_cost(spec, inputs.accelerator_costs) * desired
            decisions[spec.key] = _decision(
                spec,
                inputs.accelerator_costs,
                current=current,
                desired=desired,
                reason=reason,
                message=message,
                ready=ready,
                metrics=metrics,
                actuate=spec.actuate,
                target=(spec.target_api_version, spec.target_kind, spec.target_name),
                cost=cost,
                stabilization=stable.pending,
                held=stable.note.removeprefix("; ") if ready and stable.pending is not None else "",
                stabilization_changed=ready and stable.changed,
                solver_status=model_based.status if spec.key in model_based.targets else None,
                solver_gap=model_based.gap if spec.key in model_based.targets else None,
                solver_stage_gaps=model_based.stage_gaps if spec.key in model_based.targets else {},
                unserved_rps=model_based.unserved.get(spec.model_key, 0.0),
            )
    return [_with_loop(decisions[key], steps) for key in order]


def _with_loop(decision: VariantDecision, steps: Mapping[tuple[str, str], ControllerStep]) -> VariantDecision:
    """The decision with its model's attainment-loop step (unchanged when the loop is off for the model)."""
    loop = steps.get((decision.namespace, decision.model_id or ""))
    if loop is None:
        return decision
    return dataclasses.replace(
        decision,
        sizing_percentile=loop.percentile,
        peak_hold_s=loop.hold_s,
        loop_message=loop.message,
        load_factor=loop.load_factor,
    )


def summarize(decisions: Iterable[VariantDecision], bindings: Iterable[BindingDecision] = ()) -> str:
    """One line for the logs: how many variants and binding targets, how many change, how many are not ready,
    and the total cost per hour of every row (binding targets whose binding gives no cost said as unpriced)."""
    decisions = list(decisions)
    targets = [t for b in bindings for t in b.targets]
    changed = sum(1 for d in decisions if d.changes_replicas)
    failed = sum(1 for d in decisions if not d.ready)
    line = f"{len(decisions)} variants: {changed} to scale, {failed} not ready"
    if targets:
        line += f"; {len(targets)} binding targets: {sum(1 for t in targets if t.changes_replicas)} to scale"
    cost = sum(d.cost for d in decisions) + sum(t.cost for t in targets if t.priced)
    unpriced = sum(1 for t in targets if not t.priced)
    line += f"; total cost {cost:.2f} {COST_UNIT}"
    return line + (f" ({unpriced} binding targets unpriced: their binding gives no cost)" if unpriced else "")


@dataclass(frozen=True)
class CyclePlan:
    """Everything one optimize cycle decided, before anything is written."""

    variants: list[VariantDecision]
    """One decision per VariantAutoscaling, in input order."""
    bindings: list[BindingDecision]
    """One decision per AutoscalingPolicyBinding, in input order."""
    loads: dict[tuple[str, str], tuple[float, float, float]]
    """(namespace, model) -> (arrival rate req/s, average input tokens, average output tokens) it sized for."""
    slos: dict[tuple[str, str], tuple[float | None, float | None]]
    """(namespace, model) -> (TTFT target ms, ITL target ms) of its service class."""
    attainment: dict[tuple[str, str], ModelAttainment] = field(default_factory=dict)
    """(namespace, model) -> its SLO attainment target and what was measured over the window and recently."""

    @property
    def summary(self) -> str:
        """One line for the logs: the variants' counts and cost, then the bindings' targets."""
        return summarize(self.variants, self.bindings)


def plan_cycle(inputs: CycleInputs, bindings: Sequence[BindingInputs] = ()) -> CyclePlan:
    """The whole cycle's decisions: every VariantAutoscaling (:func:`plan_variants`) and every Kthena
    binding (:func:`engine.optimize.bindings.plan_binding`) at ``inputs.now``, and what they were sized for.

    Why one call: the flow reads, calls this once and writes what it returns; no decision is left to
    the flow to stitch together.
    """
    slos = model_slos(inputs.variants, inputs.service_classes)
    attainment = measured_attainment(inputs, slos)
    variants = plan_variants(dataclasses.replace(inputs, attainment=dict(inputs.attainment) or attainment))
    for decision in variants:
        if decision.reason != REASON_INVALID and decision.model_id:
            decision.slo = attainment.get((decision.namespace, decision.model_id))
    return CyclePlan(
        variants=variants,
        bindings=[plan_binding(binding, inputs.now) for binding in bindings],
        loads={
            key: (load.arrival_rate_rps, load.avg_in_tokens, load.avg_out_tokens) for key, load in inputs.loads.items()
        },
        slos=slos,
        attainment=attainment,
    )


def measured_attainment(
    inputs: CycleInputs, slos: Mapping[tuple[str, str], tuple[float | None, float | None]]
) -> dict[tuple[str, str], ModelAttainment]:
    """Every model's SLO target (:func:`engine.optimize.spec.model_targets`) and its attainment from the cycle's
    latency histograms against its service class's TTFT and ITL targets; unknown, with the reason, without them."""
    result: dict[tuple[str, str], ModelAttainment] = {}
    for key, target in model_targets(inputs.variants, inputs.service_classes).items():
        ttft_ms, itl_ms = slos.get(key, (None, None))
        reason = inputs.latency_missing.get(key)
        if inputs.metrics_error:
            reason = f"metrics backend unavailable: {inputs.metrics_error}"
        result[key] = model_attainment(target, inputs.latency.get(key), ttft_ms, itl_ms, reason)
    return result
