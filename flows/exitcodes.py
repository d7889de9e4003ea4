"""The exit-code convention of every ``modelplane`` command, and the one-line error handling behind it.

| code | meaning | examples |
|---|---|---|
| 0 | ran, clean | every resource valid and decided, metrics available |
| 2 | could not run (nothing was changed) | the cluster path does not exist, no Kubernetes access (bad kubeconfig, unreachable or forbidden API), the configuration ConfigMap is missing, bad command-line arguments (typer/click usage errors exit 2 too) |
| 3 | ran degraded (did what it could, said what it could not) | metrics missing, resources invalid or not ready, write errors, configuration errors |

A command that cannot do its job prints ONE line on stderr (``error: <what and where>``), never a
traceback, and exits 2. A command that ran degraded says so in its summary line and exits 3.

The same outcomes as Prefect run states (a deployment run has no exit code), docs/platform.md "Run states":

| code | final state of the flow run |
|---|---|
| 0 | ``Completed`` |
| 2 | ``Failed`` (the exception's one line is the state message) |
| 3 | ``Failed`` named ``Degraded``, the reasons as its message (:func:`flow_result`; a flow called from Python: ``Completed`` named ``Degraded``) |

Use it as::

    with cli_errors():
        ...                      # raise CannotRun("cluster path /x does not exist") where it cannot go on
        degraded = [...]         # what went wrong while running
    raise typer.Exit(exit_code(degraded))
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from enum import IntEnum
from typing import TYPE_CHECKING, Any, TypeVar, cast

import typer
import typer.core

from engine.scopes import scoped

if TYPE_CHECKING:  # the installed typer (constraints.txt) vendors click
    from typer._click import exceptions as _click_exceptions
else:
    try:  # typer >= 0.20 vendors click; older releases use click itself
        from typer._click import exceptions as _click_exceptions
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions as _click_exceptions


class ExitCode(IntEnum):
    """Process exit codes of the ``modelplane`` commands (see the module docs)."""

    OK = 0
    CANNOT_RUN = 2
    DEGRADED = 3


class CannotRun(Exception):
    """The command (or flow) could not do its job at all; the message is one line saying why and where."""


def exit_code(degraded: Iterable[str] = ()) -> ExitCode:
    """``DEGRADED`` when anything went wrong while running, else ``OK``.

    Args:
        degraded: The reasons the run was degraded; empty for a clean run.

    Returns:
        The exit code.
    """
    return ExitCode.DEGRADED if any(True for _ in degraded) else ExitCode.OK


DEGRADED_STATE = "Degraded"
"""The name of a degraded run's final state (``Failed`` type): what the UI shows and automations match
(event ``prefect.flow-run.Degraded``)."""
MAX_STATE_REASONS = 10
"""A degraded state's message lists this many reasons, then how many more (the full list is in the log)."""

Report = TypeVar("Report")


def degraded_message(degraded: Sequence[str]) -> str:
    """The reasons a run was degraded as one state message: the first few, then how many more.

    Args:
        degraded: The reasons the run was degraded.

    Returns:
        ``DEGRADED (N): reason; reason; ...; and M more``.
    """
    shown = [" ".join(reason.split()) for reason in degraded[:MAX_STATE_REASONS]]
    more = len(degraded) - len(shown)
    return f"DEGRADED ({len(degraded)}): " + "; ".join(shown) + (f"; and {more} more" if more else "")


class DegradedRun(Exception):
    """A tracked run that did what it could and says what it could not (exit 3 on the CLI): the data of its
    ``Failed`` state named :data:`DEGRADED_STATE`, so what a Python caller of the flow gets raised, with the
    run's report (``.report``) and the reasons (``.degraded``)."""

    def __init__(self, report: Any, degraded: Sequence[str]) -> None:
        super().__init__(report, list(degraded))  # the arguments, so the exception pickles as a state's data
        self.report = report
        self.degraded = list(degraded)

    def __str__(self) -> str:
        return degraded_message(self.degraded)


_CALLER_TAKES_DEGRADED: ContextVar[bool] = ContextVar("modelplane_caller_takes_degraded", default=False)


@contextmanager
def degraded_raises() -> Iterator[None]:
    """Within the block, a degraded tracked run ends ``Failed`` named Degraded and raises :class:`DegradedRun` to
    its caller, which takes the report from it (the CLI's tracked runs: :func:`flows.cli.common.run_tracked`).

    Yields:
        Nothing; a degraded run raises :class:`DegradedRun` while the block runs.
    """
    with scoped(_CALLER_TAKES_DEGRADED, True):
        yield


def flow_result(report: Report, degraded: Sequence[str]) -> Report:
    """What a flow returns so its run's final state says what the CLI's exit code says.

    Clean (exit 0): the report, and Prefect ends the run ``Completed``. Degraded (exit 3) in a deployment's run
    (or a command's tracked run, :func:`degraded_raises`): a ``Failed`` state named :data:`DEGRADED_STATE`
    whose message is the reasons and whose data is a :class:`DegradedRun` holding the report. Prefect's UI
    colours a state by its type only (prefect/server/ui: ``state--completed`` green, ``state--failed`` red), so
    a ``Completed`` named Degraded looked like a clean run; a degraded run needs a person (metrics missing, a
    resource invalid, a write refused), which is what ``Failed`` says, and its name keeps it apart from "could
    not run" (exit 2, the flow raising: ``Failed`` named Failed). Automations match it by name
    (``prefect.flow-run.Degraded``); no flow has retries, so nothing redoes the work.

    A flow called from Python outside those (a script, a test) gets its report back: the run ends ``Completed``
    named Degraded with the report as its data, and the caller reads ``report.degraded``.

    Args:
        report: The flow's report.
        degraded: The reasons the run was degraded; empty for a clean run.

    Returns:
        The report, or a Prefect state holding it (typed as the report for the flow's signature).
    """
    from tasks.tracking import in_untracked_run

    if not degraded or in_untracked_run():  # untracked (tasks/tracking.py): no run state, the report says it all
        return report
    from prefect.states import Completed, Failed

    message = degraded_message(degraded)
    if _CALLER_TAKES_DEGRADED.get() or _deployment_run():
        return cast(Report, Failed(name=DEGRADED_STATE, message=message, data=DegradedRun(report, degraded)))
    return cast(Report, Completed(name=DEGRADED_STATE, message=message, data=report))


def _deployment_run() -> bool:
    """Whether the current flow run is a deployment's (scheduled, triggered, started from the UI): nobody holds
    its return value, a person reads its state in the UI."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    return bool(context and context.flow_run and context.flow_run.deployment_id)


def degraded_summary(summary: str, degraded: Iterable[str]) -> str:
    """``summary`` with the reasons a run was degraded appended (unchanged when it was clean).

    Args:
        summary: The run's summary line.
        degraded: The reasons the run was degraded.

    Returns:
        The summary line.
    """
    reasons = list(degraded)
    return f"{summary} — DEGRADED: {'; '.join(reasons)}" if reasons else summary


def one_line(error: BaseException) -> str:
    """The error as one line: its message (or type), newlines folded.

    Args:
        error: The exception.

    Returns:
        Its message on one line.
    """
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return " ".join(str(message).split())


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn the failures that mean "could not run" into one ``error:`` line on stderr and exit 2.

    Covers :class:`CannotRun`, every cluster error (:class:`tasks.clients.cluster.ClusterError`: bad kubeconfig,
    unreachable, forbidden, ...), file-system errors and the flow's time-out (:class:`flows.runs.FlowTimeout`).
    Anything else is a bug and keeps its traceback.

    Yields:
        Nothing; the failures raised in the block are turned into exit 2.

    Raises:
        typer.Exit: Code 2, after the ``error:`` line, for a :class:`CannotRun`, ``ClusterError``, ``OSError`` or
            ``FlowTimeout`` raised in the block.
    """
    from flows.runs import FlowTimeout
    from tasks.clients.cluster.errors import ClusterError

    retries = logging.getLogger("urllib3.connectionpool")  # one warning per HTTP retry: the final error says it all
    level = retries.level
    retries.setLevel(logging.ERROR)
    try:
        yield
    except (CannotRun, ClusterError, OSError, FlowTimeout) as exc:
        sys.stderr.write(f"error: {one_line(exc)}\n")
        raise typer.Exit(ExitCode.CANNOT_RUN) from None
    finally:
        retries.setLevel(level)


class _StripExpectedTraceback(logging.Filter):
    """Keep Prefect's "Encountered exception during execution" line for an expected could-not-run error, but
    without its traceback: the command says what went wrong in its one ``error:`` line."""

    def __init__(self, expected: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.expected = expected

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], self.expected):
            record.exc_info, record.exc_text = None, None
        return True


@contextmanager
def quiet_expected_failures(expected: tuple[type[BaseException], ...]) -> Iterator[None]:
    """While a flow runs in-process for a command, strip the traceback Prefect logs for ``expected`` errors.

    Args:
        expected: The exception classes whose tracebacks are stripped.

    Yields:
        Nothing; the filter is installed while the block runs.
    """
    strip = _StripExpectedTraceback(expected)
    loggers = [logging.getLogger(name) for name in ("prefect.flow_runs", "prefect.task_runs")]
    for logger in loggers:
        logger.addFilter(strip)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(strip)


class OneLineErrorGroup(typer.core.TyperGroup):
    """The command group of ``modelplane``: a usage error (unknown option, bad value, missing argument) is one
    ``error:`` line on stderr and exit 2, like every other could-not-run case, instead of click's box."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except _click_exceptions.NoArgsIsHelpError as exc:
            sys.stdout.write(exc.ctx.get_help() + "\n" if exc.ctx else "")
            sys.exit(ExitCode.CANNOT_RUN)
        except _click_exceptions.ClickException as exc:
            sys.stderr.write(f"error: {usage_error_line(exc)}\n")
            sys.exit(ExitCode.CANNOT_RUN)
        except typer.Abort:
            sys.stderr.write("error: aborted\n")
            sys.exit(ExitCode.CANNOT_RUN)
        sys.exit(result if isinstance(result, int) else ExitCode.OK)


def usage_error_line(exc: Exception) -> str:
    """A click/typer usage error as one line, prefixed with the command it concerns.

    Args:
        exc: A click usage error (or any exception).

    Returns:
        ``COMMAND PATH: message``, or the message alone when the error has no context.
    """
    ctx = getattr(exc, "ctx", None)
    message = one_line(Exception(exc.format_message())) if hasattr(exc, "format_message") else one_line(exc)
    return f"{ctx.command_path}: {message}" if ctx is not None else message


__all__ = [
    "DEGRADED_STATE",
    "DegradedRun",
    "CannotRun",
    "ExitCode",
    "OneLineErrorGroup",
    "cli_errors",
    "degraded_message",
    "degraded_raises",
    "degraded_summary",
    "exit_code",
    "flow_result",
    "one_line",
    "quiet_expected_failures",
]
