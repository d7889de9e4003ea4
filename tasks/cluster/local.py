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
  finalizer is removed.

Layout on disk. Directory mode loads every ``*.yaml``/``*.yml``/``*.json`` below the directory (hidden files and
directories are skipped), including ``kind: List`` documents as written by ``kubectl get -o yaml``.
New objects go to ``<dir>/<namespace>/<kind>-<name>.yaml`` (``<dir>/_cluster/...`` when
cluster-scoped). Single-file mode appends new objects to the file. Events never go into the
manifests: they are kept in ``<dir>/.modelplane-events.yaml``, or ``<stem>.events.yaml`` next to a
single file, and are listed like any other object (the newest ``max_events`` are kept).

Writes are atomic (temp file + fsync + ``os.replace``) and rewrite only the changed document: the
other documents of the file keep their exact text and order, other files are untouched. A file that
does not parse is reported in :attr:`LocalCluster.load_errors` (with its name) and never written;
everything else still loads. Changes made to the files by another process are picked up before the
next operation, and writes from several processes are serialised with an ``flock`` on a hidden lock
file (``.modelplane.lock`` in a directory, ``.<file>.lock`` beside a single file), so concurrent
flows get ``Conflict`` exactly as they would from an API server. With ``write_back=False`` the files
are a read-only snapshot: writes happen in memory only (handy to preview what a flow would do to a
``kubectl get -o yaml`` dump).
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: thread safety only
    fcntl = None  # type: ignore[assignment]

from tasks.cluster.base import Manifest, ObjectRef, Scale, WatchEvent
from tasks.cluster.bookkeeping import Bookkeeping
from tasks.cluster.errors import Conflict, Invalid, NotFound, Unavailable
from tasks.cluster.objects import (
    apply_builtin_defaults,
    apply_patch_of,
    build_event,
    json_shape,
    merge_patch,
    now_rfc3339,
    parse_selector,
    selector_matches,
    spec_part,
)
from tasks.cluster.resources import ResourceInfo, lookup, resource_for
from tasks.cluster.schema import check_write, normalised
from tasks.cluster.yamlfile import Document, YamlFile, atomic_write, file_stamp, read_file

log = logging.getLogger(__name__)

DIR_EVENTS_FILE = ".modelplane-events.yaml"
"""Name of the Event sink inside a state directory."""

_IMMUTABLE_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
)
_UID_NAMESPACE = uuid.UUID("6f1c1f4e-7d0b-4c55-9b7e-4d6f2a1b9c3e")

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" if cluster-scoped), name


@dataclass(frozen=True)
class LoadError:
    """A file that could not be loaded (it is left alone and never written)."""

    path: Path
    message: str


@dataclass
class _Entry:
    """Where an object lives: its file, its document and, inside a ``List`` document, its index."""

    obj: Manifest
    file: YamlFile
    doc: Document
    item: int | None = None


class LocalCluster:
    """A :class:`~tasks.cluster.base.Cluster` backed by YAML manifests on disk (see module docs)."""

    def __init__(
        self, path: str | Path, *, write_back: bool = True, strict: bool = False, max_events: int = 1000
    ) -> None:
        """Load ``path`` (a directory, or a ``.yaml``/``.yml`` file; created on first write if missing).

        ``strict`` raises ``Invalid`` naming the file when any file fails to parse, instead of only
        recording it in :attr:`load_errors`. The Event sink keeps the newest ``max_events`` Events
        (the API server expires Events too), so a scheduled flow cannot grow it without bound.
        """
        self.path = Path(path)
        self.write_back = write_back
        self.strict = strict
        self.max_events = max_events
        self.single_file = self.path.is_file() or (not self.path.exists() and self.path.suffix in MANIFEST_SUFFIXES)
        self._lock = threading.RLock()
        self._write_depth = 0
        self._rv = 0
        self._files: dict[Path, YamlFile] = {}
        self._index: dict[Key, _Entry] = {}
        self._stamps: dict[str, tuple[int, int, int] | None] = {}
        self.load_errors: list[LoadError] = []
        self._book = Bookkeeping(self.state_path, persist=write_back)
        self._load()

    # ------------------------------------------------------------------ loading

    @property
    def state_path(self) -> Path:
        """The hidden bookkeeping sidecar (see :mod:`tasks.cluster.bookkeeping`)."""
        if self.single_file:
            return self.path.with_name(f".{self.path.name}.state.json")
        return self.path / ".modelplane-state.json"

    @property
    def events_path(self) -> Path:
        """Where posted (and created) Events are stored."""
        if self.single_file:
            return self.path.with_name(f"{self.path.stem}.events{self.path.suffix or '.yaml'}")
        return self.path / DIR_EVENTS_FILE

    def _discover(self) -> dict[str, tuple[int, int, int]]:
        """The files that make up the state, by path string, with their stamps.

        One ``scandir`` pass with one ``stat`` per file and no ``Path`` objects: this runs before
        every operation, so it must stay cheap for thousands of files.
        """
        found: dict[str, tuple[int, int, int]] = {}
        if self.single_file:
            _stat_into(found, self.path)
        elif self.path.is_dir():
            found.update(_scan_manifests(str(self.path)))
        _stat_into(found, self.events_path)
        return found

    def _load(self) -> None:
        """(Re)read every file and rebuild the index; the resourceVersion counter never goes back.

        On a reload, an object whose content did not change keeps the resourceVersion (and
        creationTimestamp) it had in memory, and one that changed under an unchanged
        resourceVersion (a hand edit) gets a new one, so stale writers still get ``Conflict``.
        """
        previous = self._index
        events = str(self.events_path)
        order = sorted(self._discover(), key=lambda p: (p == events, p))  # stable; the Event sink last
        files = [read_file(Path(p)) for p in order]
        self._files = {f.path: f for f in files}
        self._stamps = {str(f.path): f.stamp for f in files}
        self._index = {}
        self.load_errors = [LoadError(f.path, f.error) for f in files if f.error]
        self.load_errors += [LoadError(f.path, message) for f in files for message in f.doc_errors]
        for err in self.load_errors:
            log.warning("local cluster: skipping %s", err.message)
        if self.strict and self.load_errors:
            raise Invalid("; ".join(e.message for e in self.load_errors), reason="InvalidYAML")
        entries = [e for f in files if not f.error for e in self._entries_of(f)]
        self._book.load()
        self._rv = max([self._rv, self._book.counter] + [_numeric_rv(e.obj) for e in entries])
        for entry in entries:
            self._normalise(entry)
            key = _key_of(entry.obj)
            if key in self._index:
                self.load_errors.append(LoadError(entry.file.path, f"{entry.file.path}: duplicate object {key}"))
                continue
            if key in previous:
                self._carry_over(previous[key].obj, entry.obj)
            self._index[key] = entry

    def _carry_over(self, before: Manifest, after: Manifest) -> None:
        """Keep bookkeeping stable across a reload: same content, same version; new content, new one."""
        volatile = ("resourceVersion", "creationTimestamp")
        old_meta, new_meta = before["metadata"], after["metadata"]
        if _without(before, volatile) == _without(after, volatile):
            for key in volatile:
                new_meta[key] = old_meta[key]
        elif new_meta["resourceVersion"] == old_meta["resourceVersion"]:
            new_meta["resourceVersion"] = self._next_rv()

    def _entries_of(self, yfile: YamlFile) -> Iterator[_Entry]:
        """Every object of a file: plain documents and the items of ``kind: *List`` documents."""
        for doc in yfile.docs:
            data = doc.data
            if not isinstance(data, dict):
                continue
            if str(data.get("kind", "")).endswith("List") and isinstance(data.get("items"), list):
                for i, item in enumerate(data["items"]):
                    if _is_object(item):
                        yield _Entry(item, yfile, doc, i)
            elif _is_object(data):
                yield _Entry(data, yfile, doc)

    def _normalise(self, entry: _Entry) -> None:
        """Fill in what the API server would have set, in memory only (the document stays clean)."""
        obj = normalised(apply_builtin_defaults(entry.obj))
        meta = obj.setdefault("metadata", {})
        info = lookup(obj["apiVersion"], obj["kind"])
        if info is not None and info.namespaced:
            meta.setdefault("namespace", "default")
        elif info is not None:
            meta.pop("namespace", None)
        if meta.get("resourceVersion") in (None, ""):
            self._book.restore("/".join(_key_of(obj)), obj, self._next_rv)
        if "uid" not in meta:
            meta["uid"] = str(uuid.uuid5(_UID_NAMESPACE, "/".join(_key_of(obj))))
        if "creationTimestamp" not in meta:
            stamp = entry.file.stamp[0] / 1e9 if entry.file.stamp else datetime.now(UTC).timestamp()
            meta["creationTimestamp"] = datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if meta.get("resourceVersion") in (None, ""):
            meta["resourceVersion"] = self._next_rv()
        meta["resourceVersion"] = str(meta["resourceVersion"])  # hand-written files may say 5, not "5"
        if info is None or info.has_generation:
            meta.setdefault("generation", 1)

    def _refresh(self) -> None:
        """Reload when another process changed, added or removed a file since we last looked."""
        if not self.write_back:
            return
        if self._discover() != self._stamps:
            self._load()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Hold the thread lock and look at the files first (reads need no inter-process lock:
        files are replaced atomically, so they are always whole)."""
        with self._lock:
            self._refresh()
            yield

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the thread lock and, across processes, an exclusive ``flock`` on the lock file for
        the whole read-check-write, so another process's concurrent write is either seen (and a
        stale ``resourceVersion`` conflicts) or waits. Re-entrant within one LocalCluster."""
        with self._lock:
            handle = self._acquire_file_lock() if self._write_depth == 0 else None
            self._write_depth += 1
            try:
                self._refresh()
                yield
            finally:
                self._write_depth -= 1
                if handle is not None:
                    handle.close()  # closing the descriptor releases the flock

    @property
    def lock_path(self) -> Path:
        """The inter-process lock file (hidden, so the loader never reads it)."""
        if self.single_file:
            return self.path.with_name(f".{self.path.name}.lock")
        return self.path / ".modelplane.lock"

    def _acquire_file_lock(self) -> IO[bytes] | None:
        if not self.write_back or fcntl is None:
            return None
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.lock_path, "ab")  # noqa: SIM115 - closed by _writing
        except OSError as exc:
            raise Unavailable(f"cannot open lock file {self.lock_path}: {exc.strerror or exc}") from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        return handle

    def _next_rv(self) -> str:
        self._rv = max(self._rv, self._book.counter) + 1
        self._book.counter = self._rv
        return str(self._rv)

    # ------------------------------------------------------------------ lookups

    def _find(self, info: ResourceInfo, name: str, namespace: str | None) -> _Entry:
        entry = self._index.get(_key(info, name, namespace))
        if entry is None:
            where = f" in namespace {_ns(info, namespace)!r}" if info.namespaced else ""
            raise NotFound(f'{info.plural}.{info.group or "core"} "{name}" not found{where}')
        return entry

    def _find_ref(self, ref: ObjectRef) -> tuple[ResourceInfo, _Entry]:
        info = resource_for(ref.api_version, ref.kind)
        return info, self._find(info, ref.name, ref.namespace)

    # ------------------------------------------------------------------ Cluster API

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Manifest:
        """Read one object (a deep copy)."""
        with self._reading():
            return copy.deepcopy(self._find(resource_for(api_version, kind), name, namespace).obj)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Manifest]:
        """Objects of a kind, by namespace then name; ``namespace=None`` means all namespaces."""
        info = resource_for(api_version, kind)
        requirements = parse_selector(label_selector)
        with self._reading():
            found = [
                copy.deepcopy(entry.obj)
                for (av, k, ns, _), entry in sorted(self._index.items())
                if av == api_version
                and k == kind
                and (namespace is None or not info.namespaced or ns == namespace)
                and selector_matches(requirements, entry.obj["metadata"].get("labels"))
            ]
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
            seen[_key_of(obj)] = obj
            yield WatchEvent("ADDED", obj)
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(poll_s, remaining))
            now = {_key_of(obj): obj for obj in self.list(api_version, kind, namespace)}
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
        info = resource_for(obj.get("apiVersion", ""), obj.get("kind", ""))
        with self._writing():
            new = self._prepare_create(info, obj)
            if _key_of(new) in self._index:
                raise Conflict(
                    f'{info.plural}.{info.group or "core"} "{new["metadata"]["name"]}" already exists',
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
            if _gone(new):
                self._remove(entry)
                return new
            return self._update(entry, new)

    def patch_status(self, ref: ObjectRef, status: Manifest, resource_version: str | None = None) -> Manifest:
        """Merge-patch ``status`` only, as the ``/status`` subresource does."""
        with self._writing():
            info, entry = self._find_ref(ref)
            if not info.has_status:
                raise NotFound(f"{info.plural}.{info.group or 'core'} has no status subresource")
            _check_rv(info, entry.obj, resource_version)
            new = copy.deepcopy(entry.obj)
            merged = merge_patch(entry.obj.get("status") or {}, json_shape(status or {}, "status"))
            if merged:
                new["status"] = merged
            else:
                new.pop("status", None)
            return self._update(entry, check_write(new, entry.obj, status_only=True))

    def get_scale(self, ref: ObjectRef) -> Scale:
        """``spec.replicas`` and ``status.replicas`` (0 until a status reports one) of a scalable kind."""
        with self._reading():
            info, entry = self._find_ref(ref)
            _require_scale(info)
            return _scale_of(info, entry.obj)

    def set_scale(self, ref: ObjectRef, replicas: int) -> Scale:
        """Write ``spec.replicas`` as the scale subresource does (a spec change: generation advances)."""
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise Invalid(f"spec.replicas must be a non-negative integer, got {replicas!r}", field="spec.replicas")
        with self._writing():
            info, entry = self._find_ref(ref)
            _require_scale(info)
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

    def post_event(self, obj: Manifest, reason: str, message: str, event_type: str = "Normal") -> Manifest:
        """Record a core/v1 Event about ``obj`` in the Event sink (never in the manifests)."""
        return self.create(build_event(obj, reason, message, event_type))

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
        return check_write(apply_builtin_defaults(new), None)

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
        new = check_write(apply_builtin_defaults(merge_patch(current, patch)), current)
        for key in _IMMUTABLE_META:
            if key in current["metadata"]:
                new["metadata"][key] = current["metadata"][key]
            else:
                new["metadata"].pop(key, None)
        if info.has_generation and _generation_changes(info, current, new):
            new["metadata"]["generation"] = int(current["metadata"].get("generation") or 0) + 1
        return new

    def _update(self, entry: _Entry, new: Manifest, force: bool = False) -> Manifest:
        """Store a changed object under a new resourceVersion; a no-op write stores nothing."""
        if new == entry.obj and not force:
            return copy.deepcopy(entry.obj)
        _refuse_malformed(entry.file, new)
        new = copy.deepcopy(new)
        new["metadata"]["resourceVersion"] = self._next_rv()
        old, was_dirty = entry.obj, entry.doc.dirty
        self._place(entry, new)
        try:
            self._flush(entry.file)
        except OSError as exc:
            self._place(entry, old)
            entry.doc.dirty = was_dirty
            raise Unavailable(f"cannot write {entry.file.path}: {exc.strerror or exc}") from None
        self._book.remember("/".join(_key_of(new)), new)
        self._save_book()
        return copy.deepcopy(new)

    def _place(self, entry: _Entry, obj: Manifest) -> None:
        """Put ``obj`` where ``entry`` lives (its document, or its slot in a List document); only the
        fields that differ from the stored object are rewritten in the file."""
        entry.doc.update(entry.obj, obj, entry.item)
        entry.obj = obj

    def _insert(self, info: ResourceInfo, obj: Manifest) -> None:
        """Add a new object to the file it belongs in, and to the index."""
        yfile = self._target_file(info, obj)
        _refuse_malformed(yfile, obj)
        doc = yfile.append(obj)
        if yfile.path == self.events_path:
            self._prune_events(yfile)
        try:
            self._flush(yfile)
        except OSError as exc:
            yfile.docs.remove(doc)
            raise Unavailable(f"cannot write {yfile.path}: {exc.strerror or exc}") from None
        self._files[yfile.path] = yfile
        self._index[_key_of(obj)] = _Entry(obj, yfile, doc)
        self._save_book()

    def _prune_events(self, sink: YamlFile) -> None:
        """Drop the oldest Events (by resourceVersion) beyond ``max_events`` from the sink."""
        events = [e for e in self._index.values() if e.file is sink and e.item is None]
        excess = len(events) + 1 - self.max_events  # +1: the Event being added is not indexed yet
        for entry in sorted(events, key=lambda e: _numeric_rv(e.obj))[: max(excess, 0)]:
            sink.docs.remove(entry.doc)
            self._index.pop(_key_of(entry.obj), None)

    def _target_file(self, info: ResourceInfo, obj: Manifest) -> YamlFile:
        """The file a new object goes to (Events: the sink; directory: one file per object)."""
        if obj["kind"] == "Event" and info.is_core:
            path = self.events_path
        elif self.single_file:
            path = self.path
        else:
            folder = obj["metadata"].get("namespace") or "_cluster"
            path = self.path / folder / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        return self._files.get(path) or YamlFile(path=path)

    def _remove(self, entry: _Entry) -> None:
        """Drop an object from its file (the file goes too in directory mode when nothing is left)."""
        yfile, doc = entry.file, entry.doc
        _refuse_malformed(yfile, entry.obj)
        if entry.item is None:
            yfile.docs.remove(doc)
        else:
            doc.remove_item(entry.item)
            for other in self._index.values():
                if other.doc is doc and other.item is not None and other.item > entry.item:
                    other.item -= 1
        self._index.pop(_key_of(entry.obj), None)
        try:
            self._flush(yfile)
        except OSError as exc:
            self._load()
            raise Unavailable(f"cannot write {yfile.path}: {exc.strerror or exc}") from None
        self._book.forget("/".join(_key_of(entry.obj)))
        self._save_book()

    def _save_book(self) -> None:
        """Persist the counter and records (a failure only costs bookkeeping, never the write)."""
        if not self.write_back:
            return
        try:
            self._book.save()
        except OSError as exc:
            log.warning("local cluster: cannot write %s: %s", self.state_path, exc.strerror or exc)

    def _flush(self, yfile: YamlFile) -> None:
        """Write one file back atomically (or, in snapshot mode, not at all)."""
        if not self.write_back:
            return
        if yfile.is_empty() and not self.single_file:
            yfile.path.unlink(missing_ok=True)
            self._files.pop(yfile.path, None)
            self._stamps.pop(str(yfile.path), None)
            return
        yfile.stamp = atomic_write(yfile.path, yfile.render())
        self._stamps[str(yfile.path)] = yfile.stamp
        for doc in yfile.docs:
            doc.written()


def _generation_changes(info: ResourceInfo, current: Manifest, new: Manifest) -> bool:
    """Whether a main-resource write advances ``generation``: any spec change, and for an apps/v1
    Deployment also an annotation change (as the Deployment strategy does)."""
    if spec_part(new) != spec_part(current):
        return True
    if info.group == "apps" and info.kind == "Deployment":
        return (new["metadata"].get("annotations") or {}) != (current["metadata"].get("annotations") or {})
    return False


def _refuse_malformed(yfile: YamlFile, obj: Manifest) -> None:
    """``Invalid`` when ``yfile`` must not be written (unreadable, or holding a malformed document):
    rewriting it could lose what the operator is in the middle of fixing."""
    problem = yfile.writable_error
    if problem:
        meta = obj.get("metadata") or {}
        raise Invalid(f"cannot write {obj.get('kind')} {meta.get('name')!r} into {problem}", reason="InvalidYAML")


def _stat_into(found: dict[str, tuple[int, int, int]], path: Path) -> None:
    """Add ``path`` with its stamp when it is an existing file."""
    stamp = file_stamp(path)
    if stamp is not None and path.is_file():
        found[str(path)] = stamp


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
"""Manifest files a directory is read from: YAML, and JSON (a YAML subset: ``kubectl get -o json`` dumps)."""


def manifest_paths(path: Path) -> list[Path]:
    """The manifest files of a state, sorted: the file itself, or every ``*.yaml``/``*.yml``/``*.json`` below a
    directory with hidden entries (such as the Event sink) left out, as :class:`LocalCluster` reads them."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(Path(found) for found, _ in _scan_manifests(str(path)))


def _scan_manifests(root: str) -> Iterator[tuple[str, tuple[int, int, int]]]:
    """Every manifest file (:data:`MANIFEST_SUFFIXES`) below ``root`` with its stamp, skipping hidden entries."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=True):
                stack.append(entry.path)
            elif (
                entry.name.endswith(MANIFEST_SUFFIXES)
                and entry.is_file(follow_symlinks=True)
                and (not entry.name.endswith(".json") or _looks_like_manifest(entry.path))
            ):
                st = entry.stat()
                yield entry.path, (st.st_mtime_ns, st.st_size, st.st_ino)


def _looks_like_manifest(path: str) -> bool:
    """Whether a ``.json`` file is a Kubernetes manifest (an ``apiVersion`` near its start), not some other
    JSON that lives beside the manifests (a model's ``config.json``, a tokenizer)."""
    try:
        with open(path, "rb") as handle:
            return b'"apiVersion"' in handle.read(4096)
    except OSError:
        return False


def _without(obj: Manifest, meta_keys: tuple[str, ...]) -> Manifest:
    """``obj`` minus some metadata keys (for comparing content across reloads)."""
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k not in meta_keys}}


def _is_object(data: Any) -> bool:
    """A document that is a Kubernetes object (has apiVersion, kind and metadata.name)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("apiVersion"), str)
        and isinstance(data.get("kind"), str)
        and isinstance(data.get("metadata"), dict)
        and bool(data["metadata"].get("name"))
    )


def _ns(info: ResourceInfo, namespace: str | None) -> str:
    return (namespace or "default") if info.namespaced else ""


def _key(info: ResourceInfo, name: str, namespace: str | None) -> Key:
    return (info.api_version, info.kind, _ns(info, namespace), name)


def _key_of(obj: Manifest) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])


def _numeric_rv(obj: Manifest) -> int:
    value = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(value) if value.isdigit() else 0


def _check_rv(info: ResourceInfo, obj: Manifest, resource_version: str | None) -> None:
    """``Conflict`` when a precondition resourceVersion is not the stored one."""
    if resource_version is not None and str(resource_version) != obj["metadata"]["resourceVersion"]:
        raise Conflict(
            f'Operation cannot be fulfilled on {info.plural}.{info.group or "core"} "{obj["metadata"]["name"]}": '
            "the object has been modified; please apply your changes to the latest version and try again"
        )


def _gone(obj: Manifest) -> bool:
    """A marked-for-deletion object whose last finalizer was just removed."""
    meta = obj["metadata"]
    return "deletionTimestamp" in meta and not meta.get("finalizers")


def _require_scale(info: ResourceInfo) -> None:
    if not info.has_scale:
        raise NotFound(f"{info.plural}.{info.group or 'core'} has no scale subresource")


def _scale_of(info: ResourceInfo, obj: Manifest) -> Scale:
    """The Scale view of an object: desired replicas, observed replicas and label selector."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    default = 1 if info.group == "apps" else 0
    selector = status.get("selector")
    match_labels = (spec.get("selector") or {}).get("matchLabels") if isinstance(spec.get("selector"), dict) else None
    if selector is None and match_labels:
        selector = ",".join(f"{k}={v}" for k, v in match_labels.items())
    return Scale(
        replicas=int(spec.get("replicas", default)),
        status_replicas=int(status.get("replicas") or 0),  # the API server's Scale always reports it
        selector=selector,
        resource_version=obj["metadata"]["resourceVersion"],
    )


__all__ = ["LocalCluster", "LoadError", "DIR_EVENTS_FILE"]
