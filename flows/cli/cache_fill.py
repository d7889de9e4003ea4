"""``fill-cache``: download one model source into a cache directory (a mounted PVC). The command a cache-fill
Job runs in Modelplane's image (engine/caches/plan.py builds it), so it needs no Prefect and reads credentials
from the environment only; its verdict also goes to the Job's termination log for warm-caches to read."""

from __future__ import annotations

import pathlib
import sys
import time
from typing import TYPE_CHECKING, Any

import typer

from flows.cli.common import app, command, console, err
from flows.cli.options import ModelplaneCommand, duration_option
from flows.cli.output import print_json
from tasks.downloader.fill import DEFAULT_CONCURRENCY, DEFAULT_PART_SIZE

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.progress import Progress, TaskID

    from tasks.downloader.progress import ProgressSnapshot

MiB = 1024 * 1024


@command("fill-cache")
def fill_cache(
    source: str = typer.Argument(
        ...,
        help="Model source: hf://org/name@REV?allow=GLOB&ignore=GLOB&filename=F (all optional after the name) or s3://bucket/prefix.",
    ),
    dest: pathlib.Path = typer.Argument(..., help="Cache directory (the PVC mount); the model files land at its root."),
    capacity: str | None = typer.Option(
        None, "--capacity", help="Volume size (e.g. 11Gi) when the filesystem does not report it (shared filesystems)."
    ),
    concurrency: int = typer.Option(
        DEFAULT_CONCURRENCY, "--concurrency", min=1, max=64, help="Parallel transfers (files or S3 parts)."
    ),
    part_size_mib: int = typer.Option(
        DEFAULT_PART_SIZE // MiB, "--part-size-mib", min=5, help="S3 ranged part size in MiB."
    ),
    lock_timeout: float | None = duration_option(
        None,
        "--lock-timeout",
        help="How long to wait for another filler of the same cache (default: as long as it takes).",
    ),
    deadline: float | None = duration_option(
        None,
        "--deadline",
        help="Stop the fill after this long, keeping what it fetched for the next fill to resume (default: the time "
        "filling the volume takes at 1 MiB/s, at least 1h; the volume's size is --capacity, else the source's).",
        minimum=1,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the completion manifest as JSON."),
    termination_log: pathlib.Path | None = typer.Option(
        None,
        "--termination-log",
        help="Also write the verdict here as one JSON line (a Job's /dev/termination-log: the marker summary, or the failure's reason and message).",
    ),
) -> None:
    """Download SOURCE into DEST: resumable, locked, verified; the marker .modelplane-cache.json is written last.

    Credentials come from the environment only (HF_TOKEN, HF_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_ENDPOINT_URL, AWS_REGION; Kthena's ENDPOINT, ACCESS_KEY, SECRET_KEY when the AWS names are unset), so a Kubernetes Job runs this same command with env from Secrets.
    Exits 1 with one line naming the reason when the fill fails (DeadlineExceeded when it ran out of time), 2 when
    SOURCE is not a valid source.\f

    Args:
        source: ``SOURCE``: Model source: hf://org/name@REV?allow=GLOB&ignore=GLOB&filename=F (all optional after the
            name) or s3://bucket/prefix.
        dest: ``DEST``: Cache directory (the PVC mount); the model files land at its root.
        capacity: ``--capacity``: Volume size (e.g. 11Gi) when the filesystem does not report it (shared filesystems).
        concurrency: ``--concurrency``: Parallel transfers (files or S3 parts). (1 to 64)
        part_size_mib: ``--part-size-mib``: S3 ranged part size in MiB. (at least 5)
        lock_timeout: ``--lock-timeout``: How long to wait for another filler of the same cache (default: as long as it
            takes). In seconds (the option reads 90s, 5m, 1d).
        deadline: ``--deadline``: Stop the fill after this long, keeping what it fetched for the next fill to resume
            (default: the time filling the volume takes at 1 MiB/s, at least 1h; the volume's size is --capacity, else
            the source's). In seconds (the option reads 90s, 5m, 1d). (at least 1s)
        as_json: ``--json``: Print the completion manifest as JSON.
        termination_log: ``--termination-log``: Also write the verdict here as one JSON line (a Job's /dev/termination-
            log: the marker summary, or the failure's reason and message).
    """
    from engine.caches.fill import fill_deadline_s
    from engine.caches.sources import parse_source
    from engine.units import parse_quantity
    from tasks.downloader import DeadlineExceeded, DownloadError, FillDeadline
    from tasks.downloader import fill_cache as fill

    try:
        parsed = parse_source(source)
        capacity_bytes = int(parse_quantity(capacity)) if capacity else None
    except ValueError as exc:
        sys.stderr.write(f"error: fill-cache: invalid source or capacity: {exc}\n")
        raise typer.Exit(2) from None
    reporter = _CacheFillProgress(parsed.uri)
    # By default as long as a fill Job may run (engine.caches.fill.fill_deadline_s): of the source's size once it is
    # listed, or of the volume's when --capacity gives it.
    budget: float | Callable[[int], float] = fill_deadline_s
    if deadline is not None:
        budget = deadline
    elif capacity_bytes:
        budget = fill_deadline_s(capacity_bytes)
    try:
        with reporter:
            manifest = fill(
                parsed,
                dest,
                progress=reporter.update,
                capacity_bytes=capacity_bytes,
                concurrency=concurrency,
                part_size=part_size_mib * MiB,
                lock_timeout=lock_timeout,
                on_wait=lambda holder: print(f"waiting for another filler of {dest} ({holder})", file=sys.stderr),
                deadline=FillDeadline(budget),
            )
    except DownloadError as exc:
        hint = " (--deadline gives a fill longer)" if isinstance(exc, DeadlineExceeded) else ""
        sys.stderr.write(f"error: cache fill failed ({exc.reason}): {exc.message}{hint}\n")
        _write_fill_report(termination_log, reason=exc.reason, message=exc.message)
        raise typer.Exit(1) from None
    except OSError as exc:
        message = f"{exc.strerror or exc} ({exc.filename or dest})"
        sys.stderr.write(f"error: cache fill failed (FilesystemError): {message}\n")
        _write_fill_report(termination_log, reason="FilesystemError", message=message)
        raise typer.Exit(1) from None
    _write_fill_report(termination_log, manifest.to_json())
    if as_json:
        print_json(manifest.to_json())
        return
    fetched = manifest.stats.get("bytesFetched", 0)
    console.print(
        f"cache {dest} complete: {len(manifest.files)} files, {manifest.total_bytes} bytes "
        f"({fetched} fetched now) from {manifest.source}" + (f" at {manifest.revision}" if manifest.revision else ""),
        highlight=False,
    )


# The earlier name `modelplane cache fill`, still what the fill Jobs and Kthena's init containers run.
cache_app = typer.Typer(
    no_args_is_help=True, help="Model caches: fill a directory (a mounted PVC) from a model source."
)
cache_app.command("fill", cls=ModelplaneCommand)(fill_cache)
app.add_typer(cache_app, name="cache", hidden=True)


def _write_fill_report(path: pathlib.Path | None, marker: dict[str, Any] | None = None, **failure: str) -> None:
    """The fill's verdict for the warm-caches flow (read back from the Job pod's termination message)."""
    if path is None:
        return
    from engine.caches.fill import fill_report

    try:
        path.write_text(fill_report(marker, **failure))
    except OSError as exc:
        sys.stderr.write(f"error: cannot write the termination log {path}: {exc.strerror or exc}\n")


class _CacheFillProgress:
    """A rich progress bar on a terminal; one log line every 10 s otherwise (Job logs)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.interactive = err.is_terminal
        self._last_line = 0.0
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> _CacheFillProgress:
        if self.interactive:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=err,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=None)
        return self

    def update(self, snapshot: ProgressSnapshot) -> None:
        """Show ``snapshot``: move the bar, or (off a terminal) log a line at most every 10 s and on each phase."""
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=snapshot.bytes_done, total=snapshot.bytes_total or None)
            return
        now = time.monotonic()
        if now - self._last_line >= 10 or snapshot.phase != "downloading":
            self._last_line = now
            sys.stderr.write(f"{self.label}: {snapshot.describe()}\n")
            sys.stderr.flush()

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
