"""The solver: which models are independent, which path solves the coupled ones, in what stages.

Reading order for a new engineer: :func:`solve` below, then :mod:`.decomposition` (the default path
whenever an inventory couples the models) or :mod:`.milp` (the general path), both built on
:mod:`.search` (one model's exact answer) and started from :mod:`.greedy`.
"""

from __future__ import annotations

import math

import numpy as np

from engine.allocation.decomposition import Budget, Decomposition, Stage, StageResult
from engine.allocation.greedy import greedy_prepared, top_up
from engine.allocation.milp import SOLVER_NAMES, CompactMilp, HighsStage, pick_solver, solve_compact
from engine.allocation.problem import (
    Allocation,
    AllocationProblem,
    ModelDemand,
    Prepared,
    Status,
    finish,
    floors_fit,
    level_key,
    prepare,
)
from engine.allocation.search import size_alone
from engine.perf.sizing import replicas_needed

FIRST_STAGES_SHARE = 0.7
"""Share of what is left of the time limit an unserved-load stage may use (cost gets the rest)."""
DECOMPOSE_FROM_VARIANTS = 1000
"""Below this many serving variants of coupled models, HiGHS's branch and bound on the compact model
solves every stage directly (it proves such instances in milliseconds, faster than the decomposition
gets going); from it on, the decomposition comes first (see docs/benchmarks.md)."""


def solve(problem: AllocationProblem) -> Allocation:
    """Optimal (or best found within the time limit) replica allocation; see the package docstring."""
    prep = prepare(problem)
    solver_key = pick_solver(problem.solver)
    if solver_key is None:
        if problem.solver is not None:
            raise ValueError(f"solver {problem.solver!r} is not available")
        return greedy_prepared(prep)

    replicas, coupled, exact = _size_independent(prep, problem.transition_penalty)
    held = [v for v in prep.variants if v.name not in prep.rate and v.accelerator in prep.limited]
    if not coupled and not held:
        return finish(prep, replicas, "optimal" if exact else "feasible", 0.0 if exact else None, "closed-form")

    base = greedy_prepared(prep)
    floors = floors_fit(prep)
    if decomposition_applies(problem, floors, solver_key):
        counts, status, gaps = _decomposed(problem, prep, coupled, base)
        name = "highs"
    else:
        milp = CompactMilp(problem, prep, coupled, floors)
        skip = {
            label
            for label, level in milp.levels
            if label.startswith("priority")
            and all(base.unserved_rps[m.name] == 0 for m in coupled if f"priority {m.priority}" == label)
        }
        outcome = solve_compact(milp, problem, solver_key, base.replicas, skip)
        if outcome is None:
            base.solver = f"greedy (no solution from {SOLVER_NAMES[solver_key]})"
            return base
        counts, status, gaps = outcome
        name = SOLVER_NAMES[solver_key]
    replicas.update(counts)
    if top_up(prep, replicas, coupled):
        # load was left unserved while a replica fitted (solver tolerance, time limit): serving it
        # changes what the cost stage optimised, so its gap no longer applies
        status, gaps["cost"] = "feasible", None
    if not exact:
        status = "feasible"
    if not all(floors.values()):
        status = "infeasible"
    known = list(gaps.values())
    gap = max(known) if known and all(g is not None for g in known) else None  # type: ignore[type-var]
    result = finish(prep, replicas, status, gap, name, gaps)
    return _never_worse_than(result, base, prep, problem.transition_penalty)


def decomposition_applies(problem: AllocationProblem, floors: dict[str, bool], solver_key: str) -> bool:
    """The decomposition needs HiGHS, every floor to fit (no floor-slack stage) and a transition
    penalty below a replica's cost (so each model's priced cost is convex and nondecreasing)."""
    return solver_key == "HiGHS" and all(floors.values()) and 0.0 <= problem.transition_penalty < 1.0


def _size_independent(prep: Prepared, tau: float) -> tuple[dict[str, int], list[ModelDemand], bool]:
    """Models that touch no limited accelerator are sized alone (a single variant in closed form,
    exactly WVA's per-variant sizing; several by the exact search); the others are coupled.
    Excluded variants on unlimited types sit at their floor.  Returns (replicas, coupled, proven)."""
    replicas: dict[str, int] = {}
    coupled: list[ModelDemand] = []
    exact = True
    for m in prep.models:
        vs = prep.usable[m.name]
        if any(v.accelerator in prep.limited for v in vs):
            coupled.append(m)
        elif len(vs) == 1:
            v = vs[0]
            n = replicas_needed(m.load_rps, prep.rate[v.name], v.min_replicas)
            replicas[v.name] = n if v.max_replicas is None else min(n, v.max_replicas)
        elif vs:
            counts, proven = size_alone(m.load_rps, vs, prep, tau)
            replicas.update(counts)
            exact &= proven
    for v in prep.variants:
        if v.name not in prep.rate:
            replicas[v.name] = v.min_replicas
    return replicas, coupled, exact


def _decomposed(
    problem: AllocationProblem, prep: Prepared, coupled: list[ModelDemand], base: Allocation
) -> tuple[dict[str, int], Status, dict[str, float | None]]:
    """Every stage by column generation (:mod:`.decomposition`), starting from the greedy baseline.

    Stages: each priority level's unserved load, highest first (a level the incumbent already
    serves fully needs none), then cost plus transition penalty.  After a level's stage its total
    unserved load is frozen: at zero by forbidding its models any unserved load, otherwise as a
    level row ``sum <= total``.  A stage the decomposition does not prove is continued by HiGHS's
    branch and bound on the compact model (:class:`.milp.HighsStage`), warm-started from its
    incumbent, for what is left of the stage's time; the better bound and incumbent are kept.  Small
    instances (fewer than ``DECOMPOSE_FROM_VARIANTS`` variants) go to HiGHS directly.
    """
    budget = Budget(max(float(problem.time_limit_s), 0.01))
    dec = Decomposition(prep, coupled, problem.transition_penalty, budget)
    finisher = _Finisher(dec, prep, coupled, problem.transition_penalty)
    n = len(coupled)
    incumbent = [dec.column(j, [base.replicas[v.name] for v in vs]).counts for j, vs in enumerate(dec.variants)]
    ucap = np.array([m.load_rps for m in coupled], dtype=float)
    rows: list[tuple[list[int], float]] = []
    gaps: dict[str, float | None] = {}
    proven = True

    def level_total(members: list[int]) -> float:
        return float(sum(dec.column(j, incumbent[j]).unserved for j in members))

    small = sum(len(vs) for vs in dec.variants) < DECOMPOSE_FROM_VARIANTS

    def run(stage: Stage, seconds: float) -> list[tuple[int, ...]]:
        nonlocal proven
        deadline = budget.spent() + seconds
        if small:
            value = sum(dec.objective(stage, j, dec.column(j, c)) for j, c in enumerate(incumbent))
            result = finisher.improve(stage, stage.result(incumbent, value, -math.inf), seconds)
        else:
            result = dec.solve_stage(stage, incumbent, seconds)
            if not result.proven and budget.spent() < deadline:
                result = finisher.improve(stage, result, deadline - budget.spent())
        gaps[stage.label] = result.gap
        proven &= result.proven
        return result.counts

    for p in sorted({m.priority for m in coupled}):
        members = [j for j, m in enumerate(coupled) if m.priority == p]
        if level_total(members) > 0:
            weight = np.zeros(n)
            weight[members] = 1.0
            demand = float(sum(coupled[j].load_rps for j in members))
            stage = Stage(f"priority {p}", weight, 0.0, ucap.copy(), list(rows), demand, problem.mip_gap)
            incumbent = _served_where_room(dec, prep, run(stage, budget.left() * FIRST_STAGES_SHARE), members)
        total = level_total(members)
        if total <= 0:
            ucap[members] = 0.0
        else:
            rows.append((members, total * (1 + 1e-9) + 1e-12))
    counts = run(Stage("cost", np.zeros(n), 1.0, ucap, rows, None, problem.mip_gap), budget.left())
    replicas = {v.name: k for j, vs in enumerate(dec.variants) for v, k in zip(vs, counts[j])}
    return replicas, ("optimal" if proven else "feasible"), gaps


class _Finisher:
    """HiGHS on the compact model, built the first time a stage needs it."""

    def __init__(self, dec: Decomposition, prep: Prepared, coupled: list[ModelDemand], tau: float) -> None:
        self.dec, self.prep, self.coupled, self.tau = dec, prep, coupled, tau
        self.model: HighsStage | None = None
        self.frozen = 0

    def improve(self, stage: Stage, result: StageResult, seconds: float) -> StageResult:
        """HiGHS's branch and bound on the stage, from the result's incumbent, stopping within the
        stage's gap of the result's bound; the better incumbent and the better bound are kept."""
        dec = self.dec
        if self.model is None:
            capacity = {t: float(c) for t, c in zip(dec.types, dec.capacity)}
            self.model = HighsStage(self.prep, self.coupled, self.tau, capacity)
            dec.budget.searches += len(self.prep.rate)  # building it: charged like a search per variant
        for members, cap in stage.rows[self.frozen :]:
            self.model.freeze_level(members, cap)
        self.frozen = len(stage.rows)
        start = {v.name: k for j, vs in enumerate(dec.variants) for v, k in zip(vs, result.counts[j])}
        target = result.bound + stage.tolerance(result.value) if math.isfinite(result.bound) else -math.inf
        before = self.model.runtime
        replicas, bound = self.model.run(stage.weight, stage.sigma, stage.ucap, start, target, seconds)
        dec.budget.solver += self.model.runtime - before
        counts, value = result.counts, result.value
        if replicas is not None:
            cand = [dec.column(j, [replicas[v.name] for v in vs]) for j, vs in enumerate(dec.variants)]
            cand_value = sum(dec.objective(stage, j, col) for j, col in enumerate(cand))
            admissible = all(
                col.unserved <= stage.ucap[j] + 1e-9 * max(1.0, stage.ucap[j]) for j, col in enumerate(cand)
            )
            admissible &= all(sum(cand[j].unserved for j in members) <= cap for members, cap in stage.rows)
            if admissible and cand_value < value - 1e-12 * max(1.0, abs(value)):
                counts, value = [c.counts for c in cand], cand_value
        return stage.result(counts, value, max(result.bound, bound))


def _served_where_room(
    dec: Decomposition, prep: Prepared, counts: list[tuple[int, ...]], members: list[int]
) -> list[tuple[int, ...]]:
    """A stage cut short may leave room its level could use: hand it out before freezing the level."""
    replicas = {v.name: k for j, vs in enumerate(dec.variants) for v, k in zip(vs, counts[j])}
    for v in prep.variants:
        replicas.setdefault(v.name, 0)
    if not top_up(prep, replicas, [dec.models[j] for j in members]):
        return counts
    return [dec.column(j, [replicas[v.name] for v in vs]).counts for j, vs in enumerate(dec.variants)]


def _never_worse_than(result: Allocation, base: Allocation, prep: Prepared, tau: float) -> Allocation:
    """The guarantee, checked rather than assumed: lexicographically no more unserved load than the
    greedy baseline (to 1e-6 req/s) and, at equal unserved load, no higher objective (cost plus
    transition penalty); otherwise the baseline is returned."""
    mine, theirs = (tuple(round(x, 6) for x in level_key(prep.models, a.unserved_rps)) for a in (result, base))
    if mine < theirs:
        return result
    if mine == theirs:
        ours, greedy_value = (objective(prep, a.replicas, tau) for a in (result, base))
        if ours <= greedy_value + 1e-9 * max(1.0, greedy_value):
            return result
    base.solver = f"greedy (better than {result.solver}'s {result.status} result)"
    return base


def objective(prep: Prepared, replicas: dict[str, int], tau: float) -> float:
    """Cost plus transition penalty of an allocation (the cost stage's objective)."""
    return float(
        sum(
            prep.cost[v.name] * (replicas[v.name] + tau * abs(replicas[v.name] - v.current_replicas))
            for v in prep.variants
        )
    )
