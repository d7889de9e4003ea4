"""Waiting for something a server or a worker does in its own time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

MAX_INTERVAL = 2.0
"""The longest pause between two polls (seconds): what a wait may run past the moment its condition held.

A poll is not free: one GET of a test Prefect server took about 36 ms of the server's CPU, so the 0.2 s polls of
a two-minute wait cost the server a fifth of a core throughout (the chained-runs test polled four requests every
0.2 s for its 140 s). Polls start at the caller's interval, for what happens at once, and back off to this."""


def poll_intervals(first: float, most: float = MAX_INTERVAL) -> Iterator[float]:
    """The pauses between polls: ``first``, then half as long again each time, up to ``most`` (or ``first`` if
    that is longer)."""
    interval = first
    while True:
        yield interval
        interval = max(first, min(interval * 1.5, most))


def wait_for(probe: Callable[[], T], timeout: float = 60.0, what: str = "the condition", interval: float = 0.2) -> T:
    """``probe()``'s first truthy value, polled every ``interval`` seconds at first and less often as the wait goes
    on (:func:`poll_intervals`), the last at the deadline; an AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pauses = poll_intervals(interval)
    while True:
        value = probe()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(min(next(pauses), left))  # the last poll is at the deadline, not a pause before it
