"""What the optimize cycle reads: cluster state, scale targets' replicas and the cycle's metrics.

Reads are batched: one LIST per kind per cycle (VariantAutoscalings, AutoscalingPolicyBindings,
AutoscalingPolicies, ConfigMaps of the Modelplane namespace, Deployments), never one GET per
object. :func:`read_cluster_state` gathers them into a :class:`ClusterState` (configuration parsed by
:mod:`engine.optimize.config`); :func:`read_current_replicas` reads the scale targets (one LIST per
listable kind, the scale subresource otherwise); :func:`collect_metrics` asks the metrics source once for
every model and every bound policy's metric. The pre-checks a CLI run makes before its flow starts
(:func:`cannot_run_reason`) are in tasks/optimize/precheck.py, light enough to run before the flow is imported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from engine.api.kthena import AutoscalingPolicy, AutoscalingPolicyBinding
from engine.api.llmd import VariantAutoscaling
from engine.api.registry import (
    AUTOSCALING_POLICY,
    AUTOSCALING_POLICY_BINDING,
    KTHENA_API,
    LLMD_API,
    VARIANT_AUTOSCALING,
)
from engine.api.views import ScalableAsWritten
from engine.optimize.actuation import OPTIMIZER_CONFIGMAP, SCALE, default_mode
from engine.optimize.config import (
    ACCELERATOR_COSTS_CONFIGMAP,
    INVENTORY_CONFIGMAP,
    SATURATION_CONFIGMAP,
    AcceleratorCost,
    ConfigError,
    ServiceClass,
    parse_accelerator_costs,
    parse_inventory,
    parse_service_class,
)
from engine.optimize.spec import MAX_REPLICAS, model_targets
from tasks.boundary import Accepted, accept, accept_as, not_being_deleted
from tasks.clients.cluster import Cluster, ObjectRef
from tasks.clients.cluster.errors import NotFound
from tasks.clients.metrics.snapshot import MetricsError, MetricsSnapshot, MetricsSource, ModelKey
from tasks.optimize.precheck import missing_configuration
from tasks.tracking import task

log = logging.getLogger("modelplane.optimize")

M = TypeVar("M", bound=BaseModel)


# Scale targets whose replicas can be read from one LIST instead of one scale GET per target.
LISTABLE_TARGETS = {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")}


@dataclass
class ClusterState:
    """Everything the optimize cycle reads from the cluster, gathered with one LIST per kind."""

    variants: list[Accepted[VariantAutoscaling]]
    bindings: list[Accepted[AutoscalingPolicyBinding]]
    policies: dict[tuple[str, str], Accepted[AutoscalingPolicy]]
    invalid_policies: dict[tuple[str, str], str]
    """Why each AutoscalingPolicy that does not parse is invalid (``field: reason``), by (namespace, name)."""
    accelerator_costs: dict[str, AcceleratorCost]
    service_classes: dict[tuple[str, str], ServiceClass | ConfigError]
    saturation_data: dict[str, str]
    inventory: dict[str, int] | None
    unreadable_inventory: dict[str, str] = field(default_factory=dict)
    """Accelerators whose ``accelerator-inventory`` entry does not parse: the error (their variants hold)."""
    config_errors: list[ConfigError] = field(default_factory=list)
    missing_configuration: str | None = None
    """Why the cycle cannot run on this configuration (the cost ConfigMap is missing), or None."""
    actuation_mode: str = SCALE
    """The default actuation mode (``modelplane-optimizer-config``, key ``actuation-mode``; engine.optimize.actuation)."""

    def variant_models(self) -> list[VariantAutoscaling]:
        """The VariantAutoscalings as parsed at the boundary: the engine's cycle input (writes patch ``obj``)."""
        return [va.model for va in self.variants]


def _in_scope(obj: Accepted[Any], namespaces: set[str] | None) -> bool:
    return namespaces is None or obj.model.metadata.namespace in namespaces


def _by_name(items: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in items}


def list_optional(cluster: Cluster, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """LIST a kind whose CRD may not be installed: a missing kind is an empty list.

    Args:
        cluster: The cluster to list.
        api_version: The kind's ``apiVersion``.
        kind: The kind's name.
        namespace: The namespace to list, or None for all.

    Returns:
        The objects the boundary reader accepted; empty when the kind is not served.
    """
    try:
        return accept(cluster, cluster.list(api_version, kind, namespace=namespace))  # invalid ones: marked, left out
    except NotFound:
        log.info("%s/%s is not served by this cluster; skipping", api_version, kind)
        return []


def list_typed(
    cluster: Cluster, api_version: str, kind: str, model: type[M], rejected: dict[tuple[str, str], str] | None = None
) -> list[Accepted[M]]:
    """:func:`list_optional` of a Modelplane kind, each object with its parsed API ``model``.

    Args:
        cluster: The cluster to list.
        api_version: The kind's ``apiVersion``.
        kind: The kind's name.
        model: The kind's API model class.
        rejected: When given, filled with each invalid object's ``field: reason`` by (namespace, name).

    Returns:
        The accepted objects of every namespace, each with its parsed model; empty when the kind is not served.
    """
    try:
        return accept_as(cluster, cluster.list(api_version, kind), model, rejected)  # invalid ones: marked, left out
    except NotFound:
        log.info("%s/%s is not served by this cluster; skipping", api_version, kind)
        return []


def _service_classes(
    cluster: Cluster, variants: list[Accepted[VariantAutoscaling]], config_maps: dict[str, dict[str, Any]]
) -> dict[tuple[str, str], ServiceClass | ConfigError]:
    """Parse every (ConfigMap, key) a VariantAutoscaling's sloClassRef points at.

    The ConfigMap is looked up in the Modelplane namespace (where WVA keeps its service classes), then
    in the variant's own namespace (one GET per distinct name, only when it is not found there).
    """
    refs: set[tuple[str, str, str]] = set()
    for va in variants:
        ref = va.model.spec.slo_class_ref
        if ref is not None:
            refs.add((va.namespace, ref.name, ref.key))
    local_maps: dict[tuple[str, str], dict[str, Any] | None] = {}
    classes: dict[tuple[str, str], ServiceClass | ConfigError] = {}
    for namespace, name, key in sorted(refs):
        cm = config_maps.get(name)
        if cm is None or key not in (cm.get("data") or {}):
            if (namespace, name) not in local_maps:
                try:
                    local_maps[(namespace, name)] = cluster.get("v1", "ConfigMap", name, namespace)
                except NotFound:
                    local_maps[(namespace, name)] = None
            cm = local_maps[(namespace, name)] or cm
        data = (cm or {}).get("data") or {}
        if key in data:
            try:
                classes[(name, key)] = parse_service_class(data[key], f"{name}/{key}")
            except ConfigError as exc:
                classes[(name, key)] = exc
    return classes


def namespace_scope(cluster: Cluster, namespaces: list[str] | None, selector: str | None) -> set[str] | None:
    """The namespaces a cycle covers: the named ones, those whose labels match ``selector`` (one LIST of
    Namespaces), their intersection when both are given, or ``None`` for every namespace.

    Args:
        cluster: The cluster to list Namespaces of.
        namespaces: The namespaces named; None or empty for no restriction by name.
        selector: A label selector on Namespaces, or None.

    Returns:
        The namespaces in scope, or None for every namespace.
    """
    scope = set(namespaces) if namespaces else None
    if selector:
        selected = {ns["metadata"]["name"] for ns in cluster.list("v1", "Namespace", label_selector=selector)}
        scope = selected if scope is None else scope & selected
    return scope


@task(name="read-cluster-state", retries=2, retry_delay_seconds=2)
def read_cluster_state(
    cluster: Cluster, namespaces: list[str] | None, config_namespace: str, namespace_selector: str | None = None
) -> ClusterState:
    """LIST every kind the cycle needs (all namespaces, filtered client-side) and parse the ConfigMaps.

    Args:
        cluster: The cluster to read.
        namespaces: The namespaces the cycle covers by name; None or empty for all.
        config_namespace: The namespace of the WVA ConfigMaps (accelerator costs, service classes, saturation,
            inventory, optimizer settings).
        namespace_selector: A label selector on Namespaces that limits the cycle further, or None.

    Returns:
        The VariantAutoscalings and bindings in scope that are not being deleted, the policies in scope, the parsed
        configuration and its errors.
    """
    scope = namespace_scope(cluster, namespaces, namespace_selector)
    variants = [
        va
        for va in not_being_deleted(list_typed(cluster, LLMD_API, VARIANT_AUTOSCALING, VariantAutoscaling))
        if _in_scope(va, scope)
    ]
    bindings = [
        b
        for b in not_being_deleted(
            list_typed(cluster, KTHENA_API, AUTOSCALING_POLICY_BINDING, AutoscalingPolicyBinding)
        )
        if _in_scope(b, scope)
    ]
    invalid_policies: dict[tuple[str, str], str] = {}
    policies = {
        (p.namespace, p.name): p
        for p in list_typed(cluster, KTHENA_API, AUTOSCALING_POLICY, AutoscalingPolicy, invalid_policies)
        if _in_scope(p, scope)
    }
    config_maps = _by_name(cluster.list("v1", "ConfigMap", namespace=config_namespace))
    errors: list[ConfigError] = []
    costs, cost_errors = parse_accelerator_costs((config_maps.get(ACCELERATOR_COSTS_CONFIGMAP) or {}).get("data") or {})
    errors += cost_errors
    inventory: dict[str, int] | None = None
    unreadable_inventory: dict[str, str] = {}
    if INVENTORY_CONFIGMAP in config_maps:
        inventory, inventory_errors = parse_inventory(config_maps[INVENTORY_CONFIGMAP].get("data") or {})
        errors += inventory_errors
        # a ConfigMap key holds no "/": the source's key is the accelerator
        unreadable_inventory = {error.source.partition("/")[2]: str(error) for error in inventory_errors}
    missing = missing_configuration(set(config_maps), bool(variants), config_namespace)
    mode, mode_error = default_mode((config_maps.get(OPTIMIZER_CONFIGMAP) or {}).get("data"))
    if mode_error:
        errors.append(ConfigError(OPTIMIZER_CONFIGMAP, mode_error.split(": ", 1)[1]))
    return ClusterState(
        variants=variants,
        bindings=bindings,
        policies=policies,
        invalid_policies=invalid_policies,
        accelerator_costs=costs,
        service_classes=_service_classes(cluster, variants, config_maps),
        saturation_data=(config_maps.get(SATURATION_CONFIGMAP) or {}).get("data") or {},
        inventory=inventory,
        unreadable_inventory=unreadable_inventory,
        config_errors=errors,
        missing_configuration=missing,
        actuation_mode=mode,
    )


def scale_targets_of(state: ClusterState) -> set[tuple[str, str, str, str]]:
    """(namespace, apiVersion, kind, name) of every scale target the cycle must read.

    Args:
        state: The cycle's read of the cluster (its VariantAutoscalings).

    Returns:
        Every VariantAutoscaling's scale target as (namespace, apiVersion, kind, name).
    """
    targets: set[tuple[str, str, str, str]] = set()
    for va in state.variants:
        ref = va.model.spec.scale_target_ref
        if ref is not None:
            targets.add((va.namespace, ref.api_version or "apps/v1", ref.kind, ref.name))
    return targets


@dataclass
class TargetReplicas:
    """Replicas of the scale targets, keyed by (namespace, kind, name): desired (spec) and ready.

    A target whose replicas are not a count (``-1``, ``"two"``, beyond :data:`MAX_REPLICAS`) is in ``invalid``
    with the reason naming the field, not in ``current``: its variant is reported, the others are planned.
    """

    current: dict[tuple[str, str, str], int] = field(default_factory=dict)
    ready: dict[tuple[str, str, str], int] = field(default_factory=dict)
    invalid: dict[tuple[str, str, str], str] = field(default_factory=dict)
    workloads: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    """The targets of the listed kinds as read: what the rest of the cycle reads them from (binding targets'
    pod selectors, the report's models and accelerators) instead of going back to the cluster."""
    listed: set[tuple[str, str]] = field(default_factory=set)
    """(apiVersion, kind) listed whole: a target of these kinds that is not in ``workloads`` does not exist."""

    def as_listed(self, namespace: str, api_version: str, kind: str, name: str) -> tuple[bool, dict[str, Any] | None]:
        """Whether the target's kind was listed, and the target as read (None: it does not exist)."""
        return (api_version, kind) in self.listed, self.workloads.get((namespace, kind, name))

    def record(self, key: tuple[str, str, str], replicas: object, ready: object) -> None:
        """Keep the target's desired replicas (``spec.replicas``) and its ready ones when they are counts."""
        problem = replica_count_problem(replicas)
        if problem:
            self.invalid[key] = f"{key[1]} {key[0]}/{key[2]}: spec.replicas {problem}"
            return
        self.current[key] = cast(int, replicas)
        if ready is not None and replica_count_problem(ready) is None:
            self.ready[key] = cast(int, ready)


def replica_count_problem(value: object) -> str | None:
    """Why ``value`` is not a replica count (an integer from 0 to :data:`MAX_REPLICAS`), or None.

    Args:
        value: A value read as a replica count.

    Returns:
        The problem as a phrase (``must be ...``), or None when it is a valid count.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, got {value!r}"
    if not 0 <= value <= MAX_REPLICAS:
        return f"must be from 0 to {MAX_REPLICAS}, got {value}"
    return None


@task(name="read-current-replicas", retries=2, retry_delay_seconds=2)
def read_current_replicas(cluster: Cluster, targets: set[tuple[str, str, str, str]]) -> TargetReplicas:
    """Current replicas of every target: one LIST per listable kind, the scale subresource otherwise.

    Targets that do not exist are absent from the result (the planner reports them).

    Args:
        cluster: The cluster to read.
        targets: The scale targets as (namespace, apiVersion, kind, name).

    Returns:
        The replicas and ready replicas of every target found, and the listed workloads.
    """
    wanted = {(namespace, kind, name) for namespace, _, kind, name in targets}
    result = TargetReplicas()
    listable = {(api, kind) for _, api, kind, _ in targets if (api, kind) in LISTABLE_TARGETS}
    for api_version, kind in sorted(listable):
        result.listed.add((api_version, kind))
        for obj in cluster.list(api_version, kind):
            workload = ScalableAsWritten.model_validate(obj)
            key = (workload.metadata.namespace or "default", kind, str(workload.metadata.name))
            if key in wanted:
                result.record(key, workload.replicas, workload.ready_replicas)
                result.workloads[key] = obj
    for namespace, api_version, kind, name in sorted(targets):
        if (api_version, kind) in LISTABLE_TARGETS:
            continue
        try:
            scale_now = cluster.get_scale(ObjectRef(api_version, kind, name, namespace))
        except NotFound:
            continue
        result.record((namespace, kind, name), scale_now.replicas, scale_now.status_replicas)
    return result


def policy_metric_names(state: ClusterState) -> list[str]:
    """Every metric name the bound AutoscalingPolicies scale on (fetched in the cycle's one collect).

    Args:
        state: The cycle's read of the cluster (bindings and policies).

    Returns:
        The metric names, sorted.
    """
    names: set[str] = set()
    for binding in state.bindings:
        policy = state.policies.get((binding.namespace, binding.model.spec.policy_ref.name))
        if policy is not None:
            names.update(m.metric_name for m in policy.model.spec.metrics)
    return sorted(names)


@task(name="collect-metrics")
def collect_metrics(source: MetricsSource | None, state: ClusterState) -> tuple[MetricsSnapshot | None, str | None]:
    """One batched collection for the cycle: model loads, pod saturation, the bound policies' metrics, and each
    model's latency histograms over its SLO window (:func:`engine.optimize.spec.model_targets`) and recently.

    A failing backend is reported (never swallowed) as an error string; the planner then holds.

    Args:
        source: The metrics backend (Prometheus or a metrics file), or None when none is configured.
        state: The cycle's read of the cluster (models, bindings, SLOs).

    Returns:
        The snapshot and None, or None and why the metrics could not be collected.
    """
    if source is None:
        return (
            None,
            "no metrics source configured (--prometheus-url or --metrics-file; parameters prometheus_url, metrics_file)",
        )
    keys = sorted(
        {ModelKey(model_id=va.model.spec.model_id, namespace=va.namespace) for va in state.variants},
        key=lambda k: (k.namespace, k.model_id),
    )
    namespaces = sorted({b.namespace for b in state.bindings})
    targets = model_targets(state.variant_models(), state.service_classes)
    windows = {ModelKey(model_id=model, namespace=ns): target.window_s for (ns, model), target in targets.items()}
    try:
        return source.collect(
            keys,
            instance_metric_names=policy_metric_names(state),
            instance_namespaces=namespaces,
            latency_windows=windows,
        ), None
    except MetricsError as exc:  # backend down, or a malformed metrics file: hold everything, say why
        return None, str(exc)
