"""The app the tests' Prefect API serves: Prefect's own (``prefect.server.api.server:create_app``, the app factory
``SubprocessASGIServer`` runs), wrapped in a watch that reports a request the API has held for 20 s.

Why: about one full run in five, an in-process flow run's final state write came back after 60 s (Prefect's request
timeout and SQLite's busy timeout are both 60 s), and the API logged nothing. When a request passes the threshold, the
watch writes to the API's log (``api.log``, shown under a failed test that used the API) the request, every thread's
stack (an aiosqlite thread waiting on SQLite's lock shows there) and every asyncio task's stack (the coroutine that
holds the lock shows there). It runs in a thread of its own, so it reports even when the event loop is blocked.
"""

from __future__ import annotations

import asyncio
import faulthandler
import itertools
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SLOW_REQUEST_S = 20.0
CHECK_EVERY_S = 5.0


class SlowRequestWatch:
    """ASGI middleware: remembers each HTTP request in flight; a watch thread reports those older than
    ``threshold`` seconds, once each, with the process's thread and task stacks."""

    def __init__(self, app: ASGIApp, threshold: float = SLOW_REQUEST_S, check_every: float = CHECK_EVERY_S) -> None:
        self.app = app
        self.threshold = threshold
        self.check_every = check_every
        self.in_flight: dict[int, tuple[float, str]] = {}
        self.reported: set[int] = set()
        self.ids = itertools.count()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watch: threading.Thread | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self._start_watch()
        request = next(self.ids)
        self.in_flight[request] = (time.monotonic(), f"{scope['method']} {scope['path']}")
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight.pop(request, None)
            self.reported.discard(request)

    def _start_watch(self) -> None:
        if self.watch is None:
            self.loop = asyncio.get_running_loop()
            self.watch = threading.Thread(target=self._watch, name="slow-request-watch", daemon=True)
            self.watch.start()

    def _watch(self) -> None:
        while True:
            time.sleep(self.check_every)
            now = time.monotonic()
            slow = [
                (request, f"{what} ({now - started:.0f} s)")
                for request, (started, what) in list(self.in_flight.items())
                if now - started > self.threshold and request not in self.reported
            ]
            if slow:
                self.reported.update(request for request, _ in slow)
                self._report([what for _, what in slow])

    def _report(self, requests: list[str]) -> None:
        out = sys.stderr
        print(f"SLOW REQUESTS past {self.threshold:g} s: {', '.join(requests)}", file=out, flush=True)
        faulthandler.dump_traceback(file=out, all_threads=True)
        print("asyncio tasks:", file=out, flush=True)
        for task in self._tasks():
            print(f"-- {task.get_name()}", file=out)
            out.writelines(traceback.format_list(awaited_stack(task.get_coro())))
        out.flush()

    def _tasks(self) -> list[asyncio.Task[Any]]:
        """The loop's tasks, read from this thread (a diagnostic: retried if the set changes while copied)."""
        for _ in range(5):
            try:
                return list(asyncio.all_tasks(self.loop))
            except RuntimeError:
                continue
        return []


def awaited_stack(coroutine: Any) -> traceback.StackSummary:
    """Where a suspended coroutine waits, outermost first: its frame and those of what it awaits, down the chain
    (``Task.get_stack`` shows the outermost frame only)."""
    frames = []
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
        if frame is not None:
            frames.append((frame, frame.f_lineno))
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "gi_yieldfrom", None)
    return traceback.StackSummary.extract(frames)


def create_app() -> SlowRequestWatch:
    """Prefect's API app (its settings from the environment, as under ``SubprocessASGIServer``) under the watch.
    Imported here: the watch alone is imported by its test without the server's 5 s of imports."""
    from prefect.server.api.server import create_app as create_prefect_app

    return SlowRequestWatch(create_prefect_app())
