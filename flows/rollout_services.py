"""The ``rollout-services`` flow: AIMService -> KServe InferenceService + Gateway HTTPRoute, status.

Read -> plan -> write, per service:

1. read (:func:`tasks.aim.read.read_aim_state`): one LIST each of AIMServices, AIMServiceTemplates,
   AIMClusterModels, AIMNamespaceConfigs, ModelCaches, Nodes, InferenceServices and HTTPRoutes, the
   custom resources parsed into their API models by the boundary reader (one that does not parse is
   marked Failed ``InvalidSpec`` naming the field, left out, and the run exits 3);
2. plan (:func:`engine.aim.service_plan.plan_service`, pure): references (model by canonical name,
   template, or the best Available template when ``templateRef`` is omitted, namespace config; a
   missing, mismatched or ambiguous one gets its seed status and reason and stops the rollout there),
   names, caches (with ``cacheModel``, the default, a ModelCache per model source is requested and the
   service waits until they are Available; existing Available caches are mounted even when not
   requested), the rendered InferenceService and HTTPRoute with the patches that bring existing ones
   to them, and the status (Starting until the InferenceService is Ready and the route accepted by its
   Gateway, then Running);
3. write (:func:`tasks.aim.rollout.write_service_plan`): requested caches, changed objects only, ``lastUsed``
   on every cache a rolled-out workload mounts, objects retired from an older name, the status when
   it changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from engine.aim.service_plan import ServicePlan, ServiceWorld, plan_service
from engine.api.aim import API_VERSION as AIM_API_VERSION
from engine.api.aim import AIMService
from engine.api.registry import AIM_SERVICE
from flows.exitcodes import flow_result
from flows.parameters import ClusterTarget, Namespaces
from flows.runs import flow
from tasks.aim.caches import SharedCaches
from tasks.aim.read import AimState, read_aim_state, typed
from tasks.aim.rollout import write_service_plan
from tasks.aim.writes import WriteCounts, for_each
from tasks.boundary import Accepted
from tasks.cluster import connect
from tasks.cluster.errors import ClusterError
from tasks.cluster.recorder import record_event
from tasks.events import Subject, emit_change
from tasks.tracking import run_logger, table_artifact, tracked

DEFAULT_INTERVAL_S = 300


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
def rollout_services(namespaces: Namespaces = (), cluster: ClusterTarget = "") -> RolloutReport:
    """Roll out every AIMService as a KServe InferenceService and Gateway HTTPRoute, and report its status.

    Args:
        namespaces: Roll out services in these namespaces only; empty means all namespaces.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.
    """
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    cluster_api = connect(cluster)
    state = read_aim_state(
        cluster_api, ["services", "templates", "models", "configs", "caches", "nodes", "isvcs", "routes"]
    )
    scope = set(namespaces or ()) or None
    world = service_world(state)
    caches = SharedCaches(state.caches)
    services = [
        s for s in sorted(state.services, key=lambda s: (s.namespace, s.name)) if scope is None or s.namespace in scope
    ]

    def one(service: Accepted[AIMService], counts: WriteCounts) -> ServiceRow | None:
        try:
            plan = plan_service(service.model, world)
            write_service_plan(cluster_api, service.obj, plan, caches, now, counts)
        except (ClusterError, ValueError) as exc:  # one service's failure must not stop the others
            message = getattr(exc, "message", None) or str(exc)
            counts.errors.append(f"AIMService {service.namespace}/{service.name}: {message}")
            record_event(cluster_api, service.obj, "RolloutFailed", message, "Warning")
            return None
        return row_of(plan)

    report = RolloutReport()
    report.rows = [row for row in for_each(services, one, report.writes) if row is not None]
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
        Subject(AIM_API_VERSION, AIM_SERVICE, row.name, row.namespace),
        "rolled-out",
        {"action": row.action, "status": row.status, "workload": row.workload},
    )


def service_world(state: AimState) -> ServiceWorld:
    """What the run read, indexed for :func:`engine.aim.service_plan.plan_service`."""
    return ServiceWorld.of(
        models=typed(state.models),
        templates=typed(state.templates),
        configs=typed(state.configs),
        caches=typed(state.caches),
        nodes=state.nodes,
        isvcs=state.isvcs,
        routes=state.routes,
    )


def row_of(plan: ServicePlan) -> ServiceRow:
    """The table line of a written plan."""
    return ServiceRow(plan.namespace, plan.name, plan.outcome.status, plan.reason, plan.workload, plan.action)


def publish(report: RolloutReport) -> None:
    """The rollout table as a Prefect artifact (only inside a flow run)."""
    if not tracked():
        return
    table_artifact(
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
