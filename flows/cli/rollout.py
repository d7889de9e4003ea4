"""The Kthena and llmaz serving lifecycles as commands: ``rollout-models`` (every Kthena Model), ``watch-models``
(announce Models not rolled out yet) and ``serve-openmodel`` (one llmaz OpenModel). Each is pre-checked on the
kind it reads, so a cluster without the CRD is one ``error:`` line before Prefect starts."""

from __future__ import annotations

import dataclasses

import typer

from flows.cli.common import (
    cluster_option,
    command,
    console,
    exit_with_outcome,
    json_option,
    namespaces_option,
    needs,
    run_flow,
    table_of,
    track_option,
)
from flows.cli.options import duration_option
from flows.cli.output import print_json
from flows.image import IMAGE
from flows.parameters import KTHENA_NETWORKING, MAX_WATCH_S, ROLLOUT_WORKLOAD, WATCH_SECONDS


@command("rollout-models")
def rollout_models_command(
    cluster: str | None = cluster_option(),
    namespace: list[str] = namespaces_option(),
    downloader_image: str = typer.Option(IMAGE, help="Image of the init container that downloads into a cacheURI."),
    track: bool = track_option(),
    as_json: bool = json_option(),
    name: list[str] = typer.Option([], "--name", help="Only the Models with these names (repeatable)."),
    kthena_networking: str = typer.Option(
        KTHENA_NETWORKING,
        "--kthena-networking",
        help="auto: render Kthena's ModelServer/ModelRoute and runtime sidecar when the cluster serves networking.serving.volcano.sh; off: never.",
    ),
    workload: str = typer.Option(
        ROLLOUT_WORKLOAD,
        "--workload",
        help="Deployment, or ModelServing (Kthena's gang-scheduled workload, where its CRD is served).",
    ),
) -> None:
    """Roll out every Kthena Model once and print what changed.

    Exit codes: 0 every Model rolled out; 2 could not run (cluster path missing, no
    Kubernetes access, the Kthena CRDs not installed, a parameter rejected), with one line on stderr;
    3 degraded: a Model is Failed, as its row says.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        namespace: ``--namespace``/``-n``: Limit to these namespaces (repeatable).
        downloader_image: ``--downloader-image``: Image of the init container that downloads into a cacheURI.
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON list instead of a table.
        name: ``--name``: Only the Models with these names (repeatable).
        kthena_networking: ``--kthena-networking``: auto: render Kthena's ModelServer/ModelRoute and runtime sidecar
            when the cluster serves networking.serving.volcano.sh; off: never.
        workload: ``--workload``: Deployment, or ModelServing (Kthena's gang-scheduled workload, where its CRD is
            served).
    """
    from engine.api.kthena import API_VERSION
    from engine.api.registry import MODEL

    report = run_flow(
        "flows.rollout_models:rollout_models",
        track=track,
        check=needs(API_VERSION, MODEL),
        namespaces=namespace or None,
        names=name or None,
        cluster=cluster,
        downloader_image=downloader_image,
        kthena_networking=kthena_networking,
        workload=workload,
    )
    if as_json:
        print_json([dataclasses.asdict(m) for m in report.models])
        exit_with_outcome(report.degraded)
    rows = [
        (
            m.namespace,
            m.name,
            m.result,
            "\n".join(
                [f"+{c}" for c in m.created] + [f"~{u}" for u in m.updated] + [f"-{d}" for d in m.deleted] + m.lora
            )
            or "-",
        )
        for m in report.models
    ]
    console.print(table_of("Kthena Models", ("namespace", "model", "result", "changes"), rows))
    console.print(report.summary)
    exit_with_outcome(report.degraded)


@command("watch-models", renamed={"--watch-seconds": "--watch"})
def watch_models_command(
    cluster: str | None = cluster_option(),
    namespace: list[str] = namespaces_option("Watch these namespaces only (repeatable)."),
    watch_seconds: float = duration_option(
        WATCH_SECONDS, "--watch", help=f"How long the watch stays open (at most {MAX_WATCH_S}s)."
    ),
    track: bool = track_option(),
    as_json: bool = json_option("a JSON object"),
) -> None:
    """Watch the Kthena Models for WATCH_SECONDS and emit modelplane.kthena.model.changed for each Model whose
    spec rollout-models has not rolled out yet (the event triggers its rollout).

    Exit codes: 0 the watch ran (changes or none); 2 could not run (cluster path missing,
    no Kubernetes access, the Kthena Model CRD not installed, a parameter rejected), with one line on stderr.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        namespace: ``--namespace``/``-n``: Watch these namespaces only (repeatable).
        watch_seconds: ``--watch``: How long the watch stays open (at most 50s). In seconds (the option reads 90s, 5m,
            1d; default 45s).
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON object instead of a table.
    """
    from engine.api.kthena import API_VERSION
    from engine.api.registry import MODEL

    report = run_flow(
        "flows.watch_models:watch_models",
        track=track,
        check=needs(API_VERSION, MODEL),
        namespaces=namespace or None,
        watch_seconds=watch_seconds,
        cluster=cluster,
    )
    if as_json:
        print_json(report.as_json())
        exit_with_outcome([])
    rows = [
        (
            row.namespace,
            row.name,
            row.generation,
            "never" if row.observed_generation is None else row.observed_generation,
            row.seen_as,
        )
        for row in report.changes
    ]
    columns = ("namespace", "model", "generation", "rolled out", "seen as")
    console.print(table_of("Kthena Model changes announced", columns, rows))
    console.print(report.summary)
    exit_with_outcome([])


@command("serve-openmodel")
def serve_openmodel_command(
    model: str = typer.Argument(..., help="Name of the OpenModel."),
    namespace: str = typer.Option(..., "--namespace", "-n", help="Namespace to serve it in."),
    replicas: int = typer.Option(1, "--replicas", min=0, help="vLLM replicas."),
    flavor: str | None = typer.Option(None, "--flavor", help="Flavor to start from (default: the first)."),
    cluster: str | None = cluster_option(),
    track: bool = track_option(),
    as_json: bool = json_option("a JSON object"),
) -> None:
    """Serve an llmaz OpenModel with vLLM from its shared cache, placed by its flavors.

    Exit codes: 0 Serving; 2 could not run (cluster path missing, no Kubernetes access,
    the OpenModel or namespace missing, no flavor fits), with one line on stderr; 3 not Serving (yet), as
    the state line says.\f

    Args:
        model: ``MODEL``: Name of the OpenModel.
        namespace: ``--namespace``/``-n``: Namespace to serve it in.
        replicas: ``--replicas``: vLLM replicas. (at least 0)
        flavor: ``--flavor``: Flavor to start from (default: the first).
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON object instead of a table.
    """
    from engine.api.llmaz import API_VERSION
    from engine.api.registry import OPEN_MODEL
    from flows.serve_openmodel import ServeError, serve_openmodel

    report = run_flow(
        serve_openmodel,
        track=track,
        check=needs(API_VERSION, OPEN_MODEL),
        cannot_run=(ServeError,),
        model=model,
        namespace=namespace,
        replicas=replicas,
        flavor=flavor,
        cluster=cluster,
    )
    if as_json:
        print_json(dataclasses.asdict(report))
        exit_with_outcome(report.degraded)
    changes = ", ".join(report.writes.created + report.writes.updated) or "nothing changed"
    console.print(f"{report.model} in {report.namespace}: {report.state} - {report.message} ({changes})")
    exit_with_outcome(report.degraded)
