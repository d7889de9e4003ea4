"""What to fetch: the remote listing, path checks, and the staging area that makes a fill resumable.

Layout inside a cache directory while it fills::

    <dest>/.modelplane-cache.lock           the fill lock (see lock.py)
    <dest>/.modelplane-partial/             staging: temporary files and the journal
        journal.jsonl                       one line per file verified and moved into place
        <hash>.part, <hash>.part.json       a file being fetched, and its part state (multi-part only)
    <dest>/<the model's files>              each renamed into place only after its size and checksum matched
    <dest>/.modelplane-cache.json           the completion marker, written after every file is in place
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
from dataclasses import dataclass
from typing import TextIO

from engine.caches.identity import CACHE_MARKER
from tasks.clients.sources.errors import PathTraversal
from tasks.clients.sources.listing import Listing
from tasks.downloader.lock import BREAK_NAME, LOCK_NAME

STAGING_DIR = ".modelplane-partial"
JOURNAL = "journal.jsonl"
RESERVED_NAMES = frozenset({CACHE_MARKER, CACHE_MARKER + ".tmp", LOCK_NAME, BREAK_NAME, STAGING_DIR})


def safe_relative_path(name: str) -> str:
    """``name`` if it is a plain relative path that stays inside the cache; raises :class:`PathTraversal`.

    Rejected: empty names, absolute paths, backslashes, NUL and control characters, ``.``/``..``/empty
    segments, and names that would overwrite the cache's own bookkeeping files.

    Args:
        name: A file's path as the source lists it.

    Returns:
        ``name``, unchanged.

    Raises:
        PathTraversal: The name is not a plain relative path inside the cache.
    """
    shown = name.encode("unicode_escape").decode("ascii")[:200]
    if not name or name.startswith("/") or "\\" in name or any(ord(c) < 32 for c in name):
        raise PathTraversal(f"remote file {shown!r} is not a plain relative path; nothing was written")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise PathTraversal(
            f"remote file {shown!r} escapes the cache directory ('..' or empty segment); nothing was written"
        )
    if parts[0] in RESERVED_NAMES:
        raise PathTraversal(f"remote file {shown!r} would overwrite the cache's own {parts[0]}; nothing was written")
    return name


def unlink_planted_links(dest: pathlib.Path) -> list[str]:
    """Remove every symbolic link standing at one of the cache's own bookkeeping names (the marker, its
    temporary file, the staging directory, ...): the fill writes those, and a link planted there would take the
    writes outside the cache. Only the link goes, never what it points to. The lock file is left alone: the
    lock that holds it opened it with ``O_EXCL``, which refuses a link.

    Args:
        dest: The cache directory (the caller holds its lock).

    Returns:
        The names of the links removed.
    """
    removed = []
    for name in sorted(RESERVED_NAMES - {LOCK_NAME, BREAK_NAME}):
        if (dest / name).is_symlink():
            (dest / name).unlink()
            removed.append(name)
    return removed


def check_listing(dest: pathlib.Path, listing: Listing) -> None:
    """Every remote path is safe, unique, and resolves inside ``dest``; raise before anything is written.

    Args:
        dest: The cache directory.
        listing: The source's listing.

    Raises:
        PathTraversal: A path is unsafe, listed twice, resolves outside ``dest`` or is both a file and a directory.
    """
    root = dest.resolve()
    seen: set[str] = set()
    for remote in listing.files:
        safe_relative_path(remote.path)
        if remote.path in seen:
            raise PathTraversal(f"remote file {remote.path!r} is listed twice")
        seen.add(remote.path)
        target = (root / remote.path).resolve()
        if not target.is_relative_to(root):
            raise PathTraversal(
                f"remote file {remote.path!r} resolves outside the cache (through a symlink); nothing was written"
            )
    # A file and a directory of the same name cannot both exist.
    for path in seen:
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        while parent:
            if parent in seen:
                raise PathTraversal(f"remote file {parent!r} is also a directory of {path!r}")
            parent = parent.rsplit("/", 1)[0] if "/" in parent else ""


@dataclass(frozen=True)
class JournalEntry:
    """A file that was verified and moved into place by an earlier (possibly killed) run."""

    path: str
    size: int
    sha256: str
    etag: str | None


class Journal:
    """Append-only record of completed files in the staging directory (thread-safe)."""

    def __init__(self, staging: pathlib.Path) -> None:
        self.path = staging / JOURNAL
        self._lock = threading.Lock()
        self._handle: TextIO | None = None
        self.entries: dict[str, JournalEntry] = {}
        try:
            for line in self.path.read_text().splitlines():
                try:
                    data = json.loads(line)
                    entry = JournalEntry(str(data["path"]), int(data["size"]), str(data["sha256"]), data.get("etag"))
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a kill
                self.entries[entry.path] = entry
        except FileNotFoundError:
            pass

    def record(self, entry: JournalEntry) -> None:
        """Append one completed file (one line, flushed to the OS at once; the file stays open for the next one).

        The line is not fsynced: a line lost in a crash only makes the next run re-hash that file.
        """
        line = json.dumps({"path": entry.path, "size": entry.size, "sha256": entry.sha256, "etag": entry.etag})
        with self._lock:
            if self._handle is None:
                self._handle = open(self.path, "a", encoding="utf-8")
            self._handle.write(line + "\n")
            self._handle.flush()
            self.entries[entry.path] = entry

    def close(self) -> None:
        """Close the journal file (recording again reopens it)."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None


def directory_usage(root: pathlib.Path) -> int:
    """Bytes used by the regular files under ``root`` (the cache so far).

    Args:
        root: The cache directory.

    Returns:
        The total size of its regular files, in bytes (files that vanish meanwhile count nothing).
    """
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass
    return total
