"""The ``resolve-templates`` flow: AIMServiceTemplate -> profile, GPU availability, model sources, caches.

Read -> plan -> write, per template:

1. read (:func:`tasks.aim.read.read_aim_state`): one LIST each of AIMServiceTemplates, AIMClusterModels,
   AIMNamespaceConfigs, ModelCaches and Nodes, the custom resources parsed into their API models by
   the boundary reader (a template that does not parse is marked Failed ``InvalidSpec`` naming the
   field, left out, and the run exits 3);
2. plan (:func:`engine.aim.template_plan.plan_template`, pure): its model (by canonical name) and what
   discovery read from the image, whether its GPU is in the cluster (AMD and NVIDIA node labels),
   which recommended deployment it selects, ``status.modelSources`` (the model's source, normalised),
   and with ``warmCache`` a ModelCache per model source to request and wait for (the warm-caches flow
   fills them): the template is Available only when they are;
3. write (:func:`tasks.aim.resolve.write_template_plan`): the requested caches (created or adopted through
   ``tasks.caches``), then ``status.status``, ``status.modelSources`` and the seed's conditions where
   they changed; last, each model's ``Ready`` from its auto-created templates as this run left them
   (:func:`engine.aim.template_plan.plan_model_readiness`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from engine.aim.template_plan import ResolvePlan, TemplateWorld, plan_model_readiness, plan_template
from engine.api.aim import API_VERSION as AIM_API_VERSION
from engine.api.registry import AIM_SERVICE_TEMPLATE
from engine.status import ConditionUpdate, status_with_conditions
from flows.parameters import ClusterTarget, Namespaces
from flows.reconcile import Report, Table, conclude, in_scope, planned, reconcile_each, status_problem
from flows.runs import flow
from tasks.aim.caches import SharedCaches
from tasks.aim.read import read_aim_state, typed
from tasks.aim.resolve import write_template_plan
from tasks.aim.writes import WriteCounts, write_changed_status
from tasks.clients.cluster import Cluster, Manifest, ObjectRef, connect
from tasks.clients.cluster.errors import ClusterError
from tasks.clients.events import emit_change
from tasks.tracking import run_logger

DEFAULT_INTERVAL_S = 300


@dataclass
class TemplateRow:
    """One line of the resolution table."""

    namespace: str
    name: str
    status: str
    reason: str
    message: str


@dataclass
class ResolveReport(Report[TemplateRow]):
    """What one resolve-templates run decided and wrote."""

    caches_requested: int = 0

    def row_problem(self, row: TemplateRow) -> str | None:
        """A template not Available."""
        return status_problem(AIM_SERVICE_TEMPLATE, row, "Available")


TABLE = Table("aim-templates", ("namespace", ("template", "name"), "status", "reason", "message"), "resolve-templates")


@flow(name="resolve-templates", timeout_seconds=DEFAULT_INTERVAL_S - 60, log_prints=True)
def resolve_templates(namespaces: Namespaces = (), cluster: ClusterTarget = "") -> ResolveReport:
    """Resolve every AIMServiceTemplate to a runtime profile, check its GPU, and warm its caches when asked.

    Args:
        namespaces: Resolve templates in these namespaces only; empty means all namespaces.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.

    Returns:
        The report: one row per template, the writes and the summary; a degraded run ends Failed named Degraded
        (:func:`flows.exitcodes.flow_result`).
    """
    now = datetime.now(UTC).replace(microsecond=0)
    conn = connect(cluster)
    state = read_aim_state(conn, ["templates", "models", "configs", "caches", "nodes"])
    world = TemplateWorld.of(
        models=typed(state.models), configs=typed(state.configs), caches=typed(state.caches), nodes=state.nodes
    )
    caches = SharedCaches(state.caches)
    resolve = planned(
        partial(plan_template, world=world),
        lambda obj, plan, counts: write_template_plan(conn, obj, plan, caches, now, counts),
        row_of,
    )
    templates = in_scope(state.templates, namespaces)
    report = ResolveReport(*reconcile_each(conn, templates, resolve, failure_reason="ResolveFailed"))
    resolved = {(r.namespace, r.name): r.status for r in report.rows}
    as_read = {m.name: m.obj for m in state.models}
    for model, ready in plan_model_readiness(typed(state.models), typed(state.templates), resolved, world.catalog):
        write_model_ready(conn, as_read[str(model.metadata.name)], ready, now, report.writes)
    report.caches_requested = report.writes.created

    counts = {
        s: sum(1 for r in report.rows if r.status == s) for s in ("Available", "Progressing", "Pending", "Failed")
    }
    report.summary = (
        ", ".join(f"{n} {s}" for s, n in counts.items())
        + f"; {report.caches_requested} caches requested, {report.writes.statuses} statuses written"
        + (f", {len(report.writes.errors)} errors" if report.writes.errors else "")
    )
    if report.writes.statuses or report.caches_requested:  # rollout-services and warm-caches follow
        for row in report.rows:
            if row.status == "Available":
                emit_change(
                    ObjectRef(AIM_API_VERSION, AIM_SERVICE_TEMPLATE, row.name, row.namespace),
                    "available",
                    {"reason": row.reason},
                )
    return conclude("resolve-templates", report, TABLE)


def row_of(plan: ResolvePlan) -> TemplateRow:
    """The table line of a written plan.

    Args:
        plan: The decision for one AIMServiceTemplate, written.

    Returns:
        Its row of the run's table.
    """
    ready = next((c for c in plan.outcome.conditions if c.type == "Ready"), None)
    return TemplateRow(
        plan.namespace, plan.name, plan.outcome.status, ready.reason if ready else "", ready.message if ready else ""
    )


def write_model_ready(
    cluster: Cluster, model: Manifest, ready: ConditionUpdate, now: datetime, writes: WriteCounts
) -> None:
    """Write a model's ``Ready`` as :func:`engine.aim.template_plan.plan_model_readiness` decided it.

    Args:
        cluster: The cluster the model lives in.
        model: The AIMClusterModel as read.
        ready: Its ``Ready`` condition as decided.
        now: The condition's transition time when it changes.
        writes: Where the status write (or its error) is counted.
    """
    try:
        if write_changed_status(cluster, model, status_with_conditions(model, [ready], now)):
            writes.statuses += 1
    except ClusterError as exc:
        writes.errors.append(f"AIMClusterModel {model['metadata']['name']}: {exc.message}")
        run_logger().error("%s", writes.errors[-1])
