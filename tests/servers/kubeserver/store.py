"""The object store and the API semantics applied on every verb.

Stored objects are treated as immutable: every write builds a new dict and swaps it in, so readers may
serialise a stored object outside the lock. Objects are indexed by storage key (group, plural) and
namespace; one global counter provides resourceVersions; each resource keeps a bounded event history
for watches.
"""

from __future__ import annotations

import base64
import bisect
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engine.api import schema as schema_mod

from .patch import PatchError, clone, json_patch, merge_patch, strategic_merge_patch
from .resources import BUILTINS, CRD_TYPE, NAMESPACE_TYPE, ResourceType, ScaleSpec, types_from_crd
from .selectors import Predicate, SelectorError, field_selector, label_selector, selector_to_string

Obj = dict[str, Any]

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
"""Namespaces every cluster starts with (kept by :meth:`Store.reset`)."""

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


class ApiError(Exception):
    """An error answered as a ``Status`` object."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> Obj:
        """The ``Status`` body."""
        return status_body(self.code, self.message, self.reason, self.details)


def status_body(code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None) -> Obj:
    """A ``Status`` object as the API server returns it."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason if reason is not None else _REASONS.get(code, ""),
        "code": code,
    }
    if details:
        body["details"] = details
    if code < 400:
        body.pop("message")
        body["reason"] = reason or ""
        if not body["reason"]:
            body.pop("reason")
    return body


def now() -> str:
    """RFC 3339 UTC timestamp with second precision."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def not_found(rt: ResourceType, name: str) -> ApiError:
    """404 for a named object."""
    return ApiError(
        404, f'{rt.qualified} "{name}" not found', "NotFound", {"name": name, "group": rt.group, "kind": rt.plural}
    )


def conflict(rt: ResourceType, name: str) -> ApiError:
    """409 for a stale resourceVersion."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        {"name": name, "group": rt.group, "kind": rt.plural},
    )


def too_large_rv(wanted: int, current: int) -> ApiError:
    """504 for a read at a resourceVersion the store has not reached (storage.NewTooLargeResourceVersionError)."""
    return ApiError(
        504,
        f"Too large resource version: {wanted}, current: {current}",
        "Timeout",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


def invalid(rt: ResourceType, name: str, errors: list[schema_mod.FieldError]) -> ApiError:
    """422 with one cause per field error, worded like the real server."""
    text = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
    return ApiError(
        422,
        f'{rt.kind_group} "{name}" is invalid: {text}',
        "Invalid",
        {
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [{"reason": e.reason, "message": e.detail, "field": e.field} for e in errors],
        },
    )


def _get_path(obj: Any, path: str) -> Any:
    cur = obj
    for part in path.strip(".").split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _set_path(obj: Obj, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    cur = obj
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[parts[-1]] = value


@dataclass
class Event:
    """One watch event in a resource's history."""

    rv: int
    type: str
    obj: Obj
    old: Obj | None


class _History:
    """Bounded, rv-ordered event history for one storage key."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.events: list[Event] = []
        self.rvs: list[int] = []
        self.compacted = 0  # events with rv <= compacted are gone

    def append(self, ev: Event) -> None:
        self.events.append(ev)
        self.rvs.append(ev.rv)
        if len(self.events) > 2 * self.limit:
            drop = len(self.events) - self.limit
            self.compacted = self.rvs[drop - 1]
            del self.events[:drop]
            del self.rvs[:drop]

    def since(self, rv: int) -> list[Event]:
        return self.events[bisect.bisect_right(self.rvs, rv) :]


# ----------------------------------------------------------------------------------------- defaults


def _default_builtin(rt: ResourceType, obj: Obj) -> None:
    """Apply the handful of built-in defaults that controllers commonly read back."""
    kind = rt.kind if not rt.custom else ""
    spec = obj.get("spec")
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        if kind == "Deployment":
            spec.setdefault(
                "strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
            )
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
    elif kind == "Job":
        spec = obj.setdefault("spec", {})
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
    elif kind == "Service" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or ():
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):  # folded into base64 data, as the real server does
            data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
    elif kind == "PersistentVolumeClaim":
        (obj.get("spec") or obj.setdefault("spec", {})).setdefault("volumeMode", "Filesystem")
    elif kind == "Namespace":
        labels = obj["metadata"].setdefault("labels", {})
        labels.setdefault("kubernetes.io/metadata.name", obj["metadata"].get("name", ""))


def _initial_status(rt: ResourceType, obj: Obj) -> None:
    kind = rt.kind if not rt.custom else ""
    if kind == "Namespace":
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
    elif kind == "Pod":
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif kind == "PersistentVolumeClaim":
        obj["status"] = {"phase": "Pending"}
    elif kind == "Service":
        obj["status"] = {"loadBalancer": {}}
    elif kind in ("Deployment", "Job", "StatefulSet", "ReplicaSet"):
        obj["status"] = {}


def _validate_builtin(rt: ResourceType, obj: Obj) -> list[schema_mod.FieldError]:
    errors: list[schema_mod.FieldError] = []
    if rt.custom:
        return errors
    spec = obj.get("spec") or {}
    if rt.kind in ("Deployment", "StatefulSet", "ReplicaSet") and rt.group == "apps":
        sel = spec.get("selector")
        if not sel:
            errors.append(schema_mod.FieldError("spec.selector", "FieldValueRequired", "Required value"))
        else:
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            text = selector_to_string(sel)
            try:
                pred = label_selector(text) if text else None
            except SelectorError as exc:
                return errors + [schema_mod.FieldError("spec.selector", "FieldValueInvalid", f"Invalid value: {exc}")]
            if pred is None:
                errors.append(
                    schema_mod.FieldError(
                        "spec.selector",
                        "FieldValueInvalid",
                        "Invalid value: {}: empty selector is invalid for deployment",
                    )
                )
            elif not pred({"metadata": {"labels": labels}}):
                errors.append(
                    schema_mod.FieldError(
                        "spec.template.metadata.labels",
                        "FieldValueInvalid",
                        f"Invalid value: {json.dumps(labels, sort_keys=True)}: `selector` does not match template `labels`",
                    )
                )
        replicas = spec.get("replicas")
        if isinstance(replicas, int) and replicas < 0:
            errors.append(
                schema_mod.FieldError(
                    "spec.replicas",
                    "FieldValueInvalid",
                    f"Invalid value: {replicas}: must be greater than or equal to 0",
                )
            )
    if rt.kind == "ConfigMap" or rt.kind == "Secret":
        for key in obj.get("data") or {}:
            if not re.match(r"^[-._a-zA-Z0-9]+$", key):
                errors.append(
                    schema_mod.FieldError(
                        f"data[{key}]",
                        "FieldValueInvalid",
                        f"Invalid value: {json.dumps(key)}: a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                    )
                )
    return errors


def _omit_empty(meta: Obj) -> None:
    """ObjectMeta fields are ``omitempty``: empty labels, annotations, finalizers, ... disappear."""
    for key in [k for k, v in meta.items() if v in ({}, [], "", None)]:
        del meta[key]


OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
"""The fields of ``ObjectMeta``; anything else under ``metadata`` is dropped when decoded, as the real server does."""

RETURNS_DELETED_OBJECT = frozenset({("", "pods"), ("", "services"), ("", "serviceaccounts"), ("", "namespaces")})
"""Kinds whose registry sets ``ReturnDeletedObject``: a delete answers with the object; every other kind
answers with a ``Status`` once the object is gone."""

FOREGROUND = "foregroundDeletion"

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def label_value_errors(value: Any) -> list[str]:
    """Why ``value`` is not a valid label value (empty when it is), worded like apimachinery's IsValidLabelValue."""
    if not isinstance(value, str):
        return ["must be a string"]
    errors = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if value and not _LABEL_NAME.match(value):
        errors.append(_LABEL_VALUE_MSG)
    return errors


def label_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a valid label key (an optional DNS-subdomain prefix and a name of at most 63 characters)."""
    prefix, _, name = key.rpartition("/")
    errors = []
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        errors.append("prefix part " + _SUBDOMAIN_MSG)
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _LABEL_NAME.match(name):
        errors.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character"
        )
    return errors


def _validate_meta(obj: Obj) -> list[schema_mod.FieldError]:
    """ObjectMeta validation every kind gets: label keys and values (at most 63 characters, the label alphabet)."""
    errors: list[schema_mod.FieldError] = []
    labels = obj.get("metadata", {}).get("labels")
    if labels is None:
        return errors
    if not isinstance(labels, dict):
        return [
            schema_mod.FieldError("metadata.labels", "FieldValueTypeInvalid", "Invalid value: must be a map of strings")
        ]
    for key, value in labels.items():
        for why in label_key_errors(key):
            errors.append(
                schema_mod.FieldError(
                    "metadata.labels", "FieldValueInvalid", f"Invalid value: {json.dumps(key)}: {why}"
                )
            )
        for why in label_value_errors(value):
            errors.append(
                schema_mod.FieldError(
                    "metadata.labels", "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {why}"
                )
            )
    return errors


def _prune_meta(meta: Obj) -> list[str]:
    """Drop the keys ObjectMeta does not have; returns their paths (``metadata.x``) for warnings."""
    unknown = [k for k in meta if k not in OBJECT_META_FIELDS]
    for key in unknown:
        del meta[key]
    return [f"metadata.{k}" for k in unknown]


def _check_patched_identity(rt: ResourceType, ns: str, name: str, patched: Obj) -> None:
    """A patch may not rename or move its object (the handler's checkName): 400 as the real server answers."""
    meta = patched.get("metadata")
    if not isinstance(meta, dict):
        return
    if meta.get("name") != name:
        raise ApiError(400, f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
    if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
        raise ApiError(
            400, f"the namespace of the object ({meta['namespace']}) does not match the namespace on the URL ({ns})"
        )


def _generation_changes(rt: ResourceType, old: Obj, new: Obj) -> bool:
    """A spec change; for an apps/v1 Deployment also an annotation change (its strategy's PrepareForUpdate)."""
    if _spec_part(rt, new) != _spec_part(rt, old):
        return True
    if rt.group == "apps" and rt.kind == "Deployment":
        return (new["metadata"].get("annotations") or {}) != (old["metadata"].get("annotations") or {})
    return False


def _spec_part(rt: ResourceType, obj: Obj) -> Obj:
    skip = ("metadata", "status", "apiVersion", "kind") if rt.has_status else ("metadata", "apiVersion", "kind")
    return {k: v for k, v in obj.items() if k not in skip}


# -------------------------------------------------------------------------------------------- store


class Store:
    """All objects and the Kubernetes semantics applied to them."""

    def __init__(self, history: int = 5000, require_namespaces: bool = True) -> None:
        self.require_namespaces = require_namespaces
        """Creating in a namespace that does not exist is 404, as on a cluster."""
        self._request = threading.local()
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._rv = 0
        self._history_limit = history
        self._objs: dict[tuple[str, str], dict[str, dict[str, Obj]]] = {}
        self._history: dict[tuple[str, str], _History] = {}
        self.types: dict[tuple[str, str, str], ResourceType] = {}
        self._crd_types: dict[str, list[ResourceType]] = {}
        self._key_types: dict[tuple[str, str], ResourceType] = {}
        # garbage collection: owner uid -> dependents' locations, and the uids of live objects
        self._dependents: dict[str, set[tuple[tuple[str, str], str, str]]] = {}
        self._live_uids: set[str] = set()
        self._foreground: dict[str, tuple[tuple[str, str], str, str]] = {}  # owner uid -> where, while it waits
        self.fresh_wait = 3.0
        """Seconds a read at a future resourceVersion waits before "Too large resource version" (as the cacher)."""
        for rt in BUILTINS:
            self.types[(rt.group, rt.version, rt.plural)] = rt
            self._key_types.setdefault(rt.key, rt)
        for name in BUILTIN_NAMESPACES:
            self.create(NAMESPACE_TYPE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # ------------------------------------------------------------------------------- type registry

    def resolve(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The served type for (group, version, plural), if any."""
        return self.types.get((group, version, plural))

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (core group under "")."""
        out: dict[str, list[str]] = {}
        for g, v, _ in list(self.types):
            versions = out.setdefault(g, [])
            if v not in versions:
                versions.append(v)
        return out

    def resources(self, group: str, version: str) -> list[ResourceType]:
        """Types served under one group/version."""
        return [rt for (g, v, _), rt in list(self.types.items()) if g == group and v == version]

    def _register_crd(self, crd: Obj) -> None:
        name = crd["metadata"]["name"]
        self._unregister_crd(name, drop=False)
        new = types_from_crd(crd)
        for rt in new:
            self.types[(rt.group, rt.version, rt.plural)] = rt
            self._key_types[rt.key] = rt
        self._crd_types[name] = new

    def _unregister_crd(self, name: str, drop: bool) -> None:
        for rt in self._crd_types.pop(name, []):
            self.types.pop((rt.group, rt.version, rt.plural), None)
            self._key_types.pop(rt.key, None)
            if drop:
                self._objs.pop(rt.key, None)
                hist = self._history.get(rt.key)
                if hist is not None:
                    hist.compacted = self._rv
        if drop:
            self._reindex()

    # ---------------------------------------------------------------------------- garbage collection

    @staticmethod
    def _owner_uids(obj: Obj | None) -> set[str]:
        if not obj:
            return set()
        return {r["uid"] for r in obj["metadata"].get("ownerReferences") or () if isinstance(r, dict) and r.get("uid")}

    def _track(self, rt: ResourceType, ns: str, name: str, old: Obj | None, new: Obj | None) -> None:
        """Keep the owner/dependent index in step with a store write (caller holds the lock)."""
        loc = (rt.key, ns, name)
        before, after = self._owner_uids(old), self._owner_uids(new)
        for uid in before - after:
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard(loc)
        for uid in after - before:
            self._dependents.setdefault(uid, set()).add(loc)
        if old is None and new is not None:
            self._live_uids.add(new["metadata"]["uid"])
        elif new is None and old is not None:
            self._live_uids.discard(old["metadata"].get("uid"))

    def _reindex(self) -> None:
        self._dependents = {}
        self._live_uids = set()
        for key, by_ns in self._objs.items():
            rt = self._key_types.get(key)
            if rt is None:
                continue
            for ns, bucket in by_ns.items():
                for name, obj in bucket.items():
                    self._track(rt, ns, name, None, obj)

    def _collect(self, uid: str) -> None:
        """Background cascading deletion: delete dependents whose owners are all gone."""
        for key, ns, name in list(self._dependents.pop(uid, ())):
            obj = self._objs.get(key, {}).get(ns, {}).get(name)
            rt = self._key_types.get(key)
            if obj is None or rt is None or self._owner_uids(obj) & self._live_uids:
                continue
            try:
                self.delete(rt, ns or None, name)
            except ApiError:
                pass

    # ------------------------------------------------------------------------------------- helpers

    def _bucket(self, rt: ResourceType, ns: str) -> dict[str, Obj]:
        by_ns = self._objs.setdefault(rt.key, {})
        bucket = by_ns.get(ns)
        if bucket is None:
            bucket = by_ns[ns] = {}
        return bucket

    def _hist(self, rt: ResourceType) -> _History:
        hist = self._history.get(rt.key)
        if hist is None:
            hist = self._history[rt.key] = _History(self._history_limit)
        return hist

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _emit(self, rt: ResourceType, typ: str, obj: Obj, old: Obj | None) -> None:
        self._hist(rt).append(Event(int(obj["metadata"]["resourceVersion"]), typ, obj, old))
        self._cond.notify_all()

    @staticmethod
    def _ns(rt: ResourceType, ns: str | None) -> str:
        return (ns or "") if rt.namespaced else ""

    def _present(self, rt: ResourceType, obj: Obj) -> Obj:
        """The object as served by ``rt``'s version (stored objects keep the version they were written in)."""
        if obj.get("apiVersion") != rt.api_version:
            obj = dict(obj)
            obj["apiVersion"] = rt.api_version
        return obj

    def current_rv(self) -> str:
        """The latest resourceVersion, as a string."""
        return str(self._rv)

    # ----------------------------------------------------------------------------------------- read

    def get(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        """GET one object (404 if absent)."""
        obj = self._objs.get(rt.key, {}).get(self._ns(rt, ns), {}).get(name)
        if obj is None:
            raise not_found(rt, name)
        return self._present(rt, obj)

    def wait_fresh(self, resource_version: str | None) -> None:
        """A read at ``resource_version`` (other than "" and "0") waits up to :attr:`fresh_wait` seconds for
        the store to reach it, then fails as the watch cache does: 504 "Too large resource version"."""
        if resource_version in (None, "", "0"):
            return
        try:
            wanted = int(resource_version)  # type: ignore[arg-type]
        except ValueError:
            raise ApiError(400, f"invalid resource version: {resource_version}") from None
        deadline = time.monotonic() + self.fresh_wait
        with self._cond:
            while self._rv < wanted:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise too_large_rv(wanted, self._rv)
                self._cond.wait(remaining)

    def _predicates(self, rt: ResourceType, labels: str | None, fields: str | None) -> list[Predicate]:
        preds: list[Predicate] = []
        try:
            if labels:
                p = label_selector(labels)
                if p:
                    preds.append(p)
            if fields:
                p = field_selector(fields, rt.field_labels)
                if p:
                    preds.append(p)
        except SelectorError as exc:
            raise ApiError(400, str(exc)) from None
        return preds

    def list(
        self,
        rt: ResourceType,
        ns: str | None,
        labels: str | None = None,
        fields: str | None = None,
        limit: int = 0,
        cont: str | None = None,
    ) -> Obj:
        """LIST (one namespace, or all namespaces when ``ns`` is None) with selectors and paging."""
        preds = self._predicates(rt, labels, fields)
        with self._lock:
            rv = self._rv
            by_ns = self._objs.get(rt.key, {})
            if rt.namespaced and ns is not None:
                pairs = [(ns, n, o) for n, o in by_ns.get(ns, {}).items()]
            else:
                pairs = [(k, n, o) for k, bucket in by_ns.items() for n, o in bucket.items()]
        pairs.sort(key=lambda t: (t[0], t[1]))
        items = [o for _, _, o in pairs if all(p(o) for p in preds)] if preds else [o for _, _, o in pairs]
        meta: Obj = {"resourceVersion": str(rv)}
        if cont:
            try:
                token = json.loads(base64.urlsafe_b64decode(cont.encode()).decode())
                start = (token["ns"], token["name"])
                meta["resourceVersion"] = token["rv"]
            except Exception:
                raise ApiError(400, "continue key is not valid: invalid continue token") from None
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = {"rv": meta["resourceVersion"], "ns": last.get("namespace", ""), "name": last["name"]}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if rt.custom or any(o.get("apiVersion") != rt.api_version for o in items):
            items = [self._present(rt, o) for o in items]
        return {"apiVersion": rt.api_version, "kind": f"{rt.kind}List", "metadata": meta, "items": items}

    # ------------------------------------------------------------------------------------ validate

    def _check(self, rt: ResourceType, obj: Obj, name: str, old: Obj | None = None, subresource: str = "") -> None:
        """Prune/default/validate ``obj`` in place (the product's :mod:`engine.api.schema`); 422 on violations."""
        errors: list[schema_mod.FieldError] = []
        meta_dropped = _prune_meta(obj["metadata"]) if isinstance(obj.get("metadata"), dict) else []
        if rt.custom and rt.schema is not None:
            dropped: list[str] = []
            errors = schema_mod.process_write(obj, old, rt.schema, status_only=subresource == "status", dropped=dropped)
            self._report_unknown_fields(meta_dropped + dropped)
        else:
            self._report_unknown_fields(meta_dropped)
            errors = _validate_builtin(rt, obj)
        errors = _validate_meta(obj) + errors
        if rt is CRD_TYPE or rt.key == CRD_TYPE.key:
            errors += self._validate_crd(obj)
        if errors:
            raise invalid(rt, name, errors)

    @contextmanager
    def field_validation(self, mode: str | None) -> Iterator[list[str]]:
        """Apply ``?fieldValidation=`` (Strict | Warn, the default | Ignore) to the writes of this thread;
        yields the warnings to send back as ``Warning`` headers."""
        mode = mode or "Warn"
        if mode not in ("Strict", "Warn", "Ignore"):
            raise ApiError(400, f'fieldValidation parameter unsupported: "{mode}"')
        self._request.mode, self._request.warnings = mode, []
        try:
            yield self._request.warnings
        finally:
            self._request.mode = "Warn"

    def _report_unknown_fields(self, dropped: list[str]) -> None:
        if not dropped:
            return
        mode = getattr(self._request, "mode", "Warn")
        if mode == "Strict":
            raise ApiError(
                400, "strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in dropped), "BadRequest"
            )
        if mode == "Warn" and hasattr(self._request, "warnings"):
            self._request.warnings.extend(f'unknown field "{f}"' for f in dropped)

    @staticmethod
    def _validate_crd(obj: Obj) -> list[schema_mod.FieldError]:
        errors = []
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        for f in ("group", "names", "scope", "versions"):
            if not spec.get(f):
                errors.append(schema_mod.FieldError(f"spec.{f}", "FieldValueRequired", "Required value"))
        for f in ("plural", "kind"):
            if names and not names.get(f):
                errors.append(schema_mod.FieldError(f"spec.names.{f}", "FieldValueRequired", "Required value"))
        if spec.get("scope") not in (None, "Namespaced", "Cluster"):
            errors.append(
                schema_mod.FieldError(
                    "spec.scope",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"',
                )
            )
        want = f"{names.get('plural')}.{spec.get('group')}"
        name = obj["metadata"].get("name")
        if spec.get("group") and names.get("plural") and name != want:
            errors.append(
                schema_mod.FieldError(
                    "metadata.name",
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                )
            )
        storage = [v for v in spec.get("versions") or () if v.get("storage")]
        if spec.get("versions") and len(storage) != 1:
            errors.append(
                schema_mod.FieldError(
                    "spec.versions",
                    "FieldValueInvalid",
                    "Invalid value: []: must have exactly one version marked as storage version",
                )
            )
        return errors

    @staticmethod
    def _crd_status(crd: Obj) -> Obj:
        spec = crd.get("spec") or {}
        ts = now()
        return {
            "acceptedNames": dict(spec.get("names") or {}),
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": ts,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": ts,
                },
            ],
            "storedVersions": [v["name"] for v in spec.get("versions") or () if v.get("storage")],
        }

    # ----------------------------------------------------------------------------------------- write

    def create(self, rt: ResourceType, ns: str | None, body: Any, dry_run: bool = False) -> Obj:
        """POST: 201 with the stored object; 409 AlreadyExists."""
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request must be a JSON object")
        obj = body
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        ns = self._ns(rt, ns)
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != ns:
                raise ApiError(
                    400, "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
            if not dry_run and self.require_namespaces and ns not in self._bucket(NAMESPACE_TYPE, ""):
                raise ApiError(404, f'namespaces "{ns}" not found', "NotFound", {"name": ns, "kind": "namespaces"})
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(
                    secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5)
                )
            else:
                raise invalid(
                    rt,
                    "",
                    [
                        schema_mod.FieldError(
                            "metadata.name", "FieldValueRequired", "Required value: name or generateName is required"
                        )
                    ],
                )
        name = meta["name"]
        if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
            raise invalid(
                rt,
                str(name),
                [
                    schema_mod.FieldError(
                        "metadata.name", "FieldValueInvalid", f"Invalid value: {json.dumps(name)}: {_SUBDOMAIN_MSG}"
                    )
                ],
            )
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        _omit_empty(meta)
        if meta.get("resourceVersion"):  # as genericregistry's Store.Create answers
            raise ApiError(500, "resourceVersion should not be set on objects to be created", "InternalError")
        for k in (
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
            "selfLink",
        ):
            meta.pop(k, None)
        if rt.has_status:
            obj.pop("status", None)
        _default_builtin(rt, obj)
        _initial_status(rt, obj)
        self._check(rt, obj, name)
        with self._lock:
            bucket = self._bucket(rt, ns)
            if name in bucket:
                raise ApiError(
                    409,
                    f'{rt.qualified} "{name}" already exists',
                    "AlreadyExists",
                    {"name": name, "group": rt.group, "kind": rt.plural},
                )
            if rt.key == CRD_TYPE.key:
                obj["status"] = self._crd_status(obj)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            if rt.generation:
                meta["generation"] = 1
            if dry_run:
                meta["resourceVersion"] = str(self._rv)
                return obj
            meta["resourceVersion"] = str(self._next_rv())
            bucket[name] = obj
            self._track(rt, ns, name, None, obj)
            if rt.key == CRD_TYPE.key:
                self._register_crd(obj)
            self._emit(rt, "ADDED", obj, None)
        return self._present(rt, obj)

    def _merge_update(self, rt: ResourceType, old: Obj, new: Obj, subresource: str) -> Obj:
        """Build the object an update would store (status isolation, immutable metadata)."""
        if subresource == "status":
            result = dict(old)
            result["metadata"] = dict(old["metadata"])
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            return clone(result)
        result = new
        result["apiVersion"] = rt.api_version
        result["kind"] = rt.kind
        meta = result.get("metadata")
        if not isinstance(meta, dict):
            meta = result["metadata"] = {}
        old_meta = old["metadata"]
        if meta.get("uid") and meta["uid"] != old_meta.get("uid"):  # rest.BeforeUpdate: an empty uid keeps the old
            raise invalid(
                rt,
                old_meta["name"],
                [
                    schema_mod.FieldError(
                        "metadata.uid",
                        "FieldValueInvalid",
                        f"Invalid value: {json.dumps(meta['uid'])}: field is immutable",
                    )
                ],
            )
        for k in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta.pop("managedFields", None)
        _omit_empty(meta)
        _default_builtin(rt, result)
        if rt.has_status:
            if "status" in old:
                result["status"] = clone(old["status"])
            else:
                result.pop("status", None)
        return result

    def _commit_update(
        self, rt: ResourceType, ns: str, name: str, old: Obj, result: Obj, dry_run: bool, subresource: str = ""
    ) -> Obj:
        """Validate, compute generation, store and emit; caller holds the lock."""
        self._check(rt, result, name, old, subresource)
        meta = result["metadata"]
        if old["metadata"].get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or () if f not in (old["metadata"].get("finalizers") or ())]
            if added:
                raise invalid(
                    rt,
                    name,
                    [
                        schema_mod.FieldError(
                            "metadata.finalizers",
                            "FieldValueForbidden",
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers "
                            + "[]string{"
                            + ", ".join(json.dumps(f) for f in added)
                            + "}",
                        )
                    ],
                )
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if rt.generation and _generation_changes(rt, old, result):
            meta["generation"] = int(old["metadata"].get("generation", 0)) + 1
        if rt.key == CRD_TYPE.key:
            result["status"] = old.get("status") or self._crd_status(result)
            if result.get("spec") != old.get("spec"):
                result["status"] = self._crd_status(result)
        if result == old:
            return self._present(rt, old)  # no-op update: no new resourceVersion, no event
        if dry_run:
            return result
        bucket = self._bucket(rt, ns)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            meta["resourceVersion"] = str(self._next_rv())
            del bucket[name]
            self._track(rt, ns, name, old, None)
            self._emit(rt, "DELETED", result, old)
            self._after_delete(rt, result)
            return self._present(rt, result)
        meta["resourceVersion"] = str(self._next_rv())
        bucket[name] = result
        self._track(rt, ns, name, old, result)
        if rt.key == CRD_TYPE.key:
            self._register_crd(result)
        self._emit(rt, "MODIFIED", result, old)
        return self._present(rt, result)

    def update(
        self, rt: ResourceType, ns: str | None, name: str, body: Any, subresource: str = "", dry_run: bool = False
    ) -> Obj:
        """PUT (replace) of the object or its ``status``; 409 on a stale resourceVersion."""
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request must be a JSON object")
        ns = self._ns(rt, ns)
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise ApiError(
                400, f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and meta.get("namespace") not in (None, "", ns):
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        with self._lock:
            old = self._bucket(rt, ns).get(name)
            if old is None:
                raise not_found(rt, name)
            rv = meta.get("resourceVersion")
            if not rv and rt.custom:  # custom resources allow no unconditional update
                raise invalid(
                    rt,
                    name,
                    [
                        schema_mod.FieldError(
                            "metadata.resourceVersion",
                            "FieldValueInvalid",
                            "Invalid value: 0x0: must be specified for an update",
                        )
                    ],
                )
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            result = self._merge_update(rt, old, body, subresource)
            return self._commit_update(rt, ns, name, old, result, dry_run, subresource)

    def patch(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        content_type: str,
        body: Any,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        """PATCH with merge, JSON or (built-ins only) strategic merge patch; a resourceVersion in the patch is a precondition."""
        ctype = content_type.split(";")[0].strip().lower()
        if ctype == STRATEGIC and rt.custom:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        if ctype not in (MERGE, JSON_PATCH, STRATEGIC, APPLY):
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                f"{'' if rt.custom else ', application/strategic-merge-patch+json'}",
            )
        ns = self._ns(rt, ns)
        with self._lock:
            old = self._bucket(rt, ns).get(name)
            if old is None:
                if ctype == APPLY and not subresource:
                    pass
                else:
                    raise not_found(rt, name)
        if old is None:
            body = dict(body)
            body.setdefault("metadata", {})["name"] = name
            return self.create(rt, ns, body, dry_run)
        try:
            if ctype == JSON_PATCH:
                patched = json_patch(old, body)
            elif ctype == STRATEGIC:
                if not isinstance(body, dict):
                    raise PatchError("the body of the request must be a JSON object", 400)
                patched = clone(strategic_merge_patch(old, body))
            else:
                if not isinstance(body, dict):
                    raise PatchError("the body of the request must be a JSON object", 400)
                patched = clone(merge_patch(old, body))
        except PatchError as exc:
            raise ApiError(exc.code, str(exc)) from None
        if not isinstance(patched, dict):
            raise ApiError(400, "patch produced a non-object document")
        _check_patched_identity(rt, ns, name, patched)
        with self._lock:
            current = self._bucket(rt, ns).get(name)
            if current is None:
                raise not_found(rt, name)
            prv = (patched.get("metadata") or {}).get("resourceVersion")
            if prv and prv != current["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            if current is not old:  # raced with another writer: re-apply on the latest version
                return self.patch(rt, ns, name, content_type, body, subresource, dry_run)
            result = self._merge_update(rt, old, patched, subresource)
            return self._commit_update(rt, ns, name, old, result, dry_run, subresource)

    # ---------------------------------------------------------------------------------------- delete

    def _after_delete(self, rt: ResourceType, obj: Obj, orphan: bool = False) -> None:
        self._foreground.pop(obj["metadata"]["uid"], None)
        if not orphan:
            self._collect(obj["metadata"]["uid"])
        for owner in self._owner_uids(obj) & set(self._foreground):
            self._release_foreground(owner)
        if rt.key == CRD_TYPE.key:
            self._unregister_crd(obj["metadata"]["name"], drop=True)
        elif rt.key == NAMESPACE_TYPE.key:
            ns = obj["metadata"]["name"]
            for key, by_ns in list(self._objs.items()):
                bucket = by_ns.pop(ns, None)
                if not bucket:
                    continue
                typ = self._key_types.get(key)
                for cname, child in bucket.items():
                    if typ is not None:
                        self._track(typ, ns, cname, child, None)
                    gone = dict(child)
                    gone["metadata"] = dict(child["metadata"], resourceVersion=str(self._next_rv()))
                    if typ is not None:
                        self._emit(typ, "DELETED", gone, child)

    def delete(
        self, rt: ResourceType, ns: str | None, name: str, options: Obj | None = None, dry_run: bool = False
    ) -> tuple[Obj, bool]:
        """DELETE; returns (object, gone). Objects with finalizers get a deletionTimestamp and stay."""
        ns = self._ns(rt, ns)
        pre = (options or {}).get("preconditions") or {}
        orphan = (options or {}).get("propagationPolicy") == "Orphan" or (options or {}).get("orphanDependents") is True
        with self._lock:
            bucket = self._bucket(rt, ns)
            old = bucket.get(name)
            if old is None:
                raise not_found(rt, name)
            meta = old["metadata"]
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise ApiError(
                    409,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}",
                    "Conflict",
                    {"name": name, "group": rt.group, "kind": rt.plural},
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                raise ApiError(
                    409,
                    f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                    f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
                    "Conflict",
                    {"name": name, "group": rt.group, "kind": rt.plural},
                )
            if dry_run:
                return self._present(rt, old), not meta.get("finalizers")
            if (options or {}).get("propagationPolicy") == "Foreground" and not meta.get("deletionTimestamp"):
                return self._delete_foreground(rt, ns, name, old)
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return self._present(rt, old), False
                new = dict(old)
                new["metadata"] = dict(
                    meta, deletionTimestamp=now(), deletionGracePeriodSeconds=0, resourceVersion=str(self._next_rv())
                )
                if rt.generation and "generation" in meta:
                    new["metadata"]["generation"] = int(meta["generation"]) + 1  # as the real server does
                bucket[name] = new
                self._emit(rt, "MODIFIED", new, old)
                return self._present(rt, new), False
            gone = dict(old)
            gone["metadata"] = dict(meta, resourceVersion=str(self._next_rv()))
            del bucket[name]
            self._track(rt, ns, name, old, None)
            self._emit(rt, "DELETED", gone, old)
            self._after_delete(rt, gone, orphan)
            return self._present(rt, gone), True

    def _delete_foreground(self, rt: ResourceType, ns: str, name: str, old: Obj) -> tuple[Obj, bool]:
        """``propagationPolicy: Foreground``: the object stays, with a deletionTimestamp and the
        ``foregroundDeletion`` finalizer, while the garbage collector deletes its dependents; it goes once no
        dependent that blocks owner deletion is left (caller holds the lock)."""
        meta = old["metadata"]
        uid = meta["uid"]
        if not self._dependents.get(uid):  # nothing to wait for: the collector releases it at once
            return self.delete(rt, ns or None, name)
        finalizers = list(meta.get("finalizers") or ())
        if FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        new = dict(old)
        new["metadata"] = dict(
            meta,
            deletionTimestamp=now(),
            deletionGracePeriodSeconds=0,
            finalizers=finalizers,
            resourceVersion=str(self._next_rv()),
        )
        if rt.generation and "generation" in meta:
            new["metadata"]["generation"] = int(meta["generation"]) + 1
        self._bucket(rt, ns)[name] = new
        self._emit(rt, "MODIFIED", new, old)
        self._foreground[uid] = (rt.key, ns, name)
        for key, dns, dname in sorted(self._dependents.get(uid, ())):
            dep = self._objs.get(key, {}).get(dns, {}).get(dname)
            drt = self._key_types.get(key)
            if dep is None or drt is None or (self._owner_uids(dep) - {uid}) & self._live_uids:
                continue  # still owned by a live object: kept, as the collector keeps it
            try:
                self.delete(drt, dns or None, dname, {"propagationPolicy": "Foreground"})
            except ApiError:
                pass
        current = self._bucket(rt, ns).get(name, new)
        self._release_foreground(uid)
        gone = name not in self._bucket(rt, ns)
        return self._present(rt, current if not gone else new), gone

    def _blocking_dependents(self, uid: str) -> list[tuple[tuple[str, str], str, str]]:
        """Dependents of ``uid`` whose reference to it sets ``blockOwnerDeletion`` and that no other live
        object owns (the ones a foreground deletion waits for)."""
        out = []
        for key, ns, name in self._dependents.get(uid, ()):
            dep = self._objs.get(key, {}).get(ns, {}).get(name)
            if dep is None:
                continue
            refs = [
                r for r in dep["metadata"].get("ownerReferences") or () if isinstance(r, dict) and r.get("uid") == uid
            ]
            if any(r.get("blockOwnerDeletion") for r in refs) and not (
                (self._owner_uids(dep) - {uid}) & self._live_uids
            ):
                out.append((key, ns, name))
        return out

    def _release_foreground(self, uid: str) -> None:
        """Remove the ``foregroundDeletion`` finalizer from an owner whose blocking dependents are all gone."""
        where = self._foreground.get(uid)
        if where is None or self._blocking_dependents(uid):
            return
        del self._foreground[uid]
        key, ns, name = where
        obj = self._objs.get(key, {}).get(ns, {}).get(name)
        rt = self._key_types.get(key)
        if obj is None or rt is None or obj["metadata"].get("uid") != uid:
            return
        result = clone(obj)
        finalizers = [f for f in result["metadata"].get("finalizers") or () if f != FOREGROUND]
        if finalizers:
            result["metadata"]["finalizers"] = finalizers
        else:
            result["metadata"].pop("finalizers", None)
        self._commit_update(rt, ns, name, obj, result, False)

    def delete_collection(
        self, rt: ResourceType, ns: str | None, labels: str | None, fields: str | None, dry_run: bool = False
    ) -> Obj:
        """DELETE on a collection path: deletes every matching object; returns the list of them."""
        listing = self.list(rt, ns, labels, fields)
        deleted = []
        for item in listing["items"]:
            meta = item["metadata"]
            try:
                obj, _ = self.delete(rt, meta.get("namespace"), meta["name"], None, dry_run)
                deleted.append(obj)
            except ApiError:
                continue
        listing["items"] = deleted
        return listing

    # ----------------------------------------------------------------------------------------- scale

    def _scale_of(self, rt: ResourceType, obj: Obj) -> Obj:
        spec: ScaleSpec = rt.scale  # type: ignore[assignment]
        meta = obj["metadata"]
        if spec.label_selector_path is None:
            selector = selector_to_string((obj.get("spec") or {}).get("selector"))
        else:
            selector = _get_path(obj, spec.label_selector_path) or ""
        status: Obj = {"replicas": _get_path(obj, spec.status_replicas_path) or 0}
        if selector:
            status["selector"] = selector
        smeta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta}
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": smeta,
            "spec": {"replicas": _get_path(obj, spec.spec_replicas_path) or 0},
            "status": status,
        }

    def get_scale(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        """GET .../scale."""
        if rt.scale is None:
            raise ApiError(404, "the server could not find the requested resource")
        return self._scale_of(rt, self.get(rt, ns, name))

    def update_scale(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        body: Any,
        content_type: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """PUT or PATCH .../scale: sets the replicas at the kind's spec replicas path."""
        if rt.scale is None:
            raise ApiError(404, "the server could not find the requested resource")
        ns = self._ns(rt, ns)
        with self._lock:
            old = self._bucket(rt, ns).get(name)
            if old is None:
                raise not_found(rt, name)
            scale = self._scale_of(rt, old)
            if content_type is not None:
                ctype = content_type.split(";")[0].strip().lower()
                try:
                    if ctype == JSON_PATCH:
                        new_scale = json_patch(scale, body)
                    elif ctype in (MERGE, STRATEGIC, APPLY) and isinstance(body, dict):
                        new_scale = merge_patch(scale, body)
                    else:
                        raise ApiError(415, "the body of the request was in an unknown format")
                except PatchError as exc:
                    raise ApiError(exc.code, str(exc)) from None
            else:
                new_scale = body
            if not isinstance(new_scale, dict):
                raise ApiError(400, "the body of the request must be a JSON object")
            rv = (new_scale.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            replicas = (new_scale.get("spec") or {}).get("replicas", 0)
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise ApiError(
                    422,
                    f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: {json.dumps(replicas)}: '
                    "must be greater than or equal to 0",
                    "Invalid",
                    {
                        "name": name,
                        "group": "autoscaling",
                        "kind": "Scale",
                        "causes": [
                            {
                                "reason": "FieldValueInvalid",
                                "field": "spec.replicas",
                                "message": f"Invalid value: {json.dumps(replicas)}: must be greater than or equal to 0",
                            }
                        ],
                    },
                )
            result = clone(old)
            _set_path(result, rt.scale.spec_replicas_path, replicas)
            stored = self._commit_update(rt, ns, name, old, result, dry_run)
            return self._scale_of(rt, stored)

    # ----------------------------------------------------------------------------------------- watch

    def watch(
        self,
        rt: ResourceType,
        ns: str | None,
        labels: str | None,
        fields: str | None,
        resource_version: str | None,
        timeout: float,
        bookmarks: bool = False,
        send_initial_events: bool | None = None,
    ) -> Iterator[Obj | None]:
        """Yield watch events after ``resource_version`` until ``timeout`` seconds pass.

        ``None`` is yielded about once a second while idle, so the caller can check its connection.

        Without a resourceVersion (or "0"), or with ``sendInitialEvents``, the current objects are sent
        first as ADDED. A resourceVersion older than the retained history yields one ERROR event with
        a 410 Status. With ``allowWatchBookmarks`` a BOOKMARK ends the initial events (annotated
        ``k8s.io/initial-events-end`` when they were requested) and the stream.
        """
        preds = self._predicates(rt, labels, fields)
        if resource_version not in (None, "", "0"):
            try:
                int(resource_version)  # type: ignore[arg-type]
            except ValueError:
                raise ApiError(400, f"invalid resource version: {resource_version}") from None
        return self._watch(rt, ns, preds, labels, fields, resource_version, timeout, bookmarks, send_initial_events)

    def _bookmark(self, rt: ResourceType, initial_end: bool = False) -> Obj:
        meta: Obj = {"resourceVersion": str(self._rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}}

    def _watch(
        self,
        rt: ResourceType,
        ns: str | None,
        preds: list[Predicate],
        labels: str | None,
        fields: str | None,
        resource_version: str | None,
        timeout: float,
        bookmarks: bool,
        send_initial_events: bool | None,
    ) -> Iterator[Obj | None]:
        want_ns = self._ns(rt, ns) if (rt.namespaced and ns is not None) else None

        def match(obj: Obj | None) -> bool:
            if obj is None:
                return False
            if want_ns is not None and obj["metadata"].get("namespace", "") != want_ns:
                return False
            return all(p(obj) for p in preds)

        deadline = time.monotonic() + timeout
        if send_initial_events and resource_version not in (None, "", "0"):
            try:
                self.wait_fresh(resource_version)
            except ApiError as err:  # an error after the watch started is an ERROR event, as from the cacher
                yield {"type": "ERROR", "object": err.status()}
                return
        with self._lock:
            if resource_version in (None, "", "0") or send_initial_events:
                start = self._rv
                initial = self.list(rt, ns, labels, fields)["items"]
            else:
                start = int(resource_version)  # type: ignore[arg-type]
                initial = []
                if start < self._hist(rt).compacted:
                    initial = None
        if initial is None:
            yield {
                "type": "ERROR",
                "object": status_body(
                    410, f"too old resource version: {resource_version} ({self._hist(rt).compacted + 1})", "Expired"
                ),
            }
            return
        for obj in initial:
            yield {"type": "ADDED", "object": obj}
        if bookmarks and send_initial_events:
            yield self._bookmark(rt, initial_end=True)
        while True:
            with self._cond:
                hist = self._hist(rt)
                if start < hist.compacted:
                    events = None
                else:
                    events = hist.since(start)
                    if not events:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(min(remaining, 1.0))
            if events is not None and not events:
                yield None  # heartbeat: lets the server notice a client that went away
                continue
            if events is None:
                yield {"type": "ERROR", "object": status_body(410, f"too old resource version: {start}", "Expired")}
                return
            start = events[-1].rv
            for ev in events:
                new_match = match(ev.obj)
                old_match = match(ev.old) if ev.type != "ADDED" else False
                if ev.type == "MODIFIED":
                    typ = (
                        "MODIFIED"
                        if new_match and old_match
                        else "ADDED"
                        if new_match
                        else "DELETED"
                        if old_match
                        else None
                    )
                elif ev.type == "DELETED":
                    typ = "DELETED" if (new_match or old_match) else None
                else:
                    typ = "ADDED" if new_match else None
                if typ:
                    yield {"type": typ, "object": self._present(rt, ev.obj)}
            if time.monotonic() >= deadline:
                break
        if bookmarks:
            yield self._bookmark(rt)

    # ----------------------------------------------------------------------------------------- admin

    def reset(self) -> None:
        """Drop every object except CustomResourceDefinitions and the built-in namespaces (resourceVersions
        keep increasing)."""
        with self._lock:
            crds = self._objs.get(CRD_TYPE.key, {})
            self._objs = {CRD_TYPE.key: crds}
            self._foreground = {}
            self._reindex()
            for key, hist in self._history.items():
                if key != CRD_TYPE.key:
                    hist.compacted = self._rv
                    hist.events.clear()
                    hist.rvs.clear()
            self._next_rv()
            self._cond.notify_all()
            for name in BUILTIN_NAMESPACES:
                self.create(NAMESPACE_TYPE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def count(self) -> dict[str, int]:
        """Number of stored objects per resource (for debugging)."""
        with self._lock:
            return {f"{p}.{g}" if g else p: sum(len(b) for b in by_ns.values()) for (g, p), by_ns in self._objs.items()}
