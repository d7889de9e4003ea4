"""The ``watch-models`` flow: a Kthena Model's spec changes -> ``modelplane.kthena.model.changed`` within seconds.

Lifecycle, top to bottom:

1. open a bounded watch on the Models (one namespace, or all) for ``watch_seconds``: the API server first
   sends every Model as it is now, then each change as it happens;
2. for every Model whose ``metadata.generation`` rollout-models has not observed yet
   (``status.observedGeneration`` differs or is missing: a new Model, or one edited since its last
   rollout), emit ``modelplane.kthena.model.changed`` once per generation;
3. the deployment trigger ``rollout-models-on-model-change`` (deployments/prefect.yaml) runs rollout-models
   for just that Model (its namespace and name from the event).

The deployment runs every minute with a watch shorter than that, so a change waits seconds, not the
rollout's 5-minute schedule; a change made while no watch is open is in the next run's initial state,
and a Model the rollout has not caught up with yet is announced again by the next run. Nothing is kept
between runs. The watch only reads (RBAC: ``watch`` on models); the rollout's own schedule stays the
safety net.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from pydantic import Field

from engine.api.kthena import API_VERSION as KTHENA_API_VERSION
from engine.api.registry import MODEL
from engine.changes import UnobservedChange, new_changes
from flows.parameters import MAX_WATCH_S, WATCH_SECONDS, ClusterTarget, Namespaces
from flows.runs import flow
from tasks.clients.cluster import ObjectRef, connect
from tasks.clients.events import emit_change
from tasks.tracking import run_logger, table_artifact, tracked

DEFAULT_INTERVAL_S = 60


@dataclass
class ChangeRow:
    """One announced change."""

    namespace: str
    name: str
    generation: int
    observed_generation: int | None
    seen_as: str  # the watch event that showed it: ADDED (the state when the watch opened) or MODIFIED


@dataclass
class WatchReport:
    """What one watch saw and announced."""

    events: int = 0
    changes: list[ChangeRow] = field(default_factory=list)
    summary: str = ""

    def as_json(self) -> dict[str, Any]:
        """The report for ``modelplane watch-models --json``."""
        return {"events": self.events, "changes": [asdict(row) for row in self.changes], "summary": self.summary}


@flow(name="watch-models", timeout_seconds=DEFAULT_INTERVAL_S - 5, log_prints=True)
def watch_models(
    namespaces: Namespaces = (),
    watch_seconds: Annotated[float, Field(gt=0, le=MAX_WATCH_S)] = WATCH_SECONDS,
    cluster: ClusterTarget = "",
) -> WatchReport:
    """Watch the Kthena Models and announce each spec change rollout-models has not rolled out yet.

    Args:
        namespaces: Namespaces to watch; empty means all namespaces.
        watch_seconds: How long the watch stays open (at most 50 s, so a run ends before the next
            one-minute run is due).
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.

    Returns:
        The report: the changes announced and the summary.
    """
    logger = run_logger()
    scope = set(namespaces or [])
    only = next(iter(scope)) if len(scope) == 1 else None  # one namespace: a namespaced watch (and RBAC)
    report = WatchReport()
    announced: set[tuple[str, int]] = set()
    for event in connect(cluster).watch(KTHENA_API_VERSION, MODEL, namespace=only, timeout_s=watch_seconds):
        report.events += 1
        if event.type == "DELETED" or (scope and event.object["metadata"].get("namespace") not in scope):
            continue  # a deleted Model's workloads go with it (owner references)
        for change in new_changes([event.object], announced):
            announced.add(change.key)
            announce(change, event.type)
            report.changes.append(
                ChangeRow(change.namespace, change.name, change.generation, change.observed_generation, event.type)
            )
            logger.info(
                "Model %s/%s changed: generation %s, rolled out %s",
                change.namespace,
                change.name,
                change.generation,
                change.observed_generation if change.observed_generation is not None else "never",
            )
    report.summary = f"{report.events} watch events, {len(report.changes)} Model changes announced"
    publish(report)
    logger.info("watch-models: %s", report.summary)
    return report


def announce(change: UnobservedChange, seen_as: str) -> None:
    """``modelplane.kthena.model.changed`` about the Model, which triggers its rollout.

    Args:
        change: The Model's change: its generation and the generation last rolled out.
        seen_as: The watch event that showed it: ``ADDED`` (the state when the watch opened) or ``MODIFIED``.
    """
    emit_change(
        ObjectRef(KTHENA_API_VERSION, MODEL, change.name, change.namespace),
        "changed",
        {"generation": change.generation, "observedGeneration": change.observed_generation, "seenAs": seen_as},
    )


def publish(report: WatchReport) -> None:
    """The announced changes as a Prefect table artifact (only inside a flow run).

    Args:
        report: The run's report.
    """
    if not tracked():
        return
    table_artifact(
        key="watch-models",
        table=[asdict(row) for row in report.changes],
        description=f"watch-models: {report.summary}",
    )
