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
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.cluster.base import Manifest
from tasks.cluster.objects import spec_part
from tasks.cluster.yamlfile import atomic_write

log = logging.getLogger(__name__)

VOLATILE = ("resourceVersion", "creationTimestamp", "uid", "generation")
"""Metadata the API server maintains; left out of the content fingerprint."""


def fingerprint(obj: Manifest) -> str:
    """A digest of an object's content without its bookkeeping metadata."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in VOLATILE}
    return _digest({**obj, "metadata": meta})


def spec_fingerprint(obj: Manifest) -> str:
    """A digest of what ``generation`` tracks."""
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
        self.load()

    def load(self) -> None:
        """Read the sidecar (the counter never goes back, even if the file does)."""
        if self.path is None or not self.path.is_file():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.counter = max(self.counter, int(data.get("resourceVersion", 0)))
            self.records = {key: Record(**value) for key, value in (data.get("objects") or {}).items()}
            self._lines = {}
        except (OSError, ValueError, TypeError) as exc:
            log.warning("local cluster: ignoring unreadable bookkeeping %s (%s)", self.path, exc)

    def save(self) -> None:
        """Write the sidecar atomically (no-op in snapshot mode)."""
        if self.path is None or not self.persist:
            return
        # One line per record, each encoded once (the C encoder) and kept until its record changes: the sidecar is
        # rewritten on every write, so for a directory of hundreds of objects re-encoding every record (json's
        # pure-Python indenting encoder, ``asdict``) cost more than the write itself.
        body = ",\n".join(self._line(key) for key in sorted(self.records))
        atomic_write(self.path, f'{{"objects":{{\n{body}\n}},\n"resourceVersion":{self.counter}}}\n')

    def _line(self, key: str) -> str:
        """The sidecar line of one record (cached; :meth:`remember`, :meth:`forget` and :meth:`load` drop it)."""
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = f"{json.dumps(key)}:{json.dumps(vars(self.records[key]), sort_keys=True)}"
        return line

    def remember(self, key: str, obj: Manifest) -> None:
        """Record ``obj`` as just written."""
        self._lines.pop(key, None)
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
