"""Where the local backend keeps its objects: YAML files on disk, an index of them, and the locks around both.

:class:`LocalStore` is the storage half of :class:`tasks.clients.cluster.local.LocalCluster` (which adds the API
server's semantics on top): it loads the files into an index keyed by (apiVersion, kind, namespace, name),
fills in in memory what the API server would have set (uid, creationTimestamp, resourceVersion,
generation) without rewriting a file just for loading, keeps the resourceVersion counter (one per store,
started above the highest numeric ``resourceVersion`` on disk, with :mod:`tasks.clients.cluster.bookkeeping`
persisting it), and writes one changed document back at a time.

Layout on disk. Directory mode loads every ``*.yaml``/``*.yml``/``*.json`` below the directory (hidden files and
directories are skipped; one reached again through a symbolic link is read once), including ``kind: List`` documents as
written by ``kubectl get -o yaml``. New objects go to ``<dir>/<namespace>/<kind>-<name>.yaml`` (``<dir>/_cluster/...``
when cluster-scoped). Single-file mode appends new objects to the file. Events never go into the manifests: they are
kept in ``<dir>/.modelplane-events.yaml``, or ``<stem>.events.yaml`` next to a single file, and are listed like any
other object (the newest ``max_events`` are kept).

Writes are atomic (temp file + fsync + ``os.replace``) and rewrite only the changed document: the
other documents of the file keep their exact text and order, other files are untouched. A file that does not parse
or cannot be read (a named pipe, a device, a link loop: never opened) is reported in :attr:`LocalStore.load_errors`
(with its name) and never written; CustomResourceDefinition documents in the files serve their kinds in this store, as
installing them serves them on a cluster (scope, subresources and schema; the built-in kinds and Modelplane's own keep
theirs); everything else still loads. Changes made to the files by another process (or by hand) are picked up before
the next operation: in directory mode the kernel reports which files changed (:mod:`tasks.clients.cluster.dirwatch`)
and only those are read again, so an operation costs O(objects it touches), not O(files); where that cannot
be followed (no inotify, symbolic links in the tree, a directory added or removed) every file is ``stat``-ed
before each operation and all are read again when one changed. In both cases and writes from several processes are serialised with an ``flock`` on a hidden lock
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

from engine.api.identity import body_errors, identity_errors
from tasks.clients.cluster.base import Manifest, ObjectRef
from tasks.clients.cluster.bookkeeping import Bookkeeping
from tasks.clients.cluster.dirwatch import DirectoryWatch, open_watch
from tasks.clients.cluster.errors import Forbidden, Invalid, NotFound, Unavailable
from tasks.clients.cluster.local_index import Entry, Index, Key, key_of
from tasks.clients.cluster.local_kinds import CRD_KIND, FolderKinds, is_crd
from tasks.clients.cluster.local_paths import (
    MANIFEST_SUFFIXES,
    Stamp,
    discover,
    manifest_changes,
    manifest_entry,
    manifest_paths,
    missing_parents,
    stamp_of,
)
from tasks.clients.cluster.objects import apply_builtin_defaults
from tasks.clients.cluster.resources import ResourceInfo
from tasks.clients.cluster.schema import normalised
from tasks.clients.cluster.yamlfile import Document, YamlFile, atomic_write, read_file
from tasks.clients.files import open_own, remove_planted_link

MAX_TOTAL_BYTES = 256 * 1024 * 1024
"""The most bytes the manifest files of one local cluster folder may hold together (each file at most
:data:`tasks.clients.cluster.yamlfile.MAX_FILE_BYTES`); beyond it every operation fails with one error saying so,
rather than a run that reads for minutes and takes gigabytes."""

log = logging.getLogger("tasks.clients.cluster.local")  # one logger for the whole local backend

DIR_EVENTS_FILE = ".modelplane-events.yaml"
"""Name of the Event sink inside a state directory."""


_UID_NAMESPACE = uuid.UUID("6f1c1f4e-7d0b-4c55-9b7e-4d6f2a1b9c3e")


@dataclass(frozen=True)
class LoadError:
    """A file that could not be loaded (it is left alone and never written)."""

    path: Path
    message: str


class LocalStore:
    """The files, the index and the locks of a local cluster state (see module docs); no API semantics."""

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
        self._index = Index()
        self._stamps: dict[str, Stamp | None] = {}
        self._stale = False  # a load or reload failed partway: the next operation loads everything again
        self._watch: DirectoryWatch | None = None
        self._watch_tried = False
        self.load_errors: list[LoadError] = []
        self._kinds = FolderKinds()
        self._book = Bookkeeping(self.state_path, persist=write_back)
        self._load()

    # ------------------------------------------------------------------ loading

    @property
    def state_path(self) -> Path:
        """The hidden bookkeeping sidecar (see :mod:`tasks.clients.cluster.bookkeeping`)."""
        if self.single_file:
            return self.path.with_name(f".{self.path.name}.state.json")
        return self.path / ".modelplane-state.json"

    @property
    def events_path(self) -> Path:
        """Where posted (and created) Events are stored."""
        if self.single_file:
            return self.path.with_name(f"{self.path.stem}.events{self.path.suffix or '.yaml'}")
        return self.path / DIR_EVENTS_FILE

    def _discover(self) -> tuple[dict[str, Stamp], dict[str, str]]:
        """The state's files with their stamps, and the entries refused instead of read (:func:`discover`)."""
        return discover(self.path, self.single_file, self.events_path)

    def _load(self) -> None:
        """(Re)read every file and rebuild the index; the resourceVersion counter never goes back.

        On a reload, an object whose content did not change keeps the resourceVersion (and
        creationTimestamp) it had in memory, and one that changed under an unchanged
        resourceVersion (a hand edit) gets a new one, so stale writers still get ``Conflict``.
        The new files, stamps, index, errors and kinds replace the old ones only once all are built: a load that
        raises partway (whatever the exception) leaves the previous state, and the next operation loads again.
        """
        self._stale = True
        previous = self._index
        self._open_watch()  # before reading: a change made while the files are read is reported next time
        events = str(self.events_path)
        found, refused = self._discover()
        total = sum(stamp[1] for path, stamp in found.items() if path not in refused)
        if total > MAX_TOTAL_BYTES:
            raise Invalid(
                f"{self.path}: its manifest files hold {total} bytes, more than the {MAX_TOTAL_BYTES} bytes a local "
                "cluster folder may hold: use a Kubernetes API server for a cluster this large",
                reason="TooLarge",
            )
        order = sorted(found, key=lambda p: (p == events, p))  # stable; the Event sink last
        files = [read_file(Path(p)) for p in order if p not in refused]
        stamps = {str(f.path): f.stamp for f in files} | {p: found[p] for p in refused}
        errors = [LoadError(Path(p), refused[p]) for p in order if p in refused]
        errors += [LoadError(f.path, f.error) for f in files if f.error]
        errors += [LoadError(f.path, message) for f in files for message in f.doc_errors]
        for err in errors:
            log.warning("local cluster: skipping %s", err.message)
        if self.strict and errors:
            raise Invalid("; ".join(e.message for e in errors), reason="InvalidYAML")
        entries = [e for f in files if not f.error for e in self._entries_of(f, errors)]
        kinds, index = FolderKinds(), Index()
        for path, message in kinds.rebuild((e.obj, e.file.path) for e in entries):
            log.warning("local cluster: skipping %s", message)
            errors.append(LoadError(path, message))
        self._book.load()
        self._rv = max([self._rv, self._book.counter] + [_numeric_rv(e.obj) for e in entries])
        for entry in entries:
            self._normalise(entry, kinds)
            key = key_of(entry.obj)
            if key in index:
                first = index[key]
                errors.append(
                    LoadError(
                        entry.file.path,
                        f"{entry.file.path}: document at line {_first_line(entry.doc)}: duplicate object {'/'.join(key)}, "
                        f"also in {first.file.path} (document at line {_first_line(first.doc)}): the first is used",
                    )
                )
                continue
            if key in previous:
                self._carry_over(previous[key].obj, entry.obj)
            index.add(key, entry)
        self._files, self._stamps, self._index = {f.path: f for f in files}, stamps, index
        self.load_errors, self._kinds, self._stale = errors, kinds, False

    def _carry_over(self, before: Manifest, after: Manifest) -> None:
        """Keep bookkeeping stable across a reload: same content, same version; new content, new one."""
        volatile = ("resourceVersion", "creationTimestamp")
        old_meta, new_meta = before["metadata"], after["metadata"]
        if _without(before, volatile) == _without(after, volatile):
            for key in volatile:
                new_meta[key] = old_meta[key]
        elif new_meta["resourceVersion"] == old_meta["resourceVersion"]:
            new_meta["resourceVersion"] = self._next_rv()

    def _entries_of(self, yfile: YamlFile, errors: list[LoadError]) -> Iterator[Entry]:
        """Every object of a file: plain documents and the items of ``kind: *List`` documents (the documents that
        are no object added to ``errors``)."""
        for doc in yfile.docs:
            data = doc.data
            if data is None:
                continue  # an empty document (a trailing ``---``)
            if (
                isinstance(data, dict)
                and str(data.get("kind", "")).endswith("List")
                and isinstance(data.get("items"), list)
            ):
                for i, item in enumerate(data["items"]):
                    if _is_object(item):
                        yield Entry(item, yfile, doc, i)
                    else:
                        self._not_an_object(yfile, _first_line(doc), item, errors, f"items[{i}]")
            elif _is_object(data):
                yield Entry(data, yfile, doc)
            else:
                self._not_an_object(yfile, _first_line(doc), data, errors)

    def _not_an_object(self, yfile: YamlFile, line: int, data: Any, errors: list[LoadError], where: str = "") -> None:
        """Report a document that is no Kubernetes object (a list, a scalar, no apiVersion, kind, metadata or
        name) with its file, line and field, as ``modelplane validate-manifests`` does: never silently dropped."""
        field, reason = (identity_errors(data) or [("metadata.namespace", "must be a string")])[0]
        field = ".".join(part for part in (where, field) if part)
        message = f"{yfile.path}: document at line {line}: {field or 'document'}: {reason}"
        log.warning("local cluster: skipping %s", message)
        errors.append(LoadError(yfile.path, message))

    def _normalise(self, entry: Entry, kinds: FolderKinds) -> None:
        """Fill in what the API server would have set, in memory only (the document stays clean), as ``kinds``
        serve the object's kind."""
        obj = normalised(apply_builtin_defaults(entry.obj), kinds.schema(entry.obj))
        meta = obj.setdefault("metadata", {})
        info = kinds.lookup(obj["apiVersion"], obj["kind"])
        if info is not None and info.namespaced:
            meta.setdefault("namespace", "default")
        elif info is not None:
            meta.pop("namespace", None)
        if meta.get("resourceVersion") in (None, ""):
            self._book.restore("/".join(key_of(obj)), obj, self._next_rv)
        if "uid" not in meta:
            meta["uid"] = str(uuid.uuid5(_UID_NAMESPACE, "/".join(key_of(obj))))
        if "creationTimestamp" not in meta:
            stamp = entry.file.stamp[0] / 1e9 if entry.file.stamp else datetime.now(UTC).timestamp()
            meta["creationTimestamp"] = datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if meta.get("resourceVersion") in (None, ""):
            meta["resourceVersion"] = self._next_rv()
        meta["resourceVersion"] = str(meta["resourceVersion"])  # hand-written files may say 5, not "5"
        if info is None or info.has_generation:
            meta.setdefault("generation", 1)

    def _refresh(self) -> None:
        """Catch up with what another process (or a person) changed, added or removed since we last looked:
        re-read only the files the directory watch names, or, without a watch, every file when any changed."""
        if not self.write_back:
            return
        if self._watch is None or self._stale:
            if (
                self._stale
                or (not self._watch_tried and not self.single_file and self.path.is_dir())
                or self._discover()[0] != self._stamps
            ):
                self._load()
            return
        changed = self._watch.changes()
        own = {self.state_path.name, self.lock_path.name, self.state_path.with_suffix(".journal").name}
        paths = None if changed is None else manifest_changes(changed, str(self.events_path), own)
        if paths is None:
            self._load()
            return
        if self._book.changed_on_disk():
            self._book.load()
        dirty = sorted(p for p in paths if stamp_of(p) != self._stamps.get(p))
        if dirty:
            self._reload(dirty)

    def _open_watch(self) -> None:
        """(Re)start watching the directory tree (directory mode, written back; see :mod:`tasks.clients.cluster.dirwatch`)."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self.write_back and not self.single_file and self.path.is_dir():
            self._watch_tried = True
            try:
                self._watch = open_watch(str(self.path), lambda name: name.endswith(MANIFEST_SUFFIXES))
            except OSError:  # an entry it cannot follow (a link loop): the scan reports it, and every file is stat-ed
                self._watch = None

    def _reload(self, paths: list[str]) -> None:
        """Re-read only ``paths`` (changed, added or removed by someone else) and update the index as a full
        :meth:`_load` would: unchanged objects keep their bookkeeping, changed ones get a new resourceVersion.
        A duplicate object (which copy wins depends on every file's name) makes it a full :meth:`_load`."""
        if any("duplicate object" in err.message for err in self.load_errors):
            self._load()
            return
        self._stale = True  # until the index holds every object re-read: a failure makes the next operation load all
        events = str(self.events_path)
        found = [f for f in map(manifest_entry, sorted(paths, key=lambda p: (p == events, p))) if f is not None]
        files = [read_file(Path(f.path)) for f in found if f.problem is None]
        previous: dict[Key, Entry] = {}
        for p in paths:
            for key in self._index.of_file(Path(p)):
                previous[key] = self._index[key]
                self._index.drop(key)
            self._files.pop(Path(p), None)
            self._stamps.pop(p, None)
        self.load_errors = [err for err in self.load_errors if str(err.path) not in paths]
        for path, stamp, problem in found:
            if problem is not None:
                log.warning("local cluster: skipping %s", problem)
                self._stamps[path] = stamp
                self.load_errors.append(LoadError(Path(path), problem))
        for f in files:
            self._files[f.path], self._stamps[str(f.path)] = f, f.stamp
            errors = [LoadError(f.path, f.error)] if f.error else []
            for err in errors + [LoadError(f.path, message) for message in f.doc_errors]:
                log.warning("local cluster: skipping %s", err.message)
                self.load_errors.append(err)
        if self.strict and self.load_errors:
            raise Invalid("; ".join(e.message for e in self.load_errors), reason="InvalidYAML")
        entries = [e for f in files if not f.error for e in self._entries_of(f, self.load_errors)]
        if any(is_crd(e.obj) for e in entries) or any(key[1] == CRD_KIND for key in previous):
            self._load()  # a kind starts or stops being served: every object of it reads differently
            return
        self._rv = max([self._rv, self._book.counter] + [_numeric_rv(e.obj) for e in entries])
        for entry in entries:
            self._normalise(entry, self._kinds)
            key = key_of(entry.obj)
            if key in self._index:
                self._load()
                return
            if key in previous:
                self._carry_over(previous[key].obj, entry.obj)
            self._index.add(key, entry)
        self._stale = False

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

    def lease_lock_path(self, name: str) -> Path:
        """The lock file standing in for the Lease ``name`` (:mod:`tasks.writer_lock`): hidden, beside
        :attr:`lock_path`, so the loader never reads it and per-write locking never waits on it."""
        if self.single_file:
            return self.path.with_name(f".{self.path.name}.{name}.lock")
        return self.path / f".{name}.lock"

    def _acquire_file_lock(self) -> IO[bytes] | None:
        if not self.write_back or fcntl is None:
            return None
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            handle = os.fdopen(open_own(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")
        except OSError as exc:
            raise Unavailable(f"cannot open lock file {self.lock_path}: {exc.strerror or exc}") from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        return handle

    def _next_rv(self) -> str:
        self._rv = max(self._rv, self._book.counter) + 1
        self._book.counter = self._rv
        return str(self._rv)

    # ------------------------------------------------------------------ lookups

    def _find(self, info: ResourceInfo, name: str, namespace: str | None) -> Entry:
        entry = self._index.get(_key(info, name, namespace))
        if entry is None:
            where = f" in namespace {_ns(info, namespace)!r}" if info.namespaced else ""
            raise NotFound(f'{info.resource} "{name}" not found{where}')
        return entry

    def _find_ref(self, ref: ObjectRef) -> tuple[ResourceInfo, Entry]:
        info = self._kinds.resource(ref.api_version, ref.kind)
        return info, self._find(info, ref.name, ref.namespace)

    # ------------------------------------------------------------------ writes

    def _update(self, entry: Entry, new: Manifest, force: bool = False) -> Manifest:
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
        self._book.remember("/".join(key_of(new)), new)
        self._save_book()
        return copy.deepcopy(new)

    def _place(self, entry: Entry, obj: Manifest) -> None:
        """Put ``obj`` where ``entry`` lives (its document, or its slot in a List document); only the
        fields that differ from the stored object are rewritten in the file."""
        entry.doc.update(entry.obj, obj, entry.item)
        self._index.relabel(key_of(obj), entry.obj, obj)
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
        self._index.add(key_of(obj), Entry(obj, yfile, doc))
        self._save_book()

    def _prune_events(self, sink: YamlFile) -> None:
        """Drop the oldest Events (by resourceVersion) beyond ``max_events`` from the sink."""
        in_sink = self._index.of_file(sink.path)
        if len(in_sink) + 1 <= self.max_events:  # the sink's objects only: O(1) per Event until it is full
            return
        events = [e for e in (self._index[key] for key in in_sink) if e.file is sink and e.item is None]
        excess = len(events) + 1 - self.max_events  # +1: the Event being added is not indexed yet
        for entry in sorted(events, key=lambda e: _numeric_rv(e.obj))[: max(excess, 0)]:
            sink.docs.remove(entry.doc)
            self._index.drop(key_of(entry.obj))

    def _target_file(self, info: ResourceInfo, obj: Manifest) -> YamlFile:
        """The file a new object goes to (Events: the sink; directory: one file per object)."""
        if obj["kind"] == "Event" and info.is_core:
            path = self.events_path
        elif self.single_file:
            path = self.path
        else:
            folder = obj["metadata"].get("namespace") or "_cluster"
            path = self.path / folder / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        return self._files.get(path) or YamlFile(path=self._inside(path))

    def _inside(self, path: Path) -> Path:
        """``path`` when it resolves (symbolic links followed) inside the state's directory; ``Forbidden``
        otherwise. A new file's path is built from an object's namespace and name: however those came to be,
        this backend never writes outside the folder it was given."""
        root = (self.path.parent if self.single_file else self.path).resolve()
        resolved = path.resolve()
        if resolved != root and root not in resolved.parents:
            raise Forbidden(f"refusing to write {path}: it resolves to {resolved}, outside {root}")
        return path

    def _remove(self, entry: Entry) -> None:
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
        self._index.drop(key_of(entry.obj))
        try:
            self._flush(yfile)
        except OSError as exc:
            self._load()
            raise Unavailable(f"cannot write {yfile.path}: {exc.strerror or exc}") from None
        self._book.forget("/".join(key_of(entry.obj)))
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
        created = missing_parents(yfile.path, self.path)
        if yfile.path == self.events_path:  # the backend's own file: a link planted there would take the Events out
            remove_planted_link(yfile.path)
        yfile.stamp = atomic_write(yfile.path, yfile.render())
        self._stamps[str(yfile.path)] = yfile.stamp
        if created and self._watch is not None:
            try:
                for directory in created:
                    self._watch.add(str(directory))
            except OSError:
                self._watch.close()  # cannot follow it: back to rescanning
                self._watch = None
        for doc in yfile.docs:
            doc.written()


def _refuse_malformed(yfile: YamlFile, obj: Manifest) -> None:
    """``Invalid`` when ``yfile`` must not be written (unreadable, or holding a malformed document):
    rewriting it could lose what the operator is in the middle of fixing."""
    problem = yfile.writable_error
    if problem:
        meta = obj.get("metadata") or {}
        raise Invalid(f"cannot write {obj.get('kind')} {meta.get('name')!r} into {problem}", reason="InvalidYAML")


def _without(obj: Manifest, meta_keys: tuple[str, ...]) -> Manifest:
    """``obj`` minus some metadata keys (for comparing content across reloads)."""
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k not in meta_keys}}


def _first_line(doc: Document) -> int:
    """The file line a document's content starts on (after its ``---``), as parse errors count it."""
    return doc.line + 1 if doc.has_marker else doc.line


def _is_object(data: Any) -> bool:
    """A document that is a Kubernetes object (has apiVersion, kind and metadata.name, a namespace if any, as
    strings, and a body the API server can decode: :func:`engine.api.identity.body_errors`). Whether the name is
    one the API server accepts is the boundary's check (``tasks/boundary.py``)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("apiVersion"), str)
        and isinstance(data.get("kind"), str)
        and isinstance(data.get("metadata"), dict)
        and isinstance(data["metadata"].get("name"), str)
        and bool(data["metadata"]["name"])
        and isinstance(data["metadata"].get("namespace") or "", str)
        and not body_errors(data)
    )


def _ns(info: ResourceInfo, namespace: str | None) -> str:
    return (namespace or "default") if info.namespaced else ""


def _key(info: ResourceInfo, name: str, namespace: str | None) -> Key:
    return (info.api_version, info.kind, _ns(info, namespace), name)


def _numeric_rv(obj: Manifest) -> int:
    value = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(value) if value.isdigit() else 0


__all__ = ["DIR_EVENTS_FILE", "MANIFEST_SUFFIXES", "LoadError", "LocalStore", "manifest_paths"]
