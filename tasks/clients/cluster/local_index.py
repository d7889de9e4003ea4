"""The local backend's in-memory index: every object by key, and the keys by kind, by label and by file.

A flow lists a kind per object it reconciles (rollout-models lists each child kind of a Model by the Model's
uid label), so a LIST that looked at every object of the state would make a run O(n²). :class:`Index` keeps,
beside the objects by (apiVersion, kind, namespace, name), the keys of each kind, of each (kind, label, value)
and of each file: a LIST reads only its kind's objects, and only those carrying the value an equality (``=``,
``in``) requirement names; a file changed by someone else is re-read by dropping just its objects. Every change
goes through :meth:`Index.add`, :meth:`Index.drop` and :meth:`Index.relabel`, so the three stay consistent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tasks.clients.cluster.base import Manifest
from tasks.clients.cluster.objects import Requirement
from tasks.clients.cluster.yamlfile import Document, YamlFile

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" if cluster-scoped), name


def key_of(obj: Manifest) -> Key:
    """The index key of a stored object (its namespace is already normalised).

    Args:
        obj: A stored object.

    Returns:
        Its (apiVersion, kind, namespace, name); the namespace is empty for a cluster-scoped object.
    """
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])


@dataclass
class Entry:
    """Where an object lives: its file, its document and, inside a ``List`` document, its index."""

    obj: Manifest
    file: YamlFile
    doc: Document
    item: int | None = None


def _labels(obj: Manifest) -> dict[str, str]:
    """The string-valued labels of an object (a value of another type never equals a selector's string)."""
    labels = (obj.get("metadata") or {}).get("labels")
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


class Index:
    """The objects of a local state and the lookups a LIST and a file re-read need (see module docs)."""

    def __init__(self) -> None:
        self._entries: dict[Key, Entry] = {}
        self._kinds: dict[tuple[str, str], set[Key]] = {}
        self._labels: dict[tuple[str, str, str, str], set[Key]] = {}
        self._files: dict[Path, set[Key]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Key) -> Entry | None:
        """The entry of ``key``, or None."""
        return self._entries.get(key)

    def __getitem__(self, key: Key) -> Entry:
        return self._entries[key]

    def values(self) -> Iterator[Entry]:
        """Every entry (in no particular order)."""
        return iter(list(self._entries.values()))

    def add(self, key: Key, entry: Entry) -> None:
        """Index ``entry`` under ``key`` (replacing an entry already there)."""
        self.drop(key)
        self._entries[key] = entry
        self._kinds.setdefault(key[:2], set()).add(key)
        self._files.setdefault(entry.file.path, set()).add(key)
        self._link(key, entry.obj)

    def drop(self, key: Key) -> Entry | None:
        """Remove ``key``; its entry, or None when it was not indexed."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._kinds.get(key[:2], set()).discard(key)
            self._files.get(entry.file.path, set()).discard(key)
            self._unlink(key, entry.obj)
        return entry

    def relabel(self, key: Key, old: Manifest, new: Manifest) -> None:
        """Follow a write that may have changed the object's labels."""
        if _labels(old) != _labels(new):
            self._unlink(key, old)
            self._link(key, new)

    def of_file(self, path: Path) -> set[Key]:
        """The keys of the objects ``path`` holds."""
        return set(self._files.get(path, ()))

    def candidates(self, api_version: str, kind: str, requirements: list[Requirement]) -> list[Key]:
        """The keys of a kind that may satisfy ``requirements`` (narrowed by their equality terms), sorted."""
        keys = self._kinds.get((api_version, kind), set())
        for req in requirements:
            if req.operator in ("=", "in"):
                keys = keys & set().union(
                    *(self._labels.get((api_version, kind, req.key, value), set()) for value in req.values)
                )
        return sorted(keys)

    def _link(self, key: Key, obj: Manifest) -> None:
        for label, value in _labels(obj).items():
            self._labels.setdefault((key[0], key[1], label, value), set()).add(key)

    def _unlink(self, key: Key, obj: Manifest) -> None:
        for label, value in _labels(obj).items():
            found = self._labels.get((key[0], key[1], label, value))
            if found is not None:
                found.discard(key)
                if not found:
                    del self._labels[(key[0], key[1], label, value)]
