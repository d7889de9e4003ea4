"""Heterogeneous distribution: how a target total of replicas splits over backends of different cost.

Decides each backend's replicas for an OptimizerConfiguration as Kthena's
``pkg/autoscaler/autoscaler/optimizer.go`` (NewOptimizerMeta and RestoreReplicasOfEachBackend): every
backend gets its minimum, and the rest is poured into blocks of growing size, cheapest first, so
capacity grows on cheap hardware and spills over to expensive hardware only in bulk.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

DEFAULT_COST_EXPANSION_RATE_PERCENT = 200
"""``OptimizerConfiguration.costExpansionRatePercent`` default."""


@dataclass(frozen=True)
class Group:
    """One backend of an OptimizerConfiguration: cost per replica and its replica bounds."""

    cost: float
    min_replicas: int
    max_replicas: int


def _as_group(item: Any) -> Group:
    """Accept a Group, an object with ``cost``/``min_replicas``/``max_replicas``, a dict or a tuple."""
    if isinstance(item, Group):
        return item
    if isinstance(item, Mapping):
        return Group(
            item["cost"],
            int(item.get("min_replicas", item.get("minReplicas", 0))),
            int(item.get("max_replicas", item.get("maxReplicas", 0))),
        )
    if hasattr(item, "cost"):
        return Group(item.cost, int(item.min_replicas), int(item.max_replicas))
    cost, low, high = item
    return Group(cost, int(low), int(high))


class _Block(NamedTuple):
    """A block of replicas of one group (``group`` is its index), priced as a whole."""

    cost: float
    group: int
    replicas: int


def scaling_blocks(
    groups: Iterable[Any], cost_expansion_rate_percent: int = DEFAULT_COST_EXPANSION_RATE_PERCENT
) -> list[tuple[int, int, float]]:
    """The fill order as ``(group_index, replicas, block_cost)``, cheapest first (ties: group order).

    Each group's capacity above its minimum is cut into blocks of 1, P, P^2, ... replicas
    (P = rate / 100, sizes truncated to integers and at least 1, the last one cut to what is
    left) costing ``cost * size``.  With rate 100 the whole capacity is a single block at the
    group's unit ``cost``; with rate < 100 every block is one replica.
    """
    blocks: list[_Block] = []
    factor = float(cost_expansion_rate_percent) / 100.0
    for index, group in enumerate(_as_group(g) for g in groups):
        left = group.max_replicas - group.min_replicas
        if left <= 0:
            continue
        if cost_expansion_rate_percent == 100:
            blocks.append(_Block(group.cost, index, left))
            continue
        size = 1.0
        while left > 0:
            take = min(left, max(int(min(size, left)), 1))
            blocks.append(_Block(group.cost * take, index, take))
            left -= take
            size *= factor
    blocks.sort(key=lambda b: (b.cost, b.group))
    return [(b.group, b.replicas, b.cost) for b in blocks]


def distribute(
    groups: Sequence[Any],
    total: int,
    cost_expansion_rate_percent: int = DEFAULT_COST_EXPANSION_RATE_PERCENT,
) -> list[int]:
    """Split ``total`` replicas over the groups, cheapest blocks first; one count per group, in order.

    Every group gets its minimum; ``total`` is clamped to ``[sum of minima, sum of maxima]``
    and the rest is poured into :func:`scaling_blocks` in order.
    """
    parsed = [_as_group(g) for g in groups]
    counts = [g.min_replicas for g in parsed]
    low = sum(counts)
    high = sum(g.max_replicas for g in parsed)
    left = max(min(int(total), high), low) - low
    for index, replicas, _cost in scaling_blocks(parsed, cost_expansion_rate_percent):
        if left <= 0:
            break
        take = min(left, replicas)
        counts[index] += take
        left -= take
    return counts
