"""The ``modelplane`` command line: run flows locally, print CRDs, validate manifests, serve deployments."""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

# Local runs start an ephemeral Prefect API on the shared ~/.prefect database; its telemetry write is the
# one statement that contends with another local Prefect process, and it reports nothing we need.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Modelplane: a control plane for serving LLMs on Kubernetes.")
# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns and cut names; use a wide page.
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)

REPO = pathlib.Path(__file__).resolve().parents[1]
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"


@app.command()
def crds(write: Optional[pathlib.Path] = typer.Option(None, help="Write one file per kind into this directory.")) -> None:
    """Print the CustomResourceDefinitions generated from the API models."""
    from engine.api.crds import render_crds

    rendered = render_crds()
    if write is not None:
        write.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            (write / name).write_text(text)
        err.print(f"wrote {len(rendered)} CRDs to {write}")
        return
    sys.stdout.write("---\n".join(rendered[name] for name in sorted(rendered)))


@app.command()
def validate(cluster: pathlib.Path = typer.Option(..., "--cluster", help="Manifests directory or multi-document file.")) -> None:
    """Load and validate a manifests directory; print every resource and every invalid one with its reason."""
    from tasks.manifests import read_manifest_documents
    from engine.api.validate import load_documents

    documents, read_errors = read_manifest_documents(cluster)
    report = load_documents(documents)
    base = f"{cluster}/" if cluster.is_dir() else ""

    def short(source: str) -> str:
        return source.removeprefix(base)

    table = Table(title=f"Resources in {cluster}")
    for column in ("source", "kind", "namespace", "name", "result"):
        table.add_column(column)
    for source, obj in report.valid:
        meta = _meta_of(obj)
        table.add_row(short(source), _kind_of(obj), meta.get("namespace") or "", meta.get("name") or "", "[green]valid[/green]")
    for source, error in report.invalid:
        table.add_row(short(source), error.kind or "", error.namespace or "", error.name or "", f"[red]{error.field_path}: {error.message}[/red]")
    for source, message in read_errors:
        table.add_row(short(source), "", "", "", f"[red]{message.removeprefix(base)}[/red]")
    console.print(table)
    bad = len(report.invalid) + len(read_errors)
    console.print(f"{len(report.valid)} valid, {bad} invalid")
    raise typer.Exit(1 if bad else 0)


def _meta_of(obj: object) -> dict:
    if isinstance(obj, dict):
        return obj.get("metadata") or {}
    metadata = getattr(obj, "metadata", None)
    if metadata is None:
        return {}
    return metadata.model_dump(by_alias=True, exclude_none=True) if hasattr(metadata, "model_dump") else dict(metadata)


def _kind_of(obj: object) -> str:
    return obj.get("kind", "") if isinstance(obj, dict) else type(obj).__name__


@app.command()
def optimize(
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Manifests directory/file, 'kubeconfig:PATH[#ctx]', or empty for the current kubeconfig."),
    metrics: Optional[pathlib.Path] = typer.Option(None, "--metrics", help="Metrics YAML file (instead of Prometheus)."),
    prometheus: Optional[str] = typer.Option(None, "--prometheus", help="Prometheus base URL (default $PROMETHEUS_URL)."),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    namespace_selector: Optional[str] = typer.Option(None, "--namespace-selector", "-l", help="Label selector on Namespaces."),
    config_namespace: str = typer.Option("modelplane-system", help="Namespace of the WVA ConfigMaps."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Decide and print, write nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
) -> None:
    """Run one optimization cycle and print the allocation table (writes status back unless --dry-run)."""
    from flows.optimize import optimize as optimize_flow

    report = optimize_flow(
        namespaces=namespace or None,
        namespace_selector=namespace_selector,
        config_namespace=config_namespace,
        prometheus_url=prometheus,
        metrics_file=str(metrics) if metrics else None,
        cluster=cluster,
        dry_run=dry_run,
    )
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
        return
    table = Table(title="Modelplane allocation")
    for column in ("namespace", "name", "model", "accelerator", "current", "desired", "cost", "reason"):
        table.add_column(column, justify="right" if column in ("current", "desired", "cost") else "left")
    for row in report.rows:
        changed = row.desired is not None and row.current is not None and row.desired != row.current
        desired = f"[bold]{row.desired}[/bold]" if changed else str(row.desired if row.desired is not None else "-")
        table.add_row(row.namespace, row.name, row.model, row.accelerator, str(row.current if row.current is not None else "-"), desired, row.cost, row.reason)
    console.print(table)
    console.print(report.summary)
    if report.metrics_error:
        err.print(f"[yellow]metrics unavailable: {report.metrics_error}[/yellow]")


@app.command()
def serve() -> None:
    """Serve every deployment of deployments/prefect.yaml with its schedules (Prefect server if PREFECT_API_URL is set)."""
    from prefect import serve as prefect_serve

    from flows.deployments import runner_deployments

    if not os.environ.get("PREFECT_API_URL"):
        err.print("PREFECT_API_URL is not set: serving against an ephemeral Prefect API")
    prefect_serve(*runner_deployments(PREFECT_YAML))


@app.command("rollout-models")
def rollout_models_command(
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Manifests directory/file, 'kubeconfig:PATH[#ctx]', or empty for the current kubeconfig."),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    downloader_image: str = typer.Option("ghcr.io/modelplane/modelplane:0.1.0", help="Image of the init container that downloads into a cacheURI."),
) -> None:
    """Roll out every Kthena Model once and print what changed; exits 1 when a Model is Failed."""
    from flows.rollout_models import rollout_models
    from tasks.cluster import ClusterError

    try:
        report = rollout_models(namespaces=namespace or None, cluster=cluster, downloader_image=downloader_image)
    except (ClusterError, OSError) as exc:
        err.print(f"[red]rollout-models: {getattr(exc, 'message', exc)}[/red]")
        raise typer.Exit(1)
    table = Table(title="Kthena Models")
    for column in ("namespace", "model", "result", "changes"):
        table.add_column(column)
    for m in report.models:
        changes = [f"+{c}" for c in m.created] + [f"~{u}" for u in m.updated] + [f"-{d}" for d in m.deleted] + m.lora
        table.add_row(m.namespace, m.name, m.result, "\n".join(changes) or "-")
    console.print(table)
    console.print(report.summary)
    raise typer.Exit(1 if report.failed else 0)


@app.command("serve-openmodel")
def serve_openmodel_command(
    model: str = typer.Argument(..., help="Name of the OpenModel."),
    namespace: str = typer.Option(..., "--namespace", "-n", help="Namespace to serve it in."),
    replicas: int = typer.Option(1, "--replicas", min=0, help="vLLM replicas."),
    flavor: Optional[str] = typer.Option(None, "--flavor", help="Flavor to start from (default: the first)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Manifests directory/file, 'kubeconfig:PATH[#ctx]', or empty for the current kubeconfig."),
) -> None:
    """Serve an llmaz OpenModel with vLLM from its shared cache, placed by its flavors; exits 1 when it cannot
    be served (yet)."""
    from flows.serve_openmodel import ServeError, serve_openmodel
    from tasks.cluster import ClusterError

    try:
        report = serve_openmodel(model=model, namespace=namespace, replicas=replicas, flavor=flavor, cluster=cluster)
    except (ServeError, ClusterError, OSError) as exc:
        err.print(f"[red]serve-openmodel: {getattr(exc, 'message', exc)}[/red]")
        raise typer.Exit(1)
    changes = ", ".join(report.writes.created + report.writes.updated) or "nothing changed"
    console.print(f"{report.model} in {report.namespace}: {report.state} - {report.message} ({changes})")
    raise typer.Exit(0 if report.state == "Serving" else 1)


@app.command("warm-caches")
def warm_caches(
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Manifests directory/file, 'kubeconfig:PATH[#ctx]', or empty for the current kubeconfig."),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    image: Optional[str] = typer.Option(None, "--image", help="Modelplane's image for the fill Jobs."),
    openmodel_namespace: Optional[str] = typer.Option(None, "--openmodel-namespace", help="Cache llmaz OpenModels in this namespace."),
    no_consumers: bool = typer.Option(False, "--no-consumers", help="Only fill existing ModelCaches; create none for consumers."),
    gc_unused_after: Optional[str] = typer.Option(None, "--gc-unused-after", help="Delete caches unused this long and unmounted, e.g. 7d, 12h."),
    max_fill_attempts: int = typer.Option(4, "--max-fill-attempts", min=1, help="Fills per cache generation before it stays Failed."),
    retry_backoff_s: float = typer.Option(300.0, "--retry-backoff-s", min=0, help="Wait after the first failed fill (doubles)."),
    timeout_s: float = typer.Option(86400.0, "--timeout-s", min=1, help="Stop the run after this long (local fills run in-process)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Run one warm-caches pass: create PVCs, fill every ModelCache (Jobs in a cluster, in-process locally), report."""
    from flows.warm_caches import DEFAULT_IMAGE, warm_caches as warm_caches_flow

    try:
        unused_after = _duration(gc_unused_after) if gc_unused_after else None
    except ValueError as exc:
        err.print(f"[red]--gc-unused-after: {exc}[/red]")
        raise typer.Exit(2) from None
    report = warm_caches_flow.with_options(timeout_seconds=timeout_s)(
        namespaces=namespace or None, cluster=cluster, image=image or DEFAULT_IMAGE, openmodel_namespace=openmodel_namespace,
        include_consumers=not no_consumers, gc_unused_after=unused_after, max_fill_attempts=max_fill_attempts,
        retry_backoff_s=retry_backoff_s,
    )
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
    else:
        table = Table(title="Model caches")
        for column in ("namespace", "name", "source", "status", "reason", "pvc", "action"):
            table.add_column(column)
        colours = {"Available": "green", "Failed": "red", "Progressing": "yellow"}
        for row in report.rows:
            status = f"[{colours.get(row.status, 'white')}]{row.status}[/]"
            table.add_row(row.namespace, row.name, row.source, status, row.reason, row.pvc, row.action)
        console.print(table)
        for line in [*(f"needs: {e}" for e in report.ensured), *(f"freed: {f}" for f in report.freed), *report.notes]:
            console.print(line)
        for row in report.rows:
            if row.status == "Failed":
                err.print(f"[red]{row.namespace}/{row.name}: {row.reason}: {row.message}[/red]")
        for problem in report.problems:
            err.print(f"[yellow]{problem}[/yellow]")
        console.print(report.summary)
    if report.problems:
        raise typer.Exit(1)


def _duration(text: str) -> "datetime.timedelta":
    """``7d``, ``12h``, ``30m``, ``90s`` (or a Go duration such as ``1h30m``) as a timedelta."""
    import datetime

    from engine.api.meta import parse_duration

    text = text.strip()
    if text.endswith("d") and text[:-1].replace(".", "", 1).isdigit():
        return datetime.timedelta(days=float(text[:-1]))
    return datetime.timedelta(seconds=parse_duration(text))


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
