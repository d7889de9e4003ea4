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

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from engine.api.kthena import API_VERSION as KTHENA_API_VERSION
from engine.api.registry import MODEL
from engine.rollout.kthena_native import RUNTIME_IMAGE
from flows.image import IMAGE
from flows.parameters import KTHENA_NETWORKING, ROLLOUT_WORKLOAD, ClusterTarget, ImageRef, Namespaces, ObjectNames
from flows.reconcile import Report, Table, conclude, reconcile_each
from flows.runs import flow
from tasks.aim.writes import WriteCounts
from tasks.clients.cluster import ClusterError, Manifest, ObjectRef, connect
from tasks.clients.events import emit_change
from tasks.rollout_models import ModelOutcome, RolloutOptions, list_models, reconcile_model
from tasks.tracking import run_logger

DEFAULT_INTERVAL_S = 300
DEFAULT_DOWNLOADER_IMAGE = IMAGE  # flows/image.py


def _joined(attribute: str) -> Callable[[ModelOutcome], str]:
    """A list attribute of an outcome as one cell."""
    return lambda outcome: ", ".join(getattr(outcome, attribute))


@dataclass
class RolloutReport(Report[ModelOutcome]):
    """What one rollout pass did: a row per Model."""

    @property
    def models(self) -> list[ModelOutcome]:
        """Each Model's outcome."""
        return self.rows

    @property
    def failed(self) -> list[ModelOutcome]:
        """The Models that are Failed."""
        return [m for m in self.rows if m.result.startswith("Failed")]

    def row_problem(self, row: ModelOutcome) -> str | None:
        """A Model that is Failed."""
        return f"{row.namespace}/{row.name}: {row.result}" if row.result.startswith("Failed") else None


TABLE = Table(
    "rollout-models",
    (
        "namespace",
        ("model", "name"),
        "result",
        *((what, _joined(what)) for what in ("created", "updated", "deleted", "lora")),
    ),
    "rollout-models",
)


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

    Returns:
        The report: one outcome per Model and the summary; a degraded run (a Model Failed) ends Failed named Degraded
        (:func:`flows.exitcodes.flow_result`).
    """
    options = RolloutOptions(kthena_networking, workload, runtime_image)
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    conn = connect(cluster)

    def reconcile(manifest: Manifest, counts: WriteCounts) -> ModelOutcome:
        outcome = reconcile_model(conn, manifest, now, downloader_image, options=options)
        logger.info("Model %s/%s: %s (%d writes)", outcome.namespace, outcome.name, outcome.result, outcome.writes)
        if outcome.created or outcome.updated or outcome.deleted:
            announce(outcome)
        return outcome

    models = [
        m for m in list_models(conn, list(namespaces or ()) or None) if not names or m["metadata"]["name"] in names
    ]
    # e.g. the status write itself failed: reported as the Model's outcome, the others go on (one at a time)
    report = RolloutReport(
        *reconcile_each(conn, models, reconcile, failure_reason="RolloutFailed", failed_row=failed_outcome, workers=1)
    )
    changed = sum(1 for m in report.models if m.writes)
    report.summary = f"{len(report.models)} models, {changed} changed, {len(report.failed)} failed"
    return conclude("rollout-models", report, TABLE)


def failed_outcome(manifest: Manifest, exc: ClusterError | ValueError) -> ModelOutcome:
    """The outcome of a Model whose reconcile raised: Failed, with the error's reason and message.

    Args:
        manifest: The Model as read.
        exc: What its reconcile raised.

    Returns:
        The Model's Failed outcome.
    """
    meta = manifest.get("metadata") or {}
    reason, message = (exc.reason, exc.message) if isinstance(exc, ClusterError) else ("Invalid", str(exc))
    return ModelOutcome(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), result=f"Failed: {reason}: {message}"
    )


def announce(outcome: ModelOutcome) -> None:
    """A Prefect event per Model whose workloads changed, for automations and triggers to chain on.

    Args:
        outcome: One Model's outcome; nothing is emitted when it changed no workload.
    """
    emit_change(
        ObjectRef(KTHENA_API_VERSION, MODEL, outcome.name, outcome.namespace),
        "rolled-out",
        {"created": outcome.created, "updated": outcome.updated, "deleted": outcome.deleted, "result": outcome.result},
    )
