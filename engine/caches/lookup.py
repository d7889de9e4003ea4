"""Which ModelCache of a namespace holds a model source, and whether it can be mounted: decided
without I/O from one LIST of the namespace's ModelCaches (see ``CACHE-CONTRACT``).

A cache's identity is its ``sourceUri`` plus ``storageClassName``; consumers that name no storage class
share any cache of the source. Every consumer (template resolution, the AIM, Kthena and llmaz rollouts)
looks caches up here, and ``tasks.caches`` creates the ones that are missing. The same rule reads caches
as the cluster returns them (:func:`find_cache`) or as their API model (:func:`find_model_cache`, what the
AIM engine receives from the boundary reader).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from engine.api.aim import ModelCache
from engine.caches.identity import cache_identity
from engine.caches.sources import ModelSource, parse_source

Manifest = dict[str, Any]

_STATUS_RANK = {"Available": 0, "Progressing": 1, "Pending": 2, None: 3, "Failed": 4}


def identity_of(cache: Mapping[str, Any]) -> tuple[ModelSource, str | None] | None:
    """The source and storage class a ModelCache holds, or ``None`` when its ``sourceUri`` does not parse."""
    spec = cache.get("spec") or {}
    try:
        return parse_source(str(spec.get("sourceUri") or "")), spec.get("storageClassName") or None
    except ValueError:
        return None


def model_identity_of(cache: ModelCache) -> tuple[ModelSource, str | None] | None:
    """:func:`identity_of` of a ModelCache API model."""
    try:
        return parse_source(cache.spec.source_uri), cache.spec.storage_class_name or None
    except ValueError:
        return None


def model_cache_status(cache: ModelCache) -> str | None:
    """The cache's ``status.status`` as written (None when it has none yet, not the model's default)."""
    return cache.status.status if cache.status is not None and "status" in cache.status.model_fields_set else None


def model_cache_pvc(cache: ModelCache) -> str | None:
    """:func:`cache_pvc` of a ModelCache API model: its PVC once Available, else None."""
    if model_cache_status(cache) != "Available" or cache.status is None:
        return None
    return cache.status.persistent_volume_claim or None


C = TypeVar("C")


def find_cache(caches: Iterable[Manifest], source: ModelSource, storage_class: str | None = None) -> Manifest | None:
    """The cache in ``caches`` (one LIST of a namespace, as read) that holds ``source``.

    An exact identity (source and storage class) wins. A consumer that names no storage class shares any
    cache of the same source; one that names a class also shares a cache that names none (the cluster's
    choice), as AIM does. Among several, the best status first (Available, Progressing, Pending, Failed).
    """
    return _best(
        caches,
        source,
        storage_class,
        identity_of,
        lambda c: (_STATUS_RANK.get((c.get("status") or {}).get("status"), 3), c["metadata"]["name"]),
    )


def find_model_cache(
    caches: Iterable[ModelCache], source: ModelSource, storage_class: str | None = None
) -> ModelCache | None:
    """:func:`find_cache` over ModelCache API models."""
    return _best(
        caches,
        source,
        storage_class,
        model_identity_of,
        lambda c: (_STATUS_RANK.get(model_cache_status(c), 3), c.metadata.name or ""),
    )


def _best(
    caches: Iterable[C],
    source: ModelSource,
    storage_class: str | None,
    identity: Callable[[C], tuple[ModelSource, str | None] | None],
    rank: Callable[[C], tuple[int, str]],
) -> C | None:
    """The cache :func:`find_cache` chooses, caches read through ``identity`` and ranked by ``rank``."""
    wanted = cache_identity(source, storage_class)
    wanted_source = cache_identity(source, None)
    exact: list[C] = []
    compatible: list[C] = []
    for cache in caches:
        held = identity(cache)
        if held is None:
            continue
        held_source, held_class = held
        if cache_identity(held_source, held_class) == wanted:
            exact.append(cache)
        elif cache_identity(held_source, None) == wanted_source and (storage_class is None or held_class is None):
            compatible.append(cache)
    for group in (exact, compatible):
        if group:
            return min(group, key=rank)
    return None


def cache_available(cache: Mapping[str, Any] | None) -> bool:
    """Whether the cache is filled and verified (``status.status == "Available"``)."""
    return cache is not None and bool(cache) and (cache.get("status") or {}).get("status") == "Available"


def cache_pvc(cache: Mapping[str, Any] | None) -> str | None:
    """The PVC holding the cache's files (``status.persistentVolumeClaim``), once the flow created it."""
    pvc = ((cache or {}).get("status") or {}).get("persistentVolumeClaim")
    return str(pvc) if pvc else None


@dataclass(frozen=True)
class CacheRequest:
    """A ModelCache a consumer needs and no cache of its namespace holds: to create (or adopt)."""

    source: str
    storage_class: str | None
    requested_by: str
    """``Kind/namespace/name`` of the consumer, recorded on the cache."""
