"""Manifest helpers shared by the backends: merge-patch, label selectors, timestamps and Events.

These implement the API server's own rules (RFC 7386 JSON merge-patch, the label-selector grammar,
the core/v1 Event shape) once, so the local backend behaves like the real server and both backends
produce identical Event objects.
"""

from __future__ import annotations

import base64
import copy
import decimal
import enum
import math
import re
import secrets
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from tasks.clients.cluster.base import Manifest
from tasks.clients.cluster.errors import Invalid

EVENT_SOURCE = "modelplane"
"""``source.component`` / ``reportingComponent`` of every Event Modelplane posts."""

_SYSTEM_FIELDS = ("apiVersion", "kind", "metadata", "status")


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge-patch; returns a new value and never mutates the inputs.

    Objects merge recursively, ``None`` deletes a key, anything else (lists included) replaces.

    Args:
        target: The value patched.
        patch: The merge patch.

    Returns:
        The patched value, a new object.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_shape(value: Any, path: str = "") -> Any:
    """``value`` as the JSON the API server would store: what both backends accept in a write.

    Tuples become lists, dates/datetimes ISO-8601 strings, UUIDs/Decimals strings, Enums their
    value (the conversions the ``kubernetes`` client applies on the wire). Anything else that JSON
    cannot carry (objects, NaN/infinity, non-string keys) is ``Invalid`` naming the field, so a
    bad write fails the same way on both backends instead of crashing the YAML writer.

    Args:
        value: A value to be written.
        path: The field path of ``value``, named in an error (empty at the top).

    Returns:
        The value converted to JSON types.

    Raises:
        Invalid: A value JSON cannot carry (NaN or infinity, an arbitrary object, a non-string key); the message
            names the field.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid(f"{path or 'value'}: {value} is not a JSON number", field=path or None)
        return value
    if isinstance(value, dict):
        return {
            _json_key(key, path): json_shape(item, f"{path}.{key}" if path else str(key)) for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [json_shape(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, enum.Enum):
        return json_shape(value.value, path)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    raise Invalid(f"{path or 'value'}: a {type(value).__name__} cannot be stored in a manifest", field=path or None)


def _json_key(key: Any, path: str) -> str:
    if not isinstance(key, str):
        raise Invalid(f"{path or 'object'}: key {key!r} is not a string", field=path or None)
    return key


_SCALABLE_APPS = ("Deployment", "StatefulSet", "ReplicaSet")
_JOB_DEFAULTS = {
    "parallelism": 1,
    "completions": 1,
    "backoffLimit": 6,
    "completionMode": "NonIndexed",
    "suspend": False,
}


def apply_builtin_defaults(obj: Manifest) -> Manifest:
    """Mutate a built-in object the way the API server's defaulting does on write, and return it.

    Only what flows read back: ``replicas: 1`` for apps workloads, Job completion defaults, Secret
    ``stringData`` folded into base64 ``data`` (and ``type: Opaque``), and the Namespace's
    ``kubernetes.io/metadata.name`` label. Custom resources are left alone.

    Args:
        obj: A built-in object about to be stored; changed in place.

    Returns:
        ``obj``, defaulted.
    """
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version == "apps/v1" and kind in _SCALABLE_APPS:
        obj.setdefault("spec", {}).setdefault("replicas", 1)
    elif api_version == "batch/v1" and kind == "Job":
        spec = obj.setdefault("spec", {})
        for key, value in _JOB_DEFAULTS.items():
            spec.setdefault(key, value)
    elif api_version == "v1" and kind == "Secret":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            existing = obj.get("data")
            data = existing if isinstance(existing, dict) else {}
            data.update({k: base64.b64encode(str(v).encode()).decode() for k, v in string_data.items()})
            obj["data"] = data
    elif api_version == "v1" and kind == "Namespace":
        labels = obj.setdefault("metadata", {}).setdefault("labels", {})
        labels.setdefault("kubernetes.io/metadata.name", obj["metadata"].get("name", ""))
    return obj


def spec_part(obj: Manifest) -> Manifest:
    """Everything but ``apiVersion``/``kind``/``metadata``/``status``: what ``generation`` tracks.

    Args:
        obj: An object.

    Returns:
        Its top-level fields but the system ones, a new mapping.
    """
    return {k: v for k, v in obj.items() if k not in _SYSTEM_FIELDS}


def apply_patch_of(obj: Manifest) -> Manifest:
    """What ``apply`` merges into an existing object: labels, annotations and the non-system fields.

    Args:
        obj: The object an ``apply`` writes.

    Returns:
        The merge patch.
    """
    meta = obj.get("metadata") or {}
    patch: Manifest = spec_part(obj)
    patch["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
    return patch


def now_rfc3339(micro: bool = False) -> str:
    """Current UTC time as the API server writes it (``Time`` or, with ``micro``, ``MicroTime``).

    Args:
        micro: Whether to write microseconds (``MicroTime``) instead of seconds.

    Returns:
        The time, e.g. ``2025-01-01T00:00:00Z``.
    """
    now = datetime.now(UTC)
    if micro:
        return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Requirement:
    """One label-selector requirement: ``operator`` is one of = != in notin exists !exists."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a label map satisfies this requirement (Kubernetes semantics)."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


_SET_RE = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ_RE = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_EXISTS_RE = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)$")


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside a ``( ... )`` value set."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    terms.append("".join(current).strip())
    return [t for t in terms if t]


def _parse_term(term: str) -> Requirement:
    if m := _SET_RE.match(term):
        values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
        if not values:  # as the API server's labels.Parse: ``in ()`` would select nothing, ``notin ()`` everything
            raise Invalid(
                "unable to parse requirement: for 'in', 'notin' operators, values set can't be empty",
                field="labelSelector",
            )
        return Requirement(m["key"], m["op"], values)
    if m := _EQ_RE.match(term):
        op = "!=" if m["op"] == "!=" else "="
        return Requirement(m["key"], op, frozenset({m["value"]}))
    if m := _EXISTS_RE.match(term):
        return Requirement(m["key"], "!exists" if m["neg"] else "exists")
    raise Invalid(f"unable to parse label selector requirement {term!r}", field="labelSelector")


def parse_selector(selector: str | None) -> list[Requirement]:
    """Parse a label selector string (``a=b,c!=d,e in (f,g),h,!i``); ``Invalid`` if malformed.

    Args:
        selector: A Kubernetes label selector, or None.

    Returns:
        Its requirements; empty for None or a blank selector.

    Raises:
        Invalid: The selector is malformed (raised while a term is parsed).
    """
    if not selector or not selector.strip():
        return []
    return [_parse_term(term) for term in _split_terms(selector)]


def selector_matches(requirements: list[Requirement], labels: dict[str, str] | None) -> bool:
    """Whether ``labels`` satisfies every requirement (an empty selector matches everything).

    Args:
        requirements: A parsed label selector.
        labels: An object's labels, or None for none.

    Returns:
        True when every requirement holds.
    """
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


EVENT_MESSAGE_LIMIT = 1024
"""Bytes of ``message`` the API server accepts on an Event that has ``eventTime``."""
EVENT_REASON_LIMIT = 128


def _truncate_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes without splitting a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def build_event(obj: Manifest, reason: str, message: str, event_type: str = "Normal") -> Manifest:
    """A core/v1 Event about ``obj``, named ``<obj>.<hex>`` like kubectl/client-go record them.

    Cluster-scoped objects get their Events in ``default``, as the Kubernetes event recorder does.
    Because ``eventTime`` is set, the API server also requires ``reportingComponent``,
    ``reportingInstance`` and ``action`` (here: the reason) and caps ``message`` at 1 KiB and
    ``reason``/``action`` at 128 bytes, so both are truncated rather than rejected.

    Args:
        obj: The object the Event is about.
        reason: The Event's reason (truncated to 128 bytes).
        message: The Event's message (truncated to 1 KiB).
        event_type: ``Normal`` or ``Warning``.

    Returns:
        The Event manifest, not yet posted.
    """
    reason = _truncate_utf8(reason, EVENT_REASON_LIMIT)
    meta = obj.get("metadata") or {}
    name = meta.get("name") or "unknown"
    namespace = meta.get("namespace") or "default"
    involved = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": name,
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    stamp = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
        "involvedObject": {k: v for k, v in involved.items() if v is not None},
        "reason": reason,
        "message": _truncate_utf8(message, EVENT_MESSAGE_LIMIT),
        "type": event_type,
        "action": reason,
        "source": {"component": EVENT_SOURCE},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "eventTime": now_rfc3339(micro=True),
        "count": 1,
        "reportingComponent": EVENT_SOURCE,
        "reportingInstance": socket.gethostname()[:128],
    }
