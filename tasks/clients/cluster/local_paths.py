"""Which files of a local cluster folder are manifests, and the paths a write creates (tasks/clients/cluster/README.md).

Split from :mod:`tasks.clients.cluster.local_store` (the store's state and writes) so that module keeps to its concern.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from tasks.clients.inputs import not_regular

__all__ = [
    "MANIFEST_SUFFIXES",
    "Found",
    "Stamp",
    "discover",
    "looks_like_manifest",
    "manifest_changes",
    "manifest_entry",
    "manifest_paths",
    "missing_parents",
    "scan_manifests",
    "stamp_of",
    "stat_into",
]

Stamp = tuple[int, int, int]
"""A file's (mtime in ns, size, inode): a change to any of them is a change to the file."""

_NO_STAMP: Stamp = (0, 0, 0)
"""The stamp of an entry that cannot even be ``lstat``-ed."""


def stat_into(found: dict[str, Stamp], path: Path) -> None:
    """Add ``path`` with its stamp when it is an existing file (a link that cannot be followed is none).

    Args:
        found: The stamps (mtime in ns, size, inode) by path, added to.
        path: The file to stamp.
    """
    stamp = stamp_of(str(path))
    if stamp is not None and path.is_file():
        found[str(path)] = stamp


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
"""Manifest files a directory is read from: YAML, and JSON (a YAML subset: ``kubectl get -o json`` dumps)."""


class Found(NamedTuple):
    """An entry of a local cluster folder the loader reads, or refuses with why (:func:`manifest_entry`)."""

    path: str
    stamp: Stamp
    """(mtime in ns, size, inode) of what the entry is (of the link itself when it cannot be followed)."""
    problem: str | None = None
    """Why it is not read, starting with its path: not a regular file, a link loop; None for a manifest file."""


def manifest_paths(path: Path) -> list[Path]:
    """The manifest files of a state, sorted: the file itself, or every ``*.yaml``/``*.yml``/``*.json`` below a
    directory with hidden entries (such as the Event sink) left out, as :class:`LocalCluster` reads them.

    Args:
        path: A manifest file or a directory of them.

    Returns:
        The manifest files; empty when ``path`` does not exist. Entries the loader refuses (:func:`scan_manifests`)
        are left out: reading a named pipe or a device would never end.
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(Path(found.path) for found in scan_manifests(str(path)) if found.problem is None)


def scan_manifests(root: str) -> Iterator[Found]:
    """Every manifest file (:data:`MANIFEST_SUFFIXES`) below ``root`` with its stamp, skipping hidden entries, and
    every entry the loader must report instead of reading: one named as a manifest that is no regular file (a named
    pipe, a device, a link to nothing: :func:`manifest_entry`), and any entry or directory that cannot be followed or
    listed (a symbolic link loop, no permission), which may have held manifests.

    A directory reached again (through a symbolic link back up the tree, or two links to one directory) is read
    once, by its own path when the tree holds it, so a link loop never walks forever and no file is read twice.

    Args:
        root: The directory to walk (symbolic links followed).

    Yields:
        Each manifest file, and each refused entry (``problem`` set), with its stamp.
    """
    seen: set[tuple[int, int]] = set()
    stack: list[str] = [root]
    linked: list[str] = []  # directories reached through a symbolic link: walked once the tree's own ones are
    while stack or linked:
        if not stack:  # every directory of the tree itself is read: follow a link, the first by name
            linked.sort(reverse=True)
            stack.append(linked.pop())
        directory = stack.pop()
        try:
            status = os.stat(directory)
            if (status.st_dev, status.st_ino) in seen:
                continue
            seen.add((status.st_dev, status.st_ino))
            entries = list(os.scandir(directory))
        except OSError as exc:
            yield Found(directory, stamp_of(directory) or _NO_STAMP, f"{directory}: cannot read: {exc.strerror or exc}")
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():  # a link is followed: it raises on a loop
                    (linked if entry.is_symlink() else stack).append(entry.path)
                    continue
            except OSError as exc:
                yield Found(
                    entry.path, stamp_of(entry.path) or _NO_STAMP, f"{entry.path}: cannot read: {exc.strerror or exc}"
                )
                continue
            found = manifest_entry(entry.path) if entry.name.endswith(MANIFEST_SUFFIXES) else None
            if found is not None:
                yield found


def manifest_entry(path: str) -> Found | None:
    """What the loader makes of the entry at ``path``, one named as a manifest file: a manifest file to read, an
    entry refused with why, or nothing to read (absent, a directory, a ``.json`` file that is no manifest).

    A named pipe, a device or a socket is refused as ``--metrics-file`` refuses one
    (:mod:`tasks.clients.inputs`), from its ``stat`` alone: it is never opened (a named pipe with no writer would
    hold every command, ``/dev/zero`` never ends). So is a symbolic link that cannot be followed (a loop, or to
    nothing); a directory is walked like any other (:func:`scan_manifests`), whatever its name.

    Args:
        path: The entry's path.

    Returns:
        The manifest file or the refused entry, with its stamp; None when there is nothing to read.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        link = stamp_of(path)
        return None if link is None else Found(path, link, f"{path}: a symbolic link whose target does not exist")
    except OSError as exc:
        return Found(path, stamp_of(path) or _NO_STAMP, f"{path}: cannot read: {exc.strerror or exc}")
    stamp = (status.st_mtime_ns, status.st_size, status.st_ino)
    if stat.S_ISDIR(status.st_mode) or (stat.S_ISREG(status.st_mode) and not _is_manifest_file(path)):
        return None
    return Found(path, stamp, None if stat.S_ISREG(status.st_mode) else f"{path}: {not_regular(status.st_mode)}")


def stamp_of(path: str) -> Stamp | None:
    """:func:`tasks.clients.cluster.yamlfile.file_stamp` for any entry, without raising: what a symbolic link points
    at, or the link itself when it cannot be followed (a loop, or to nothing).

    Args:
        path: The entry's path.

    Returns:
        The stamp, or None when there is no entry at ``path``.
    """
    for follow in (True, False):
        try:
            status = os.stat(path, follow_symlinks=follow)
        except FileNotFoundError:
            continue
        except OSError:
            if not follow:
                return _NO_STAMP
            continue
        return (status.st_mtime_ns, status.st_size, status.st_ino)
    return None


def discover(path: Path, single_file: bool, events: Path) -> tuple[dict[str, Stamp], dict[str, str]]:
    """The files that make up a local cluster's state, by path string, with their stamps, and the entries refused
    instead of read (:func:`scan_manifests`), stamped too so that a change to one is seen.

    One ``scandir`` pass with one ``stat`` per file and no ``Path`` objects: this runs before every operation, so
    it must stay cheap for thousands of files.

    Args:
        path: The state: a manifest file, or a directory of them (nothing when it does not exist).
        single_file: Whether the state is the one file ``path``.
        events: The state's Event sink.

    Returns:
        The stamps by path (of refused entries too), and why each refused entry is not read.
    """
    found: dict[str, Stamp] = {}
    refused: dict[str, str] = {}
    if single_file:
        stat_into(found, path)
    elif path.is_dir():
        for entry in scan_manifests(str(path)):
            found[entry.path] = entry.stamp
            if entry.problem is not None:
                refused[entry.path] = entry.problem
    stat_into(found, events)
    return found, refused


def manifest_changes(changed: set[str], events: str, own: set[str]) -> set[str] | None:
    """The changed paths (told by :mod:`tasks.clients.cluster.dirwatch`) that may be manifests or the Event sink.

    Args:
        changed: The paths something happened to.
        events: The Event sink's path.
        own: The names of the hidden files the backend itself writes (its bookkeeping and lock).

    Returns:
        Those paths; None when one is a file the loader would not skip and the backend did not write (a hidden file
        other than its own), so everything is rescanned.
    """
    paths = set()
    for path in changed:
        name = os.path.basename(path)
        if path == events or (name.endswith(MANIFEST_SUFFIXES) and not name.startswith(".")):
            paths.add(path)
        elif name.startswith(".") and not (name.endswith(".tmp") or name in own):
            return None
    return paths


def missing_parents(path: Path, root: Path) -> list[Path]:
    """The directories between ``root`` and ``path`` that do not exist yet (a write creates them), outermost first.

    Args:
        path: A file about to be written.
        root: The local cluster's directory.

    Returns:
        The missing directories, outermost first.
    """
    missing: list[Path] = []
    parent = path.parent
    while parent != root and root in parent.parents and not parent.is_dir():
        missing.insert(0, parent)
        parent = parent.parent
    return missing


def _is_manifest_file(path: str) -> bool:
    """Whether a regular file named as a manifest is one: a ``.json`` file only when :func:`looks_like_manifest`."""
    return not path.endswith(".json") or looks_like_manifest(path)


def looks_like_manifest(path: str) -> bool:
    """Whether a ``.json`` file is a Kubernetes manifest (an ``apiVersion`` near its start), not some other
    JSON that lives beside the manifests (a model's ``config.json``, a tokenizer).

    Args:
        path: A ``.json`` file's path.

    Returns:
        True when its first 4 KiB hold ``"apiVersion"``; False when it cannot be read.
    """
    try:
        with open(path, "rb") as handle:
            return b'"apiVersion"' in handle.read(4096)
    except OSError:
        return False
