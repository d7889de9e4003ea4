"""Replica allocation across variants and accelerator types: an integer program and a greedy baseline.

Every model has a load (req/s) and can be served by one or more *variants* (the model on an
accelerator configuration, with its own performance profile).  :func:`solve` decides the number of
replicas of every variant so that

* each model's load is served (``sum_v replicas_v * max_rate_v + unserved_m >= load_m``; the load may
  be split over the model's variants),
* per accelerator type, ``sum_v accelerators_per_replica_v * replicas_v <= inventory[type]``,
* ``min_replicas <= replicas_v <= max_replicas``,

lexicographically minimising

1. unserved load in req/s, strictly by priority (1 = highest): first the priority-1 models' unserved
   load, then priority 2's with priority 1's frozen at its optimum, and so on, then
2. accelerator cost ``sum unit_cost[acc] * accelerators_per_replica * replicas`` plus a transition
   penalty ``transition_penalty * cost_per_replica_v * |replicas_v - current_replicas_v|`` that breaks
   ties toward the current allocation and stops load moving between accelerators for savings smaller
   than the penalty.

The lexicographic order is implemented by solving stages in sequence on one model (each level's
unserved load, then cost with every model's unserved load frozen) rather than with big-M weights,
which would make the solver's relative gap meaningless for the cost part.  The unserved stages are
skipped when the greedy baseline (the warm start) already serves everything, and a level already
fully served by the incumbent needs no solve.

Decisions worth knowing:

* Variants whose SLO cannot be met (:class:`engine.perf.Infeasible`), whose model is unknown or whose
  accelerator has no unit cost are *excluded* from serving and reported in ``infeasible_variants``;
  they are held at their ``min_replicas`` (a floor the operator asked for) with no serving capacity.
* An accelerator type missing from ``inventory`` (or ``inventory=None``) is unlimited.
* If the ``min_replicas`` floors alone exceed an accelerator's inventory the problem is infeasible: the
  status is ``"infeasible"`` but a best-effort allocation that respects the inventory is still
  returned (floors are relaxed, each missing floor replica penalised above any unserved load).
* Models none of whose variants touch a limited accelerator are independent; when such a model has a
  single usable variant it is sized in closed form, ``max(ceil(load/max_rate), min_replicas)`` (capped
  by ``max_replicas``), exactly like WVA's per-variant sizing.
* With inventory limits every stage is first attacked by a Lagrangian decomposition over the inventory
  rows (the only coupling between models): priced with the LP relaxation's duals, each model's small
  integer problem is solved exactly, giving a lower bound much tighter than the LP's, and raising the
  prices of over-used types (then moving the cheapest models off them and re-optimising each model in
  what the others leave) gives an incumbent.  A stage within ``mip_gap`` of that bound is proven
  without branch and bound; otherwise HiGHS continues from the incumbent and the smaller gap is kept.
  The decomposition's work is charged to the time limit at a fixed rate per search node.
* Status ``"optimal"`` only when the solver proved optimality (within ``mip_gap``); a solution cut
  short by the time limit is ``"feasible"``, with the gap reported when the solver exposes it.
  (PuLP's ``LpStatus`` says "Optimal" for time-limited runs; the solution status is what is read.)
* Deterministic: models and variants are processed in name order.

Pure: no I/O, no clock (the solver's own time limit aside).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from engine.perf import SLO, PerfProfile, Workload, replicas_needed, size_arrays

__all__ = [
    "ModelDemand",
    "VariantOption",
    "AllocationProblem",
    "Allocation",
    "solve",
    "greedy",
    "variant_rates",
    "status_from_solution",
]

Status = Literal["optimal", "feasible", "infeasible"]

_UNSERVED_TOL = 1e-9
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
    """Everything :func:`solve` needs.

    ``unit_costs``: cost of one accelerator per type; ``inventory``: accelerators available per type
    (types not listed, or ``None``, are unlimited); ``transition_penalty``: fraction of a replica's
    cost charged per replica added or removed relative to ``current_replicas``; ``time_limit_s`` and
    ``mip_gap`` (relative) bound the solver; ``solver``: ``"highs"``, ``"cbc"`` or ``None`` (HiGHS if
    available, else CBC, else the greedy baseline).
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

    ``status``: ``"optimal"`` (proven, within ``mip_gap``), ``"feasible"`` (e.g. time limit hit) or
    ``"infeasible"`` (``min_replicas`` exceed the inventory; the allocation is a best effort that
    respects the inventory).  ``gap``: relative optimality gap of the cost stage when known.
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

    @property
    def total_unserved_rps(self) -> float:
        """Sum of unserved load over all models."""
        return float(sum(self.unserved_rps.values()))


# --------------------------------------------------------------------------------------------------
# preparation shared by the solver and the greedy baseline


@dataclass
class _Prepared:
    models: list[ModelDemand]  # sorted by name
    variants: list[VariantOption]  # sorted by name
    rate: dict[str, float]  # usable variants only
    cost: dict[str, float]  # per replica, every variant (0 when no unit cost)
    infeasible: dict[str, str]
    usable: dict[str, list[VariantOption]]  # model -> usable variants (sorted by name)
    limited: set[str]  # accelerator types with an inventory limit
    inventory: dict[str, int]


def variant_rates(problem: AllocationProblem) -> tuple[dict[str, float], dict[str, str]]:
    """Per-replica sustainable rate (req/s) of every usable variant, and why the others are excluded.

    Rates come from :func:`engine.perf.size_arrays` in one batched call (or ``max_rate`` overrides).
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
            if res.feasible[i]:
                rates[v.name] = float(res.rate_rps[i])
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


def _prepare(problem: AllocationProblem) -> _Prepared:
    names = [m.name for m in problem.models]
    if len(set(names)) != len(names):
        raise ValueError("duplicate model names")
    vnames = [v.name for v in problem.variants]
    if len(set(vnames)) != len(vnames):
        raise ValueError("duplicate variant names")
    rates, reasons = variant_rates(problem)
    models = sorted(problem.models, key=lambda m: m.name)
    variants = sorted(problem.variants, key=lambda v: v.name)
    cost = {
        v.name: float(problem.unit_costs.get(v.accelerator, 0.0)) * v.accelerators_per_replica for v in variants
    }
    usable: dict[str, list[VariantOption]] = {m.name: [] for m in models}
    for v in variants:
        if v.name in rates:
            usable[v.model].append(v)
    inventory = dict(problem.inventory or {})
    return _Prepared(models, variants, rates, cost, reasons, usable, set(inventory), inventory)


def _finish(
    prep: _Prepared, replicas: dict[str, int], status: Status, gap: float | None, solver: str
) -> Allocation:
    """Served/unserved load and cost of an integer allocation."""
    served: dict[str, float] = {}
    unserved: dict[str, float] = {}
    for m in prep.models:
        cap = sum(replicas[v.name] * prep.rate[v.name] for v in prep.usable[m.name])
        left = m.load_rps - cap
        if left <= _UNSERVED_TOL * max(m.load_rps, 1.0):
            left = 0.0
        unserved[m.name] = left
        served[m.name] = m.load_rps - left
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
    )


def _floors_fit(prep: _Prepared) -> dict[str, bool]:
    """Per limited accelerator type: do the min_replicas floors fit in the inventory?"""
    used: dict[str, int] = {t: 0 for t in prep.limited}
    for v in prep.variants:
        if v.accelerator in used:
            used[v.accelerator] += v.accelerators_per_replica * v.min_replicas
    return {t: used[t] <= prep.inventory[t] for t in prep.limited}


# --------------------------------------------------------------------------------------------------
# greedy baseline (WVA-style)


def greedy(problem: AllocationProblem) -> Allocation:
    """WVA-style greedy allocation, used as a baseline and as a fallback without a MILP solver.

    Floors first (``min_replicas``, in model priority order, as far as the inventory allows), then
    models in priority order (1 first, ties by name): each takes the variant that serves its
    remaining load at the lowest cost with the inventory left, then the next cheapest for whatever
    remains.  Status is ``"feasible"`` (``"infeasible"`` if the floors do not fit).
    """
    prep = _prepare(problem)
    return _greedy(prep)


def _greedy(prep: _Prepared) -> Allocation:
    left = dict(prep.inventory)
    replicas = {v.name: 0 for v in prep.variants}
    order = sorted(prep.models, key=lambda m: (m.priority, m.name))
    rank = {m.name: i for i, m in enumerate(order)}
    floors_ok = True
    for v in sorted(prep.variants, key=lambda v: (rank.get(v.model, len(rank)), v.name)):
        take = v.min_replicas
        if v.accelerator in left:
            take = min(take, left[v.accelerator] // v.accelerators_per_replica)
            left[v.accelerator] -= take * v.accelerators_per_replica
        floors_ok &= take == v.min_replicas
        replicas[v.name] = take
    for m in order:
        remaining = m.load_rps - sum(replicas[v.name] * prep.rate[v.name] for v in prep.usable[m.name])
        tried: set[str] = set()
        while remaining > _UNSERVED_TOL * max(m.load_rps, 1.0):
            best = None
            for v in prep.usable[m.name]:
                if v.name in tried:
                    continue
                need = replicas_needed(remaining, prep.rate[v.name], 0)
                room = need
                if v.max_replicas is not None:
                    room = min(room, v.max_replicas - replicas[v.name])
                if v.accelerator in left:
                    room = min(room, left[v.accelerator] // v.accelerators_per_replica)
                if room <= 0:
                    continue
                key = (prep.cost[v.name] * need, v.name)
                if best is None or key < best[0]:
                    best = (key, v, room)
            if best is None:
                break
            _, v, room = best
            tried.add(v.name)
            replicas[v.name] += room
            if v.accelerator in left:
                left[v.accelerator] -= room * v.accelerators_per_replica
            remaining -= room * prep.rate[v.name]
    return _finish(prep, replicas, "feasible" if floors_ok else "infeasible", None, "greedy")


# --------------------------------------------------------------------------------------------------
# MILP


def status_from_solution(sol_status: int) -> Status | None:
    """Map PuLP's *solution* status (``prob.sol_status``) to an allocation status.

    Only ``LpSolutionOptimal`` is optimal; ``LpSolutionIntegerFeasible`` (what a time- or
    gap-limited run returns, even when ``LpStatus`` says "Optimal") is merely feasible; anything
    else means no usable solution (``None``).
    """
    import pulp

    if sol_status == pulp.LpSolutionOptimal:
        return "optimal"
    if sol_status == pulp.LpSolutionIntegerFeasible:
        return "feasible"
    return None


def _pick_solver(name: str | None) -> str | None:
    import pulp

    available = set(pulp.listSolvers(onlyAvailable=True))
    if name is not None:
        key = {"highs": "HiGHS", "cbc": "PULP_CBC_CMD"}.get(name.lower(), name)
        return key if key in available else None
    for key in ("HiGHS", "PULP_CBC_CMD"):
        if key in available:
            return key
    return None


def solve(problem: AllocationProblem) -> Allocation:
    """Optimal (or best found within the time limit) replica allocation; see the module docstring."""
    prep = _prepare(problem)
    solver_key = _pick_solver(problem.solver)
    if solver_key is None:
        if problem.solver is not None:
            raise ValueError(f"solver {problem.solver!r} is not available")
        return _greedy(prep)

    replicas: dict[str, int] = {}
    floors = _floors_fit(prep)
    min_infeasible = not all(floors.values())

    # Models that touch no limited accelerator are independent: a single usable variant is sized in
    # closed form (exactly WVA's per-variant sizing), several by an exact per-model branch and bound.
    coupled_models: list[ModelDemand] = []
    exact = True
    for m in prep.models:
        vs = prep.usable[m.name]
        if any(v.accelerator in prep.limited for v in vs):
            coupled_models.append(m)
        elif len(vs) == 1:
            v = vs[0]
            n = replicas_needed(m.load_rps, prep.rate[v.name], v.min_replicas)
            if v.max_replicas is not None:
                n = min(n, v.max_replicas)
            replicas[v.name] = n
        elif vs:
            counts, proven = _size_model(m.load_rps, vs, prep, problem.transition_penalty)
            replicas.update(counts)
            exact &= proven
    # Excluded variants sit at their floor (decided by the MILP when their accelerator is limited).
    for v in prep.variants:
        if v.name not in prep.rate and v.accelerator not in prep.limited:
            replicas[v.name] = v.min_replicas
    if not coupled_models and not any(
        v.name not in prep.rate and v.accelerator in prep.limited for v in prep.variants
    ):
        return _finish(prep, replicas, "optimal" if exact else "feasible", 0.0 if exact else None,
                       "closed-form")

    base = _greedy(prep)
    milp = _Milp(problem, prep, coupled_models, floors)
    need_stage1 = not (base.total_unserved_rps == 0 and base.status == "feasible")
    if not need_stage1:
        milp.forbid_unserved()
    start = milp.start_from(base.replicas)
    run = _solve_highs if solver_key == "HiGHS" else _solve_cbc
    outcome = run(milp, problem, need_stage1, start)
    if outcome is None:
        base.solver = f"greedy (no solution from {_SOLVER_NAMES[solver_key]})"
        return base
    values, status, gap = outcome
    if not exact:
        status = "feasible"
    for name, var in milp.x.items():
        replicas[name] = int(round(values[var.name]))
    if _top_up(prep, replicas, coupled_models):
        # The solver left load unserved that fits (time limit or tolerance); serving it changes
        # the cost the last stage optimised, so its gap no longer applies.
        status, gap = "feasible", None
    if min_infeasible:
        status = "infeasible"
    return _finish(prep, replicas, status, gap, _SOLVER_NAMES[solver_key])


_BB_NODE_LIMIT = 200_000
"""Node budget of the per-model branch and bound (never reached in practice; then best found)."""


def _size_model(
    load: float, variants: list[VariantOption], prep: _Prepared, tau: float
) -> tuple[dict[str, int], bool]:
    """Cheapest replicas of one model's variants covering ``load`` (no shared inventory).

    Cost of variant v with n replicas: ``c_v*n + tau*c_v*|n - current_v|``, ``min <= n <= max``.
    Depth-first branch and bound over variants in cost-per-rps order, most replicas of the cheaper
    variant first, pruned by the fractional bound ``remaining * (1-tau) * c/r`` of the cheaper rest.
    Returns the counts and whether optimality was proven (node budget not exhausted).  If even every
    variant at its max cannot cover the load, all are at max (as much load served as possible).
    """
    vs = sorted(variants, key=lambda v: (prep.cost[v.name] / prep.rate[v.name], v.name))
    n = len(vs)
    rate = [prep.rate[v.name] for v in vs]
    cost = [prep.cost[v.name] for v in vs]
    lo = [v.min_replicas for v in vs]
    hi = [v.max_replicas for v in vs]
    cur = [v.current_replicas for v in vs]
    lb_ratio = [cost[i] * (1.0 - tau) / rate[i] for i in range(n)] + [math.inf]
    room = [math.inf if hi[i] is None else (hi[i] - lo[i]) * rate[i] for i in range(n)]
    suffix = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + room[i]
    tol = _UNSERVED_TOL * max(load, 1.0)
    need = load - sum(lo[i] * rate[i] for i in range(n))

    def f(i: int, k: int) -> float:
        count = lo[i] + k
        return cost[i] * count + tau * cost[i] * abs(count - cur[i])

    if need > suffix[0] + tol:  # cannot cover: serve as much as possible
        return {v.name: (v.max_replicas if v.max_replicas is not None else v.min_replicas) for v in vs}, True
    base = [f(i, 0) for i in range(n)]
    best_cost = math.inf
    best: list[int] = [0] * n
    picks = [0] * n
    nodes = 0

    def dfs(i: int, remaining: float, spent: float) -> None:
        nonlocal best_cost, best, nodes
        nodes += 1
        if remaining <= tol:
            if spent < best_cost - 1e-12:
                best_cost = spent
                best = picks[:i] + [0] * (n - i)
            return
        if i == n or nodes > _BB_NODE_LIMIT:
            return
        if spent + remaining * lb_ratio[i] >= best_cost - 1e-12:
            return
        k_max = replicas_needed(remaining, rate[i], 0)
        if hi[i] is not None:
            k_max = min(k_max, hi[i] - lo[i])
        for k in range(k_max, -1, -1):
            left = remaining - k * rate[i]
            if left > suffix[i + 1] + tol:
                break  # the rest cannot cover what fewer replicas here would leave
            # f(i, k) - f(i, 0) >= k*c_i*(1-tau), and c_i*(1-tau) <= r_i*lb_ratio[i+1], so this bound
            # only grows as k decreases (while load is left over): once it fails, stop.
            if left > tol and spent + k * lb_ratio[i] * rate[i] + left * lb_ratio[i + 1] >= best_cost - 1e-12:
                break
            extra = f(i, k) - base[i]
            if spent + extra + max(left, 0.0) * lb_ratio[i + 1] >= best_cost - 1e-12:
                continue
            picks[i] = k
            dfs(i + 1, left, spent + extra)
        picks[i] = 0

    dfs(0, need, 0.0)
    return {v.name: lo[i] + best[i] for i, v in enumerate(vs)}, nodes <= _BB_NODE_LIMIT


_SOLVER_NAMES = {"HiGHS": "highs", "PULP_CBC_CMD": "cbc"}


class _Milp:
    """The PuLP formulation shared by both stages (objectives are set by the stage drivers)."""

    def __init__(self, problem: AllocationProblem, prep: _Prepared, coupled: list[ModelDemand],
                 floors: dict[str, bool]) -> None:
        import pulp

        self.prep = prep
        self.prob = prob = pulp.LpProblem("allocation", pulp.LpMinimize)
        self.x: dict[str, pulp.LpVariable] = {}
        self.u: dict[str, pulp.LpVariable] = {}
        self.d: dict[str, pulp.LpVariable] = {}
        self.s: dict[str, pulp.LpVariable] = {}
        self.coupled = coupled
        coupled_names = {m.name for m in coupled}
        loads = {m.name: m.load_rps for m in prep.models}
        cap_terms: dict[str, list] = {m.name: [] for m in coupled}
        inv_terms: dict[str, list] = {t: [] for t in prep.limited}
        cost_terms: list = []
        for i, v in enumerate(prep.variants):
            serving = v.name in prep.rate and v.model in coupled_names
            fixed = v.name not in prep.rate and v.accelerator in prep.limited
            if not (serving or fixed):
                continue
            relax = v.accelerator in prep.limited and not floors[v.accelerator]
            lb = 0 if relax else v.min_replicas
            if serving:
                ub = max(v.min_replicas, v.current_replicas,
                         replicas_needed(loads[v.model], prep.rate[v.name], 0))
                if v.max_replicas is not None:
                    ub = min(ub, v.max_replicas)
                ub = max(ub, lb)
            else:
                ub = v.min_replicas
            x = self.x[v.name] = pulp.LpVariable(f"x{i}", lowBound=lb, upBound=ub, cat=pulp.LpInteger)
            if serving:
                cap_terms[v.model].append((x, prep.rate[v.name]))
            if v.accelerator in prep.limited:
                inv_terms[v.accelerator].append((x, v.accelerators_per_replica))
            if relax and v.min_replicas > 0:
                s = self.s[v.name] = pulp.LpVariable(f"s{i}", lowBound=0, upBound=v.min_replicas)
                prob += x + s >= v.min_replicas, f"floor{i}"
            c = prep.cost[v.name]
            tau = problem.transition_penalty * c
            cost_terms.append((x, c + tau if v.current_replicas == 0 else c))  # |x - 0| = x
            if tau > 0:
                if v.current_replicas > 0:
                    d = self.d[v.name] = pulp.LpVariable(f"t{i}", lowBound=0)
                    prob += d >= x - v.current_replicas, f"tu{i}"
                    prob += d >= v.current_replicas - x, f"td{i}"
                    cost_terms.append((d, tau))
        for j, m in enumerate(coupled):
            u = self.u[m.name] = pulp.LpVariable(f"u{j}", lowBound=0, upBound=m.load_rps)
            prob += pulp.LpAffineExpression(cap_terms[m.name] + [(u, 1.0)]) >= m.load_rps, f"d{j}"
            if _MIR:
                for k, (cut, rhs) in enumerate(_mir_cuts(cap_terms[m.name], u, m.load_rps)):
                    prob += pulp.LpAffineExpression(cut) >= rhs, f"mir{j}_{k}"
        for k, t in enumerate(sorted(prep.limited)):
            if inv_terms[t]:
                prob += pulp.LpAffineExpression(inv_terms[t]) <= prep.inventory[t], f"inv{k}"
        self.cost = pulp.LpAffineExpression(cost_terms)

        # Stage 1 is lexicographic: first the missing min_replicas floors (only when they cannot all
        # fit), then unserved req/s of priority 1, then priority 2, ...  Each level is minimised
        # with the levels before it frozen at their optimum.
        self.levels: list[list] = []
        if self.s:
            self.levels.append(list(self.s.values()))
        for p in sorted({m.priority for m in coupled}):
            self.levels.append([self.u[m.name] for m in coupled if m.priority == p])

    def forbid_unserved(self) -> None:
        """The greedy baseline serves everything, so the stage-1 optimum is zero: fix it."""
        for u in self.u.values():
            u.upBound = 0.0

    def start_from(self, replicas: dict[str, int]) -> dict[str, float]:
        """A complete feasible assignment (by PuLP variable name) extending integer replicas."""
        prep = self.prep
        values: dict[str, float] = {}
        for name, x in self.x.items():
            values[x.name] = float(replicas[name])
        for name, s in self.s.items():
            values[s.name] = float(max(_by_name(prep, name).min_replicas - replicas[name], 0))
        for name, d in self.d.items():
            values[d.name] = float(abs(replicas[name] - _by_name(prep, name).current_replicas))
        for m in self.coupled:
            cap = sum(replicas[v.name] * prep.rate[v.name] for v in prep.usable[m.name])
            values[self.u[m.name].name] = float(min(max(m.load_rps - cap, 0.0), m.load_rps))
        return values


_MIR = True
_STAGE1_SHARE = 0.6
"""Share of the time limit the unserved-load stages may use (the rest, and what they leave, is cost's)."""


def _mir_cuts(terms: list, u, load: float) -> list[tuple[list, float]]:
    """Mixed-integer rounding cuts of a demand row ``sum_v r_v x_v + u >= L`` (x integer >= 0).

    Dividing by each variant's rate r_w and rounding gives
    ``sum_v g_v x_v + u / (r_w f0) >= ceil(L/r_w)`` with ``f0 = frac(L/r_w)`` and
    ``g_v = ceil(a_v) - max(0, f0 - frac(a_v)) / f0`` (``a_v = r_v/r_w``; ``g_v = a_v`` when integral).
    These make the LP relaxation pay for the last, partly used replica of a fully served model, which
    is what makes the plain relaxation weak (it serves every model with fractional replicas).
    """
    cuts = []
    for _, r_w in terms:
        b = load / r_w
        f0 = b - math.floor(b)
        if f0 < 1e-6 or f0 > 1 - 1e-6:
            continue
        cut = []
        for x, r_v in terms:
            a = r_v / r_w
            fa = a - math.floor(a)
            if fa < 1e-9 or fa > 1 - 1e-9:
                g = float(round(a))
            else:
                g = math.ceil(a) - max(0.0, f0 - fa) / f0
            cut.append((x, g))
        cut.append((u, 1.0 / (r_w * f0)))
        cuts.append((cut, float(math.ceil(b))))
    return cuts


def _highs_outcome(h) -> tuple[Status | None, float | None]:
    """Allocation status and relative gap of the HiGHS model's last run."""
    import highspy

    model_status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    if model_status == highspy.HighsModelStatus.kOptimal:
        status: Status | None = "optimal"
    elif has_solution and model_status in (
        highspy.HighsModelStatus.kTimeLimit,
        highspy.HighsModelStatus.kIterationLimit,
        highspy.HighsModelStatus.kInterrupt,
        highspy.HighsModelStatus.kSolutionLimit,
        highspy.HighsModelStatus.kObjectiveBound,
        highspy.HighsModelStatus.kObjectiveTarget,
    ):
        status = "feasible"
    else:
        return None, None
    gap = float(info.mip_gap)
    if not math.isfinite(gap):
        gap = 0.0 if status == "optimal" else None
    return status, (max(gap, 0.0) if gap is not None else None)


# --------------------------------------------------------------------------------------------------
# Lagrangian decomposition over the inventory rows
#
# The only coupling between models is the inventory, one row per limited accelerator type (a handful).
# Pricing those rows at lambda >= 0 splits any stage into one small integer problem per model, solved
# exactly by a depth-first search; the sum of their optima minus lambda . inventory is a lower bound
# on the stage (weak duality).  Because only a few rows are dualised, this bound is within a few
# models' rounding of the optimum, far tighter than the LP relaxation (which lets every model buy a
# fractional last replica).  Raising the prices of over-used types until the per-model answers fit
# gives a feasible allocation; when it is within ``mip_gap`` of the bound the stage is proven without
# branch and bound, otherwise it warm-starts HiGHS and the bound tightens HiGHS's reported gap.

_LAG_NODE_LIMIT = 5_000
"""Node budget of one per-model search (beyond it the Lagrangian bound is not used)."""
_LAG_REPAIR_ROUNDS = 20
"""Rounds of raising the prices of over-used types in the primal heuristic."""
_LAG_SHARE = 0.8
"""Share of the time limit after which no further stage starts the decomposition."""
_LAG_SECONDS_PER_NODE = 5e-6
"""Time charged per unit of decomposition work (search nodes, plus 10 per per-model search) against the
time limit: the engine reads no clock, so the Python work is accounted for deterministically."""


def _model_opt(load: float, ucap: float, w: float, items: list, room=None,
               work: list[int] | None = None) -> tuple[float, list[int] | None, bool]:
    """Exact optimum of one model's priced problem.

    Minimise ``w * u + sum_v g_v(x_v)`` subject to ``sum_v r_v x_v + u >= load``, ``0 <= u <= ucap`` and
    ``lo_v <= x_v <= hi_v`` integer, where ``g_v(n) = p_v * n + q_v * |n - cur_v|`` (``p_v >= q_v >= 0``,
    so ``g_v`` is convex and nondecreasing).  ``items``: ``(r, p, q, cur, lo, hi, type, a)`` tuples; with
    ``room`` (accelerators left per type index), ``sum a_v x_v <= room[type]`` too.  Returns the
    value (``inf`` if infeasible), the counts in ``items`` order, and whether the search finished
    (node budget) -- only then is the value a proven minimum.  ``work[0]`` counts the nodes visited.
    """
    n = len(items)

    def g(i: int, k: int) -> float:
        _, p, q, cur = items[i][:4]
        return p * k + q * abs(k - cur)

    base = [g(i, it[4]) for i, it in enumerate(items)]
    spent0 = sum(base)
    rem0 = load - sum(it[0] * it[4] for it in items)
    tol = _UNSERVED_TOL * max(load, 1.0)
    floors = [it[4] for it in items]
    used: dict[int, float] = {}
    if room is not None:
        for it in items:
            if it[6] >= 0:
                used[it[6]] = used.get(it[6], 0.0) + it[7] * it[4]
        if any(u > room[t] + 1e-9 for t, u in used.items()):
            return math.inf, None, True
    if rem0 <= tol:
        return spent0, floors, True
    if w <= 0.0 and rem0 <= ucap + tol:
        return spent0, floors, True
    # marginal price per req/s of each variant's cheapest replica above its floor
    slope = [(it[1] - it[2]) if it[3] > it[4] else (it[1] + it[2]) for it in items]
    order = sorted(range(n), key=lambda i: (slope[i] / items[i][0], i))
    ratio = [slope[i] / items[i][0] for i in order] + [math.inf]
    umin = w if ucap > 0 else math.inf
    best = math.inf
    best_k: list[int] | None = None
    if rem0 <= ucap + tol:
        best, best_k = spent0 + w * max(rem0, 0.0), [0] * n
    picks = [0] * n
    nodes = 0

    def dfs(j: int, rem: float, spent: float) -> None:
        nonlocal best, best_k, nodes
        nodes += 1
        if rem <= tol:
            if spent < best - 1e-12:
                best, best_k = spent, picks[:]
            return
        if rem <= ucap + tol and spent + w * rem < best - 1e-12:
            best, best_k = spent + w * rem, picks[:]
        if j == n or nodes > _LAG_NODE_LIMIT:
            return
        # the rest is covered by variants j.. (ratio >= ratio[j]) or, up to ucap, left unserved (w)
        cheap = min(ratio[j], umin)
        if spent + min(rem, ucap) * cheap + max(rem - ucap, 0.0) * ratio[j] >= best - 1e-12:
            return
        i = order[j]
        r, p, q, cur, lo, hi, t, a = items[i]
        ratio_k = rem / r
        kmax = min(hi - lo, int(math.ceil(ratio_k - 1e-9 * max(1.0, ratio_k))))  # replicas_needed(rem, r)
        if room is not None and t >= 0:
            kmax = min(kmax, int((room[t] - used[t] + 1e-9) // a))
        nxt = min(ratio[j + 1], umin)
        s = slope[i]
        monotone = s <= r * nxt  # then the linear bound below only grows as k decreases
        b0 = base[i]
        for k in range(kmax, -1, -1):
            left = rem - k * r
            if left > tol and monotone and spent + k * s + left * nxt >= best - 1e-12:
                break
            extra = p * (lo + k) + q * abs(lo + k - cur) - b0
            if spent + extra + max(left, 0.0) * nxt >= best - 1e-12:
                continue
            picks[j] = k
            if room is not None and t >= 0:
                used[t] += a * k
                dfs(j + 1, left, spent + extra)
                used[t] -= a * k
            else:
                dfs(j + 1, left, spent + extra)
        picks[j] = 0

    dfs(0, rem0, spent0)
    if work is not None:
        work[0] += nodes
    if best_k is None:
        return math.inf, None, nodes <= _LAG_NODE_LIMIT
    counts = [0] * n
    for j, i in enumerate(order):
        counts[i] = items[i][4] + best_k[j]
    return best, counts, nodes <= _LAG_NODE_LIMIT


class _Lagrange:
    """Per-model data of the coupled models for the Lagrangian bound and primal heuristic."""

    def __init__(self, milp: _Milp, problem: AllocationProblem) -> None:
        prep = milp.prep
        self.milp = milp
        self.types = sorted(prep.limited)
        self.tix = {t: k for k, t in enumerate(self.types)}
        self.inv = np.array([float(prep.inventory[t]) for t in self.types])
        self.tau = float(problem.transition_penalty)
        self.models = milp.coupled
        self.nodes = [0]  # search nodes visited so far
        self.calls = 0
        self._cache: dict[str, tuple] = {}
        self.vars: dict[str, list[VariantOption]] = {}
        serving = set()
        for m in milp.coupled:
            self.vars[m.name] = list(prep.usable[m.name])
            serving.update(v.name for v in prep.usable[m.name])
        # Variants held at their floor (excluded from serving, accelerator limited): constants.
        self.fixed_use = np.zeros(len(self.types))
        self.fixed_cost = 0.0
        for name, x in milp.x.items():
            if name in serving:
                continue
            v = _by_name(prep, name)
            self.fixed_use[self.tix[v.accelerator]] += v.accelerators_per_replica * v.min_replicas
            c = prep.cost[name]
            self.fixed_cost += c * v.min_replicas + self.tau * c * abs(v.min_replicas - v.current_replicas)

    @property
    def work(self) -> int:
        """Search nodes and per-model calls so far (deterministic measure of the time spent)."""
        return self.nodes[0] + 10 * self.calls

    def _static(self, m: ModelDemand):
        """(rate, cost, type index or -1, accelerators, current, lo, hi) per variant, and the use matrix."""
        cached = self._cache.get(m.name)
        if cached is None:
            prep, rows = self.milp.prep, []
            mat = np.zeros((len(self.vars[m.name]), len(self.types)))
            for j, v in enumerate(self.vars[m.name]):
                x = self.milp.x[v.name]
                k = self.tix.get(v.accelerator, -1)
                rows.append((prep.rate[v.name], prep.cost[v.name], k, v.accelerators_per_replica,
                             v.current_replicas, int(round(x.lowBound or 0)), int(round(x.upBound))))
                if k >= 0:
                    mat[j, k] = v.accelerators_per_replica
            cached = self._cache[m.name] = (rows, mat)
        return cached

    def items(self, m: ModelDemand, lam, sigma: float) -> list:
        """The per-model search's items at prices ``lam`` (a sequence per type) and cost weight ``sigma``."""
        self.calls += 1
        st = sigma * self.tau
        return [(r, sigma * c + (lam[k] * a if k >= 0 else 0.0), st * c, cur, lo, hi, k, a)
                for r, c, k, a, cur, lo, hi in self._static(m)[0]]

    def use_of(self, m: ModelDemand, counts: list[int]) -> np.ndarray:
        return np.asarray(counts, dtype=float) @ self._static(m)[1]

    def solve_all(self, lam, ucap, weight, sigma, only=None, sols=None):
        """Per-model optima at prices ``lam``; returns {model: (value, counts, exact)}."""
        sols = dict(sols or {})
        prices = [float(p) for p in lam]
        for m in self.models:
            if only is not None and m.name not in only:
                continue
            sols[m.name] = _model_opt(m.load_rps, ucap[m.name], weight.get(m.name, 0.0),
                                      self.items(m, prices, sigma), None, self.nodes)
        return sols

    def bound(self, lam: np.ndarray, ucap: dict[str, float], weight: dict[str, float], sigma: float) -> float:
        """Lagrangian lower bound of the stage ``sum_m (w_m u_m + sigma cost_m)`` at prices ``lam``
        (``-inf`` when a per-model search hit its node budget)."""
        lam = np.maximum(np.asarray(lam, dtype=float), 0.0)
        sols = self.solve_all(lam, ucap, weight, sigma)
        if not all(s[2] and s[1] is not None for s in sols.values()):
            return -math.inf
        return (sum(s[0] for s in sols.values()) - float(lam @ (self.inv - self.fixed_use))
                + sigma * self.fixed_cost)

    def primal(self, lam: np.ndarray, ucap: dict[str, float], weight: dict[str, float], sigma: float,
               fallback: dict[str, int]) -> dict[str, int] | None:
        """A feasible allocation: per-model optima at prices raised on over-used types until they fit,
        then one pass of per-model re-optimisation of the true objective in the inventory left.
        ``fallback`` (a feasible allocation) is improved instead when the prices do not converge."""
        prep = self.milp.prep
        price = np.maximum(np.asarray(lam, dtype=float), 0.0)
        scale = np.zeros(len(self.types))
        for m in self.models:
            for v in self.vars[m.name]:
                k = self.tix.get(v.accelerator)
                if k is not None:
                    per_acc = (prep.cost[v.name] * sigma + weight.get(m.name, 0.0) * prep.rate[v.name]) \
                        / v.accelerators_per_replica
                    scale[k] = max(scale[k], per_acc)
        step = 0.005 * np.where(scale > 0, scale, 1.0)
        sols = self.solve_all(price, ucap, weight, sigma)
        counts: dict[str, list[int]] | None = None
        for _ in range(_LAG_REPAIR_ROUNDS):
            if any(s[1] is None for s in sols.values()):
                break
            use = self.fixed_use.copy()
            users: dict[int, set[str]] = {}
            for m in self.models:
                u = self.use_of(m, sols[m.name][1])
                use += u
                for k in np.flatnonzero(u > 0):
                    users.setdefault(int(k), set()).add(m.name)
            over = np.flatnonzero(use > self.inv + 1e-9)
            if len(over) == 0:
                counts = {m.name: list(sols[m.name][1]) for m in self.models}
                break
            touched: set[str] = set()
            for k in over:
                price[k] = price[k] * 1.05 + step[k]
                touched |= users.get(int(k), set())
            sols = self.solve_all(price, ucap, weight, sigma, only=touched, sols=sols)
        if counts is None and all(s[1] is not None for s in sols.values()):
            counts = self._repair({m.name: list(sols[m.name][1]) for m in self.models}, ucap, weight, sigma)
        if counts is None:
            counts = {m.name: [fallback[v.name] for v in self.vars[m.name]] for m in self.models}
        # coordinate descent on the true objective (no prices), each model within what the others leave
        zero = [0.0] * len(self.types)
        use = self.fixed_use.copy()
        for m in self.models:
            use += self.use_of(m, counts[m.name])
        for m in self.models:
            items = self.items(m, zero, sigma)
            mine = self.use_of(m, counts[m.name])
            room = self.inv - (use - mine)
            old = _model_value(m.load_rps, weight.get(m.name, 0.0), items, counts[m.name])
            val, new, _ = _model_opt(m.load_rps, ucap[m.name], weight.get(m.name, 0.0), items, room, self.nodes)
            if new is not None and val < old - 1e-9 * max(1.0, abs(old)):
                counts[m.name] = new
                use += self.use_of(m, new) - mine
        out: dict[str, int] = {}
        for m in self.models:
            out.update({v.name: n for v, n in zip(self.vars[m.name], counts[m.name])})
        return out

    def _repair(self, counts: dict[str, list[int]], ucap, weight, sigma) -> dict[str, list[int]] | None:
        """Move models off over-used types, cheapest moves (true objective per accelerator freed) first."""
        zero = [0.0] * len(self.types)
        use = self.fixed_use.copy()
        for m in self.models:
            use += self.use_of(m, counts[m.name])
        over = use > self.inv + 1e-9
        if not over.any():
            return counts
        moves = []
        for m in self.models:
            mine = self.use_of(m, counts[m.name])
            if not (mine[over] > 0).any():
                continue
            items = self.items(m, zero, sigma)
            old = _model_value(m.load_rps, weight.get(m.name, 0.0), items, counts[m.name])
            # its best answer using strictly less of every over-used type it uses (others unlimited)
            room_off = np.where(over, np.maximum(mine - 1, 0), 1e18)
            val, new, _ = _model_opt(m.load_rps, ucap[m.name], weight.get(m.name, 0.0), items, room_off, self.nodes)
            if new is None:
                continue
            freed = float((mine - self.use_of(m, new))[over].sum())
            if freed > 0:
                moves.append(((val - old) / freed, m.name, m))
        moves.sort(key=lambda e: (e[0], e[1]))
        for _, _, m in moves:
            if not (use > self.inv + 1e-9).any():
                break
            mine = self.use_of(m, counts[m.name])
            over = use > self.inv + 1e-9
            if not (mine[over] > 0).any():
                continue
            items = self.items(m, zero, sigma)
            # within what the others leave, and strictly less of every over-used type it uses
            room = self.inv - (use - mine)
            room = np.where(over, np.minimum(room, np.maximum(mine - 1, 0)), room)
            room = np.maximum(room, 0.0)
            val, new, _ = _model_opt(m.load_rps, ucap[m.name], weight.get(m.name, 0.0), items, room, self.nodes)
            if new is None:
                continue
            counts[m.name] = new
            use += self.use_of(m, new) - mine
        return None if (use > self.inv + 1e-9).any() else counts


def _model_value(load: float, w: float, items: list, counts: list[int]) -> float:
    """Objective of :func:`_model_opt` at given counts."""
    cap = sum(it[0] * n for it, n in zip(items, counts))
    return w * max(load - cap, 0.0) + sum(it[1] * n + it[2] * abs(n - it[3]) for it, n in zip(items, counts))


def _solve_highs(milp: _Milp, problem: AllocationProblem, need_stage1: bool, start: dict[str, float]):
    """All stages on one HiGHS model (built once through PuLP), each warm-started by the last."""
    import highspy
    import pulp

    prob = milp.prob
    budget = max(float(problem.time_limit_s), 0.01)
    stage1_time = budget * _STAGE1_SHARE if need_stage1 else 0.0
    prob.setObjective(milp.cost)
    solver = pulp.HiGHS(msg=False, timeLimit=budget, gapRel=problem.mip_gap, threads=1)
    solver.createAndConfigureSolver(prob)
    solver.buildSolverModel(prob)
    h = prob.solverModel
    columns = prob.variables()
    index = {var.name: var.index for var in columns}
    every = np.arange(len(columns), dtype=np.int32)

    def warm(values: dict[str, float]) -> None:
        sol = highspy.HighsSolution()
        col = [0.0] * len(columns)
        for name, value in values.items():
            col[index[name]] = value
        sol.col_value = col
        sol.value_valid = True
        h.setSolution(sol)

    def current() -> dict[str, float]:
        col = list(h.getSolution().col_value)
        return {var.name: col[var.index] for var in columns}

    def objective(coefs: dict) -> None:
        cost = np.zeros(len(columns))
        for var, coef in coefs.items():
            cost[var.index] += coef
        h.changeColsCost(len(columns), every, cost)

    def freeze(variables: list, values: dict[str, float]) -> None:
        if not variables:
            return
        idx = np.array([var.index for var in variables], dtype=np.int32)
        lower = np.array([var.lowBound or 0.0 for var in variables])
        upper = np.array([values[var.name] + 1e-9 * max(1.0, values[var.name]) for var in variables])
        h.changeColsBounds(len(variables), idx, lower, upper)

    used = 0.0  # seconds, as measured by the solver itself (the engine reads no clock)

    def spent() -> float:
        """Solver seconds plus the decomposition's work at a (conservative) fixed rate per search node."""
        return used + (lag.work * _LAG_SECONDS_PER_NODE if lag is not None else 0.0)

    def run(seconds: float):
        nonlocal used
        h.setOptionValue("time_limit", max(seconds, 0.01))
        h.run()
        used = float(h.getRunTime())  # HiGHS's run clock accumulates over runs of one model
        return _highs_outcome(h)

    lag = _Lagrange(milp, problem) if _lagrange_applies(milp, problem) else None
    ucap = {m.name: float(milp.u[m.name].upBound) for m in milp.coupled}
    owner = {milp.u[m.name].name: m.name for m in milp.coupled}
    integrality = np.array([1 if var.cat == pulp.LpInteger else 0 for var in columns], dtype=np.uint8)
    row_of = {name: i for i, name in enumerate(prob.constraints)}
    inv_rows = [(k, row_of.get(f"inv{k}")) for k, _ in enumerate(sorted(milp.prep.limited))]

    def lp_prices() -> np.ndarray | None:
        """Inventory-row duals of the current stage's LP relaxation (the Lagrange multipliers)."""
        nonlocal used
        h.changeColsIntegrality(len(columns), every, np.zeros(len(columns), dtype=np.uint8))
        h.setOptionValue("time_limit", used + max(budget - spent(), 0.3))  # an LP run's limit is on the run clock
        h.run()
        used = float(h.getRunTime())
        ok = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        duals = list(h.getSolution().row_dual) if ok else []
        lp_value = float(h.getInfo().objective_function_value) if ok else -math.inf
        h.changeColsIntegrality(len(columns), every, integrality)
        if not ok:
            return None
        return np.array([0.0 if i is None else max(-duals[i], 0.0) for _, i in inv_rows]), lp_value

    def value_of(coefs: dict, values: dict[str, float]) -> float:
        return float(sum(coef * values[var.name] for var, coef in coefs.items()))

    def lagrange(coefs: dict, weight: dict[str, float], values: dict[str, float], cost_stage: bool):
        """(bound, best start): a lower bound of the stage (Lagrangian, or the LP relaxation's) and the
        better of ``values`` and the heuristic allocation (``-inf`` / ``values`` when not applicable)."""
        if lag is None or spent() - used > _LAG_SHARE * budget:  # decomposition's share of the budget used up
            return -math.inf, values
        priced = lp_prices()
        if priced is None:
            return -math.inf, values
        lam, lp_value = priced
        if cost_stage:
            hw, hsigma, wb, sb, scale = {}, 1.0, {}, 1.0, 1.0
        else:
            # heuristic: unserved load of the level weighted far above cost, cost breaks ties
            big = 100.0 * max((milp.prep.cost[v.name] * (1.0 + lag.tau) / milp.prep.rate[v.name]
                               for m in milp.coupled for v in lag.vars[m.name]), default=1.0) + 1.0
            hw, hsigma, wb, sb, scale = {name: big for name in weight}, 1.0, weight, 0.0, big
        reps = {name: int(round(values[x.name])) for name, x in milp.x.items()}
        counts = lag.primal(scale * lam, ucap, hw, hsigma, reps)
        if counts is not None:
            reps.update(counts)
            if not cost_stage:
                _top_up(milp.prep, reps, milp.coupled)
            cand = milp.start_from(reps)
            incumbent = value_of(coefs, values)
            if value_of(coefs, cand) < incumbent - 1e-9 * max(1.0, abs(incumbent)):
                values = cand
        bound = lp_value
        if lam.any() or cost_stage:  # (at zero prices the bound is zero: the LP's is as good)
            bound = max(bound, lag.bound(lam, ucap, wb, sb))
        return bound, values

    def lag_gap(bound: float, ub: float) -> float | None:
        if not math.isfinite(bound):
            return None
        return float(max(ub - bound, 0.0) / max(abs(ub), 1e-9)) if ub - bound > 1e-9 else 0.0

    def stage(coefs: dict, weight: dict[str, float], cost_stage: bool, seconds: float, abs_gap: float):
        """One stage: Lagrangian bound and heuristic, then HiGHS only if the gap is not yet closed."""
        nonlocal start
        before = spent()
        objective(coefs)
        bound, start = lagrange(coefs, weight, start, cost_stage)
        gap0 = lag_gap(bound, value_of(coefs, start))
        if gap0 is not None and (gap0 <= problem.mip_gap or value_of(coefs, start) - bound <= abs_gap):
            return "optimal", gap0
        h.setOptionValue("mip_abs_gap", abs_gap)
        if math.isfinite(bound):  # stop once the incumbent is within mip_gap of the Lagrangian bound
            h.setOptionValue("objective_target", bound / (1.0 - problem.mip_gap) if bound > 0 else bound + abs_gap)
        warm(start)
        st, gap = run(seconds - (spent() - before))
        h.setOptionValue("objective_target", -math.inf)
        if st is None:
            return None
        start = current()
        g1 = lag_gap(bound, value_of(coefs, start))
        if g1 is not None:
            if g1 <= problem.mip_gap or value_of(coefs, start) - bound <= abs_gap:
                st = "optimal"
            gap = g1 if gap is None else min(gap, g1)
        return st, gap

    statuses: list[Status] = []
    gaps: list[float | None] = []
    if need_stage1:
        # Stage 1, level by level; a level already at zero in the incumbent is optimal as it is.
        # Each level may use what is left of the stage-1 share; unused time goes to later stages.
        todo = [level for level in milp.levels if level]
        for n_left, level in zip(range(len(todo), 0, -1), todo):
            if sum(start[var.name] for var in level) <= 1e-12:
                freeze(level, start)
                _set_caps(ucap, owner, level, start)
                continue
            weight = {owner[var.name]: 1.0 for var in level if var.name in owner}
            if len(weight) < len(level):  # the floors level: no decomposition
                weight = {}
            # this level may take its share plus half of the later levels' (often not needed)
            outcome = stage({var: 1.0 for var in level}, weight, False,
                            (stage1_time - spent()) * (n_left + 1) / (2 * n_left), 1e-9)
            if outcome is None:
                return None
            statuses.append(outcome[0])
            gaps.append(outcome[1])
            # A time-limited level may leave capacity unused: hand it out before freezing.
            counts = {name: int(round(start[x.name])) for name, x in milp.x.items()}
            if _top_up(milp.prep, counts, milp.coupled):
                start = milp.start_from(counts)
            freeze(level, start)
            _set_caps(ucap, owner, level, start)
    # Stage 2: cost plus transition penalty, serving exactly what stage 1 decided.
    outcome = stage(dict(milp.cost.items()), {}, True, budget - spent(), 1e-6)
    if outcome is None:
        return None
    statuses.append(outcome[0])
    gaps.append(outcome[1])
    if lag is not None and need_stage1:
        # Moving load to cheaper accelerators can free room a partly served model could use; solve()
        # then serves it, which voids the cost stage's gap.  Serve it here instead, keep serving it,
        # and bound the cost stage again at the new unserved load (same allocation, no new room).
        counts = {name: int(round(start[x.name])) for name, x in milp.x.items()}
        if _top_up(milp.prep, counts, milp.coupled):
            start = milp.start_from(counts)
            every_u = [milp.u[m.name] for m in milp.coupled]
            freeze(every_u, start)
            _set_caps(ucap, owner, every_u, start)
            objective(dict(milp.cost.items()))
            priced = lp_prices()
            g = None
            if priced is not None:
                bound = max(priced[1], lag.bound(priced[0], ucap, {}, 1.0))
                g = lag_gap(bound, value_of(dict(milp.cost.items()), start))
            statuses[-1] = "optimal" if g is not None and g <= problem.mip_gap else "feasible"
            gaps[-1] = g
    values = start
    status: Status = "optimal" if all(s == "optimal" for s in statuses) else "feasible"
    known = [g for g in gaps if g is not None]
    return values, status, (max(known) if len(known) == len(gaps) else None)


def _set_caps(ucap: dict[str, float], owner: dict[str, str], level: list, values: dict[str, float]) -> None:
    """Mirror ``freeze``: a frozen model may leave at most what it leaves now unserved."""
    for var in level:
        if var.name in owner:
            ucap[owner[var.name]] = values[var.name] + 1e-9 * max(1.0, values[var.name])


def _lagrange_applies(milp: _Milp, problem: AllocationProblem) -> bool:
    """The decomposition needs every floor to fit (no floor-slack level) and convex transition costs."""
    return bool(milp.prep.limited) and not milp.s and 0.0 <= problem.transition_penalty < 1.0


def _solve_cbc(milp: _Milp, problem: AllocationProblem, need_stage1: bool, start: dict[str, float]):
    """All stages with CBC through PuLP (warm-started); the gap is known only when optimal."""
    import pulp

    prob = milp.prob
    budget = max(float(problem.time_limit_s), 1.0)
    statuses: list[Status] = []

    def run(objective, seconds: float, values: dict[str, float]):
        prob.setObjective(objective)
        for var in prob.variables():
            if var.name in values:
                var.setInitialValue(values[var.name])
        prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=max(int(math.ceil(seconds)), 1),
                                     gapRel=problem.mip_gap, warmStart=True))
        st = status_from_solution(prob.sol_status)
        if st is None:
            return None
        statuses.append(st)
        return {var.name: float(var.varValue or 0.0) for var in prob.variables()}

    values = start
    if need_stage1:
        todo = [level for level in milp.levels if level]
        for level in todo:
            if sum(values[var.name] for var in level) > 1e-12:
                values = run(pulp.lpSum(level), budget / 2 / len(todo), values)
                if values is None:
                    return None
            for var in level:  # freeze what this level decided
                var.upBound = values[var.name] + 1e-9 * max(1.0, values[var.name])
        budget /= 2
    values = run(milp.cost, budget, values)
    if values is None:
        return None
    status: Status = "optimal" if all(s == "optimal" for s in statuses) else "feasible"
    return values, status, (0.0 if status == "optimal" else None)


def _top_up(prep: _Prepared, replicas: dict[str, int], models: list[ModelDemand]) -> bool:
    """Serve load the solver left unserved within its feasibility tolerance (~1e-7 req/s).

    A MILP solver accepts ``sum r*x + u >= L`` violated by its tolerance, so a sliver of load can be
    reported unserved while a replica still fits.  Load is only to be left unserved when the inventory
    (or ``max_replicas``) forces it, so add replicas where there is room, cheapest per req/s first.
    Returns whether anything was added.
    """
    changed = False
    left = dict(prep.inventory)
    for v in prep.variants:
        if v.accelerator in left:
            left[v.accelerator] -= v.accelerators_per_replica * replicas.get(v.name, 0)
    for m in sorted(models, key=lambda m: (m.priority, m.name)):
        vs = sorted(prep.usable[m.name], key=lambda v: (prep.cost[v.name] / prep.rate[v.name], v.name))
        for v in vs:
            missing = m.load_rps - sum(replicas[w.name] * prep.rate[w.name] for w in vs)
            if missing <= _UNSERVED_TOL * max(m.load_rps, 1.0):
                break
            add = replicas_needed(missing, prep.rate[v.name], 0)
            if v.max_replicas is not None:
                add = min(add, v.max_replicas - replicas[v.name])
            if v.accelerator in left:
                add = min(add, left[v.accelerator] // v.accelerators_per_replica)
                left[v.accelerator] -= max(add, 0) * v.accelerators_per_replica
            replicas[v.name] += max(add, 0)
            changed |= add > 0
    return changed


def _by_name(prep: _Prepared, name: str) -> VariantOption:
    if not hasattr(prep, "_index"):
        prep._index = {v.name: v for v in prep.variants}  # type: ignore[attr-defined]
    return prep._index[name]  # type: ignore[attr-defined]
