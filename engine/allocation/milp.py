"""The compact MILP, solved stage by stage through PuLP (HiGHS or CBC).

One integer variable per variant, one unserved-load variable per model, a demand row per model and
an inventory row per limited accelerator type.  The lexicographic objective is solved as a sequence
of stages on the same model: the missing ``min_replicas`` floors (only when they cannot all fit),
then each priority level's unserved load, then cost plus transition penalty.  After each stage the
level's **total** is frozen (``sum of its unserved <= what the stage reached``), never each model's
own unserved load, so a later stage may still move unserved load between models of one level.

This is the general path: it handles what the decomposition (:mod:`engine.allocation.decomposition`)
does not (floors that do not fit, a transition penalty of a full replica's cost or more, CBC).
Its status comes from PuLP's *solution* status, so a time-limited run is never called optimal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.allocation.problem import AllocationProblem, ModelDemand, Prepared, Status, deterministic_highs
from engine.allocation.search import replica_ceiling

if TYPE_CHECKING:
    import numpy as np

SOLVER_NAMES = {"HiGHS": "highs", "PULP_CBC_CMD": "cbc"}
FREEZE_SLACK = 1e-9
Term = tuple[Any, float]
"""One term of a linear row: (a pulp variable, its coefficient); pulp ships no type information."""
"""Relative slack on a frozen level total (solver tolerances)."""


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


def pick_solver(name: str | None) -> str | None:
    """PuLP's key of the requested solver (or the best available), ``None`` if not available."""
    import pulp

    available = set(pulp.listSolvers(onlyAvailable=True))
    if name is not None:
        key = {"highs": "HiGHS", "cbc": "PULP_CBC_CMD"}.get(name.lower(), name)
        return key if key in available else None
    for key in ("HiGHS", "PULP_CBC_CMD"):
        if key in available:
            return key
    return None


class CompactMilp:
    """The PuLP formulation of the coupled models (objectives are set stage by stage)."""

    def __init__(
        self, problem: AllocationProblem, prep: Prepared, coupled: list[ModelDemand], floors: dict[str, bool]
    ) -> None:
        import pulp

        self.prep = prep
        self.prob = prob = pulp.LpProblem("allocation", pulp.LpMinimize)
        self.x: dict[str, Any] = {}
        self.u: dict[str, Any] = {}
        self.s: dict[str, Any] = {}
        self.coupled = coupled
        coupled_names = {m.name for m in coupled}
        loads = {m.name: m.load_rps for m in prep.models}
        cap_terms: dict[str, list[Term]] = {m.name: [] for m in coupled}
        inv_terms: dict[str, list[Term]] = {t: [] for t in prep.limited}
        cost_terms: list[Term] = []
        for i, v in enumerate(prep.variants):
            serving = v.name in prep.rate and v.model in coupled_names
            fixed = v.name not in prep.rate and v.accelerator in prep.limited
            if not (serving or fixed):
                continue
            relax = v.accelerator in prep.limited and not floors[v.accelerator]
            lb = 0 if relax else v.min_replicas
            ub = replica_ceiling(loads[v.model], prep.rate[v.name], v) if serving else v.min_replicas
            x = self.x[v.name] = pulp.LpVariable(f"x{i}", lowBound=lb, upBound=max(ub, lb), cat=pulp.LpInteger)
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
            if tau > 0 and v.current_replicas > 0:  # |x - current| through a deviation variable
                d = pulp.LpVariable(f"t{i}", lowBound=0)
                prob += d >= x - v.current_replicas, f"tu{i}"
                prob += d >= v.current_replicas - x, f"td{i}"
                cost_terms.append((d, tau))
        for j, m in enumerate(coupled):
            u = self.u[m.name] = pulp.LpVariable(f"u{j}", lowBound=0, upBound=m.load_rps)
            prob += pulp.LpAffineExpression(cap_terms[m.name] + [(u, 1.0)]) >= m.load_rps, f"d{j}"
            for k, (cut, rhs) in enumerate(mir_cuts(cap_terms[m.name], u, m.load_rps)):
                prob += pulp.LpAffineExpression(cut) >= rhs, f"mir{j}_{k}"
        for k, t in enumerate(sorted(prep.limited)):
            if inv_terms[t]:
                prob += pulp.LpAffineExpression(inv_terms[t]) <= prep.inventory[t], f"inv{k}"
        self.cost = pulp.LpAffineExpression(cost_terms)
        # the stages' objectives: missing floors (only when they cannot all fit), then each level
        self.levels: list[tuple[str, list[Any]]] = []
        if self.s:
            self.levels.append(("floors", list(self.s.values())))
        for p in sorted({m.priority for m in coupled}):
            self.levels.append((f"priority {p}", [self.u[m.name] for m in coupled if m.priority == p]))

    def start_from(self, replicas: dict[str, int]) -> None:
        """Warm-start values (for CBC) extending integer replicas to every variable."""
        for name, x in self.x.items():
            x.setInitialValue(replicas[name])
        for name, s in self.s.items():
            s.setInitialValue(max(self.prep.by_name[name].min_replicas - replicas[name], 0))
        for m in self.coupled:
            cap = sum(replicas[v.name] * self.prep.rate[v.name] for v in self.prep.usable[m.name])
            self.u[m.name].setInitialValue(min(max(m.load_rps - cap, 0.0), m.load_rps))


def mir_cuts(terms: list[Term], u: Any, load: float) -> list[tuple[list[Term], float]]:
    """Mixed-integer rounding cuts of a demand row ``sum_v r_v x_v + u >= L`` (x integer >= 0).

    Dividing by each variant's rate r_w and rounding gives
    ``sum_v g_v x_v + u / (r_w f0) >= ceil(L/r_w)`` with ``f0 = frac(L/r_w)`` and
    ``g_v = ceil(a_v) - max(0, f0 - frac(a_v)) / f0`` (``a_v = r_v/r_w``; ``g_v = a_v`` when integral).
    They make the LP relaxation pay for the last, partly used replica of a fully served model.
    """
    cuts: list[tuple[list[Term], float]] = []
    for _, r_w in terms:
        b = load / r_w
        f0 = b - math.floor(b)
        if f0 < 1e-6 or f0 > 1 - 1e-6:
            continue
        cut: list[Term] = []
        for x, r_v in terms:
            a = r_v / r_w
            fa = a - math.floor(a)
            g = float(round(a)) if (fa < 1e-9 or fa > 1 - 1e-9) else math.ceil(a) - max(0.0, f0 - fa) / f0
            cut.append((x, g))
        cut.append((u, 1.0 / (r_w * f0)))
        cuts.append((cut, float(math.ceil(b))))
    return cuts


def solve_compact(
    milp: CompactMilp, problem: AllocationProblem, solver_key: str, start: dict[str, int], skip_levels: set[str]
) -> tuple[dict[str, int], Status, dict[str, float | None]] | None:
    """Every stage on the compact model; ``None`` when the solver returns no usable solution.

    ``skip_levels``: levels the start already leaves at zero (frozen at zero without a solve).
    Half the time limit goes to the unserved stages, the rest to cost.  The gap of a stage is 0 when
    proven optimal and unknown (``None``) otherwise: PuLP exposes no bound.
    """
    import pulp

    prob = milp.prob
    budget = max(float(problem.time_limit_s), 1.0)
    gaps: dict[str, float | None] = {}
    statuses: list[Status] = []
    values = dict(start)

    def run(objective: Any, seconds: float) -> bool:
        nonlocal values
        prob.setObjective(objective)
        milp.start_from(values)
        if solver_key == "HiGHS":
            solver = pulp.HiGHS(msg=False, timeLimit=max(seconds, 0.05), gapRel=problem.mip_gap, threads=1)
        else:
            solver = pulp.PULP_CBC_CMD(
                msg=False, timeLimit=max(int(math.ceil(seconds)), 1), gapRel=problem.mip_gap, warmStart=True
            )
        prob.solve(solver)
        status = status_from_solution(prob.sol_status)
        if status is None:
            return False
        statuses.append(status)
        values = {name: int(round(x.varValue or 0.0)) for name, x in milp.x.items()}
        return True

    todo = [(label, level) for label, level in milp.levels if level]
    for k, (label, level) in enumerate(todo):
        if label not in skip_levels:
            if not run(pulp.lpSum(level), budget / 2 / len(todo)):
                return None
            gaps[label] = 0.0 if statuses[-1] == "optimal" else None
            total = sum(float(var.varValue or 0.0) for var in level)
        else:
            total = 0.0
        prob += pulp.lpSum(level) <= total + FREEZE_SLACK * max(1.0, total), f"freeze{k}"
    if not run(milp.cost, budget / 2 if todo else budget):
        return None
    gaps["cost"] = 0.0 if statuses[-1] == "optimal" else None
    status: Status = "optimal" if all(s == "optimal" for s in statuses) else "feasible"
    return values, status, gaps


class HighsStage:
    """The compact model held in HiGHS directly, to finish a decomposition stage by branch and bound.

    Columns: replicas per serving variant (integer), unserved load per model, and the deviation
    ``|x - current|`` where the transition penalty needs one; rows: demand per model, inventory per
    limited type, the deviation pair, and the frozen levels' totals (added as stages go).  Its dual
    bound is a valid bound of the same stage, so it can only tighten the decomposition's.
    """

    def __init__(self, prep: Prepared, coupled: list[ModelDemand], tau: float, capacity: dict[str, float]) -> None:
        import highspy
        import numpy as np

        self.highspy = highspy
        self.prep = prep
        self.coupled = coupled
        self.h = h = deterministic_highs()
        inf = highspy.kHighsInf
        loads = {m.name: m.load_rps for m in coupled}
        self.variants = [v for m in coupled for v in prep.usable[m.name]]
        self.x: dict[str, int] = {}
        self.d: dict[str, int] = {}
        self.u: list[int] = []
        cost: list[float] = []
        lower: list[float] = []
        upper: list[float] = []

        def column(c: float, lo: float, hi: float) -> int:
            cost.append(c)
            lower.append(lo)
            upper.append(hi)
            return len(cost) - 1

        for v in self.variants:
            c = prep.cost[v.name]
            self.x[v.name] = column(
                c * (1 + tau) if v.current_replicas == 0 else c,
                v.min_replicas,
                replica_ceiling(loads[v.model], prep.rate[v.name], v),
            )
        self.u = [column(0.0, 0.0, m.load_rps) for m in coupled]
        for v in self.variants:
            if tau > 0 and v.current_replicas > 0:
                self.d[v.name] = column(tau * prep.cost[v.name], 0.0, inf)
        n = len(cost)
        self.cost = np.array(cost)
        self.lower = np.array(lower)
        self.upper = np.array(upper)
        self.every = np.arange(n, dtype=np.int32)
        h.addVars(n, self.lower, self.upper)
        integral = np.zeros(n, dtype=np.uint8)
        integral[list(self.x.values())] = 1
        h.changeColsIntegrality(n, self.every, integral)
        for j, m in enumerate(coupled):  # demand: sum r x + u >= load, and its rounding cuts
            vs = prep.usable[m.name]
            idx = np.array([self.x[v.name] for v in vs] + [self.u[j]], dtype=np.int32)
            h.addRow(m.load_rps, inf, len(idx), idx, np.array([prep.rate[v.name] for v in vs] + [1.0]))
            for cut, rhs in mir_cuts([(self.x[v.name], prep.rate[v.name]) for v in vs], self.u[j], m.load_rps):
                h.addRow(
                    rhs, inf, len(cut), np.array([i for i, _ in cut], dtype=np.int32), np.array([c for _, c in cut])
                )
        for t, cap in sorted(capacity.items()):  # inventory
            vs = [v for v in self.variants if v.accelerator == t]
            if vs:
                h.addRow(
                    -inf,
                    cap,
                    len(vs),
                    np.array([self.x[v.name] for v in vs], dtype=np.int32),
                    np.array([float(v.accelerators_per_replica) for v in vs]),
                )
        for name, i in self.d.items():  # d >= x - current, d >= current - x
            cur = prep.by_name[name].current_replicas
            idx = np.array([i, self.x[name]], dtype=np.int32)
            h.addRow(-cur, inf, 2, idx, np.array([1.0, -1.0]))
            h.addRow(cur, inf, 2, idx, np.array([1.0, 1.0]))
        self.runtime = 0.0

    def freeze_level(self, members: list[int], cap: float) -> None:
        """``sum of the members' unserved load <= cap`` (a decided level's total)."""
        import numpy as np

        self.h.addRow(
            -self.highspy.kHighsInf,
            cap,
            len(members),
            np.array([self.u[j] for j in members], dtype=np.int32),
            np.ones(len(members)),
        )

    def run(
        self,
        weight: Sequence[float] | np.ndarray,
        sigma: float,
        ucap: Sequence[float] | np.ndarray,
        start: dict[str, int],
        target: float,
        seconds: float,
    ) -> tuple[dict[str, int] | None, float]:
        """Minimise ``sum_j weight_j u_j + sigma * (cost + penalty)`` with ``u_j <= ucap_j``, warm-started
        from ``start`` and stopping at ``target`` or after ``seconds`` (HiGHS's run time).
        Returns (the replicas found or None, HiGHS's dual bound)."""
        import numpy as np

        h = self.h
        obj = self.cost * sigma
        obj[self.u] += np.asarray(weight, dtype=float)
        h.changeColsCost(len(obj), self.every, obj)
        upper = self.upper.copy()
        upper[self.u] = np.asarray(ucap, dtype=float)
        h.changeColsBounds(len(obj), self.every, self.lower, upper)
        values = np.zeros(len(obj))
        for name, i in self.x.items():
            values[i] = start[name]
        for j, m in enumerate(self.coupled):
            served = sum(start[v.name] * self.prep.rate[v.name] for v in self.prep.usable[m.name])
            values[self.u[j]] = min(max(m.load_rps - served, 0.0), float(upper[self.u[j]]))
        for name, i in self.d.items():
            values[i] = abs(start[name] - self.prep.by_name[name].current_replicas)
        sol = self.highspy.HighsSolution()
        sol.col_value = values.tolist()
        sol.value_valid = True
        h.setSolution(sol)
        h.setOptionValue("objective_target", target)
        h.setOptionValue("time_limit", max(seconds, 0.01))  # per run; getRunTime() accumulates
        h.run()
        self.runtime = float(h.getRunTime())
        h.setOptionValue("objective_target", -self.highspy.kHighsInf)
        info = h.getInfo()
        bound = float(info.mip_dual_bound)
        bound = bound if math.isfinite(bound) else -math.inf
        if info.primal_solution_status != 2:  # kSolutionStatusFeasible
            return None, bound
        col = h.getSolution().col_value
        return {name: int(round(col[i])) for name, i in self.x.items()}, bound
