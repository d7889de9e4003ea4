"""The discovery of one AIMClusterModel, decided without I/O: what discover-models writes for it.

:func:`images_to_read` decides which images the run reads (each distinct image once, with the record
persisted on the model that asks first). After the reads, :func:`plan_model` takes a model (its API
model, as the boundary reader parsed it), its discovery record and :class:`DiscoveryWorld` (the templates the run read,
the target namespaces), and decides everything: the record to persist in the model's annotation, the
auto-created templates to create (never over a template a person wrote), the auto-created templates the
current image no longer wants (to delete), and the model's ``MetadataExtracted`` and ``Ready``. A record the
model's annotations cannot hold (:func:`fitting_record`: Kubernetes allows 256 KiB of annotations per object) is
never written: the model gets the failure naming the largest labels instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from engine.aim.discovery import (
    METADATA_ANNOTATION,
    MODEL_LABEL,
    OCI_LABEL_PREFIX,
    REASON_EXTRACTION_FAILED,
    DiscoveryRecord,
    auto_templates,
    failed_record,
    is_auto_template,
    metadata_condition,
    needs_fetch,
    ready_condition,
)
from engine.api.aim import AIMClusterModel, AIMServiceTemplate
from engine.api.identity import TOTAL_ANNOTATION_SIZE, annotation_size_error, annotations_size
from engine.status import ConditionUpdate

Manifest = dict[str, Any]


def previous_record(model: AIMClusterModel) -> DiscoveryRecord | None:
    """What discovery persisted on the model (its ``aim.silogen.ai/image-metadata`` annotation)."""
    return DiscoveryRecord.from_annotations(model.metadata.annotations)


def images_to_read(
    models: Sequence[AIMClusterModel], now: datetime, resync: timedelta
) -> dict[str, DiscoveryRecord | None]:
    """``image -> previous record`` of every image to read now: never read, ``spec.image`` changed, a
    transient failure last time, or older than ``resync``. Each distinct image once."""
    wanted: dict[str, DiscoveryRecord | None] = {}
    for model in models:
        previous = previous_record(model)
        if needs_fetch(previous, model.spec.image, now, resync):
            wanted.setdefault(model.spec.image, previous)
    return wanted


RECORD_LABELS = {
    "canonicalName": "model.canonicalName",
    "source": "model.source",
    "title": "title",
    "description": "description.full",
    "releaseNotes": "release.notes",
    "tags": "model.tags",
    "versions": "model.versions",
    "variants": "model.variants",
    "hfTokenRequired": "hfToken.required",
    "recommendedDeployments": "model.recommendedDeployments",
}
"""The label (after ``com.amd.aim.`` or ``org.amd.silogen.``) each field of the persisted metadata is read from."""
LARGEST_NAMED = 3
"""How many of the largest labels a record too large to keep names."""


def _label_sizes(record: DiscoveryRecord) -> list[tuple[str, int]]:
    """``(label, bytes it takes in the record)`` of every label the record keeps, largest first."""
    metadata = record.metadata.to_dict() if record.metadata is not None else {}
    sizes = [
        (OCI_LABEL_PREFIX + key, len(json.dumps(value))) for key, value in (metadata.pop("oci", None) or {}).items()
    ]
    sizes += [(RECORD_LABELS.get(key, key), len(json.dumps(value))) for key, value in metadata.items()]
    return sorted(sizes, key=lambda item: (-item[1], item[0]))


def fitting_record(model: AIMClusterModel, record: DiscoveryRecord) -> DiscoveryRecord:
    """``record`` when the model's annotations hold it in :data:`METADATA_ANNOTATION` within what Kubernetes
    allows an object (:func:`engine.api.identity.annotation_size_error`, its other annotations counted), else the
    ``MetadataExtractionFailed`` failure naming the largest labels (a terminal failure: the image is read again at
    the resync). Several labels of up to 64 KiB each (and the OCI labels, unbounded) can exceed the 256 KiB an
    object's annotations hold together, which the API server refuses."""
    annotations = {**model.metadata.annotations, METADATA_ANNOTATION: record.to_json()}
    if annotation_size_error(annotations) is None:
        return record
    largest = ", ".join(f"{label} ({size} bytes)" for label, size in _label_sizes(record)[:LARGEST_NAMED])
    message = (
        f"the image's labels are too large to keep in the {METADATA_ANNOTATION} annotation: the model's "
        f"annotations would hold {annotations_size(annotations)} bytes, above the {TOTAL_ANNOTATION_SIZE} "
        f"(256 KiB) Kubernetes allows an object; the largest labels: {largest}"
    )
    return failed_record(record.image, record.read_at, REASON_EXTRACTION_FAILED, message, previous_record(model))


@dataclass(frozen=True)
class DiscoveryWorld:
    """What one discover-models run read about templates, and where it creates them."""

    namespaces: Sequence[str]
    existing: Mapping[tuple[str, str], AIMServiceTemplate]
    """``(namespace, name)`` -> every AIMServiceTemplate."""
    auto_by_model: Mapping[str, Sequence[AIMServiceTemplate]]
    """model name -> the templates discovery created for it."""

    @classmethod
    def of(cls, templates: Sequence[AIMServiceTemplate], namespaces: Sequence[str]) -> DiscoveryWorld:
        """Index the templates by namespace and name, and the auto-created ones by model."""
        auto_by_model: dict[str, list[AIMServiceTemplate]] = {}
        for template in templates:
            if is_auto_template(template):
                owner = template.metadata.labels.get(MODEL_LABEL, "")
                auto_by_model.setdefault(owner, []).append(template)
        existing = {_key(t): t for t in templates}
        return cls(list(namespaces), existing, auto_by_model)


@dataclass(frozen=True)
class ModelPlan:
    """Everything discover-models writes for one model, and the line it reports."""

    name: str
    image: str
    persist: DiscoveryRecord | None
    """The record to store in the model's annotation (read in this run), else None."""
    create: tuple[Manifest, ...]
    """The templates to create (rendered)."""
    skipped: tuple[str, ...]
    stale: tuple[AIMServiceTemplate, ...]
    """The auto-created templates the current image no longer wants (to delete)."""
    conditions: tuple[ConditionUpdate, ...]
    result: str
    """``ok``, the failure reason, or ``not read``."""
    deployments: int
    templates: int


def _key(template: AIMServiceTemplate) -> tuple[str, str]:
    """``(namespace, name)`` of a template."""
    return template.metadata.namespace or "", template.metadata.name or ""


def _to_create(
    desired: Sequence[Manifest], existing: Mapping[tuple[str, str], AIMServiceTemplate]
) -> tuple[list[Manifest], list[str]]:
    """The desired templates that do not exist, and why the others are left alone (an existing one
    that is not discovery's is a person's template of the same name)."""
    create: list[Manifest] = []
    skipped: list[str] = []
    for obj in desired:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        found = existing.get(key)
        if found is None:
            create.append(obj)
        elif not is_auto_template(found):
            skipped.append(f"{key[0]}/{key[1]}: a template not created by discovery has this name; left as it is")
    return create, skipped


def plan_model(
    model: AIMClusterModel, record: DiscoveryRecord | None, read_now: bool, world: DiscoveryWorld
) -> ModelPlan:
    """Decide one model's discovery: record to persist, templates to create and delete, conditions.

    ``record`` is this run's read of the model's image (``read_now``) or the persisted one; a read the model's
    annotations cannot hold is its failure (:func:`fitting_record`)."""
    name, image = str(model.metadata.name), model.spec.image
    if read_now and record is not None and record.ok:
        record = fitting_record(model, record)
    current = record is not None and record.ok and record.metadata is not None and record.image == image
    plan = auto_templates(model, record.metadata, world.namespaces) if current and record and record.metadata else None
    ours = list(world.auto_by_model.get(name, []))
    create: list[Manifest] = []
    skipped: list[str] = []
    stale: list[AIMServiceTemplate] = []
    if plan is not None:
        create, skipped = _to_create(plan.templates, world.existing)
        skipped += [f"{name}: {why}" for why in plan.skipped]
        # Templates of an earlier image (or a deployment the image no longer recommends) go: their
        # names hash the image, so the new image's templates replace them.
        wanted = {(t["metadata"]["namespace"], t["metadata"]["name"]) for t in plan.templates}
        stale = [t for t in ours if _key(t)[0] in world.namespaces and _key(t) not in wanted]
        ours = [t for t in ours if t not in stale]
    # The templates there will be after this run's writes, as resolve-templates counts them next: ours that stay
    # and each one created now (Pending until resolved). Not a count of the wanted ones, which also names
    # templates this run does not create (a person's of the same name) and would never turn Ready.
    states = [(t.status.status if t.status else None) or "Pending" for t in ours] + ["Pending"] * len(create)
    conditions = (metadata_condition(record), ready_condition(record, states, bool(plan and plan.templates)))
    ok = record is not None and record.ok
    return ModelPlan(
        name=name,
        image=image,
        persist=record if read_now and record is not None else None,
        create=tuple(create),
        skipped=tuple(skipped),
        stale=tuple(stale),
        conditions=conditions,
        result="ok" if ok else ((record.reason or "") if record is not None else "not read"),
        deployments=len(record.metadata.recommended_deployments) if ok and record and record.metadata else 0,
        templates=len(plan.templates) if plan else 0,
    )
