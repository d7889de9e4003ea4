"""I/O of the ``serve-openmodel`` flow: read the OpenModel and the Nodes, warm its shared cache, write the
OpenModel's conditions and the Deployment + Service that serve it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.api.aim import ModelCache
from engine.api.llmaz import API_VERSION
from engine.api.registry import OPEN_MODEL
from engine.caches.lookup import model_cache_pvc, model_cache_status
from engine.caches.sources import ModelSource
from engine.rollout.openmodel import (
    CONDITION_CACHED,
    CONDITION_VALIDATED,
    REASON_CACHE_AVAILABLE,
    REASON_CACHE_FAILED,
    REASON_CACHE_PENDING,
    REASON_SOURCE_VALID,
    invalid_reason,
)
from engine.rollout.workloads import FieldError
from engine.status import ConditionUpdate, changed_fields, generation_of, mapping_at, set_conditions
from tasks.boundary import Accepted
from tasks.caches import ensure_cache
from tasks.clients.cluster import Cluster, ObjectRef
from tasks.clients.cluster.errors import ClusterError, Forbidden, NotFound
from tasks.clients.cluster.retry import write_status

log = logging.getLogger(__name__)


def read_openmodel(cluster: Cluster, name: str) -> dict[str, Any]:
    """The cluster-scoped OpenModel ``name`` (``NotFound`` when there is none).

    Args:
        cluster: The cluster to read.
        name: The OpenModel's name.

    Returns:
        The OpenModel as read.

    Raises:
        NotFound: There is no OpenModel of that name (raised by the cluster client).
    """
    return cluster.get(API_VERSION, OPEN_MODEL, name)


def node_labels(cluster: Cluster) -> list[Mapping[str, str]] | None:
    """Every Node's labels, or ``None`` when Nodes cannot be listed (no permission, or a manifests
    directory that describes no Node): placement is then not checked. A live cluster that lists no Node
    has none (``[]``): nothing fits, and nothing is moved.

    Args:
        cluster: The cluster to list Nodes of.

    Returns:
        The labels of every Node, or None when placement cannot be checked.
    """
    from tasks.clients.cluster import LocalCluster

    try:
        nodes = cluster.list("v1", "Node")
    except (Forbidden, NotFound):
        return None
    if not nodes and isinstance(cluster, LocalCluster):
        return None
    return [(n.get("metadata") or {}).get("labels") or {} for n in nodes]


def warm_cache(cluster: Cluster, namespace: str, source: ModelSource, requested_by: str) -> Accepted[ModelCache]:
    """Create or adopt the namespace's ModelCache for ``source`` (every rollout of the model shares it).

    Args:
        cluster: The cluster the cache lives in.
        namespace: The namespace the model is served in.
        source: The OpenModel's downloadable source.
        requested_by: The consumer, as ``Kind/namespace/name``.

    Returns:
        The adopted or created ModelCache, with its API model.
    """
    return ensure_cache(cluster, namespace, source, requested_by=requested_by)


def cache_condition(cache: ModelCache | None, namespace: str) -> ConditionUpdate:
    """The ``Cached`` condition from the ModelCache's state.

    Args:
        cache: The ModelCache of the served model, or None when there is none yet.
        namespace: The namespace the cache lives in (named in the message).

    Returns:
        ``Cached`` True when the cache's PVC holds the weights, else False with the reason (pending or failed).
    """
    if cache is None:
        return ConditionUpdate(CONDITION_CACHED, "False", REASON_CACHE_PENDING, "no cache yet")
    name = cache.metadata.name
    state = model_cache_status(cache) or "Pending"
    pvc = model_cache_pvc(cache)
    if pvc is not None:
        return ConditionUpdate(
            CONDITION_CACHED, "True", REASON_CACHE_AVAILABLE, f"weights in ModelCache {namespace}/{name} (PVC {pvc})"
        )
    if state == "Failed":
        return ConditionUpdate(CONDITION_CACHED, "False", REASON_CACHE_FAILED, f"ModelCache {namespace}/{name} failed")
    return ConditionUpdate(
        CONDITION_CACHED,
        "False",
        REASON_CACHE_PENDING,
        f"ModelCache {namespace}/{name} is {state}: run warm-caches to fill it",
    )


def write_conditions(
    cluster: Cluster, obj: dict[str, Any], errors: list[FieldError], cached: ConditionUpdate | None, now: datetime
) -> bool:
    """``Validated`` (and ``Cached`` when known) on the OpenModel; no write when nothing changed.

    Args:
        cluster: The cluster the OpenModel lives in.
        obj: The OpenModel as read.
        errors: The OpenModel's validation errors (its source, name and flavors); empty when it is valid.
        cached: The ``Cached`` condition, or None when no cache is involved.
        now: The conditions' transition time when they change.

    Returns:
        Whether the status was written (False when nothing changed or the write failed, which is logged).
    """
    if errors:
        updates = [
            ConditionUpdate(CONDITION_VALIDATED, "False", invalid_reason(errors), "; ".join(str(e) for e in errors))
        ]
    else:
        updates = [
            ConditionUpdate(CONDITION_VALIDATED, "True", REASON_SOURCE_VALID, "the source passes llmaz's validation")
        ]
    if cached is not None:
        updates.append(cached)
    generation = generation_of(obj)

    def build(current: dict[str, Any]) -> dict[str, Any] | None:
        old = mapping_at(current, "status")  # a hand-written ``status: 5`` is replaced
        return changed_fields(
            old, {**old, "conditions": set_conditions(old.get("conditions"), updates, now, generation)}
        )

    try:
        return write_status(cluster, obj, build)
    except ClusterError as exc:  # the conditions are a report; serving goes on and the failure is logged
        log.warning("could not write the conditions of OpenModel %s: %s", ObjectRef.of(obj).name, exc.message)
        return False
