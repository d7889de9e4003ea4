"""The greedy baseline (WVA-style) and the top-up that serves load a solver left over.

:func:`greedy` is what a per-variant autoscaler does without an optimiser: models in priority order,
each takes the variant that serves its remaining load at the lowest cost with the inventory left.
It is the solver's starting point (every stage starts from it or improves on it), its fallback
without a MILP solver, and the yardstick of the quality benchmark.
"""

from __future__ import annotations

from engine.allocation.problem import (
    UNSERVED_TOL,
    Allocation,
    AllocationProblem,
    ModelDemand,
    Prepared,
    finish,
    prepare,
    served_capacity,
)
from engine.perf.sizing import replicas_needed


def greedy(problem: AllocationProblem) -> Allocation:
    """WVA-style greedy allocation, used as a baseline and as a fallback without a MILP solver.

    Floors first (``min_replicas``, in model priority order, as far as the inventory allows), then
    models in priority order (1 first, ties by name): each takes the variant that serves its
    remaining load at the lowest cost with the inventory left, then the next cheapest for whatever
    remains.  Status is ``"feasible"`` (``"infeasible"`` if the floors do not fit).
    """
    return greedy_prepared(prepare(problem))


def greedy_prepared(prep: Prepared) -> Allocation:
    """:func:`greedy` on an already prepared problem."""
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
        remaining = m.load_rps - served_capacity(prep, m, replicas)
        tried: set[str] = set()
        while remaining > UNSERVED_TOL * max(m.load_rps, 1.0):
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
    return finish(prep, replicas, "feasible" if floors_ok else "infeasible", None, "greedy")


def top_up(prep: Prepared, replicas: dict[str, int], models: list[ModelDemand]) -> bool:
    """Serve load left unserved while a replica still fits; returns whether anything was added.

    A MILP solver accepts ``sum r*x + u >= L`` violated by its tolerance, and a stage cut short by the
    time limit may leave room unused.  Load is only to be left unserved when the inventory (or
    ``max_replicas``) forces it, so add replicas where there is room, in priority order, cheapest
    per req/s first.
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
            if missing <= UNSERVED_TOL * max(m.load_rps, 1.0):
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
