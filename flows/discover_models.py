"""The ``discover-models`` flow: AIMClusterModel image -> labels -> recommended deployments -> templates.

Lifecycle, top to bottom:

1. read the cluster: one LIST each of AIMClusterModels, AIMNamespaceConfigs and AIMServiceTemplates;
2. decide which images must be read: never read, ``spec.image`` changed, a transient failure last
   time, or older than the resync interval (what was read is persisted in the model's
   ``aim.silogen.ai/image-metadata`` annotation, so later runs and flows never fetch it again);
3. read those images' config labels from their registries (manifest + config blob, no layers), with
   the pull secrets AIMNamespaceConfigs name, each distinct image once;
4. persist the records and create one AIMServiceTemplate per recommended deployment in every
   namespace that has an AIMNamespaceConfig (or the namespaces given), never touching a template a
   person wrote; auto-created templates the current image no longer wants are deleted;
5. write each model's ``MetadataExtracted`` and ``Ready`` conditions (a model whose spec does not
   parse gets them False ``ValidationFailed`` naming the field), and publish a summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact
from prefect.context import FlowRunContext
from prefect.utilities.annotations import quote
from pydantic import Field

from engine.aim.discovery import (
    MODEL_LABEL,
    DiscoveryRecord,
    auto_templates,
    invalid_model_conditions,
    is_auto_template,
    metadata_condition,
    needs_fetch,
    ready_condition,
)
from engine.api.aim import API_VERSION as AIM_API_VERSION
from flows.exitcodes import flow_result
from flows.parameters import DISCOVERY_RESYNC_S, ClusterTarget, NamespaceName
from tasks.aim import (
    Keychain,
    WriteCounts,
    create_missing,
    delete_stale,
    for_each,
    inspect_images,
    new_status,
    read_aim_state,
    read_keychain,
    split_invalid,
    write_invalid,
    write_record,
    write_status,
)
from tasks.cluster import Cluster, connect
from tasks.cluster.errors import ClusterError
from tasks.events import Subject, emit_change
from tasks.oci import RegistryClient

DEFAULT_INTERVAL_S = 3600


@dataclass
class ModelRow:
    """One line of the discovery table."""

    name: str
    image: str
    result: str
    deployments: int
    templates: int


@dataclass
class DiscoveryReport:
    """What one discover-models run read and wrote."""

    rows: list[ModelRow] = field(default_factory=list)
    fetched: int = 0
    registry_requests: dict[str, int] = field(default_factory=dict)
    writes: WriteCounts = field(default_factory=WriteCounts)
    summary: str = ""

    @property
    def degraded(self) -> list[str]:
        """Why this run was degraded (exit 3, the ``Degraded`` run state): failed writes, images not read."""
        return [
            *self.writes.errors,
            *(f"AIMClusterModel {r.name}: image {r.image}: {r.result}" for r in self.rows if r.result != "ok"),
        ]


@flow(name="discover-models", timeout_seconds=DEFAULT_INTERVAL_S - 300, log_prints=True)
def discover_models(
    namespaces: list[NamespaceName] | None = None,
    resync_interval_s: Annotated[int, Field(ge=60)] = DISCOVERY_RESYNC_S,
    registry_timeout_s: Annotated[float, Field(gt=0)] = 10.0,
    insecure_registries: list[str] | None = None,
    registry_mirrors: dict[str, str] | None = None,
    model_selector: str | None = None,
    cluster: ClusterTarget = None,
) -> DiscoveryReport:
    """Discover every AIMClusterModel's runtime profiles from its image labels and create its templates.

    Args:
        namespaces: Create templates in these namespaces; empty means every namespace with an AIMNamespaceConfig.
        resync_interval_s: Read an unchanged image again after this many seconds (a manifest request; the
            config is fetched only when the digest changed). Missing images are retried on this interval too.
        registry_timeout_s: Timeout of each registry request, in seconds.
        insecure_registries: Registry hosts spoken to over plain HTTP (localhost always is).
        registry_mirrors: Registry host -> mirror host, or 'oci-layout:DIR' (an OCI image layout per repository
            under DIR) for air-gapped clusters.
        model_selector: Label selector on AIMClusterModels (e.g. 'team=a'); empty means every model.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.
    """
    logger = get_run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    cluster_api = connect(cluster)
    state = read_aim_state(cluster_api, ["models", "configs", "templates"], model_selector)
    config_namespaces = sorted({c["metadata"]["namespace"] for c in state.configs})
    state.models, invalid_models = split_invalid(state.models)
    state.configs, invalid_configs = split_invalid(state.configs)

    # Which images must be asked about (each distinct image once).
    resync = timedelta(seconds=resync_interval_s)
    previous = {
        m["metadata"]["name"]: DiscoveryRecord.from_annotations(m["metadata"].get("annotations")) for m in state.models
    }
    wanted: dict[str, DiscoveryRecord | None] = {}
    for model in state.models:
        image = model["spec"]["image"]
        if needs_fetch(previous[model["metadata"]["name"]], image, now, resync):
            wanted.setdefault(image, previous[model["metadata"]["name"]])

    client = RegistryClient(
        insecure=tuple(insecure_registries or ()), timeout=registry_timeout_s, mirrors=registry_mirrors or {}
    )
    records: dict[str, DiscoveryRecord] = {}
    if wanted:
        keychain = (
            read_keychain(cluster_api, quote(state.configs))
            if any(((c.get("spec") or {}).get("images") or {}).get("imagePullSecrets") for c in state.configs)
            else Keychain()
        )
        records = inspect_images(client, wanted, keychain, now)

    target_namespaces = namespaces or config_namespaces
    existing = {(t["metadata"]["namespace"], t["metadata"]["name"]): t for t in state.templates}
    auto_by_model: dict[str, list[dict]] = {}
    for template in state.templates:
        if is_auto_template(template):
            auto_by_model.setdefault((template["metadata"].get("labels") or {}).get(MODEL_LABEL, ""), []).append(
                template
            )
    report = DiscoveryReport(fetched=len(wanted), registry_requests=dict(client.requests_made))

    def reconcile(model: dict, counts: WriteCounts) -> ModelRow | None:
        return reconcile_model(
            cluster_api,
            model,
            records.get(model["spec"]["image"]) or previous[model["metadata"]["name"]],
            model["spec"]["image"] in records,
            target_namespaces,
            existing,
            auto_by_model,
            now,
            counts,
        )

    rows = for_each(sorted(state.models, key=lambda m: m["metadata"]["name"]), reconcile, report.writes)
    report.rows = [row for row in rows if row is not None]
    for bad in invalid_models:  # one bad object never stops the run: it gets a condition naming the field
        write_invalid(cluster_api, bad, invalid_model_conditions(bad.problem), now, None, report.writes)
        spec = bad.obj.get("spec")
        image = spec.get("image") if isinstance(spec, dict) else None
        report.rows.append(ModelRow(bad.name, image if isinstance(image, str) else "", f"invalid: {bad.problem}", 0, 0))
    report.writes.errors += [f"AIMNamespaceConfig {bad.name}: invalid: {bad.problem}" for bad in invalid_configs]
    for line in report.writes.errors:
        logger.error("%s", line)
    for line in report.writes.skipped:
        logger.warning("template skipped: %s", line)
    failed = sum(1 for r in report.rows if r.result != "ok")
    report.summary = (
        f"{len(report.rows)} models, {report.fetched} images read, {failed} failed; "
        f"{report.writes.created} templates created, {report.writes.deleted} stale removed, {report.writes.statuses} statuses written"
        + (f", {len(report.writes.errors)} write errors" if report.writes.errors else "")
    )
    for row in report.rows:  # one event per model whose image was read now: resolve-templates follows
        if row.result == "ok" and row.image in records:
            emit_change(
                Subject(AIM_API_VERSION, "AIMClusterModel", row.name),
                "discovered",
                {"image": row.image, "deployments": row.deployments, "templates": row.templates},
            )
    publish(report)
    logger.info("discover-models: %s", report.summary)
    return flow_result(report, report.degraded)


def reconcile_model(
    cluster_api: Cluster,
    model: dict,
    record: DiscoveryRecord | None,
    read_now: bool,
    namespaces: list[str],
    existing: dict[tuple[str, str], dict],
    auto_by_model: dict[str, list[dict]],
    now: datetime,
    counts: WriteCounts,
) -> ModelRow | None:
    """Persist one model's record, create its missing templates, write its conditions."""
    name, image = model["metadata"]["name"], model["spec"]["image"]
    try:
        if read_now and record is not None:
            model = write_record(cluster_api, model, record)
        current = record is not None and record.ok and record.metadata is not None and record.image == image
        plan = (
            auto_templates(model, record.metadata, namespaces)
            if current and record is not None and record.metadata
            else None
        )
        ours = auto_by_model.get(name, [])
        if plan is not None:
            create_missing(cluster_api, plan.templates, existing, is_auto_template, counts)
            counts.skipped += [f"{name}: {why}" for why in plan.skipped]
            # Templates of an earlier image (or a deployment the image no longer recommends) go: their
            # names hash the image, so the new image's templates replace them.
            wanted = {(t["metadata"]["namespace"], t["metadata"]["name"]) for t in plan.templates}
            stale = [
                t
                for t in ours
                if t["metadata"]["namespace"] in namespaces
                and (t["metadata"]["namespace"], t["metadata"]["name"]) not in wanted
            ]
            delete_stale(cluster_api, stale, counts)
            ours = [t for t in ours if t not in stale]
        states = [(t.get("status") or {}).get("status") or "Pending" for t in ours]
        if plan is not None and len(ours) < len(plan.templates):
            states += ["Pending"] * (len(plan.templates) - len(ours))
        status = new_status(
            model, [metadata_condition(record), ready_condition(record, states, bool(plan and plan.templates))], now
        )
        if write_status(cluster_api, model, status):
            counts.statuses += 1
    except ClusterError as exc:  # one model's API failure must not stop the others
        counts.errors.append(f"AIMClusterModel {name}: {exc.message}")
        return None
    result = "ok" if record is not None and record.ok else (record.reason if record is not None else "not read")
    deployments = (
        len(record.metadata.recommended_deployments) if record is not None and record.ok and record.metadata else 0
    )
    return ModelRow(name, image, result or "", deployments, len(plan.templates) if plan else 0)


def publish(report: DiscoveryReport) -> None:
    """The discovery table as a Prefect artifact (only inside a flow run)."""
    if FlowRunContext.get() is None:
        return
    create_table_artifact(
        key="aim-discovery",
        table=[
            {
                "model": r.name,
                "image": r.image,
                "result": r.result,
                "deployments": r.deployments,
                "templates": r.templates,
            }
            for r in report.rows[:1000]
        ],
        description=f"discover-models: {report.summary}",
    )
