"""One optimization cycle for VariantAutoscalings, as a pure function of its inputs.

The optimize flow gathers everything with I/O (VariantAutoscaling manifests, current replicas, the
WVA ConfigMaps, Prometheus metrics) and calls :func:`plan_variants`. This module decides, per
variant: the model-based target (performance model + MILP allocation across accelerators), the
saturation target (KV-cache and queue headroom), their arbitration, and the safety rules:

* missing or stale metrics never scale down: the variant holds its current replicas;
* an infeasible SLO keeps the current allocation and says which variant and which SLO;
* one invalid resource (bad perf params, unknown accelerator, missing ConfigMap key) gets its own
  condition and the rest of the cycle proceeds;
* min/max replicas and scale-to-zero settings are respected.

Nothing here does I/O or reads the clock; ``now`` is an input.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from engine.allocation import Allocation, AllocationProblem, ModelDemand, VariantOption, solve
from engine.api import schema as crd_schema
from engine.api.crds import openapi_schema
from engine.api.meta import format_time, parse_duration, parse_time
from engine.api.registry import kind_info
from engine.optimize.actuation import RECOMMEND, ActuationModeError, resource_mode
from engine.optimize.config import AcceleratorCost, ConfigError, ServiceClass
from engine.perf.load_peak import planning_rate
from engine.perf.queueing import SLO, PerfProfile, Workload
from engine.perf.saturation import (
    DEFAULT_VARIANT_COST,
    REASON_SAFETY_OVERRIDE,
    ModelAnalysis,
    ReplicaMetrics,
    SaturationConfigSet,
    VariantState,
    analyze_model,
    arbitrate,
    saturation_targets,
)
from engine.perf.saturation import REASON_METRICS_AVAILABLE as METRICS_AVAILABLE
from engine.perf.saturation import REASON_METRICS_UNAVAILABLE as METRICS_UNAVAILABLE
from engine.perf.saturation import REASON_OPTIMIZATION_SUCCEEDED as REASON_SUCCEEDED
from engine.perf.tail_sizing import (
    ANNOTATION_TTFT_PERCENTILE,
    DEFAULT_TTFT_PERCENTILE,
    PromptDistribution,
    TailSizingError,
    capped_percentile,
    describe_cap,
    refine_cap,
    shortage_caps,
    tail_max_rate,
    ttft_percentile,
)
from engine.status import REASON_INVALID, REASON_TARGET_MISSING, ConditionUpdate, changed_fields, set_conditions

ANNOTATION_MIN_REPLICAS = "modelplane.io/min-replicas"
ANNOTATION_MAX_REPLICAS = "modelplane.io/max-replicas"
ANNOTATION_SCALE_TO_ZERO = "modelplane.io/scale-to-zero"
# WVA's label for the accelerator of a VariantAutoscaling that does not carry spec.accelerator (seed 001).
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"

# OptimizationReady=False reasons of VariantAutoscalings beyond the shared ones in engine.status.
REASON_INFEASIBLE = "SLOInfeasible"
REASON_NO_METRICS = METRICS_UNAVAILABLE


class SpecError(ValueError):
    """A VariantAutoscaling cannot be optimized as written; ``field`` names the offending path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


@dataclass(frozen=True)
class ModelLoad:
    """Observed load of one model in one namespace: arrival rate (req/s) and token averages."""

    arrival_rate_rps: float
    avg_in_tokens: float
    avg_out_tokens: float
    prompt_tokens: PromptDistribution | None = None
    """Prompt-length histogram (``vllm:request_prompt_tokens_bucket``) for tail-aware sizing, when collected."""
    recent_peak_rps: float | None = None
    """Highest 1-minute arrival rate over the last start-up delay (see :mod:`engine.perf.load_peak`), when collected."""


@dataclass(frozen=True)
class PodSample:
    """Saturation gauges of one serving pod."""

    pod: str
    kv_cache_usage: float
    queue_length: float


@dataclass(frozen=True)
class VariantSpec:
    """What the optimizer needs from one VariantAutoscaling, parsed and checked."""

    namespace: str
    name: str
    model_id: str
    variant_id: str
    accelerator: str | None
    accelerator_count: int
    max_batch: int | None
    profile: PerfProfile | None
    slo_ref: tuple[str, str] | None
    variant_cost: float | None
    """``spec.variantCost`` as declared (None when the resource does not declare one): see :func:`replica_cost`."""
    target_api_version: str
    target_kind: str
    target_name: str
    min_replicas: int
    max_replicas: int | None
    actuate: bool
    ttft_percentile: float | None = DEFAULT_TTFT_PERCENTILE
    """Share of requests (%) sized to meet the TTFT target (``modelplane.io/ttft-percentile``); None: the mean."""
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of the VariantAutoscaling."""
        return (self.namespace, self.name)

    @property
    def model_key(self) -> tuple[str, str]:
        """(namespace, modelID): variants of one model in one namespace share its load."""
        return (self.namespace, self.model_id)

    @property
    def target_key(self) -> tuple[str, str, str]:
        """(namespace, kind, name) of the scale target."""
        return (self.namespace, self.target_kind, self.target_name)


@dataclass(frozen=True)
class CycleInputs:
    """Everything one cycle decides from. Keys of ``loads``/``pods`` are (namespace, modelID)."""

    now: datetime
    variants: list[dict[str, Any]]
    current_replicas: Mapping[tuple[str, str, str], int]
    accelerator_costs: Mapping[str, AcceleratorCost]
    service_classes: Mapping[tuple[str, str], ServiceClass | ConfigError]
    saturation: SaturationConfigSet
    inventory: Mapping[str, int] | None = None
    ready_replicas: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    loads: Mapping[tuple[str, str], ModelLoad] = field(default_factory=dict)
    pods: Mapping[tuple[str, str], list[PodSample]] = field(default_factory=dict)
    metrics_error: str | None = None  # set when the metrics backend itself failed
    missing_metrics: Mapping[tuple[str, str], str] = field(default_factory=dict)
    time_limit_s: float = 10.0
    scale_down_window_s: float = 0.0
    """Default scale-down stabilization window (seconds); a VariantAutoscaling may set its own with the
    ``modelplane.io/scale-down-stabilization-window`` annotation. 0: scale down at once."""


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

    @property
    def optimization(self) -> ConditionUpdate:
        """The OptimizationReady condition this decision implies."""
        return ConditionUpdate("OptimizationReady", "True" if self.ready else "False", self.reason, self.message)

    @property
    def changes_replicas(self) -> bool:
        """Whether the target must be scaled."""
        return self.desired is not None and self.current is not None and self.desired != self.current


# --------------------------------------------------------------------------------------------
# Parsing a VariantAutoscaling into what the optimizer needs
# --------------------------------------------------------------------------------------------


def _number(params: Mapping[str, Any], key: str, path: str) -> float:
    if key not in params:
        raise SpecError(f"{path}.{key}", "missing")
    try:
        value = float(params[key])
    except (TypeError, ValueError):
        raise SpecError(f"{path}.{key}", f"must be a number, got {params[key]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"{path}.{key}", f"must be a finite non-negative number, got {params[key]!r}")
    return value


def parse_profile(spec: Mapping[str, Any]) -> tuple[PerfProfile | None, int | None]:
    """The variant's performance profile, or ``(None, None)`` when it has none (saturation-only)."""
    profile = spec.get("variantProfile")
    if not profile:
        return None, None
    base = "spec.variantProfile"
    max_batch = profile.get("maxBatchSize")
    if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
        raise SpecError(f"{base}.maxBatchSize", f"must be an integer >= 1, got {max_batch!r}")
    parms = profile.get("perfParms") or {}
    decode = parms.get("decodeParms") or {}
    prefill = parms.get("prefillParms") or {}
    alpha = _number(decode, "alpha", f"{base}.perfParms.decodeParms")
    beta = _number(decode, "beta", f"{base}.perfParms.decodeParms")
    gamma = _number(prefill, "gamma", f"{base}.perfParms.prefillParms")
    delta = _number(prefill, "delta", f"{base}.perfParms.prefillParms")
    if alpha + beta == 0:
        raise SpecError(f"{base}.perfParms.decodeParms", "alpha and beta cannot both be 0")
    return PerfProfile(alpha=alpha, beta=beta, gamma=gamma, delta=delta, max_batch=max_batch), max_batch


def _annotation_int(annotations: Mapping[str, str], key: str, minimum: int) -> int | None:
    if key not in annotations:
        return None
    try:
        value = int(str(annotations[key]).strip())
    except ValueError:
        raise SpecError(f"metadata.annotations[{key}]", f"must be an integer, got {annotations[key]!r}") from None
    if value < minimum:
        raise SpecError(f"metadata.annotations[{key}]", f"must be >= {minimum}, got {value}")
    return value


@cache
def _spec_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    info = kind_info(api_version, kind)
    return (openapi_schema(info).get("properties") or {}).get("spec") if info is not None else None


def _spec_schema_error(obj: Mapping[str, Any]) -> SpecError | None:
    """The first violation of the CRD schema in ``spec``, as a :class:`SpecError`, or None.

    The same rules as the API server (and ``modelplane validate``): an object a cluster would have
    rejected, e.g. an unquoted number where a string is required, is invalid here too, whichever
    backend it was read from.
    """
    schema = _spec_schema(str(obj.get("apiVersion")), str(obj.get("kind")))
    if schema is None or not isinstance(obj.get("spec"), dict):
        return None
    errors = crd_schema.validate_quiet(obj["spec"], schema, "spec")
    return SpecError(errors[0].field, errors[0].detail) if errors else None


def parse_variant(obj: Mapping[str, Any]) -> VariantSpec:
    """Reduce a VariantAutoscaling manifest (either seed generation) to a :class:`VariantSpec`.

    Raises :class:`SpecError` naming the field when the resource cannot be optimized at all.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    schema_error = _spec_schema_error(obj)
    if schema_error is not None:
        raise schema_error
    model_id = spec.get("modelID")
    if not isinstance(model_id, str) or not model_id:
        raise SpecError("spec.modelID", "required")
    target = spec.get("scaleTargetRef") or {}
    if not target.get("name"):
        raise SpecError(
            "spec.scaleTargetRef.name", "required: Modelplane scales the target through its scale subresource"
        )
    profile, max_batch = parse_profile(spec)
    labels = meta.get("labels") or {}
    accelerator = spec.get("accelerator") or labels.get(ACCELERATOR_LABEL) or None
    count = spec.get("acceleratorCount", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise SpecError("spec.acceleratorCount", f"must be an integer >= 1, got {count!r}")
    try:
        variant_cost = float(spec["variantCost"]) if spec.get("variantCost") is not None else None
    except (TypeError, ValueError):
        raise SpecError("spec.variantCost", f"must be a decimal string, got {spec.get('variantCost')!r}") from None
    slo = spec.get("sloClassRef") or None
    slo_ref = (slo["name"], slo["key"]) if slo and slo.get("name") and slo.get("key") else None
    scale_to_zero = str(annotations.get(ANNOTATION_SCALE_TO_ZERO, "false")).lower() == "true"
    minimum = _annotation_int(annotations, ANNOTATION_MIN_REPLICAS, 0)
    if minimum is None:
        minimum = 0 if scale_to_zero else 1
    maximum = _annotation_int(annotations, ANNOTATION_MAX_REPLICAS, 1)
    if maximum is not None and maximum < minimum:
        raise SpecError(
            f"metadata.annotations[{ANNOTATION_MAX_REPLICAS}]", f"{maximum} is below min replicas {minimum}"
        )
    variant_id = spec.get("variantID") or f"{model_id}-{accelerator or 'unknown'}-{count}"
    try:
        percentile = ttft_percentile(annotations)
    except TailSizingError as exc:
        raise SpecError(f"metadata.annotations[{ANNOTATION_TTFT_PERCENTILE}]", str(exc)) from None
    try:
        actuate = actuation_enabled(annotations)
    except ActuationModeError as exc:
        raise SpecError(exc.field, str(exc).split(": ", 1)[1]) from None
    return VariantSpec(
        namespace=meta.get("namespace") or "default",
        name=meta["name"],
        model_id=model_id,
        variant_id=variant_id,
        accelerator=accelerator,
        accelerator_count=count,
        max_batch=max_batch,
        profile=profile,
        slo_ref=slo_ref,
        variant_cost=variant_cost,
        target_api_version=target.get("apiVersion") or "apps/v1",
        target_kind=target.get("kind") or "Deployment",
        target_name=target["name"],
        min_replicas=minimum,
        max_replicas=maximum,
        actuate=actuate,
        ttft_percentile=percentile,
        annotations=dict(annotations),
    )


def actuation_enabled(annotations: Mapping[str, str]) -> bool:
    """False when the resource asks only for recommendations (``modelplane.io/actuation: recommend``).

    Whether the target is scaled or its desired replicas published is the actuation mode's business
    (:mod:`engine.optimize.actuation`); raises :class:`~engine.optimize.actuation.ActuationModeError` on an unknown value.
    """
    return resource_mode(annotations) != RECOMMEND


def clamp(value: int, spec: VariantSpec) -> int:
    """Clamp a replica count to the variant's [min, max]."""
    value = max(value, spec.min_replicas)
    return min(value, spec.max_replicas) if spec.max_replicas is not None else value


# --------------------------------------------------------------------------------------------
# Model-based targets: SLO lookup, sizing and the MILP
# --------------------------------------------------------------------------------------------


@dataclass
class _ModelBased:
    """Per-variant model-based result: a target, or why there is none."""

    targets: dict[tuple[str, str], int] = field(default_factory=dict)
    errors: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # key -> (reason, message)
    unserved: dict[tuple[str, str], float] = field(default_factory=dict)
    status: str = "optimal"
    gap: float | None = None
    stage_gaps: dict[str, float | None] = field(default_factory=dict)
    """The solve's proven gap per stage (``"priority 1"``, ..., ``"cost"``), as ``Allocation.stage_gaps``."""
    notes: dict[tuple[str, str], str] = field(default_factory=dict)
    """Per (namespace, modelID): what the shortage ladder did to its sizing (appended to its variants' messages)."""


def _slo_for(spec: VariantSpec, inputs: CycleInputs) -> tuple[SLO, int]:
    """The variant's SLO and priority from its ``sloClassRef``; raises SpecError when unusable."""
    assert spec.slo_ref is not None
    entry = inputs.service_classes.get(spec.slo_ref)
    name, key = spec.slo_ref
    if entry is None:
        raise SpecError("spec.sloClassRef", f"ConfigMap {name!r} has no key {key!r} (or the ConfigMap is missing)")
    if isinstance(entry, ConfigError):
        raise SpecError("spec.sloClassRef", str(entry))
    model_slo = entry.slo_for(spec.model_id)
    if model_slo is None:
        raise SpecError(
            "spec.sloClassRef", f"service class {entry.name!r} ({name}/{key}) has no SLO for model {spec.model_id!r}"
        )
    return SLO(ttft_ms=model_slo.ttft_ms, itl_ms=model_slo.itl_ms, tps=model_slo.tps), entry.priority


def _model_based_candidates(
    specs: list[VariantSpec],
    inputs: CycleInputs,
    result: _ModelBased,
    caps: Mapping[tuple[str, str], float] | None = None,
) -> tuple[list[ModelDemand], list[VariantOption]]:
    """Build the allocation problem from every variant that has a profile, an SLO and a cost.

    Per-replica capacities are left to :func:`engine.allocation.solve`, which sizes every variant in
    one vectorized batch and reports the ones whose SLO is infeasible.
    """
    demands: dict[tuple[str, str], ModelDemand] = {}
    options: list[VariantOption] = []
    pools = model_pools(specs, inputs)
    for spec in specs:
        if spec.profile is None or spec.slo_ref is None:
            continue  # saturation-only variant
        load = inputs.loads.get(spec.model_key)
        if load is None:
            continue  # no load metrics: hold (decided later)
        try:
            if not spec.accelerator:
                raise SpecError("spec.accelerator", "required for model-based optimization")
            if spec.accelerator not in inputs.accelerator_costs:
                raise SpecError(
                    "spec.accelerator",
                    f"unknown accelerator {spec.accelerator!r}: not in the accelerator-unit-costs ConfigMap",
                )
            slo, priority = _slo_for(spec, inputs)
        except SpecError as exc:
            result.errors[spec.key] = (REASON_INVALID, str(exc))
            continue
        workload = Workload(in_tokens=load.avg_in_tokens, out_tokens=max(load.avg_out_tokens, 1.0))
        demand = demands.get(spec.model_key)
        if demand is None or priority < demand.priority:
            demands[spec.model_key] = ModelDemand(
                name=_qualified(spec.model_key),
                load_rps=planning_rate(load.arrival_rate_rps, load.recent_peak_rps),
                workload=workload,
                slo=slo,
                priority=priority,
            )
        current = inputs.current_replicas.get(spec.target_key, 0)
        options.append(
            VariantOption(
                name=_qualified(spec.key),
                model=_qualified(spec.model_key),
                accelerator=spec.accelerator,
                accelerators_per_replica=spec.accelerator_count,
                profile=spec.profile,
                min_replicas=spec.min_replicas,
                max_replicas=spec.max_replicas,
                current_replicas=current,
                max_rate=_tail_rate(spec, load, workload, slo, (caps or {}).get(spec.model_key), pools[spec.model_key]),
            )
        )
    return list(demands.values()), options


def model_pools(specs: Iterable[VariantSpec], inputs: CycleInputs) -> dict[tuple[str, str], int]:
    """Per (namespace, modelID): the replicas its variants run now (at least 1).

    The gateway balances a model's requests over all of its replicas; tail sizing models that pool
    (:func:`engine.perf.tail_sizing.queue_distribution`).  The current count stands for the next one: the
    gain from balancing is flat beyond a few replicas, and while a model grows from fewer replicas the
    estimate errs on the side of more capacity.
    """
    pools: dict[tuple[str, str], int] = defaultdict(int)
    for spec in specs:
        pools[spec.model_key] += inputs.current_replicas.get(spec.target_key, 0)
    return {key: max(count, 1) for key, count in pools.items()}


def _tail_rate(
    spec: VariantSpec, load: ModelLoad, workload: Workload, slo: SLO, cap: float | None, pool: int = 1
) -> float | None:
    """Per-replica rate sized for the variant's TTFT percentile (engine.perf.tail_sizing), or None for WVA's mean sizing.

    The prompt histogram's shape inside its buckets is fitted to the observed mean prompt
    (``workload.in_tokens``, from ``vllm:request_prompt_tokens_sum / _count``) unless it carries its own.
    """
    percentile = capped_percentile(spec.ttft_percentile, cap)
    if percentile is None or load.prompt_tokens is None or spec.profile is None:
        return None
    prompts = (
        load.prompt_tokens if load.prompt_tokens.mean is not None else load.prompt_tokens.with_mean(workload.in_tokens)
    )
    return tail_max_rate(spec.profile, workload, slo, prompts, percentile, pool)


def _qualified(key: tuple[str, str]) -> str:
    """``namespace/name``: the solver's unique name for a model or a variant key."""
    return f"{key[0]}/{key[1]}"


def model_based_targets(specs: list[VariantSpec], inputs: CycleInputs) -> _ModelBased:
    """Solve one allocation over every model-based variant of the cycle (shared inventory)."""
    result = _ModelBased()
    demands, options = _model_based_candidates(specs, inputs, result)
    if not options:
        return result
    problem = AllocationProblem(
        models=demands,
        variants=options,
        unit_costs={name: cost.cost for name, cost in inputs.accelerator_costs.items()},
        inventory=dict(inputs.inventory) if inputs.inventory else None,
        time_limit_s=inputs.time_limit_s,
    )
    allocation = solve(problem)
    if any(option.max_rate is not None for option in options):
        allocation, caps = _shortage_allocation(specs, inputs, problem, allocation)
        for model_key, cap in caps.items():
            result.notes[model_key] = (
                f"; sized for {describe_cap(cap)}: the accelerator inventory cannot hold the configured TTFT percentile"
            )
    result.status, result.gap, result.stage_gaps = allocation.status, allocation.gap, dict(allocation.stage_gaps)
    by_name = {_qualified(spec.key): spec for spec in specs}
    for name, replicas in allocation.replicas.items():
        result.targets[by_name[name].key] = replicas
    for name, reason in allocation.infeasible_variants.items():
        if name in by_name:
            result.errors[by_name[name].key] = (REASON_INFEASIBLE, f"variant {by_name[name].variant_id}: {reason}")
    for spec in specs:
        unserved = allocation.unserved_rps.get(_qualified(spec.model_key), 0.0)
        if unserved > 1e-9:
            result.unserved[spec.model_key] = unserved
    return result


def _shortage_allocation(
    specs: list[VariantSpec], inputs: CycleInputs, problem: AllocationProblem, allocation: Allocation
) -> tuple[Allocation, dict[tuple[str, str], float]]:
    """When the tail-sized plan leaves load unserved: the plan for the highest percentile caps the inventory holds.

    1. One cap for every model: the coarse ladder (:data:`engine.perf.tail_sizing.SHORTAGE_PERCENTILES`)
       finds the first that fits, then :func:`engine.perf.tail_sizing.refine_cap` bisects between it and the
       last that did not, to one percentile point.  Why: the ladder's steps are 5-10 points apart, and
       the step below the inventory's limit left up to a third of it idle (granite's L40S replicas went
       4 -> 2 -> 4 on the trace) while requests missed their target.
    2. Each model in priority order is then raised back towards its configured percentile as far as
       the plan still fits with the others at their caps.  Why: a shortage of one accelerator type
       capped every model, and llama left an idle H100 while its requests missed the target because
       granite had run out of A100s.  A raise never takes capacity another model needs at its cap (the
       plan must still serve every model).
    Returns the allocation and the caps (percent; 0 = the mean request) of the models that got one.
    """
    percentiles = [spec.ttft_percentile for spec in specs]
    uniform = shortage_caps(allocation.total_unserved_rps, percentiles)
    if not uniform:
        return allocation, {}
    models = _models_by_priority(specs, inputs)
    plans: dict[tuple[tuple[tuple[str, str], float], ...], Allocation] = {}

    def solved(caps: Mapping[tuple[str, str], float]) -> Allocation:
        key = tuple(sorted(caps.items()))
        if key not in plans:
            demands, options = _model_based_candidates(specs, inputs, _ModelBased(), caps)
            plans[key] = solve(dataclasses.replace(problem, models=demands, variants=options))
        return plans[key]

    def fits(caps: Mapping[tuple[str, str], float]) -> bool:
        return solved(caps).total_unserved_rps <= 1e-9

    too_high = max(p for p in percentiles if p is not None)
    common: float | None = None
    for cap in uniform:
        if fits({m: cap for m in models}):
            common = refine_cap(cap, too_high, lambda c: fits({m: c for m in models}))
            break
        too_high = cap
    if common is None:  # even the mean leaves load unserved: the inventory is short whatever the sizing
        caps = {m: uniform[-1] for m in models}
        return solved(caps), caps
    caps = {m: common for m in models}
    # Each model's configured percentile (its highest across variants; 0 = the mean request).
    configured = {m: max((s.ttft_percentile or 0.0) for s in specs if s.model_key == m) for m in models}
    spare = _spare_accelerators(specs, inputs, solved(caps))
    for model in models:
        if configured[model] <= caps[model]:
            continue
        if not any(spare(s) for s in specs if s.model_key == model):
            continue  # every accelerator it can run on is taken: raising it would only be refused
        if fits({**caps, model: configured[model]}):
            caps[model] = configured[model]
        elif common >= 50.0:
            caps[model] = refine_cap(common, configured[model], lambda c, m=model: fits({**caps, m: c}))
    return solved(caps), {m: c for m, c in caps.items() if c < configured[m]}


def _spare_accelerators(
    specs: list[VariantSpec], inputs: CycleInputs, plan: Allocation
) -> Callable[[VariantSpec], bool]:
    """Whether the plan leaves room in the inventory for one more replica of a variant (always, without inventory).

    Why: raising a model's percentile costs a few MILP solves; on a large cluster only the models that
    can run on an accelerator with room left are worth them.
    """
    if not inputs.inventory:
        return lambda spec: True
    used: dict[str, int] = defaultdict(int)
    for spec in specs:
        used[spec.accelerator or ""] += plan.replicas.get(_qualified(spec.key), 0) * spec.accelerator_count
    inventory = inputs.inventory

    def has_room(spec: VariantSpec) -> bool:
        accelerator = spec.accelerator or ""
        return accelerator in inventory and inventory[accelerator] - used[accelerator] >= spec.accelerator_count

    return has_room


def _models_by_priority(specs: list[VariantSpec], inputs: CycleInputs) -> list[tuple[str, str]]:
    """The models of the cycle's tail-sized variants, highest priority (lowest number) first, then by name."""
    priority: dict[tuple[str, str], int] = {}
    for spec in specs:
        if spec.profile is None or spec.slo_ref is None or spec.model_key not in inputs.loads:
            continue
        try:
            _, level = _slo_for(spec, inputs)
        except SpecError:
            continue
        priority[spec.model_key] = min(level, priority.get(spec.model_key, level))
    return sorted(priority, key=lambda m: (priority[m], m))


# --------------------------------------------------------------------------------------------
# Saturation targets and arbitration
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
# The cycle
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
    obj: Mapping[str, Any], message: str, current_replicas: Mapping[tuple[str, str, str], int]
) -> VariantDecision:
    """The decision for a resource that cannot be optimized as written: nothing to scale, its own
    condition, and (when its scale target exists) the replicas it runs now, so ``currentAlloc`` stays true."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    target = spec.get("scaleTargetRef") if isinstance(spec.get("scaleTargetRef"), dict) else {}
    namespace = meta.get("namespace") or "default"
    current = current_replicas.get((namespace, target.get("kind") or "Deployment", str(target.get("name") or "")))
    accelerator = (
        spec.get("accelerator") if isinstance(spec.get("accelerator"), str) and len(spec["accelerator"]) >= 2 else None
    )
    return VariantDecision(
        namespace=meta.get("namespace") or "default",
        name=meta.get("name", ""),
        model_id=spec.get("modelID") if isinstance(spec.get("modelID"), str) else None,
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
    model_based: _ModelBased,
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
        message += f"; {model_based.unserved[spec.model_key]:.2f} req/s of {spec.model_id} unserved: accelerator inventory exhausted"
    if mb_target is not None:
        message += model_based.notes.get(spec.model_key, "")
    if mb_target is not None and model_based.status != "optimal":
        gap = f" (gap {model_based.gap:.2%})" if model_based.gap is not None else ""
        message += f"; solver status {model_based.status}{gap}"
    return desired, decision.reason, message, True


ANNOTATION_SCALE_DOWN_WINDOW = "modelplane.io/scale-down-stabilization-window"
"""VariantAutoscaling annotation: scale-down stabilization window (a Duration such as ``3m``)."""
DEFAULT_SCALE_DOWN_WINDOW_S = 180.0
"""The scale-down stabilization window of the scheduled optimize deployment (``deployments/prefect.yaml``) and
of the simulated Modelplane policy: a replica's start-up (model load, ~2 min) plus one 60 s cycle, the same
look-back as the start-up-aware load (:mod:`engine.perf.load_peak`).  The flow's own default stays 0 (WVA, which
leaves this to the HPA it actuates through, whose default is 300 s), so a one-off run or a CI preview
decides as WVA does.  Why a window in the loop: the allocation re-plans every minute with the load's
noise, and a replica removed and wanted back within its start-up is capacity missing for two minutes; on
the conversation trace the window halved Modelplane's replica changes (docs/simulate.md)."""
ANNOTATION_SCALE_DOWN_PENDING = "modelplane.io/scale-down-pending"
"""VariantAutoscaling annotation written by Modelplane: since when a scale-down has been recommended and
the highest replica count recommended since, as JSON ``{"since": RFC3339, "max": N}`` (the window's state:
each cycle is a fresh process, and the seed's status has no field for it)."""


@dataclass(frozen=True)
class Stabilized:
    """The outcome of the scale-down stabilization of one variant."""

    desired: int
    note: str
    pending: str | None
    changed: bool


def stabilize_scale_down(
    desired: int, current: int, annotations: Mapping[str, str], default_window_s: float, now: datetime
) -> Stabilized:
    """Hold a scale-down until it has been recommended for a whole window (HPA's scale-down stabilization).

    Scale-ups and holds pass at once and end a pending scale-down. A scale-down first seen now starts
    the window and holds ``current``; once the window has passed, the target goes to the highest
    replica count recommended during it, so a recommendation flapping with the lag of ``rate()`` (2 -> 1
    -> 2 -> 1) never removes a replica it needs again a cycle later. The state is the
    :data:`ANNOTATION_SCALE_DOWN_PENDING` annotation; ``changed`` says when it must be written.
    """
    raw_pending = annotations.get(ANNOTATION_SCALE_DOWN_PENDING)
    pending = _parse_pending(raw_pending)
    window = default_window_s
    if annotations.get(ANNOTATION_SCALE_DOWN_WINDOW):
        try:
            window = parse_duration(annotations[ANNOTATION_SCALE_DOWN_WINDOW])
        except ValueError:
            window = default_window_s
    if desired >= current or window <= 0:
        return Stabilized(desired, "", None, raw_pending is not None)
    if pending is None:
        since, highest = now, desired
    else:
        since, highest = pending[0], max(pending[1], desired)
    waited = (now - since).total_seconds()
    if waited >= window:
        return Stabilized(
            min(highest, current), f"; scale-down stabilized over {window:.0f}s", None, raw_pending is not None
        )
    value = json.dumps({"since": format_time(since), "max": highest}, separators=(",", ":"))
    note = f"; scale-down to {highest} held by the {window:.0f}s stabilization window ({waited:.0f}s so far)"
    return Stabilized(current, note, value, value != raw_pending)


def _parse_pending(raw: str | None) -> tuple[datetime, int] | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return parse_time(data["since"]), int(data["max"])
    except (ValueError, KeyError, TypeError):
        return None  # unreadable state: start a new window


def replica_cost(spec: VariantSpec, accelerator_costs: Mapping[str, AcceleratorCost]) -> float:
    """The one cost of one replica of a variant, used everywhere a cost appears.

    ``spec.variantCost`` when the resource declares it; otherwise the accelerator's unit cost
    (``accelerator-unit-costs``) times ``acceleratorCount``; WVA's default 10.0 only when neither is
    known. ``status.currentAlloc.variantCost`` reports it, the saturation analysis picks the cheapest
    variant to grow by it, and the cycle's table and summary price ``replicas x`` it. The allocation
    MILP prices options with the unit costs, which is the same number unless a resource declares its own.
    """
    if spec.variant_cost is not None:
        return spec.variant_cost
    unit = accelerator_costs.get(spec.accelerator or "")
    if unit is not None:
        return unit.cost * spec.accelerator_count
    return DEFAULT_VARIANT_COST


def _decision(spec: VariantSpec, costs: Mapping[str, AcceleratorCost], **outcome: Any) -> VariantDecision:
    """A decision for ``spec``: its identity fields from the spec, the rest from ``outcome``."""
    return VariantDecision(
        namespace=spec.namespace,
        name=spec.name,
        model_id=spec.model_id,
        variant_id=spec.variant_id,
        accelerator=spec.accelerator,
        max_batch=spec.max_batch,
        variant_cost=replica_cost(spec, costs),
        **outcome,
    )


def plan_variants(inputs: CycleInputs) -> list[VariantDecision]:
    """Decide the desired replicas of every VariantAutoscaling of the cycle, in input order."""
    specs: list[VariantSpec] = []
    decisions: dict[tuple[str, str], VariantDecision] = {}
    order: list[tuple[str, str]] = []
    for obj in inputs.variants:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace") or "default", meta.get("name", ""))
        order.append(key)
        try:
            specs.append(parse_variant(obj))
        except SpecError as exc:
            decisions[key] = _invalid_decision(obj, str(exc), inputs.current_replicas)

    readable: list[VariantSpec] = []
    for spec in specs:
        if spec.target_key not in inputs.current_replicas:
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
        need = (
            0
            if saturation is None
            else sum(
                max(saturation.targets[spec.key] - inputs.current_replicas[spec.target_key], 0) for spec in model_specs
            )
        )
        for spec in model_specs:
            current = inputs.current_replicas[spec.target_key]
            metrics = _metrics_condition(spec, inputs)
            load = inputs.loads.get(spec.model_key)
            idle = load is not None and load.arrival_rate_rps == 0
            elsewhere = sum(n for key, n in added.items() if key != spec.key)
            desired, reason, message, ready = _decide(
                spec, current, model_based, saturation, metrics, idle, elsewhere, need
            )
            stable = stabilize_scale_down(desired, current, spec.annotations, inputs.scale_down_window_s, inputs.now)
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
                stabilization_changed=ready and stable.changed,
                solver_status=model_based.status if spec.key in model_based.targets else None,
                solver_gap=model_based.gap if spec.key in model_based.targets else None,
                solver_stage_gaps=model_based.stage_gaps if spec.key in model_based.targets else {},
                unserved_rps=model_based.unserved.get(spec.model_key, 0.0),
            )
    return [decisions[key] for key in order]


def format_cost(value: float) -> str:
    """A cost as the seed's ``^\\d+(\\.\\d+)?$`` decimal string."""
    return f"{max(value, 0.0):.2f}"


def summarize(decisions: Iterable[VariantDecision]) -> str:
    """One line for the logs: how many variants, how many change, how many failed, total cost."""
    decisions = list(decisions)
    changed = sum(1 for d in decisions if d.changes_replicas)
    failed = sum(1 for d in decisions if not d.ready)
    cost = sum(d.cost for d in decisions)
    return f"{len(decisions)} variants: {changed} to scale, {failed} not ready, total cost {cost:.2f}"


# --------------------------------------------------------------------------------------------
# Status write-back
# --------------------------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime | None:
    """A status timestamp, or None when absent or malformed (then the status is simply rewritten)."""
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def variant_status(
    decision: VariantDecision, old: Mapping[str, Any], now: datetime, applied: bool, generation: int | None
) -> dict[str, Any]:
    """The full new status of a VariantAutoscaling after a cycle (fields of both seed generations)."""
    status: dict[str, Any] = {k: v for k, v in old.items()}
    if decision.current is not None and decision.accelerator:
        current: dict[str, Any] = {"accelerator": decision.accelerator, "numReplicas": decision.current}
        if decision.variant_id:
            current = {"variantID": decision.variant_id, **current}
        if decision.max_batch is not None:
            current["maxBatch"] = decision.max_batch
        if decision.variant_cost is not None:
            current["variantCost"] = format_cost(decision.variant_cost)
        status["currentAlloc"] = current
    if decision.desired is not None:
        desired: dict[str, Any] = {"lastRunTime": format_time(now), "numReplicas": decision.desired}
        if decision.variant_id:
            desired["variantID"] = decision.variant_id
        if decision.accelerator and len(decision.accelerator) >= 2:
            desired["accelerator"] = decision.accelerator
        status["desiredOptimizedAlloc"] = desired
    status["actuation"] = {"applied": applied}
    status["conditions"] = set_conditions(
        list(old.get("conditions") or []), (decision.metrics, decision.optimization), now, generation
    )
    return status


def _without_run_time(status: Mapping[str, Any]) -> dict[str, Any]:
    trimmed = dict(status)
    if isinstance(trimmed.get("desiredOptimizedAlloc"), dict):
        trimmed["desiredOptimizedAlloc"] = {
            k: v for k, v in trimmed["desiredOptimizedAlloc"].items() if k != "lastRunTime"
        }
    return trimmed


def status_patch(
    old: Mapping[str, Any], new: Mapping[str, Any], now: datetime, heartbeat_s: float = 300.0
) -> dict[str, Any] | None:
    """The merge-patch turning ``old`` status into ``new``, or ``None`` when nothing worth writing changed.

    ``lastRunTime`` moves every cycle; writing every object every minute only for that would turn a
    1,000-variant cluster into 1,000 PATCHes per cycle. So a status whose only change is
    ``lastRunTime`` is written at most every ``heartbeat_s`` seconds, which keeps the timestamp an
    honest liveness signal without the write storm.
    """
    if _without_run_time(old) == _without_run_time(new):
        previous = _parse_time((old.get("desiredOptimizedAlloc") or {}).get("lastRunTime"))
        if previous is not None and (now - previous).total_seconds() < heartbeat_s:
            return None
    return changed_fields(old, new)
