"""The worker's Prefect API (``prefect_api`` in tests/conftest.py) is the API of everything in the test process."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest


def test_a_thread_without_the_tests_context_uses_the_workers_api(prefect_api: str) -> None:
    """A plain thread (a watch, an executor's worker) does not inherit the test's context and reads Prefect's
    process-wide settings: they name the worker's API, so Prefect never starts a second server of its own on
    the worker's database for it."""
    from prefect.settings import get_current_settings

    seen: list[str | None] = []
    thread = threading.Thread(target=lambda: seen.append(get_current_settings().api.url))
    thread.start()
    thread.join(timeout=30)
    assert seen == [prefect_api]


def test_a_request_held_past_the_threshold_is_reported_with_the_stacks_that_hold_it(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The API's slow-request watch (tests/servers/prefectapi_app.py) names the request once, with every thread's
    stack and every task's, while the request is still held; a quick request is not reported."""
    from tests.servers.prefectapi_app import SlowRequestWatch

    async def held_on_the_lock() -> None:
        await asyncio.sleep(0.6)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await held_on_the_lock()

    watch = SlowRequestWatch(app, threshold=0.2, check_every=0.05)

    async def requests() -> None:
        scope = {"type": "http", "method": "POST", "path": "/fast"}
        await watch(scope, None, None)
        await watch({**scope, "path": "/slow"}, None, None)

    asyncio.run(requests())
    reported = capfd.readouterr().err
    assert reported.count("SLOW REQUESTS past 0.2 s: POST /slow") == 1, reported
    assert "/fast" not in reported
    assert "held_on_the_lock" in reported  # the task's stack
    assert 'File "' in reported and "Thread 0x" in reported  # the threads' stacks (faulthandler)
