"""Writing rendered objects: create what is missing, patch what changed (by revision hash), nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.api.views import Scalable
from engine.rollout.workloads import ANNOTATION_REVISION, annotation, update_patch
from tasks.clients.cluster import Cluster, Conflict, ObjectRef
from tasks.clients.cluster.errors import ClusterError, NotFound


@dataclass
class WriteLog:
    """The objects a pass created, updated and deleted (``Kind/name``)."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """``created Kind/a, Kind/b; updated ...; deleted ...`` (the non-empty ones), e.g. for an Event."""
        lists = (("created", self.created), ("updated", self.updated), ("deleted", self.deleted))
        return "; ".join(f"{what} {', '.join(names)}" for what, names in lists if names)


def write_object(
    cluster: Cluster, desired: dict[str, Any], live: dict[str, Any] | None, log: WriteLog
) -> dict[str, Any]:
    """Create ``desired``, or patch ``live`` when its revision or replicas differ; no write otherwise.

    Args:
        cluster: The cluster to write to.
        desired: The rendered object, with its revision annotation.
        live: The object as it exists, or None when it does not.
        log: Where the created and updated objects are recorded.

    Returns:
        The object as stored after the write, or ``live`` when nothing was written.

    Raises:
        ClusterError: The object exists though it was not found among this resource's objects (reason
            ``AlreadyExists``: Modelplane does not take over another's object).
    """
    label = f"{desired['kind']}/{desired['metadata']['name']}"
    if live is None:
        try:
            stored = cluster.create(desired)
        except Conflict:
            raise ClusterError(
                f"{label} already exists and is not managed by Modelplane for this resource", reason="AlreadyExists"
            ) from None
        log.created.append(label)
        return stored
    ref = ObjectRef.of(live)
    version = (live.get("metadata") or {}).get("resourceVersion")
    if annotation(live, ANNOTATION_REVISION) != annotation(desired, ANNOTATION_REVISION):
        stored = cluster.patch_spec(ref, update_patch(live, desired), resource_version=version)
        log.updated.append(label)
        return stored
    if desired["kind"] not in ("Deployment", "ModelServing"):
        return live
    wanted = Scalable.model_validate(desired).spec.replicas
    if wanted is not None and Scalable.model_validate(live).spec.replicas != wanted:
        stored = cluster.patch_spec(ref, {"spec": {"replicas": wanted}}, resource_version=version)
        log.updated.append(f"{label} (replicas {wanted})")
        return stored
    return live


def read_live(cluster: Cluster, desired: dict[str, Any]) -> dict[str, Any] | None:
    """The live object of the rendered ``desired``, or ``None`` when it does not exist yet.

    Args:
        cluster: The cluster to read.
        desired: The rendered object (its API version, kind, name and namespace are read).

    Returns:
        The object as it exists, or None.
    """
    meta = desired["metadata"]
    try:
        return cluster.get(desired["apiVersion"], desired["kind"], meta["name"], meta.get("namespace"))
    except NotFound:
        return None
