"""The ModelCaches of each namespace as one AIM run knows them (its LIST plus the caches it requested since),
shared by the run's workers so that objects of one namespace request each cache once; ``lastUsed`` on the caches
a rolled-out workload mounts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime

from engine.api.aim import ModelCache
from engine.caches.lookup import CacheRequest, find_model_cache
from engine.caches.sources import parse_source
from tasks.boundary import Accepted
from tasks.caches import ensure_cache, mark_used
from tasks.clients.cluster import Cluster
from tasks.clients.cluster.errors import ClusterError

log = logging.getLogger("modelplane.aim")


class SharedCaches:
    """The ModelCaches of each namespace as this run knows them (the LIST plus the ones requested
    since), shared by the run's workers: objects of one namespace request each cache once."""

    def __init__(self, caches: Iterable[Accepted[ModelCache]]) -> None:
        self._by_namespace: dict[str, list[Accepted[ModelCache]]] = {}
        for cache in caches:
            self._by_namespace.setdefault(cache.model.metadata.namespace or "", []).append(cache)
        self._lock = threading.Lock()

    def as_read(self, cache: ModelCache) -> Accepted[ModelCache] | None:
        """The object as read (or as requested) behind a ModelCache the engine decided on."""
        namespace, name = cache.metadata.namespace or "", cache.metadata.name
        with self._lock:
            return next((c for c in self._by_namespace.get(namespace, []) if c.model.metadata.name == name), None)

    def request(self, cluster: Cluster, namespace: str, requests: Sequence[CacheRequest]) -> int:
        """Create (or adopt, :func:`tasks.caches.ensure_cache`) the cache of each request that no cache
        of the namespace holds yet; returns how many were requested from the cluster."""
        requested = 0
        with self._lock:
            known = self._by_namespace.setdefault(namespace, [])
            for request in requests:
                source = parse_source(request.source)
                if find_model_cache([c.model for c in known], source, request.storage_class) is not None:
                    continue
                known.append(
                    ensure_cache(
                        cluster,
                        namespace,
                        source,
                        storage_class=request.storage_class,
                        requested_by=request.requested_by,
                        known=known,
                    )
                )
                requested += 1
        return requested


def mark_caches_used(cluster: Cluster, caches: Iterable[Accepted[ModelCache]], now: datetime) -> None:
    """``status.lastUsed = now`` on every cache a rolled-out workload mounts.

    Args:
        cluster: The cluster the ModelCaches live in.
        caches: The ModelCaches (as read) the rolled-out workload mounts.
        now: The time written as ``status.lastUsed``; a cache whose write fails is logged and skipped.
    """
    for cache in caches:
        try:
            mark_used(cluster, cache, now)
        except ClusterError as exc:
            log.warning("ModelCache %s/%s: cannot write lastUsed: %s", cache.namespace, cache.name, exc.message)
