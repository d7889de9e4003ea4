"""Which files of a manifests directory changed since the local backend last looked, told by the kernel.

The local backend must see what another process or a person changed in its files before every operation (a
hand edit between two reads is read; a concurrent writer's change makes a stale write conflict). Finding that
out by ``stat``-ing every file before every operation costs O(files) per operation, O(n²) for a flow that
writes each of n objects. Linux's inotify reports every change as it happens instead: the kernel queues an
event (directory, file name) during the very system call that changes a file, so an edit that has returned is
in the queue before the next operation reads it, and :meth:`DirectoryWatch.changes` costs O(changes).

What cannot be followed this way is reported as "unknown" (``None``) and the caller rescans everything, as it
did before: the event queue overflowing, a directory created, removed or moved (its files were never watched),
and any file the caller does not recognise. Symbolic links (a directory or manifest reached through one, such
as a ConfigMap volume's ``..data`` swap) are not watched at all: :func:`open_watch` returns ``None`` and the
caller keeps scanning. Outside Linux there is no watch either.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable

try:  # Linux only (pyproject: the dependency is for Linux); elsewhere the caller keeps scanning
    from inotify_simple import INotify
    from inotify_simple import flags as _in
except ImportError:  # pragma: no cover - not Linux
    INotify = None

if INotify is not None:
    _MASK = (
        _in.MODIFY
        | _in.ATTRIB
        | _in.MOVED_FROM
        | _in.MOVED_TO
        | _in.CREATE
        | _in.DELETE
        | _in.DELETE_SELF
        | _in.MOVE_SELF
    )
    _LOST = _in.Q_OVERFLOW | _in.IGNORED | _in.DELETE_SELF | _in.MOVE_SELF
    """Events after which the watch no longer covers the directory tree: the caller must rescan."""
    _MOVED = _in.CREATE | _in.DELETE | _in.MOVED_FROM | _in.MOVED_TO


class DirectoryWatch:
    """An inotify instance (``inotify_simple``) watching a set of directories; :meth:`changes` drains what
    happened in them."""

    def __init__(self, directories: list[str]) -> None:
        """Watch every directory in ``directories`` (``OSError`` when inotify is missing or out of instances)."""
        if INotify is None:
            raise OSError("inotify is not available")
        self._inotify: INotify | None = INotify(nonblocking=True)
        self._pid = os.getpid()
        self._dirs: dict[int, str] = {}
        self._added: set[str] = set()  # directories this process created and watches already
        self._pending: set[str] = set()
        self._finalizer = weakref.finalize(self, self._inotify.close)
        try:
            for directory in directories:
                self._add(directory)
        except OSError:
            self.close()
            raise

    def _add(self, directory: str) -> None:
        assert self._inotify is not None
        self._dirs[self._inotify.add_watch(directory, _MASK)] = directory

    def add(self, directory: str) -> None:
        """Watch a directory the caller has just created (its creation is then no reason to rescan); the files
        already in it are reported by the next :meth:`changes`. ``OSError`` when it cannot be watched."""
        self._add(directory)
        self._added.add(directory)
        self._pending.update(entry.path for entry in os.scandir(directory) if not entry.is_dir())

    def changes(self) -> set[str] | None:
        """The paths (directory + name) something happened to since the last call; ``None`` when the watch
        cannot tell (see module docs) or is closed, or in a forked child (its parent shares the queue)."""
        if self._inotify is None or os.getpid() != self._pid:
            return None
        found, self._pending = self._pending, set()
        lost = False
        try:
            events = self._inotify.read(timeout=0)
        except OSError:
            return None
        for event in events:
            directory = self._dirs.get(event.wd)
            if event.mask & _LOST or directory is None:
                lost = True
            elif event.mask & _in.ISDIR:
                path = os.path.join(directory, event.name)
                created_here = event.mask & _in.CREATE and path in self._added
                lost = lost or bool(event.mask & _MOVED and not created_here)
            else:
                found.add(os.path.join(directory, event.name))
        return None if lost else found

    def close(self) -> None:
        """Release the inotify instance (each process may hold only a few: ``fs.inotify.max_user_instances``)."""
        if self._inotify is not None:
            self._finalizer()  # closes the descriptor (also done when the watch is garbage-collected)
            self._inotify = None


def open_watch(root: str, is_manifest_name: Callable[[str], bool]) -> DirectoryWatch | None:
    """A watch over ``root`` and every directory below it the loader walks (hidden ones are not walked), or
    ``None`` when the tree cannot be watched exactly (a symbolic link to a directory or to a file
    ``is_manifest_name`` accepts, inotify unavailable or out of instances): the caller then rescans before
    every operation.

    Args:
        root: The directory of a local cluster's manifests.
        is_manifest_name: Whether a file name is one the loader reads.

    Returns:
        The watch, or None when the caller must rescan instead.
    """
    directories: list[str] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        directories.append(directory)
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_symlink() and (is_manifest_name(entry.name) or entry.is_dir(follow_symlinks=True)):
                return None
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    try:
        return DirectoryWatch(directories)
    except OSError:
        return None


__all__ = ["DirectoryWatch", "open_watch"]
