"""Download progress: bytes done and total, rate and ETA, reported to a callback at a bounded rate.

Reporters: a plain callback (``Callable[[ProgressSnapshot], None]``), :func:`prefect_progress` (a Prefect
progress artifact, updated in place, when running inside a flow or task run) and the CLI's rich bar.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressSnapshot:
    """One progress report."""

    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    bytes_per_second: float
    eta_seconds: float | None
    phase: str = "downloading"

    @property
    def fraction(self) -> float:
        """Done over total in [0, 1] (1 when there is nothing to fetch)."""
        return 1.0 if self.bytes_total <= 0 else min(1.0, self.bytes_done / self.bytes_total)

    def describe(self) -> str:
        """One line for logs: ``42.0% 1.2 GiB/2.9 GiB 3/7 files 180 MiB/s ETA 10s``."""
        eta = f" ETA {self.eta_seconds:.0f}s" if self.eta_seconds is not None else ""
        return (
            f"{100 * self.fraction:.1f}% {human_bytes(self.bytes_done)}/{human_bytes(self.bytes_total)} "
            f"{self.files_done}/{self.files_total} files {human_bytes(int(self.bytes_per_second))}/s{eta}"
        )


ProgressCallback = Callable[[ProgressSnapshot], None]


def human_bytes(value: int) -> str:
    """``1536`` -> ``1.5 KiB``.

    Args:
        value: A size in bytes.

    Returns:
        The size in binary units, one decimal (whole bytes below 1 KiB).
    """
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


class ProgressTracker:
    """Thread-safe byte counter that calls ``callback`` at most every ``interval`` seconds (and at the end).

    The rate is measured over a sliding window of recent samples, so a resumed run does not count the bytes
    that were already on disk as speed.
    """

    def __init__(self, callback: ProgressCallback | None, interval: float = 0.5, window: float = 5.0) -> None:
        self.callback = callback
        self.interval = interval
        self.window = window
        self._lock = threading.Lock()
        self.bytes_total = 0
        self.bytes_done = 0
        self.files_total = 0
        self.files_done = 0
        self.fetched = 0
        self._samples: list[tuple[float, int]] = []
        self._last_report = 0.0
        self.phase = "downloading"

    def start(self, bytes_total: int, files_total: int, bytes_done: int = 0, files_done: int = 0) -> None:
        """Set the totals and what is already on disk."""
        with self._lock:
            self.bytes_total, self.files_total = bytes_total, files_total
            self.bytes_done, self.files_done = bytes_done, files_done
            self._samples = [(time.monotonic(), 0)]
        self._report(force=True)

    def add(self, count: int) -> None:
        """``count`` more bytes arrived (negative when a restarted file drops what it had)."""
        with self._lock:
            self.bytes_done += count
            if count > 0:
                self.fetched += count
        self._report()

    def file_done(self) -> None:
        """One more file is complete."""
        with self._lock:
            self.files_done += 1
        self._report()

    def finish(self, phase: str = "complete") -> None:
        """Report the final state."""
        self.phase = phase
        self._report(force=True)

    def snapshot(self) -> ProgressSnapshot:
        """The current state with rate and ETA."""
        with self._lock:
            now = time.monotonic()
            self._samples.append((now, self.fetched))
            cutoff = now - self.window
            while len(self._samples) > 2 and self._samples[0][0] < cutoff:
                self._samples.pop(0)
            (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
            rate = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
            remaining = max(0, self.bytes_total - self.bytes_done)
            eta = remaining / rate if rate > 0 else (0.0 if remaining == 0 else None)
            return ProgressSnapshot(
                self.bytes_done, self.bytes_total, self.files_done, self.files_total, rate, eta, self.phase
            )

    def _report(self, force: bool = False) -> None:
        if self.callback is None:
            return
        now = time.monotonic()
        if not force and now - self._last_report < self.interval:
            return
        self._last_report = now
        self.callback(self.snapshot())


def prefect_progress(description: str, interval: float = 2.0) -> ProgressCallback:
    """A callback that keeps one Prefect progress artifact up to date (a no-op outside a flow or task run).

    Args:
        description: What is filled, shown before the progress in the artifact.
        interval: The least time between two updates of the artifact, in seconds (the final one always goes).

    Returns:
        The progress callback.
    """
    state: dict[str, object] = {"id": None, "last": 0.0}

    def report(snapshot: ProgressSnapshot) -> None:
        from tasks.tracking import tracked

        if not tracked():
            return
        now = time.monotonic()
        final = snapshot.phase != "downloading"
        if not final and now - float(state["last"]) < interval:  # type: ignore[arg-type]
            return
        state["last"] = now
        percent = round(100 * snapshot.fraction, 1)
        text = f"{description}: {snapshot.describe()}"
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        if state["id"] is None:
            state["id"] = create_progress_artifact(progress=percent, description=text)
        else:
            update_progress_artifact(artifact_id=state["id"], progress=percent, description=text)  # type: ignore[arg-type]

    return report
