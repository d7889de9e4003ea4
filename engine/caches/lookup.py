"""Which ModelCache of a namespace holds a model source, and whether it can be mounted: decided
without I/O from one LIST of the namespace's ModelCaches (see ``CACHE-CONTRACT``).

A cache's identity is its ``sourceUri`` plus ``storageClassName``; consumers that name no storage class
share any cache of the source. Every consumer (template resolution, the AIM, Kthena and llmaz rollouts)
looks caches up here, and ``tasks.caches`` creates the ones that are missing. Caches are read as their API
model (what the boundary reader gives): a cache that does not parse never reaches these rules, and one whose
``sourceUri`` does not parse as a source is skipped (:func:`model_identity_of` is ``None``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.api.aim import ModelCache, ModelCacheStatus
from engine.caches.identity import cache_identity
from engine.caches.sources import ModelSource, parse_source

_STATUS_RANK = {"Available": 0, "Progressing": 1, "Pending": 2, None: 3, "Failed": 4}


def model_identity_of(cache: ModelCache) -> tuple[ModelSource, str | None] | None:
    """The source and storage class a ModelCache holds, or ``None`` when its ``sourceUri`` does not parse."""
    try:
        return parse_source(cache.spec.source_uri), cache.spec.storage_class_name or None
    except ValueError:
        return None


def model_cache_status(cache: ModelCache) -> str | None:
    """The cache's ``status.status`` as written (None when it has none yet, not the model's default)."""
    return recorded_state(cache.status)


def recorded_state(status: ModelCacheStatus | None) -> str | None:
    """``status.status`` as written (None when the status has none, not the model's default ``Pending``:
    a status holding only ``lastUsed`` or conditions records no state yet)."""
    return status.status if status is not None and "status" in status.model_fields_set else None


def model_cache_pvc(cache: ModelCache) -> str | None:
    """The PVC holding the cache's files (``status.persistentVolumeClaim``) once the cache is Available
    (filled and verified), else None: the only state in which a consumer mounts it."""
    if model_cache_status(cache) != "Available" or cache.status is None:
        return None
    return cache.status.persistent_volume_claim or None


def find_model_cache(
    caches: Iterable[ModelCache], source: ModelSource, storage_class: str | None = None
) -> ModelCache | None:
    """The cache in ``caches`` (one LIST of a namespace, as parsed) that holds ``source``.

    An exact identity (source and storage class) wins. A consumer that names no storage class shares any
    cache of the same source; one that names a class also shares a cache that names none (the cluster's
    choice), as AIM does. Among several, the best status first (Available, Progressing, Pending, Failed),
    then the name. A cache whose ``sourceUri`` does not parse is skipped.
    """
    wanted = cache_identity(source, storage_class)
    wanted_source = cache_identity(source, None)
    exact: list[ModelCache] = []
    compatible: list[ModelCache] = []
    for cache in caches:
        held = model_identity_of(cache)
        if held is None:
            continue
        held_source, held_class = held
        if cache_identity(held_source, held_class) == wanted:
            exact.append(cache)
        elif cache_identity(held_source, None) == wanted_source and (storage_class is None or held_class is None):
            compatible.append(cache)
    for group in (exact, compatible):
        if group:
            return min(group, key=_rank)
    return None


def _rank(cache: ModelCache) -> tuple[int, str]:
    """The order :func:`find_model_cache` prefers among caches of one identity: status, then name."""
    return _STATUS_RANK.get(model_cache_status(cache), 3), cache.metadata.name or ""


@dataclass(frozen=True)
class CacheRequest:
    """A ModelCache a consumer needs and no cache of its namespace holds: to create (or adopt)."""

    source: str
    storage_class: str | None
    requested_by: str
    """``Kind/namespace/name`` of the consumer, recorded on the cache."""
