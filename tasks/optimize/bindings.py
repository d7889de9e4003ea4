"""What the optimize cycle reads about one Kthena AutoscalingPolicyBinding, and how its targets are named.

A binding's targets come from ``spec.optimizerConfiguration`` (heterogeneous) or ``spec.scalingConfiguration``
(:func:`binding_targets`). :func:`read_binding_inputs` reads, per binding, the current replicas through the
scale subresource (of each member, for a serving group), the targets' ready pods and their policy metrics
from the cycle's snapshot, into the :class:`~engine.optimize.bindings.BindingInputs` the planner decides on.
:func:`describe_bindings` adds what the allocation table shows (the model, each target's accelerator),
:func:`binding_grace_period` the scale-to-zero grace period, and :func:`binding_modes` each target's
actuation mode (engine.optimize.actuation).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.api.kthena import AutoscalingPolicyBinding, AutoscalingPolicyBindingSpec, Target
from engine.api.kthena import Model as KthenaModel
from engine.api.meta import ObjectMeta
from engine.api.registry import KTHENA_GROUP, MODEL, group_of
from engine.api.views import ScalableAsWritten, Workload
from engine.optimize.actuation import RECOMMEND, ActuationModeError, resource_mode, target_modes
from engine.optimize.bindings import (
    ANNOTATION_SCALE_TO_ZERO_GRACE,
    BindingInputs,
    BindingTarget,
    GroupMember,
    group_count,
    group_instances,
    parse_scale_groups,
    scale_to_zero_grace,
)
from engine.optimize.spec import accelerator_text
from engine.status import condition_is_true, status_as_read
from tasks.boundary import Accepted, parse_resource
from tasks.clients.cluster import Cluster, ObjectRef
from tasks.clients.cluster.errors import ClusterError, NotFound
from tasks.clients.cluster.objects import parse_selector, selector_matches
from tasks.clients.metrics.snapshot import MetricsSnapshot
from tasks.optimize.read import ClusterState, TargetReplicas
from tasks.tracking import quote, run_logger, task

log = logging.getLogger("modelplane.optimize")


def target_ref(target: Target, namespace: str) -> ObjectRef:
    """The ObjectRef of a binding's ``target.targetRef`` (defaults: apps/v1 Deployment, binding namespace).

    Args:
        target: One target of an AutoscalingPolicyBinding.
        namespace: The binding's namespace, the target's when its ref names none.

    Returns:
        The reference of the workload the target scales.
    """
    ref = target.target_ref
    return ObjectRef(ref.api_version or "apps/v1", ref.kind or "Deployment", ref.name or "", ref.namespace or namespace)


BINDING_MODEL_LABELS = ("registry.volcano.sh/model-name", "llm-d.ai/model")
"""Labels naming the model a binding (or its target workload) serves: Kthena's, then llm-d's."""
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"
GPU_NODE_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "amd.com/gpu.product-name",
    "amd.com/gpu.family",
)
"""Node labels whose value names a GPU model, as a workload's nodeSelector or node affinity uses them."""


@dataclass(frozen=True)
class BindingRowDetails:
    """What the allocation table shows for a binding besides replicas: the model it scales and, per
    target name, the accelerator the target's pods run on."""

    model: str = ""
    accelerators: dict[str, str] = field(default_factory=dict)


def workload_accelerator(workload: Workload) -> str:
    """What a workload's pods run on, as :func:`engine.optimize.spec.accelerator_text` writes it: the GPUs a
    pod requests (1 when it requests none) of the type its ``inference.optimization/acceleratorName`` label,
    nodeSelector or required node affinity names, else of the GPU resource itself (``1x nvidia.com/gpu``);
    empty for a CPU workload.

    Args:
        workload: A scale target (Deployment, StatefulSet, ...) as its typed model.

    Returns:
        The accelerator text, e.g. ``2x MI300X`` or ``1x nvidia.com/gpu``; empty for a CPU workload.
    """
    pod = workload.pod_spec()
    resource, count = "", 1
    for container in pod.containers:
        for key, value in {**container.resources.requests, **container.resources.limits}.items():
            if key.endswith("/gpu"):
                resource, count = key, _count(value)
    labels = workload.metadata.labels
    if labels.get(ACCELERATOR_LABEL):
        return accelerator_text(str(labels[ACCELERATOR_LABEL]), count)
    for key in GPU_NODE_LABELS:
        if pod.node_selector.get(key):
            return accelerator_text(str(pod.node_selector[key]), count)
    for term in pod.affinity.node_affinity.required.node_selector_terms:
        for expression in term.match_expressions:
            if expression.key in GPU_NODE_LABELS and expression.operator == "In" and expression.values:
                return accelerator_text(",".join(str(v) for v in expression.values), count)
    return accelerator_text(resource, count)


def _count(value: object) -> int:
    """A GPU request as a count (1 where it is not a whole number)."""
    try:
        return max(1, int(str(value)))
    except ValueError:
        return 1


def binding_model(binding: ObjectMeta, workloads: Iterable[Workload]) -> str:
    """The model a binding (its ``metadata``) scales: its own model label, else its targets' (Kthena's, then
    llm-d's), else the Kthena Model that owns it; empty when nothing says (never the policy's name).

    Args:
        binding: The binding's metadata.
        workloads: The binding's target workloads.

    Returns:
        The model's name, or empty.
    """
    sources: list[Mapping[str, Any]] = [binding.labels, *(w.metadata.labels for w in workloads)]
    for label in BINDING_MODEL_LABELS:
        for labels in sources:
            if labels.get(label):
                return str(labels[label])
    for owner in binding.owner_references:
        if owner.get("kind") == MODEL:
            return str(owner.get("name") or "")
    return ""


def describe_bindings(
    bindings: list[Accepted[AutoscalingPolicyBinding]], held: TargetReplicas
) -> dict[tuple[str, str], BindingRowDetails]:
    """Model and per-target accelerator of each binding, for the allocation table and artifact, from the targets
    as the cycle read them (``held``; a target the cycle did not read whole shows no accelerator).

    Args:
        bindings: The bindings the cycle read.
        held: The scale targets as the cycle listed them.

    Returns:
        (namespace, name) of each binding -> its model and its targets' accelerators.
    """
    details: dict[tuple[str, str], BindingRowDetails] = {}
    for binding in bindings:
        workloads: dict[str, Workload] = {}
        for target, _, _, _ in binding_targets(binding.model.spec):
            ref = target_ref(target, binding.namespace)
            _, obj = held.as_listed(ref.namespace or "", ref.api_version, ref.kind, ref.name)
            try:
                if obj is not None:
                    workloads[ref.name] = Workload.model_validate(obj)
            except ValueError:  # not shaped as a workload: no accelerator shown
                continue
        details[(binding.namespace, binding.name)] = BindingRowDetails(
            binding_model(binding.model.metadata, workloads.values()),
            {name: workload_accelerator(w) for name, w in workloads.items()},
        )
    return details


def binding_scale_targets(state: ClusterState) -> set[tuple[str, str, str, str]]:
    """(namespace, apiVersion, kind, name) of every binding target and serving-group member, for the cycle's
    one read of the scale targets (:func:`tasks.optimize.read.read_current_replicas`).

    Args:
        state: The cycle's read of the cluster (its bindings).

    Returns:
        Every target and group member as (namespace, apiVersion, kind, name).
    """
    targets: set[tuple[str, str, str, str]] = set()
    for binding in state.bindings:
        try:
            groups = parse_scale_groups(binding.model.metadata.annotations)
        except ValueError:
            groups = {}
        for target, *_ in binding_targets(binding.model.spec):
            ref = target_ref(target, binding.namespace)
            for name in [ref.name, *(member for member, *_ in groups.get(ref.name, []))]:
                targets.add((ref.namespace or "", ref.api_version, ref.kind, name))
    return targets


@dataclass
class NamespacePods:
    """The Pods of each binding namespace, listed once (on first need) and matched to each target's selector
    here, so a cycle LISTs Pods once per namespace however many targets it reads."""

    cluster: Cluster
    by_namespace: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def selected(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The Pods of ``namespace`` whose labels match ``selector``."""
        if namespace not in self.by_namespace:
            self.by_namespace[namespace] = self.cluster.list("v1", "Pod", namespace=namespace)
        requirements = parse_selector(selector)
        return [p for p in self.by_namespace[namespace] if selector_matches(requirements, p["metadata"].get("labels"))]


def _selector(scale_selector: str | None, additional: Mapping[str, str] | None) -> str | None:
    parts = [scale_selector] if scale_selector else []
    parts += [f"{key}={value}" for key, value in sorted((additional or {}).items())]
    return ",".join(parts) or None


def _bounds(low: int | None, high: int | None) -> tuple[int, int]:
    """A target's (minReplicas, maxReplicas): 0 and 1 when not set."""
    return (0 if low is None else low), (1 if high is None else high)


def binding_targets(spec: AutoscalingPolicyBindingSpec) -> list[tuple[Target, int, int, float | None]]:
    """(target, minReplicas, maxReplicas, cost) for each target of a binding, in spec order; the cost is None
    where the binding gives none (a homogeneous binding, a param without ``cost``).

    Args:
        spec: An AutoscalingPolicyBinding's spec.

    Returns:
        One (target, minReplicas, maxReplicas, cost) per target; empty when the spec configures neither
        optimizer nor scaling.
    """
    if spec.optimizer_configuration is not None:
        return [
            (p.target, *_bounds(p.min_replicas, p.max_replicas), None if p.cost is None else float(p.cost))
            for p in spec.optimizer_configuration.params
        ]
    scaling = spec.scaling_configuration
    if scaling is not None:
        return [(scaling.target, *_bounds(scaling.min_replicas, scaling.max_replicas), None)]
    return []


def _instances_from_snapshot(
    snapshot: Any, namespace: str, pods: list[str], names: list[str], have_pod_objects: bool
) -> list[dict[str, float]]:
    """Per-pod policy metrics of a target's ready pods.

    A manifest snapshot usually carries no Pod objects; then the pods are the ones the metrics name
    after the target's workloads (``<name>-...``), as a Deployment names its pods.
    """
    metrics: Mapping[tuple[str, str], dict[str, float]] = snapshot.instance_metrics if snapshot is not None else {}
    if have_pod_objects:
        return [dict(metrics.get((namespace, pod), {})) for pod in pods]
    prefixes = tuple(f"{name}-" for name in names)
    return [
        dict(values) for (ns, pod), values in sorted(metrics.items()) if ns == namespace and pod.startswith(prefixes)
    ]


@dataclass
class _TargetPods:
    """One binding target's pods: ready ones by name, how many are not ready, and the metric instances."""

    ready: list[str] = field(default_factory=list)
    unready: int = 0
    listed: bool = False


def _target_pods(pods_of: NamespacePods, ref: ObjectRef, selector: str | None) -> _TargetPods:
    if not selector:
        return _TargetPods()
    pods = pods_of.selected(ref.namespace or "", selector)
    ready = [p["metadata"]["name"] for p in pods if condition_is_true(p, "Ready")]
    return _TargetPods(ready, len(pods) - len(ready), bool(pods))


@dataclass
class _ReadTarget:
    """What one binding target is now: its replicas (or its group's members'), and its serving pods."""

    ref: ObjectRef
    current: int | None
    group: tuple[GroupMember, ...] | None
    serving_names: list[str]
    pods: _TargetPods


def _scale(cluster: Cluster, ref: ObjectRef, held: TargetReplicas) -> tuple[int | None, str | None] | None:
    """A target's replicas and pod selector: from the cycle's LIST of its kind when it was listed (None when it
    is not there: it does not exist), else from its scale subresource."""
    listed, obj = held.as_listed(ref.namespace or "", ref.api_version, ref.kind, ref.name)
    if listed:
        if obj is None:
            return None
        return held.current.get((ref.namespace or "", ref.kind, ref.name)), ScalableAsWritten.model_validate(
            obj
        ).selector()
    try:
        scale_now = cluster.get_scale(ref)
    except NotFound:
        return None
    return scale_now.replicas, scale_now.selector


def _read_target(
    cluster: Cluster,
    target: Target,
    namespace: str,
    group: list[tuple[str, int, bool]] | None,
    held: TargetReplicas,
    pods_of: NamespacePods,
) -> _ReadTarget:
    """The scale of the target (of each member of its group) and the pods of its serving workloads."""
    ref = target_ref(target, namespace)
    members = [
        (ObjectRef(ref.api_version, ref.kind, name, ref.namespace), per, serves) for name, per, serves in group or []
    ] or [(ref, 1, True)]
    scales: list[int | None] = []
    pods = _TargetPods()
    for member_ref, _per, serves in members:
        scale_now = _scale(cluster, member_ref, held)
        if scale_now is None:
            scales.append(None)
            continue
        replicas, selector = scale_now
        scales.append(replicas)
        if serves:
            got = _target_pods(pods_of, member_ref, _selector(selector, target.additional_match_labels))
            pods.ready += got.ready
            pods.unready += got.unready
            pods.listed = pods.listed or got.listed
    serving = [m.name for m, _, serves in members if serves]
    if not group:
        return _ReadTarget(ref, scales[0], None, serving, pods)
    members_now = tuple(
        GroupMember(m.name, m.api_version, m.kind, per, current, serves)
        for (m, per, serves), current in zip(members, scales)
    )
    return _ReadTarget(ref, None, members_now, serving, pods)


@task(name="read-binding-inputs", retries=1, retry_delay_seconds=1)
def read_binding_inputs(
    cluster: Cluster,
    binding: Accepted[AutoscalingPolicyBinding],
    state: ClusterState,
    snapshot: Any,
    metrics_error: str | None,
    held: TargetReplicas | None = None,
    pods_of: NamespacePods | None = None,
) -> BindingInputs:
    """Current replicas (from the cycle's LIST of the targets' kind, ``held``, else the scale subresource), the
    targets' pods (``pods_of``: listed once per namespace), and their policy metrics from the snapshot.

    A target named in the binding's :data:`engine.optimize.bindings.ANNOTATION_SCALE_GROUPS` is a serving group:
    its members' replicas are read, its current count is whole groups, and its serving pods' metrics
    become one instance per group.

    Args:
        cluster: The cluster to read the targets from.
        binding: The AutoscalingPolicyBinding as read, with its parsed model.
        state: The cycle's read of the cluster (the bound policies).
        snapshot: The cycle's metrics snapshot (the policies' per-pod metrics), or None when collection failed.
        metrics_error: Why the metrics could not be collected, or None.
        held: The replicas the cycle already read of the targets, or None to read each target's scale.
        pods_of: The cycle's per-namespace pod listing, or None for a new one.

    Returns:
        What the engine plans the binding from: targets with current replicas and bounds, per-instance metrics,
        unready pods, the policy and the status as read.
    """
    meta, spec, namespace = binding.model.metadata, binding.model.spec, binding.namespace
    policy_name = spec.policy_ref.name
    policy = state.policies.get((namespace, policy_name))
    try:
        groups = parse_scale_groups(meta.annotations)
    except ValueError as exc:
        log.warning("AutoscalingPolicyBinding %s: scaling its targets one by one: %s", meta.name, exc)
        groups = {}
    held = held if held is not None else TargetReplicas()
    pods_of = pods_of if pods_of is not None else NamespacePods(cluster)
    read = [
        _read_target(cluster, target, namespace, groups.get(target_ref(target, namespace).name), held, pods_of)
        for target, *_ in binding_targets(spec)
    ]
    have_pod_objects = any(r.pods.listed for r in read)
    targets: list[BindingTarget] = []
    instances: list[dict[str, float]] = []
    unready = 0
    for r, (_, low, high, cost) in zip(read, binding_targets(spec)):
        ref = r.ref
        pod_instances = _instances_from_snapshot(snapshot, namespace, r.pods.ready, r.serving_names, have_pod_objects)
        current = r.current if r.group is None else group_count(r.group)
        targets.append(
            BindingTarget(
                ref.name,
                ref.namespace or namespace,
                ref.api_version,
                ref.kind,
                current,
                low,
                high,
                cost or 0.0,
                r.group or (),
                priced=cost is not None,
            )
        )
        if r.group is None:
            instances += pod_instances
            unready += r.pods.unready
        elif current is not None:
            serving_per_group = sum(m.per_group for m in r.group if m.serves) or 1
            instances += group_instances(pod_instances, current)
            unready += -(-r.pods.unready // serving_per_group)
    optimizer = spec.optimizer_configuration
    expansion = optimizer.cost_expansion_rate_percent if optimizer is not None else None
    return BindingInputs(
        namespace=namespace,
        name=binding.name,
        generation=meta.generation,
        policy_name=policy_name,
        policy=policy.model.spec if policy is not None else None,
        heterogeneous=optimizer is not None,
        targets=targets,
        instances=instances,
        unready=unready,
        metrics_error=metrics_error,
        cost_expansion_rate_percent=200 if expansion is None else expansion,
        old_status=status_as_read(binding.model),
        scale_to_zero_grace_s=binding_grace_period(cluster, meta),
        policy_invalid=state.invalid_policies.get((namespace, policy_name)),
    )


def binding_grace_period(cluster: Cluster, meta: ObjectMeta) -> float | None:
    """The scale-to-zero grace period (seconds) of the binding with metadata ``meta``: its annotation, else
    the Kthena Model that owns it (one GET, only for a binding without the annotation; read through the
    boundary reader, so a Model that does not parse gives none). A malformed value is logged and means
    no grace period (the policy's own windows still apply).

    Args:
        cluster: The cluster to read the owning Model from.
        meta: The binding's metadata.

    Returns:
        The grace period in seconds, or None when there is none (or it is malformed).
    """
    annotations = meta.annotations
    model: KthenaModel | None = None
    if not annotations.get(ANNOTATION_SCALE_TO_ZERO_GRACE):
        owner = next(
            (
                r
                for r in meta.owner_references
                if r.get("kind") == MODEL and group_of(str(r.get("apiVersion", ""))) == KTHENA_GROUP
            ),
            None,
        )
        if owner is not None:
            try:
                parsed = parse_resource(cluster.get(owner["apiVersion"], MODEL, owner["name"], meta.namespace))
            except NotFound:
                parsed = None
            model = parsed if isinstance(parsed, KthenaModel) else None
    try:
        return scale_to_zero_grace(annotations, model.spec if model is not None else None)
    except ValueError as exc:
        log.warning("AutoscalingPolicyBinding %s: ignoring scale-to-zero grace period: %s", meta.name, exc)
        return None


def binding_modes(binding: AutoscalingPolicyBinding, default: str) -> tuple[dict[str, str], str, str | None]:
    """Each target's actuation mode (per-target overrides, else the binding's annotation, else ``default``),
    the binding's own mode, and the error of a malformed annotation (then everything is ``recommend``).

    The members of a serving group (``modelplane.io/scale-groups``) take their group target's mode.

    Args:
        binding: The AutoscalingPolicyBinding's API model.
        default: The cluster's default actuation mode (from the optimizer ConfigMap).

    Returns:
        The mode of each target (and group member) by name, the binding's mode, and the annotation's error or None.
    """
    annotations = binding.metadata.annotations
    names = [target_ref(target, "").name for target, *_ in binding_targets(binding.spec)]
    try:
        mode = resource_mode(annotations, default)
        overrides = target_modes(annotations, mode)
    except ActuationModeError as exc:
        return {name: RECOMMEND for name in names}, RECOMMEND, str(exc)
    modes = {name: overrides.get(name, mode) for name in names}
    try:
        groups = parse_scale_groups(annotations)
    except ValueError:
        groups = {}  # reported by the planner; members then take the binding's mode
    for group, members in groups.items():
        for member, *_ in members:
            modes.setdefault(member, modes.get(group, mode))
    return modes, mode, None


@task(name="read-bindings")
def read_bindings(
    cluster: Cluster,
    state: ClusterState,
    snapshot: MetricsSnapshot | None,
    metrics_error: str | None,
    held: TargetReplicas | None = None,
) -> tuple[list[tuple[Accepted[AutoscalingPolicyBinding], BindingInputs]], list[str]]:
    """What each Kthena binding is decided from (policy, targets, instances' metrics), nothing decided yet.

    Args:
        cluster: The cluster the bindings are read from.
        state: What the cycle read (the bindings, their policies).
        snapshot: The cycle's metrics, None when they are unavailable.
        metrics_error: Why the metrics are unavailable, or None.
        held: The scale targets as the cycle listed them (:func:`binding_scale_targets`); their Pods are
            listed once per namespace.

    Returns:
        (binding, inputs) pairs, and the API failures of single bindings (the others proceed).
    """
    logger = run_logger()
    pods_of = NamespacePods(cluster)
    read: list[tuple[Accepted[AutoscalingPolicyBinding], BindingInputs]] = []
    errors: list[str] = []
    for binding in state.bindings:
        name = f"{binding.namespace}/{binding.name}"
        try:
            inputs = read_binding_inputs(
                cluster, binding, quote(state), quote(snapshot), metrics_error, quote(held), quote(pods_of)
            )
            read.append((binding, inputs))
        except ClusterError as exc:  # one binding's API failure must not stop the others
            logger.error("AutoscalingPolicyBinding %s: %s", name, exc.message)
            errors.append(f"{name}: {exc.message}")
    return read, errors
