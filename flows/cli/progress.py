"""How a command shows the steps of its run (tasks/progress.py): rich progress bars on a terminal, plain lines
when stderr is not one (a CI log, a pipe), as ``fill-cache`` shows a download."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from flows.cli.common import err
from tasks.progress import Step, reporting

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

LINE_EVERY_S = {"%": 10.0}
"""Off a terminal, a step prints a line at most this often (by unit; :data:`DEFAULT_LINE_EVERY_S` otherwise)."""
DEFAULT_LINE_EVERY_S = 2.0


class TerminalReporter:
    """Steps as rich progress bars on stderr when it is a terminal, else as ``description: 3/40 replays``
    lines: when a step starts, as it moves (at most every few seconds), and when it ends, with its time."""

    def __init__(self) -> None:
        self.interactive = err.is_terminal
        self.bar: Progress | None = None
        self.tasks: dict[int, TaskID] = {}
        self.last_line: dict[int, float] = {}

    def started(self, step: Step) -> None:
        if not self.interactive:
            self._line(step, "started")
            return
        if self.bar is None:
            self.bar = _bar()
            self.bar.start()
        self.tasks[id(step)] = self.bar.add_task(step.description, total=step.total, note="", unit=step.unit)

    def moved(self, step: Step) -> None:
        task = self.tasks.get(id(step))
        if self.bar is not None and task is not None:
            self.bar.update(task, completed=step.completed, total=step.total, note=step.note)
            return
        now = time.monotonic()
        if now - self.last_line.get(id(step), 0.0) >= LINE_EVERY_S.get(step.unit, DEFAULT_LINE_EVERY_S):
            self.last_line[id(step)] = now
            self._line(step)

    def ended(self, step: Step) -> None:
        task = self.tasks.pop(id(step), None)
        if self.bar is not None and task is not None:
            self.bar.update(task, completed=step.completed, total=step.total, note="")
            if not self.tasks:
                self.bar.stop()
                self.bar = None
            return
        self.last_line.pop(id(step), None)
        self._line(step, f"done in {time.monotonic() - step.started:.0f} s")

    @staticmethod
    def _line(step: Step, state: str = "") -> None:
        sys.stderr.write(f"{step.line()}{' - ' + state if state else ''}\n")
        sys.stderr.flush()


def _bar() -> Progress:
    """One rich progress display for every step of a command: description, bar, count, time left, note."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}", markup=False),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}", markup=False),
        console=err,
        transient=False,
    )


@contextmanager
def shown_progress() -> Iterator[None]:
    """Show every step of the block (tasks/progress.py) on this command's stderr.

    Yields:
        Nothing; the steps are shown while the block runs.
    """
    reporter = TerminalReporter()
    try:
        with reporting(reporter):
            yield
    finally:
        if reporter.bar is not None:
            reporter.bar.stop()
