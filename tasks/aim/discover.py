"""The discover-models lifecycle's writes: the record of the image read now (the model's annotation), the
templates discovery wants, the deletion of stale ones, the model's conditions.
"""

from __future__ import annotations

from datetime import datetime

from engine.aim.discovery import (
    METADATA_ANNOTATION,
    DiscoveryRecord,
)
from engine.aim.discovery_plan import ModelPlan
from engine.status import status_with_conditions
from tasks.aim.writes import (
    DISCOVERED_REASON,
    WriteCounts,
    create_objects,
    delete_stale,
    post_status_event,
    ref_of,
    write_changed_status,
)
from tasks.clients.cluster import Cluster, Manifest, ObjectRef
from tasks.clients.cluster.recorder import record_event


def write_model_plan(cluster: Cluster, model: Manifest, plan: ModelPlan, now: datetime, counts: WriteCounts) -> None:
    """Write what :func:`engine.aim.discovery_plan.plan_model` decided, in order: the record read now
    (the model's annotation), the missing templates, the deletion of stale ones, the model's conditions.

    Args:
        cluster: The cluster the AIMClusterModel and its templates live in.
        model: The AIMClusterModel as read (its ``resourceVersion`` guards the annotation patch).
        plan: The engine's decision for this model: record to persist, templates to create and delete, conditions.
        now: The time the conditions' ``lastTransitionTime`` takes when they change.
        counts: Where the created, deleted, skipped and status writes (and errors) of this model are counted.
    """
    if plan.persist is not None:
        model = write_record(cluster, model, plan.persist)
    create_objects(cluster, plan.create, counts)
    counts.skipped += plan.skipped
    delete_stale(cluster, [ref_of(t) for t in plan.stale], counts)
    if write_changed_status(cluster, model, status_with_conditions(model, plan.conditions, now)):
        counts.statuses += 1
        if plan.result == "ok":
            created = ", ".join(str(t["metadata"]["name"]) for t in plan.create)
            message = f"image {plan.image}: {plan.deployments} recommended deployments, {plan.templates} templates"
            record_event(cluster, model, DISCOVERED_REASON, message + (f"; created {created}" if created else ""))
        else:
            post_status_event(cluster, model, "Failed", plan.conditions)


def write_record(cluster: Cluster, model: Manifest, record: DiscoveryRecord) -> Manifest:
    """Persist the discovery record in the model's annotation (only when it changed).

    Args:
        cluster: The cluster the AIMClusterModel lives in.
        model: The AIMClusterModel as read.
        record: The discovery record (image, digest, labels or failure) to store in the model's annotation.

    Returns:
        The model as the cluster returned it after the patch, or ``model`` itself when the annotation already held
        this record.
    """
    text = record.to_json()
    if (model["metadata"].get("annotations") or {}).get(METADATA_ANNOTATION) == text:
        return model
    return cluster.patch_spec(
        ObjectRef.of(model),
        {"metadata": {"annotations": {METADATA_ANNOTATION: text}}},
        resource_version=model["metadata"].get("resourceVersion"),
    )
