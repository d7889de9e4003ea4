"""Prefect events for what the flows changed, so lifecycles chain through deployment triggers.

Every event concerns one Kubernetes object, its *subject*. The subject's Prefect resource id is
``modelplane.<family>.<kind>.<namespace>.<name>`` (cluster-scoped objects: ``modelplane.<family>.<kind>.<name>``),
e.g. ``modelplane.aim.template.team-a.llama-8b``, so a person can filter the event feed, and an automation
can match, on a family, a kind, a namespace or one object with a ``*`` wildcard. The event name is the
subject's kind plus what happened to it: ``modelplane.<family>.<kind>.<transition>``, e.g.
``modelplane.aim.cache.available``. The resource carries the labels a trigger passes on as flow
parameters: ``modelplane.namespace`` (absent for cluster-scoped objects), ``modelplane.name``,
``modelplane.kind`` (the Kubernetes kind) and ``modelplane.api-version``.

The lifecycle events (who emits them, which deployment trigger they fire) are tabled in docs/platform.md
("Events and triggers"); the constants below are their names. Emit only for a real change (never in a dry
run) and after the change is stored, so the triggered flow reads the new state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.api.refs import ObjectRef
from engine.api.registry import family_of, group_of, kind_info
from tasks.tracking import in_untracked_run

if TYPE_CHECKING:
    from prefect.events import Event

PREFIX = "modelplane"

BUILTIN_FAMILIES: dict[str, str] = {"apps": "apps", "": "core"}
"""Families of built-in API groups; Modelplane's groups and kinds come from the kind registry."""

# The lifecycle events (docs/platform.md, "Events and triggers").
MODEL_DISCOVERED = "modelplane.aim.model.discovered"
TEMPLATE_AVAILABLE = "modelplane.aim.template.available"
CACHE_REQUESTED = "modelplane.aim.cache.requested"
CACHE_AVAILABLE = "modelplane.aim.cache.available"
SERVICE_ROLLED_OUT = "modelplane.aim.service.rolled-out"
KTHENA_MODEL_CHANGED = "modelplane.kthena.model.changed"
KTHENA_MODEL_ROLLED_OUT = "modelplane.kthena.model.rolled-out"
OPENMODEL_SERVED = "modelplane.llmaz.openmodel.served"
VARIANT_SCALED = "modelplane.llmd.variantautoscaling.scaled"
BINDING_TARGET_SCALED = "modelplane.kthena.binding.scaled"


def event_name(subject: ObjectRef, transition: str) -> str:
    """``modelplane.<family>.<kind>.<transition>``.

    Args:
        subject: The object the event is about.
        transition: What happened to it (``available``, ``rolled-out``, ...).

    Returns:
        The event's name.
    """
    return f"{PREFIX}.{_family(subject)}.{_short_kind(subject)}.{transition}"


def resource_id(subject: ObjectRef) -> str:
    """``modelplane.<family>.<kind>[.<namespace>].<name>``.

    Args:
        subject: The object the resource id names.

    Returns:
        The Prefect resource id of the object.
    """
    namespace = [subject.namespace] if subject.namespace else []
    return ".".join([PREFIX, _family(subject), _short_kind(subject), *namespace, subject.name])


def resource(subject: ObjectRef) -> dict[str, str]:
    """The Prefect resource of ``subject``: id, display name and the labels triggers read.

    Args:
        subject: The object the event is about.

    Returns:
        The resource's labels, its id and name included.
    """
    labels = {
        "prefect.resource.id": resource_id(subject),
        "prefect.resource.name": f"{subject.namespace}/{subject.name}" if subject.namespace else subject.name,
        "modelplane.kind": subject.kind,
        "modelplane.api-version": subject.api_version,
        "modelplane.name": subject.name,
    }
    if subject.namespace:
        labels["modelplane.namespace"] = subject.namespace
    return labels


def _family(subject: ObjectRef) -> str:
    """The API family in the resource id (``aim``, ``kthena``, ``llmd``, ``llmaz``, ...)."""
    group = group_of(subject.api_version)
    return family_of(group) or BUILTIN_FAMILIES.get(group, group.split(".")[0] or "core")


def _short_kind(subject: ObjectRef) -> str:
    """The kind in the resource id (``template``, ``cache``, ``binding``, ...)."""
    info = kind_info(subject.api_version, subject.kind)
    return info.short_kind if info is not None else subject.kind.lower()


def emit_change(
    subject: ObjectRef,
    transition: str,
    payload: Mapping[str, Any] | None = None,
    related: list[ObjectRef] | None = None,
) -> Event | None:
    """Emit ``modelplane.<family>.<kind>.<transition>`` about ``subject``.

    Inside a flow run Prefect relates the event to the run, its flow and deployment.

    Args:
        subject: The object the event is about.
        transition: What happened to it, the event name's last part (``available``, ``failed``, ...).
        payload: Details a trigger or a person reads (status, reason, ...).
        related: Other objects involved (e.g. the template a cache serves), each with the role ``modelplane-object``.

    Returns:
        The event, or None where no Prefect API is configured to receive it, and in an untracked run
        (tasks/tracking.py: a command on a manifests directory has no API to send it to).
    """
    if in_untracked_run():
        return None
    from prefect.events import emit_event

    return emit_event(
        event=event_name(subject, transition),
        resource=resource(subject),
        related=[{**resource(other), "prefect.resource.role": "modelplane-object"} for other in related or []],
        payload=dict(payload or {}),
    )
