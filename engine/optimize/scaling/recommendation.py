"""HPA-style recommendation: how many replicas a target's metrics ask for, before any smoothing.

Decides the recommended replica count from per-instance (or aggregate) metric values and their
targets, as Kthena's ``GetRecommendedInstances`` (``pkg/autoscaler/algorithm/recommendation.go``)
does with the HPA's semantics: a tolerance band around the target, conservative handling of missing
and unready instances, the maximum over metrics, clamped to the bounds. How far the replicas may
actually move is :mod:`engine.optimize.scaling.behavior`'s decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

MAX_RECOMMENDATION = 1_000_000_000
"""Upper cap of a single-metric recommendation (Kthena's int32 guard against infinite ratios)."""

DEFAULT_TOLERANCE_PERCENT = 10
"""``AutoscalingPolicySpec.tolerancePercent`` default."""


def tolerance_from_percent(tolerance_percent: int | float | None) -> float:
    """``tolerancePercent`` (10) -> the fraction :func:`recommend` expects (0.1); ``None`` -> default."""
    if tolerance_percent is None:
        tolerance_percent = DEFAULT_TOLERANCE_PERCENT
    return float(tolerance_percent) * 0.01


def _div(numerator: float, denominator: float) -> float:
    """IEEE-754 division as in Go: x/0 is +-Inf, 0/0 is NaN -- never an exception."""
    if denominator == 0:
        if numerator == 0 or math.isnan(numerator):
            return math.nan
        return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)
    return numerator / denominator


def _ceil_instances(value: float) -> int:
    """``ceil`` into [0, MAX_RECOMMENDATION]; NaN -> 0 and +Inf -> the cap (getCeilDesiredInstances)."""
    if math.isnan(value):
        return 0
    if value >= MAX_RECOMMENDATION:
        return MAX_RECOMMENDATION
    return max(0, math.ceil(value))


def _direction(ratio: float) -> int:
    """+1 when usage is at or above target (ratio >= 1, scale-up side), else -1 (NaN counts as -1)."""
    return 1 if ratio >= 1.0 else -1


def _within_tolerance(ratio: float, tolerance: float) -> bool:
    """``|ratio - 1| <= tolerance`` (inclusive band; NaN is never within)."""
    return abs(ratio - 1.0) <= tolerance


def _external_desired(current: int, tolerance: float, target: float, value: float) -> int:
    """External (aggregate) metric: desired = value / target; keep current inside the band."""
    desired = _div(value, target)
    if _within_tolerance(_div(desired, current), tolerance):
        return current
    return _ceil_instances(desired)


def _instance_desired(
    current: int,
    tolerance: float,
    name: str,
    target: float,
    unready: int,
    instances: Sequence[Mapping[str, float]],
    reporter_counts: Mapping[str, int] | None,
    metric_unready_counts: Mapping[str, int] | None,
) -> int | None:
    """Per-instance metric: HPA's ratio with missing/unready instance handling; None = no data."""
    values = [inst[name] for inst in instances if name in inst]
    total = float(sum(values))
    count = len(values)
    missing = len(instances) - count
    unready_count = unready
    if reporter_counts is not None and name in reporter_counts:
        # Metric aggregated upstream: the count of reporters is known, not the instances.
        unready_count = (metric_unready_counts or {}).get(name, 0)
        count = reporter_counts[name]
        missing = max(current - unready_count - count, 0)
    if count == 0:
        return None
    ratio = _div(_div(total, count), target)
    add_unready = unready_count > 0 and _direction(ratio) > 0
    if not add_unready and missing == 0:
        if _within_tolerance(ratio, tolerance):
            return current
        return _ceil_instances(ratio * count)
    # Conservative re-estimate: missing instances at 100% of target when scaling down
    # (0 when scaling up), unready instances at 0 when scaling up.
    count += missing
    if _direction(ratio) < 0:
        total += missing * target
    if add_unready:
        count += unready_count
    new_ratio = _div(_div(total, count), target)
    if _within_tolerance(new_ratio, tolerance) or _direction(ratio) != _direction(new_ratio):
        return current
    desired = _ceil_instances(new_ratio * count)
    if (_direction(new_ratio) < 0 and desired > current) or (_direction(new_ratio) > 0 and desired < current):
        return current
    return desired


def recommend(
    current: int,
    min_replicas: int,
    max_replicas: int,
    tolerance: float,
    targets: Mapping[str, float],
    instances: Sequence[Mapping[str, float]],
    unready: int = 0,
    external: Mapping[str, float] | None = None,
    *,
    reporter_counts: Mapping[str, int] | None = None,
    metric_unready_counts: Mapping[str, int] | None = None,
) -> int | None:
    """Recommended replica count from metrics, or ``None`` when no metric has data (skip).

    ``tolerance`` is a FRACTION (Kthena passes ``tolerancePercent * 0.01``; use
    :func:`tolerance_from_percent`).  ``targets`` maps metric name -> target value per
    instance; ``instances`` holds one dict per READY instance (a missing key = that instance
    did not report the metric); ``unready`` counts instances not ready; ``external`` maps a
    metric name -> one aggregate value (desired = value / target, compared with current).

    Rules (Kthena GetRecommendedInstances, HPA semantics):

    * ``current < min`` -> ``min`` and ``current > max`` -> ``max``, before looking at metrics;
    * per metric ``ratio = mean / target`` over the instances that have it; inside the band
      ``|ratio - 1| <= tolerance`` the metric recommends ``current``, else ``ceil(ratio * n)``;
    * with missing or (on the scale-up side) unready instances, the ratio is recomputed with
      missing at 100% of target when scaling down / 0 when scaling up, unready at 0 when
      scaling up; if that lands in the band, flips direction, or would move against the
      original direction, the metric recommends ``current``;
    * the maximum over metrics, clamped to ``[min, max]``; a target of 0 or an infinite ratio
      caps at ``MAX_RECOMMENDATION`` before the clamp.

    ``reporter_counts``/``metric_unready_counts`` (optional) describe metrics whose instances
    were aggregated upstream: the number of reporters and of unready instances per metric.
    """
    if current < min_replicas:
        return min_replicas
    if current > max_replicas:
        return max_replicas
    external = external or {}
    best: int | None = None
    for name, target in targets.items():
        target = float(target)
        if name in external:
            desired: int | None = _external_desired(current, tolerance, target, float(external[name]))
        else:
            desired = _instance_desired(
                current, tolerance, name, target, unready, instances, reporter_counts, metric_unready_counts
            )
        if desired is not None:
            best = desired if best is None else max(best, desired)
    if best is None:
        return None
    return min(max(best, min_replicas), max_replicas)
