"""The allocation problem, its inputs and result, and the per-replica sizing of every variant.

Everything the solver stages share lives here: the input dataclasses (:class:`ModelDemand`,
:class:`VariantOption`, :class:`AllocationProblem`), the result (:class:`Allocation`), the batched
per-replica rate of every usable variant (:func:`variant_rates`, WVA's queueing model through
:func:`engine.perf.sizing.size_arrays`), and :class:`Prepared`, the validated, name-sorted view every stage
works on (sorting by name is what makes the result independent of the input order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.perf.queueing import SLO, PerfProfile, Workload
from engine.perf.sizing import size_arrays

Status = Literal["optimal", "feasible", "infeasible"]

UNSERVED_TOL = 1e-9
"""Relative slack under which a model's load counts as fully served (float noise)."""


@dataclass(frozen=True)
class ModelDemand:
    """A model's demand: load in req/s, average request shape, SLO and priority (1 = highest)."""

    name: str
    load_rps: float
    workload: Workload
    slo: SLO
    priority: int = 1

    def __post_init__(self) -> None:
        if not math.isfinite(self.load_rps) or self.load_rps < 0:
            raise ValueError(f"model {self.name}: load_rps must be >= 0, got {self.load_rps!r}")
        if self.priority < 1:
            raise ValueError(f"model {self.name}: priority must be >= 1, got {self.priority!r}")


@dataclass(frozen=True)
class VariantOption:
    """One way to serve a model: its accelerator, accelerators per replica, profile and bounds.

    ``max_rate`` (req/s per replica) overrides the rate computed from the profile and the model's
    SLO (e.g. a measured capacity).
    """

    name: str
    model: str
    accelerator: str
    accelerators_per_replica: int
    profile: PerfProfile
    min_replicas: int = 0
    max_replicas: int | None = None
    current_replicas: int = 0
    max_rate: float | None = None

    def __post_init__(self) -> None:
        if self.accelerators_per_replica < 1:
            raise ValueError(f"variant {self.name}: accelerators_per_replica must be >= 1")
        if self.min_replicas < 0 or self.current_replicas < 0:
            raise ValueError(f"variant {self.name}: replica counts must be >= 0")
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError(f"variant {self.name}: max_replicas < min_replicas")
        if self.max_rate is not None and not (self.max_rate > 0 and math.isfinite(self.max_rate)):
            raise ValueError(f"variant {self.name}: max_rate must be a positive number")


@dataclass(frozen=True)
class AllocationProblem:
    """Everything :func:`engine.allocation.solve` needs.

    ``unit_costs``: cost of one accelerator per type; ``inventory``: accelerators available per type
    (types not listed, or ``None``, are unlimited); ``transition_penalty``: fraction of a replica's
    cost charged per replica added or removed relative to ``current_replicas``; ``time_limit_s`` and
    ``mip_gap`` (relative, see :class:`Allocation` for what it is relative to) bound the solver;
    ``solver``: ``"highs"``, ``"cbc"`` or ``None`` (HiGHS if available, else CBC, else the greedy
    baseline).
    """

    models: list[ModelDemand]
    variants: list[VariantOption]
    unit_costs: dict[str, float]
    inventory: dict[str, int] | None = None
    transition_penalty: float = 0.01
    time_limit_s: float = 10.0
    mip_gap: float = 1e-4
    solver: str | None = None


@dataclass
class Allocation:
    """Result: replicas per variant, served / unserved load per model (req/s), accelerator cost.

    ``status``: ``"optimal"`` (every stage proven within ``mip_gap``), ``"feasible"`` (a stage was
    cut short by the time limit or its bound was not close enough) or ``"infeasible"``
    (``min_replicas`` exceed the inventory; the allocation is a best effort that respects the
    inventory).  ``gap``: the largest proven relative gap over the stages, ``None`` when a stage has
    no proven bound.  An unserved-load stage's gap is relative to its priority level's demand (the
    req/s a better allocation might still serve, as a share of what the level asks for); the cost
    stage's is relative to its objective (cost plus transition penalty).  ``stage_gaps`` lists them
    in order (``"priority 3"``, ``"cost"``, ...).
    """

    replicas: dict[str, int]
    served_rps: dict[str, float]
    unserved_rps: dict[str, float]
    cost: float
    status: Status
    gap: float | None
    solver: str
    infeasible_variants: dict[str, str] = field(default_factory=dict)
    max_rates: dict[str, float] = field(default_factory=dict)
    stage_gaps: dict[str, float | None] = field(default_factory=dict)

    @property
    def total_unserved_rps(self) -> float:
        """Sum of unserved load over all models."""
        return float(sum(self.unserved_rps.values()))


@dataclass
class Prepared:
    """The problem as every stage sees it: validated, sorted by name, with rates and costs.

    ``rate``: req/s per replica of the usable variants only; ``cost``: per replica, every variant
    (0 when its accelerator has no unit cost); ``infeasible``: why the other variants are excluded;
    ``usable``: model -> its usable variants; ``limited``: accelerator types with an inventory.
    """

    models: list[ModelDemand]
    variants: list[VariantOption]
    rate: dict[str, float]
    cost: dict[str, float]
    infeasible: dict[str, str]
    usable: dict[str, list[VariantOption]]
    limited: set[str]
    inventory: dict[str, int]
    by_name: dict[str, VariantOption] = field(default_factory=dict)


def variant_rates(problem: AllocationProblem) -> tuple[dict[str, float], dict[str, str]]:
    """Per-replica sustainable rate (req/s) of every usable variant, and why the others are excluded.

    Rates come from :func:`engine.perf.sizing.size_arrays` in one batched call (or ``max_rate`` overrides).
    """
    models = {m.name: m for m in problem.models}
    rates: dict[str, float] = {}
    reasons: dict[str, str] = {}
    todo: list[VariantOption] = []
    for v in sorted(problem.variants, key=lambda v: v.name):
        if v.model not in models:
            reasons[v.name] = f"unknown model {v.model!r}"
        elif v.accelerator not in problem.unit_costs:
            reasons[v.name] = f"no unit cost for accelerator {v.accelerator!r}"
        elif v.max_rate is not None:
            rates[v.name] = float(v.max_rate)
        elif _degenerate(v.profile, models[v.model].workload):
            reasons[v.name] = "degenerate profile: a request would take no time (all parameters zero)"
        else:
            todo.append(v)
    if todo:
        ms = [models[v.model] for v in todo]
        res = size_arrays(
            alpha=[v.profile.alpha for v in todo],
            beta=[v.profile.beta for v in todo],
            gamma=[v.profile.gamma for v in todo],
            delta=[v.profile.delta for v in todo],
            max_batch=[v.profile.max_batch for v in todo],
            in_tokens=[m.workload.in_tokens for m in ms],
            out_tokens=[m.workload.out_tokens for m in ms],
            ttft_ms=[m.slo.ttft_ms for m in ms],
            itl_ms=[m.slo.itl_ms for m in ms],
            tps=[m.slo.tps for m in ms],
        )
        for i, (v, m) in enumerate(zip(todo, ms)):
            rate = float(res.rate_rps[i])
            if res.feasible[i] and not (rate > 0 and math.isfinite(rate)):
                reasons[v.name] = f"the profile gives no finite positive rate (got {rate!r}): its latencies overflow"
            elif res.feasible[i]:
                rates[v.name] = rate
            else:
                which = "TTFT" if res.violated[i] == 1 else "ITL"
                target = m.slo.ttft_ms if which == "TTFT" else m.slo.itl_ms
                reasons[v.name] = (
                    f"{which} SLO of {target:g} ms is unattainable: best achievable {which} is "
                    f"{res.best_ms[i]:.6g} ms (near-idle replica)"
                )
    return rates, reasons


def _degenerate(profile: PerfProfile, workload: Workload) -> bool:
    """True when the profile gives zero service time for this workload (no finite max rate)."""
    decodes = 1.0 if (workload.in_tokens == 0 and workload.out_tokens == 1) else workload.out_tokens - 1
    prefill = 0.0 if workload.in_tokens == 0 else profile.gamma + profile.delta * workload.in_tokens
    return prefill + decodes * (profile.alpha + profile.beta) <= 0


def prepare(problem: AllocationProblem) -> Prepared:
    """Validate names, size every variant and sort models and variants by name."""
    names = [m.name for m in problem.models]
    if len(set(names)) != len(names):
        raise ValueError("duplicate model names")
    vnames = [v.name for v in problem.variants]
    if len(set(vnames)) != len(vnames):
        raise ValueError("duplicate variant names")
    rates, reasons = variant_rates(problem)
    models = sorted(problem.models, key=lambda m: m.name)
    variants = sorted(problem.variants, key=lambda v: v.name)
    cost = {v.name: float(problem.unit_costs.get(v.accelerator, 0.0)) * v.accelerators_per_replica for v in variants}
    usable: dict[str, list[VariantOption]] = {m.name: [] for m in models}
    for v in variants:
        if v.name in rates:
            usable[v.model].append(v)
    inventory = dict(problem.inventory or {})
    return Prepared(
        models, variants, rates, cost, reasons, usable, set(inventory), inventory, {v.name: v for v in variants}
    )


def served_capacity(prep: Prepared, model: ModelDemand, replicas: dict[str, int]) -> float:
    """req/s the model's usable variants serve with these replica counts."""
    return sum(replicas[v.name] * prep.rate[v.name] for v in prep.usable[model.name])


def unserved_load(load: float, capacity: float) -> float:
    """Load left unserved by ``capacity`` req/s, with float noise below the tolerance counted as served."""
    left = load - capacity
    return 0.0 if left <= UNSERVED_TOL * max(load, 1.0) else left


def finish(
    prep: Prepared,
    replicas: dict[str, int],
    status: Status,
    gap: float | None,
    solver: str,
    stage_gaps: dict[str, float | None] | None = None,
) -> Allocation:
    """Served/unserved load and cost of an integer allocation."""
    served: dict[str, float] = {}
    unserved: dict[str, float] = {}
    for m in prep.models:
        unserved[m.name] = unserved_load(m.load_rps, served_capacity(prep, m, replicas))
        served[m.name] = m.load_rps - unserved[m.name]
    cost = float(sum(prep.cost[v.name] * replicas[v.name] for v in prep.variants))
    return Allocation(
        replicas={v.name: int(replicas[v.name]) for v in prep.variants},
        served_rps=served,
        unserved_rps=unserved,
        cost=cost,
        status=status,
        gap=gap,
        solver=solver,
        infeasible_variants=dict(prep.infeasible),
        max_rates=dict(prep.rate),
        stage_gaps=dict(stage_gaps or {}),
    )


def floors_fit(prep: Prepared) -> dict[str, bool]:
    """Per limited accelerator type: do the min_replicas floors fit in the inventory?"""
    used: dict[str, int] = {t: 0 for t in prep.limited}
    for v in prep.variants:
        if v.accelerator in used:
            used[v.accelerator] += v.accelerators_per_replica * v.min_replicas
    return {t: used[t] <= prep.inventory[t] for t in prep.limited}


def level_key(models: list[ModelDemand], unserved: dict[str, float]) -> tuple[float, ...]:
    """Unserved load per priority level, highest priority first (compare lexicographically)."""
    levels = sorted({m.priority for m in models})
    return tuple(sum(unserved[m.name] for m in models if m.priority == p) for p in levels)


def deterministic_highs(**options: float | int | bool) -> Any:
    """A silent HiGHS solver that answers the same on every run (one thread, a fixed random seed), with
    ``options`` set as well. ``highspy`` is imported here, when a solve needs it."""
    import highspy

    h = highspy.Highs()
    for option, setting in {"output_flag": False, "threads": 1, "random_seed": 0, **options}.items():
        h.setOptionValue(option, setting)
    return h
