"""The warm-caches flow's steps: ensure the caches consumers need, drive each ModelCache one step, collect
garbage. Each is a Prefect task; what they read and write is :mod:`tasks.warm_caches`, what they decide is the
engine's (:mod:`engine.caches`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from engine.api.aim import ModelCache
from engine.api.views import PersistentVolumeClaim
from engine.caches.fill import JobSettings, pvc_size_for, storage_class_for, volume_too_small
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
from tasks.boundary import Accepted, with_written_status
from tasks.cache_env import resolve_env
from tasks.caches import ensure_cache
from tasks.clients.cluster import Cluster
from tasks.clients.cluster.errors import ClusterError
from tasks.tracking import task
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
    record_attempt,
    start_job,
    write_status,
)


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
    """Every cache a consumer needs (pure rules in ``engine.caches.requests``), in ``namespaces`` when limited; a
    template being deleted requests none (it still names the sources of the services that use it).

    Args:
        world: What the pass read: templates, services, Kthena models, OpenModels.
        openmodel_namespace: The namespace OpenModels' caches are requested in, or None when OpenModels request none.
        namespaces: The namespaces the pass is limited to; empty for every namespace.

    Returns:
        The caches the consumers need and, per consumer, the problem that kept it from requesting one.
    """
    problems: list[RequestProblem] = []
    requests = [
        *template_requests([t for t in world.templates if t.metadata.deletion_timestamp is None], problems),
        *service_requests(world.services, world.templates, problems),
        *kthena_requests(world.models, problems),
        *openmodel_requests(world.openmodels, openmodel_namespace, problems),
    ]
    if namespaces:
        requests = [r for r in requests if r.namespace in namespaces]
    return requests, problems


@dataclass
class Ensured:
    """What ensuring the consumers' caches did: one line per request met and per request refused, and the
    ModelCaches as they are now (the run's read, with the caches created and adopted since)."""

    ensured: list[str]
    problems: list[str]
    caches: list[Accepted[ModelCache]]


@task(name="ensure-consumer-caches")
def ensure_consumer_caches(
    cluster: Cluster, requests: list[CacheRequest], caches: list[Accepted[ModelCache]]
) -> Ensured:
    """``ensure_cache`` for each request against the caches the run read (the cluster is listed again only
    when a create conflicts); a failing request is reported and the others proceed.

    Args:
        cluster: Where caches are created or adopted.
        requests: What the consumers need (:func:`cache_requests`).
        caches: The ModelCaches as the run read them.

    Returns:
        The requests met and refused, and the caches with the ones created and adopted.
    """
    by_namespace: dict[str, list[Accepted[ModelCache]]] = {}
    for cache in caches:
        by_namespace.setdefault(cache.namespace, []).append(cache)
    ensured, problems = [], []
    for request in requests:
        known = by_namespace.setdefault(request.namespace, [])
        try:
            cache = ensure_cache(
                cluster,
                request.namespace,
                request.source,
                env=[dict(e) for e in request.env] or None,
                requested_by=request.requested_by,
                known=known,
            )
        except (ClusterError, ValueError) as exc:
            problems.append(f"{request.requested_by}: cache for {request.source.uri}: {getattr(exc, 'message', exc)}")
            continue
        known[:] = [c for c in known if c.name != cache.name] + [cache]  # created, or adopted: as written now
        ensured.append(f"{request.namespace}/{cache.name} <- {request.requested_by}")
    now_known = sorted((c for known in by_namespace.values() for c in known), key=lambda c: (c.namespace, c.name))
    return Ensured(ensured, problems, now_known)


# ------------------------------------------------------------------------------------ one cache


@task(name="reconcile-cache")
def reconcile_cache(
    cluster: Cluster, accepted: Accepted[ModelCache], world: CacheWorld, settings: PassSettings, now: datetime
) -> CacheRow:
    """Drive one ModelCache one step (or, with the local backend, through its whole fill): read what its PVC and
    fill report, let the engine decide once (:func:`engine.caches.reconcile.plan_cache`), write what it decided.

    Args:
        cluster: The cluster the ModelCache, its PVC and its fill Job live in.
        accepted: The ModelCache as read, with its parsed model.
        world: What the pass read (PVCs, Jobs, namespace configs) that the cache's facts come from.
        settings: The pass's policy: fill backend (Job or local), retries and back-off, size headroom, Job settings.
        now: The time the decision and the status use.

    Returns:
        The cache's row of the run's table: its status and the action taken.
    """
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
    is the one last written.

    Args:
        cluster: The cluster the cache lives in.
        cache: The ModelCache as last written, with its parsed model.
        obs: What the status records so far (attempt number, PVC, fill state).
        plan: The engine's decision: the source, its environment and the step.
        pvc: The cache's PersistentVolumeClaim, or None when it is not created yet.
        world: What the pass read (namespace configs for the storage class, previous fill Jobs).
        settings: The pass's policy (local or Job fill, size headroom in percent, Job settings).
        now: The time a failure is recorded at.

    Returns:
        The observation after the attempt, a short description of the action for the run's table, and the cache as
        last written.
    """
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
        start_job(cluster, model, source.uri, obs.attempts, env, settings.job, previous_job, pvc.capacity())
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
def collect_unused_caches(
    cluster: Cluster, world: CacheWorld, unused_after: timedelta, now: datetime
) -> dict[tuple[str, str], str]:
    """Delete caches no workload used for ``unused_after`` and none mounts now.

    Args:
        cluster: Where the caches, their PVCs and fill Jobs are deleted.
        world: What the pass read (the caches, their PVCs and Jobs).
        unused_after: How long a cache must have gone unused.
        now: The pass's time.

    Returns:
        (namespace, name) of each cache deleted -> ``namespace/cache (pvc, size): why``.
    """
    freed: dict[tuple[str, str], str] = {}
    by_namespace: dict[str, set[str]] = {}
    for accepted in world.caches:
        cache = accepted.model
        namespace = cache.metadata.namespace or ""
        if namespace not in by_namespace:
            by_namespace[namespace] = mounted_claims(cluster, namespace)
        verdict: GcVerdict = gc_verdict(cache, by_namespace[namespace], unused_after, now)
        if not verdict.delete:
            continue
        pvc = delete_cache(cluster, accepted, world)
        held = f"{pvc['metadata']['name']}, {pvc_capacity(pvc) or 'no size'}" if pvc is not None else "no PVC"
        freed[(namespace, accepted.name)] = f"{namespace}/{accepted.name} ({held}): {verdict.reason}"
    return freed
