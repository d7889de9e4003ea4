"""The skeleton every per-object lifecycle shares: reconcile each object on its own, report, publish.

A per-object flow (discover-models, resolve-templates, rollout-services, rollout-models, warm-caches) reads the
cluster once, then calls :func:`reconcile_each` with what it does to one object: that object's plan and writes.
One object's API failure (or a plan that refuses it) never stops the others: it is counted as an error of the
run, recorded as a Warning Event on the object, and makes the run degraded. The flow ends with
:func:`conclude`: the table artifact (:class:`Table`), the summary line in the log, and the run's final state
(``Completed``, or ``Degraded`` with the reasons; :func:`flows.exitcodes.flow_result`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from flows.exitcodes import flow_result
from tasks.aim.writes import WriteCounts, for_each
from tasks.boundary import Accepted, not_being_deleted
from tasks.clients.cluster import Cluster, Manifest
from tasks.clients.cluster.errors import ClusterError
from tasks.clients.cluster.recorder import record_event
from tasks.tracking import run_logger, table_artifact, tracked

Row = TypeVar("Row")
ApiModel = TypeVar("ApiModel", bound=BaseModel)
Plan = TypeVar("Plan")
Item = TypeVar("Item", bound=Accepted[Any] | Manifest)

MAX_TABLE_ROWS = 1000
"""Rows of a table artifact (the UI renders one page; the CLI's JSON has them all)."""


@dataclass
class Report(Generic[Row]):
    """What one pass over a lifecycle's objects did: a row per object reconciled, the writes, a summary."""

    rows: list[Row] = field(default_factory=list)
    writes: WriteCounts = field(default_factory=WriteCounts)
    summary: str = ""

    def row_problem(self, row: Row) -> str | None:
        """Why this row makes the run degraded (an object not where its lifecycle wants it), or None."""
        return None

    @property
    def degraded(self) -> list[str]:
        """Why this run was degraded (exit 3, the ``Degraded`` run state): failed writes, then rows with a problem."""
        return [*self.writes.errors, *(p for p in map(self.row_problem, self.rows) if p)]


def reconcile_each(
    cluster: Cluster,
    objects: Sequence[Item],
    reconcile: Callable[[Item, WriteCounts], Row],
    *,
    failure_reason: str | None,
    failed_row: Callable[[Item, ClusterError | ValueError], Row] | None = None,
    workers: int = 8,
) -> tuple[list[Row], WriteCounts]:
    """Reconcile each object independently and collect the rows, in the objects' order; an object being deleted
    is left alone (:func:`tasks.boundary.not_being_deleted`).

    Args:
        cluster: Where failures are recorded as Events.
        objects: The objects as the run read them (with their API models, or as manifests).
        reconcile: What the lifecycle does to one object (plan, write), counting its writes; returns its row.
        failure_reason: The reason of the Warning Event on an object whose reconcile failed; None: no Event.
        failed_row: The row of an object whose reconcile failed (it then says the failure); None: the object has
            no row and the failure is a line of the counts' ``errors``.
        workers: Objects reconciled at once (their API calls are independent); 1 runs them in this thread
            (Prefect tasks called by ``reconcile`` then keep the flow run as their parent).

    Returns:
        The rows and what was written; each failure is logged (``Kind namespace/name: message``).
    """

    def one(item: Item, counts: WriteCounts) -> Row | None:
        try:
            return reconcile(item, counts)
        except (ClusterError, ValueError) as exc:  # one object's failure must not stop the others
            obj = item.obj if isinstance(item, Accepted) else item
            message = exc.message if isinstance(exc, ClusterError) else str(exc)
            line = f"{obj.get('kind')} {_name(obj)}: {message}"
            run_logger().error("%s", line)
            if failure_reason is not None:
                record_event(cluster, obj, failure_reason, message, "Warning")
            if failed_row is not None:  # the row says it
                return failed_row(item, exc)
            counts.errors.append(line)
            return None

    objects = not_being_deleted(objects)  # a finalizer or a foreground deletion holds them: left alone
    writes = WriteCounts()
    if workers <= 1:
        results = []
        for item in objects:
            counts = WriteCounts()
            results.append(one(item, counts))
            writes.merge(counts)
    else:
        results = for_each(objects, one, writes, workers)
    return [row for row in results if row is not None], writes


def planned(
    plan: Callable[[ApiModel], Plan],
    write: Callable[[Manifest, Plan, WriteCounts], object],
    row: Callable[[Plan], Row],
) -> Callable[[Accepted[ApiModel], WriteCounts], Row]:
    """What a read -> plan -> write lifecycle does to one object, for :func:`reconcile_each`: the engine's plan
    of its API model, the writes of that plan through the object as read, and the plan's row.

    Args:
        plan: The engine's decision for one object (pure).
        write: Write a plan through the object as read, counting the writes.
        row: The report's line of a written plan.

    Returns:
        The reconcile of one object.
    """

    def reconcile(item: Accepted[ApiModel], counts: WriteCounts) -> Row:
        decided = plan(item.model)
        write(item.obj, decided, counts)
        return row(decided)

    return reconcile


def in_scope(objects: Iterable[Accepted[ApiModel]], namespaces: Sequence[str] | None) -> list[Accepted[ApiModel]]:
    """The objects of ``namespaces`` (every one when empty), by namespace and name.

    Args:
        objects: The accepted objects.
        namespaces: The namespaces in scope; None or empty for every namespace.

    Returns:
        The objects in scope, sorted by namespace and name.
    """
    scope = set(namespaces or ())
    return sorted((o for o in objects if not scope or o.namespace in scope), key=lambda o: (o.namespace, o.name))


def status_problem(kind: str, row: Any, wanted: str) -> str | None:
    """``Kind namespace/name: status (reason)`` for a row (with ``namespace``, ``name``, ``status``, ``reason``)
    whose status is not ``wanted``; None when it is.

    Args:
        kind: The kind's name, as the line names it.
        row: A table row.
        wanted: The status a sound object has (e.g. ``Ready``).

    Returns:
        The problem line, or None.
    """
    if row.status == wanted:
        return None
    return f"{kind} {row.namespace}/{row.name}: {row.status}" + (f" ({row.reason})" if row.reason else "")


def tally(values: Iterable[str], nothing: str) -> str:
    """How many of each value, ``2 Running, 1 Starting`` (sorted), or ``nothing`` when there are none.

    Args:
        values: The values to count.
        nothing: What to say when there are none.

    Returns:
        The counts as one phrase.
    """
    counts = Counter(values)
    return ", ".join(f"{n} {value}" for value, n in sorted(counts.items())) or nothing


def _name(obj: Manifest) -> str:
    meta = obj.get("metadata") or {}
    return "/".join(part for part in (meta.get("namespace"), meta.get("name")) if part)


Column = str | tuple[str, str] | tuple[str, Callable[[Any], Any]]
"""A column of a table artifact: a row attribute shown under its own name, ``(header, attribute)``, or
``(header, function of the row)``."""


@dataclass(frozen=True)
class Table:
    """How a lifecycle's report is shown as a Prefect table artifact."""

    key: str
    columns: tuple[Column, ...]
    description: str
    """Said before the run's summary."""

    def cells(self, row: Any) -> dict[str, Any]:
        """One row of the artifact."""
        out: dict[str, Any] = {}
        for column in self.columns:
            header, value = (column, column) if isinstance(column, str) else column
            out[header] = getattr(row, value) if isinstance(value, str) else value(row)
        return out

    def publish(self, rows: Sequence[Any], summary: str) -> None:
        """The table as a Prefect artifact (only inside a flow run), at most :data:`MAX_TABLE_ROWS` rows."""
        if not tracked():
            return
        table_artifact(
            key=self.key,
            table=[self.cells(row) for row in rows[:MAX_TABLE_ROWS]],
            description=f"{self.description}: {summary}" if summary else self.description,
        )


class Concluded(Protocol):
    """What a flow's report says at its end."""

    @property
    def rows(self) -> Sequence[Any]:
        """The table's rows."""
        ...

    @property
    def summary(self) -> str:
        """The one-line summary."""
        ...

    @property
    def degraded(self) -> Sequence[str]:
        """Why the run was degraded (empty: it ran clean)."""
        ...


ReportT = TypeVar("ReportT", bound=Concluded)


def conclude(name: str, report: ReportT, table: Table | None) -> ReportT:
    """End a flow: publish its table, log its summary, and return its report as the run's final state.

    Args:
        name: The flow's name, in the log line.
        report: What the run did: its rows, summary and degraded reasons.
        table: The artifact of the rows; None: the flow publishes its own.

    Returns:
        The report, or a ``Degraded`` state carrying it (:func:`flows.exitcodes.flow_result`).
    """
    if table is not None:
        table.publish(report.rows, report.summary)
    run_logger().info("%s: %s", name, report.summary)
    return flow_result(report, report.degraded)
