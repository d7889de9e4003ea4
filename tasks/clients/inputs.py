"""A file a person hands a command (a metrics file, benchmark results, a windows file, a trace) opened and read safely.

Such a file is opened without blocking (a named pipe with no writer would hold the command forever) and refused
unless it is a regular file: a directory, a pipe, a device (``/dev/zero`` never ends, ``/dev/stdin`` waits) or a
socket is named as what it is. A file read whole is refused, before it is read, when it is larger than its
reader's limit (the message gives both sizes), and text that is not UTF-8 is refused with the byte where
it stops being UTF-8. Every refusal is an :class:`InputFileError` naming the file; what cannot be opened at all
(missing, no permission) stays the :class:`OSError` it is, for the caller to word as it words the others.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["InputFileError", "InputText", "not_regular", "open_regular", "read_text"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(ValueError):
    """A file cannot be read as its command needs: ``problem`` says why (without the path), ``str()`` names the file."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem

    def __reduce__(self) -> tuple[type[InputFileError], tuple[str, str]]:
        return type(self), (self.path, self.problem)


@dataclass(frozen=True)
class InputText:
    """A file's text and when it was last modified (Unix seconds)."""

    text: str
    mtime_s: float


def not_regular(mode: int) -> str:
    """Why a file of ``mode`` is refused: what it is, when it is one of the known kinds (the words every reader of a
    person's file, and the local cluster folder, refuse it with).

    Args:
        mode: The file's ``st_mode``.

    Returns:
        E.g. ``a named pipe (FIFO), not a regular file``.
    """
    kind = next((name for test, name in _KINDS if test(mode)), None)
    return f"{kind}, not a regular file" if kind else "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for reading in binary, without blocking on a named pipe, and only when it is a regular file.

    Args:
        path: The file (a symbolic link is followed: what it points at must be a regular file).

    Returns:
        The open file (blocking reads), for the caller to close.

    Raises:
        InputFileError: It is a directory, a named pipe, a device or a socket (the problem names which).
        OSError: It cannot be opened (missing, no permission).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputFileError(path, not_regular(mode))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: str | os.PathLike[str], limit: int, what: str, encoding: str = "utf-8") -> InputText:
    """A regular file's whole text, refused unread when it is larger than ``limit`` bytes.

    Args:
        path: The file.
        limit: The most bytes it may hold.
        what: What the file is, for the size refusal (``a metrics file``).
        encoding: Its encoding (UTF-8; ``utf-8-sig`` also drops a byte-order mark).

    Returns:
        Its text and modification time.

    Raises:
        InputFileError: It is not a regular file, it is larger than ``limit`` (now or while it is read), or its
            bytes are not text in ``encoding``.
        OSError: It cannot be opened or read.
    """
    with open_regular(path) as handle:
        status = os.fstat(handle.fileno())
        if status.st_size > limit:
            raise InputFileError(path, _too_large(status.st_size, limit, what))
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while it was read
        raise InputFileError(path, _too_large(len(data), limit, what, at_least=True))
    try:
        return InputText(data.decode(encoding), status.st_mtime)
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 text (byte {exc.start:,}: {exc.reason})") from None


def _too_large(size: int, limit: int, what: str, at_least: bool = False) -> str:
    shown = f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit:,} bytes"
    return f"{'more than ' if at_least else ''}{size:,} bytes, larger than the {shown} {what} may hold"
