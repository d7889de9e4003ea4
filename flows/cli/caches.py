"""The model-cache lifecycle as a command: ``warm-caches`` runs one pass (PVCs, fill Jobs or in-process fills,
garbage collection) and prints every ModelCache's state. Filling one cache is ``fill-cache`` (flows/cli/cache_fill.py)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

import typer

from flows.cli.common import (
    cluster_option,
    command,
    console,
    exit_with_outcome,
    json_option,
    namespaces_option,
    run_flow,
    track_option,
)
from flows.cli.options import duration_option
from flows.cli.output import print_json
from flows.parameters import FILL_RETRY_BACKOFF_S, MAX_FILL_ATTEMPTS

if TYPE_CHECKING:
    from flows.warm_caches import WarmReport

WARM_TIMEOUT_S = 86400.0
"""``warm-caches --timeout-s``: a local pass fills in-process, so it may take as long as the downloads."""


GC_MIN_UNUSED_AFTER_S = 3600.0
"""``--gc-unused-after``'s least value: :data:`engine.caches.gc.MIN_UNUSED_AFTER` (this module stays light to
import; tests/flows/test_warm_caches_cli.py checks the two agree)."""


@command("warm-caches", renamed={"--retry-backoff-s": "--retry-backoff", "--timeout-s": "--timeout"})
def warm_caches(
    cluster: str | None = cluster_option(),
    namespace: list[str] = namespaces_option(),
    image: str | None = typer.Option(None, "--image", help="Modelplane's image for the fill Jobs."),
    openmodel_namespace: str | None = typer.Option(
        None, "--openmodel-namespace", help="Cache llmaz OpenModels in this namespace."
    ),
    no_consumers: bool = typer.Option(
        False, "--no-consumers", help="Only fill existing ModelCaches; create none for consumers."
    ),
    gc_unused_after: float | None = duration_option(
        None,
        "--gc-unused-after",
        help="Delete caches unused this long and unmounted, at least 1h, e.g. 7d, 12h (default: never).",
        minimum=GC_MIN_UNUSED_AFTER_S,
    ),
    max_fill_attempts: int = typer.Option(
        MAX_FILL_ATTEMPTS, "--max-fill-attempts", min=1, help="Fills per cache generation before it stays Failed."
    ),
    retry_backoff_s: float = duration_option(
        FILL_RETRY_BACKOFF_S, "--retry-backoff", help="Wait after the first failed fill (doubles).", minimum=0
    ),
    timeout_s: float = duration_option(
        WARM_TIMEOUT_S, "--timeout", help="Stop the run after this long (local fills run in-process).", minimum=1
    ),
    track: bool = track_option(),
    as_json: bool = json_option("JSON"),
) -> None:
    """Run one warm-caches pass: create PVCs, fill every ModelCache (Jobs in a cluster, in-process locally), report.

    Exit codes: 0 every cache reconciled; 2 could not run (cluster path missing, no
    Kubernetes access, a bad argument), with one line on stderr; 3 ran degraded (a cache Failed, a consumer's
    source invalid, an API error on one cache), as the summary says.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        namespace: ``--namespace``/``-n``: Limit to these namespaces (repeatable).
        image: ``--image``: Modelplane's image for the fill Jobs.
        openmodel_namespace: ``--openmodel-namespace``: Cache llmaz OpenModels in this namespace.
        no_consumers: ``--no-consumers``: Only fill existing ModelCaches; create none for consumers.
        gc_unused_after: ``--gc-unused-after``: Delete caches unused this long and unmounted, e.g. 7d, 12h (default:
            never). In seconds (the option reads 90s, 5m, 1d).
        max_fill_attempts: ``--max-fill-attempts``: Fills per cache generation before it stays Failed. (at least 1)
        retry_backoff_s: ``--retry-backoff``: Wait after the first failed fill (doubles). In seconds (the option reads
            90s, 5m, 1d; default 5m).
        timeout_s: ``--timeout``: Stop the run after this long (local fills run in-process). In seconds (the option
            reads 90s, 5m, 1d; default 1d).
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print JSON instead of a table.
    """
    from flows.warm_caches import DEFAULT_IMAGE
    from flows.warm_caches import warm_caches as warm_caches_flow

    unused_after = datetime.timedelta(seconds=gc_unused_after) if gc_unused_after else None
    report = run_flow(
        warm_caches_flow.with_options(timeout_seconds=timeout_s),
        track=track,
        namespaces=namespace or None,
        cluster=cluster,
        image=image or DEFAULT_IMAGE,
        openmodel_namespace=openmodel_namespace,
        include_consumers=not no_consumers,
        gc_unused_after=unused_after,
        max_fill_attempts=max_fill_attempts,
        retry_backoff_s=retry_backoff_s,
    )
    if as_json:
        print_json(report.as_json())
    else:
        _print_caches(report)
    exit_with_outcome(report.degraded)


def _print_caches(report: WarmReport) -> None:
    """The pass as a table of caches, then what it needs and freed, its notes and summary."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Model caches")
    for column in ("namespace", "name", "source", "status", "reason", "pvc", "action"):
        table.add_column(column)
    colours = {"Available": "green", "Failed": "red", "Progressing": "yellow"}
    for row in report.rows:
        status = Text(row.status, style=colours.get(row.status, "white"))
        table.add_row(row.namespace, row.name, row.source, status, row.reason, row.pvc, row.action)
    console.print(table)
    lines = [
        *(f"needs: {e}" for e in report.ensured),
        *(f"freed: {f}" for f in report.freed),
        *report.notes,
    ]
    for line in lines:
        console.print(line, highlight=False)
    console.print(report.summary)
