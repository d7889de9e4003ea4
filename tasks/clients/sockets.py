"""A deadline over everything some threads do on the network: connecting, a status line, headers, a body.

Why the socket timeouts are not enough: they bound each read, not the exchange, so a server that sends its answer's
headers (or its body) a byte at a time keeps every read under them for as long as it likes. A cache fill
(:class:`tasks.clients.sources.deadline.FillDeadline`) and a Prometheus query (:func:`tasks.clients.streams.answer_within`)
each get one :class:`SocketDeadline`.

How a read blocked inside a client library ends: ``huggingface_hub`` (httpx), ``botocore`` and ``requests``
(urllib3) keep their sockets to themselves, and a thread blocked in a read wakes only on data, on its timeout, or
when its socket is shut down (``shutdown(2)``; closing it from another thread does not wake the read). So while a
thread works under :func:`covering` (or :func:`cover_thread`), every socket it connects is noted: Python raises the
audit event ``socket.connect`` for each one, and one audit hook, installed for the process on first use, notes the
socket's descriptor, identity (device and inode) and address; for a thread outside a deadline it does nothing. When
the deadline passes, a watcher thread shuts down every noted socket that is still the same one (a descriptor since
reused by another socket is left alone), and again every half second until the deadline is left (a connection
racing with it), and a connection tried after it fails at once with the deadline's :meth:`SocketDeadline.error`. A
pooled connection opened before the deadline began is not noted.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["SWEEP_SECONDS", "SocketDeadline", "cover_thread", "covering", "current_deadline"]

SWEEP_SECONDS = 0.5
"""How often, once the deadline passed, the noted sockets are shut down again."""

_scope = threading.local()
_hook_lock = threading.Lock()
_hook_installed = False


class SocketDeadline:
    """How long the covered threads' network work may take, counted from when this is made, and the sockets they
    connected. The watcher runs while the deadline is entered (``with deadline:``)."""

    def __init__(self, seconds: float) -> None:
        self.started = time.monotonic()
        self.seconds = float(seconds)
        self.expired = threading.Event()
        self._changed = threading.Condition()
        self._ended = False
        self._noted: dict[int, tuple[int, int, tuple[Any, ...]]] = {}
        self._watcher: threading.Thread | None = None

    def remaining(self) -> float:
        """Seconds left before the deadline (0 once it passed).

        Returns:
            The time left, at least 0.
        """
        return max(0.0, self.started + self.seconds - time.monotonic())

    def passed(self) -> bool:
        """Whether the deadline has passed (the watcher may not have acted on it yet).

        Returns:
            True once the time allowed is over.
        """
        return self.expired.is_set() or self.remaining() <= 0

    def error(self) -> Exception:
        """What a connection tried after the deadline raises (a subclass names its own failure).

        Returns:
            The error.
        """
        return TimeoutError(f"not done within {self.seconds:g}s")

    def __enter__(self) -> SocketDeadline:
        _install_hook()
        self._ended = False
        self._watcher = threading.Thread(target=self._watch, name="socket-deadline", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._ended = True
            self._changed.notify_all()
        if self._watcher is not None:
            self._watcher.join()

    # ------------------------------------------------------------------------------------------------ internals

    def _watch(self) -> None:
        """Wait for the deadline; then shut the noted sockets down, again every :data:`SWEEP_SECONDS`."""
        with self._changed:
            while not self._ended and self.remaining() > 0:
                self._changed.wait(self.remaining())
            if self._ended:
                return
            self.expired.set()
        while True:
            self._shut_noted()
            with self._changed:
                if not self._ended:
                    self._changed.wait(SWEEP_SECONDS)
                if self._ended:
                    return

    def _connecting(self, sock: socket.socket, address: Any) -> None:
        """Note a socket a covered thread is connecting; refuse it once the deadline passed."""
        with self._changed:
            if self.expired.is_set() or self.remaining() <= 0:
                sock.close()
                raise self.error()
            try:
                stat = os.fstat(sock.fileno())
            except OSError:
                return
            where = tuple(address[:2]) if isinstance(address, tuple) else (address,)
            self._noted[sock.fileno()] = (stat.st_dev, stat.st_ino, where)

    def _shut_noted(self) -> None:
        """Shut down every noted socket that is still the one noted."""
        with self._changed:
            noted = list(self._noted.items())
        for fd, (device, inode, where) in noted:
            try:
                duplicate = os.dup(fd)
            except OSError:
                continue  # closed since
            try:
                sock = socket.socket(fileno=duplicate)
            except OSError:  # no longer a socket
                os.close(duplicate)
                continue
            with sock, contextlib.suppress(OSError):  # closing it closes the duplicate only
                stat = os.fstat(duplicate)
                if (stat.st_dev, stat.st_ino) == (device, inode) and (inode or _peer(sock) == where):
                    sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def covering(deadline: SocketDeadline | None) -> Iterator[None]:
    """Note the sockets the current thread connects in the block as ``deadline``'s (nothing when it is None).

    Args:
        deadline: The deadline, or None.

    Yields:
        Nothing; the block runs with the thread's connections noted.
    """
    if deadline is None:
        yield
        return
    before = getattr(_scope, "deadline", None)
    _scope.deadline = deadline
    try:
        yield
    finally:
        _scope.deadline = before


def cover_thread(deadline: SocketDeadline | None) -> None:
    """Note the sockets the current thread connects, for the rest of its life, as ``deadline``'s: the initializer of
    a thread pool that serves one deadline only (its threads end with it), as :func:`covering` is for a block.

    Args:
        deadline: The deadline, or None (nothing is noted).
    """
    if deadline is not None:
        _scope.deadline = deadline


def current_deadline() -> SocketDeadline | None:
    """The deadline covering the current thread, if any.

    Returns:
        The deadline, or None.
    """
    deadline: SocketDeadline | None = getattr(_scope, "deadline", None)
    return deadline


def _peer(sock: socket.socket) -> tuple[Any, ...]:
    """The address ``sock`` is connected to, as :meth:`SocketDeadline._connecting` notes one."""
    return tuple(sock.getpeername()[:2])


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The process's audit hook: a socket connected by a thread under :func:`covering` is its deadline's."""
    if event == "socket.connect":
        deadline = getattr(_scope, "deadline", None)
        if deadline is not None:
            deadline._connecting(args[0], args[1])


def _install_hook() -> None:
    """Install :func:`_audit` once per process (audit hooks cannot be removed; it does nothing outside a deadline)."""
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True
