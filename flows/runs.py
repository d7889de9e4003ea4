"""Modelplane's flows as Prefect flows, and how a command runs one without a Prefect API.

:func:`flow` is the decorator of every Modelplane flow. Where Prefect is loaded when the flow's module is
imported (a worker's or ``prefect deploy``'s import of a deployment's entrypoint, ``serve-deployments``, the
tests), it is Prefect's ``@flow`` itself. Where it is not (a ``modelplane`` command, which imports Prefect only
when a run is tracked), it gives a :class:`LocalFlow`: the same function and options, with the Prefect flow
built on first use (:func:`as_prefect`), so a command that needs no Prefect API never imports Prefect.

:func:`run_untracked` is a run with no Prefect API (tasks/tracking.py): the flow's parameters checked by the
same rules Prefect checks (the signature's pydantic types), its timeout, then its function; the tasks it calls
are plain calls. The flow's code, its report, its summary and its degraded reasons are those of a tracked run.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from tasks.tracking import untracked_run

if TYPE_CHECKING:
    from prefect import Flow

P = ParamSpec("P")
R = TypeVar("R")


class ParameterError(ValueError):
    """A parameter the flow's signature rejects (Prefect's ``ParameterTypeError`` in a tracked run)."""


class LocalFlow:
    """A Modelplane flow before Prefect is loaded: its function, its Prefect options, and the Prefect flow
    built from them on first use (any attribute this class does not define is the Prefect flow's)."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.fn = fn
        self.options = options
        self.name: str = options.get("name") or fn.__name__
        self.timeout_seconds: float | None = options.get("timeout_seconds")
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def prefect(self) -> Flow[..., Any]:
        """The Prefect flow (importing Prefect)."""
        return _prefect_flow(self.fn, self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.prefect(*args, **kwargs)

    def with_options(self, **options: Any) -> LocalFlow:
        """The same flow with some options changed (Prefect's ``Flow.with_options``, still without Prefect)."""
        return LocalFlow(self.fn, {**self.options, **options})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.prefect, name)


def _prefect_flow(fn: Callable[..., Any], options: dict[str, Any]) -> Flow[..., Any]:
    """Prefect's flow of ``fn``; ``max_workers`` becomes a thread-pool task runner of that size."""
    from prefect import flow as prefect_flow

    options = dict(options)
    max_workers = options.pop("max_workers", None)
    if max_workers is not None:
        from prefect.task_runners import ThreadPoolTaskRunner

        options["task_runner"] = ThreadPoolTaskRunner(max_workers=max_workers)
    return prefect_flow(**options)(fn)


def flow(
    *, name: str, timeout_seconds: float | None = None, log_prints: bool = True, max_workers: int | None = None
) -> Callable[[Callable[P, R]], Flow[P, R]]:
    """The decorator of every Modelplane flow (see the module docs): Prefect's ``@flow`` with these options
    (``max_workers``: the size of the thread pool ``submit`` runs tasks in), or a :class:`LocalFlow` of them.

    Args:
        name: The flow's name.
        timeout_seconds: How long a run may take, in seconds; None for no limit.
        log_prints: Whether ``print`` in the flow goes to its run log.
        max_workers: The size of the thread pool ``submit`` runs tasks in, or None for Prefect's default.

    Returns:
        The decorator.
    """
    options: dict[str, Any] = {"name": name, "log_prints": log_prints}
    if timeout_seconds is not None:
        options["timeout_seconds"] = timeout_seconds
    if max_workers is not None:
        options["max_workers"] = max_workers

    def decorate(fn: Callable[P, R]) -> Flow[P, R]:
        if "prefect" in sys.modules:
            return cast("Flow[P, R]", _prefect_flow(fn, options))
        return cast("Flow[P, R]", LocalFlow(fn, options))

    return decorate


def as_prefect(flow: Any) -> Flow[..., Any]:
    """The Prefect flow of a flow this module made (a :class:`LocalFlow`'s, built now, or the flow itself).

    Args:
        flow: A flow this module made.

    Returns:
        The Prefect flow.
    """
    return flow.prefect if isinstance(flow, LocalFlow) else cast("Flow[..., Any]", flow)


def validate_parameters(flow: Any, parameters: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` checked and converted by the flow's signature, as Prefect's ``Flow.validate_parameters``
    does (a pydantic model of the signature, arbitrary types allowed, no extra names); :class:`ParameterError`
    with Prefect's message otherwise.

    Args:
        flow: A flow this module made.
        parameters: The parameters by name.

    Returns:
        Every parameter of the signature, converted, by name (defaults filled in).

    Raises:
        ParameterError: A parameter is missing, unknown or invalid; the message lists each.
    """
    import pydantic

    fn = flow.fn
    signature = inspect.signature(fn)
    fields: dict[str, Any] = {
        name: (
            Any if p.annotation is inspect.Parameter.empty else p.annotation,
            pydantic.Field(...) if p.default is inspect.Parameter.empty else pydantic.Field(default=p.default),
        )
        for name, p in signature.parameters.items()
    }
    model = pydantic.create_model(
        f"{fn.__name__.title()}Parameters",
        __config__=pydantic.ConfigDict(arbitrary_types_allowed=True, extra="forbid"),
        **fields,
    )
    model.model_rebuild(_types_namespace=fn.__globals__)
    try:
        validated = model.model_validate(parameters)
    except pydantic.ValidationError as exc:
        problems = [f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ParameterError("Flow run received invalid parameters:\n - " + "\n - ".join(problems)) from None
    return {name: getattr(validated, name) for name in signature.parameters}


def run_untracked(flow: Any, parameters: dict[str, Any]) -> Any:
    """Run ``flow`` with no Prefect API: parameters checked (:func:`validate_parameters`), then
    :func:`call_validated`.

    Args:
        flow: A flow this module made.
        parameters: The parameters by name, not yet validated.

    Returns:
        The flow's return value.

    Raises:
        ParameterError: A parameter is rejected (raised by :func:`validate_parameters`).
    """
    return call_validated(flow, validate_parameters(flow, parameters))


def call_validated(flow: Any, validated: dict[str, Any]) -> Any:
    """The flow's function on parameters :func:`validate_parameters` returned, within the flow's timeout; its
    return value (a degraded run's report too: :func:`flows.exitcodes.flow_result` returns the report untracked).

    Args:
        flow: A flow this module made.
        validated: The parameters :func:`validate_parameters` returned.

    Returns:
        The flow's return value.
    """
    with untracked_run(), time_limit(flow.name, getattr(flow, "timeout_seconds", None)):
        return flow.fn(**validated)


class FlowTimeout(BaseException):
    """The flow ran longer than its ``timeout_seconds`` (Prefect's ``TimedOut`` state in a tracked run).

    Not an ``Exception`` (and not a ``TimeoutError``, an ``OSError``): raised by the alarm wherever the flow is,
    it must reach the run's end, and the handlers that report a failing dependency (``except OSError`` around a
    push or a query) would take it for theirs. Before, a Pushgateway push swallowed it as "unreachable" and the
    cycle went on writing past its own time limit. Prefect's own time-out is a ``BaseException`` for the same
    reason."""


@contextlib.contextmanager
def time_limit(name: str, seconds: float | None) -> Iterator[None]:
    """Raise :class:`FlowTimeout` in the block after ``seconds``, as Prefect times a flow out (an alarm
    signal; only on the main thread, where signals are delivered).

    Args:
        name: The flow's name, in the error.
        seconds: The time limit in seconds; None or 0 for none.

    Yields:
        Nothing; the alarm is set while the block runs.

    Raises:
        FlowTimeout: The block ran longer than ``seconds`` (raised by the alarm's handler).
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise FlowTimeout(f"flow {name} timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
