"""Reading an HTTP answer whole, within a size and a time: what every client that reads an answer into memory
(Prometheus, OCI registries) needs of a server it does not control.

Why not the socket timeout alone: it bounds each read, not the answer, so a server sending a byte at a time keeps
every read under it for as long as it likes (a registry manifest, a Prometheus query held for minutes). Each
``read1`` returns what one read got, so the deadline is checked as bytes arrive, and the size before they are kept.
The status line and headers arrive before the body is read: :func:`answer_within` bounds the whole exchange, its
connection and headers included (:class:`tasks.clients.sockets.SocketDeadline`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import requests

from tasks.clients.sockets import SocketDeadline, covering

__all__ = ["BodyOverdue", "BodyTooLarge", "answer_within", "read_bounded"]


class BodyOverdue(Exception):
    """The answer did not arrive whole within its deadline."""


class BodyTooLarge(Exception):
    """The answer is larger than its limit."""


def read_bounded(response: requests.Response, limit: int, deadline_s: float) -> bytes:
    """The body of a response made with ``stream=True``, decompressed, read as bytes arrive.

    Args:
        response: The response (not closed here: the caller closes it).
        limit: The most bytes the body may hold.
        deadline_s: How long the whole body may take to arrive.

    Returns:
        The body.

    Raises:
        BodyTooLarge: The body is larger than ``limit`` (``larger than N bytes``).
        BodyOverdue: The body took longer than ``deadline_s`` (``no complete answer within Ns``).
    """
    started, chunks, size = time.monotonic(), [], 0
    while chunk := response.raw.read1(1 << 16, decode_content=True):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"larger than {limit} bytes")
        if time.monotonic() - started > deadline_s:
            raise BodyOverdue(f"no complete answer within {deadline_s:g}s")
        chunks.append(chunk)
    return b"".join(chunks)


class _AnswerDeadline(SocketDeadline):
    """The deadline of one HTTP exchange: a connection tried after it is an overdue answer."""

    def error(self) -> BodyOverdue:
        """The exchange's failure once its deadline passed.

        Returns:
            ``no complete answer within Ns``.
        """
        return BodyOverdue(f"no complete answer within {self.seconds:g}s")


@contextlib.contextmanager
def answer_within(deadline_s: float) -> Iterator[None]:
    """Bound a whole HTTP exchange of the current thread (connection, status line, headers, body) by ``deadline_s``:
    once it passes, the sockets the thread connected in the block are shut down, so a read blocked on a server that
    sends its headers a byte a second ends, and what the block then raises (the client's connection error), or its
    end on an answer cut short, is :class:`BodyOverdue`, as a body read past :func:`read_bounded`'s deadline is.

    Args:
        deadline_s: How long the exchange may take, in seconds from entering the block.

    Yields:
        Nothing; the block runs under the deadline.

    Raises:
        BodyOverdue: The deadline passed before the block ended (``no complete answer within Ns``).
    """
    deadline = _AnswerDeadline(deadline_s)
    with deadline, covering(deadline):
        try:
            yield
        except Exception as exc:
            if deadline.expired.is_set():
                raise deadline.error() from exc
            raise
    if deadline.expired.is_set():  # its sockets were shut down: what arrived may be cut short
        raise deadline.error()
