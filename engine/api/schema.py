"""Structural OpenAPI v3 schema handling for custom resources: pruning, defaulting and validation.

Implements the subset of the apiextensions-apiserver behaviour that controllers notice: unknown fields
are pruned, ``default`` values are filled in, and violations are reported as field errors whose text
follows the real API server's (kube-openapi) wording, e.g.
``spec.modelID: Invalid value: "": spec.modelID in body should be at least 1 chars long``.

This is the one implementation of those semantics: the local manifests backend
(:mod:`tasks.clients.cluster.local`, through :mod:`tasks.clients.cluster.schema`) and the Kubernetes API test server
(``tests/servers/kubeserver``) both call :func:`process_write`, so "the same semantics on a laptop and on a
cluster" holds by construction. Pure: the schemas are passed in (from the CRDs).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

_ROOT_KEEP = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True)
class FieldError:
    """One validation failure, shaped like a ``StatusCause``."""

    field: str
    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, FieldValueTypeInvalid, ...
    detail: str  # the text after "<field>: ", e.g. 'Invalid value: "": ... at least 1 chars long'

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"


def _fmt(value: Any) -> str:
    """Render a value as the Go field errors do (strings quoted, numbers bare)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _num(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _matches_type(value: Any, typ: str) -> bool:
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    return True


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------------------------- prune


def prune(
    obj: Any, schema: dict[str, Any] | None, root: bool = False, path: str = "", dropped: list[str] | None = None
) -> Any:
    """Drop fields the schema does not declare, in place where possible; returns the pruned value.

    The root and ``x-kubernetes-embedded-resource`` objects keep apiVersion, kind and metadata. The
    paths of the dropped fields are appended to ``dropped`` (what ``fieldValidation`` reports).
    """
    if dropped is None:
        dropped = []
    if schema is None or not isinstance(schema, dict):
        return obj
    root = root or bool(schema.get("x-kubernetes-embedded-resource"))
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return obj
    if isinstance(obj, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        if props is not None:
            for key in list(obj):
                if root and key in _ROOT_KEEP:
                    continue
                if key in props:
                    obj[key] = prune(obj[key], props[key], path=_join(path, key), dropped=dropped)
                elif isinstance(addl, dict):
                    obj[key] = prune(obj[key], addl, path=_join(path, key), dropped=dropped)
                elif addl is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                    continue
                else:
                    dropped.append(_join(path, key))
                    del obj[key]
        elif isinstance(addl, dict):
            for key in list(obj):
                obj[key] = prune(obj[key], addl, path=_join(path, key), dropped=dropped)
        elif addl is True or schema.get("x-kubernetes-preserve-unknown-fields"):
            pass
        elif schema.get("type") == "object" and not root:
            # structural: an object without properties/additionalProperties keeps nothing
            dropped.extend(_join(path, key) for key in obj)
            obj.clear()
    elif isinstance(obj, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(obj):
                obj[i] = prune(item, items, path=f"{path}[{i}]", dropped=dropped)
    return obj


# ------------------------------------------------------------------------------------------- default


def apply_defaults(obj: Any, schema: dict[str, Any] | None) -> Any:
    """Fill in ``default`` values for missing (or null, when not nullable) properties, recursively."""
    if schema is None or not isinstance(schema, dict):
        return obj
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if not isinstance(sub, dict):
                continue
            if "default" in sub and (key not in obj or (obj[key] is None and not sub.get("nullable"))):
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                apply_defaults(obj[key], sub)
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for key in obj:
                if key not in props:
                    apply_defaults(obj[key], addl)
    elif isinstance(obj, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in obj:
                apply_defaults(item, items)
    return obj


# ------------------------------------------------------------------------------------------ validate


def validate(obj: Any, schema: dict[str, Any] | None, path: str = "") -> list[FieldError]:
    """Validate ``obj`` against a structural schema; returns field errors (empty when valid)."""
    errors: list[FieldError] = []
    if schema is not None:
        _validate(obj, schema, path, errors, root=True)
    return errors


def _validate(value: Any, schema: dict[str, Any], path: str, errors: list[FieldError], root: bool = False) -> None:
    if not isinstance(schema, dict):
        return
    shown = path or "<root>"
    if value is None:
        if schema.get("nullable") or not schema.get("type") and not schema.get("x-kubernetes-int-or-string"):
            return
        typ = "string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
        errors.append(
            FieldError(
                path, "FieldValueTypeInvalid", f'Invalid value: "null": {shown} in body must be of type {typ}: "null"'
            )
        )
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _matches_type(value, "integer")):
            errors.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f'Invalid value: "{_type_name(value)}": {shown} in body must be of type integer,string: "{_type_name(value)}"',
                )
            )
            return
    typ = schema.get("type")
    if typ and not _matches_type(value, typ):
        errors.append(
            FieldError(
                path,
                "FieldValueTypeInvalid",
                f'Invalid value: "{_type_name(value)}": {shown} in body must be of type {typ}: "{_type_name(value)}"',
            )
        )
        return

    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_fmt(v) for v in schema["enum"])
        errors.append(
            FieldError(
                path, "FieldValueNotSupported", f"Unsupported value: {_fmt(value)}: supported values: {supported}"
            )
        )

    if isinstance(value, str):
        _validate_string(value, schema, path, shown, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(value, schema, path, shown, errors)
    elif isinstance(value, list):
        _validate_size(len(value), schema.get("minItems"), schema.get("maxItems"), "items", path, shown, errors)
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _validate(item, items, f"{path}[{i}]", errors)
        _validate_list_type(value, schema, path, errors)
    elif isinstance(value, dict):
        _validate_size(
            len(value), schema.get("minProperties"), schema.get("maxProperties"), "properties", path, shown, errors
        )
        for req in schema.get("required") or ():
            if req not in value:
                errors.append(FieldError(_join(path, req), "FieldValueRequired", "Required value"))
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for key, sub in value.items():
            if root and key in _ROOT_KEEP and key not in props:
                continue
            if key in props:
                _validate(sub, props[key], _join(path, key), errors)
            elif isinstance(addl, dict):
                _validate(sub, addl, _join(path, key), errors)
            elif addl is False:
                errors.append(
                    FieldError(
                        _join(path, key),
                        "FieldValueForbidden",
                        f"Forbidden: {_join(path, key)} in body is a forbidden property",
                    )
                )

    for sub in schema.get("allOf") or ():
        _validate(value, sub, path, errors)
    if schema.get("anyOf"):
        if not any(not validate_quiet(value, sub, path) for sub in schema["anyOf"]):
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f'Invalid value: "{_type_name(value)}": {shown} in body must match at least one schema in anyOf',
                )
            )
    if schema.get("oneOf"):
        matches = sum(1 for sub in schema["oneOf"] if not validate_quiet(value, sub, path))
        if matches != 1:
            found = "Found none valid" if matches == 0 else f"Found {matches} valid alternatives"
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f'Invalid value: "{_type_name(value)}": {shown} in body must validate one and only one schema (oneOf). {found}',
                )
            )
    if isinstance(schema.get("not"), dict) and not validate_quiet(value, schema["not"], path):
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"Invalid value: {_fmt(value)}: {shown} in body should not be valid against schema",
            )
        )


def _validate_list_type(value: list[Any], schema: dict[str, Any], path: str, errors: list[FieldError]) -> None:
    """``x-kubernetes-list-type`` set/map: items (or their map keys) must be unique."""
    kind = schema.get("x-kubernetes-list-type")
    if kind not in ("set", "map"):
        return
    seen: set[str] = set()
    keys = schema.get("x-kubernetes-list-map-keys") or []
    for i, item in enumerate(value):
        if kind == "set":
            ident = json.dumps(item, sort_keys=True)
            shown = _fmt(item)
        else:
            if not isinstance(item, dict):
                continue
            picked = {k: item.get(k) for k in keys}
            ident = json.dumps(picked, sort_keys=True)
            shown = (
                "map[string]interface {}{" + ", ".join(f"{json.dumps(k)}:{_fmt(v)}" for k, v in picked.items()) + "}"
            )
        if ident in seen:
            errors.append(FieldError(f"{path}[{i}]", "FieldValueDuplicate", f"Duplicate value: {shown}"))
        seen.add(ident)


def validate_quiet(value: Any, schema: dict[str, Any], path: str) -> list[FieldError]:
    """Validate a value against a sub-schema without the root-level metadata exemptions."""
    errors: list[FieldError] = []
    _validate(value, schema, path, errors)
    return errors


def _validate_size(
    size: int, low: int | None, high: int | None, noun: str, path: str, shown: str, errors: list[FieldError]
) -> None:
    """``minItems``/``maxItems`` of a list (``noun`` "items") or ``minProperties``/``maxProperties`` of an object
    ("properties"), in apimachinery's words: too many items is ``FieldValueTooMany``, every other miss an invalid
    value."""
    if low is not None and size < low:
        errors.append(
            FieldError(
                path, "FieldValueInvalid", f"Invalid value: {size}: {shown} in body should have at least {low} {noun}"
            )
        )
    if high is not None and size > high:
        if noun == "items":
            errors.append(FieldError(path, "FieldValueTooMany", f"Too many: {size}: must have at most {high} items"))
        else:
            message = f"Invalid value: {size}: {shown} in body should have at most {high} {noun}"
            errors.append(FieldError(path, "FieldValueInvalid", message))


def _validate_string(value: str, schema: dict[str, Any], path: str, shown: str, errors: list[FieldError]) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"Invalid value: {_fmt(value)}: {shown} in body should be at least {schema['minLength']} chars long",
            )
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(
            FieldError(path, "FieldValueTooLong", f"Too long: may not be more than {schema['maxLength']} bytes")
        )
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"Invalid value: {_fmt(value)}: {shown} in body should match '{schema['pattern']}'",
            )
        )
    fmt = schema.get("format")
    if fmt == "date-time" and not _is_datetime(value):
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"Invalid value: {_fmt(value)}: {shown} in body must be of type date-time: {_fmt(value)}",
            )
        )


def _is_datetime(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return "T" in value.upper()


def _validate_number(value: float, schema: dict[str, Any], path: str, shown: str, errors: list[FieldError]) -> None:
    if "minimum" in schema:
        lo = schema["minimum"]
        if schema.get("exclusiveMinimum") is True:
            if value <= lo:
                errors.append(
                    FieldError(
                        path,
                        "FieldValueInvalid",
                        f"Invalid value: {_fmt(value)}: {shown} in body should be greater than {_num(lo)}",
                    )
                )
        elif value < lo:
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_fmt(value)}: {shown} in body should be greater than or equal to {_num(lo)}",
                )
            )
    if "maximum" in schema:
        hi = schema["maximum"]
        if schema.get("exclusiveMaximum") is True:
            if value >= hi:
                errors.append(
                    FieldError(
                        path,
                        "FieldValueInvalid",
                        f"Invalid value: {_fmt(value)}: {shown} in body should be less than {_num(hi)}",
                    )
                )
        elif value > hi:
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"Invalid value: {_fmt(value)}: {shown} in body should be less than or equal to {_num(hi)}",
                )
            )
    if "multipleOf" in schema and schema["multipleOf"] and (value / schema["multipleOf"]) % 1:
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"Invalid value: {_fmt(value)}: {shown} in body should be a multiple of {_num(schema['multipleOf'])}",
            )
        )


def process(obj: dict[str, Any], schema: dict[str, Any] | None, dropped: list[str] | None = None) -> list[FieldError]:
    """Prune, default and validate a custom resource in place, as the API server does on every write.

    The paths of pruned (unknown) fields are appended to ``dropped`` when given.
    """
    if schema is None:
        return []
    prune(obj, schema, root=True, dropped=dropped)
    apply_defaults(obj, schema)
    return validate(obj, schema)


def normalise(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Prune and default ``obj`` in place without validating (what a stored object reads back as)."""
    if schema is not None:
        prune(obj, schema, root=True)
        apply_defaults(obj, schema)
    return obj


def process_write(
    new: dict[str, Any],
    old: dict[str, Any] | None,
    schema: dict[str, Any] | None,
    *,
    status_only: bool = False,
    dropped: list[str] | None = None,
) -> list[FieldError]:
    """Prune, default and validate one write of a custom resource, as the apiextensions server does.

    * create (``old`` is None): the whole object must be valid;
    * update of the main resource: the whole object, but an error the stored object already had on
      the same field (``old`` was stored before a stricter schema, or hand-written on disk) does not
      block the write: validation ratcheting, as Kubernetes 1.30 does for unchanged fields;
    * ``status_only`` (the ``/status`` subresource): only ``status`` is checked, so a controller can
      still report a condition on an object whose spec is invalid.
    """
    if schema is None:
        return []
    if status_only:
        status_schema = (schema.get("properties") or {}).get("status")
        if "status" not in new or not isinstance(status_schema, dict):
            return []
        new["status"] = prune(new["status"], status_schema, path="status", dropped=dropped)
        apply_defaults(new["status"], status_schema)
        errors: list[FieldError] = []
        _validate(new["status"], status_schema, "status", errors)
        return errors
    errors = process(new, schema, dropped)
    if old is None or not errors:
        return errors
    before = {(e.field, e.detail) for e in validate(normalise(copy.deepcopy(old), schema), schema)}
    return [e for e in errors if (e.field, e.detail) not in before]
