"""A structural schema compiled once into a yes/no validity check: :func:`engine.api.schema.validate`'s fast twin.

:func:`engine.api.schema.validate` walks the schema's keywords for every value of every object and builds the API
server's error texts. Most objects are valid, and for them no text is needed: :func:`compile_check` turns a schema
into nested closures, once per schema, that answer only whether ``validate`` would find no error; the
keywords a schema does not use cost nothing. Callers validate an object in full only when the check says no
(``validate-manifests`` on a large folder spends a third of its time in schema validation otherwise).

Exactness is the contract: ``compile_check(schema)(value)`` is True exactly when ``validate(value, schema)`` is
empty (tests/api/test_schema_check.py holds both to it on generated objects). Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.api.schema import _ROOT_KEEP, _is_datetime, _matches_type, _regex, _validate_list_type

Check = Callable[[Any], bool]


def compile_check(schema: dict[str, Any] | None) -> Check:
    """The validity check of ``schema`` at the root of an object (as :func:`engine.api.schema.validate` is
    called: ``apiVersion``, ``kind`` and ``metadata`` are let through there when the schema does not list them)."""
    if schema is None:
        return _valid
    return _compile(schema, root=True)


def _valid(_: Any) -> bool:
    return True


def _compile(schema: Any, root: bool = False) -> Check:
    """One schema node's check: the ``None`` rule, the type, then every keyword's own check."""
    if not isinstance(schema, dict):
        return _valid
    typ = schema.get("type")
    int_or_string = bool(schema.get("x-kubernetes-int-or-string"))
    null_allowed = bool(schema.get("nullable") or not typ and not int_or_string)
    checks = _keyword_checks(schema, root, typ if isinstance(typ, str) else None)
    exact = _EXACT_TYPES.get(typ) if isinstance(typ, str) else None

    def check(value: Any) -> bool:
        if value is None:
            return null_allowed
        if int_or_string and not (isinstance(value, str) or _matches_type(value, "integer")):
            return False
        if typ and type(value) is not exact and not _matches_type(value, typ):
            return False
        for one in checks:
            if not one(value):
                return False
        return True

    return check


_EXACT_TYPES: dict[str, type] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
}
"""A value of exactly this Python type is of that schema type (``_matches_type`` need not be asked)."""


def _keyword_checks(schema: dict[str, Any], root: bool, typ: str | None) -> list[Check]:
    """The checks of the keywords ``schema`` uses, after its type ``typ`` matched (a keyword that applies to
    one type only is checked without asking the type again when ``typ`` is that type)."""
    checks: list[Check] = []
    if "enum" in schema:
        allowed = schema["enum"]
        checks.append(lambda value: value in allowed)
    string = _string_check(schema)
    if string is not None:
        checks.append(string if typ == "string" else lambda value: not isinstance(value, str) or string(value))
    number = _number_check(schema)
    if number is not None:
        checks.append(
            number
            if typ in ("integer", "number")
            else lambda value: not (isinstance(value, (int, float)) and not isinstance(value, bool)) or number(value)
        )
    array = _array_check(schema)
    if array is not None:
        checks.append(array if typ == "array" else lambda value: not isinstance(value, list) or array(value))
    mapping = _object_check(schema, root)
    if mapping is not None:
        checks.append(mapping if typ == "object" else lambda value: not isinstance(value, dict) or mapping(value))
    checks += _combinator_checks(schema)
    return checks


def _string_check(schema: dict[str, Any]) -> Check | None:
    low, high, pattern = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern")
    date_time = schema.get("format") == "date-time"
    if low is None and high is None and pattern is None and not date_time:
        return None
    regex = _regex(pattern) if pattern is not None else None

    def check(value: str) -> bool:
        return (
            (low is None or len(value) >= low)
            and (high is None or len(value) <= high)
            and (regex is None or regex.search(value) is not None)
            and (not date_time or _is_datetime(value))
        )

    return check


def _number_check(schema: dict[str, Any]) -> Check | None:
    low, high, step = schema.get("minimum"), schema.get("maximum"), schema.get("multipleOf")
    above = schema.get("exclusiveMinimum") is True
    below = schema.get("exclusiveMaximum") is True
    if low is None and high is None and not step:
        return None

    def check(value: float) -> bool:
        if low is not None and (value <= low if above else value < low):
            return False
        if high is not None and (value >= high if below else value > high):
            return False
        return not (step and (value / step) % 1)

    return check


def _array_check(schema: dict[str, Any]) -> Check | None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    items = _compile(schema["items"]) if isinstance(schema.get("items"), dict) else None
    unique = schema.get("x-kubernetes-list-type") in ("set", "map")
    if low is None and high is None and items is None and not unique:
        return None

    def check(value: list[Any]) -> bool:
        if (low is not None and len(value) < low) or (high is not None and len(value) > high):
            return False
        if items is not None and not all(items(item) for item in value):
            return False
        if unique:
            errors: list[Any] = []
            _validate_list_type(value, schema, "", errors)
            return not errors
        return True

    return check


def _object_check(schema: dict[str, Any], root: bool) -> Check | None:
    low, high = schema.get("minProperties"), schema.get("maxProperties")
    required = tuple(schema.get("required") or ())
    properties = {key: _compile(sub) for key, sub in (schema.get("properties") or {}).items()}
    extra = schema.get("additionalProperties")
    other = _compile(extra) if isinstance(extra, dict) else None
    closed = extra is False
    passed = frozenset(key for key in _ROOT_KEEP if key not in properties) if root else frozenset()

    def check(value: dict[Any, Any]) -> bool:
        if (low is not None and len(value) < low) or (high is not None and len(value) > high):
            return False
        for key in required:
            if key not in value:
                return False
        for key, sub in value.items():
            if key in passed:
                continue
            known = properties.get(key)
            if known is not None:
                if not known(sub):
                    return False
            elif other is not None:
                if not other(sub):
                    return False
            elif closed:
                return False
        return True

    return check


def _combinator_checks(schema: dict[str, Any]) -> list[Check]:
    """``allOf``, ``anyOf``, ``oneOf`` and ``not``, each alternative compiled."""
    checks: list[Check] = []
    for sub in schema.get("allOf") or ():
        checks.append(_compile(sub))
    if schema.get("anyOf"):
        alternatives = [_compile(sub) for sub in schema["anyOf"]]
        checks.append(lambda value: any(one(value) for one in alternatives))
    if schema.get("oneOf"):
        exclusive = [_compile(sub) for sub in schema["oneOf"]]
        checks.append(lambda value: sum(1 for one in exclusive if one(value)) == 1)
    if isinstance(schema.get("not"), dict):
        negated = _compile(schema["not"])
        checks.append(lambda value: not negated(value))
    return checks
