"""The ``warm-caches`` flow: one reconcile pass over every ModelCache and every cache another resource needs.

Lifecycle, top to bottom:

1. read the cluster: ModelCaches, their consumers (AIM templates with ``warmCache``, AIM services with
   ``cacheModel``, Kthena Model backends without a ``cacheURI``, llmaz OpenModels), the namespaces'
   AIMNamespaceConfig ``default``, and the PVCs, fill Jobs and Pods this flow made;
2. ensure a cache for every consumer's source: one ModelCache per identity per namespace, a person's
   adopted (``tasks.caches.ensure_cache``);
3. reconcile each cache: validate its source; create its PVC once (ReadWriteMany, ``spec.size`` as written,
   or what the source reports plus the headroom; storage class from the cache, the namespace config, or
   the cluster default); fill it — a Kubernetes Job from Modelplane's image running
   ``modelplane cache fill`` with the PVC mounted, or the same downloader in this process with the local
   backend; read the fill's verdict (the completion marker, reported through the Job pod's termination
   message); retry a failed fill with backoff up to ``max_fill_attempts``; write status
   ``Pending -> Progressing -> Available | Failed`` with conditions and Events;
4. optionally collect garbage: caches no workload used for ``gc_unused_after`` and none mounts now;
5. publish a table artifact and a one-line summary; every status change is also a Prefect event
   ``modelplane.aim.cache.<status>`` (``tasks.events``; e.g. ``CACHE_AVAILABLE``) for rollout triggers.

Every run is a fresh process: fill attempts live in an annotation on the cache, failures in its status.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import Field

from engine.api.aim import ModelCache
from engine.api.views import PersistentVolumeClaim
from engine.caches.fill import (
    JobSettings,
    pvc_size_for,
    quantity_bytes,
    storage_class_for,
    volume_too_small,
)
from engine.caches.gc import GcVerdict, gc_verdict
from engine.caches.plan import (
    Failure,
    FillState,
    Observation,
    RetryPolicy,
    Step,
    cache_status,
    failed,
    job_name,
    pass_outcome,
    pvc_phase,
)
from engine.caches.reconcile import CachePlan, plan_cache
from engine.caches.requests import (
    CacheRequest,
    RequestProblem,
    kthena_requests,
    openmodel_requests,
    service_requests,
    template_requests,
)
from engine.caches.sources import ModelSource
from engine.cycle_metrics import MetricSet
from flows.exitcodes import flow_result
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
from flows.runs import flow
from tasks.boundary import Accepted, with_written_status
from tasks.caches import ensure_cache
from tasks.cluster import Cluster, LocalCluster, connect
from tasks.cluster.errors import ClusterError
from tasks.pushgateway import Pushgateway, push
from tasks.tracking import quote, run_logger, table_artifact, task, tracked
from tasks.warm_caches import (
    CacheWorld,
    create_pvc,
    delete_cache,
    emit_cache_event,
    fill_local,
    local_volume,
    measure_source,
    mounted_claims,
    post_event,
    pvc_capacity,
    read_cache_facts,
    read_world,
    record_attempt,
    resolve_env,
    start_job,
    write_status,
)

DEFAULT_INTERVAL_S = 600
DEFAULT_IMAGE = IMAGE  # Modelplane's own image (flows/image.py): its `modelplane cache fill` fills the caches


@dataclass
class CacheRow:
    """One line of the report: a cache and what this pass did with it."""

    namespace: str
    name: str
    source: str
    status: str
    reason: str
    pvc: str
    attempts: int
    action: str
    message: str = ""


@dataclass
class WarmReport:
    """What one warm-caches pass saw and did."""

    rows: list[CacheRow] = field(default_factory=list)
    ensured: list[str] = field(default_factory=list)  # "namespace/cache <- consumer"
    problems: list[str] = field(default_factory=list)
    freed: list[str] = field(default_factory=list)  # "namespace/cache (pvc, size): why"
    notes: list[str] = field(default_factory=list)
    summary: str = ""

    @property
    def degraded(self) -> list[str]:
        """Why the pass was degraded (exit 3, the ``Degraded`` run state): caches not Available (Failed, or not
        filled yet), then other problems."""
        failed = [
            f"{r.namespace}/{r.name} {r.status}: {r.reason}: {r.message}" for r in self.rows if r.status != "Available"
        ]
        return [*failed, *self.problems]

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


@dataclass(frozen=True)
class PassSettings:
    """What every cache of one pass shares."""

    policy: RetryPolicy
    job: JobSettings
    headroom_percent: float
    local: bool


# ------------------------------------------------------------------------------------ consumers


def cache_requests(
    world: CacheWorld, openmodel_namespace: str | None, namespaces: list[str]
) -> tuple[list[CacheRequest], list[RequestProblem]]:
    """Every cache a consumer needs (pure rules in ``engine.caches.requests``), in ``namespaces`` when limited."""
    problems: list[RequestProblem] = []
    requests = [
        *template_requests(world.templates, problems),
        *service_requests(world.services, world.templates, problems),
        *kthena_requests(world.models, problems),
        *openmodel_requests(world.openmodels, openmodel_namespace, problems),
    ]
    if namespaces:
        requests = [r for r in requests if r.namespace in namespaces]
    return requests, problems


@task(name="ensure-consumer-caches")
def ensure_consumer_caches(cluster: Cluster, requests: list[CacheRequest]) -> tuple[list[str], list[str]]:
    """``ensure_cache`` for each request; a failing one is reported and the others proceed."""
    ensured, problems = [], []
    for request in requests:
        try:
            cache = ensure_cache(
                cluster,
                request.namespace,
                request.source,
                env=[dict(e) for e in request.env] or None,
                requested_by=request.requested_by,
            )
        except (ClusterError, ValueError) as exc:
            problems.append(f"{request.requested_by}: cache for {request.source.uri}: {getattr(exc, 'message', exc)}")
            continue
        ensured.append(f"{request.namespace}/{cache.name} <- {request.requested_by}")
    return ensured, problems


# ------------------------------------------------------------------------------------ one cache


@task(name="reconcile-cache")
def reconcile_cache(
    cluster: Cluster, accepted: Accepted[ModelCache], world: CacheWorld, settings: PassSettings, now: datetime
) -> CacheRow:
    """Drive one ModelCache one step (or, with the local backend, through its whole fill): read what its PVC and
    fill report, let the engine decide once (:func:`engine.caches.reconcile.plan_cache`), write what it decided."""
    facts = read_cache_facts(cluster, accepted.model, world)
    plan = plan_cache(accepted.model, facts, settings.policy, now)
    cache, obs, action = accepted, plan.obs, "none"
    if plan.invalid is not None:
        source_uri = accepted.model.spec.source_uri
        return _finish(cluster, cache, obs, plan.invalid, settings, now, "invalid source", source_uri=source_uri)
    if plan.step in (Step.CREATE_PVC, Step.START_FILL):
        attempt = obs.attempts + 1  # every try counts, so a failing size check cannot loop forever either
        cache = with_written_status(accepted, record_attempt(cluster, accepted.obj, obs.generation, attempt))
        obs = _with(obs, attempts=attempt, failure=None, failed_at=None, fill=FillState.NONE)
        obs, action, cache = attempt_fill(cluster, cache, obs, plan, facts.pvc, world, settings, now)
    elif plan.step == Step.WAIT:
        action = "waiting" if obs.failure is None else "backing off"
    elif plan.step == Step.GIVE_UP:
        action = "gave up"
    return _finish(cluster, cache, obs, None, settings, now, action, plan.source.uri, "; ".join(plan.env.notes))


def attempt_fill(
    cluster: Cluster,
    cache: Accepted[ModelCache],
    obs: Observation,
    plan: CachePlan,
    pvc: PersistentVolumeClaim | None,
    world: CacheWorld,
    settings: PassSettings,
    now: datetime,
) -> tuple[Observation, str, Accepted[ModelCache]]:
    """One fill attempt: size the source when needed, create the PVC once, refuse a volume too small,
    then start the fill Job (cluster) or run the downloader here (local backend), and the cache as last
    written (the local backend writes Progressing before it downloads).

    ``cache`` is the object as last written (status writes merge onto it) with its parsed form, whose status
    is the one last written."""
    model = cache.model
    namespace, name = model.metadata.namespace or "", model.metadata.name or ""
    spec, source, env = model.spec, plan.source, plan.env.env
    source_bytes: int | None = None
    resolved: dict[str, str] = {}
    if settings.local or (pvc is None and not spec.size):
        resolved, missing = resolve_env(cluster, namespace, env)
        if missing is None:
            source_bytes, missing = _measure(source, resolved)
        if missing is not None:
            return failed(obs, missing, now), "size check failed", cache
    if pvc is None:
        size, size_failure = pvc_size_for(spec, source_bytes, settings.headroom_percent)
        if size_failure is not None:
            return failed(obs, size_failure, now), "invalid size", cache
        config = world.configs.get(namespace)
        storage_class = storage_class_for(
            spec.storage_class_name, config.spec.cache_storage_class_name if config else None
        )
        pvc = PersistentVolumeClaim.model_validate(create_pvc(cluster, model, size, storage_class))
        obs = _with(obs, pvc_phase=pvc_phase(pvc))
    too_small = volume_too_small(pvc.capacity(), source_bytes)
    if too_small is not None:
        return failed(obs, too_small, now), "volume too small", cache
    post_event(
        cluster, cache.obj, "FillStarted", f"fill attempt {obs.attempts} of {source.uri} into PVC {obs.pvc_name}"
    )
    obs = _with(obs, fill=FillState.RUNNING)
    if not settings.local:
        previous_job = world.jobs.get((namespace, job_name(name, obs.attempts - 1))) if obs.attempts > 1 else None
        start_job(cluster, model, source.uri, obs.attempts, env, settings.job, previous_job)
        return obs, f"started Job {job_name(name, obs.attempts)}", cache
    written = write_status(cluster, cache.obj, cache_status(model.status, obs, settings.policy, now))
    cache = with_written_status(cache, written)  # the pass ends from Progressing, as the cluster now has it
    failure = fill_local(source, local_volume(cluster, namespace, obs.pvc_name), resolved, pvc.capacity())  # type: ignore[arg-type]
    if failure is not None:
        return failed(obs, failure, now), f"fill attempt {obs.attempts} failed", cache
    return _with(obs, fill=FillState.SUCCEEDED), f"filled in-process (attempt {obs.attempts})", cache


def _measure(source: ModelSource, env: dict[str, str]) -> tuple[int | None, Failure | None]:
    """The source's size, or the typed failure that prevented measuring it."""
    from tasks.downloader import DownloadError

    try:
        return measure_source(source, env), None
    except DownloadError as exc:
        return None, Failure(exc.reason, exc.message)


def _with(obs: Observation, **changes: Any) -> Observation:
    from dataclasses import replace

    return replace(obs, **changes)


def _finish(
    cluster: Cluster,
    cache: Accepted[ModelCache],
    obs: Observation,
    failure: Failure | None,
    settings: PassSettings,
    now: datetime,
    action: str,
    source_uri: str,
    notes: str = "",
) -> CacheRow:
    """Write what the engine concludes for ``obs`` (or ``failure``): the status, an Event on a transition, and
    the row of the report. ``cache`` is the object as last written, with its parsed form (its status the one
    last written)."""
    outcome = pass_outcome(cache.model.status, obs, failure, settings.policy, now, source_uri, notes)
    written = write_status(cluster, cache.obj, outcome.status)
    for event in outcome.events:
        post_event(cluster, written, event.reason, event.message, warning=event.warning)
    if outcome.changed:
        emit_cache_event(written, outcome.status["status"], outcome.reason, source_uri, outcome.obs.pvc_name)
    return CacheRow(
        namespace=cache.obj["metadata"]["namespace"],
        name=cache.obj["metadata"]["name"],
        source=source_uri,
        status=outcome.status["status"],
        reason=outcome.reason,
        pvc=outcome.obs.pvc_name,
        attempts=outcome.obs.attempts,
        action=action,
        message=outcome.message,
    )


# --------------------------------------------------------------------------------------------- GC


@task(name="collect-unused-caches")
def collect_unused_caches(cluster: Cluster, world: CacheWorld, unused_after: timedelta, now: datetime) -> list[str]:
    """Delete caches no workload used for ``unused_after`` and none mounts now; report what was freed."""
    freed: list[str] = []
    by_namespace: dict[str, set[str]] = {}
    for accepted in world.caches:
        cache = accepted.model
        namespace = cache.metadata.namespace or ""
        if namespace not in by_namespace:
            by_namespace[namespace] = mounted_claims(cluster, namespace)
        verdict: GcVerdict = gc_verdict(cache, by_namespace[namespace], unused_after, now)
        if not verdict.delete:
            continue
        claim = (cache.status.persistent_volume_claim if cache.status else None) or ""
        size = pvc_capacity(world.pvcs.get((namespace, claim))) or "no PVC"
        delete_cache(cluster, accepted, world)
        freed.append(f"{namespace}/{cache.metadata.name} ({claim or 'no PVC'}, {size}): {verdict.reason}")
    return freed


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
    headroom_percent: Annotated[float, Field(ge=0)] = 10.0,
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
            mounts now; empty = no garbage collection.
        max_fill_attempts: Fills per cache generation before it stays Failed (change the spec to retry).
        retry_backoff_s: Wait after the first failed fill; doubles per attempt, at most one hour.
        job_backoff_limit: Pod retries inside one fill Job.
        job_ttl_s: Seconds a finished fill Job is kept (ttlSecondsAfterFinished).
        headroom_percent: PVC headroom over the source size.
        pushgateway_url: Prometheus Pushgateway for the pass's cache metrics (fills by outcome, bytes per cache);
            empty = $MODELPLANE_PUSHGATEWAY_URL, else off.
    """
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    target = connect(cluster)
    report = WarmReport()

    world = read_world(target, namespaces or None)
    if include_consumers:
        requests, problems = cache_requests(world, openmodel_namespace, namespaces or [])
        report.problems += [f"{p.consumer}: {p.field}: {p.message}" for p in problems]
        report.ensured, ensure_problems = ensure_consumer_caches(target, requests)
        report.problems += ensure_problems
        if requests:
            world = read_world(target, namespaces or None)

    settings = PassSettings(
        policy=RetryPolicy(max_attempts=max_fill_attempts, backoff_s=retry_backoff_s),
        job=JobSettings(
            image=image,
            backoff_limit=job_backoff_limit,
            ttl_seconds_after_finished=job_ttl_s,
            image_pull_secrets=tuple(image_pull_secrets or ()),
        ),
        headroom_percent=headroom_percent,
        local=isinstance(target, LocalCluster),
    )
    for cache in world.caches:
        try:
            row = reconcile_cache(target, cache, quote(world), settings, now)
        except ClusterError as exc:  # one cache's API failure must not stop the others
            logger.error("ModelCache %s/%s: %s", cache.namespace, cache.name, exc.message)
            report.problems.append(f"ModelCache {cache.namespace}/{cache.name}: {exc.message}")
            continue
        report.rows.append(row)
        if row.message and row.status != "Failed":
            report.notes.append(f"{row.namespace}/{row.name}: {row.message}")

    if gc_unused_after is not None:
        world = read_world(target, namespaces or None)
        report.freed = collect_unused_caches(target, quote(world), gc_unused_after, now)

    gateway = Pushgateway.configured(pushgateway_url)
    if gateway is not None:
        error = push(gateway, "warm-caches", cache_metrics(report, world))
        if error:
            report.problems.append(f"metrics not published ({error})")
    report.summary = summarize(report)
    for problem in report.problems:
        logger.warning("%s", problem)
    publish(report)
    logger.info("warm-caches: %s", report.summary)
    return flow_result(report, report.degraded)


def cache_metrics(report: WarmReport, world: Any) -> MetricSet:
    """The pass's ``modelplane_cache_fills{outcome}`` (fills finished, Jobs started, attempts failed) and
    ``modelplane_cache_bytes{namespace, cache}`` (capacity of each cache's volume, when it has one)."""
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
    """One line: caches per status, what was ensured and freed."""
    counts: dict[str, int] = {}
    for row in report.rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    parts = [f"{n} {status}" for status, n in sorted(counts.items())] or ["no caches"]
    if report.ensured:
        parts.append(f"{len(report.ensured)} consumer requests")
    if report.freed:
        parts.append(f"{len(report.freed)} freed")
    if report.problems:
        parts.append(f"{len(report.problems)} problems")
    return ", ".join(parts)


def publish(report: WarmReport) -> None:
    """The cache table as a Prefect artifact (only inside a flow run)."""
    if not tracked():
        return
    table_artifact(
        key="warm-caches",
        table=[
            {
                "namespace": r.namespace,
                "cache": r.name,
                "source": r.source,
                "status": r.status,
                "reason": r.reason,
                "pvc": r.pvc,
                "attempts": r.attempts,
                "action": r.action,
            }
            for r in report.rows
        ],
        description=f"Model caches after this pass: {report.summary}",
    )
