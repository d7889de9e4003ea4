"""The ``resolve-templates`` flow: AIMServiceTemplate -> profile, GPU availability, model sources, caches.

Lifecycle, top to bottom:

1. read the cluster: one LIST each of AIMServiceTemplates, AIMClusterModels, AIMNamespaceConfigs,
   ModelCaches and Nodes;
2. per template, decide (pure, :mod:`engine.aim.templates`): its model (by canonical name) and what
   discovery read from the image, whether its GPU is in the cluster (AMD and NVIDIA node labels), and
   which recommended deployment it selects; ``status.modelSources`` is the model's source, normalised;
3. when ``warmCache`` is set, request a ModelCache per model source (created or adopted through
   ``tasks.caches``; the warm-caches flow fills them) and wait for them: the template is Available
   only when they are;
4. write ``status.status``, ``status.modelSources`` and the seed's conditions where they changed
   (a template whose spec does not parse is Failed with a condition naming the field);
5. write each model's ``Ready`` from its auto-created templates as this run left them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact
from prefect.context import FlowRunContext

from engine.aim.discovery import MODEL_LABEL, is_auto_template, ready_condition
from engine.aim.templates import ModelCatalog, cluster_gpus, invalid_template_outcome, resolve_profile, template_status
from engine.api.aim import API_VERSION as AIM_API_VERSION
from flows.exitcodes import flow_result
from flows.parameters import ClusterTarget, NamespaceName
from tasks.aim import (
    AimState,
    WriteCounts,
    by_namespace,
    cache_state_map,
    caches_for,
    for_each,
    new_status,
    read_aim_state,
    split_invalid,
    write_invalid,
    write_status,
)
from tasks.cluster import Cluster, connect
from tasks.cluster.errors import ClusterError
from tasks.events import Subject, emit_change

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
class ResolveReport:
    """What one resolve-templates run decided and wrote."""

    rows: list[TemplateRow] = field(default_factory=list)
    writes: WriteCounts = field(default_factory=WriteCounts)
    caches_requested: int = 0
    summary: str = ""

    @property
    def degraded(self) -> list[str]:
        """Why this run was degraded (exit 3, the ``Degraded`` run state): failed writes, templates not Available."""
        return [
            *self.writes.errors,
            *(
                f"AIMServiceTemplate {r.namespace}/{r.name}: {r.status}" + (f" ({r.reason})" if r.reason else "")
                for r in self.rows
                if r.status != "Available"
            ),
        ]


@flow(name="resolve-templates", timeout_seconds=DEFAULT_INTERVAL_S - 60, log_prints=True)
def resolve_templates(namespaces: list[NamespaceName] | None = None, cluster: ClusterTarget = None) -> ResolveReport:
    """Resolve every AIMServiceTemplate to a runtime profile, check its GPU, and warm its caches when asked.

    Args:
        namespaces: Resolve templates in these namespaces only; empty means all namespaces.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.
    """
    logger = get_run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    cluster_api = connect(cluster)
    state = read_aim_state(cluster_api, ["templates", "models", "configs", "caches", "nodes"])
    state.templates, invalid_templates = split_invalid(state.templates)
    state.models, invalid_models = split_invalid(state.models)
    state.configs, _ = split_invalid(state.configs)  # discover-models and rollout-services report them
    inventory = cluster_gpus(state.nodes)
    catalog = ModelCatalog(
        state.models,
        invalid={name: bad.problem for bad in invalid_models if isinstance(name := _spec_name(bad.obj), str)},
    )
    configs = by_namespace(state.configs)
    caches = {ns: list(items.values()) for ns, items in by_namespace(state.caches).items()}
    scope = set(namespaces or ()) or None
    cache_lock = threading.Lock()

    report = ResolveReport()
    templates = [
        t
        for t in sorted(state.templates, key=lambda t: (t["metadata"]["namespace"], t["metadata"]["name"]))
        if scope is None or t["metadata"]["namespace"] in scope
    ]

    def one(template: dict, counts: WriteCounts) -> TemplateRow | None:
        namespace, name = template["metadata"]["namespace"], template["metadata"]["name"]
        try:
            profile = resolve_profile(template, catalog, inventory)
            warm = bool((template.get("spec") or {}).get("warmCache"))
            cache_states: dict[str, str | None] = {}
            if profile.discovered and warm:
                config = (configs.get(namespace) or {}).get("default")
                storage_class = ((config or {}).get("spec") or {}).get("cacheStorageClassName")
                with cache_lock:  # templates of one namespace share caches: request each once
                    views = caches_for(
                        cluster_api,
                        namespace,
                        profile.model_sources,
                        caches.get(namespace, []),
                        storage_class=storage_class,
                        request=True,
                        requested_by=f"AIMServiceTemplate/{namespace}/{name}",
                    )
                    caches.setdefault(namespace, []).extend(v.cache for v in views if v.requested and v.cache)
                counts.created += sum(1 for v in views if v.requested)
                cache_states = cache_state_map(views)
            outcome = template_status(profile, warm, cache_states)
            status = new_status(
                template, outcome.conditions, now, {"status": outcome.status, "modelSources": outcome.model_sources}
            )
            if write_status(cluster_api, template, status):
                counts.statuses += 1
        except (ClusterError, ValueError) as exc:  # one template's failure must not stop the others
            counts.errors.append(f"AIMServiceTemplate {namespace}/{name}: {getattr(exc, 'message', None) or exc}")
            return None
        ready = next((c for c in outcome.conditions if c.type == "Ready"), None)
        return TemplateRow(
            namespace, name, outcome.status, ready.reason if ready else "", ready.message if ready else ""
        )

    report.rows = [row for row in for_each(templates, one, report.writes) if row is not None]
    for bad in invalid_templates:  # one bad object never stops the run: it gets a condition naming the field
        namespace, name = bad.obj["metadata"]["namespace"], bad.obj["metadata"]["name"]
        if scope is not None and namespace not in scope:
            continue
        outcome = invalid_template_outcome(bad.problem)
        write_invalid(
            cluster_api, bad, outcome.conditions, now, {"status": outcome.status, "modelSources": []}, report.writes
        )
        report.rows.append(
            TemplateRow(namespace, name, outcome.status, "ValidationFailed", outcome.conditions[0].message)
        )
    update_model_readiness(cluster_api, state, catalog, report, now)
    report.caches_requested = report.writes.created
    for line in report.writes.errors:
        logger.error("%s", line)

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
                    Subject(AIM_API_VERSION, "AIMServiceTemplate", row.name, row.namespace),
                    "available",
                    {"reason": row.reason},
                )
    publish(report)
    logger.info("resolve-templates: %s", report.summary)
    return flow_result(report, report.degraded)


def _spec_name(obj: dict) -> object:
    spec = obj.get("spec")
    return spec.get("name") if isinstance(spec, dict) else None


def update_model_readiness(
    cluster_api: Cluster, state: AimState, catalog: ModelCatalog, report: ResolveReport, now: datetime
) -> None:
    """Each model's ``Ready`` from its auto-created templates as this run left them, so a model turns
    Ready when its templates do (not on the next discovery run). Models without auto-created templates
    keep what discover-models wrote."""
    resolved = {(r.namespace, r.name): r.status for r in report.rows}
    states: dict[str, list[str]] = {}
    for template in state.templates:
        if not is_auto_template(template):
            continue
        meta = template["metadata"]
        owner = (meta.get("labels") or {}).get(MODEL_LABEL, "")
        status = (
            resolved.get((meta["namespace"], meta["name"])) or (template.get("status") or {}).get("status") or "Pending"
        )
        states.setdefault(owner, []).append(status)
    for model in state.models:
        name = model["metadata"]["name"]
        if name not in states:
            continue
        record = catalog.record(model)
        if record is None or record.image != model["spec"]["image"]:
            continue
        try:
            if write_status(cluster_api, model, new_status(model, [ready_condition(record, states[name], True)], now)):
                report.writes.statuses += 1
        except ClusterError as exc:
            report.writes.errors.append(f"AIMClusterModel {name}: {exc.message}")


def publish(report: ResolveReport) -> None:
    """The resolution table as a Prefect artifact (only inside a flow run)."""
    if FlowRunContext.get() is None:
        return
    create_table_artifact(
        key="aim-templates",
        table=[
            {"namespace": r.namespace, "template": r.name, "status": r.status, "reason": r.reason, "message": r.message}
            for r in report.rows[:1000]
        ],
        description=f"resolve-templates: {report.summary}",
    )
