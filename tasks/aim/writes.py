"""Writing through the objects as read: a status is patched only where it changed (with the read
``resourceVersion``, recomputed over a fresh copy on a conflict), an object created, applied or deleted only when
the engine decided so; what a run wrote is counted (:class:`WriteCounts`) and a status written is an Event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine.api.aim import AIMServiceTemplate
from engine.api.views import Observed
from engine.status import ConditionUpdate, changed_fields
from tasks.clients.cluster import Cluster, Manifest, ObjectRef
from tasks.clients.cluster.errors import ClusterError, Conflict, NotFound
from tasks.clients.cluster.recorder import record_event
from tasks.clients.cluster.retry import write_status
from tasks.tracking import map_in_threads

WORKERS = 8
"""Threads a run reads and writes its objects on (the per-object API calls are independent)."""


def write_changed_status(cluster: Cluster, obj: Manifest, status: Mapping[str, Any]) -> bool:
    """Patch the status fields that differ from ``status`` (with the read resourceVersion).

    On a conflict the object is re-read and the fields that still differ are written over the fresh copy
    (:func:`tasks.clients.cluster.retry.write_status`).

    Args:
        cluster: The cluster the object lives in.
        obj: The object as this run read it.
        status: The status the object should have.

    Returns:
        Whether a write happened (``False`` when no field differs).
    """
    wanted = dict(status)
    return write_status(cluster, obj, lambda current: changed_fields(current.get("status") or {}, wanted))


@dataclass
class WriteCounts:
    """What a run wrote, for the summary."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    statuses: int = 0
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def merge(self, other: WriteCounts) -> None:
        """Add another worker's counts to these."""
        self.created += other.created
        self.updated += other.updated
        self.deleted += other.deleted
        self.statuses += other.statuses
        self.skipped += other.skipped
        self.errors += other.errors


T = TypeVar("T")
R = TypeVar("R")


def for_each(
    items: Sequence[T], work: Callable[[T, WriteCounts], R], writes: WriteCounts, workers: int = WORKERS
) -> list[R]:
    """Run ``work(item, counts)`` for every item on a small thread pool (the per-object reads and
    writes are independent API calls), in order; each call counts into its own :class:`WriteCounts`,
    merged into ``writes`` afterwards.

    Args:
        items: The objects to work on.
        work: The work on one item; it counts its writes into the :class:`WriteCounts` it is given.
        writes: The run's counts, into which every item's counts are merged.
        workers: How many items are worked on at once.

    Returns:
        What ``work`` returned for each item, in the order of ``items``.
    """

    def one(item: T) -> tuple[R, WriteCounts]:
        counts = WriteCounts()
        return work(item, counts), counts

    results = map_in_threads(one, items, workers)
    for _, counts in results:
        writes.merge(counts)
    return [result for result, _ in results]


def create_objects(cluster: Cluster, objects: Sequence[Manifest], counts: WriteCounts) -> None:
    """Create each object (the engine decided they are missing); one created concurrently by someone
    else is reported as skipped, another failure as an error of the run.

    Args:
        cluster: The cluster to create in.
        objects: The manifests to create.
        counts: Where each object created, skipped (already created by someone else) or failed is counted.
    """
    for obj in objects:
        meta = obj["metadata"]
        try:
            cluster.create(obj)
            counts.created += 1
        except Conflict:
            counts.skipped.append(f"{meta['namespace']}/{meta['name']}: created concurrently")
        except ClusterError as exc:
            counts.errors.append(f"{obj['kind']} {meta['namespace']}/{meta['name']}: {exc.message}")


def ref_of(obj: AIMServiceTemplate) -> ObjectRef:
    """The reference of a typed custom resource.

    Args:
        obj: A typed custom resource (anything with ``api_version``, ``kind`` and ``metadata``).

    Returns:
        Its API version, kind, name and namespace as an :class:`ObjectRef`.
    """
    return ObjectRef(obj.api_version, obj.kind, str(obj.metadata.name), obj.metadata.namespace)


def delete_stale(cluster: Cluster, stale: Sequence[ObjectRef], counts: WriteCounts) -> None:
    """Delete objects this flow created that are no longer wanted (auto-created templates of an image
    the model no longer names, workloads under a retired name); one that is already gone is fine.

    Args:
        cluster: The cluster to delete from.
        stale: The objects to delete.
        counts: Where each deletion (or failure to delete) is counted; an object already gone counts as neither.
    """
    for ref in stale:
        try:
            cluster.delete(ref)
            counts.deleted += 1
        except NotFound:
            pass
        except ClusterError as exc:
            counts.errors.append(f"{ref.kind} {ref.namespace}/{ref.name}: cannot delete: {exc.message}")


def apply_object(
    cluster: Cluster, desired: Manifest, existing: Manifest | None, patch: Mapping[str, Any] | None
) -> str:
    """Create ``desired`` when absent, merge-patch ``existing`` with ``patch`` when given; returns
    ``created``, ``updated`` or ``unchanged``.

    Args:
        cluster: The cluster to write to.
        desired: The manifest the engine rendered, created when nothing exists.
        existing: The object as read, or None when it does not exist.
        patch: The merge patch that brings ``existing`` to ``desired``, or None when it already matches.

    Returns:
        ``created``, ``updated`` or ``unchanged``.
    """
    if existing is None:
        cluster.create(desired)
        return "created"
    if patch is None:
        return "unchanged"
    cluster.patch_spec(
        ObjectRef.of(existing), dict(patch), resource_version=existing["metadata"].get("resourceVersion")
    )
    return "updated"


ROLLED_OUT_REASON = "RolledOut"
"""Event reason: the objects a service or model renders were created or updated."""
DISCOVERED_REASON = "ModelDiscovered"
"""Event reason: a model's image was read and its templates follow from it."""
WARNING_STATUSES = frozenset({"Failed", "Degraded"})


def post_status_event(
    cluster: Cluster, obj: Manifest, status: str, conditions: Sequence[ConditionUpdate], *details: str
) -> None:
    """An Event on ``obj`` saying what its status, just written, decided and why: the reason and message of its
    ``Ready`` condition (else of its first condition that is not True), a Warning when the status is Failed or
    Degraded.

    Args:
        cluster: The cluster the Event is recorded in.
        obj: The object whose status was just written.
        status: Its new ``status.status`` (e.g. ``Ready``, ``Failed``, ``Degraded``).
        conditions: The conditions just written, from which the Event's reason and message come.
        *details: More message parts appended after the condition's message; empty ones are left out.
    """
    cause = next((c for c in conditions if c.type == "Ready"), None) or next(
        (c for c in conditions if c.status != "True"), None
    )
    reason = cause.reason if cause is not None and cause.reason else status
    message = "; ".join(p for p in (status, cause.message if cause is not None else "", *details) if p)
    record_event(cluster, obj, reason, message, "Warning" if status in WARNING_STATUSES else "Normal")


def describe_rendered(obj: Manifest) -> str:
    """``name`` of a rendered InferenceService, with the image of its first predictor container when it has one.

    Args:
        obj: An InferenceService manifest the engine rendered.

    Returns:
        Its name, followed by ``(image IMAGE)`` when its first predictor container names an image.
    """
    containers = (obj["spec"].get("predictor") or {}).get("containers") or [{}]  # rendered by engine.aim: has a spec
    image = containers[0].get("image") if isinstance(containers[0], dict) else None
    return f"{obj['metadata']['name']}" + (f" (image {image})" if image else "")


def as_read(view: Observed | None) -> Manifest | None:
    """The object as read behind a view (what a write goes through), or None.

    Args:
        view: A view of an object as read, or None.

    Returns:
        The manifest behind the view, or None when there is no view.
    """
    return view.object if view is not None else None


def count_action(counts: WriteCounts, action: str) -> None:
    """Count one :func:`apply_object` result: ``created`` and ``updated`` are counted, ``unchanged`` is not.

    Args:
        counts: The counts to add to.
        action: What :func:`apply_object` returned.
    """
    if action == "created":
        counts.created += 1
    elif action == "updated":
        counts.updated += 1
