"""Shared model caches, as every consumer sees them: one ``aim.silogen.ai/v1alpha1`` ModelCache per
cache identity per namespace (see ``CACHE-CONTRACT``).

Consumers (template resolution, AIM/Kthena/llmaz rollouts) call :func:`ensure_cache` with the source
they need and mount ``cache_pvc(cache)`` read-only once :func:`cache_available`; rollouts call
:func:`mark_used` whenever they roll out a workload that mounts the cache. The warm-caches flow fills
every ModelCache. A ModelCache a person created for the same identity (its ``sourceUri`` plus
``storageClassName``) is adopted, never duplicated.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from engine.api.meta import format_time
from engine.api.registry import MODEL_CACHE
from engine.caches.identity import CACHE_IDENTITY_LABEL, cache_identity, cache_name
from engine.caches.lookup import find_cache, identity_of
from engine.caches.plan import MANAGED_BY, MODELCACHE_API_VERSION, with_requester
from engine.caches.sources import ModelSource
from tasks.cluster import Cluster, Conflict, Manifest, ObjectRef

log = logging.getLogger(__name__)

KIND = MODEL_CACHE


def new_cache(
    namespace: str,
    source: ModelSource,
    *,
    storage_class: str | None,
    size: str | None,
    env: list[dict[str, Any]] | None,
    requested_by: str,
) -> Manifest:
    """The ModelCache Modelplane creates for a consumer: named and labelled by the cache identity."""
    spec: dict[str, Any] = {"sourceUri": source.uri}
    if storage_class:
        spec["storageClassName"] = storage_class
    if size:
        spec["size"] = size
    if env:
        spec["env"] = env
    return {
        "apiVersion": MODELCACHE_API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": cache_name(source, storage_class),
            "namespace": namespace,
            "labels": {CACHE_IDENTITY_LABEL: cache_identity(source, storage_class), **MANAGED_BY},
            "annotations": with_requester(None, requested_by) or {},
        },
        "spec": spec,
    }


def ensure_cache(
    cluster: Cluster,
    namespace: str,
    source: ModelSource,
    *,
    storage_class: str | None = None,
    size: str | None = None,
    env: list[dict[str, Any]] | None = None,
    requested_by: str,
) -> Manifest:
    """The ModelCache holding ``source`` in ``namespace``: adopted if one exists (a person's or another
    consumer's), created otherwise. ``requested_by`` (``Kind/namespace/name``) is recorded on it.

    Raises ``ValueError`` for a source no cache can hold (``pvc://``, ``hostpath://``: mounted directly)
    and the cluster's typed errors.
    """
    if not source.downloadable:
        raise ValueError(f"{source.uri} is mounted directly, not cached (only downloadable sources are)")
    existing = find_cache(cluster.list(MODELCACHE_API_VERSION, KIND, namespace), source, storage_class)
    if existing is None:
        try:
            created = cluster.create(
                new_cache(namespace, source, storage_class=storage_class, size=size, env=env, requested_by=requested_by)
            )
            log.info(
                "created ModelCache %s/%s for %s (%s)", namespace, created["metadata"]["name"], requested_by, source.uri
            )
            _emit_requested(created, requested_by)
            return created
        except Conflict:
            # Another consumer created it in between (or a cache of another identity holds the name).
            existing = find_cache(cluster.list(MODELCACHE_API_VERSION, KIND, namespace), source, storage_class)
            if existing is None:
                raise
    return adopt(cluster, existing, source, requested_by)


def _emit_requested(cache: Manifest, requested_by: str) -> None:
    """``modelplane.aim.cache.requested`` (tasks.events.CACHE_REQUESTED): the warm-caches deployment's
    trigger fills the new cache's namespace at once instead of at its next interval."""
    from tasks.events import Subject, emit_change

    emit_change(Subject.of(cache), "requested", {"requestedBy": requested_by, "source": cache["spec"]["sourceUri"]})


def adopt(cluster: Cluster, cache: Manifest, source: ModelSource, requested_by: str) -> Manifest:
    """Record ``requested_by`` on an existing cache (and its identity label, for a person's cache)."""
    meta = cache["metadata"]
    held = identity_of(cache)
    patch_meta: dict[str, Any] = {}
    annotations = with_requester(meta.get("annotations"), requested_by)
    if annotations:
        patch_meta["annotations"] = annotations
    if held is not None:
        identity = cache_identity(*held)
        if (meta.get("labels") or {}).get(CACHE_IDENTITY_LABEL) != identity:
            patch_meta["labels"] = {CACHE_IDENTITY_LABEL: identity}
    if not patch_meta:
        return cache
    return cluster.patch_spec(ObjectRef.of(cache), {"metadata": patch_meta})


def mark_used(cluster: Cluster, cache: Manifest, now: datetime) -> Manifest:
    """Write ``status.lastUsed = now`` (a workload mounting the cache was rolled out); no write when equal."""
    stamp = format_time(now)
    if (cache.get("status") or {}).get("lastUsed") == stamp:
        return cache
    return cluster.patch_status(ObjectRef.of(cache), {"lastUsed": stamp})
