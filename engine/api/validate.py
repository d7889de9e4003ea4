"""Validation of manifests against the API models, with errors that name the offending field.

:func:`parse_object` turns one manifest into its pydantic model or raises :class:`ManifestInvalid`
carrying the object's kind, name, namespace and the path of the first bad field in the form
``spec.variantProfile.maxBatchSize`` or ``spec.backends[0].workers``.

:func:`load_documents` validates many manifests at once (a directory, a ``kubectl get -o yaml`` dump)
and keeps every valid one even when a neighbour is invalid. Kinds that are not Modelplane's
(ConfigMap, Deployment, ...) are not ours to validate: they pass through as raw dicts, which
:attr:`LoadReport.resources` and :attr:`LoadReport.passthrough` tell apart.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from engine.api import schema as schema_mod
from engine.api.crds import structural_schema
from engine.api.identity import identity_errors
from engine.api.registry import KindInfo, kind_info, kinds
from engine.api.schema_check import Check, compile_check

__all__ = [
    "LoadReport",
    "ManifestInvalid",
    "check_identity",
    "format_path",
    "is_modelplane_kind",
    "load_documents",
    "parse_object",
    "prepare_spec_checks",
    "with_status",
]

_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def format_path(parts: Sequence[str | int]) -> str:
    """A field path as people write it: ``spec.backends[0].workers``; odd keys as ``labels["a.b/c"]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _SIMPLE_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out


class ManifestInvalid(ValueError):
    """A manifest that does not satisfy its kind's schema.

    ``field_path`` and ``message`` describe the first error; ``errors`` lists every error as
    ``(field_path, message)`` pairs.
    """

    def __init__(
        self,
        kind: str | None,
        name: str | None,
        namespace: str | None,
        field_path: str,
        message: str,
        errors: list[tuple[str, str]] | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.field_path = field_path
        self.message = message
        self.errors = errors or [(field_path, message)]
        where = f"{namespace}/{name}" if namespace else (name or "<unnamed>")
        super().__init__(f"{kind or '<no kind>'} {where}: {field_path}: {message}")


def _data_path(manifest: Any, loc: Sequence[str | int]) -> list[str | int]:
    """The pydantic error location reduced to the fields of the manifest.

    pydantic adds the members it tried (``int``, ``str``, ``function-after[...]``) to the location of
    a union or validator error; those are not part of the document and are dropped by walking the
    document along the location.
    """
    node: Any = manifest
    path: list[str | int] = []
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str):
            path.append(part)
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int):
            path.append(part)
            node = node[part] if 0 <= part < len(node) else None
        # else: a union member or validator tag under a scalar: not a field of the document
    return path


def _identity(manifest: Any) -> tuple[str | None, str | None, str | None]:
    if not isinstance(manifest, dict):
        return None, None, None
    meta = manifest.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    kind = manifest.get("kind") if isinstance(manifest.get("kind"), str) else None
    return kind, meta.get("name"), meta.get("namespace")


def is_modelplane_kind(manifest: dict[str, Any]) -> bool:
    """Whether the manifest's apiVersion/kind is one of the registry's custom resources."""
    return kind_info(str(manifest.get("apiVersion")), str(manifest.get("kind"))) is not None


def check_identity(manifest: Any) -> None:
    """Raise :class:`ManifestInvalid` naming the field when ``manifest``'s identity (apiVersion, kind, metadata:
    name, namespace, labels, annotations) is one the API server would refuse (:mod:`engine.api.identity`).

    The one identity check of every object that enters: ``validate-manifests`` (:func:`load_documents`), the
    flows' boundary reader (:func:`parse_object`, and ``tasks/boundary.py`` for the other kinds)."""
    errors = identity_errors(manifest)
    if errors:
        kind, name, namespace = _identity(manifest)
        raise ManifestInvalid(kind, _text(name), _text(namespace), errors[0][0], errors[0][1], errors)


def _text(value: Any) -> str | None:
    """A metadata value as text for a message (a name that is not a string is still shown)."""
    return None if value is None else str(value)


def parse_object(manifest: dict[str, Any], *, schema_validated: bool = False) -> BaseModel:
    """The manifest as its pydantic model; raises :class:`ManifestInvalid` naming the bad field.

    Only Modelplane kinds are accepted; anything else raises ``ManifestInvalid`` on ``kind``. The identity
    is checked first (:func:`check_identity`): an object the API server would refuse is never parsed.
    ``schema_validated``: an API server has validated the object against its CRD's schema (it is the object
    as the server stored it), so only pydantic reads it; otherwise (a file, a snapshot) the schema check
    runs too, as the API server would.
    """
    check_identity(manifest)
    info = kind_info(manifest["apiVersion"], manifest["kind"])
    if info is None:
        kind, name, namespace = _identity(manifest)
        raise ManifestInvalid(
            kind, name, namespace, "kind", f"{manifest['apiVersion']}/{manifest['kind']} is not a Modelplane kind"
        )
    return _parse_kind(info, manifest, schema_validated)


def _message(error: ErrorDetails) -> str:
    """A validation error's message; a model's own check (a ``ValueError`` it raised) in its own words, without
    pydantic's ``Value error, `` before them."""
    raised = (error.get("ctx") or {}).get("error")
    return str(raised) if error["type"] == "value_error" and isinstance(raised, ValueError) else error["msg"]


def _parse_kind(info: KindInfo, manifest: dict[str, Any], schema_validated: bool) -> BaseModel:
    """:func:`parse_object` of a manifest whose identity is checked and whose kind is ``info``."""
    try:
        parsed: BaseModel = info.model().model_validate(manifest)
    except ValidationError as exc:
        errors = [(format_path(_data_path(manifest, err["loc"])), _message(err)) for err in exc.errors()]
        raise ManifestInvalid(*_identity(manifest), *errors[0], errors) from None
    schema_errors = [] if schema_validated else _crd_schema_errors(info, manifest)
    if schema_errors:  # what the API server would refuse; pydantic alone would coerce ("no" -> False, "1" -> 1)
        errors = [(e.field, e.detail) for e in schema_errors]
        raise ManifestInvalid(*_identity(manifest), *errors[0], errors)
    return parsed


STATUS_REPAIRS = 20
"""How many invalid parts of a status :func:`with_status` drops before it reads the status as empty."""


@functools.cache
def _status_adapter(model: type[BaseModel]) -> TypeAdapter[Any] | None:
    """The validator of a kind's ``status`` field (``None`` for kinds without one), built once per kind."""
    field = model.model_fields.get("status")
    return TypeAdapter(field.annotation) if field is not None and field.annotation is not None else None


def _drop(status: dict[str, Any], loc: Sequence[str | int]) -> str:
    """Remove the part of ``status`` an error points at: one condition of the list, else the top-level
    field; returns its path."""
    key = loc[0] if loc else None
    if key == "conditions" and len(loc) > 1 and isinstance(loc[1], int) and isinstance(status.get(key), list):
        status[key] = [c for i, c in enumerate(status[key]) if i != loc[1]]
        return f"status.conditions[{loc[1]}]"
    if isinstance(key, str) and key in status:
        del status[key]
        return f"status.{key}"
    status.clear()
    return "status"


def with_status(parsed: BaseModel, status: Any) -> tuple[BaseModel, list[str]]:
    """``parsed`` (a kind parsed without its status) carrying ``status`` read tolerantly, and the paths of
    the parts left out.

    The status is ours to rewrite, so it never rejects an object: each part that does not parse (one
    condition, or a top-level field) is left out and the rest is read; a status that is not a mapping
    is read as none. The engine reads the previous status (conditions, ``observedGeneration``, phase)
    from the typed object this returns.
    """
    adapter = _status_adapter(type(parsed))
    if adapter is None or status is None:
        return parsed, []
    if not isinstance(status, dict):
        return parsed, ["status"]
    data = dict(status)
    dropped: list[str] = []
    for _ in range(STATUS_REPAIRS):
        try:
            value = adapter.validate_python(data)
        except ValidationError as exc:
            dropped.append(_drop(data, exc.errors()[0]["loc"]))
            continue
        return parsed.model_copy(update={"status": value}), dropped
    return parsed, [*dropped, "status"]


def _crd_schema_errors(info: KindInfo, manifest: dict[str, Any]) -> list[schema_mod.FieldError]:
    """Errors of the manifest's ``spec`` against its CRD schema (types, enums, ranges, patterns, required)."""
    if "spec" not in manifest:
        return []
    spec_schema, check = _spec_check(info)
    if not isinstance(spec_schema, dict) or check(manifest["spec"]):
        return []
    return schema_mod.validate(manifest["spec"], spec_schema, "spec")


@functools.cache
def _spec_check(info: KindInfo) -> tuple[Any, Check]:
    """The kind's spec schema and its check compiled once (:mod:`engine.api.schema_check`): a valid spec, the
    common case, is told apart without building any error text."""
    spec_schema = (structural_schema(info).get("properties") or {}).get("spec")
    return spec_schema, compile_check(spec_schema)


def prepare_spec_checks() -> None:
    """Compile every kind's spec check now (a fifth of a second): a process that forks workers to validate builds
    them once for all of its workers rather than once in each."""
    for info in kinds():
        _spec_check(info)


@dataclass
class LoadReport:
    """The outcome of :func:`load_documents`.

    ``valid`` holds ``(source, object)`` pairs where the object is a pydantic model for Modelplane
    kinds and the raw dict for any other kind; ``invalid`` holds ``(source, ManifestInvalid)``.
    """

    valid: list[tuple[str, BaseModel | dict[str, Any]]] = field(default_factory=list)
    invalid: list[tuple[str, ManifestInvalid]] = field(default_factory=list)

    @property
    def resources(self) -> list[tuple[str, BaseModel]]:
        """The valid Modelplane custom resources, as models."""
        return [(source, obj) for source, obj in self.valid if isinstance(obj, BaseModel)]

    @property
    def passthrough(self) -> list[tuple[str, dict[str, Any]]]:
        """The documents of other kinds, unvalidated, as raw dicts."""
        return [(source, obj) for source, obj in self.valid if isinstance(obj, dict)]

    @property
    def ok(self) -> bool:
        """True when no document was invalid."""
        return not self.invalid


def load_documents(docs: Iterable[tuple[str, Any]]) -> LoadReport:
    """Validate ``(source label, manifest)`` pairs; one invalid document never hides a valid one.

    Empty documents (``None``, as YAML yields for a trailing ``---``) are skipped. A document that is
    not a mapping or whose identity the API server would refuse (:func:`check_identity`) is invalid. Non-Modelplane kinds pass through unchanged.
    """
    report = LoadReport()
    for source, manifest in docs:
        if manifest is None:
            continue
        if not isinstance(manifest, dict):
            report.invalid.append((source, ManifestInvalid(None, None, None, "", "a manifest must be a mapping")))
            continue
        try:
            check_identity(manifest)
            info = kind_info(manifest["apiVersion"], manifest["kind"])
            report.valid.append((source, manifest if info is None else _parse_kind(info, manifest, False)))
        except ManifestInvalid as exc:
            report.invalid.append((source, exc))
    return report
