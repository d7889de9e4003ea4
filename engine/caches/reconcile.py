"""One engine decision per ModelCache and warm-caches pass: from what the flow read to what it does next.

The warm-caches flow reads first (the cache as the boundary parsed it, status included; its PVC; the verdict of
its current fill Job; locally, whether the completion marker is still in place), asks :func:`plan_cache` once,
then writes what the plan says. Why one call: the flow stitched the observation, the source check, the
download credentials and the next step together call by call; here they are one pure decision, so the flow
reads as read -> plan -> write. Carrying out a fill attempt (size the source, create the PVC, start the Job or
run the downloader) stays a short read-decide-write sequence in the flow, since each step needs what the
previous one wrote.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel

from engine.api.aim import AIMNamespaceConfig, ModelCache
from engine.api.views import Job, PersistentVolumeClaim, Pod
from engine.caches.fill import DownloadEnv, download_env, endpoint_refusal, fill_job_verdict
from engine.caches.plan import (
    ENDPOINT_NOT_ALLOWED,
    Failure,
    Observation,
    RetryPolicy,
    Step,
    initial_observation,
    next_step,
    observe_fill,
    source_of,
)
from engine.caches.sources import ModelSource


@dataclass(frozen=True)
class CacheFacts:
    """What the flow read about one cache this pass, before any decision."""

    pvc: PersistentVolumeClaim | None
    """The cache's PVC, when it exists."""
    namespace_config: AIMNamespaceConfig | None
    """The namespace's AIMNamespaceConfig ``default`` (credentials, storage class), when there is one."""
    job: Job | None = None
    """The current attempt's fill Job (cluster backend, once a fill was started), when it still exists."""
    pods: tuple[Pod, ...] = ()
    """The fill Jobs' pods (their termination messages carry the fills' reports)."""
    fills_in_cluster: bool = True
    """Whether fills run as Jobs (cluster backend); False: in the flow's process (local backend)."""
    marker_ok: bool = True
    """Whether the volume still holds the verified completion marker (read locally; in a cluster the verdict stands)."""


@dataclass(frozen=True)
class CachePlan:
    """What one pass does with a cache: its source (or why it is invalid), the download environment, what was
    observed, and the next step."""

    source: ModelSource
    invalid: Failure | None
    """The :data:`~engine.caches.plan.INVALID_SOURCE` failure naming ``spec.sourceUri``; the pass only reports it."""
    env: DownloadEnv
    obs: Observation
    step: Step


def plan_cache(cache: ModelCache, facts: CacheFacts, policy: RetryPolicy, now: datetime) -> CachePlan:
    """The pass's decision for one cache: the observation (:func:`~engine.caches.plan.initial_observation`, then
    what the fill reported, :func:`~engine.caches.plan.observe_fill`) and the next step
    (:func:`~engine.caches.plan.next_step`); a source that is not downloadable stops there."""
    obs = initial_observation(cache, facts.pvc)
    source, invalid = source_of(cache.spec)
    env = download_env(cache.spec.env, facts.namespace_config)
    refusal = None if invalid is not None else endpoint_refusal(source, env.env)
    if refusal is not None:
        invalid = Failure(ENDPOINT_NOT_ALLOWED, refusal)
    if invalid is not None:
        return CachePlan(source, invalid, env, obs, Step.GIVE_UP)
    available = cache.status is not None and cache.status.status == "Available"
    still_filled = available and facts.pvc is not None and facts.marker_ok
    job = fill_job_verdict(facts.job, facts.pods, source.uri) if facts.fills_in_cluster and obs.attempts else None
    obs = observe_fill(cache, obs, still_filled, job, now)
    return CachePlan(source, None, env, obs, next_step(obs, policy, now))


ENDPOINT_KINDS: tuple[type[BaseModel], ...] = (AIMNamespaceConfig, ModelCache)
"""The kinds :func:`endpoint_refusals` reads."""


def endpoint_refusals(resources: Iterable[tuple[str, BaseModel]]) -> list[tuple[str, ModelCache, str]]:
    """``(source, cache, message)`` for each ModelCache among ``resources`` (as ``validate-manifests`` reads a
    directory) that :func:`plan_cache` would fail with ``EndpointNotAllowed``: its source URI names an S3
    endpoint other than the one its credentials (its namespace's AIMNamespaceConfig ``default``, its own env)
    are configured for. The message is the condition's."""
    resources = list(resources)
    configs = {
        cfg.metadata.namespace or "default": cfg
        for _, cfg in resources
        if isinstance(cfg, AIMNamespaceConfig) and cfg.metadata.name == "default"
    }
    refused = []
    for source, cache in resources:
        if not isinstance(cache, ModelCache):
            continue
        parsed, invalid = source_of(cache.spec)
        env = download_env(cache.spec.env, configs.get(cache.metadata.namespace or "default"))
        message = None if invalid is not None else endpoint_refusal(parsed, env.env)
        if message is not None:
            refused.append((source, cache, message))
    return refused
