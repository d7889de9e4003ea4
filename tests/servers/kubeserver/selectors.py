"""Label and field selectors, parsed once and compiled to predicates over stored objects."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

Predicate = Callable[[dict[str, Any]], bool]


class SelectorError(ValueError):
    """The selector string could not be parsed (answered with 400 BadRequest)."""


_KEY = r"[A-Za-z0-9_./-]+"
_VAL = r"[A-Za-z0-9_./-]*"
_RE_NOT_EXISTS = re.compile(rf"^!\s*({_KEY})$")
_RE_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^)]*)\)$")
_RE_EQ = re.compile(rf"^({_KEY})\s*(==|!=|=)\s*({_VAL})$")
_RE_EXISTS = re.compile(rf"^({_KEY})$")


def _split(selector: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur or parts:
        parts.append("".join(cur).strip())
    return [p for p in parts if p]


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _check_value(key: str, value: str) -> None:
    """A selector value must be a valid label value (at most 63 characters of the label alphabet)."""
    if len(value) > 63:
        raise SelectorError(
            f"unable to parse requirement: values[0][{key}]: Invalid value: {value!r}: "
            "must be no more than 63 characters"
        )
    if not _LABEL_VALUE.match(value):
        raise SelectorError(
            f"unable to parse requirement: values[0][{key}]: Invalid value: {value!r}: a valid label "
            "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )


def _requirement(req: str) -> Callable[[dict[str, str]], bool]:
    if m := _RE_NOT_EXISTS.match(req):
        key = m.group(1)
        return lambda labels: key not in labels
    if m := _RE_SET.match(req):
        key, op, raw = m.groups()
        values = frozenset(v.strip() for v in raw.split(",") if v.strip())
        if not values:  # labels.Parse: an empty set selects nothing meaningful and is rejected
            raise SelectorError("unable to parse requirement: for 'in', 'notin' operators, values set can't be empty")
        for value in sorted(values):
            _check_value(key, value)
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _RE_EQ.match(req):
        key, op, value = m.groups()
        _check_value(key, value)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _RE_EXISTS.match(req):
        key = m.group(1)
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {req!r}")


@lru_cache(maxsize=256)
def label_selector(selector: str) -> Predicate | None:
    """Compile a ``labelSelector`` query (=, ==, !=, in, notin, exists, !exists, comma = AND)."""
    reqs = [_requirement(r) for r in _split(selector)]
    if not reqs:
        return None

    def pred(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return pred


def _lookup(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _as_field_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@lru_cache(maxsize=256)
def field_selector(selector: str, supported: frozenset[str]) -> Predicate | None:
    """Compile a ``fieldSelector`` query over ``metadata.name``, ``metadata.namespace`` and ``supported``."""
    reqs: list[tuple[str, bool, str]] = []
    for req in _split(selector):
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)$", req)
        if not m:
            raise SelectorError(f"invalid selector: {req!r}; can't understand {req!r}")
        key, op, value = m.groups()
        if key not in supported and key not in ("metadata.name", "metadata.namespace"):
            raise SelectorError(f"field label not supported: {key}")
        reqs.append((key, op == "!=", value.strip()))
    if not reqs:
        return None

    def pred(obj: dict[str, Any]) -> bool:
        for key, negate, value in reqs:
            actual = _as_field_string(_lookup(obj, key))
            if (actual == value) == negate:
                return False
        return True

    return pred


def selector_to_string(selector: dict[str, Any] | None) -> str:
    """Render a ``LabelSelector`` (matchLabels / matchExpressions) as a query string."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a structured ``LabelSelector`` matches ``labels``."""
    text = selector_to_string(selector)
    try:
        pred = label_selector(text) if text else None
    except SelectorError:
        return False  # an invalid selector selects nothing
    return True if pred is None else pred({"metadata": {"labels": labels}})
