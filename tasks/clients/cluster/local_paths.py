"""Which files of a local cluster folder are manifests, and the paths a write creates (tasks/clients/cluster/README.md).

Split from :mod:`tasks.clients.cluster.local_store` (the store's state and writes) so that module keeps to its concern.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from tasks.clients.cluster.yamlfile import file_stamp

__all__ = [
    "MANIFEST_SUFFIXES",
    "is_manifest",
    "looks_like_manifest",
    "manifest_paths",
    "missing_parents",
    "scan_manifests",
    "stat_into",
]


def stat_into(found: dict[str, tuple[int, int, int]], path: Path) -> None:
    """Add ``path`` with its stamp when it is an existing file.

    Args:
        found: The stamps (mtime in ns, size, inode) by path, added to.
        path: The file to stamp.
    """
    stamp = file_stamp(path)
    if stamp is not None and path.is_file():
        found[str(path)] = stamp


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
"""Manifest files a directory is read from: YAML, and JSON (a YAML subset: ``kubectl get -o json`` dumps)."""


def manifest_paths(path: Path) -> list[Path]:
    """The manifest files of a state, sorted: the file itself, or every ``*.yaml``/``*.yml``/``*.json`` below a
    directory with hidden entries (such as the Event sink) left out, as :class:`LocalCluster` reads them.

    Args:
        path: A manifest file or a directory of them.

    Returns:
        The manifest files; empty when ``path`` does not exist.
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(Path(found) for found, _ in scan_manifests(str(path)))


def scan_manifests(root: str) -> Iterator[tuple[str, tuple[int, int, int]]]:
    """Every manifest file (:data:`MANIFEST_SUFFIXES`) below ``root`` with its stamp, skipping hidden entries.

    Args:
        root: The directory to walk (symbolic links followed).

    Yields:
        Each manifest file's path and its stamp (mtime in ns, size, inode).
    """
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
                and (not entry.name.endswith(".json") or looks_like_manifest(entry.path))
            ):
                st = entry.stat()
                yield entry.path, (st.st_mtime_ns, st.st_size, st.st_ino)


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


def is_manifest(path: str) -> bool:
    """Whether ``path`` is (still) a file the loader reads: it exists, and a ``.json`` one is a manifest.

    Args:
        path: A file's path.

    Returns:
        True when the file exists and is a manifest file.
    """
    return os.path.isfile(path) and (not path.endswith(".json") or looks_like_manifest(path))


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
