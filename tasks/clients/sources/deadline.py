"""A fill's overall deadline, and what ends the reads it cuts short.

Why the socket timeouts are not enough: they bound each read, not the fill, so a server that sends its answer's
headers (or its body) a byte at a time keeps every read under them for as long as it likes. A fill Job has
Kubernetes' ``activeDeadlineSeconds``; a fill run by hand has this.

How a read blocked inside a client library ends: ``huggingface_hub`` (httpx) and ``botocore`` (urllib3) keep their
sockets to themselves, and a thread blocked in a read wakes only on data, on its timeout, or when its socket is shut
down (``shutdown(2)``; closing it from another thread does not wake the read). So while a thread works under
:func:`covering`, every socket it connects is noted: Python raises the audit event ``socket.connect`` for each one,
and one audit hook, installed for the process on first use, notes the socket's descriptor, identity (device and
inode) and address; for a thread outside a fill it does nothing. When the deadline passes, a watcher thread shuts
down every noted socket that is still the same one (a descriptor since reused by another socket is left alone),
and again every half second until the fill ends (a connection racing with the deadline), and a connection tried
under :func:`covering` after it fails at once with :class:`~tasks.clients.sources.errors.DeadlineExceeded`. The
downloader's threads also check the deadline between reads and stop. A pooled connection opened before the fill
began (by an earlier fill in the same process) is not noted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from engine.units import format_duration
from tasks.clients.sources.errors import DeadlineExceeded

SWEEP_SECONDS = 0.5
"""How often, once the deadline passed, the sockets of the fill are shut down again."""

_scope = threading.local()
_hook_lock = threading.Lock()
_hook_installed = False


class FillDeadline:
    """How long a fill may take, counted from when this is made, and the sockets its threads connected.

    ``seconds`` is the time allowed, or a function of the source's size in bytes giving it (called with 0 until
    :meth:`size_known`). The watcher runs while the deadline is entered (``with deadline:``).
    """

    def __init__(self, seconds: float | Callable[[int], float]) -> None:
        self.started = time.monotonic()
        self._budget = seconds
        self.seconds = float(seconds(0) if callable(seconds) else seconds)
        self.expired = threading.Event()
        self._changed = threading.Condition()
        self._ended = False
        self._noted: dict[int, tuple[int, int, tuple[Any, ...]]] = {}
        self._watcher: threading.Thread | None = None

    def size_known(self, total_bytes: int) -> None:
        """Give the fill the time its source's size earns, when ``seconds`` was given as a function of it.

        Args:
            total_bytes: The size of every file of the source, in bytes.
        """
        if callable(self._budget):
            with self._changed:
                self.seconds = float(self._budget(total_bytes))
                self._changed.notify_all()

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

    def error(self, what: str = "the fill") -> DeadlineExceeded:
        """The failure of a fill stopped by the deadline.

        Args:
            what: The fill, as the message names it (``the fill of /mnt/models``).

        Returns:
            The error, saying the deadline and that what was fetched is kept for the next fill.
        """
        return DeadlineExceeded(
            f"{what} did not complete within its deadline of {format_duration(self.seconds)}: stopped, keeping the "
            "files and parts fetched so far for the next fill to resume"
        )

    def __enter__(self) -> FillDeadline:
        _install_hook()
        self._ended = False
        self._watcher = threading.Thread(target=self._watch, name="fill-deadline", daemon=True)
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
        """Note a socket a thread of the fill is connecting; refuse it once the deadline passed."""
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
def covering(deadline: FillDeadline | None) -> Iterator[None]:
    """Note the sockets the current thread connects in the block as the fill's (nothing when ``deadline`` is None).

    Args:
        deadline: The fill's deadline, or None.

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


def cover_thread(deadline: FillDeadline | None) -> None:
    """Note the sockets the current thread connects, for the rest of its life, as the fill's: the initializer of a
    thread pool that serves one fill only (its threads end with it), as :func:`covering` is for a block.

    Args:
        deadline: The fill's deadline, or None (nothing is noted).
    """
    if deadline is not None:
        _scope.deadline = deadline


def refuse_after_deadline(**_: Any) -> None:
    """A ``botocore`` ``before-send`` handler: a request (a retry, most often) of a thread under :func:`covering`
    fails at once with :class:`~tasks.clients.sources.errors.DeadlineExceeded` once the deadline passed (the client
    does not retry that error), instead of after the client's retries and their backoff.

    Args:
        **_: What botocore passes a handler (the request, the event's name).

    Raises:
        DeadlineExceeded: The deadline of the thread's fill has passed.
    """
    deadline: FillDeadline | None = getattr(_scope, "deadline", None)
    if deadline is not None and deadline.passed():
        raise deadline.error()


class QuietAfterDeadline(logging.Filter):
    """A log filter dropping what a thread under :func:`covering` logs once its deadline passed: a client's notes on
    the connection the deadline ended (huggingface_hub's "Trying to resume download..."), which it is not."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep ``record`` unless the deadline of the thread's fill has passed.

        Args:
            record: A log record of the client library.

        Returns:
            False to drop the record.
        """
        deadline: FillDeadline | None = getattr(_scope, "deadline", None)
        return deadline is None or not deadline.passed()


QUIET_AFTER_DEADLINE = QuietAfterDeadline()
"""The one filter, so adding it to a logger again adds nothing."""


def _peer(sock: socket.socket) -> tuple[Any, ...]:
    """The address ``sock`` is connected to, as :meth:`FillDeadline._connecting` notes one."""
    return tuple(sock.getpeername()[:2])


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The process's audit hook: a socket connected by a thread under :func:`covering` is its fill's."""
    if event == "socket.connect":
        deadline = getattr(_scope, "deadline", None)
        if deadline is not None:
            deadline._connecting(args[0], args[1])


def _install_hook() -> None:
    """Install :func:`_audit` once per process (audit hooks cannot be removed; it does nothing outside a fill)."""
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True
