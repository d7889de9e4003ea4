"""The CRD schemas the local backend enforces, and how it enforces them.

The local backend applies the same structural-schema semantics as the API server (and the test
server, which calls the same code): unknown fields are pruned, ``default`` values filled in and
invalid writes rejected with ``Invalid`` naming the field. The rules live once in
:mod:`engine.api.schema`; this module only keeps the table of schemas by ``(apiVersion, kind)``:

* Modelplane's kinds (the kind registry, :func:`engine.api.registry.kind_info`): the ``openAPIV3Schema``
  of the CRDs in ``deployments/crds/``, which ``engine.api.crds`` renders from the models (the drift
  test keeps the files equal to the rendering, so they are taken from the renderer and need no file
  access at run time);
* any other CustomResourceDefinition registered with :func:`register_crd` (KServe, Gateway API, ...),
  which also makes its kind known to both backends (:func:`tasks.clients.cluster.resources.register`).

A local manifests folder's own CustomResourceDefinition documents serve their kinds in that folder only
(:func:`served_versions`, kept by :class:`tasks.clients.cluster.local_store.LocalStore`): their schemas are passed in.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from engine.api import schema as rules
from engine.api.crds import structural_schema
from engine.api.views import CustomResourceDefinition
from tasks.clients.cluster.base import Manifest
from tasks.clients.cluster.errors import Invalid
from tasks.clients.cluster.resources import KindTable, ResourceInfo, register

_schemas: KindTable[dict[str, Any]] = KindTable(structural_schema)
"""The schemas of the CRDs registered at run time (:func:`register_crd`); the kind registry's kinds' otherwise."""


def schema_for(api_version: str, kind: str) -> dict[str, Any] | None:
    """The structural schema of a custom kind, or None (built-in kinds have none here).

    Args:
        api_version: The kind's ``apiVersion``.
        kind: The kind's name.

    Returns:
        The registered CRD's schema, else the kind registry's, else None.
    """
    return _schemas.lookup(api_version, kind)


@dataclass(frozen=True)
class ServedVersion:
    """One served version of a CustomResourceDefinition: its REST resource and its structural schema."""

    info: ResourceInfo
    schema: dict[str, Any] | None


def served_versions(crd: Manifest) -> list[ServedVersion]:
    """What a CustomResourceDefinition serves, per served version, without making it known anywhere
    (``pydantic.ValidationError`` when the document is not a CRD).

    Args:
        crd: A CustomResourceDefinition manifest.

    Returns:
        Each served version's REST resource and a copy of its schema (None when it has none).

    Raises:
        ValidationError: The document is not a CustomResourceDefinition (pydantic's, raised while it is parsed).
    """
    spec = CustomResourceDefinition.model_validate(crd).spec
    result = []
    for version in spec.versions:
        if not version.served:
            continue
        info = ResourceInfo(
            spec.group,
            version.name,
            spec.names.kind,
            spec.names.plural,
            namespaced=spec.scope == "Namespaced",
            has_status="status" in version.subresources,
            has_scale="scale" in version.subresources,
        )
        schema = version.schema_.open_api_v3_schema
        result.append(ServedVersion(info, copy.deepcopy(schema) if schema is not None else None))
    return result


def register_crd(crd: Manifest) -> list[ResourceInfo]:
    """Make every served version of a CustomResourceDefinition known: scope, subresources and schema.

    Args:
        crd: A CustomResourceDefinition manifest.

    Returns:
        The REST resource of each served version.

    Raises:
        ValidationError: The document is not a CustomResourceDefinition.
    """
    infos = []
    for served in served_versions(crd):
        info = register(served.info)
        if served.schema is not None:
            _schemas.register(info.api_version, info.kind, served.schema)
        infos.append(info)
    return infos


def normalised(obj: Manifest, schema: dict[str, Any] | None = None) -> Manifest:
    """``obj`` pruned and defaulted in place, as a stored object reads back (no validation); ``schema``
    (a CRD's own, e.g. one a local folder holds) else :func:`schema_for`.

    Args:
        obj: An object; changed in place.
        schema: The kind's structural schema, or None to look it up.

    Returns:
        ``obj``, pruned and defaulted.
    """
    if schema is None:
        schema = schema_for(str(obj.get("apiVersion")), str(obj.get("kind")))
    return rules.normalise(obj, schema)


def check_write(
    new: Manifest, old: Manifest | None, *, status_only: bool = False, schema: dict[str, Any] | None = None
) -> Manifest:
    """Prune, default and validate one write in place; ``Invalid`` naming the field when it is rejected.
    ``schema``: the kind's structural schema when the caller has its own (a local folder's CRD), else
    :func:`schema_for`.

    The message is the API server's: ``VariantAutoscaling.llmd.ai "x" is invalid: spec.modelID:
    Required value``.

    Args:
        new: The object written; pruned and defaulted in place.
        old: The object as stored before the write, or None for a create.
        status_only: Whether the write is to the status subresource (only the status is checked).
        schema: The kind's structural schema, or None to look it up.

    Returns:
        ``new``, pruned and defaulted.

    Raises:
        Invalid: The write is rejected; the message is the API server's and ``field`` names the first field.
    """
    api_version, kind = str(new.get("apiVersion")), str(new.get("kind"))
    if schema is None:
        schema = schema_for(api_version, kind)
    errors = rules.process_write(new, old, schema, status_only=status_only)
    if errors:
        group = api_version.rpartition("/")[0]
        name = (new.get("metadata") or {}).get("name", "")
        text = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
        raise Invalid(f'{kind}.{group} "{name}" is invalid: {text}', field=errors[0].field)
    return new


__all__ = ["ServedVersion", "check_write", "normalised", "register_crd", "schema_for", "served_versions"]
