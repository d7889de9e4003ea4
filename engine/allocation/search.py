"""The exact per-model search: the cheapest replica counts of one model's variants.

Every stage of the solver ends up asking the same small question about one model in isolation:
with each variant's replicas priced (cost, transition penalty, and in the decomposition a price per
accelerator), and each req/s left unserved charged a weight, which integer replica counts are
cheapest?  :func:`best_pattern` answers it exactly by depth-first branch and bound; the models
that touch no limited accelerator are sized with it directly (:func:`size_alone`), and the
decomposition prices its columns with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from engine.allocation.problem import UNSERVED_TOL, Prepared, VariantOption
from engine.perf.queueing import replicas_needed

if TYPE_CHECKING:
    import numpy as np

NODE_LIMIT = 5_000
"""Default node budget of one search (beyond it the answer is the best found, not proven)."""


class Item(NamedTuple):
    """One variant as the search sees it.

    A count ``n`` costs ``price * n + move_price * |n - current|`` (``price >= move_price >= 0``, so the
    cost is convex and nondecreasing in ``n``) and serves ``rate * n`` req/s; ``lo <= n <= hi``;
    ``type`` indexes the ``room`` of accelerators left per type (``-1``: unlimited), of which a
    replica takes ``accelerators``.
    """

    rate: float
    price: float
    move_price: float
    current: int
    lo: int
    hi: int
    type: int
    accelerators: int


class Pattern(NamedTuple):
    """A search's answer: objective ``value`` (``inf`` if infeasible), counts in item order (``None``
    if infeasible) and whether the search finished within its node budget (only then is it proven)."""

    value: float
    counts: list[int] | None
    exact: bool


def best_pattern(
    load: float,
    ucap: float,
    weight: float,
    items: Sequence[Item],
    room: Sequence[float] | np.ndarray | None = None,
    node_limit: int = NODE_LIMIT,
    work: list[int] | None = None,
) -> Pattern:
    """Exact optimum of one model's priced problem.

    Minimise ``weight * u + sum_v g_v(x_v)`` subject to ``sum_v rate_v x_v + u >= load``,
    ``0 <= u <= ucap`` and ``lo_v <= x_v <= hi_v`` integer, with ``g_v`` as in :class:`Item`; with
    ``room`` (accelerators left per type index), ``sum accelerators_v x_v <= room[type]`` too.

    Branch and bound over the variants in order of marginal price per req/s, most replicas of the
    cheaper variant first, pruned by the fractional bound of what is left (the cheaper of the next
    variant's ratio and the unserved weight).  ``work[0]`` counts the nodes visited.
    """
    n = len(items)
    base = [it.price * it.lo + it.move_price * abs(it.lo - it.current) for it in items]
    spent0 = sum(base)
    rem0 = load - sum(it.rate * it.lo for it in items)
    tol = UNSERVED_TOL * max(load, 1.0)
    floors = [it.lo for it in items]
    used: dict[int, float] = {}
    if room is not None:
        for it in items:
            if it.type >= 0:
                used[it.type] = used.get(it.type, 0.0) + it.accelerators * it.lo
        if any(u > room[t] + 1e-9 for t, u in used.items()):
            return Pattern(math.inf, None, True)
    if rem0 <= tol:
        return Pattern(spent0, floors, True)
    if weight <= 0.0 and rem0 <= ucap + tol:
        return Pattern(spent0, floors, True)
    # marginal price per req/s of each variant's cheapest replica above its floor
    slope = [(it.price - it.move_price) if it.current > it.lo else (it.price + it.move_price) for it in items]
    order = sorted(range(n), key=lambda i: (slope[i] / items[i].rate, i))
    ratio = [slope[i] / items[i].rate for i in order] + [math.inf]
    umin = weight if ucap > 0 else math.inf
    best = math.inf
    best_k: list[int] | None = None
    if rem0 <= ucap + tol:
        best, best_k = spent0 + weight * max(rem0, 0.0), [0] * n
    picks = [0] * n
    nodes = 0

    def dfs(j: int, rem: float, spent: float) -> None:
        nonlocal best, best_k, nodes
        nodes += 1
        if rem <= tol:
            if spent < best - 1e-12:
                best, best_k = spent, picks[:]
            return
        if rem <= ucap + tol and spent + weight * rem < best - 1e-12:
            best, best_k = spent + weight * rem, picks[:]
        if j == n or nodes > node_limit:
            return
        # the rest is covered by variants j.. (ratio >= ratio[j]) or, up to ucap, left unserved
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
    exact = nodes <= node_limit
    if best_k is None:
        return Pattern(math.inf, None, exact)
    counts = [0] * n
    for j, i in enumerate(order):
        counts[i] = items[i].lo + best_k[j]
    return Pattern(best, counts, exact)


def pattern_value(load: float, weight: float, items: Sequence[Item], counts: Sequence[int]) -> float:
    """Objective of :func:`best_pattern` at given counts."""
    cap = sum(it.rate * k for it, k in zip(items, counts))
    return weight * max(load - cap, 0.0) + sum(
        it.price * k + it.move_price * abs(k - it.current) for it, k in zip(items, counts)
    )


def replica_ceiling(load: float, rate: float, variant: VariantOption) -> int:
    """Most replicas a variant can usefully take: enough for the whole load alone (or its current
    count or floor, if larger), capped by ``max_replicas``."""
    hi = max(variant.min_replicas, variant.current_replicas, replicas_needed(load, rate, 0))
    if variant.max_replicas is not None:
        hi = min(hi, variant.max_replicas)
    return max(hi, variant.min_replicas)


def size_alone(
    load: float, variants: list[VariantOption], prep: Prepared, tau: float, node_limit: int = 200_000
) -> tuple[dict[str, int], bool]:
    """Cheapest replicas of one model's variants covering ``load``, with no shared inventory.

    Cost of variant v with n replicas: ``c_v*n + tau*c_v*|n - current_v|``, ``min <= n <= max``.
    If even every variant at its max cannot cover the load, all are at max (as much load served as
    possible).  Returns the counts and whether the search proved them optimal.
    """
    top = [v.max_replicas for v in variants if v.max_replicas is not None]
    if len(top) == len(variants) and sum(
        t * prep.rate[v.name] for t, v in zip(top, variants)
    ) < load - UNSERVED_TOL * max(load, 1.0):
        return {v.name: int(t) for v, t in zip(variants, top)}, True
    items = [
        Item(
            prep.rate[v.name],
            prep.cost[v.name],
            tau * prep.cost[v.name],
            v.current_replicas,
            v.min_replicas,
            replica_ceiling(load, prep.rate[v.name], v),
            -1,
            v.accelerators_per_replica,
        )
        for v in variants
    ]
    found = best_pattern(load, 0.0, 0.0, items, node_limit=node_limit)
    assert found.counts is not None  # the load is coverable (checked above)
    return {v.name: k for v, k in zip(variants, found.counts)}, found.exact
