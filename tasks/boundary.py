"""Parse once at the boundary: the tolerant reader every custom resource a flow lists passes through.

Each Modelplane custom resource is parsed as the pydantic model that generates its CRD
(:func:`engine.api.validate.parse_object`, the reader ``modelplane validate-manifests`` uses too, so the two never
disagree). An object that does not parse is left out of what the flow sees, gets the failure status of
its kind (a ``Ready=False`` condition with reason ``InvalidSpec`` naming the field path and the reason;
``status: Failed`` where the kind's status model has a ``status`` phase) and is reported; the run goes on with the others.

Rejections are collected per run (:func:`start_run`, :func:`drain_rejections`): the command line starts a
collector for each flow it runs and turns what it collected into a degraded exit (3) after the flow returns.
The collector lives in a context variable, which Prefect carries into the threads it runs tasks in, so
one command's rejections never reach another's; outside a collecting run (a deployment's flow run) a
rejection is logged and written to the object's status only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel

from engine.api.identity import identity_errors
from engine.api.meta import condition_message
from engine.api.registry import kind_info
from engine.api.validate import ManifestInvalid, check_identity, parse_object, with_status
from engine.changes import being_deleted
from engine.scopes import scoped
from engine.status import generation_of, mapping_at
from tasks.clients.cluster import Cluster, LocalCluster, ObjectRef
from tasks.clients.cluster.errors import ClusterError
from tasks.tracking import run_logger

log = logging.getLogger(__name__)

Manifest = dict[str, Any]

INVALID_REASON = "InvalidSpec"

_lock = threading.Lock()
_rejections: ContextVar[list[str] | None] = ContextVar("modelplane_boundary_rejections", default=None)
"""The current run's rejections (one line each), or None when no run collects them."""

M = TypeVar("M", bound=BaseModel)
Item = TypeVar("Item", bound="Accepted[Any] | Manifest")


@dataclass(frozen=True)
class Accepted(Generic[M]):
    """One custom resource that passed the boundary: ``model`` is what the flow reads (its parsed API
    model), ``obj`` the object as the cluster returned it, which writes go through (its metadata,
    resourceVersion and status are patched as read)."""

    obj: Manifest
    model: M

    @property
    def namespace(self) -> str:
        """The object's namespace (``default`` when it has none)."""
        return self.model.metadata.namespace or "default"  # type: ignore[attr-defined]

    @property
    def name(self) -> str:
        """The object's name."""
        return str(self.model.metadata.name)  # type: ignore[attr-defined]


def accept(cluster: Cluster, objects: Iterable[Manifest]) -> list[Manifest]:
    """``objects`` without the Modelplane custom resources that do not parse; each of those is marked
    (its failure status) and reported. Objects of other kinds pass unchanged.

    Args:
        cluster: The cluster the objects were read from; invalid Modelplane objects get their failure status there.
        objects: Manifests as one LIST returned them.

    Returns:
        The objects that parse (and every object of a kind that is not Modelplane's), in order.
    """
    return [obj for obj, _ in accept_parsed(cluster, objects)]


def accept_parsed(
    cluster: Cluster, objects: Iterable[Manifest], rejected: dict[tuple[str, str], str] | None = None
) -> list[tuple[Manifest, BaseModel | None]]:
    """As :func:`accept`, each object paired with its parsed API model (``None`` for kinds that are not
    Modelplane's): the flows read specs from the typed model and write through the object as read.

    Args:
        cluster: The cluster the objects were read from; invalid Modelplane objects get their failure status there.
        objects: Manifests as one LIST returned them.
        rejected: When given, filled with each invalid object's ``field: reason`` by (namespace, name), for a
            lifecycle that reports the objects referring to it (a binding whose policy is invalid).

    Returns:
        Each accepted object with its parsed API model (None for a kind that is not Modelplane's), in order.
    """
    valid: list[tuple[Manifest, BaseModel | None]] = []
    record_unreadable(cluster)
    for obj in objects:
        parsed = parse_resource(obj, schema_validated=cluster.validates_schemas)
        if isinstance(parsed, tuple):
            reject(cluster, obj, *parsed)
            if rejected is not None:
                meta = mapping_at(obj, "metadata")
                rejected[str(meta.get("namespace") or ""), str(meta.get("name"))] = ": ".join(parsed)
        else:
            valid.append((obj, parsed))
    return valid


def not_being_deleted(items: Iterable[Item]) -> list[Item]:
    """The objects a lifecycle reconciles: ``items`` without those being deleted
    (:func:`engine.changes.being_deleted`), each of those logged. A controller leaves an object that a finalizer or a
    foreground deletion holds alone, as the projects behind the seeds do (WVA's active VariantAutoscalings): a
    dependent rolled out, a cache filled or a scale written for it now would outlive it or hold its deletion up.

    Args:
        items: Objects as read (manifests, or accepted objects with their API models).

    Returns:
        Those not being deleted, in order.
    """
    kept: list[Item] = []
    for item in items:
        obj = item.obj if isinstance(item, Accepted) else item
        if being_deleted(obj):
            meta = mapping_at(obj, "metadata")
            run_logger().info(
                "%s %s/%s is being deleted: left alone",
                obj.get("kind"),
                meta.get("namespace") or "",
                meta.get("name"),
            )
        else:
            kept.append(item)
    return kept


def accept_identity(cluster: Cluster, objects: Iterable[Manifest]) -> list[Manifest]:
    """``objects`` without those whose identity (name, namespace, labels, annotations) the API server would
    refuse, each of those reported (:func:`reject`); for a flow that validates the specs itself (rollout-models
    and Kthena's own conditions) but must never build a path or an object from a hostile name.

    Args:
        cluster: The cluster the objects were read from (rejections are recorded against it).
        objects: Manifests as one LIST returned them.

    Returns:
        The objects whose identity is sound, in order; their specs are not checked.
    """
    sound: list[Manifest] = []
    record_unreadable(cluster)
    for obj in objects:
        errors = identity_errors(obj)
        if errors:
            reject(cluster, obj, *errors[0])
        else:
            sound.append(obj)
    return sound


def accept_as(
    cluster: Cluster, objects: Iterable[Manifest], model: type[M], rejected: dict[tuple[str, str], str] | None = None
) -> list[Accepted[M]]:
    """As :func:`accept` for objects of one Modelplane kind, each with its parsed ``model``.

    Args:
        cluster: The cluster the objects were read from; invalid ones get their failure status there.
        objects: Manifests of the kind ``model`` types, as one LIST returned them.
        model: The API model class of the kind.
        rejected: When given, filled with each invalid object's ``field: reason`` (:func:`accept_parsed`).

    Returns:
        Each object that parses as ``model``, paired with its parsed model.
    """
    accepted = accept_parsed(cluster, objects, rejected)
    return [Accepted(obj, parsed) for obj, parsed in accepted if isinstance(parsed, model)]


def invalid_field(obj: Any) -> tuple[str, str] | None:
    """``(field path, reason)`` when ``obj`` is a Modelplane kind whose spec does not parse, else None.

    Args:
        obj: Any object, as a manifest or anything else a file held.

    Returns:
        The field path and reason of the first problem of a Modelplane object (or of an identity the API server would
        refuse), else None.
    """
    parsed = parse_resource(obj)
    return parsed if isinstance(parsed, tuple) else None


def parse_resource(obj: Any, *, schema_validated: bool = False) -> BaseModel | tuple[str, str] | None:
    """The API model of a Modelplane kind, ``(field path, reason)`` when it does not parse or its identity
    (name, namespace, labels, annotations: :func:`engine.api.validate.check_identity`) is one the API server
    would refuse, ``None`` for other kinds whose identity is sound.

    Metadata and spec decide whether the object is valid; the status never does (it is ours to
    rewrite): it is read tolerantly into the model (:func:`engine.api.validate.with_status`), the parts
    that do not parse left out with a warning, so one typed object carries metadata, spec and the
    previous status the engine decides from. ``schema_validated``: the object is as an API server stored it
    (it validated it against the CRD's schema): one validator, pydantic, reads it.

    Args:
        obj: The object as read (any value: a document of a file may be no mapping at all).
        schema_validated: Whether an API server stored ``obj`` (and so validated it against the CRD's schema).

    Returns:
        The parsed API model with its status read tolerantly, ``(field path, reason)`` when the object is invalid, or
        None for another kind whose identity is sound.
    """
    try:
        if not isinstance(obj, dict) or kind_info(str(obj.get("apiVersion")), str(obj.get("kind"))) is None:
            check_identity(obj)  # another kind: only its identity is ours to check
            return None
        parsed = parse_object({k: v for k, v in obj.items() if k != "status"}, schema_validated=schema_validated)
    except ManifestInvalid as exc:
        return exc.field_path or "spec", exc.message
    return _read_status(parsed, obj)


def with_written_status(accepted: Accepted[M], written: Manifest) -> Accepted[M]:
    """``accepted`` after a write of this pass returned ``written``: writes go through ``written`` and the
    model carries the status ``written`` holds, read tolerantly as the boundary reads a status (so the
    engine decides from the status as last written). Spec and metadata stay as parsed; the status and
    annotation writes of a pass change neither the spec nor what the engine reads of the metadata.

    Args:
        accepted: The object as the pass accepted it, with its parsed model.
        written: The object a status or annotation write of this pass returned.

    Returns:
        ``accepted`` itself when ``written`` is its object, else ``written`` with the model's status re-read from it.
    """
    if written is accepted.obj:
        return accepted
    return Accepted(written, cast(M, _read_status(accepted.model, written)))


def _read_status(parsed: BaseModel, obj: Manifest) -> BaseModel:
    """``parsed`` carrying ``obj``'s status (:func:`engine.api.validate.with_status`); the parts that do not
    parse are read as absent, with a warning naming them."""
    typed, dropped = with_status(parsed, obj.get("status"))
    if dropped:
        meta = mapping_at(obj, "metadata")
        log.warning(
            "%s %s/%s: status parts that do not parse are read as absent: %s",
            obj.get("kind"),
            meta.get("namespace") or "",
            meta.get("name"),
            ", ".join(dropped),
        )
    return typed


def reject(cluster: Cluster, obj: Manifest, field: str, reason: str) -> None:
    """Write the failure status naming ``field`` (unless it already says so) and record the rejection.

    Args:
        cluster: The cluster the object lives in (its failure status is written there unless its identity is unsound).
        obj: The invalid object as read.
        field: The path of the field that is invalid, e.g. ``spec.modelName``.
        reason: Why the field is invalid.
    """
    meta = mapping_at(obj, "metadata")
    where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    message = f"{field}: {reason}"
    source = cluster.source_of(obj) if isinstance(cluster, LocalCluster) else None
    _record(f"{source + ': ' if source else ''}{obj.get('kind')} {where}: invalid: {message}")
    info = kind_info(str(obj.get("apiVersion")), str(obj.get("kind")))
    if info is None or not info.has_status or identity_errors(obj):
        return  # an object the API server would refuse is never addressed, not even to mark it
    status = failure_status(obj, message)
    if status is None:
        return
    try:
        cluster.patch_status(ObjectRef.of(obj), status)
    except (ClusterError, ValueError, KeyError, TypeError) as exc:  # one object's write never stops the run
        log.warning("cannot mark %s %s invalid: %s", obj.get("kind"), where, exc)


def record_unreadable(cluster: Cluster) -> None:
    """Report every file or document of a local cluster that could not be read (invalid YAML, a duplicate key,
    a document that is no object: each with its file and line), so no flow that reads the folder treats it as
    absent; once per run, however many kinds the flow lists.

    Args:
        cluster: The cluster the flow reads; only a local cluster (a folder) has unreadable files to report.
    """
    if isinstance(cluster, LocalCluster):
        for error in cluster.load_errors:
            _record(f"{error.message}: left out, unreadable")


def _record(line: str) -> None:
    """Add ``line`` to the current run's rejections (once), or log it outside a collecting run."""
    collector = _rejections.get()
    if collector is None:
        log.warning("%s", line)
        return
    with _lock:  # task threads of one run share its collector
        if line not in collector:
            collector.append(line)


def failure_status(obj: Manifest, message: str) -> Manifest | None:
    """The status to merge-patch, or None when the object already carries exactly this failure.

    Args:
        obj: The invalid object as read.
        message: The ``Ready`` condition's message: the field and reason.

    Returns:
        The status patch: a ``Ready=False`` condition with reason ``InvalidSpec`` (and ``status: Failed`` for a kind
        with a status phase); None when the object already carries it.
    """
    message = condition_message(message)  # as the API takes it: one line, bounded
    info = kind_info(str(obj.get("apiVersion")), str(obj.get("kind")))
    has_phase = info is not None and info.has_status_phase()  # a status ``status`` enum: an invalid one is Failed
    current = mapping_at(obj, "status")
    listed = current.get("conditions")
    conditions = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []  # garbage: none
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if (
        ready
        and ready.get("reason") == INVALID_REASON
        and ready.get("message") == message
        and (not has_phase or current.get("status") == "Failed")
    ):
        return None
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition: dict[str, Any] = {
        "type": "Ready",
        "status": "False",
        "reason": INVALID_REASON,
        "message": message,
        "lastTransitionTime": now,
    }
    generation = generation_of(obj)
    if generation is not None:
        condition["observedGeneration"] = generation
    status: Manifest = {"conditions": [c for c in conditions if c.get("type") != "Ready"] + [condition]}
    if has_phase:
        status["status"] = "Failed"
    return status


@contextmanager
def collecting() -> Iterator[list[str]]:
    """Collect the rejections made inside the block (and in the tasks it starts) into the list it yields.

    Yields:
        The list that collects the rejection lines (one line each) recorded while the block runs.
    """
    collector: list[str] = []
    with scoped(_rejections, collector):
        yield collector


def start_run() -> None:
    """Collect the rejections of a new run, in this context and the tasks it starts (the previous run's,
    if any, are dropped with its collector)."""
    _rejections.set([])


def drain_rejections() -> list[str]:
    """The rejections the current run recorded since the last call (one line each), and forget them;
    empty outside a collecting run.

    Returns:
        The rejection lines recorded since the last call, oldest first; empty outside :func:`collecting`.
    """
    collector = _rejections.get()
    if collector is None:
        return []
    with _lock:
        taken = list(collector)
        collector.clear()
    return taken
