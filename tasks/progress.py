"""How far a long step is, for whoever watches: a bar on a terminal, a line now and then in a log.

A flow or task opens a :func:`step` around work that can take more than a few seconds (the replays of a
simulation, a cache fill) and advances it as it goes. Who shows it is the caller's choice, installed with
:func:`reporting`: the ``modelplane`` command installs a rich progress bar on a terminal and plain lines
otherwise (flows/cli/progress.py); with no reporter installed (a Prefect deployment's run), a step logs a line
through the run's logger at most every :data:`LOG_EVERY_S` seconds and when it ends, so the run's log in the
Prefect UI says how far it is. Nothing here imports a terminal library or Prefect.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from engine.scopes import scoped

LOG_EVERY_S = 10.0
"""With no reporter installed, a step logs at most this often (and when it ends)."""


@dataclass
class Step:
    """One long step: what it is, how much there is (None: unknown), how much is done, what is being done."""

    description: str
    total: float | None = None
    unit: str = ""
    completed: float = 0.0
    note: str = ""
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        """``simulate: 3/40 replays (hpa)``, or with an unknown total ``simulate: 3 replays``."""
        if self.unit == "%":
            amount, unit = f"{self.completed:g}", "%"
        else:
            amount = f"{self.completed:g}/{self.total:g}" if self.total is not None else f"{self.completed:g}"
            unit = f" {self.unit}" if self.unit else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.description}: {amount}{unit}{note}"


class Reporter(Protocol):
    """Shows steps: told when one starts, moves and ends."""

    def started(self, step: Step) -> None: ...

    def moved(self, step: Step) -> None: ...

    def ended(self, step: Step) -> None: ...


_REPORTER: ContextVar[Reporter | None] = ContextVar("modelplane_progress_reporter", default=None)


@contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """Show every step opened in the block (and in tasks it calls) with ``reporter``.

    Args:
        reporter: What shows the steps (e.g. the CLI's progress bars).

    Yields:
        Nothing; the reporter is installed while the block runs.
    """
    with scoped(_REPORTER, reporter):
        yield


class _LogReporter:
    """The reporter of a run nobody installed one for: a run-log line at most every :data:`LOG_EVERY_S` s."""

    def __init__(self) -> None:
        self.last = 0.0

    def started(self, step: Step) -> None:
        self.last = time.monotonic()

    def moved(self, step: Step) -> None:
        now = time.monotonic()
        if now - self.last >= LOG_EVERY_S:
            self.last = now
            self._log(step)

    def ended(self, step: Step) -> None:
        if time.monotonic() - step.started >= LOG_EVERY_S:  # a short step needs no progress line
            self._log(step)

    @staticmethod
    def _log(step: Step) -> None:
        from tasks.tracking import run_logger

        run_logger().info("%s", step.line())


class StepHandle:
    """What :func:`step` yields: advance the step, or set how far it is."""

    def __init__(self, step: Step, reporter: Reporter) -> None:
        self.step = step
        self.reporter = reporter

    def advance(self, amount: float = 1, note: str | None = None) -> None:
        """``amount`` more is done (``note``: what is being done now)."""
        self.update(self.step.completed + amount, note)

    def update(self, completed: float, note: str | None = None, total: float | None = None) -> None:
        """``completed`` is done so far (``total``: a total learned on the way)."""
        self.step.completed = completed
        if total is not None:
            self.step.total = total
        if note is not None:
            self.step.note = note
        self.reporter.moved(self.step)


@contextmanager
def step(description: str, total: float | None = None, unit: str = "") -> Iterator[StepHandle]:
    """A long step of ``total`` ``unit`` (None: unknown), shown by the installed reporter (else logged).

    Args:
        description: What the step does, as the reporter shows it.
        total: How much work the step is, in ``unit``; None when unknown.
        unit: The unit of ``total`` and of the advances (e.g. ``%``, ``replays``); empty for a plain count.

    Yields:
        The handle the step's progress is advanced through.
    """
    reporter = _REPORTER.get() or _LogReporter()
    current = Step(description, total, unit)
    reporter.started(current)
    try:
        yield StepHandle(current, reporter)
    finally:
        reporter.ended(current)
