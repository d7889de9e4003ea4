"""Prefect tasks the optimize flow uses to read cluster state and metrics and write its decisions back.

Reads are batched: one LIST per kind per cycle (VariantAutoscalings, AutoscalingPolicyBindings,
AutoscalingPolicies, ConfigMaps of the Modelplane namespace, Deployments), never one GET per
object. Writes go through the scale subresource and the ``/status`` subresource; a status write that
hits a stale resourceVersion re-reads the object and re-applies the change.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from engine.api.registry import KTHENA_API, KTHENA_GROUP, LLMD_API, group_of
from engine.optimize.actuation import (
    OPTIMIZER_CONFIGMAP,
    RECOMMEND,
    SCALE,
    Actuation,
    ActuationModeError,
    default_mode,
    resource_mode,
    scales,
    target_modes,
)
from engine.optimize.bindings import (
    ANNOTATION_SCALE_TO_ZERO_GRACE,
    REASON_NO_METRICS,
    BindingDecision,
    BindingInputs,
    BindingTarget,
    GroupMember,
    binding_status,
    group_count,
    group_instances,
    parse_scale_groups,
    scale_to_zero_grace,
)
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
from engine.optimize.plan import ANNOTATION_SCALE_DOWN_PENDING, VariantDecision
from engine.optimize.status import status_patch, variant_status
from engine.status import REASON_INVALID, changed_fields
from tasks.boundary import accept
from tasks.cluster import Cluster, ObjectRef
from tasks.cluster.errors import ClusterError, Conflict, NotFound
from tasks.cluster.retry import retry_on_conflict
from tasks.metrics import MetricsError, MetricsSnapshot, MetricsSource, ModelKey

log = logging.getLogger("modelplane.optimize")

# Scale targets whose replicas can be read from one LIST instead of one scale GET per target.
LISTABLE_TARGETS = {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")}
WRITE_WORKERS = 8

T = TypeVar("T")


@dataclass
class ClusterState:
    """Everything the optimize cycle reads from the cluster, gathered with one LIST per kind."""

    variants: list[dict[str, Any]]
    bindings: list[dict[str, Any]]
    policies: dict[tuple[str, str], dict[str, Any]]
    accelerator_costs: dict[str, AcceleratorCost]
    service_classes: dict[tuple[str, str], ServiceClass | ConfigError]
    saturation_data: dict[str, str]
    inventory: dict[str, int] | None
    config_errors: list[ConfigError] = field(default_factory=list)
    missing_configuration: str | None = None
    """Why the cycle cannot run on this configuration (the cost ConfigMap is missing), or None."""
    actuation_mode: str = SCALE
    """The default actuation mode (``modelplane-optimizer-config``, key ``actuation-mode``; engine.optimize.actuation)."""


def _in_scope(obj: Mapping[str, Any], namespaces: set[str] | None) -> bool:
    return namespaces is None or (obj.get("metadata") or {}).get("namespace") in namespaces


def _by_name(items: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in items}


def _list_optional(cluster: Cluster, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """LIST a kind whose CRD may not be installed: a missing kind is an empty list."""
    try:
        return accept(cluster, cluster.list(api_version, kind, namespace=namespace))  # invalid ones: marked, left out
    except NotFound:
        log.info("%s/%s is not served by this cluster; skipping", api_version, kind)
        return []


def _service_classes(
    cluster: Cluster, variants: list[dict[str, Any]], config_maps: dict[str, dict[str, Any]]
) -> dict[tuple[str, str], ServiceClass | ConfigError]:
    """Parse every (ConfigMap, key) a VariantAutoscaling's sloClassRef points at.

    The ConfigMap is looked up in the Modelplane namespace (where WVA keeps its service classes), then
    in the variant's own namespace (one GET per distinct name, only when it is not found there).
    """
    refs: set[tuple[str, str, str]] = set()
    for va in variants:
        ref = (va.get("spec") or {}).get("sloClassRef") or {}
        if ref.get("name") and ref.get("key"):
            refs.add((va["metadata"].get("namespace", "default"), ref["name"], ref["key"]))
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
    Namespaces), their intersection when both are given, or ``None`` for every namespace."""
    scope = set(namespaces) if namespaces else None
    if selector:
        selected = {ns["metadata"]["name"] for ns in cluster.list("v1", "Namespace", label_selector=selector)}
        scope = selected if scope is None else scope & selected
    return scope


@task(name="read-cluster-state", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def read_cluster_state(
    cluster: Cluster, namespaces: list[str] | None, config_namespace: str, namespace_selector: str | None = None
) -> ClusterState:
    """LIST every kind the cycle needs (all namespaces, filtered client-side) and parse the ConfigMaps."""
    scope = namespace_scope(cluster, namespaces, namespace_selector)
    variants = [va for va in _list_optional(cluster, LLMD_API, "VariantAutoscaling") if _in_scope(va, scope)]
    bindings = [b for b in _list_optional(cluster, KTHENA_API, "AutoscalingPolicyBinding") if _in_scope(b, scope)]
    policies = {
        (p["metadata"].get("namespace", "default"), p["metadata"]["name"]): p
        for p in _list_optional(cluster, KTHENA_API, "AutoscalingPolicy")
        if _in_scope(p, scope)
    }
    config_maps = _by_name(cluster.list("v1", "ConfigMap", namespace=config_namespace))
    errors: list[ConfigError] = []
    costs, cost_errors = parse_accelerator_costs((config_maps.get(ACCELERATOR_COSTS_CONFIGMAP) or {}).get("data") or {})
    errors += cost_errors
    inventory: dict[str, int] | None = None
    if INVENTORY_CONFIGMAP in config_maps:
        inventory, inventory_errors = parse_inventory(config_maps[INVENTORY_CONFIGMAP].get("data") or {})
        errors += inventory_errors
    missing = missing_configuration(set(config_maps), bool(variants), config_namespace)
    mode, mode_error = default_mode((config_maps.get(OPTIMIZER_CONFIGMAP) or {}).get("data"))
    if mode_error:
        errors.append(ConfigError(OPTIMIZER_CONFIGMAP, mode_error.split(": ", 1)[1]))
    return ClusterState(
        variants=variants,
        bindings=bindings,
        policies=policies,
        accelerator_costs=costs,
        service_classes=_service_classes(cluster, variants, config_maps),
        saturation_data=(config_maps.get(SATURATION_CONFIGMAP) or {}).get("data") or {},
        inventory=inventory,
        config_errors=errors,
        missing_configuration=missing,
        actuation_mode=mode,
    )


def missing_configuration(config_maps: set[str], has_variants: bool, config_namespace: str) -> str | None:
    """Why VariantAutoscalings cannot be optimized with the ConfigMaps found, or None.

    Without ``accelerator-unit-costs`` no variant can be priced: that is reported once, as what it is
    (usually a wrong ``--config-namespace``), rather than as an unknown accelerator on every resource.
    A cluster with only Kthena bindings needs no WVA configuration.
    """
    if has_variants and ACCELERATOR_COSTS_CONFIGMAP not in config_maps:
        return (
            f"configuration ConfigMap {ACCELERATOR_COSTS_CONFIGMAP!r} not found in namespace {config_namespace!r} "
            "(is the config namespace right?)"
        )
    return None


def local_path_problem(cluster: Cluster) -> str | None:
    """Why a local-manifests cluster cannot be used (its path does not exist or is unreadable), or None."""
    from tasks.cluster import LocalCluster

    if not isinstance(cluster, LocalCluster):
        return None
    if not cluster.path.exists():
        return f"cluster path {cluster.path} does not exist"
    if not os.access(cluster.path, os.R_OK):
        return f"cluster path {cluster.path} is not readable"
    return None


def cannot_run_reason(cluster: Cluster, config_namespace: str) -> str | None:
    """Why an optimize cycle cannot run on ``cluster`` at all, or None (checked before a CLI run starts
    Prefect, so a wrong path, no API access or a missing configuration is one line, not a flow crash)."""
    problem = local_path_problem(cluster)
    if problem:
        return problem
    try:
        config_maps = {cm["metadata"]["name"] for cm in cluster.list("v1", "ConfigMap", namespace=config_namespace)}
        has_variants = bool(_list_optional(cluster, LLMD_API, "VariantAutoscaling"))
    except ClusterError as exc:
        return f"cannot read the cluster: {exc.message}"
    return missing_configuration(config_maps, has_variants, config_namespace)


def scale_targets_of(state: ClusterState) -> set[tuple[str, str, str, str]]:
    """(namespace, apiVersion, kind, name) of every scale target the cycle must read."""
    targets: set[tuple[str, str, str, str]] = set()
    for va in state.variants:
        ref = (va.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("name"):
            namespace = va["metadata"].get("namespace", "default")
            targets.add((namespace, ref.get("apiVersion") or "apps/v1", ref.get("kind") or "Deployment", ref["name"]))
    return targets


@dataclass
class TargetReplicas:
    """Replicas of the scale targets, keyed by (namespace, kind, name): desired (spec) and ready."""

    current: dict[tuple[str, str, str], int] = field(default_factory=dict)
    ready: dict[tuple[str, str, str], int] = field(default_factory=dict)


@task(name="read-current-replicas", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def read_current_replicas(cluster: Cluster, targets: set[tuple[str, str, str, str]]) -> TargetReplicas:
    """Current replicas of every target: one LIST per listable kind, the scale subresource otherwise.

    Targets that do not exist are absent from the result (the planner reports them).
    """
    wanted = {(namespace, kind, name) for namespace, _, kind, name in targets}
    result = TargetReplicas()
    listable = {(api, kind) for _, api, kind, _ in targets if (api, kind) in LISTABLE_TARGETS}
    for api_version, kind in sorted(listable):
        for obj in cluster.list(api_version, kind):
            meta = obj["metadata"]
            key = (meta.get("namespace", "default"), kind, meta["name"])
            if key in wanted:
                result.current[key] = int((obj.get("spec") or {}).get("replicas", 1))
                ready = (obj.get("status") or {}).get("readyReplicas")
                if ready is not None:
                    result.ready[key] = int(ready)
    for namespace, api_version, kind, name in sorted(targets):
        if (api_version, kind) in LISTABLE_TARGETS:
            continue
        try:
            scale_now = cluster.get_scale(ObjectRef(api_version, kind, name, namespace))
        except NotFound:
            continue
        result.current[(namespace, kind, name)] = scale_now.replicas
        if scale_now.status_replicas is not None:
            result.ready[(namespace, kind, name)] = scale_now.status_replicas
    return result


@dataclass
class WriteOutcome:
    """What happened when one object's decision was written back."""

    namespace: str
    name: str
    scaled: bool = False
    applied: bool = False
    status_written: bool = False
    event: bool = False
    error: str | None = None
    mode: str = SCALE
    """The actuation mode this object was applied in (engine.optimize.actuation)."""
    published: bool = False
    """Its desired replicas reached the Pushgateway this cycle."""


def parallel_map(fn: Callable[[T], WriteOutcome], items: list[T], workers: int = WRITE_WORKERS) -> list[WriteOutcome]:
    """Run independent per-object writes concurrently (they are I/O bound), preserving order."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


def write_status(
    cluster: Cluster,
    listed: Mapping[str, Any],
    build_patch: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> bool:
    """Patch the status computed from the object; on a conflict re-read, recompute and retry.

    The first attempt uses the object as the cycle LISTed it (its resourceVersion is the
    precondition), so an uncontended cycle costs one PATCH per changed object and no GET.
    ``build_patch`` returns the status merge-patch or ``None`` when nothing needs writing.
    Returns whether a write happened.
    """
    ref = ObjectRef.of(dict(listed))
    patch = build_patch(dict(listed))
    if patch is None:
        return False
    try:
        cluster.patch_status(ref, patch, resource_version=(listed.get("metadata") or {}).get("resourceVersion"))
        return True
    except Conflict:
        log.info("conflict writing status of %s/%s; re-reading", ref.namespace, ref.name)
    written = False

    def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal written
        retry_patch = build_patch(obj)
        written = retry_patch is not None
        return retry_patch

    retry_on_conflict(cluster, ref, mutate, write="status")
    return written


def post_event(cluster: Cluster, obj: Mapping[str, Any], reason: str, message: str, event_type: str = "Normal") -> bool:
    """Record an Event; failure to record one is logged, never fatal to the cycle."""
    try:
        cluster.post_event(dict(obj), reason, message, event_type)
        return True
    except ClusterError as exc:
        log.warning("could not record event %s on %s: %s", reason, obj.get("metadata", {}).get("name"), exc.message)
        return False


def variant_mode(obj: Mapping[str, Any], default: str) -> str:
    """The actuation mode of a VariantAutoscaling; ``recommend`` when its annotation is malformed (the
    planner has already made it invalid, with a condition naming the annotation)."""
    try:
        return resource_mode((obj.get("metadata") or {}).get("annotations"), default)
    except ActuationModeError:
        return RECOMMEND


def apply_variant(
    cluster: Cluster,
    decision: VariantDecision,
    obj: dict[str, Any],
    now: datetime,
    heartbeat_s: float,
    default_mode: str = SCALE,
    published: bool = False,
) -> WriteOutcome:
    """Scale the target when its actuation mode scales, then write status (``actuation.applied`` as WVA
    means it for that mode, engine.optimize.actuation) and an Event when desired changed.

    ``published``: the decision's desired replicas reached the Pushgateway this cycle.
    """
    mode = variant_mode(obj, default_mode) if decision.actuate else RECOMMEND
    outcome = WriteOutcome(
        decision.namespace, decision.name, mode=mode, published=published and decision.desired is not None
    )
    scale_ok = False
    if decision.desired is not None and decision.target is not None:
        if not scales(mode) or not decision.ready:
            pass  # metrics/recommend mode never writes the scale; a hold on bad input or missing data applies nothing
        elif decision.changes_replicas:
            api_version, kind, name = decision.target
            try:
                cluster.set_scale(ObjectRef(api_version, kind, name, decision.namespace), decision.desired)
                outcome.scaled = scale_ok = True
            except ClusterError as exc:
                outcome.error = f"scale {kind}/{name}: {exc.message}"
                decision.ready = False
                decision.message += f"; scaling failed: {exc.message}"
        else:
            scale_ok = True
    outcome.applied = Actuation(mode, scale_ok, outcome.published).applied
    if decision.stabilization_changed:
        try:  # the scale-down window's state: an annotation (the seed's status has no field for it)
            cluster.patch_spec(
                ObjectRef.of(obj),
                {"metadata": {"annotations": {ANNOTATION_SCALE_DOWN_PENDING: decision.stabilization}}},
            )
        except ClusterError as exc:
            outcome.error = (outcome.error + "; " if outcome.error else "") + f"scale-down window state: {exc.message}"
    generation = (obj.get("metadata") or {}).get("generation")

    def build(current: dict[str, Any]) -> dict[str, Any] | None:
        old = current.get("status") or {}
        new = variant_status(decision, old, now, outcome.applied, generation)
        return status_patch(old, new, now, heartbeat_s)

    try:
        outcome.status_written = write_status(cluster, obj, build)
    except ClusterError as exc:
        outcome.error = (outcome.error + "; " if outcome.error else "") + f"status: {exc.message}"
    previous = ((obj.get("status") or {}).get("desiredOptimizedAlloc") or {}).get("numReplicas")
    if decision.desired is not None and previous != decision.desired:
        outcome.event = post_event(
            cluster,
            obj,
            "DesiredReplicasChanged",
            f"Desired replicas {previous if previous is not None else 'unset'} -> {decision.desired} "
            f"({decision.reason}): {decision.message}",
        )
    return outcome


@task(name="apply-decisions", cache_policy=NO_CACHE)
def apply_decisions(
    cluster: Cluster,
    state: ClusterState,
    decisions: list[VariantDecision],
    now: datetime,
    heartbeat_s: float,
    published: frozenset[tuple[str, str]] = frozenset(),
) -> list[WriteOutcome]:
    """Write every variant's decision back (concurrently; each object independently).

    ``published``: (namespace, name) of the variants whose desired replicas reached the Pushgateway.
    """
    objects = {(va["metadata"].get("namespace", "default"), va["metadata"]["name"]): va for va in state.variants}
    outcomes = parallel_map(
        lambda d: apply_variant(
            cluster,
            d,
            objects[(d.namespace, d.name)],
            now,
            heartbeat_s,
            state.actuation_mode,
            (d.namespace, d.name) in published,
        ),
        decisions,
    )
    logger = get_run_logger()
    for outcome in outcomes:
        if outcome.error:
            logger.error("VariantAutoscaling %s/%s: %s", outcome.namespace, outcome.name, outcome.error)
    return outcomes


# --------------------------------------------------------------------------------------------
# Kthena AutoscalingPolicyBindings
# --------------------------------------------------------------------------------------------


def _target_ref(target: Mapping[str, Any], namespace: str) -> ObjectRef:
    """The ObjectRef of a binding's ``target.targetRef`` (defaults: apps/v1 Deployment, binding namespace)."""
    ref = target.get("targetRef") or {}
    return ObjectRef(
        ref.get("apiVersion") or "apps/v1",
        ref.get("kind") or "Deployment",
        ref.get("name", ""),
        ref.get("namespace") or namespace,
    )


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


def _pod_spec(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod spec of a workload (Deployment/StatefulSet ``spec.template``, LeaderWorkerSet's worker template)."""
    spec = workload.get("spec") or {}
    template = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get("workerTemplate") or {}
    return template.get("spec") or {}


def workload_accelerator(workload: Mapping[str, Any]) -> str:
    """The accelerator a workload's pods run on: its ``inference.optimization/acceleratorName`` label, a
    GPU model its nodeSelector or required node affinity names, else the GPU resource it requests
    (``1x nvidia.com/gpu``); empty for a CPU workload."""
    labels = (workload.get("metadata") or {}).get("labels") or {}
    if labels.get(ACCELERATOR_LABEL):
        return str(labels[ACCELERATOR_LABEL])
    pod = _pod_spec(workload)
    selector = pod.get("nodeSelector") or {}
    for key in GPU_NODE_LABELS:
        if selector.get(key):
            return str(selector[key])
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if (
                expression.get("key") in GPU_NODE_LABELS
                and expression.get("operator") == "In"
                and expression.get("values")
            ):
                return ",".join(str(v) for v in expression["values"])
    for container in pod.get("containers") or []:
        resources = container.get("resources") or {}
        for key, value in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
            if key.endswith("/gpu"):
                return f"{value}x {key}"
    return ""


def binding_model(binding: Mapping[str, Any], workloads: Iterable[Mapping[str, Any]]) -> str:
    """The model a binding scales: its own model label, else its targets' (Kthena's, then llm-d's),
    else the Kthena Model that owns it; empty when nothing says (never the policy's name)."""
    sources = [binding, *workloads]
    for label in BINDING_MODEL_LABELS:
        for obj in sources:
            value = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
            if value:
                return str(value)
    for owner in (binding.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == "Model":
            return str(owner.get("name") or "")
    return ""


@task(name="describe-bindings", cache_policy=NO_CACHE)
def describe_bindings(cluster: Cluster, bindings: list[dict[str, Any]]) -> dict[tuple[str, str], BindingRowDetails]:
    """Model and per-target accelerator of each binding, for the allocation table and artifact (one GET
    per target; a target that cannot be read shows no accelerator)."""
    details: dict[tuple[str, str], BindingRowDetails] = {}
    for binding in bindings:
        namespace = binding["metadata"].get("namespace", "default")
        workloads: dict[str, Mapping[str, Any]] = {}
        for target, _, _, _ in binding_targets(binding):
            ref = _target_ref(target, namespace)
            try:
                workloads[ref.name] = cluster.get(ref.api_version, ref.kind, ref.name, ref.namespace)
            except ClusterError:
                continue
        details[(namespace, binding["metadata"]["name"])] = BindingRowDetails(
            binding_model(binding, workloads.values()), {name: workload_accelerator(w) for name, w in workloads.items()}
        )
    return details


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _selector(scale_selector: str | None, additional: Mapping[str, str] | None) -> str | None:
    parts = [scale_selector] if scale_selector else []
    parts += [f"{key}={value}" for key, value in sorted((additional or {}).items())]
    return ",".join(parts) or None


def binding_targets(binding: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], int, int, float]]:
    """(target, minReplicas, maxReplicas, cost) for each target of a binding, in spec order."""
    spec = binding.get("spec") or {}
    if spec.get("optimizerConfiguration"):
        return [
            (p.get("target") or {}, int(p.get("minReplicas", 0)), int(p.get("maxReplicas", 1)), float(p.get("cost", 0)))
            for p in spec["optimizerConfiguration"].get("params") or []
        ]
    scaling = spec.get("scalingConfiguration") or {}
    if scaling:
        return [
            (scaling.get("target") or {}, int(scaling.get("minReplicas", 0)), int(scaling.get("maxReplicas", 1)), 0.0)
        ]
    return []


def policy_metric_names(state: ClusterState) -> list[str]:
    """Every metric name the bound AutoscalingPolicies scale on (fetched in the cycle's one collect)."""
    names: set[str] = set()
    for binding in state.bindings:
        namespace = binding["metadata"].get("namespace", "default")
        policy_name = ((binding.get("spec") or {}).get("policyRef") or {}).get("name", "")
        policy = state.policies.get((namespace, policy_name)) or {}
        names.update(m["metricName"] for m in (policy.get("spec") or {}).get("metrics") or [] if m.get("metricName"))
    return sorted(names)


@task(name="collect-metrics", cache_policy=NO_CACHE)
def collect_metrics(source: MetricsSource | None, state: ClusterState) -> tuple[MetricsSnapshot | None, str | None]:
    """One batched collection for the cycle: model loads, pod saturation, and the bound policies' metrics.

    A failing backend is reported (never swallowed) as an error string; the planner then holds.
    """
    if source is None:
        return None, "no metrics source configured (set prometheus_url or metrics_file)"
    keys = sorted(
        {
            ModelKey(
                model_id=(va.get("spec") or {}).get("modelID", ""), namespace=va["metadata"].get("namespace", "default")
            )
            for va in state.variants
            if (va.get("spec") or {}).get("modelID")
        },
        key=lambda k: (k.namespace, k.model_id),
    )
    namespaces = sorted({b["metadata"].get("namespace", "default") for b in state.bindings})
    try:
        return source.collect(
            keys, instance_metric_names=policy_metric_names(state), instance_namespaces=namespaces
        ), None
    except MetricsError as exc:  # backend down, or a malformed metrics file: hold everything, say why
        return None, str(exc)


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


def _target_pods(cluster: Cluster, ref: ObjectRef, selector: str | None) -> _TargetPods:
    if not selector:
        return _TargetPods()
    pods = cluster.list("v1", "Pod", namespace=ref.namespace, label_selector=selector)
    ready = [p["metadata"]["name"] for p in pods if _pod_ready(p)]
    return _TargetPods(ready, len(pods) - len(ready), bool(pods))


@dataclass
class _ReadTarget:
    """What one binding target is now: its replicas (or its group's members'), and its serving pods."""

    ref: ObjectRef
    current: int | None
    group: tuple[GroupMember, ...] | None
    serving_names: list[str]
    pods: _TargetPods


def _read_target(
    cluster: Cluster, target: Mapping[str, Any], namespace: str, group: list[tuple[str, int, bool]] | None
) -> _ReadTarget:
    """The scale of the target (of each member of its group) and the pods of its serving workloads."""
    ref = _target_ref(target, namespace)
    members = [
        (ObjectRef(ref.api_version, ref.kind, name, ref.namespace), per, serves) for name, per, serves in group or []
    ] or [(ref, 1, True)]
    scales: list[int | None] = []
    pods = _TargetPods()
    for member_ref, _per, serves in members:
        try:
            scale_now = cluster.get_scale(member_ref)
        except NotFound:
            scales.append(None)
            continue
        scales.append(scale_now.replicas)
        if serves:
            got = _target_pods(cluster, member_ref, _selector(scale_now.selector, target.get("additionalMatchLabels")))
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


@task(name="read-binding-inputs", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1)
def read_binding_inputs(
    cluster: Cluster, binding: dict[str, Any], state: ClusterState, snapshot: Any, metrics_error: str | None
) -> BindingInputs:
    """Current replicas (scale subresource), the targets' pods, and their policy metrics from the snapshot.

    A target named in the binding's :data:`engine.optimize.bindings.ANNOTATION_SCALE_GROUPS` is a serving group:
    its members' replicas are read, its current count is whole groups, and its serving pods' metrics
    become one instance per group."""
    meta = binding["metadata"]
    namespace = meta.get("namespace", "default")
    spec = binding.get("spec") or {}
    policy_name = (spec.get("policyRef") or {}).get("name")
    policy = state.policies.get((namespace, policy_name or ""))
    try:
        groups = parse_scale_groups(meta.get("annotations") or {})
    except ValueError as exc:
        log.warning("AutoscalingPolicyBinding %s: scaling its targets one by one: %s", meta.get("name"), exc)
        groups = {}
    read = [
        _read_target(cluster, target, namespace, groups.get(_target_ref(target, namespace).name))
        for target, *_ in binding_targets(binding)
    ]
    have_pod_objects = any(r.pods.listed for r in read)
    targets: list[BindingTarget] = []
    instances: list[dict[str, float]] = []
    unready = 0
    for r, (_, low, high, cost) in zip(read, binding_targets(binding)):
        ref = r.ref
        pod_instances = _instances_from_snapshot(snapshot, namespace, r.pods.ready, r.serving_names, have_pod_objects)
        if r.group is None:
            targets.append(
                BindingTarget(ref.name, ref.namespace, ref.api_version, ref.kind, r.current, low, high, cost)
            )
            instances += pod_instances
            unready += r.pods.unready
            continue
        current_groups = group_count(r.group)
        targets.append(
            BindingTarget(ref.name, ref.namespace, ref.api_version, ref.kind, current_groups, low, high, cost, r.group)
        )
        if current_groups is not None:
            serving_per_group = sum(m.per_group for m in r.group if m.serves) or 1
            instances += group_instances(pod_instances, current_groups)
            unready += -(-r.pods.unready // serving_per_group)
    optimizer = spec.get("optimizerConfiguration") or {}
    return BindingInputs(
        namespace=namespace,
        name=meta["name"],
        generation=meta.get("generation"),
        policy_name=policy_name,
        policy=(policy or {}).get("spec") if policy else None,
        heterogeneous=bool(optimizer),
        targets=targets,
        instances=instances,
        unready=unready,
        metrics_error=metrics_error,
        cost_expansion_rate_percent=int(optimizer.get("costExpansionRatePercent", 200)),
        old_status=binding.get("status") or {},
        scale_to_zero_grace_s=binding_grace_period(cluster, binding),
    )


def binding_grace_period(cluster: Cluster, binding: dict[str, Any]) -> float | None:
    """The binding's scale-to-zero grace period (seconds): its annotation, else the Kthena Model that
    owns it (one GET, only for a binding without the annotation). A malformed value is logged and means
    no grace period (the policy's own windows still apply)."""
    meta = binding.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    model_spec = None
    if not annotations.get(ANNOTATION_SCALE_TO_ZERO_GRACE):
        owner = next(
            (
                r
                for r in meta.get("ownerReferences") or ()
                if r.get("kind") == "Model" and group_of(str(r.get("apiVersion", ""))) == KTHENA_GROUP
            ),
            None,
        )
        if owner is not None:
            try:
                model_spec = cluster.get(owner["apiVersion"], "Model", owner["name"], meta.get("namespace")).get("spec")
            except NotFound:
                model_spec = None
    try:
        return scale_to_zero_grace(annotations, model_spec)
    except ValueError as exc:
        log.warning("AutoscalingPolicyBinding %s: ignoring scale-to-zero grace period: %s", meta.get("name"), exc)
        return None


def binding_modes(binding: Mapping[str, Any], default: str) -> tuple[dict[str, str], str, str | None]:
    """Each target's actuation mode (per-target overrides, else the binding's annotation, else ``default``),
    the binding's own mode, and the error of a malformed annotation (then everything is ``recommend``).

    The members of a serving group (``modelplane.io/scale-groups``) take their group target's mode.
    """
    annotations = (binding.get("metadata") or {}).get("annotations") or {}
    names = [_target_ref(target, "").name for target, *_ in binding_targets(binding)]
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


def apply_binding(
    cluster: Cluster,
    binding: dict[str, Any],
    decision: BindingDecision,
    now: datetime,
    default_mode: str = SCALE,
    published: frozenset[tuple[str, str]] = frozenset(),
) -> None:
    """Scale each changed target whose mode scales, persist window state in status, post an Event.

    ``published``: (namespace, target name) of the targets whose desired replicas reached the Pushgateway.
    """
    modes, binding_mode, mode_error = binding_modes(binding, default_mode)
    if mode_error:
        decision.ready, decision.reason, decision.message = False, REASON_INVALID, mode_error
    for target in decision.targets:
        target.mode = modes.get(target.name, binding_mode)
        scale_ok = False
        if scales(target.mode) and target.changes_replicas:
            try:
                cluster.set_scale(
                    ObjectRef(target.api_version, target.kind, target.name, target.namespace), target.desired
                )
                target.scaled = scale_ok = True
            except ClusterError as exc:
                decision.ready = False
                decision.message += f"; scaling {target.kind}/{target.name} failed: {exc.message}"
        elif scales(target.mode) and decision.ready:
            scale_ok = True
        target.applied = Actuation(target.mode, scale_ok, (target.namespace, target.name) in published).applied
    metrics_ok = decision.reason != REASON_NO_METRICS
    metrics_message = "Policy metrics are available" if metrics_ok else decision.message
    generation = (binding.get("metadata") or {}).get("generation")

    def build(current: dict[str, Any]) -> dict[str, Any] | None:
        old = current.get("status") or {}
        return changed_fields(old, binding_status(decision, old, now, generation, metrics_ok, metrics_message))

    write_status(cluster, binding, build)
    if any(t.changes_replicas for t in decision.targets):
        post_event(cluster, binding, "DesiredReplicasChanged", decision.message)
