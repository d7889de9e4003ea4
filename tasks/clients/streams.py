"""Reading an HTTP answer whole, within a size and a time: what every client that reads an answer into memory
(Prometheus, OCI registries) needs of a server it does not control.

Why not the socket timeout alone: it bounds each read, not the answer, so a server sending a byte at a time keeps
every read under it for as long as it likes (a registry manifest, a Prometheus query held for minutes). Each
``read1`` returns what one read got, so the deadline is checked as bytes arrive, and the size before they are kept.
"""

from __future__ import annotations

import time

import requests

__all__ = ["BodyOverdue", "BodyTooLarge", "read_bounded"]


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
