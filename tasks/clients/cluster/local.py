"""The local backend: a directory (or one file) of YAML manifests is the cluster state.

It keeps the API server's semantics so flows behave the same on a laptop as on a cluster:

* every object has ``uid``, ``creationTimestamp``, ``resourceVersion`` and ``generation``; objects
  read from disk without them get them in memory (a name-derived uid, the file's mtime, a fresh
  resourceVersion, generation 1) without rewriting the file just for loading;
* ``resourceVersion`` comes from one counter per :class:`LocalCluster`, started above the highest
  numeric ``resourceVersion`` on disk, and advances on every write (a no-op patch writes nothing);
* ``generation`` advances only when something other than ``metadata``/``status`` changes;
* a stale ``resourceVersion`` or creating an existing object raises ``Conflict``;
* for kinds with a status subresource, spec writes cannot change status and status writes cannot
  change anything else; status sent on create is dropped, as the API server does;
* built-in defaulting flows read back is applied (workload ``replicas: 1``, Job defaults, Secret
  ``stringData`` folded into base64 ``data``, the Namespace name label);
* deleting an object with finalizers only marks it (``deletionTimestamp``); it goes once the last
  finalizer is removed, and no new finalizer may be added meanwhile (``Invalid``);
* a label selector with an empty value set (``in ()``, ``notin ()``) is ``Invalid``.

:class:`LocalCluster` is the Cluster API over a :class:`~tasks.clients.cluster.local_store.LocalStore`, which owns the
files, their layout, the index, the resourceVersion counter and the locks (see :mod:`tasks.clients.cluster.local_store`);
this module decides what each call does to an object, as the API server would.
"""

from __future__ import annotations

import copy
import functools
import json
import time
import uuid
from collections.abc import Iterator

from pydantic import ValidationError

from engine.api.identity import identity_errors
from engine.api.validate import format_path
from engine.api.views import ScaleTarget
from tasks.clients.cluster.base import Manifest, ObjectRef, Scale, WatchEvent
from tasks.clients.cluster.errors import Conflict, Invalid, NotFound
from tasks.clients.cluster.local_index import Key, key_of
from tasks.clients.cluster.local_store import LocalStore
from tasks.clients.cluster.objects import (
    apply_builtin_defaults,
    apply_patch_of,
    json_shape,
    merge_patch,
    now_rfc3339,
    parse_selector,
    selector_matches,
    spec_part,
)
from tasks.clients.cluster.recorder import EventRecorder
from tasks.clients.cluster.resources import ResourceInfo
from tasks.clients.cluster.schema import check_write

_IMMUTABLE_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
)


class LocalCluster(LocalStore):
    """A :class:`~tasks.clients.cluster.base.Cluster` backed by YAML manifests on disk (see module docs).

    ``LocalCluster(path, *, write_back=True, strict=False, max_events=1000)``: see :class:`LocalStore`.
    """

    # ------------------------------------------------------------------ Cluster API

    runs_pods = False
    """No Pods run here: fills run in this process and each PVC is a directory (``tasks.warm_caches``)."""
    validates_schemas = False
    """Nothing validated these files: the boundary reader checks each custom resource against its CRD schema."""

    @property
    def unreadable(self) -> list[str]:
        """The manifest files and documents that could not be loaded, each with why."""
        return [f"{error.path}: {error.message}" for error in self.load_errors]

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Manifest:
        """Read one object (a deep copy)."""
        with self._reading():
            return copy.deepcopy(self._find(self._kinds.resource(api_version, kind), name, namespace).obj)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Manifest]:
        """Objects of a kind, by namespace then name; ``namespace=None`` means all namespaces."""
        requirements = parse_selector(label_selector)
        with self._reading():
            info = self._kinds.resource(api_version, kind)  # after the files were looked at: a CRD may have come
            found = []
            for key in self._index.candidates(api_version, kind, requirements):
                obj = self._index[key].obj
                if (namespace is None or not info.namespaced or key[2] == namespace) and selector_matches(
                    requirements, obj["metadata"].get("labels")
                ):
                    found.append(copy.deepcopy(obj))
        return found

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        timeout_s: float = 30.0,
        poll_s: float = 1.0,
    ) -> Iterator[WatchEvent]:
        """The objects now as ``ADDED``, then what changed in the files (writes by this or another process,
        hand edits) as ``ADDED``/``MODIFIED``/``DELETED``, found by re-reading them every ``poll_s`` seconds
        (by resourceVersion, as an API server's watch reports them) until ``timeout_s`` seconds pass."""
        deadline = time.monotonic() + timeout_s
        seen: dict[Key, Manifest] = {}
        for obj in self.list(api_version, kind, namespace):
            seen[key_of(obj)] = obj
            yield WatchEvent("ADDED", obj)
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(poll_s, remaining))
            now = {key_of(obj): obj for obj in self.list(api_version, kind, namespace)}
            for key, obj in now.items():
                before = seen.get(key)
                if before is None:
                    yield WatchEvent("ADDED", obj)
                elif before["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                    yield WatchEvent("MODIFIED", obj)
            for key in seen.keys() - now.keys():
                yield WatchEvent("DELETED", seen[key])
            seen = now

    def create(self, obj: Manifest) -> Manifest:
        """Store a new object; ``Conflict`` if it exists. Returns it as stored."""
        with self._writing():
            info = self._kinds.resource(obj.get("apiVersion", ""), obj.get("kind", ""))
            new = self._prepare_create(info, obj)
            if key_of(new) in self._index:
                raise Conflict(
                    f'{info.resource} "{new["metadata"]["name"]}" already exists',
                    reason="AlreadyExists",
                )
            self._insert(info, new)
            return copy.deepcopy(new)

    def apply(self, obj: Manifest) -> Manifest:
        """Create, or merge-patch labels/annotations and everything but metadata/status if it exists."""
        ref = ObjectRef.of(obj)
        with self._writing():
            try:
                self.get(ref.api_version, ref.kind, ref.name, ref.namespace)
            except NotFound:
                return self.create(obj)
            return self.patch_spec(ref, apply_patch_of(obj))

    def patch_spec(self, ref: ObjectRef, patch: Manifest, resource_version: str | None = None) -> Manifest:
        """Merge-patch the object (not its status, for kinds with a status subresource)."""
        with self._writing():
            info, entry = self._find_ref(ref)
            _check_rv(info, entry.obj, resource_version)
            new = self._patched_main(info, entry.obj, patch)
            _refuse_new_finalizers(entry.obj, new)
            if _gone(new):
                self._remove(entry)
                return new
            return self._update(entry, new)

    def patch_status(self, ref: ObjectRef, status: Manifest, resource_version: str | None = None) -> Manifest:
        """Merge-patch ``status`` only, as the ``/status`` subresource does."""
        with self._writing():
            info, entry = self._find_ref(ref)
            info.require("status")
            _check_rv(info, entry.obj, resource_version)
            new = copy.deepcopy(entry.obj)
            merged = merge_patch(entry.obj.get("status") or {}, json_shape(status or {}, "status"))
            if merged:
                new["status"] = merged
            else:
                new.pop("status", None)
            return self._update(entry, check_write(new, entry.obj, status_only=True, schema=self._kinds.schema(new)))

    def get_scale(self, ref: ObjectRef) -> Scale:
        """``spec.replicas`` and ``status.replicas`` (0 until a status reports one) of a scalable kind."""
        with self._reading():
            info, entry = self._find_ref(ref)
            info.require("scale")
            return _scale_of(info, entry.obj)

    def set_scale(self, ref: ObjectRef, replicas: int) -> Scale:
        """Write ``spec.replicas`` as the scale subresource does (a spec change: generation advances)."""
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise Invalid(f"spec.replicas must be a non-negative integer, got {replicas!r}", field="spec.replicas")
        with self._writing():
            info, entry = self._find_ref(ref)
            info.require("scale")
            _scale_of(info, entry.obj)  # a Scale that cannot be read is not written either: Invalid, nothing changed
            new = self._patched_main(info, entry.obj, {"spec": {"replicas": replicas}})
            return _scale_of(info, self._update(entry, new))

    def delete(self, ref: ObjectRef) -> None:
        """Delete the object, or only mark it (``deletionTimestamp``) while it has finalizers."""
        with self._writing():
            _, entry = self._find_ref(ref)
            meta = entry.obj["metadata"]
            if not meta.get("finalizers"):
                self._remove(entry)
            elif "deletionTimestamp" not in meta:
                new = copy.deepcopy(entry.obj)
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                self._update(entry, new, force=True)

    @functools.cached_property
    def events(self) -> EventRecorder:
        """This cluster's Event recorder (created on first use, kept for the cluster's lifetime)."""
        return EventRecorder(self)

    def post_event(self, obj: Manifest, reason: str, message: str, event_type: str = "Normal") -> Manifest | None:
        """Record a core/v1 Event about ``obj`` in the Event sink (never in the manifests), aggregated as on a
        cluster (:mod:`tasks.clients.cluster.recorder`)."""
        return self.events.record(obj, reason, message, event_type)

    def source_of(self, obj: Manifest) -> str | None:
        """Where a stored object was read from, ``<file>:<line>`` (None when it is not stored here): what a
        report about an object points the person at."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        try:
            key = key_of({"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": meta})
        except (KeyError, TypeError):
            return None
        with self._lock:
            entry = self._index.get(key)
        return None if entry is None else f"{entry.file.path}:{entry.doc.line}"

    # ------------------------------------------------------------------ writes

    def _prepare_create(self, info: ResourceInfo, obj: Manifest) -> Manifest:
        """The object as the API server would store it on create."""
        new = json_shape(obj)
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise Invalid("metadata.name: Required value: name or generateName is required", field="metadata.name")
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        if info.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        errors = identity_errors(new)  # as the API server validates metadata on create
        if errors:
            raise Invalid.value(errors[0])
        for system in ("resourceVersion", "deletionTimestamp"):
            meta.pop(system, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if info.has_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        meta["resourceVersion"] = self._next_rv()
        if info.has_status:
            new.pop("status", None)
        return check_write(apply_builtin_defaults(new), None, schema=self._kinds.schema(new))

    def _patched_main(self, info: ResourceInfo, current: Manifest, patch: Manifest) -> Manifest:
        """``current`` merge-patched through the main resource: system metadata and status protected."""
        patch = json_shape(patch or {})
        meta_patch = patch.get("metadata") or {}
        if meta_patch.get("name") not in (None, current["metadata"]["name"]):
            raise Invalid(
                "metadata.name: the name of the object does not match the name on the URL", field="metadata.name"
            )
        patch.pop("apiVersion", None)
        patch.pop("kind", None)
        if info.has_status:
            patch.pop("status", None)
        new = check_write(
            apply_builtin_defaults(merge_patch(current, patch)), current, schema=self._kinds.schema(current)
        )
        if new["metadata"].get("annotations") != current["metadata"].get("annotations"):
            # as the API server validates metadata on update: annotation keys, and 256 KiB of them in all
            refused = [e for e in identity_errors(new) if e[0].startswith("metadata.annotations")]
            if refused:
                raise Invalid.value(refused[0])
        for key in _IMMUTABLE_META:
            if key in current["metadata"]:
                new["metadata"][key] = current["metadata"][key]
            else:
                new["metadata"].pop(key, None)
        if info.has_generation and _generation_changes(info, current, new):
            new["metadata"]["generation"] = int(current["metadata"].get("generation") or 0) + 1
        return new


def _generation_changes(info: ResourceInfo, current: Manifest, new: Manifest) -> bool:
    """Whether a main-resource write advances ``generation``: any spec change, and for an apps/v1
    Deployment also an annotation change (as the Deployment strategy does)."""
    if spec_part(new) != spec_part(current):
        return True
    if info.group == "apps" and info.kind == "Deployment":
        return (new["metadata"].get("annotations") or {}) != (current["metadata"].get("annotations") or {})
    return False


def _check_rv(info: ResourceInfo, obj: Manifest, resource_version: str | None) -> None:
    """``Conflict`` when a precondition resourceVersion is not the stored one."""
    if resource_version is not None and str(resource_version) != obj["metadata"]["resourceVersion"]:
        raise Conflict(
            f'Operation cannot be fulfilled on {info.resource} "{obj["metadata"]["name"]}": '
            "the object has been modified; please apply your changes to the latest version and try again"
        )


def _refuse_new_finalizers(old: Manifest, new: Manifest) -> None:
    """``Invalid`` when a write adds a finalizer to an object being deleted, as the API server refuses it (a
    finalizer added then could hold the object forever)."""
    if not old["metadata"].get("deletionTimestamp"):
        return
    before = old["metadata"].get("finalizers") or ()
    added = [f for f in new["metadata"].get("finalizers") or () if f not in before]
    if added:
        found = ", ".join(json.dumps(f) for f in added)
        raise Invalid(
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, "
            f"found new finalizers []string{{{found}}}",
            field="metadata.finalizers",
        )


def _gone(obj: Manifest) -> bool:
    """A marked-for-deletion object whose last finalizer was just removed."""
    meta = obj["metadata"]
    return "deletionTimestamp" in meta and not meta.get("finalizers")


def _scale_of(info: ResourceInfo, obj: Manifest) -> Scale:
    """The Scale view of an object: desired replicas, observed replicas and label selector; ``Invalid`` naming the
    field when a hand-written object holds no count where the Scale reads one (an API server could not serve it)."""
    try:
        target = ScaleTarget.model_validate(obj)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise Invalid.value((format_path(error["loc"]), error["msg"])) from None
    default = 1 if info.group == "apps" else 0
    return Scale(
        replicas=target.spec.replicas if target.spec.replicas is not None else default,
        status_replicas=target.status.replicas or 0,  # the API server's Scale always reports it
        selector=target.selector(),
        resource_version=obj["metadata"]["resourceVersion"],
    )


__all__ = ["LocalCluster"]
