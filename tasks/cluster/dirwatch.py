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

import ctypes
import ctypes.util
import os
import struct
import weakref
from collections.abc import Callable

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ISDIR = 0x40000000
_MASK = (
    _IN_MODIFY | _IN_ATTRIB | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF
)
_LOST = _IN_Q_OVERFLOW | _IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF
"""Events after which the watch no longer covers the directory tree: the caller must rescan."""
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)

_libc: ctypes.CDLL | None = None


def _inotify() -> ctypes.CDLL | None:
    """libc with inotify, or None (not Linux, or no libc found)."""
    global _libc
    if _libc is None and hasattr(os, "O_NONBLOCK"):
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name or "libc.so.6", use_errno=True)
            lib.inotify_init1  # noqa: B018 - probe: AttributeError when absent
        except (OSError, AttributeError):
            return None
        _libc = lib
    return _libc


class DirectoryWatch:
    """An inotify instance watching a set of directories; :meth:`changes` drains what happened in them."""

    def __init__(self, directories: list[str]) -> None:
        """Watch every directory in ``directories`` (``OSError`` when inotify is missing or out of instances)."""
        lib = _inotify()
        if lib is None:
            raise OSError("inotify is not available")
        fd = lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd: int | None = fd
        self._pid = os.getpid()
        self._lib = lib
        self._dirs: dict[int, str] = {}
        self._added: set[str] = set()  # directories this process created and watches already
        self._pending: set[str] = set()
        self._finalizer = weakref.finalize(self, os.close, fd)
        try:
            for directory in directories:
                self._add(directory)
        except OSError:
            self.close()
            raise

    def _add(self, directory: str) -> None:
        wd = self._lib.inotify_add_watch(self._fd, os.fsencode(directory), _MASK)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"cannot watch {directory}")
        self._dirs[wd] = directory

    def add(self, directory: str) -> None:
        """Watch a directory the caller has just created (its creation is then no reason to rescan); the files
        already in it are reported by the next :meth:`changes`. ``OSError`` when it cannot be watched."""
        self._add(directory)
        self._added.add(directory)
        self._pending.update(entry.path for entry in os.scandir(directory) if not entry.is_dir())

    def changes(self) -> set[str] | None:
        """The paths (directory + name) something happened to since the last call; ``None`` when the watch
        cannot tell (see module docs) or is closed, or in a forked child (its parent shares the queue)."""
        if self._fd is None or os.getpid() != self._pid:
            return None
        found, self._pending = self._pending, set()
        lost = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                return None
            if not data:
                break
            offset = 0
            while offset < len(data):
                wd, mask, _, size = _HEADER.unpack_from(data, offset)
                name = data[offset + _HEADER.size : offset + _HEADER.size + size].rstrip(b"\0")
                offset += _HEADER.size + size
                directory = self._dirs.get(wd)
                if mask & _LOST or directory is None:
                    lost = True
                elif mask & _IN_ISDIR:
                    path = os.path.join(directory, os.fsdecode(name))
                    created_here = mask & _IN_CREATE and path in self._added
                    moved = mask & (_IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO)
                    lost = lost or bool(moved and not created_here)
                else:
                    found.add(os.path.join(directory, os.fsdecode(name)))
        return None if lost else found

    def close(self) -> None:
        """Release the inotify instance (each process may hold only a few: ``fs.inotify.max_user_instances``)."""
        if self._fd is not None:
            self._finalizer()  # closes the descriptor (also done when the watch is garbage-collected)
            self._fd = None


def open_watch(root: str, is_manifest_name: Callable[[str], bool]) -> DirectoryWatch | None:
    """A watch over ``root`` and every directory below it the loader walks (hidden ones are not walked), or
    ``None`` when the tree cannot be watched exactly (a symbolic link to a directory or to a file
    ``is_manifest_name`` accepts, inotify unavailable or out of instances): the caller then rescans before
    every operation."""
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
