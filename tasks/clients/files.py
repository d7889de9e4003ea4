"""Durable file writes shared by every task that keeps state on disk.

The local cluster backend's manifests and bookkeeping, the cache completion marker and the metrics file
are all replaced atomically, so a reader (or a process killed mid-write) sees the old file or the new one,
never a torn one.

A writer's own files (a lock, a sidecar, a journal) are never reached through a symbolic link: a link planted
at one of their names in a folder someone else prepared (a cloned repository, a shared snapshot) would
otherwise take the write to any file the user may write (:func:`remove_planted_link`, :func:`open_own`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str) -> Path:
    """Replace ``path`` with ``text`` (temp file in the same directory, fsync, ``os.replace``, fsync of the directory).

    The original file mode is kept, and a symbolic link stays a link (its target is replaced).

    Args:
        path: The file to replace (created with its directories when absent).
        text: Its new content, written as UTF-8.

    Returns:
        The path actually written (the link's target).

    Raises:
        OSError: The directory or the file cannot be written; the old file is left as it was.
    """
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return path


def remove_planted_link(path: Path) -> bool:
    """Remove a symbolic link standing at one of a writer's own file names: only the link, never its target.

    Args:
        path: The name the writer is about to write (a lock, a sidecar, a journal, an Event sink).

    Returns:
        Whether a link was removed.

    Raises:
        OSError: The link cannot be removed.
    """
    if not path.is_symlink():
        return False
    path.unlink()
    return True


def open_own(path: Path, flags: int, mode: int = 0o644) -> int:
    """Open (creating it when ``flags`` say so) a writer's own file, never through a symbolic link: a link at the
    name is removed first, and one planted between that and the open fails it (``O_NOFOLLOW``).

    Args:
        path: The file.
        flags: ``os.open`` flags (``O_NOFOLLOW`` is added).
        mode: The permissions of a file created.

    Returns:
        The file descriptor.

    Raises:
        OSError: The file cannot be opened (``ELOOP`` for a link planted meanwhile).
    """
    remove_planted_link(path)
    return os.open(path, flags | os.O_NOFOLLOW, mode)


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every filesystem allows fsync on a directory).

    Args:
        directory: The directory whose entries were changed.
    """
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Force ``path``'s data to disk (before a journal vouches for it, or a marker lists it).

    Args:
        path: The file written.

    Raises:
        OSError: The file cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
