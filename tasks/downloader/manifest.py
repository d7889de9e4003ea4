"""The completion marker ``.modelplane-cache.json``: the manifest of a complete cache, written last.

A cache is complete exactly when this file exists, names the source it was filled from, and every file
it lists is present with its size. It is written atomically (temporary name, fsync, rename) after every
file is in place, so a partly filled cache never has one.
"""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.caches.identity import CACHE_MARKER
from tasks.clients.files import fsync_dir

MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class ManifestFile:
    """One file of a complete cache: path relative to the cache root, size, SHA-256, and the source's ETag."""

    path: str
    size: int
    sha256: str
    etag: str | None = None


@dataclass(frozen=True)
class CacheManifest:
    """What a complete cache holds and where it came from."""

    source: str
    """The canonical source URI (``ModelSource.uri``)."""
    revision: str | None
    """The resolved revision (Hugging Face commit SHA); None for object stores."""
    files: tuple[ManifestFile, ...]
    completed_at: str
    """RFC 3339 time the marker was written."""
    format: int = MANIFEST_FORMAT
    stats: dict[str, int] = field(default_factory=dict)
    """Counters of the run that completed the cache: bytes fetched, files skipped (informational)."""

    @property
    def total_bytes(self) -> int:
        """Sum of the file sizes."""
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        """The marker's JSON document."""
        return {
            "format": self.format,
            "source": self.source,
            "revision": self.revision,
            "completedAt": self.completed_at,
            "totalBytes": self.total_bytes,
            "files": [asdict(f) for f in self.files],
            "stats": dict(self.stats),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CacheManifest:
        """Parse a marker document; raises ``ValueError`` when it is not one."""
        try:
            files = tuple(
                ManifestFile(path=str(f["path"]), size=int(f["size"]), sha256=str(f["sha256"]), etag=f.get("etag"))
                for f in data["files"]
            )
            return cls(
                source=str(data["source"]),
                revision=data.get("revision"),
                files=files,
                completed_at=str(data.get("completedAt", "")),
                format=int(data.get("format", MANIFEST_FORMAT)),
                stats=dict(data.get("stats") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a cache manifest: {exc}") from None


def marker_path(dest: str | os.PathLike[str]) -> pathlib.Path:
    """Where the completion marker of the cache at ``dest`` lives.

    Args:
        dest: The cache directory.

    Returns:
        The marker file's path.
    """
    return pathlib.Path(dest) / CACHE_MARKER


def read_manifest(dest: str | os.PathLike[str]) -> CacheManifest | None:
    """The manifest of the cache at ``dest``, or None when it has no (readable) completion marker.

    Args:
        dest: The cache directory.

    Returns:
        The completion manifest, or None.
    """
    path = marker_path(dest)
    try:
        return CacheManifest.from_json(json.loads(path.read_text()))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return None


def is_complete(dest: str | os.PathLike[str], source_uri: str | None = None) -> bool:
    """True when ``dest`` holds a complete cache (of ``source_uri`` when given): marker present, files in place.

    Args:
        dest: The cache directory.
        source_uri: The source the cache must hold, or None for any.

    Returns:
        True when every file the marker lists exists with its size.
    """
    manifest = read_manifest(dest)
    if manifest is None or (source_uri is not None and manifest.source != source_uri):
        return False
    root = pathlib.Path(dest)
    for entry in manifest.files:
        try:
            if (root / entry.path).stat().st_size != entry.size:
                return False
        except OSError:
            return False
    return True


def write_manifest(dest: str | os.PathLike[str], manifest: CacheManifest) -> pathlib.Path:
    """Write the marker atomically (temporary file, fsync, rename, fsync of the directory).

    Args:
        dest: The cache directory.
        manifest: The completion manifest.

    Returns:
        The marker file's path.
    """
    path = marker_path(dest)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a leftover (or a planted link): the new file is made afresh, never written through
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w") as handle:
        json.dump(manifest.to_json(), handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path


def remove_manifest(dest: str | os.PathLike[str]) -> None:
    """Remove the marker (the cache is no longer complete).

    Args:
        dest: The cache directory.
    """
    marker_path(dest).unlink(missing_ok=True)
