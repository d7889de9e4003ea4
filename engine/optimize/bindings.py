"""One cycle for a Kthena AutoscalingPolicyBinding, as a pure function of its inputs.

Homogeneous bindings (``scalingConfiguration``) scale one target: the policy's HPA-style
recommendation over the target's instances, then behaviour correction (stable windows, rate limits,
panic mode). Heterogeneous bindings (``optimizerConfiguration``) compute the same recommendation for
the total over all groups, then :func:`engine.optimize.scaling.distribution.distribute` pours it into the groups by cost.

The scaling window state travels in ``status`` (``history``, ``panicModeEnd``): each run is a fresh
process, so :func:`plan_binding` reads it from the old status and returns the new one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.api.kthena import AutoscalingPolicySpec, ModelSpec
from engine.api.meta import format_time
from engine.optimize.scaling.behavior import Behavior, ScalingState, apply_scale_to_zero, correct, parse_duration
from engine.optimize.scaling.distribution import Group, distribute
from engine.optimize.scaling.recommendation import recommend
from engine.perf.saturation import REASON_METRICS_AVAILABLE as METRICS_AVAILABLE
from engine.perf.saturation import REASON_METRICS_UNAVAILABLE as METRICS_UNAVAILABLE
from engine.perf.saturation import REASON_OPTIMIZATION_SUCCEEDED as REASON_SUCCEEDED
from engine.status import REASON_INVALID, REASON_TARGET_MISSING, ConditionUpdate, set_conditions
from engine.units import parse_quantity

REASON_POLICY_MISSING = "PolicyNotFound"
ANNOTATION_SCALE_TO_ZERO_GRACE = "modelplane.io/scale-to-zero-grace-period"
"""Binding annotation: how long the recommendation must stay at 0 before the targets go to 0 (a
Duration such as ``30s``). The rollout of a Kthena Model writes its backends' ``scaleToZeroGracePeriod``
here; it can also be set by hand on a binding that no Model owns."""
REASON_NO_METRICS = METRICS_UNAVAILABLE
ANNOTATION_SCALE_GROUPS = "modelplane.io/scale-groups"
"""Binding annotation: JSON ``{target name: [{"name", "perGroup", "serves"}...]}``. A target named here is a
serving group scaled as one unit (Kthena scales a P/D ModelServing group, never its roles apart): its
bounds and cost are per group, and each member workload gets ``groups x perGroup`` replicas, so the
declared ratio (e.g. prefill 2 : decode 1) holds at any total. ``serves: false`` marks members whose pods
serve no metrics (ray workers of a multi-node leader)."""


@dataclass(frozen=True)
class GroupMember:
    """One workload of a serving group: ``per_group`` of its replicas make up one group."""

    name: str
    api_version: str
    kind: str
    per_group: int
    current: int | None
    serves: bool = True


@dataclass(frozen=True)
class BindingTarget:
    """One scale target of a binding, with its bounds and cost (cost only for heterogeneous groups).

    With ``members`` the target is a serving group: ``current``, the bounds and ``cost`` count groups,
    and the decision gives every member ``groups x per_group`` replicas."""

    name: str
    namespace: str
    api_version: str
    kind: str
    current: int | None
    min_replicas: int
    max_replicas: int
    cost: float = 0.0
    members: tuple[GroupMember, ...] = ()
    priced: bool = True
    """Whether the binding gives this target a cost (a homogeneous binding, or a param without ``cost``, does
    not: its cost is unknown, not zero)."""


def parse_scale_groups(annotations: Mapping[str, str]) -> dict[str, list[tuple[str, int, bool]]]:
    """The groups of :data:`ANNOTATION_SCALE_GROUPS`: target name -> [(member, perGroup, serves)].
    ``ValueError`` naming the problem for malformed JSON or a perGroup below 1."""
    text = annotations.get(ANNOTATION_SCALE_GROUPS)
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"annotation {ANNOTATION_SCALE_GROUPS}: not JSON ({exc})") from None
    groups: dict[str, list[tuple[str, int, bool]]] = {}
    for target, members in data.items() if isinstance(data, dict) else ():
        parsed = []
        for member in members if isinstance(members, list) else ():
            per = member.get("perGroup") if isinstance(member, dict) else None
            if not isinstance(per, int) or isinstance(per, bool) or per < 1 or not member.get("name"):
                raise ValueError(
                    f"annotation {ANNOTATION_SCALE_GROUPS}: group {target!r} needs members with a name and perGroup >= 1"
                )
            parsed.append((str(member["name"]), per, bool(member.get("serves", True))))
        if parsed:
            groups[str(target)] = parsed
    return groups


def group_count(members: tuple[GroupMember, ...]) -> int | None:
    """Whole groups the members' current replicas make up (the scarcest member decides); None when one is missing."""
    if any(m.current is None for m in members):
        return None
    return min((m.current or 0) // m.per_group for m in members) if members else None


def group_instances(pod_instances: list[dict[str, float]], groups: int) -> list[dict[str, float]]:
    """A group's serving pods as ``groups`` instances carrying the pods' mean per metric: the
    recommendation then counts groups, as Kthena counts a ModelServing group as one instance."""
    if groups <= 0 or not pod_instances:
        return []
    names = {name for inst in pod_instances for name in inst}
    mean = {}
    for name in names:
        values = [inst[name] for inst in pod_instances if name in inst]
        mean[name] = sum(values) / len(values)
    return [dict(mean) for _ in range(groups)]


@dataclass(frozen=True)
class BindingInputs:
    """Everything one binding's cycle decides from."""

    namespace: str
    name: str
    generation: int | None
    policy_name: str | None
    policy: AutoscalingPolicySpec | None  # the AutoscalingPolicy spec, None when it does not exist or is invalid
    heterogeneous: bool
    targets: list[BindingTarget]
    instances: list[dict[str, float]]
    unready: int = 0
    metrics_error: str | None = None
    cost_expansion_rate_percent: int = 200
    old_status: Mapping[str, Any] = field(default_factory=dict)
    scale_to_zero_grace_s: float | None = None
    """Seconds the recommendation must stay 0 before the targets reach 0 (None: no grace period)."""
    policy_invalid: str | None = None
    """Why the named AutoscalingPolicy could not be read (``field: reason``), when it exists but is invalid."""


@dataclass
class TargetDecision:
    """Desired replicas of one binding target."""

    name: str
    namespace: str
    api_version: str
    kind: str
    current: int | None
    desired: int | None
    cost: float = 0.0
    applied: bool = False
    """``actuation.applied`` as WVA means it, for this target's mode (:mod:`engine.optimize.actuation`)."""
    priced: bool = True
    """Whether ``cost`` is known (:attr:`BindingTarget.priced`)."""
    scaled: bool = False
    """Modelplane wrote the target's scale subresource this cycle."""
    mode: str = "scale"
    """The target's actuation mode (:mod:`engine.optimize.actuation`), resolved when the decision is applied."""

    @property
    def changes_replicas(self) -> bool:
        """Whether the target must be scaled."""
        return self.desired is not None and self.current is not None and self.desired != self.current


@dataclass
class BindingDecision:
    """The outcome for one binding: per-target replicas, condition, and the new status."""

    namespace: str
    name: str
    policy: str | None
    targets: list[TargetDecision]
    reason: str
    message: str
    ready: bool
    recommended: int | None = None
    state: ScalingState | None = None


def _metric_targets(policy: AutoscalingPolicySpec) -> dict[str, float]:
    """metricName -> target value (Quantity) of the policy (the API model requires at least one metric,
    each named). Kthena's admission webhook refuses a target value that is not above 0 or is infinite, and a
    metric named twice; so does this: a target of 0 or below reads any load as none and scales down."""
    targets: dict[str, float] = {}
    for index, metric in enumerate(policy.metrics):
        try:
            value = float(parse_quantity(metric.target_value))
        except ValueError as exc:
            raise ValueError(f"spec.metrics[{index}].targetValue: {exc}") from None
        if not 0.0 < value < math.inf:
            raise ValueError(
                f"spec.metrics[{index}].targetValue: metric target value must be greater than 0 and not equal to "
                f"infinity, got {metric.target_value!r}"
            )
        if metric.metric_name in targets:
            raise ValueError(
                f"spec.metrics[{index}].metricName: duplicate metric name {metric.metric_name} is not allowed"
            )
        targets[metric.metric_name] = value
    return targets


def _decisions(target: BindingTarget, replicas: int | None, hold: bool = False) -> list[TargetDecision]:
    """The target's decision; a group's is one per member (``replicas`` groups x perGroup each; the
    group's cost is counted once, on its first member)."""
    if not target.members:
        cost = target.cost if hold else target.cost * (replicas or 0)
        return [
            TargetDecision(
                target.name,
                target.namespace,
                target.api_version,
                target.kind,
                target.current,
                replicas,
                cost,
                priced=target.priced,
            )
        ]
    decisions = []
    for index, member in enumerate(target.members):
        desired = member.current if hold or replicas is None else replicas * member.per_group
        cost = 0.0 if index else (target.cost if hold else target.cost * (replicas or 0))
        decisions.append(
            TargetDecision(
                member.name,
                target.namespace,
                member.api_version,
                member.kind,
                member.current,
                desired,
                cost,
                priced=target.priced,
            )
        )
    return decisions


def _hold(inputs: BindingInputs, reason: str, message: str) -> BindingDecision:
    """Keep every target where it is and report why."""
    targets = [d for t in inputs.targets for d in _decisions(t, t.current, hold=True)]
    return BindingDecision(inputs.namespace, inputs.name, inputs.policy_name, targets, reason, message, ready=False)


def plan_binding(inputs: BindingInputs, now: datetime) -> BindingDecision:
    """Decide the replicas of every target of one binding."""
    if inputs.policy is None and inputs.policy_invalid:
        return _hold(
            inputs, REASON_INVALID, f"AutoscalingPolicy {inputs.policy_name} is invalid: {inputs.policy_invalid}"
        )
    if inputs.policy is None:
        return _hold(
            inputs, REASON_POLICY_MISSING, f"AutoscalingPolicy {inputs.policy_name!r} not found in {inputs.namespace}"
        )
    missing = [t.name for t in inputs.targets if t.current is None]
    if missing or not inputs.targets:
        what = ", ".join(missing) if missing else "no targets configured"
        return _hold(inputs, REASON_TARGET_MISSING, f"scale target(s) not found: {what}")
    try:
        metric_targets = _metric_targets(inputs.policy)
        behavior = Behavior.from_model(inputs.policy.behavior)
    except ValueError as exc:
        return _hold(inputs, REASON_INVALID, f"AutoscalingPolicy {inputs.policy_name}: {exc}")
    if inputs.metrics_error:
        return _hold(inputs, REASON_NO_METRICS, f"metrics unavailable, holding replicas: {inputs.metrics_error}")

    current = sum(t.current or 0 for t in inputs.targets)
    low = sum(t.min_replicas for t in inputs.targets)
    high = sum(t.max_replicas for t in inputs.targets)
    tolerance = float(10 if inputs.policy.tolerance_percent is None else inputs.policy.tolerance_percent) / 100.0
    recommended = recommend(current, low, high, tolerance, metric_targets, inputs.instances, unready=inputs.unready)
    if recommended is None:
        return _hold(
            inputs,
            REASON_NO_METRICS,
            f"no samples of {', '.join(sorted(metric_targets))} for the target's instances; holding replicas",
        )

    state = ScalingState.from_dict(inputs.old_status)
    corrected, state = correct(current, recommended, behavior, state, now, min_replicas=low, max_replicas=high)
    corrected, state = apply_scale_to_zero(corrected, state, inputs.scale_to_zero_grace_s, now, current=current)
    if inputs.heterogeneous:
        groups = [Group(cost=t.cost, min_replicas=t.min_replicas, max_replicas=t.max_replicas) for t in inputs.targets]
        per_target = distribute(groups, corrected, inputs.cost_expansion_rate_percent)
    else:
        per_target = [corrected]
    targets = [d for t, replicas in zip(inputs.targets, per_target) for d in _decisions(t, replicas)]
    action = "scale-up" if corrected > current else "scale-down" if corrected < current else "no-change"
    message = f"Kthena policy {inputs.policy_name}: recommended {recommended}, corrected {corrected} ({action})"
    if inputs.heterogeneous:
        message += " distributed as " + ", ".join(f"{t.name}={t.desired}" for t in targets)
    return BindingDecision(
        inputs.namespace,
        inputs.name,
        inputs.policy_name,
        targets,
        REASON_SUCCEEDED,
        message,
        ready=True,
        recommended=recommended,
        state=state,
    )


def scale_to_zero_grace(annotations: Mapping[str, str], model_spec: ModelSpec | None) -> float | None:
    """The scale-to-zero grace period of a binding, in seconds: its annotation
    (:data:`ANNOTATION_SCALE_TO_ZERO_GRACE`) when set, else the longest ``scaleToZeroGracePeriod`` of the
    backends of the Kthena Model that owns it, else None. ``ValueError`` for a malformed duration."""
    if annotations.get(ANNOTATION_SCALE_TO_ZERO_GRACE):
        return parse_duration(annotations[ANNOTATION_SCALE_TO_ZERO_GRACE])
    graces = [
        parse_duration(backend.scale_to_zero_grace_period)
        for backend in (model_spec.backends if model_spec is not None else ())
        if backend.scale_to_zero_grace_period
    ]
    return max(graces) if graces else None


def binding_status(
    decision: BindingDecision,
    old: Mapping[str, Any],
    now: datetime,
    generation: int | None,
    metrics_ok: bool,
    metrics_message: str,
) -> dict[str, Any]:
    """The new status of an AutoscalingPolicyBinding: window state, replicas, conditions."""
    status: dict[str, Any] = dict(old)
    if decision.state is not None:
        status.update(decision.state.to_dict())
    if generation is not None:
        status["observedGeneration"] = generation
    status["currentReplicas"] = sum(t.current or 0 for t in decision.targets)
    desired = [t.desired for t in decision.targets if t.desired is not None]
    if desired:
        status["desiredReplicas"] = sum(desired)
    if any(t.changes_replicas and t.scaled for t in decision.targets):
        status["lastScaleTime"] = format_time(now)
    status["targets"] = [
        {
            "name": t.name,
            "namespace": t.namespace,
            "replicas": t.desired if t.desired is not None else (t.current or 0),
            "actuation": {"applied": t.applied},
        }
        for t in decision.targets
    ]
    metrics = ConditionUpdate(
        METRICS_AVAILABLE,
        "True" if metrics_ok else "False",
        METRICS_AVAILABLE if metrics_ok else METRICS_UNAVAILABLE,
        metrics_message,
    )
    ready = ConditionUpdate(
        "OptimizationReady", "True" if decision.ready else "False", decision.reason, decision.message
    )
    status["conditions"] = set_conditions(old.get("conditions"), (metrics, ready), now, generation)
    return status
