"""A fill's overall deadline, and what ends the reads it cuts short.

Why the socket timeouts are not enough: they bound each read, not the fill, so a server that sends its answer's
headers (or its body) a byte at a time keeps every read under them for as long as it likes. A fill Job has
Kubernetes' ``activeDeadlineSeconds``; a fill run by hand has this: a :class:`tasks.clients.sockets.SocketDeadline`
(every socket a thread of the fill connects under :func:`covering` is shut down when it passes, and a connection
tried after it fails at once with :class:`~tasks.clients.sources.errors.DeadlineExceeded`) whose time may depend on
the source's size. The downloader's threads also check the deadline between reads and stop, botocore's retries
stop at it (:func:`refuse_after_deadline`), and huggingface_hub's notes on the connections it ended are dropped
(:data:`QUIET_AFTER_DEADLINE`). A pooled connection opened before the fill began (by an earlier fill in the same
process) is not noted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from engine.units import format_duration
from tasks.clients.sockets import SocketDeadline, cover_thread, covering, current_deadline
from tasks.clients.sources.errors import DeadlineExceeded

__all__ = [
    "QUIET_AFTER_DEADLINE",
    "FillDeadline",
    "QuietAfterDeadline",
    "cover_thread",
    "covering",
    "refuse_after_deadline",
]


class FillDeadline(SocketDeadline):
    """How long a fill may take, counted from when this is made, and the sockets its threads connected.

    ``seconds`` is the time allowed, or a function of the source's size in bytes giving it (called with 0 until
    :meth:`size_known`). The watcher runs while the deadline is entered (``with deadline:``).
    """

    def __init__(self, seconds: float | Callable[[int], float]) -> None:
        super().__init__(seconds(0) if callable(seconds) else seconds)
        self._budget = seconds

    def size_known(self, total_bytes: int) -> None:
        """Give the fill the time its source's size earns, when ``seconds`` was given as a function of it.

        Args:
            total_bytes: The size of every file of the source, in bytes.
        """
        if callable(self._budget):
            with self._changed:
                self.seconds = float(self._budget(total_bytes))
                self._changed.notify_all()

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
        super().__enter__()
        return self


def refuse_after_deadline(**_: Any) -> None:
    """A ``botocore`` ``before-send`` handler: a request (a retry, most often) of a thread under :func:`covering`
    fails at once with :class:`~tasks.clients.sources.errors.DeadlineExceeded` once the deadline passed (the client
    does not retry that error), instead of after the client's retries and their backoff.

    Args:
        **_: What botocore passes a handler (the request, the event's name).

    Raises:
        DeadlineExceeded: The deadline of the thread's fill has passed.
    """
    deadline = current_deadline()
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
        deadline = current_deadline()
        return deadline is None or not deadline.passed()


QUIET_AFTER_DEADLINE = QuietAfterDeadline()
"""The one filter, so adding it to a logger again adds nothing."""
