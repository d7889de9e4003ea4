"""Shared model caches, as every consumer sees them: one ``aim.silogen.ai/v1alpha1`` ModelCache per
cache identity per namespace (see ``CACHE-CONTRACT``).

Consumers (template resolution, AIM/Kthena/llmaz rollouts) call :func:`ensure_cache` with the source
they need and mount ``model_cache_pvc(cache.model)`` read-only once it is set (the cache is Available);
rollouts call :func:`mark_used` whenever they roll out a workload that mounts the cache. The warm-caches
flow fills every ModelCache. A ModelCache a person created for the same identity (its ``sourceUri`` plus
``storageClassName``) is adopted, never duplicated.

Caches are looked up as their API model (:func:`read_caches`, the boundary reader's parse): a ModelCache
that does not parse is skipped by the lookup, never adopted and never a crash; it is marked invalid by
its own lifecycle (warm-caches), not by its consumers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from engine.api.aim import ModelCache
from engine.api.meta import format_time
from engine.api.registry import MODEL_CACHE
from engine.caches.identity import CACHE_IDENTITY_LABEL, cache_identity, cache_name
from engine.caches.lookup import find_model_cache, model_identity_of
from engine.caches.plan import MANAGED_BY, MODELCACHE_API_VERSION, with_requester
from engine.caches.sources import ModelSource
from tasks.boundary import Accepted, parse_resource
from tasks.clients.cluster import Cluster, Conflict, Manifest, ObjectRef

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
    """The ModelCache Modelplane creates for a consumer: named and labelled by the cache identity.

    Args:
        namespace: The consumer's namespace the cache is created in.
        source: The model source the cache downloads.
        storage_class: The PVC's storage class, or None for the cluster's default.
        size: The PVC's size (a Kubernetes quantity), or None to size it from the source.
        env: Environment entries (e.g. credentials from Secrets) the fill needs, or None.
        requested_by: The consumer, as ``Kind/namespace/name``, recorded in the requesters annotation.

    Returns:
        The ModelCache manifest, not yet created.
    """
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


def read_caches(objects: Iterable[Manifest], *, schema_validated: bool = False) -> list[Accepted[ModelCache]]:
    """The ModelCaches among ``objects`` (one LIST) that parse, each with its API model; one that does not
    parse is left out without a write (its own lifecycle, warm-caches, marks it invalid). ``schema_validated``:
    an API server served them (:func:`tasks.boundary.parse_resource`).

    Args:
        objects: Manifests of one LIST of ModelCaches.
        schema_validated: Whether an API server served them (its schema validation already ran).

    Returns:
        The ModelCaches that parse, each with its API model, in order.
    """
    return [
        Accepted(obj, parsed)
        for obj in objects
        if isinstance(parsed := parse_resource(obj, schema_validated=schema_validated), ModelCache)
    ]


def _typed(obj: Manifest) -> Accepted[ModelCache]:
    """A ModelCache the cluster returned after a write of ours, with its API model; ``ValueError`` naming
    the field if it does not parse (the cluster changed it past its schema)."""
    parsed = parse_resource(obj)
    if isinstance(parsed, ModelCache):
        return Accepted(obj, parsed)
    field, reason = parsed if isinstance(parsed, tuple) else ("kind", f"{obj.get('kind')} is not a ModelCache")
    raise ValueError(f"ModelCache {ObjectRef.of(obj).name}: {field}: {reason}")


def _find(
    cluster: Cluster,
    namespace: str,
    source: ModelSource,
    storage_class: str | None,
    known: Sequence[Accepted[ModelCache]] | None = None,
) -> Accepted[ModelCache] | None:
    """The cache of ``namespace`` that holds ``source`` (:func:`engine.caches.lookup.find_model_cache`) among
    ``known`` (the namespace's caches as the run read them), else among a fresh LIST of the namespace."""
    if known is not None:
        caches = list(known)
    else:
        listed = cluster.list(MODELCACHE_API_VERSION, KIND, namespace)
        caches = read_caches(listed, schema_validated=cluster.validates_schemas)
    found = find_model_cache([c.model for c in caches], source, storage_class)
    return next((c for c in caches if c.model is found), None)


def ensure_cache(
    cluster: Cluster,
    namespace: str,
    source: ModelSource,
    *,
    storage_class: str | None = None,
    size: str | None = None,
    env: list[dict[str, Any]] | None = None,
    requested_by: str,
    known: Sequence[Accepted[ModelCache]] | None = None,
) -> Accepted[ModelCache]:
    """The ModelCache holding ``source`` in ``namespace``: adopted if one exists (a person's or another
    consumer's), created otherwise. ``requested_by`` (``Kind/namespace/name``) is recorded on it.

    ``known`` is the namespace's ModelCaches as the run read them (and requested since): the cache is
    looked up there, and the namespace is listed again only when creating it conflicts (another consumer
    created it meanwhile). Without it, the namespace's caches are listed first.

    Args:
        cluster: The cluster the cache lives in.
        namespace: The consumer's namespace.
        source: The downloadable model source the cache holds.
        storage_class: The PVC's storage class, or None for the cluster's default; part of the cache's identity.
        size: The PVC's size of a created cache, or None to size it from the source.
        env: Environment entries the fill needs, or None.
        requested_by: The consumer, as ``Kind/namespace/name``.
        known: The namespace's ModelCaches as the run read them, or None to list them first.

    Returns:
        The adopted or created cache, with its API model.

    Raises:
        ValueError: The source is mounted directly (``pvc://``, ``hostpath://``), not cached.
        Conflict: The create conflicted and no cache of this identity exists (another object holds the name).
        ClusterError: Listing, creating or patching the cache failed (the cluster's typed errors pass through).
    """
    if not source.downloadable:
        raise ValueError(f"{source.uri} is mounted directly, not cached (only downloadable sources are)")
    existing = _find(cluster, namespace, source, storage_class, known)
    if existing is None:
        try:
            created = cluster.create(
                new_cache(namespace, source, storage_class=storage_class, size=size, env=env, requested_by=requested_by)
            )
            log.info(
                "created ModelCache %s/%s for %s (%s)", namespace, created["metadata"]["name"], requested_by, source.uri
            )
            _emit_requested(created, requested_by)
            return _typed(created)
        except Conflict:
            # Another consumer created it in between (or a cache of another identity holds the name).
            existing = _find(cluster, namespace, source, storage_class)
            if existing is None:
                raise
    return adopt(cluster, existing, requested_by)


def _emit_requested(cache: Manifest, requested_by: str) -> None:
    """``modelplane.aim.cache.requested`` (tasks.clients.events.CACHE_REQUESTED): the warm-caches deployment's
    trigger fills the new cache's namespace at once instead of at its next interval."""
    from tasks.clients.events import emit_change

    emit_change(ObjectRef.of(cache), "requested", {"requestedBy": requested_by, "source": cache["spec"]["sourceUri"]})


def adopt(cluster: Cluster, cache: Accepted[ModelCache], requested_by: str) -> Accepted[ModelCache]:
    """Record ``requested_by`` on an existing cache (and its identity label, for a person's cache).

    Args:
        cluster: The cluster the cache lives in.
        cache: The existing ModelCache, with its API model.
        requested_by: The consumer, as ``Kind/namespace/name``.

    Returns:
        The cache as patched, or ``cache`` itself when it already records the requester and its identity label.
    """
    meta = cache.model.metadata
    held = model_identity_of(cache.model)
    patch_meta: dict[str, Any] = {}
    annotations = with_requester(meta.annotations, requested_by)
    if annotations:
        patch_meta["annotations"] = annotations
    if held is not None:
        identity = cache_identity(*held)
        if meta.labels.get(CACHE_IDENTITY_LABEL) != identity:
            patch_meta["labels"] = {CACHE_IDENTITY_LABEL: identity}
    if not patch_meta:
        return cache
    return _typed(cluster.patch_spec(ObjectRef.of(cache.obj), {"metadata": patch_meta}))


def mark_used(cluster: Cluster, cache: Accepted[ModelCache], now: datetime) -> Accepted[ModelCache]:
    """Write ``status.lastUsed = now`` (a workload mounting the cache was rolled out); no write when equal.

    Args:
        cluster: The cluster the cache lives in.
        cache: The ModelCache, with its API model.
        now: The time the workload was rolled out, written to the second.

    Returns:
        The cache as patched, or ``cache`` itself when ``lastUsed`` already says ``now``.
    """
    stamp = format_time(now)
    status = cache.model.status
    if status is not None and status.last_used is not None and format_time(status.last_used) == stamp:
        return cache
    return _typed(cluster.patch_status(ObjectRef.of(cache.obj), {"lastUsed": stamp}))
