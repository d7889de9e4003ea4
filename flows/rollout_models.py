"""The ``rollout-models`` flow: one reconcile pass over every Kthena ``Model``.

Lifecycle, top to bottom:

1. list the Models (all namespaces, or the ones named; only the Models named, when a change event names one);
2. for each Model (independently: one Model's failure never stops the others):
   validate it as Kthena's webhook does -> resolve its weights (direct ``pvc://`` mount, a download into
   its ``cacheURI``, or a shared ModelCache) -> render Deployments + Services, the AutoscalingPolicy /
   Binding and the route ConfigMap -> write only what changed, delete what the spec no longer has ->
   apply LoRA-only changes on running vLLM pods when the backend allows it -> write status;
3. publish a table artifact and a one-line summary.

The optimize flow then scales the Deployments through the bindings written here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from engine.api.kthena import API_VERSION as KTHENA_API_VERSION
from engine.api.registry import MODEL
from engine.rollout.kthena_native import RUNTIME_IMAGE
from flows.exitcodes import flow_result
from flows.image import IMAGE
from flows.parameters import KTHENA_NETWORKING, ROLLOUT_WORKLOAD, ClusterTarget, ImageRef, Namespaces, ObjectNames
from flows.runs import flow
from tasks.cluster import ClusterError, connect
from tasks.cluster.recorder import record_event
from tasks.events import Subject, emit_change
from tasks.rollout_models import ModelOutcome, RolloutOptions, list_models, reconcile_model
from tasks.tracking import run_logger, table_artifact, tracked

DEFAULT_INTERVAL_S = 300
DEFAULT_DOWNLOADER_IMAGE = IMAGE  # flows/image.py


@dataclass
class RolloutReport:
    """What one rollout pass did."""

    models: list[ModelOutcome] = field(default_factory=list)
    summary: str = ""

    @property
    def failed(self) -> list[ModelOutcome]:
        return [m for m in self.models if m.result.startswith("Failed")]

    @property
    def degraded(self) -> list[str]:
        """Why this pass was degraded (exit 3, the ``Degraded`` run state): the Models that are Failed."""
        return [f"{m.namespace}/{m.name}: {m.result}" for m in self.failed]


@flow(name="rollout-models", timeout_seconds=DEFAULT_INTERVAL_S - 60, log_prints=True)
def rollout_models(
    namespaces: Namespaces = (),
    cluster: ClusterTarget = "",
    downloader_image: ImageRef = DEFAULT_DOWNLOADER_IMAGE,
    names: ObjectNames = (),
    kthena_networking: Literal["auto", "off"] = KTHENA_NETWORKING,
    workload: Literal["Deployment", "ModelServing"] = ROLLOUT_WORKLOAD,
    runtime_image: ImageRef = RUNTIME_IMAGE,
) -> RolloutReport:
    """Roll out every Kthena Model: backends become Deployments the optimize flow scales.

    Args:
        namespaces: Namespaces to reconcile; empty means all namespaces.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.
        downloader_image: Modelplane's image, run as the init container that downloads weights into a
            backend's cacheURI.
        names: Only the Models with these names (in the namespaces above); empty means every Model. A run
            triggered by a Model's change event rolls out just that Model.
        kthena_networking: 'auto' renders Kthena's ModelServer + ModelRoute (what kthena-router reads) and its
            runtime sidecar (kthena:* metrics on port 8100) when the cluster serves networking.serving.volcano.sh;
            'off' never does.
        workload: 'Deployment' (default), or 'ModelServing' to render each backend as Kthena's gang-scheduled
            ModelServing where the cluster serves workload.serving.volcano.sh (Deployments otherwise).
        runtime_image: Kthena's runtime sidecar image (with Kthena networking).
    """
    options = RolloutOptions(kthena_networking, workload, runtime_image)
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    target = connect(cluster)

    report = RolloutReport()
    for manifest in list_models(target, namespaces or None):
        if names and manifest["metadata"]["name"] not in names:
            continue
        try:
            outcome = reconcile_model(target, manifest, now, downloader_image, options=options)
        except ClusterError as exc:  # e.g. the status write itself failed: report it, go on with the others
            meta = manifest.get("metadata") or {}
            outcome = ModelOutcome(
                namespace=meta.get("namespace", ""),
                name=meta.get("name", ""),
                result=f"Failed: {exc.reason}: {exc.message}",
            )
            record_event(target, manifest, "RolloutFailed", exc.message, "Warning")
        logger.info("Model %s/%s: %s (%d writes)", outcome.namespace, outcome.name, outcome.result, outcome.writes)
        report.models.append(outcome)
        if outcome.created or outcome.updated or outcome.deleted:
            announce(outcome)

    changed = sum(1 for m in report.models if m.writes)
    report.summary = f"{len(report.models)} models, {changed} changed, {len(report.failed)} failed"
    publish(report)
    logger.info("rollout-models: %s", report.summary)
    return flow_result(report, report.degraded)


def announce(outcome: ModelOutcome) -> None:
    """A Prefect event per Model whose workloads changed, for automations and triggers to chain on."""
    emit_change(
        Subject(KTHENA_API_VERSION, MODEL, outcome.name, outcome.namespace),
        "rolled-out",
        {"created": outcome.created, "updated": outcome.updated, "deleted": outcome.deleted, "result": outcome.result},
    )


def publish(report: RolloutReport) -> None:
    """The per-Model table as a Prefect artifact (only inside a flow run)."""
    if not tracked():
        return
    table_artifact(
        key="rollout-models",
        table=[
            {
                "namespace": m.namespace,
                "model": m.name,
                "result": m.result,
                "created": ", ".join(m.created),
                "updated": ", ".join(m.updated),
                "deleted": ", ".join(m.deleted),
                "lora": ", ".join(m.lora),
            }
            for m in report.models
        ],
        description=f"rollout-models: {report.summary}",
    )
