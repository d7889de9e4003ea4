"""Model-based targets: how many replicas of which variant serve each model's load within its SLO.

Decides, for every variant with a performance profile, an SLO (its ``sloClassRef``) and a priced
accelerator, its replicas in one allocation over the whole cycle (:func:`engine.allocation.solve`: the
accelerator inventory is shared, higher-priority service classes first, then cost). The per-replica
rate is the queueing model's at the mean request, or the rate that keeps the configured TTFT
percentile within target (:mod:`engine.perf.tail_sizing`) when a prompt histogram is collected; the
load is the start-up-aware planning rate (:mod:`engine.perf.load_peak`). When the tail-sized plan does
not fit the inventory, the shortage ladder lowers the percentiles as little as it must. A variant that
cannot be sized gets a reason (invalid, SLO infeasible) instead of a target; the plan
(:mod:`engine.optimize.plan`) then holds it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from engine.allocation import Allocation, AllocationProblem, ModelDemand, VariantOption, solve
from engine.optimize.config import ConfigError
from engine.optimize.spec import (
    ANNOTATION_BURST_SIZING,
    CycleInputs,
    ModelLoad,
    SpecError,
    VariantSpec,
    free_accelerators,
)
from engine.perf.load_peak import planning_rate
from engine.perf.prompt_split import (
    ANNOTATION_PROMPT_SPLIT,
    long_prompt_floor,
    prompt_limit_tokens,
    prompt_split_enabled,
)
from engine.perf.queueing import SLO, Workload
from engine.perf.tail_sizing import (
    PromptDistribution,
    capped_percentile,
    describe_cap,
    reaches_model_share,
    refine_cap,
    shortage_caps,
    tail_max_rate,
    ttft_ceiling,
)
from engine.status import REASON_INVALID

# OptimizationReady=False reason of a VariantAutoscaling whose SLO no replica can meet.
REASON_INFEASIBLE = "SLOInfeasible"


@dataclass
class ModelBasedTargets:
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
    caps: dict[tuple[str, str], float] = field(default_factory=dict)
    """Per (namespace, modelID): the percentile the shortage ladder sized it for, below its configured one (0: the
    mean request)."""
    held: dict[tuple[str, str], str] = field(default_factory=dict)
    """Per variant key: why it is held at its minimum replicas (it cannot be sized for the model's share)."""

    def note_for(self, spec: VariantSpec) -> str:
        """What the sizing says of this variant beyond its target: its model's shortage note, then its own."""
        return self.notes.get(spec.model_key, "") + self.held.get(spec.key, "")


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


@dataclass(frozen=True)
class _Candidate:
    """A variant that passed the checks of the cycle: its model's load, its SLO and service-class priority."""

    spec: VariantSpec
    load: ModelLoad
    slo: SLO
    priority: int
    prompt_split: bool


def _candidates(specs: list[VariantSpec], inputs: CycleInputs, result: ModelBasedTargets) -> list[_Candidate]:
    """The variants with a profile, an SLO, a priced accelerator and their model's load; the invalid ones are
    recorded in ``result.errors`` (the others proceed)."""
    found: list[_Candidate] = []
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
            try:
                split = prompt_split_enabled(spec.annotations)
            except ValueError as exc:
                raise SpecError(f"metadata.annotations[{ANNOTATION_PROMPT_SPLIT}]", str(exc)) from None
        except SpecError as exc:
            result.errors[spec.key] = (REASON_INVALID, str(exc))
            continue
        found.append(_Candidate(spec, load, slo, priority, split))
    return found


def _model_based_candidates(
    specs: list[VariantSpec],
    inputs: CycleInputs,
    result: ModelBasedTargets,
    caps: Mapping[tuple[str, str], float] | None = None,
) -> tuple[list[ModelDemand], list[VariantOption]]:
    """Build the allocation problem from every variant that has a profile, an SLO and a cost.

    Per-replica capacities are left to :func:`engine.allocation.solve`, which sizes every variant in
    one vectorized batch and reports the ones whose SLO is infeasible.
    """
    demands: dict[tuple[str, str], ModelDemand] = {}
    options: list[VariantOption] = []
    split: dict[str, list[tuple[int, VariantSpec]]] = defaultdict(list)  # model -> its options' indices and specs
    pools = model_pools(specs, inputs)
    candidates = _candidates(specs, inputs, result)
    ceilings = model_ceilings(candidates)
    burst_sized = {spec.model_key for spec in specs if spec.burst_sizing}
    for candidate in candidates:
        spec, load = candidate.spec, candidate.load
        try:
            option = _sized_option(
                candidate, inputs, (caps or {}).get(spec.model_key), pools[spec.model_key], ceilings, result
            )
        except (ValueError, ArithmeticError) as exc:  # a profile whose latencies overflow: this variant, not the cycle
            result.errors[spec.key] = (REASON_INVALID, f"spec.variantProfile: no finite sizing: {exc}")
            continue
        demand = demands.get(spec.model_key)
        if demand is None or candidate.priority < demand.priority:
            burst_rps = load.burst_rps if spec.model_key in burst_sized else None
            _note_burst(result, spec.model_key, load, burst_rps)
            demands[spec.model_key] = ModelDemand(
                name=_qualified(spec.model_key),
                load_rps=planning_rate(load.arrival_rate_rps, load.recent_peak_rps, burst_rps) * load.sizing_factor,
                workload=load.workload,
                slo=candidate.slo,
                priority=candidate.priority,
            )
        if candidate.prompt_split:
            split[_qualified(spec.model_key)].append((len(options), spec))
        options.append(option)
    for model, members in split.items():
        _long_prompt_floor(options, demands, inputs, model, members)
    return list(demands.values()), options


def _note_burst(result: ModelBasedTargets, model: tuple[str, str], load: ModelLoad, burst_rps: float | None) -> None:
    """Say in the model's note when its burst rate, not its per-minute peak, set the rate it is sized for (the
    replicas it adds are then the burst's, and an operator reading the condition should see why)."""
    without = planning_rate(load.arrival_rate_rps, load.recent_peak_rps)
    if burst_rps is None or not burst_rps > without:
        return
    result.notes[model] = (
        f"; sized for {burst_rps:.2f} req/s, the burst rate its sub-minute peaks imply ({ANNOTATION_BURST_SIZING}; "
        f"{without:.2f} req/s by the per-minute rate)"
    )


def _sized_option(
    candidate: _Candidate,
    inputs: CycleInputs,
    cap: float | None,
    pool: int,
    ceilings: Mapping[tuple[str, str], float],
    result: ModelBasedTargets,
) -> VariantOption:
    """The variant's option, its per-replica rate sized for its TTFT percentile of the model's ceiling.

    A variant that cannot be sized for that share (:func:`engine.perf.tail_sizing.reaches_model_share`) keeps its
    minimum replicas, sized against its own ceiling, and says so in ``result.held``.  A variant under the prompt
    split is sized against its own ceiling: the gateway sends the prompts it cannot serve in time elsewhere, and
    :func:`_long_prompt_floor` provisions the variant that takes them.
    """
    spec, load, slo = candidate.spec, candidate.load, candidate.slo
    current = inputs.current_replicas.get(spec.target_key, 0)
    percentile = capped_percentile(spec.ttft_percentile, cap)
    if percentile is None or load.prompt_tokens is None or spec.profile is None:
        return variant_option(spec, current)  # WVA's sizing of the mean request
    prompts = _prompts(load, load.workload)
    best = None if candidate.prompt_split else ceilings.get(spec.model_key)
    own = ttft_ceiling(spec.profile, prompts, slo.ttft_ms) if slo.ttft_ms else None
    if best is None or own is None or reaches_model_share(own, best, percentile):
        rate = tail_max_rate(spec.profile, load.workload, slo, prompts, percentile, pool, best)
        return variant_option(spec, current, rate)
    result.held[spec.key] = (
        f"; held at its min-replicas ({spec.min_replicas}): it prefills {own:.1%} of {spec.model_id}'s prompts "
        f"within {slo.ttft_ms:g} ms, short of p{percentile:g} of the {best:.1%} the model's fastest-prefilling "
        "variant serves"
    )
    rate = tail_max_rate(spec.profile, load.workload, slo, prompts, percentile, pool)
    return dataclasses.replace(variant_option(spec, current, rate), max_replicas=spec.min_replicas)


def _long_prompt_floor(
    options: list[VariantOption],
    demands: Mapping[tuple[str, str], ModelDemand],
    inputs: CycleInputs,
    model: str,
    members: list[tuple[int, VariantSpec]],
) -> None:
    """Heterogeneous, prompt-aware sizing (:mod:`engine.perf.prompt_split`): when the model's tail-sized variants
    differ in the longest prompt they serve in time, a floor on the cheapest (per request) of the variants with
    the longer limit for the prompts beyond the shorter one.  Updates ``options`` in place."""
    spec = members[0][1]
    load = inputs.loads.get(spec.model_key)
    demand = demands.get(spec.model_key)
    sized = [(i, options[i]) for i, _ in members if options[i].max_rate is not None]
    if load is None or load.prompt_tokens is None or demand is None or not demand.slo.ttft_ms or len(sized) < 2:
        return
    limits = {i: prompt_limit_tokens(option.profile, demand.slo.ttft_ms) for i, option in sized}
    shorter = min(limits.values())
    able = [(i, option) for i, option in sized if limits[i] > shorter]
    if not able:
        return

    def cost_per_request(entry: tuple[int, VariantOption]) -> float:
        option = entry[1]
        unit = inputs.accelerator_costs[option.accelerator].cost * option.accelerators_per_replica
        return unit / (option.max_rate or 1.0)

    i, carrier = min(able, key=cost_per_request)
    prompts = _prompts(load, demand.workload)
    floor = long_prompt_floor(demand.load_rps, prompts, shorter, carrier.max_rate or 0.0)
    if carrier.max_replicas is not None:
        floor = min(floor, carrier.max_replicas)  # the variant's own bound holds
    if floor > carrier.min_replicas:
        options[i] = dataclasses.replace(carrier, min_replicas=floor)


def _prompts(load: ModelLoad, workload: Workload) -> PromptDistribution:
    """The model's prompt histogram, its shape inside the buckets fitted to the observed mean prompt unless it
    carries its own (``workload.in_tokens``, from ``vllm:request_prompt_tokens_sum / _count``)."""
    assert load.prompt_tokens is not None
    if load.prompt_tokens.mean is not None:
        return load.prompt_tokens
    return load.prompt_tokens.with_mean(workload.in_tokens)


def model_ceilings(candidates: Iterable[_Candidate]) -> dict[tuple[str, str], float]:
    """Per (namespace, modelID): the highest TTFT ceiling among its valid variants
    (:func:`engine.perf.tail_sizing.ttft_ceiling`: the share of its prompts a variant prefills within the target
    alone), where the prompts and a TTFT target are known."""
    found: dict[tuple[str, str], float] = {}
    for candidate in candidates:
        spec, load, slo = candidate.spec, candidate.load, candidate.slo
        if spec.profile is None or load.prompt_tokens is None or not slo.ttft_ms:
            continue
        try:
            ceiling = ttft_ceiling(spec.profile, _prompts(load, load.workload), slo.ttft_ms)
        except (ValueError, ArithmeticError):
            continue  # its sizing fails too, and is reported with the variant
        found[spec.model_key] = max(ceiling, found.get(spec.model_key, 0.0))
    return found


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


def variant_option(spec: VariantSpec, current_replicas: int, max_rate: float | None = None) -> VariantOption:
    """The solver's option for a variant with a profile and an accelerator: named ``namespace/name``, serving the
    model ``namespace/modelID``, within the variant's replica bounds. The optimize cycle and the simulator's
    policies state the allocation problem through this one mapping, so they solve the same problem.

    ``max_rate`` (req/s per replica) overrides the rate the solver would derive from the profile and the SLO."""
    assert spec.profile is not None and spec.accelerator is not None, "a model-based variant has both"
    return VariantOption(
        name=_qualified(spec.key),
        model=_qualified(spec.model_key),
        accelerator=spec.accelerator,
        accelerators_per_replica=spec.accelerator_count,
        profile=spec.profile,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        current_replicas=current_replicas,
        max_rate=max_rate,
    )


def _qualified(key: tuple[str, str]) -> str:
    """``namespace/name``: the solver's unique name for a model or a variant key."""
    return f"{key[0]}/{key[1]}"


def model_based_targets(specs: list[VariantSpec], inputs: CycleInputs) -> ModelBasedTargets:
    """Solve one allocation over every model-based variant of the cycle (shared inventory)."""
    result = ModelBasedTargets()
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
        allocation, caps, held = _shortage_allocation(specs, inputs, problem, allocation)
        result.caps = caps
        for model_key, cap in caps.items():
            result.notes[model_key] = result.notes.get(model_key, "") + (
                f"; sized for {describe_cap(cap)}: the accelerator inventory and the variants' max-replicas "
                "cannot hold the configured TTFT percentile"
            )
        if caps:  # which variants are held depends on the percentile they were sized for
            result.held = held
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
) -> tuple[Allocation, dict[tuple[str, str], float], dict[tuple[str, str], str]]:
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
    Returns the allocation, the caps (percent; 0 = the mean request) of the models that got one, and the variants
    held at their minimum under the caps it chose (``ModelBasedTargets.held``).
    """
    percentiles = [spec.ttft_percentile for spec in specs]
    uniform = shortage_caps(allocation.total_unserved_rps, percentiles)
    if not uniform:
        return allocation, {}, {}
    models = _models_by_priority(specs, inputs)
    plans: dict[tuple[tuple[tuple[str, str], float], ...], tuple[Allocation, ModelBasedTargets]] = {}

    def sized(caps: Mapping[tuple[str, str], float]) -> tuple[Allocation, ModelBasedTargets]:
        """The plan at these caps, and what sizing said of the variants (which are held)."""
        key = tuple(sorted(caps.items()))
        if key not in plans:
            targets = ModelBasedTargets()
            demands, options = _model_based_candidates(specs, inputs, targets, caps)
            plans[key] = solve(dataclasses.replace(problem, models=demands, variants=options)), targets
        return plans[key]

    def solved(caps: Mapping[tuple[str, str], float]) -> Allocation:
        return sized(caps)[0]

    def fits(caps: Mapping[tuple[str, str], float]) -> bool:
        return solved(caps).total_unserved_rps <= 1e-9

    def fits_raised(model: tuple[str, str]) -> Callable[[float], bool]:
        """Whether the plan fits with ``model`` at a cap and the others at theirs (``caps`` as it stands)."""
        return lambda cap: fits({**caps, model: cap})

    too_high = max(p for p in percentiles if p is not None)
    common: float | None = None
    for cap in uniform:
        if fits({m: cap for m in models}):
            common = refine_cap(cap, too_high, lambda c: fits({m: c for m in models}))
            break
        too_high = cap
    if common is None:  # even the mean leaves load unserved: the inventory is short whatever the sizing
        caps = {m: uniform[-1] for m in models}
        final, targets = sized(caps)
        return final, caps, targets.held
    caps = {m: common for m in models}
    # Each model's configured percentile (its highest across variants; 0 = the mean request).
    configured = {m: max((s.ttft_percentile or 0.0) for s in specs if s.model_key == m) for m in models}
    # Raising a model's percentile costs a few MILP solves: only models with an accelerator that has room are worth them.
    plan = solved(caps)
    spare = free_accelerators(specs, inputs.inventory, lambda spec: plan.replicas.get(_qualified(spec.key), 0))
    for model in models:
        if configured[model] <= caps[model]:
            continue
        if not any(spare(s) for s in specs if s.model_key == model):
            continue  # every accelerator it can run on is taken: raising it would only be refused
        if fits({**caps, model: configured[model]}):
            caps[model] = configured[model]
        elif common >= 50.0:
            caps[model] = refine_cap(common, configured[model], fits_raised(model))
    final, targets = sized(caps)
    return final, {m: c for m, c in caps.items() if c < configured[m]}, targets.held


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
