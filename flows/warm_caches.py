"""The ``warm-caches`` flow: one reconcile pass over every ModelCache and every cache another resource needs.

Lifecycle, top to bottom:

1. read the cluster, once: ModelCaches, their consumers (AIM templates with ``warmCache``, AIM services with
   ``cacheModel``, Kthena Model backends without a ``cacheURI``, llmaz OpenModels), the namespaces'
   AIMNamespaceConfig ``default``, and the PVCs, fill Jobs and Pods this flow made; every later step works
   from this read and what the pass itself wrote;
2. ensure a cache for every consumer's source: one ModelCache per identity per namespace, a person's
   adopted (``tasks.caches.ensure_cache``, against the caches read);
3. optionally collect garbage: caches no workload used for ``gc_unused_after`` and none mounts now (before
   any fill: a cache about to be deleted is not filled first);
4. reconcile each cache: validate its source; create its PVC once (ReadWriteMany, ``spec.size`` as written,
   or what the source reports plus the headroom; storage class from the cache, the namespace config, or
   the cluster default); fill it — a Kubernetes Job from Modelplane's image running
   ``modelplane cache fill`` with the PVC mounted, or the same downloader in this process with the local
   backend; read the fill's verdict (the completion marker, reported through the Job pod's termination
   message); retry a failed fill with backoff up to ``max_fill_attempts``; write status
   ``Pending -> Progressing -> Available | Failed`` with conditions and Events;
5. publish a table artifact and a one-line summary (:mod:`flows.reconcile`); every status change is also a
   Prefect event ``modelplane.aim.cache.<status>`` (``tasks.clients.events``; e.g. ``CACHE_AVAILABLE``) for rollout
   triggers.

Every run is a fresh process: fill attempts live in an annotation on the cache, failures in its status.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import Field

from engine.api.aim import ModelCache
from engine.caches.fill import JobSettings, quantity_bytes
from engine.caches.gc import MIN_UNUSED_AFTER
from engine.caches.plan import RetryPolicy
from engine.cycle_metrics import MetricSet
from engine.units import format_duration
from flows.image import IMAGE
from flows.parameters import (
    FILL_RETRY_BACKOFF_S,
    MAX_FILL_ATTEMPTS,
    ClusterTarget,
    ImageRef,
    Namespaces,
    NonNegativeSeconds,
    ObjectNames,
    OptionalNamespace,
    Setting,
)
from flows.reconcile import Report, Table, conclude, reconcile_each, tally
from flows.runs import flow
from tasks.aim.writes import WriteCounts
from tasks.boundary import Accepted
from tasks.cache_reconcile import (
    CacheRow,
    PassSettings,
    cache_requests,
    collect_unused_caches,
    ensure_consumer_caches,
    reconcile_cache,
)
from tasks.clients.cluster import connect
from tasks.clients.pushgateway import Pushgateway, push
from tasks.tracking import quote, run_logger
from tasks.warm_caches import CacheWorld, pvc_capacity, read_world

DEFAULT_INTERVAL_S = 600
DEFAULT_IMAGE = IMAGE  # Modelplane's own image (flows/image.py): its `modelplane cache fill` fills the caches


@dataclass
class WarmReport(Report[CacheRow]):
    """What one warm-caches pass saw and did."""

    ensured: list[str] = field(default_factory=list)  # "namespace/cache <- consumer"
    problems: list[str] = field(default_factory=list)
    freed: list[str] = field(default_factory=list)  # "namespace/cache (pvc, size): why"
    notes: list[str] = field(default_factory=list)

    def row_problem(self, row: CacheRow) -> str | None:
        """A cache not Available (Failed, or not filled yet)."""
        return (
            None
            if row.status == "Available"
            else f"{row.namespace}/{row.name} {row.status}: {row.reason}: {row.message}"
        )

    @property
    def degraded(self) -> list[str]:
        """Why the pass was degraded (exit 3, the ``Degraded`` run state): caches not Available, then other problems."""
        return [*super().degraded, *self.problems]

    def as_json(self) -> dict[str, Any]:
        """The report as the CLI's JSON."""
        return {
            "caches": [asdict(r) for r in self.rows],
            "ensured": self.ensured,
            "problems": self.problems,
            "freed": self.freed,
            "notes": self.notes,
            "summary": self.summary,
        }


# ------------------------------------------------------------------------------------------- flow


@flow(name="warm-caches", timeout_seconds=DEFAULT_INTERVAL_S - 60, log_prints=True)
def warm_caches(
    namespaces: Namespaces = (),
    cluster: ClusterTarget = "",
    image: ImageRef = DEFAULT_IMAGE,
    image_pull_secrets: ObjectNames = (),
    openmodel_namespace: OptionalNamespace = "",
    include_consumers: bool = True,
    gc_unused_after: timedelta | None = None,
    max_fill_attempts: Annotated[int, Field(ge=1)] = MAX_FILL_ATTEMPTS,
    retry_backoff_s: NonNegativeSeconds = FILL_RETRY_BACKOFF_S,
    job_backoff_limit: Annotated[int, Field(ge=0)] = 2,
    job_ttl_s: Annotated[int, Field(ge=0)] = 3600,
    headroom_percent: Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)] = 10.0,
    pushgateway_url: Setting = "",
) -> WarmReport:
    """One reconcile pass over every ModelCache and every cache a consumer needs.

    Args:
        namespaces: Namespaces to reconcile; empty means all namespaces.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a manifests directory/file
            (then fills run in this process and each PVC is a directory under the state directory).
        image: Modelplane's image, run by the fill Jobs ('modelplane cache fill').
        image_pull_secrets: Secrets (in each cache's namespace) for pulling that image.
        openmodel_namespace: Namespace where llmaz OpenModels are cached; empty = OpenModels are cached when served.
        include_consumers: Also create (or adopt) the caches AIM templates/services, Kthena Models and OpenModels need.
        gc_unused_after: Delete caches no workload used for this long (status.lastUsed, else creation) and none
            mounts now, at least 1 h; empty = no garbage collection.
        max_fill_attempts: Fills per cache generation before it stays Failed (change the spec to retry).
        retry_backoff_s: Wait after the first failed fill; doubles per attempt, at most one hour.
        job_backoff_limit: Pod retries inside one fill Job.
        job_ttl_s: Seconds a finished fill Job is kept (ttlSecondsAfterFinished).
        headroom_percent: PVC headroom over the source size, 0 to 1000.
        pushgateway_url: Prometheus Pushgateway for the pass's cache metrics (fills by outcome, bytes per cache);
            empty = $MODELPLANE_PUSHGATEWAY_URL, else off.

    Returns:
        The report: one row per cache, what was ensured and freed, and the summary; a degraded pass (a cache Failed,
        a consumer's source invalid, an API error) ends Failed named Degraded (:func:`flows.exitcodes.flow_result`).

    Raises:
        ValueError: ``gc_unused_after`` is under an hour (:data:`engine.caches.gc.MIN_UNUSED_AFTER`).
    """
    if gc_unused_after is not None and gc_unused_after < MIN_UNUSED_AFTER:  # a duration's schema has no minimum
        raise ValueError(f"gc_unused_after must be at least {format_duration(MIN_UNUSED_AFTER.total_seconds())}")
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    conn = connect(cluster)
    report = WarmReport()

    world = read_world(conn, namespaces or None)  # the pass's one read: every later step works from it
    if include_consumers:
        requests, problems = cache_requests(world, openmodel_namespace, list(namespaces or ()))
        report.problems += [f"{p.consumer}: {p.field}: {p.message}" for p in problems]
        ensured = ensure_consumer_caches(conn, requests, quote(world.caches))
        report.ensured, world = ensured.ensured, replace(world, caches=ensured.caches)
        report.problems += ensured.problems
    if gc_unused_after is not None:  # before any fill: a cache about to be deleted is not filled first
        freed = collect_unused_caches(conn, quote(world), gc_unused_after, now)
        report.freed = list(freed.values())
        world = replace(world, caches=[c for c in world.caches if (c.namespace, c.name) not in freed])

    settings = PassSettings(
        policy=RetryPolicy(max_attempts=max_fill_attempts, backoff_s=retry_backoff_s),
        job=JobSettings(
            image=image,
            backoff_limit=job_backoff_limit,
            ttl_seconds_after_finished=job_ttl_s,
            image_pull_secrets=tuple(image_pull_secrets or ()),
        ),
        headroom_percent=headroom_percent,
        local=not conn.runs_pods,
    )

    def reconcile(cache: Accepted[ModelCache], counts: WriteCounts) -> CacheRow:
        return reconcile_cache(conn, cache, quote(world), settings, now)

    report.rows, writes = reconcile_each(conn, world.caches, reconcile, failure_reason=None, workers=1)
    report.problems += writes.errors
    report.notes += [f"{r.namespace}/{r.name}: {r.message}" for r in report.rows if r.message and r.status != "Failed"]

    gateway = Pushgateway.configured(pushgateway_url)
    if gateway is not None:
        error = push(gateway, "warm-caches", cache_metrics(report, world))
        if error:
            report.problems.append(f"metrics not published ({error})")
    report.summary = summarize(report)
    for problem in report.problems:
        logger.warning("%s", problem)
    return conclude("warm-caches", report, TABLE)


TABLE = Table(
    "warm-caches",
    ("namespace", ("cache", "name"), "source", "status", "reason", "pvc", "attempts", "action"),
    "Model caches after this pass",
)


def cache_metrics(report: WarmReport, world: CacheWorld) -> MetricSet:
    """The pass's ``modelplane_cache_fills{outcome}`` (fills finished, Jobs started, attempts failed) and
    ``modelplane_cache_bytes{namespace, cache}`` (capacity of each cache's volume, when it has one).

    Args:
        report: The pass's report.
        world: What the pass read (the caches' PVCs).

    Returns:
        The metric families to push.
    """
    metrics = MetricSet()
    outcomes = {"filled": 0, "started": 0, "failed": 0}
    for row in report.rows:
        action = row.action.lower()
        outcome = (
            "filled"
            if "filled" in action
            else "started"
            if "started job" in action
            else "failed"
            if "failed" in action
            else None
        )
        if outcome:
            outcomes[outcome] += 1
        capacity = pvc_capacity(world.pvcs.get((row.namespace, row.pvc))) if row.pvc else None
        if capacity:
            metrics.set("modelplane_cache_bytes", quantity_bytes(capacity), namespace=row.namespace, cache=row.name)
    for outcome, count in outcomes.items():
        metrics.set("modelplane_cache_fills", count, outcome=outcome)
    return metrics


def summarize(report: WarmReport) -> str:
    """One line: caches per status, what was ensured and freed.

    Args:
        report: The pass's report.

    Returns:
        The summary line.
    """
    parts = [tally((row.status for row in report.rows), "no caches")]
    if report.ensured:
        parts.append(f"{len(report.ensured)} consumer requests")
    if report.freed:
        parts.append(f"{len(report.freed)} freed")
    if report.problems:
        parts.append(f"{len(report.problems)} problems")
    return ", ".join(parts)
