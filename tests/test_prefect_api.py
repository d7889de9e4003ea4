"""The worker's Prefect API (``prefect_api`` in tests/conftest.py) is the API of everything in the test process."""

from __future__ import annotations

import threading


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
