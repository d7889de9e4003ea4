"""What every ``modelplane`` command shares: the typer app, the consoles, and the one way a command runs a flow.

:func:`run_flow` is the only flow runner: one pre-check (the cluster the ``cluster`` parameter names can be
reached and holds what the flow needs, :data:`Check`) before Prefect starts, then the flow's own parameter
validation (the deployment schema's rules), then the run, where an error that means "could not run" is one
``error:`` line and exit 2 (flows/exitcodes.py) instead of a failed run's traceback.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import pathlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import typer
import typer.core
from rich.console import Console
from rich.table import Table
from rich.text import Text

from flows.cli.options import ModelplaneCommand
from flows.exitcodes import (
    CannotRun,
    DegradedRun,
    ExitCode,
    OneLineErrorGroup,
    cli_errors,
    degraded_raises,
    exit_code,
    one_line,
    quiet_expected_failures,
)
from flows.parameters import CLUSTER_HELP, SYSTEM_NAMESPACE

if TYPE_CHECKING:
    from tasks.clients.cluster import Cluster

# Local runs start an ephemeral Prefect API on the shared ~/.prefect database; its telemetry write is the
# one statement that contends with another local Prefect process, and it reports nothing we need.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect's 20 s default for starting that ephemeral API is too short on a busy CI runner.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
# The ephemeral API is an implementation detail of a local run: its services' own shutdown noise (a batch of
# task-run events cancelled mid-flush, with a traceback) is not the command's outcome, which the exit code and
# the command's own lines report. Only a server this process starts reads this; a configured API is untouched.
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")


def quiet_ephemeral_database_logs() -> None:
    """Point Prefect at its own logging configuration plus one logger: ``sqlalchemy`` at CRITICAL.

    ``PREFECT_SERVER_LOGGING_LEVEL`` covers Prefect's server loggers only. The ephemeral API's database pool
    logs through SQLAlchemy's loggers, which SQLAlchemy sets to WARNING itself, so when the API stops mid-flush
    at the command's exit its "Exception during reset" error and traceback reached the command's stderr (CI:
    a docs block, twice). The API is a subprocess that inherits this environment; this process uses no database.
    Nothing changes when an API is configured or a logging configuration of the person's own is set."""
    if os.environ.get("PREFECT_API_URL") or os.environ.get("PREFECT_LOGGING_SETTINGS_PATH"):
        return
    import atexit
    import importlib.util
    import tempfile

    import yaml

    spec = importlib.util.find_spec("prefect")
    if spec is None or not spec.submodule_search_locations:
        return
    default = pathlib.Path(next(iter(spec.submodule_search_locations))) / "logging" / "logging.yml"
    config = yaml.safe_load(default.read_text())
    config.setdefault("loggers", {})["sqlalchemy"] = {"level": "CRITICAL"}
    with tempfile.NamedTemporaryFile("w", prefix="modelplane-logging-", suffix=".yml", delete=False) as file:
        yaml.safe_dump(config, file, sort_keys=False)
    atexit.register(pathlib.Path(file.name).unlink, missing_ok=True)
    os.environ["PREFECT_LOGGING_SETTINGS_PATH"] = file.name


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    cls=OneLineErrorGroup,
    help="Modelplane: a control plane for serving LLMs on Kubernetes.",
)
# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns and cut names: a wide page. No markup: names,
# paths and servers' messages holding "[/x]" ended commands in a MarkupError; colour comes from a style or a Text.
console = Console(width=None if sys.stdout.isatty() else 200, markup=False)
err = Console(stderr=True, markup=False)

Check = Callable[["Cluster"], "str | None"]
"""What a flow needs of its cluster beyond a readable path: the reason it cannot run there, or None."""


def command(
    name: str, *aliases: str, renamed: dict[str, str] | None = None, **options: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a ``modelplane NAME`` command (:class:`ModelplaneCommand`); each of ``aliases`` (an earlier name)
    runs it too, hidden from the help, and each key of ``renamed`` (an earlier flag spelling) is read as its
    value, so scripts and docs written for the old names keep working.

    Each invocation runs in a copy of the context: what one command sets there (the boundary reader's
    rejection collector, tasks/boundary.py) is gone when it ends, so it can never reach the next command
    run in the same process.

    Args:
        name: The command's name, as ``modelplane NAME`` runs it.
        *aliases: Earlier names that run it too, hidden from the help.
        renamed: Earlier flag spellings mapped to the current ones, or None.
        **options: Further keywords of typer's ``app.command``.

    Returns:
        The decorator; it registers the function and returns it unchanged.
    """
    cls = type(f"{name.title()}Command", (ModelplaneCommand,), {"renamed": dict(renamed or {})})

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def isolated(*args: Any, **kwargs: Any) -> Any:
            return contextvars.copy_context().run(function, *args, **kwargs)

        app.command(name, cls=cls, **options)(isolated)
        for alias in aliases:
            app.command(alias, cls=cls, hidden=True, **options)(isolated)
        return function

    return register


def cluster_option() -> Any:
    """The ``--cluster`` option of every command that reads a cluster (:data:`flows.parameters.CLUSTER_HELP`).

    Returns:
        The typer option (None when absent).
    """
    return typer.Option(None, "--cluster", metavar="CLUSTER", help=CLUSTER_HELP)


def json_option(what: str = "a JSON list") -> Any:
    """The ``--json`` option every flow command has.

    Args:
        what: What is printed, in the help's ``Print WHAT instead of a table.``

    Returns:
        The typer option (False by default).
    """
    return typer.Option(False, "--json", help=f"Print {what} instead of a table.")


def namespaces_option(help: str = "Limit to these namespaces (repeatable).") -> Any:
    """The repeatable ``--namespace``/``-n`` option.

    Args:
        help: The option's help text.

    Returns:
        The typer option (an empty list by default: every namespace).
    """
    return typer.Option([], "--namespace", "-n", metavar="NAME", help=help)


def config_namespace_option() -> Any:
    """``--config-namespace``: where the WVA ConfigMaps live.

    Returns:
        The typer option (``modelplane-system`` by default).
    """
    return typer.Option(SYSTEM_NAMESPACE, metavar="NAME", help="Namespace of the WVA ConfigMaps.")


def needs(api_version: str, kind: str) -> Check:
    """A :data:`Check` that the cluster lets us list ``kind`` (API access, RBAC, the CRD installed).

    Args:
        api_version: The kind's ``apiVersion``.
        kind: The kind's name.

    Returns:
        The check: None when the LIST succeeds, else why it failed.
    """

    def check(cluster: Cluster) -> str | None:
        from tasks.clients.cluster import ClusterError

        try:
            cluster.list(api_version, kind)
        except ClusterError as exc:
            return f"cannot read {kind}s: {exc.message}"
        return None

    return check


def pre_check(cluster: str | None, check: Check | None = None) -> None:
    """The one pre-check of every flow command, before Prefect starts: the cluster ``cluster`` names
    (``tasks.clients.cluster.connect``) is not a missing or unreadable path, and ``check`` finds nothing missing.
    Prints one ``error:`` line and exits 2 otherwise.

    Args:
        cluster: The ``--cluster`` value (None for the default cluster).
        check: What the command needs of the cluster beyond a readable path, or None.

    Raises:
        CannotRun: The path is missing or unreadable, or ``check`` found something missing; raised inside
            :func:`flows.exitcodes.cli_errors`, which prints it as one ``error:`` line and raises ``typer.Exit(2)``.
    """
    from tasks.clients.cluster import connect, local_path_problem

    with cli_errors():
        conn = connect(cluster, dry_run=True)  # a check changes nothing (not even an invalid object's status)
        problem = local_path_problem(conn) or (check(conn) if check else None)
        if problem:
            raise CannotRun(problem)


def track_option() -> Any:
    """The ``--track`` option of every flow command: run through Prefect even where no API is needed.

    Returns:
        The typer option (False by default).
    """
    return typer.Option(
        False,
        "--track",
        help="Record the run in Prefect (run, task runs, logs, artifacts, events). Default: only when the run "
        "writes to a Kubernetes cluster or PREFECT_API_URL is set; a run on a manifests directory, or a dry "
        "run, needs no Prefect API.",
    )


def tracking_wanted(track: bool, cluster: str | None, dry_run: bool) -> bool:
    """Whether a command runs its flow through Prefect: when asked (``--track``), when a Prefect API is
    configured (``PREFECT_API_URL``), or when it writes to a Kubernetes cluster. A manifests directory or a dry
    run runs untracked (tasks/tracking.py): no API, no Prefect import, the same flow code and report.

    Args:
        track: Whether ``--track`` was given.
        cluster: The ``--cluster`` value (None for the default cluster).
        dry_run: Whether the command writes nothing.

    Returns:
        True when the flow runs as a Prefect flow run.
    """
    from tasks.clients.cluster import is_manifests_target

    if track or os.environ.get("PREFECT_API_URL"):
        return True
    return not (dry_run or is_manifests_target(cluster))


def run_flow(
    flow: Any,
    *,
    track: bool = False,
    check: Check | None = None,
    cannot_run: tuple[type[Exception], ...] = (),
    **parameters: Any,
) -> Any:
    """Run ``flow`` in-process with ``parameters`` after :func:`pre_check` on its ``cluster`` parameter.

    ``flow`` is a flow, or its entrypoint ``"module:name"`` (``"flows.optimize:optimize"``): imported only
    after the pre-check and the command's first line (:func:`announce`), so a person sees both within a second.
    Tracked or not (:func:`tracking_wanted`), the flow's signature checks the parameters first (the rules of
    the deployment's schema) without a run; when the flow cannot run (no cluster, bad parameter, missing file,
    one of ``cannot_run``, or its time limit passed: ``timed out after N s``) the command prints one ``error:``
    line and exits 2. Anything else is a bug and keeps its traceback. A tracked run sends what it queued for the
    Prefect API before this returns, so the command's own verdict (:func:`exit_with_outcome`, the ``error:`` line)
    is the last thing it prints.

    Args:
        flow: The flow, or its entrypoint ``"module:name"``.
        track: Whether ``--track`` was given.
        check: What the command needs of the cluster (:func:`pre_check`), or None.
        cannot_run: Further exception classes that mean the flow cannot run (exit 2, not a traceback).
        **parameters: The flow's parameters.

    Returns:
        The flow's report (a degraded run's too).

    Raises:
        RuntimeError: A runtime error that is not about the Prefect API (a bug: its traceback is kept).
        typer.Exit: Code 2 after the ``error:`` line, when the flow could not run.
    """
    from flows.runs import FlowTimeout, ParameterError, validate_parameters
    from tasks.clients.cluster.errors import ClusterError

    stops: tuple[type[Exception], ...] = (ParameterError, CannotRun, ClusterError, *cannot_run)
    name = flow.rpartition(":")[2].replace("_", "-") if isinstance(flow, str) else flow.name
    pre_check(parameters.get("cluster"), check)
    tracked = tracking_wanted(track, parameters.get("cluster"), bool(parameters.get("dry_run")))
    expected = (CannotRun, ClusterError, OSError, ValueError, *cannot_run)
    start_boundary_run()  # this run's rejections only, in a collector of its own (tasks/boundary.py)
    announced = isinstance(flow, str)
    try:
        if isinstance(flow, str):
            announce(name, parameters, tracked=tracked)
            flow = load_flow(flow)
        if tracked:
            return run_tracked(flow, parameters, expected, announce_as=None if announced else name)
        validated = validate_parameters(flow, parameters)
        if not announced:
            announce(name, parameters, tracked=False)
        with shown_progress():
            return run_untracked(flow, validated)
    except stops as exc:
        reason = one_line(exc)
    except FlowTimeout:  # a BaseException, raised wherever the run was when its time limit passed
        seconds = getattr(flow, "timeout_seconds", None)
        reason = f"timed out after {seconds:g} s" if seconds else "timed out"
    except (OSError, ValueError) as exc:
        reason = f"{type(exc).__name__}: {one_line(exc)}"
    except RuntimeError as exc:
        if "Prefect API" not in str(exc):  # anything else is a bug: keep its traceback
            raise
        reason = one_line(exc)
    sys.stderr.write(f"error: {name} could not run: {reason}\n")
    raise typer.Exit(ExitCode.CANNOT_RUN)


def load_flow(entrypoint: str) -> Any:
    """The flow an entrypoint ``"module:name"`` names.

    Args:
        entrypoint: ``"module:name"``, e.g. ``"flows.optimize:optimize"``.

    Returns:
        The flow object.
    """
    import importlib

    module, _, attribute = entrypoint.partition(":")
    return getattr(importlib.import_module(module), attribute)


@contextlib.contextmanager
def shown_progress() -> Iterator[None]:
    """The run's steps (tasks/progress.py) on stderr (flows/cli/progress.py).

    Yields:
        Nothing; the steps are shown while the block runs.
    """
    from flows.cli.progress import shown_progress as show

    with show():
        yield


def run_tracked(
    flow: Any, parameters: dict[str, Any], expected: tuple[type[Exception], ...], announce_as: str | None
) -> Any:
    """The flow as a Prefect flow run (a temporary API when none is configured), announced as ``announce_as``
    (when not yet) once its parameters passed; Prefect's parameter error becomes :class:`flows.runs.ParameterError`;
    a degraded run (:class:`flows.exitcodes.DegradedRun`) gives its report, as an untracked one does.

    Args:
        flow: The flow.
        parameters: Its parameters, not yet validated.
        expected: The exception classes whose failures are reported as one line, without Prefect's traceback.
        announce_as: The command's name to announce once the parameters passed, or None when already announced.

    Returns:
        The flow's report (a degraded run's too).

    Raises:
        ParameterError: A parameter is rejected by the flow's schema.
        FlowTimeout: The run passed its ``timeout_seconds`` (Prefect's ``FlowRunTimeoutError``, as an untracked
            run's alarm raises it).
    """
    from prefect.exceptions import ParameterTypeError
    from prefect.flow_engine import FlowRunTimeoutError
    from prefect.logging.loggers import disable_logger

    from flows.runs import FlowTimeout, ParameterError, as_prefect

    prefect_flow = as_prefect(flow)
    quiet_ephemeral_database_logs()  # before the run starts the ephemeral API, which reads it
    try:
        with quiet_expected_failures((ParameterTypeError, *expected)):
            with disable_logger("prefect.flows"):  # the deployment schema's checks, before any run or log line
                try:
                    prefect_flow.validate_parameters(parameters)
                except ParameterTypeError as exc:
                    raise ParameterError(str(exc)) from None
            if announce_as:
                announce(announce_as, parameters, tracked=True)
            with shown_progress(), degraded_raises():
                try:
                    return prefect_flow(**parameters)
                except DegradedRun as degraded:  # the run's state is Failed named Degraded: the report exits 3
                    return degraded.report
                except FlowRunTimeoutError:  # the run's state is TimedOut: the same error as an untracked run's
                    raise FlowTimeout(
                        f"flow {prefect_flow.name} timed out after {prefect_flow.timeout_seconds:g} s"
                    ) from None
    finally:
        send_queued_events_and_logs()


def announce(name: str, parameters: dict[str, Any], *, tracked: bool) -> None:
    """The command's first line, on stderr as soon as its flow can run: where it runs, whether it writes, and
    whether Prefect records it (a temporary Prefect API takes seconds to start).

    Args:
        name: The command's name.
        parameters: The flow's parameters (``cluster`` and ``dry_run`` are read).
        tracked: Whether the run is recorded in Prefect.
    """
    cluster = parameters.get("cluster") or "the default cluster"
    parts = [f"{name} on {cluster}"]
    if parameters.get("dry_run"):
        parts.append("dry run (nothing is written)")
    if not tracked:
        parts.append("not recorded in Prefect (--track records it)")
    elif os.environ.get("PREFECT_API_URL"):
        parts.append(f"recorded in Prefect at {os.environ['PREFECT_API_URL']}")
    else:
        parts.append("recorded in a temporary Prefect API, which takes several seconds to start")
    err.print(", ".join(parts), highlight=False, soft_wrap=True)


def run_untracked(flow: Any, validated: dict[str, Any]) -> Any:
    """The flow with no Prefect API on validated parameters (flows/runs.py), its log on stderr as a tracked
    run's would be.

    Args:
        flow: The flow.
        validated: Its parameters, validated.

    Returns:
        The flow's report.
    """
    from flows.runs import call_validated

    with run_log_on_stderr(flow.name):
        return call_validated(flow, validated)


class _RunLogHandler(logging.Handler):
    """``HH:MM:SS.mmm | LEVEL   | flow - message`` on the current ``sys.stderr``, as Prefect's console prints a
    run's log (the current one: a progress bar on a terminal redirects it to print above the bar)."""

    def __init__(self, flow_name: str, level: int) -> None:
        super().__init__(level)
        self.flow_name = flow_name

    def emit(self, record: logging.LogRecord) -> None:
        try:
            clock = time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
            sys.stderr.write(f"{clock} | {record.levelname:<7} | {self.flow_name} - {record.getMessage()}\n")
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def run_log_on_stderr(flow_name: str) -> Iterator[None]:
    """While an untracked run runs: its run log (info and above) and every other warning on stderr.

    Args:
        flow_name: The flow's name, prefixed to every line.

    Yields:
        Nothing; the log goes to stderr while the block runs.
    """
    from tasks.tracking import LOGGER_NAME

    run_log, root = logging.getLogger(LOGGER_NAME), logging.getLogger()
    handler, others = _RunLogHandler(flow_name, logging.INFO), _RunLogHandler(flow_name, logging.WARNING)
    level, propagate = run_log.level, run_log.propagate
    run_log.setLevel(logging.INFO)
    run_log.propagate = False
    run_log.addHandler(handler)
    root.addHandler(others)
    try:
        yield
    finally:
        run_log.removeHandler(handler)
        run_log.setLevel(level)
        run_log.propagate = propagate
        root.removeHandler(others)


def start_boundary_run() -> None:
    """Give the next flow run a rejection collector of its own (tasks/boundary.py)."""
    from tasks.boundary import start_run

    start_run()


def drain_rejections() -> list[str]:
    """The objects the boundary reader (tasks/boundary.py) rejected during the current run since the last
    call, one line each.

    Returns:
        The rejection lines; empty outside a run.
    """
    from tasks.boundary import drain_rejections as drain

    return drain()


def warn_degraded(problems: Sequence[str]) -> None:
    """One ``degraded:`` line on stderr per problem.

    Args:
        problems: The problems, one line each.
    """
    for problem in problems:
        err.print(f"degraded: {problem}", style="yellow", highlight=False, soft_wrap=True)


def send_queued_events_and_logs() -> None:
    """Send what a flow run queued for the Prefect API (events, then log lines) before the command's verdict.

    Prefect's background workers otherwise send them at interpreter exit, after the verdict; on a loaded
    machine their "Still processing items: N items remaining..." warning then became the command's last line
    of stderr, where a person and a CI log look for the outcome. A later run starts new workers."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    EventsWorker.drain_all(at_exit=False)
    APILogWorker.drain_all(at_exit=False)


def exit_with_outcome(problems: list[str]) -> NoReturn:
    """Print a degraded run's problems (and every object the boundary reader rejected during the command's
    flow run, if it ran one) on stderr and exit DEGRADED (3); exit OK (0) otherwise.

    Args:
        problems: The run's problems; empty for a clean run.

    Raises:
        typer.Exit: Always: code 3 when there is a problem (or a rejection), else 0.
    """
    problems = [*problems, *drain_rejections()]
    warn_degraded(problems)
    raise typer.Exit(int(exit_code(problems)))


def table_of(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[str] = ()) -> Table:
    """A rich table of ``rows`` (each value as text); ``right`` names the right-justified columns.

    Args:
        title: The table's title.
        columns: The column headings.
        rows: The rows, one value per column.
        right: The headings of the columns justified right (numbers).

    Returns:
        The table, ready to print.
    """
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    for row in rows:
        table.add_row(*(value if isinstance(value, Text) else str(value) for value in row))
    return table


def write_or_print(
    rendered: dict[str, str], write: pathlib.Path | None, separator: str, what: Callable[[dict[str, str]], str]
) -> None:
    """Generated files: one file each into ``write``, or all on stdout joined by ``separator``, in name order.

    Args:
        rendered: The files' texts by file name.
        write: The directory to write into (created when missing), or None to print.
        separator: What joins the texts on stdout.
        what: Describes the files written, for the ``wrote ...`` line on stderr.
    """
    if write is not None:
        write.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            (write / name).write_text(text)
        err.print(f"wrote {what(rendered)} to {write}")
        return
    sys.stdout.write(separator.join(rendered[name] for name in sorted(rendered)))


def manifests_path(cluster: str, option: str = "--cluster") -> pathlib.Path:
    """A command that reads manifest files only (validate-manifests, simulate): ``cluster`` must name them;
    an empty value is a one-line error, never the working directory.

    Args:
        cluster: The option's value.
        option: The option's name, as the error names it.

    Returns:
        The path, stripped of surrounding blanks (it may not exist).

    Raises:
        CannotRun: The value is empty.
    """
    if not cluster.strip():
        raise CannotRun(f"{option} is empty: name a manifests directory or file")
    return pathlib.Path(cluster.strip())
