"""Waiting for something a server or a worker does in its own time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T], timeout: float = 60.0, what: str = "the condition", interval: float = 0.2) -> T:
    """``probe()``'s first truthy value, polled every ``interval`` seconds; an AssertionError naming ``what``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
