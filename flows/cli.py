"""The ``modelplane`` command line: run flows locally, print CRDs, validate manifests, serve deployments."""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Any, Callable, Optional

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


def _aim_table(title: str, columns: tuple[str, ...], rows: list[tuple[object, ...]], summary: str, errors: list[str]) -> None:
    """Print an AIM flow's table and summary; exit 1 (one line per error) when writes failed."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(value) for value in row))
    console.print(table)
    console.print(summary)
    for line in errors:
        err.print(f"[red]{line}[/red]")
    if errors:
        raise typer.Exit(1)


_CLUSTER_HELP = "Manifests directory/file, 'kubeconfig:PATH[#ctx]', or empty for the current kubeconfig."


@app.command("discover-models")
def discover_models_command(
    cluster: Optional[str] = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Create templates in these namespaces (default: every namespace with an AIMNamespaceConfig)."),
    resync: int = typer.Option(86400, "--resync-seconds", help="Read unchanged images again after this many seconds."),
    insecure_registry: list[str] = typer.Option([], "--insecure-registry", help="Registry host spoken to over plain HTTP (repeatable)."),
    registry_mirror: list[str] = typer.Option([], "--registry-mirror", help="HOST=MIRROR or HOST=oci-layout:DIR (repeatable)."),
) -> None:
    """Read every AIMClusterModel's image labels and create its recommended AIMServiceTemplates."""
    from flows.discover_models import discover_models

    mirrors = _mirrors(registry_mirror)
    report = _run_flow(lambda: discover_models(namespaces=namespace or None, resync_interval_s=resync,
                                               insecure_registries=insecure_registry or None, registry_mirrors=mirrors, cluster=cluster))
    _aim_table("AIM model discovery", ("model", "image", "result", "deployments", "templates"),
               [(r.name, r.image, r.result, r.deployments, r.templates) for r in report.rows], report.summary, report.writes.errors)


@app.command("resolve-templates")
def resolve_templates_command(
    cluster: Optional[str] = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
) -> None:
    """Resolve every AIMServiceTemplate to a runtime profile, check GPUs, request caches when warmCache."""
    from flows.resolve_templates import resolve_templates

    report = _run_flow(lambda: resolve_templates(namespaces=namespace or None, cluster=cluster))
    _aim_table("AIM templates", ("namespace", "template", "status", "reason", "message"),
               [(r.namespace, r.name, r.status, r.reason, r.message) for r in report.rows], report.summary, report.writes.errors)


@app.command("rollout-services")
def rollout_services_command(
    cluster: Optional[str] = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
) -> None:
    """Roll out every AIMService as a KServe InferenceService and Gateway HTTPRoute and report its status."""
    from flows.rollout_services import rollout_services

    report = _run_flow(lambda: rollout_services(namespaces=namespace or None, cluster=cluster))
    _aim_table("AIM services", ("namespace", "service", "status", "reason", "workload", "action"),
               [(r.namespace, r.name, r.status, r.reason, r.workload, r.action) for r in report.rows], report.summary, report.writes.errors)


@app.command("aim")
def aim_command(
    cluster: Optional[str] = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    registry_mirror: list[str] = typer.Option([], "--registry-mirror", help="HOST=MIRROR or HOST=oci-layout:DIR (repeatable)."),
) -> None:
    """The three AIM lifecycles in one process: discover-models, resolve-templates, rollout-services."""
    from flows.discover_models import discover_models
    from flows.resolve_templates import resolve_templates
    from flows.rollout_services import rollout_services

    mirrors = _mirrors(registry_mirror)
    found = _run_flow(lambda: discover_models(registry_mirrors=mirrors, cluster=cluster))
    resolved = _run_flow(lambda: resolve_templates(cluster=cluster))
    rolled = _run_flow(lambda: rollout_services(cluster=cluster))
    errors = found.writes.errors + resolved.writes.errors
    _aim_table("AIM model discovery", ("model", "image", "result", "deployments", "templates"),
               [(r.name, r.image, r.result, r.deployments, r.templates) for r in found.rows], found.summary, [])
    _aim_table("AIM templates", ("namespace", "template", "status", "reason"),
               [(r.namespace, r.name, r.status, r.reason) for r in resolved.rows], resolved.summary, [])
    _aim_table("AIM services", ("namespace", "service", "status", "reason", "workload", "action"),
               [(r.namespace, r.name, r.status, r.reason, r.workload, r.action) for r in rolled.rows], rolled.summary,
               errors + rolled.writes.errors)


def _mirrors(pairs: list[str]) -> dict[str, str]:
    """``HOST=TARGET`` options as a dict; a malformed one is a one-line error."""
    result: dict[str, str] = {}
    for pair in pairs:
        host, sep, target = pair.partition("=")
        if not sep or not host.strip() or not target.strip():
            err.print(f"[red]--registry-mirror {pair!r}: expected HOST=MIRROR or HOST=oci-layout:DIR[/red]")
            raise typer.Exit(2)
        result[host.strip()] = target.strip()
    return result


def _run_flow(run: "Callable[[], Any]") -> Any:
    """Run a flow; a failure to reach the cluster or load its manifests is one line and exit code 1."""
    from tasks.cluster.errors import ClusterError

    try:
        return run()
    except ClusterError as exc:
        err.print(f"[red]{type(exc).__name__}: {getattr(exc, 'message', None) or exc}[/red]")
        raise typer.Exit(1) from None


@app.command()
def serve() -> None:
    """Serve every deployment of deployments/prefect.yaml with its schedules (Prefect server if PREFECT_API_URL is set)."""
    from prefect import serve as prefect_serve

    from flows.deployments import runner_deployments

    if not os.environ.get("PREFECT_API_URL"):
        err.print("PREFECT_API_URL is not set: serving against an ephemeral Prefect API")
    prefect_serve(*runner_deployments(PREFECT_YAML))


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
