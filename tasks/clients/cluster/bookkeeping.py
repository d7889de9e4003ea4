"""What the local backend remembers about objects without writing it into the manifests.

The API server keeps ``resourceVersion``, ``uid``, ``creationTimestamp`` and ``generation`` for every
object; hand-written manifests usually carry none of them, and the local backend must not add them to
people's files (a status write must change only status lines). So they live in a hidden sidecar
(``.modelplane-state.json`` in a state directory, ``.<file>.state.json`` beside a single file), together
with the resourceVersion counter:

* the counter only goes up, across processes and deletes, so a deleted object's old version is never
  valid again;
* an object whose content is unchanged since Modelplane last wrote it reads back with the same
  ``resourceVersion`` (and ``uid``/``creationTimestamp``) in a new process; a hand edit gives it a new
  version, and a ``generation`` one higher when its spec changed.

The sidecar is written under the backend's inter-process lock; a missing or unreadable sidecar only
means fresh bookkeeping (nothing in the manifests depends on it).

A write changes one record, so it appends one line to a journal beside the sidecar (``<sidecar stem>.journal``,
JSON lines: the record, or ``null`` for a deleted object, and the counter) instead of rewriting every record:
O(1) per write. Once the journal holds as many lines as there are records (at least
:data:`COMPACT_AFTER`), the sidecar is rewritten whole and the journal removed, so a write costs O(1)
amortised and loading stays O(records). Loading reads the sidecar, then replays the journal (replaying a
journal the sidecar already includes changes nothing; a torn last line is skipped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.clients.cluster.base import Manifest
from tasks.clients.cluster.objects import spec_part
from tasks.clients.cluster.yamlfile import atomic_write, file_stamp
from tasks.clients.files import open_own, remove_planted_link

log = logging.getLogger(__name__)

COMPACT_AFTER = 256
"""Journal lines after which (and once there are as many as records) the sidecar is rewritten whole."""

VOLATILE = ("resourceVersion", "creationTimestamp", "uid", "generation")
"""Metadata the API server maintains; left out of the content fingerprint."""


def fingerprint(obj: Manifest) -> str:
    """A digest of an object's content without its bookkeeping metadata.

    Args:
        obj: A stored object.

    Returns:
        The hex digest of the object with the metadata the API server maintains (resourceVersion,
        creationTimestamp, uid, generation) left out.
    """
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in VOLATILE}
    return _digest({**obj, "metadata": meta})


def spec_fingerprint(obj: Manifest) -> str:
    """A digest of what ``generation`` tracks.

    Args:
        obj: A stored object.

    Returns:
        The hex digest of everything but ``apiVersion``, ``kind``, ``metadata`` and ``status``.
    """
    return _digest(spec_part(obj))


def _digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()  # noqa: S324 - not security


@dataclass
class Record:
    """The bookkeeping of one object as Modelplane last wrote it."""

    resourceVersion: str  # noqa: N815 - API field names
    content: str
    spec: str
    uid: str | None = None
    creationTimestamp: str | None = None  # noqa: N815
    generation: int | None = None


class Bookkeeping:
    """The sidecar: the resourceVersion counter and one :class:`Record` per written object."""

    def __init__(self, path: Path | None, *, persist: bool = True) -> None:
        """``path`` None keeps everything in memory; ``persist=False`` reads it but never writes it
        (snapshot mode)."""
        self.path = path
        self.persist = persist
        self.counter = 0
        self.records: dict[str, Record] = {}
        self._lines: dict[str, str] = {}
        self._pending: set[str] = set()
        self._journal_lines = 0
        self._torn = False
        self._seen: tuple[object, object] | None = None
        self.load()

    @property
    def journal_path(self) -> Path | None:
        """The append-only journal of the writes since the sidecar was last written whole."""
        return None if self.path is None else self.path.with_suffix(".journal")

    def _stamps(self) -> tuple[object, object]:
        assert self.path is not None and self.journal_path is not None
        return file_stamp(self.path), file_stamp(self.journal_path)

    def changed_on_disk(self) -> bool:
        """Whether another process wrote the sidecar or its journal since this one last read or wrote them
        (two ``stat`` calls: cheap enough to ask before every operation)."""
        return self.path is not None and self._stamps() != self._seen

    def load(self) -> None:
        """Read the sidecar and replay its journal (the counter never goes back, even if the files do)."""
        if self.path is None:
            return
        self._seen = self._stamps()  # before reading: a write meanwhile shows as a change next time
        self._pending.clear()
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.counter = max(self.counter, int(data.get("resourceVersion", 0)))
                self.records = {key: Record(**value) for key, value in (data.get("objects") or {}).items()}
                self._lines = {}
            except (OSError, ValueError, TypeError) as exc:
                log.warning("local cluster: ignoring unreadable bookkeeping %s (%s)", self.path, exc)
        self._replay()

    def _replay(self) -> None:
        """Apply the journal's lines in order (a line that does not parse, such as a torn last one, is skipped)."""
        assert self.journal_path is not None
        try:
            text = self.journal_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("local cluster: ignoring unreadable bookkeeping journal %s (%s)", self.journal_path, exc)
            text = ""
        lines = text.splitlines()
        self._journal_lines, self._torn = len(lines), bool(text) and not text.endswith("\n")
        for line in lines:
            try:
                entry = json.loads(line)
                self.counter = max(self.counter, int(entry.get("rv", 0)))
                key = entry.get("k")
                if isinstance(key, str):
                    self._lines.pop(key, None)
                    if entry.get("r") is None:
                        self.records.pop(key, None)
                    else:
                        self.records[key] = Record(**entry["r"])
            except (ValueError, TypeError, AttributeError):
                continue

    def save(self) -> None:
        """Persist what changed since the last save: one journal line per changed record (or one with only the
        counter), or the whole sidecar when the journal has grown as large as it (no-op in snapshot mode)."""
        if self.path is None or self.journal_path is None or not self.persist:
            return
        if not self.path.is_file() or self._journal_lines >= max(COMPACT_AFTER, len(self.records)):
            self._save_whole()
        else:
            self._append()
        self._pending.clear()
        self._seen = self._stamps()

    def _save_whole(self) -> None:
        """Write the sidecar atomically and drop the journal it now includes."""
        assert self.path is not None and self.journal_path is not None
        # One line per record, each encoded once (the C encoder) and kept until its record changes: re-encoding
        # every record (json's pure-Python indenting encoder, ``asdict``) cost more than the write itself.
        body = ",\n".join(self._line(key) for key in sorted(self.records))
        remove_planted_link(self.path)  # the backend's own file: never written through a link
        atomic_write(self.path, f'{{"objects":{{\n{body}\n}},\n"resourceVersion":{self.counter}}}\n')
        self.journal_path.unlink(missing_ok=True)
        self._journal_lines, self._torn = 0, False

    def _append(self) -> None:
        """Append the changed records (and the counter) to the journal, flushed to disk as the sidecar is."""
        assert self.journal_path is not None
        lines = [
            json.dumps({"k": key, "r": vars(self.records[key]) if key in self.records else None, "rv": self.counter})
            for key in sorted(self._pending)
        ] or [json.dumps({"rv": self.counter})]
        text = ("\n" if self._torn else "") + "\n".join(lines) + "\n"
        with os.fdopen(
            open_own(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "a", encoding="utf-8"
        ) as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        self._journal_lines += len(lines)
        self._torn = False

    def _line(self, key: str) -> str:
        """The sidecar line of one record (cached; :meth:`remember`, :meth:`forget` and :meth:`load` drop it)."""
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = f"{json.dumps(key)}:{json.dumps(vars(self.records[key]), sort_keys=True)}"
        return line

    def remember(self, key: str, obj: Manifest) -> None:
        """Record ``obj`` as just written."""
        self._lines.pop(key, None)
        self._pending.add(key)
        meta = obj["metadata"]
        self.records[key] = Record(
            str(meta["resourceVersion"]),
            fingerprint(obj),
            spec_fingerprint(obj),
            meta.get("uid"),
            meta.get("creationTimestamp"),
            meta.get("generation"),
        )

    def forget(self, key: str) -> None:
        """Drop the record of a deleted object."""
        self.records.pop(key, None)
        self._lines.pop(key, None)
        self._pending.add(key)

    def restore(self, key: str, obj: Manifest, next_rv: Any) -> None:
        """Fill in the bookkeeping of an object read from a manifest that carries no resourceVersion."""
        record = self.records.get(key)
        if record is None:
            return
        meta = obj["metadata"]
        for field in ("uid", "creationTimestamp"):
            if getattr(record, field) and field not in meta:
                meta[field] = getattr(record, field)
        same_spec = record.spec == spec_fingerprint(obj)
        if record.generation is not None and "generation" not in meta:
            meta["generation"] = record.generation if same_spec else record.generation + 1
        meta["resourceVersion"] = record.resourceVersion if record.content == fingerprint(obj) else next_rv()
