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

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from engine.aim.service_plan import ServicePlan, ServiceWorld, plan_service
from engine.api.aim import API_VERSION as AIM_API_VERSION
from engine.api.registry import AIM_SERVICE
from flows.parameters import ClusterTarget, Namespaces
from flows.reconcile import Report, Table, conclude, in_scope, planned, reconcile_each, status_problem, tally
from flows.runs import flow
from tasks.aim.caches import SharedCaches
from tasks.aim.read import AimState, read_aim_state, typed
from tasks.aim.rollout import write_service_plan
from tasks.clients.cluster import ObjectRef, connect
from tasks.clients.events import emit_change

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
class RolloutReport(Report[ServiceRow]):
    """What one rollout-services run did."""

    def row_problem(self, row: ServiceRow) -> str | None:
        """A service not Running."""
        return status_problem(AIM_SERVICE, row, "Running")


TABLE = Table(
    "aim-services", ("namespace", ("service", "name"), "status", "reason", "workload", "action"), "rollout-services"
)


@flow(name="rollout-services", timeout_seconds=DEFAULT_INTERVAL_S - 60, log_prints=True)
def rollout_services(namespaces: Namespaces = (), cluster: ClusterTarget = "") -> RolloutReport:
    """Roll out every AIMService as a KServe InferenceService and Gateway HTTPRoute, and report its status.

    Args:
        namespaces: Roll out services in these namespaces only; empty means all namespaces.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.

    Returns:
        The report: one row per AIMService, the writes and the summary; a degraded run ends Failed named Degraded
        (:func:`flows.exitcodes.flow_result`).
    """
    now = datetime.now(UTC).replace(microsecond=0)
    conn = connect(cluster)
    state = read_aim_state(conn, ["services", "templates", "models", "configs", "caches", "nodes", "isvcs", "routes"])
    world = service_world(state)
    caches = SharedCaches(state.caches)
    rollout = planned(
        partial(plan_service, world=world),
        lambda obj, plan, counts: write_service_plan(conn, obj, plan, caches, now, counts),
        row_of,
    )
    services = in_scope(state.services, namespaces)
    report = RolloutReport(*reconcile_each(conn, services, rollout, failure_reason="RolloutFailed"))
    for row in report.rows:
        if row.action in ("created", "updated"):
            announce(row)

    report.summary = tally((row.status for row in report.rows), "no services") + (
        f"; {report.writes.created} objects created, {report.writes.updated} updated, {report.writes.statuses} statuses written"
        + (f", {len(report.writes.errors)} errors" if report.writes.errors else "")
    )
    return conclude("rollout-services", report, TABLE)


def announce(row: ServiceRow) -> None:
    """``modelplane.aim.service.rolled-out`` (tasks.clients.events.SERVICE_ROLLED_OUT) for a service whose
    InferenceService or HTTPRoute this run created or updated, for automations to chain on.

    Args:
        row: One service's row; nothing is emitted when it created or updated nothing.
    """
    emit_change(
        ObjectRef(AIM_API_VERSION, AIM_SERVICE, row.name, row.namespace),
        "rolled-out",
        {"action": row.action, "status": row.status, "workload": row.workload},
    )


def service_world(state: AimState) -> ServiceWorld:
    """What the run read, indexed for :func:`engine.aim.service_plan.plan_service`.

    Args:
        state: What the run read.

    Returns:
        The templates, caches, nodes, InferenceServices and HTTPRoutes indexed by namespace and name.
    """
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
    """The table line of a written plan.

    Args:
        plan: The decision for one AIMService, written.

    Returns:
        Its row of the run's table.
    """
    return ServiceRow(plan.namespace, plan.name, plan.outcome.status, plan.reason, plan.workload, plan.action)
