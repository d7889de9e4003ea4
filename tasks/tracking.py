"""Prefect where a run is tracked, plain calls where it is not: how tasks meet Prefect's run machinery.

A command on a manifests directory, or a dry run, needs no Prefect API: nothing reads its run history, its
artifacts or its events, and Prefect costs seconds before the first decision (importing it takes about 2 s of
CPU; a task call outside a configured API starts a temporary server, about 10 s more: ``SyncClientContext`` in
Prefect's task engine creates an API client for every task run). So:

- inside a Prefect flow or task run (a deployment's run, or a command run with ``--track`` or
  ``PREFECT_API_URL``), every task call is a Prefect task run as before: retries, names, logs, events;
- outside one (:func:`tracked` is false), a task is its function called with the same arguments and the same
  retries, and nothing here imports Prefect.

:func:`task` is the decorator every Modelplane task uses (Prefect's ``@task`` with ``cache_policy=NO_CACHE``: a
task reads or writes the live cluster, its result must never come from a cache); :func:`run_logger` and
:func:`quote` stand in for Prefect's ``get_run_logger`` and ``quote`` the same way.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from engine.scopes import scoped

if TYPE_CHECKING:
    import prefect

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
R_co = TypeVar("R_co", covariant=True)

LOGGER_NAME = "modelplane.runs"
"""The logger of an untracked run (what ``get_run_logger`` is inside a tracked one)."""


def tracked() -> bool:
    """Whether the caller runs inside a Prefect flow or task run (Prefect loaded and its run context set).

    Returns:
        True inside a Prefect flow or task run.
    """
    context = sys.modules.get("prefect.context")
    if context is None:  # Prefect is not even imported: no run can be active
        return False
    return context.FlowRunContext.get() is not None or context.TaskRunContext.get() is not None


_UNTRACKED_RUN: ContextVar[bool] = ContextVar("modelplane_untracked_run", default=False)


@contextmanager
def untracked_run() -> Iterator[None]:
    """Mark the block as a flow run with no Prefect API (flows/runs.py): what it would send to one (events, a
    run state) it leaves out.

    Yields:
        Nothing; the block runs marked as an untracked run.
    """
    with scoped(_UNTRACKED_RUN, True):
        yield


def in_untracked_run() -> bool:
    """Whether the caller runs inside :func:`untracked_run`.

    Returns:
        True inside :func:`untracked_run`.
    """
    return _UNTRACKED_RUN.get()


def map_in_threads(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``fn`` of every item on a pool of ``workers`` threads, in the order of ``items``, each call in a copy of
    the caller's context. A pool's threads start with an empty context, where :func:`in_untracked_run` is false
    (an event sent for a cache request of an untracked run then started a temporary Prefect API: 10-17 s and a
    database in the home folder) and the boundary's rejections, the progress reporter and Prefect's run context
    are gone. One item (or none) runs in the caller's thread.

    Args:
        fn: The work on one item (an independent API call: reads and writes of separate objects).
        items: The items.
        workers: How many calls run at once.

    Returns:
        What ``fn`` returned for each item, in the order of ``items``.
    """
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        # each context is copied here, in the caller's thread, before the call is handed to a worker
        futures = [pool.submit(copy_context().run, fn, item) for item in items]
        return [future.result() for future in futures]


def run_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    """Prefect's run logger inside a tracked run, else the ``modelplane.runs`` logger.

    Returns:
        The logger to log a run's lines with.
    """
    if tracked():
        from prefect import get_run_logger

        return get_run_logger()
    return logging.getLogger(LOGGER_NAME)


def quote(value: T) -> T:
    """Prefect's ``quote`` inside a tracked run (a task input Prefect must not walk: every object of a cycle),
    else the value itself (an untracked call walks nothing).

    Args:
        value: A task input (e.g. a model of the whole cluster) Prefect must not walk.

    Returns:
        The value wrapped in Prefect's ``quote`` in a tracked run, else the value itself.
    """
    if tracked():
        from prefect.utilities.annotations import quote as prefect_quote

        return prefect_quote(value)  # type: ignore[return-value]  # Prefect unwraps it before the task's function
    return value


class Pending(Protocol[R_co]):
    """What ``submit`` returns: a Prefect future, or a :class:`Deferred` call; ``result()`` waits for it."""

    def result(self) -> R_co: ...


class Deferred(Generic[R]):
    """An untracked task call made when its result is first asked for (then kept, or its exception raised)."""

    def __init__(self, call: Callable[[], R]) -> None:
        self.call = call
        self.outcome: Future[R] | None = None

    def result(self) -> R:
        if self.outcome is None:
            self.outcome = Future()
            try:
                self.outcome.set_result(self.call())
            except Exception as exc:
                self.outcome.set_exception(exc)
        return self.outcome.result()


class Task(Generic[P, R]):
    """A Modelplane task: a Prefect task run when called inside a tracked run, its function otherwise.

    ``fn`` is the function; the Prefect task is built on first tracked use (:attr:`prefect`), and any attribute
    this class does not define (``with_options``, ``map``, ...) is the Prefect task's.
    """

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str,
        retries: int = 0,
        retry_delay_seconds: float = 0,
        task_run_name: str | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.retries = retries
        self.retry_delay_seconds = retry_delay_seconds
        self.task_run_name = task_run_name
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def prefect(self) -> prefect.Task[P, R]:
        """The Prefect task of this function (importing Prefect)."""
        from prefect import task as prefect_task
        from prefect.cache_policies import NO_CACHE

        options: dict[str, Any] = {"name": self.name, "cache_policy": NO_CACHE, "retries": self.retries}
        if self.retry_delay_seconds:
            options["retry_delay_seconds"] = self.retry_delay_seconds
        if self.task_run_name:
            options["task_run_name"] = self.task_run_name
        return prefect_task(**options)(self.fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if tracked():
            return self.prefect(*args, **kwargs)
        return self.call_untracked(*args, **kwargs)

    def call_untracked(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """The function with the task's retries, as Prefect retries it: every exception, ``retries`` more
        attempts, ``retry_delay_seconds`` apart."""
        for attempt in range(self.retries + 1):
            try:
                return self.fn(*args, **kwargs)
            except Exception as exc:
                if attempt == self.retries:
                    raise
                logging.getLogger(LOGGER_NAME).warning(
                    "task %s failed (%s); retry %d/%d in %g s",
                    self.name,
                    " ".join(str(exc).split()) or type(exc).__name__,
                    attempt + 1,
                    self.retries,
                    self.retry_delay_seconds,
                )
                time.sleep(self.retry_delay_seconds)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> Pending[R]:
        """Prefect's ``submit`` inside a tracked run (a future of the flow's task runner); else the call, made
        when its result is first asked for (in the order a flow asks, so its progress moves as they finish)."""
        if tracked():
            return self.prefect.submit(*args, **kwargs)
        return Deferred(functools.partial(self.call_untracked, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.prefect, name)


def task(
    *, name: str, retries: int = 0, retry_delay_seconds: float = 0, task_run_name: str | None = None
) -> Callable[[Callable[P, R]], Task[P, R]]:
    """The decorator of every Modelplane task (see the module docs); the options are Prefect's.

    Args:
        name: The task's name, as Prefect's UI shows it.
        retries: How many times Prefect retries a failed tracked run.
        retry_delay_seconds: The pause between retries, in seconds.
        task_run_name: Prefect's run name template, or None for Prefect's default.

    Returns:
        The decorator that makes a function a :class:`Task`.
    """

    def decorate(fn: Callable[P, R]) -> Task[P, R]:
        return Task(
            fn, name=name, retries=retries, retry_delay_seconds=retry_delay_seconds, task_run_name=task_run_name
        )

    return decorate


def table_artifact(key: str, table: list[dict[str, Any]], description: str) -> None:
    """A Prefect table artifact of the current tracked run (nothing outside one: no API to hold it).

    Args:
        key: The artifact's key (lowercase letters, digits and dashes).
        table: The rows, each a mapping of column to value.
        description: What the table shows, as the UI's artifact list says it.
    """
    if tracked():
        from prefect.artifacts import create_table_artifact

        create_table_artifact(key=key, table=table, description=description)


def markdown_artifact(key: str, markdown: str, description: str) -> None:
    """A Prefect markdown artifact of the current tracked run (nothing outside one).

    Args:
        key: The artifact's key (lowercase letters, digits and dashes).
        markdown: The artifact's Markdown.
        description: What the artifact shows, as the UI's artifact list says it.
    """
    if tracked():
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(key=key, markdown=markdown, description=description)
