"""The decomposition: column generation over per-model replica patterns, and its bound.

The only coupling between models is the inventory (one row per limited accelerator type, a handful)
and, once a priority level has been decided, that level's total unserved load.  So a stage is
written over *patterns*: for every model a column per candidate replica vector, a convexity row
(each model picks exactly one pattern), the inventory rows and the frozen level rows.

* The LP over the patterns generated so far (the restricted master) gives prices: ``lam`` per
  accelerator type, ``mu`` per frozen level, ``pi`` per model.
* Pricing asks every model for its best pattern at those prices -- the exact per-model search
  (:func:`engine.allocation.search.best_pattern`) -- and adds those cheaper than ``pi``.
* Each pricing round also gives a **lower bound** of the stage (Lagrangian duality): the sum of the
  models' priced optima minus the priced capacities.  It pays for every model's partly used last
  replica, which the LP relaxation of the compact model does not, and when no pattern prices out it
  equals the master LP (the Dantzig-Wolfe bound).
* The **incumbent**: the master LP's solution rounded and repaired (:meth:`_Master.round`), then the
  best integer choice of one pattern per model among the generated ones (HiGHS on the restricted
  master with binary columns, only those whose reduced cost leaves room for an improvement,
  warm-started with the previous incumbent, so it never gets worse), then each model's best answer
  within the inventory the others leave is added as a column and the choice re-solved.

A stage is proven when its incumbent is within ``mip_gap`` of the bound; otherwise it stops at its
share of the time limit and reports the gap it proved.  What it does not do is branch inside the
column generation (branch and price): where no choice among the generated patterns comes near the
Dantzig-Wolfe bound -- a few models the LP splits across the last accelerators of several types --
the gap stays, and HiGHS's branch and bound on the compact model gets what time is left.  The Python work (search nodes) is charged
to the time limit at a fixed rate, so it is accounted for deterministically.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from engine.allocation.problem import ModelDemand, Prepared, deterministic_highs, unserved_load
from engine.allocation.search import Item, Pattern, best_pattern, replica_ceiling

SECONDS_PER_NODE = 8e-6
"""Time charged per search node against the time limit (measured ~5 us on the benchmark machine)."""
SECONDS_PER_SEARCH = 3e-5
"""Time charged per per-model search call (building its items, bookkeeping)."""
CG_SHARE = 0.6
"""Share of a stage's time that column generation may use before the incumbent is searched for."""
SMOOTHING = 0.0
"""Weight of the best-bound prices in the prices a pricing round uses (Wentges smoothing; 0: plain
column generation, which measured faster on the benchmark, see docs/benchmarks.md)."""
AIM = 0.01
"""The integer choice is searched until within this fraction of the stage's tolerance of the bound:
a stage is proven within ``mip_gap``, but a priority level decided tighter leaves the levels after it
the allocation a strict priority order asks for."""
ROUND_LP = True
"""Round the master LP's solution (with repair) before searching the restricted master by branch and bound."""
SEED_POOLS = False
"""Start each model's pool with its floors and each variant alone covering its load (off: the larger
restricted master measured slower and decided the priority levels less tightly, docs/benchmarks.md)."""
RESPONSE_ROUNDS = 2
COLUMN_SEARCHES = 1.0
"""Time charged per column handed to the master, in units of a per-model search."""
"""Rounds of adding each model's best answer in the inventory the others leave."""


class Column(NamedTuple):
    """One pattern of one model: replica counts (in the model's variant order), accelerators used per
    limited type, cost plus transition penalty, and the load it leaves unserved."""

    counts: tuple[int, ...]
    use: np.ndarray
    cost: float
    unserved: float


@dataclass
class Budget:
    """Time limit bookkeeping without a clock: the solver's own run times plus the search work."""

    seconds: float
    solver: float = 0.0
    nodes: list[int] = field(default_factory=lambda: [0])
    searches: float = 0

    def spent(self) -> float:
        return self.solver + self.nodes[0] * SECONDS_PER_NODE + self.searches * SECONDS_PER_SEARCH

    def left(self) -> float:
        return max(self.seconds - self.spent(), 0.0)


StaticRow = tuple[float, float, int, int, int, int, int]
"""A variant as the master sees it: (rate, cost per replica, limited-type index or -1, accelerators per
replica, current replicas, floor, ceiling)."""

Duals = tuple[float, np.ndarray, np.ndarray, np.ndarray]
"""The master LP's value and prices: (value, pi per model, lam per type >= 0, mu per frozen level >= 0)."""


@dataclass
class Stage:
    """One stage of the lexicographic objective over the coupled models (indexed as in
    :class:`Decomposition`).

    Objective: ``sum_j weight[j] * unserved_j + sigma * cost_j``.  ``ucap[j]``: most load model j may
    leave unserved (0 for a level decided fully served); ``rows``: frozen levels as (model indices,
    most total unserved load).  ``scale``: what the gap is relative to (a level's demand, or
    ``None`` for the objective itself).
    """

    label: str
    weight: np.ndarray
    sigma: float
    ucap: np.ndarray
    rows: list[tuple[list[int], float]]
    scale: float | None
    mip_gap: float

    def relative_to(self, value: float) -> float:
        """What the gap of an incumbent of this value is relative to."""
        return self.scale if self.scale is not None else max(abs(value), 1e-9)

    def tolerance(self, value: float) -> float:
        """Absolute distance to the bound within which an incumbent of this value is proven."""
        return self.mip_gap * self.relative_to(value)

    def result(self, counts: list[tuple[int, ...]], value: float, bound: float) -> StageResult:
        """The stage's outcome for this incumbent and bound (gap unknown without a finite bound)."""
        if not math.isfinite(bound):
            return StageResult(counts, value, bound, None, False)
        gap = float(max(value - bound, 0.0) / self.relative_to(value))
        return StageResult(counts, float(value), float(bound), gap, gap <= self.mip_gap)


@dataclass
class StageResult:
    """The stage's incumbent (one pattern per model), its objective, the best bound and the gap."""

    counts: list[tuple[int, ...]]
    value: float
    bound: float
    gap: float | None
    proven: bool


class Decomposition:
    """Per-model data, the pattern pool shared by all stages, pricing and the restricted master."""

    def __init__(self, prep: Prepared, coupled: list[ModelDemand], tau: float, budget: Budget) -> None:
        self.prep = prep
        self.models = coupled
        self.tau = tau
        self.budget = budget
        self.types = sorted(prep.limited)
        tix = {t: k for k, t in enumerate(self.types)}
        fixed = np.zeros(len(self.types))
        serving = {v.name for m in coupled for v in prep.usable[m.name]}
        for v in prep.variants:  # excluded variants held at their floor on limited types
            if v.name not in serving and v.name not in prep.rate and v.accelerator in tix:
                fixed[tix[v.accelerator]] += v.accelerators_per_replica * v.min_replicas
        self.capacity = np.array([float(prep.inventory[t]) for t in self.types]) - fixed
        self.variants = [list(prep.usable[m.name]) for m in coupled]
        self.static: list[list[StaticRow]] = []
        for m, vs in zip(coupled, self.variants):
            self.static.append(
                [
                    (
                        prep.rate[v.name],
                        prep.cost[v.name],
                        tix.get(v.accelerator, -1),
                        v.accelerators_per_replica,
                        v.current_replicas,
                        v.min_replicas,
                        replica_ceiling(m.load_rps, prep.rate[v.name], v),
                    )
                    for v in vs
                ]
            )
        self.pool: list[dict[tuple[int, ...], Column]] = [{} for _ in coupled]
        for j in range(len(coupled) if SEED_POOLS else 0):
            self._seed(j)

    def _seed(self, j: int) -> None:
        """Start model j's pool with its floors alone and with each variant alone covering the load:
        the first master LP can then mix every variant, which saves most of the first rounds of
        column generation (whose prices are otherwise far off)."""
        rows = self.static[j]
        floors = [lo for *_, lo, _ in rows]
        self.column(j, floors)
        left = self.models[j].load_rps - sum(r * lo for (r, *_), lo in zip(rows, floors))
        for i, (r, _, _, _, _, lo, hi) in enumerate(rows):
            counts = list(floors)
            counts[i] = min(hi, lo + max(int(math.ceil(left / r - 1e-9)), 0))
            self.column(j, counts)

    # -- patterns ------------------------------------------------------------------------------------

    def column(self, j: int, counts: Sequence[int]) -> Column:
        """The (pooled) column of model j with these counts."""
        key = tuple(int(k) for k in counts)
        col = self.pool[j].get(key)
        if col is None:
            use = np.zeros(len(self.types))
            cost = capacity = 0.0
            for (r, c, t, a, cur, _, _), k in zip(self.static[j], key):
                if t >= 0:
                    use[t] += a * k
                cost += c * k + self.tau * c * abs(k - cur)
                capacity += r * k
            col = self.pool[j][key] = Column(key, use, cost, unserved_load(self.models[j].load_rps, capacity))
        return col

    def items(self, j: int, lam: np.ndarray, sigma: float) -> list[Item]:
        """Model j's variants priced at ``lam`` per accelerator and ``sigma`` per unit of cost."""
        st = sigma * self.tau
        return [
            Item(r, sigma * c + (lam[t] * a if t >= 0 else 0.0), st * c, cur, lo, hi, t, a)
            for r, c, t, a, cur, lo, hi in self.static[j]
        ]

    def search(
        self, j: int, lam: np.ndarray, weight: float, ucap: float, sigma: float, room: np.ndarray | None = None
    ) -> Pattern:
        """Model j's best pattern at prices ``lam`` (within ``room`` when given)."""
        self.budget.searches += 1
        return best_pattern(
            self.models[j].load_rps, ucap, weight, self.items(j, lam, sigma), room, work=self.budget.nodes
        )

    def objective(self, stage: Stage, j: int, col: Column) -> float:
        return float(stage.weight[j] * col.unserved + stage.sigma * col.cost)

    # -- one stage -------------------------------------------------------------------------------------

    def solve_stage(self, stage: Stage, incumbent: list[tuple[int, ...]], seconds: float) -> StageResult:
        """Column generation, then the best integer choice of patterns; see the module docstring."""
        master = _Master(self, stage)
        for j in range(len(self.models)):
            for col in self.pool[j].values():
                master.add(j, col)
        chosen = [master.include(j, self.column(j, counts)) for j, counts in enumerate(incumbent)]
        best_value: float = sum(master.obj[i] for i in chosen)
        deadline = self.budget.spent() + seconds
        bound = -math.inf

        def closed(aim: float = 1.0) -> bool:
            return best_value - bound <= aim * stage.tolerance(best_value)

        # column generation: stop when nothing prices out, the bound meets the incumbent or time is up.
        # With SMOOTHING, prices are smoothed toward those of the best bound so far (Wentges); a round
        # that finds nothing at the smoothed prices is repeated at the master's own.
        center: tuple[np.ndarray, np.ndarray] | None = None
        while self.budget.spent() < deadline - (1 - CG_SHARE) * seconds:
            duals = master.solve_lp()
            if duals is None:
                break
            lp_value, pi, lam, mu = duals
            added = 0
            for alpha in (SMOOTHING, 0.0) if center is not None and SMOOTHING > 0 else (0.0,):
                at = (
                    (lam, mu)
                    if alpha == 0.0 or center is None
                    else (alpha * center[0] + (1 - alpha) * lam, alpha * center[1] + (1 - alpha) * mu)
                )
                round_bound, found = self.lagrangian(stage, *at)
                if all(f.exact for f in found) and round_bound > bound:
                    bound, center = round_bound, (np.asarray(at[0], dtype=float), np.asarray(at[1], dtype=float))
                added = self._add_priced(master, found, pi, lam, mu)
                if added:
                    break
            if added == 0 or closed() or lp_value - bound <= 0.1 * stage.tolerance(best_value):
                break
        # the incumbent: best choice of the generated patterns, then best answers in what is left
        for round_ in range(RESPONSE_ROUNDS + 1):
            if closed(AIM) or self.budget.spent() >= deadline:
                break
            if round_ > 0 and self._respond(master, stage, chosen) == 0:
                break
            picked = master.solve_ip(
                chosen, bound + AIM * stage.tolerance(best_value), best_value, max(deadline - self.budget.spent(), 0.05)
            )
            if picked is not None:
                value = sum(master.obj[i] for i in picked)
                if value < best_value - 1e-12 * max(1.0, abs(best_value)):
                    chosen, best_value = picked, value
        return stage.result([master.cols[i][1].counts for i in chosen], best_value, bound)

    def _add_priced(
        self, master: _Master, found: list[Pattern], pi: np.ndarray, lam: np.ndarray, mu: np.ndarray
    ) -> int:
        """Add the patterns whose reduced cost at the master's prices is negative; returns how many."""
        added = 0
        for j, pattern in enumerate(found):
            if pattern.counts is None:
                continue
            col = self.column(j, pattern.counts)
            if master.reduced_cost(j, col, pi, lam, mu) < -1e-9 * max(1.0, abs(pi[j])):
                added += master.add(j, col) is not None
        return added

    def lagrangian(self, stage: Stage, lam: np.ndarray, mu: np.ndarray) -> tuple[float, list[Pattern]]:
        """The Lagrangian bound of the stage at prices ``lam`` (per type) and ``mu`` (per frozen level),
        both >= 0, and every model's best pattern at those prices.

        Weak duality: for any allocation meeting the inventory and level rows, its objective is at
        least ``sum_j (priced optimum of j) - lam . capacity - mu . level caps``.  Valid only when every
        search was exact (``Pattern.exact``).
        """
        lam = np.maximum(np.asarray(lam, dtype=float), 0.0)
        mu = np.maximum(np.asarray(mu, dtype=float), 0.0)
        level_of = {j: q for q, (members, _) in enumerate(stage.rows) for j in members}
        bound = -float(lam @ self.capacity) - sum(float(m) * cap for m, (_, cap) in zip(mu, stage.rows))
        found = []
        for j in range(len(self.models)):
            q = level_of.get(j)
            weight = float(stage.weight[j]) + (float(mu[q]) if q is not None else 0.0)
            pattern = self.search(j, lam, weight, float(stage.ucap[j]), stage.sigma)
            bound += pattern.value
            found.append(pattern)
        return bound, found

    def _respond(self, master: _Master, stage: Stage, chosen: list[int]) -> int:
        """Add each model's best pattern within the inventory the others' chosen patterns leave
        (a frozen level's model may not leave more unserved than it does now); returns how many."""
        cols = [master.cols[i][1] for i in chosen]
        use = sum((c.use for c in cols), np.zeros(len(self.types)))
        zero = np.zeros(len(self.types))
        added = 0
        for j, mine in enumerate(cols):
            ucap = float(stage.ucap[j])
            if j in master.level_of:
                ucap = min(ucap, mine.unserved)
            found = self.search(j, zero, float(stage.weight[j]), ucap, stage.sigma, self.capacity - (use - mine.use))
            if found.counts is not None:
                added += master.add(j, self.column(j, found.counts)) is not None
        return added


class _Master:
    """The restricted master problem of one stage in HiGHS (rows: one per model, per limited type,
    per frozen level; one column per pattern)."""

    def __init__(self, dec: Decomposition, stage: Stage) -> None:
        import highspy

        self.highspy = highspy
        self.dec = dec
        self.stage = stage
        self.h = h = deterministic_highs()
        self.n_models = n = len(dec.models)
        self.n_types = t = len(dec.types)
        inf = highspy.kHighsInf
        caps = [cap for _, cap in stage.rows]
        lower = np.concatenate([np.ones(n), np.full(t + len(caps), -inf)])
        upper = np.concatenate([np.ones(n), dec.capacity, np.array(caps, dtype=float)])
        h.addRows(
            len(lower), lower, upper, 0, np.zeros(len(lower), dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0)
        )
        self.level_of = {j: q for q, (members, _) in enumerate(stage.rows) for j in members}
        self.cols: list[tuple[int, Column]] = []
        self.obj: list[float] = []
        self.index: dict[tuple[int, tuple[int, ...]], int] = {}
        self.pending: list[tuple[float, list[int], list[float]]] = []
        self.runtime = 0.0

    def add(self, j: int, col: Column) -> int | None:
        """Add model j's column unless present or inadmissible (more unserved than the stage allows);
        returns its index, or None when inadmissible."""
        key = (j, col.counts)
        if key in self.index:
            return self.index[key]
        cap = float(self.stage.ucap[j])
        if col.unserved > cap + 1e-9 * max(1.0, cap):
            return None
        return self._insert(j, col)

    def include(self, j: int, col: Column) -> int:
        """Add model j's column even when inadmissible (the incumbent's own); returns its index."""
        found = self.index.get((j, col.counts))
        return found if found is not None else self._insert(j, col)

    def _insert(self, j: int, col: Column) -> int:
        key = (j, col.counts)
        idx = [j]
        val = [1.0]
        for t in np.flatnonzero(col.use):
            idx.append(self.n_models + int(t))
            val.append(float(col.use[t]))
        q = self.level_of.get(j)
        if q is not None and col.unserved > 0:
            idx.append(self.n_models + self.n_types + q)
            val.append(col.unserved)
        obj = self.dec.objective(self.stage, j, col)
        self.pending.append((obj, idx, val))
        self.index[key] = len(self.cols)
        self.cols.append((j, col))
        self.obj.append(obj)
        return len(self.cols) - 1

    def flush(self) -> None:
        """Hand the columns added since the last call to HiGHS, in one call."""
        if not self.pending:
            return
        starts = np.cumsum([0] + [len(idx) for _, idx, _ in self.pending[:-1]]).astype(np.int32)
        index = np.fromiter((i for _, idx, _ in self.pending for i in idx), dtype=np.int32)
        value = np.fromiter((v for _, _, val in self.pending for v in val), dtype=float)
        n = len(self.pending)
        self.h.addCols(
            n, np.array([obj for obj, _, _ in self.pending]), np.zeros(n), np.ones(n), len(index), starts, index, value
        )
        self.dec.budget.searches += n * COLUMN_SEARCHES
        self.pending = []

    def _run(self, seconds: float) -> None:
        self.flush()
        self.h.setOptionValue("time_limit", max(seconds, 0.01))  # per run; getRunTime() accumulates
        self.h.run()
        now = float(self.h.getRunTime())  # the solver's run clock accumulates over runs
        self.dec.budget.solver += now - self.runtime
        self.runtime = now

    def _integrality(self, integer: bool) -> None:
        self.flush()
        n = len(self.cols)
        self.h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, 1 if integer else 0, dtype=np.uint8))

    def solve_lp(self) -> Duals | None:
        """(LP value, pi per model, lam per type >= 0, mu per frozen level >= 0), or None."""
        self._integrality(False)
        self._run(max(self.dec.budget.left(), 0.05))
        if self.h.getModelStatus() != self.highspy.HighsModelStatus.kOptimal:
            return None
        dual = np.asarray(self.h.getSolution().row_dual, dtype=float)
        n, t = self.n_models, self.n_types
        value = float(self.h.getInfo().objective_function_value)
        return value, dual[:n], np.maximum(-dual[n : n + t], 0.0), np.maximum(-dual[n + t :], 0.0)

    def reduced_cost(self, j: int, col: Column, pi: np.ndarray, lam: np.ndarray, mu: np.ndarray) -> float:
        """Objective of the column minus what it is worth at the master's prices."""
        q = self.level_of.get(j)
        worth = float(pi[j]) - float(lam @ col.use) - (float(mu[q]) * col.unserved if q is not None else 0.0)
        return self.dec.objective(self.stage, j, col) - worth

    def solve_ip(self, start: list[int], target: float, incumbent: float, seconds: float) -> list[int] | None:
        """Best one-pattern-per-model choice found within ``seconds``, warm-started with ``start``.

        Reduced-cost filtering: with the master LP at value ``z``, any choice of value ``<= t`` only
        uses columns of reduced cost ``<= t - z``.  So the choice is first sought among the columns
        that could reach ``target`` (few: the LP's own and its near ties), and only if that finds
        nothing at the target among those that could improve on ``incumbent`` at all.
        Returns the chosen column per model, or None.
        """
        duals = self.solve_lp()
        if duals is None:
            return None
        lp_value = duals[0]
        rc = np.asarray(self.h.getSolution().col_dual, dtype=float)
        best: list[int] | None = None
        rounded = self.round(np.asarray(self.h.getSolution().col_value, dtype=float), start) if ROUND_LP else None
        if rounded is not None:
            best = rounded
            if sum(self.obj[i] for i in rounded) <= target:
                return rounded
            if sum(self.obj[i] for i in rounded) < sum(self.obj[i] for i in start):
                start = rounded
        until = self.dec.budget.spent() + seconds
        for limit in (target, incumbent):
            if limit - lp_value < 0 or self.dec.budget.left() <= 0:
                continue
            keep = rc <= (limit - lp_value) + 1e-9 * max(1.0, abs(limit))
            keep[start] = True
            picked = self._ip(start, keep, target, until - self.dec.budget.spent())
            if picked is not None:
                best = picked
                value = sum(self.obj[i] for i in picked)
                if value <= target:
                    break
                start = picked
        return best

    def round(self, x: np.ndarray, start: list[int]) -> list[int] | None:
        """A choice near the LP solution ``x``: each model's largest column, then moves off over-used
        rows (least objective added per unit of over-use removed), then improving moves that fit.
        ``None`` if the over-use cannot be removed."""
        n = len(self.cols)
        model = np.fromiter((j for j, _ in self.cols), dtype=np.int64, count=n)
        obj = np.asarray(self.obj, dtype=float)
        rows = self.n_types + len(self.stage.rows)
        use = np.zeros((n, rows))  # per column: accelerators per type, then unserved per frozen level
        for i, (j, col) in enumerate(self.cols):
            use[i, : self.n_types] = col.use
            q = self.level_of.get(j)
            if q is not None:
                use[i, self.n_types + q] = col.unserved
        cap = np.concatenate([self.dec.capacity, [c for _, c in self.stage.rows]])
        order = np.lexsort((np.arange(n), -x, model))  # per model, largest x first
        pick = np.array(start, dtype=np.int64)
        first = np.ones(n, dtype=bool)
        first[1:] = model[order][1:] != model[order][:-1]
        pick[model[order][first]] = order[first]
        total = use[pick].sum(axis=0)
        for _ in range(2 * self.n_models):
            over = np.maximum(total - cap, 0.0)
            if not (over > 1e-9 * np.maximum(1.0, cap)).any():
                break
            delta = use - use[pick[model]]
            freed = np.minimum(np.maximum(-delta, 0.0), over).sum(axis=1)
            fits = ((total + delta <= cap + 1e-9 * np.maximum(1.0, cap)) | (delta <= 0)).all(axis=1)
            score = np.where((freed > 1e-12) & fits, (obj - obj[pick[model]]) / np.maximum(freed, 1e-12), np.inf)
            i = int(np.argmin(score))
            if not np.isfinite(score[i]):
                return None
            total += delta[i]
            pick[model[i]] = i
        else:
            return None
        for _ in range(2 * self.n_models):  # improving moves that keep every row within its cap
            delta = use - use[pick[model]]
            fits = (total + delta <= cap + 1e-9 * np.maximum(1.0, cap)).all(axis=1)
            gain = np.where(fits, obj - obj[pick[model]], np.inf)
            i = int(np.argmin(gain))
            if not gain[i] < -1e-9 * max(1.0, abs(obj[pick[model[i]]])):
                break
            total += delta[i]
            pick[model[i]] = i
        return [int(i) for i in pick]

    def _ip(self, start: list[int], keep: np.ndarray, target: float, seconds: float) -> list[int] | None:
        hs = self.highspy
        n = len(self.cols)
        every = np.arange(n, dtype=np.int32)
        self._integrality(True)
        self.h.changeColsBounds(n, every, np.zeros(n), keep.astype(float))
        sol = hs.HighsSolution()
        values = np.zeros(n)
        values[start] = 1.0
        sol.col_value = values.tolist()
        sol.value_valid = True
        self.h.setSolution(sol)
        self.h.setOptionValue("objective_target", target)
        self.h.setOptionValue("mip_rel_gap", 1e-6)
        self._run(seconds)
        self.h.setOptionValue("objective_target", -hs.kHighsInf)
        found = self.h.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible
        x = np.asarray(self.h.getSolution().col_value) if found else None
        self.h.changeColsBounds(n, every, np.zeros(n), np.ones(n))
        if x is None:
            return None
        picked: list[int | None] = [None] * self.n_models
        for i, (j, _) in enumerate(self.cols):
            if x[i] > 0.5:
                picked[j] = i
        if any(i is None for i in picked):
            return None
        return picked  # type: ignore[return-value]
