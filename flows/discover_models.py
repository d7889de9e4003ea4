"""The ``discover-models`` flow: AIMClusterModel image -> labels -> recommended deployments -> templates.

Read -> plan -> write:

1. read (:func:`tasks.aim.read.read_aim_state`): one LIST each of AIMClusterModels, AIMNamespaceConfigs and
   AIMServiceTemplates, the custom resources parsed into their API models by the boundary reader (a
   model that does not parse is marked Failed ``InvalidSpec`` naming the field, left out, and the run
   exits 3); then the images :func:`engine.aim.discovery_plan.images_to_read` names (never read,
   ``spec.image`` changed, a transient failure last time, or older than the resync interval), each
   distinct image once, config labels only (manifest + config blob, no layers), with the pull secrets
   AIMNamespaceConfigs name;
2. plan (:func:`engine.aim.discovery_plan.plan_model`, pure), per model: the record to persist in its
   ``aim.silogen.ai/image-metadata`` annotation (so later runs and flows never fetch it again), one
   AIMServiceTemplate per recommended deployment in every namespace that has an AIMNamespaceConfig (or
   the namespaces given), never over a template a person wrote, the auto-created templates the current
   image no longer wants, and the model's ``MetadataExtracted`` and ``Ready`` conditions;
3. write (:func:`tasks.aim.discover.write_model_plan`): record, new templates, deletions, conditions; then
   publish a summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import Field

from engine.aim.discovery import DiscoveryRecord
from engine.aim.discovery_plan import DiscoveryWorld, ModelPlan, images_to_read, plan_model, previous_record
from engine.api.aim import API_VERSION as AIM_API_VERSION
from engine.api.aim import AIMClusterModel
from engine.api.registry import AIM_CLUSTER_MODEL
from flows.parameters import DISCOVERY_RESYNC_S, MAX_RESYNC_S, ClusterTarget, Namespaces, Setting, absent_as
from flows.reconcile import Report, Table, conclude, reconcile_each
from flows.runs import flow
from tasks.aim.discover import write_model_plan
from tasks.aim.images import Keychain, inspect_images, pull_secrets, read_keychain
from tasks.aim.read import read_aim_state, typed
from tasks.aim.writes import WriteCounts
from tasks.boundary import Accepted
from tasks.clients.cluster import ObjectRef, connect
from tasks.clients.events import emit_change
from tasks.clients.oci import RegistryClient
from tasks.tracking import quote, run_logger

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
class DiscoveryReport(Report[ModelRow]):
    """What one discover-models run read and wrote."""

    fetched: int = 0
    registry_requests: dict[str, int] = field(default_factory=dict)

    def row_problem(self, row: ModelRow) -> str | None:
        """A model whose image was not read."""
        return None if row.result == "ok" else f"AIMClusterModel {row.name}: image {row.image}: {row.result}"


TABLE = Table("aim-discovery", (("model", "name"), "image", "result", "deployments", "templates"), "discover-models")


@flow(name="discover-models", timeout_seconds=DEFAULT_INTERVAL_S - 300, log_prints=True)
def discover_models(
    namespaces: Namespaces = (),
    resync_interval_s: Annotated[int, Field(ge=60, le=MAX_RESYNC_S)] = DISCOVERY_RESYNC_S,
    registry_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 10.0,
    insecure_registries: Annotated[Sequence[str], absent_as(())] = (),
    registry_mirrors: Annotated[Mapping[str, str], absent_as({})] = {},
    model_selector: Setting = "",
    cluster: ClusterTarget = "",
) -> DiscoveryReport:
    """Discover every AIMClusterModel's runtime profiles from its image labels and create its templates.

    Args:
        namespaces: Create templates in these namespaces; empty means every namespace with an AIMNamespaceConfig.
        resync_interval_s: Read an unchanged image again after this many seconds (a manifest request; the
            config is fetched only when the digest changed). Missing images are retried on this interval too.
        registry_timeout_s: Timeout of each registry request, in seconds (at most an hour).
        insecure_registries: Registry hosts spoken to over plain HTTP (localhost always is).
        registry_mirrors: Registry host -> mirror host, or 'oci-layout:DIR' (an OCI image layout per repository
            under DIR) for air-gapped clusters.
        model_selector: Label selector on AIMClusterModels (e.g. 'team=a'); empty means every model.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.

    Returns:
        The report: one row per AIMClusterModel, the writes and the registry requests; a degraded run ends Failed
        named Degraded (:func:`flows.exitcodes.flow_result`).
    """
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    # the mirrors are checked (a layout directory that is not there) before anything is read or written
    client = RegistryClient(
        insecure=tuple(insecure_registries or ()), timeout=registry_timeout_s, mirrors=registry_mirrors or {}
    )
    conn = connect(cluster)
    state = read_aim_state(conn, ["models", "configs", "templates"], model_selector or None)
    configs = typed(state.configs)

    wanted = images_to_read(typed(state.models), now, timedelta(seconds=resync_interval_s))
    records: dict[str, DiscoveryRecord] = {}
    if wanted:
        keychain = read_keychain(conn, quote(configs)) if any(pull_secrets(c) for c in configs) else Keychain()
        records = inspect_images(client, wanted, keychain, now)

    world = DiscoveryWorld.of(
        typed(state.templates), namespaces or sorted({c.metadata.namespace or "" for c in configs})
    )

    def reconcile(item: Accepted[AIMClusterModel], counts: WriteCounts) -> ModelRow:
        model = item.model
        read_now = model.spec.image in records
        plan = plan_model(model, records[model.spec.image] if read_now else previous_record(model), read_now, world)
        write_model_plan(conn, item.obj, plan, now, counts)
        return row_of(plan)

    ordered = sorted(state.models, key=lambda item: item.name)
    rows, writes = reconcile_each(conn, ordered, reconcile, failure_reason="DiscoveryFailed")
    report = DiscoveryReport(rows, writes, fetched=len(wanted), registry_requests=dict(client.requests_made))
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
                ObjectRef(AIM_API_VERSION, AIM_CLUSTER_MODEL, row.name),
                "discovered",
                {"image": row.image, "deployments": row.deployments, "templates": row.templates},
            )
    return conclude("discover-models", report, TABLE)


def row_of(plan: ModelPlan) -> ModelRow:
    """The table line of a written plan.

    Args:
        plan: The decision for one AIMClusterModel, written.

    Returns:
        Its row: name, image, result, deployments and templates.
    """
    return ModelRow(plan.name, plan.image, plan.result, plan.deployments, plan.templates)
