"""A context variable set for the duration of a block: what a run-scoped setting (a reporter, a collector, a
flag) is in this project, so a block nested in another, or a task started inside it, sees it and nothing
outside the block ever does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")


@contextmanager
def scoped(var: ContextVar[T], value: T) -> Iterator[T]:
    """Set ``var`` to ``value`` while the block runs, and back to what it was after (also when the block raises).

    Args:
        var: The context variable.
        value: Its value inside the block.

    Yields:
        ``value``.
    """
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
