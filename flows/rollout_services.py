"""The ``rollout-services`` flow: AIMService -> KServe InferenceService + Gateway HTTPRoute, status.

Lifecycle, top to bottom:

1. read the cluster: one LIST each of AIMServices, AIMServiceTemplates, AIMClusterModels,
   AIMNamespaceConfigs, ModelCaches, Nodes, InferenceServices and HTTPRoutes;
2. per service, resolve its references (model by canonical name, template, or the best Available
   template when ``templateRef`` is omitted, namespace config); a missing, mismatched, ambiguous or
   invalid one gets its seed status and reason and stops the rollout there (a service whose own spec
   does not parse is Failed with a condition naming the field);
3. caches: with ``cacheModel`` (default) a ModelCache per model source is requested and the service
   waits until they are Available; existing Available caches are mounted even when not requested;
4. render the InferenceService (and the HTTPRoute when the namespace routes) and write them only
   when missing or different; ``lastUsed`` on every cache a rolled-out workload mounts;
5. status from what the cluster reports: Starting until the InferenceService is Ready and the route
   accepted by its Gateway, then Running; written only when it changed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact
from prefect.context import FlowRunContext

from engine.aim.services import (
    STATUS_FAILED,
    CacheMount,
    Resolution,
    ServiceOutcome,
    blocked_status,
    render_http_route,
    render_inference_service,
    resolve_references,
    routing_of,
    service_status,
    update_patch,
    workload_name,
)
from engine.aim.templates import GpuInventory, ModelCatalog, cluster_gpus
from engine.api.aim import API_VERSION as AIM_API_VERSION
from flows.exitcodes import flow_result
from flows.parameters import ClusterTarget, NamespaceName
from tasks.aim import (
    AimState,
    WriteCounts,
    apply_object,
    by_namespace,
    caches_for,
    delete_stale,
    for_each,
    mark_caches_used,
    new_status,
    read_aim_state,
    split_invalid,
    write_invalid,
    write_status,
)
from tasks.caches import cache_available, cache_pvc
from tasks.cluster import Cluster, Manifest, connect
from tasks.cluster.errors import ClusterError
from tasks.events import Subject, emit_change

DEFAULT_INTERVAL_S = 300
MANAGED_PREDICTOR_KEYS = ("imagePullSecrets", "affinity")


@dataclass
class ServiceRow:
    """One line of the rollout table."""

    namespace: str
    name: str
    status: str
    reason: str
    workload: str
    action: str


@dataclass
class RolloutReport:
    """What one rollout-services run did."""

    rows: list[ServiceRow] = field(default_factory=list)
    writes: WriteCounts = field(default_factory=WriteCounts)
    summary: str = ""

    @property
    def degraded(self) -> list[str]:
        """Why this run was degraded (exit 3, the ``Degraded`` run state): failed writes, services not Running."""
        return [
            *self.writes.errors,
            *(
                f"AIMService {r.namespace}/{r.name}: {r.status}" + (f" ({r.reason})" if r.reason else "")
                for r in self.rows
                if r.status != "Running"
            ),
        ]


@flow(name="rollout-services", timeout_seconds=DEFAULT_INTERVAL_S - 60, log_prints=True)
def rollout_services(namespaces: list[NamespaceName] | None = None, cluster: ClusterTarget = None) -> RolloutReport:
    """Roll out every AIMService as a KServe InferenceService and Gateway HTTPRoute, and report its status.

    Args:
        namespaces: Roll out services in these namespaces only; empty means all namespaces.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.
    """
    logger = get_run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    cluster_api = connect(cluster)
    state = read_aim_state(
        cluster_api, ["services", "templates", "models", "configs", "caches", "nodes", "isvcs", "routes"]
    )
    scope = set(namespaces or ()) or None
    state.services, invalid_services = split_invalid(state.services)

    report = RolloutReport()
    context = RolloutContext.of(state)
    services = [
        s
        for s in sorted(state.services, key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"]))
        if scope is None or s["metadata"]["namespace"] in scope
    ]

    def one(service: Manifest, counts: WriteCounts) -> ServiceRow | None:
        try:
            return roll_out(cluster_api, service, context, now, counts)
        except (ClusterError, ValueError) as exc:  # one service's failure must not stop the others
            message = getattr(exc, "message", None) or str(exc)
            counts.errors.append(
                f"AIMService {service['metadata']['namespace']}/{service['metadata']['name']}: {message}"
            )
            return None

    report.rows = [row for row in for_each(services, one, report.writes) if row is not None]
    for bad in invalid_services:  # one bad object never stops the run: it gets a condition naming the field
        namespace, name = bad.obj["metadata"]["namespace"], bad.obj["metadata"]["name"]
        if scope is not None and namespace not in scope:
            continue
        outcome = blocked_status(
            Resolution(STATUS_FAILED, "ValidationFailed", f"invalid AIMService: {bad.problem}"), False
        )
        write_invalid(cluster_api, bad, outcome.conditions, now, {"status": outcome.status}, report.writes)
        report.rows.append(ServiceRow(namespace, name, outcome.status, "ValidationFailed", "", "none"))
    for line in report.writes.errors:
        logger.error("%s", line)
    for row in report.rows:
        if row.action in ("created", "updated"):
            announce(row)

    counts: dict[str, int] = {}
    for row in report.rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    report.summary = (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no services") + (
        f"; {report.writes.created} objects created, {report.writes.updated} updated, {report.writes.statuses} statuses written"
        + (f", {len(report.writes.errors)} errors" if report.writes.errors else "")
    )
    publish(report)
    logger.info("rollout-services: %s", report.summary)
    return flow_result(report, report.degraded)


def announce(row: ServiceRow) -> None:
    """``modelplane.aim.service.rolled-out`` (tasks.events.SERVICE_ROLLED_OUT) for a service whose
    InferenceService or HTTPRoute this run created or updated, for automations to chain on."""
    emit_change(
        Subject(AIM_API_VERSION, "AIMService", row.name, row.namespace),
        "rolled-out",
        {"action": row.action, "status": row.status, "workload": row.workload},
    )


@dataclass
class RolloutContext:
    """The run's cluster state indexed for per-service lookups."""

    state: AimState
    invalid: dict[str, dict[tuple[str, str], str]]
    """namespace -> (kind, name) -> problem, for templates and configs that do not parse."""
    templates: dict[str, dict[str, Manifest]]
    configs: dict[str, dict[str, Manifest]]
    caches: dict[str, list[Manifest]]
    isvcs: dict[str, dict[str, Manifest]]
    routes: dict[str, dict[str, Manifest]]
    inventory: GpuInventory
    catalog: ModelCatalog
    controlled: dict[str, list[Manifest]] = field(default_factory=dict)
    """controller uid -> the InferenceServices and HTTPRoutes it controls."""
    cache_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, state: AimState) -> RolloutContext:
        """Index ``state`` by namespace and name; templates, configs and models that do not parse are
        set aside (their users are told why)."""
        templates, bad_templates = split_invalid(state.templates)
        configs, bad_configs = split_invalid(state.configs)
        models, bad_models = split_invalid(state.models)
        invalid: dict[str, dict[tuple[str, str], str]] = {}
        for bad in bad_templates + bad_configs:
            invalid.setdefault(bad.obj["metadata"]["namespace"], {})[
                bad.obj.get("kind", ""), bad.obj["metadata"]["name"]
            ] = bad.problem
        bad_names = {
            spec["name"]: bad.problem
            for bad in bad_models
            if isinstance(spec := bad.obj.get("spec"), dict) and isinstance(spec.get("name"), str)
        }
        controlled: dict[str, list[Manifest]] = {}
        for obj in [*state.isvcs, *state.routes]:
            uid = _controller_uid(obj)
            if uid:
                controlled.setdefault(uid, []).append(obj)
        return cls(
            state=state,
            invalid=invalid,
            templates=by_namespace(templates),
            configs=by_namespace(configs),
            caches={ns: list(items.values()) for ns, items in by_namespace(state.caches).items()},
            isvcs=by_namespace(state.isvcs),
            routes=by_namespace(state.routes),
            inventory=cluster_gpus(state.nodes),
            catalog=ModelCatalog(models, invalid=bad_names),
            controlled=controlled,
        )


def roll_out(
    cluster: Cluster, service: Manifest, ctx: RolloutContext, now: datetime, writes: WriteCounts
) -> ServiceRow:
    """Resolve, render, write and report one service."""
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    resolution = resolve_references(
        service,
        ctx.catalog,
        ctx.templates.get(namespace, {}),
        ctx.configs.get(namespace, {}),
        ctx.inventory,
        ctx.invalid.get(namespace, {}),
    )
    desired_isvc_name = _workload_name(service)
    existing_isvc = ctx.isvcs.get(namespace, {}).get(desired_isvc_name) if desired_isvc_name else None
    if desired_isvc_name is None and not resolution.blocked:
        resolution = Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"namespace {namespace!r} is too long for KServe's 63-character host label {{isvc}}-predictor-{{namespace}}",
        )
    other = _controller_uid(existing_isvc)
    if existing_isvc is not None and other not in (None, service["metadata"].get("uid")) and not resolution.blocked:
        resolution = Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"InferenceService {desired_isvc_name!r} exists and is controlled by another object (uid {other}); it is left alone",
        )
        existing_isvc = None
    if resolution.blocked:
        outcome = blocked_status(resolution, existing_isvc is not None)
        _write(cluster, service, outcome, now, writes)
        return ServiceRow(
            namespace,
            name,
            outcome.status,
            resolution.reason,
            existing_isvc["metadata"]["name"] if existing_isvc else "",
            "none",
        )

    # Caches: requested when cacheModel (default true); existing Available ones are used anyway.
    config = resolution.config or {}
    storage_class = (config.get("spec") or {}).get("cacheStorageClassName")
    request = (service.get("spec") or {}).get("cacheModel") is not False
    with ctx.cache_lock:  # services of one namespace share caches: request each once
        views = caches_for(
            cluster,
            namespace,
            resolution.sources,
            ctx.caches.get(namespace, []),
            storage_class=storage_class,
            request=request,
            requested_by=f"AIMService/{namespace}/{name}",
        )
        ctx.caches.setdefault(namespace, []).extend(v.cache for v in views if v.requested and v.cache)
    available = [v for v in views if cache_available(v.cache) and cache_pvc(v.cache)]
    failed = [v.source for v in views if v.state == "Failed"]
    if failed:
        caches_ready, cache_reason, cache_message = False, "CacheFailed", f"cache of {', '.join(failed)} failed"
    elif request and len(available) < len(views):
        caches_ready, cache_reason, cache_message = (
            False,
            "WaitingForCache",
            f"{len(available)} of {len(views)} model caches available",
        )
    else:
        caches_ready, cache_reason = True, "CacheWarm"
        cache_message = (
            f"{len(available)} model caches mounted"
            if available
            else "caching not requested; the runtime downloads the model"
        )
    mounts = [CacheMount(v.source, v.cache["metadata"]["name"], cache_pvc(v.cache) or "") for v in available if v.cache]

    isvc, route, action = existing_isvc, None, "unchanged"
    enabled, gateway = routing_of(config)
    routing_problem = (
        None
        if gateway or not enabled
        else "routing.autoCreateRoute is true but the AIMNamespaceConfig names no routing.gateway"
    )
    if caches_ready:
        desired = render_inference_service(service, resolution, ctx.inventory, mounts)
        patch = update_patch(existing_isvc, desired, MANAGED_PREDICTOR_KEYS) if existing_isvc else None
        action = apply_object(cluster, desired, existing_isvc, patch)
        if action != "unchanged":
            isvc = desired if existing_isvc is None else {**existing_isvc, "spec": desired["spec"]}
            mark_caches_used(cluster, (v.cache for v in available if v.cache), now)
        _count(writes, action)
        if enabled and gateway:
            desired_route = render_http_route(service, gateway, desired["metadata"]["name"])
            existing_route = ctx.routes.get(namespace, {}).get(desired_route["metadata"]["name"])
            route_patch = update_patch(existing_route, desired_route) if existing_route else None
            route_action = apply_object(cluster, desired_route, existing_route, route_patch)
            _count(writes, route_action)
            route = existing_route if route_action == "unchanged" else desired_route
            if action == "unchanged":
                action = route_action
        retire_old_workloads(
            cluster, service, ctx, desired["metadata"]["name"], route["metadata"]["name"] if route else None, writes
        )
    outcome = service_status(
        caches_ready, cache_reason, cache_message, isvc, route, enabled, routing_problem, resolution.selected
    )
    _write(cluster, service, outcome, now, writes)
    ready = next((c for c in outcome.conditions if c.type == "Ready"), None)
    return ServiceRow(namespace, name, outcome.status, ready.reason if ready else "", desired_isvc_name or "", action)


def _controller_uid(obj: Manifest | None) -> str | None:
    for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def retire_old_workloads(
    cluster: Cluster,
    service: Manifest,
    ctx: RolloutContext,
    isvc_name: str,
    route_name: str | None,
    writes: WriteCounts,
) -> None:
    """Delete the InferenceServices and HTTPRoutes this service controls under another name (a name an
    earlier version gave it, e.g. before names hashed the service too), once the current ones exist."""
    uid = service["metadata"].get("uid")
    if not uid:
        return
    stale = [
        obj
        for obj in ctx.controlled.get(uid, [])
        if obj["kind"] == "InferenceService" and obj["metadata"]["name"] != isvc_name
    ]
    if route_name is not None:
        stale += [
            obj
            for obj in ctx.controlled.get(uid, [])
            if obj["kind"] == "HTTPRoute" and obj["metadata"]["name"] != route_name
        ]
    if stale:
        delete_stale(cluster, stale, writes)


def _workload_name(service: Manifest) -> str | None:
    try:
        return workload_name(service["metadata"]["name"], service["metadata"]["namespace"])
    except ValueError:
        return None


def _count(writes: WriteCounts, action: str) -> None:
    if action == "created":
        writes.created += 1
    elif action == "updated":
        writes.updated += 1


def _write(cluster: Cluster, service: Manifest, outcome: ServiceOutcome, now: datetime, writes: WriteCounts) -> None:
    if write_status(cluster, service, new_status(service, outcome.conditions, now, {"status": outcome.status})):
        writes.statuses += 1


def publish(report: RolloutReport) -> None:
    """The rollout table as a Prefect artifact (only inside a flow run)."""
    if FlowRunContext.get() is None:
        return
    create_table_artifact(
        key="aim-services",
        table=[
            {
                "namespace": r.namespace,
                "service": r.name,
                "status": r.status,
                "reason": r.reason,
                "workload": r.workload,
                "action": r.action,
            }
            for r in report.rows[:1000]
        ],
        description=f"rollout-services: {report.summary}",
    )
