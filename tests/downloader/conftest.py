"""Helpers for the downloader tests: proxies in front of the real servers, content checks."""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Callable, Iterator

import pytest

from tests.servers.countingproxy import CountingProxy


@pytest.fixture
def proxy() -> Iterator[Callable[..., tuple[CountingProxy, str]]]:
    """``proxy(upstream_url, token=None, throttle=None) -> (CountingProxy, base_url)``; stopped after the test."""
    started: list[CountingProxy] = []

    def make(upstream: str, token: str | None = None, throttle: float | None = None) -> tuple[CountingProxy, str]:
        counting = CountingProxy(upstream.removeprefix("http://"), token=token, throttle_bytes_per_second=throttle)
        started.append(counting)
        return counting, counting.start()

    yield make
    for counting in started:
        counting.stop()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(root: pathlib.Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative path -> content), bookkeeping included."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
