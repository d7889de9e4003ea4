"""The ``modelplane`` command line: run flows locally, print CRDs, validate manifests, serve deployments."""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# Local runs start an ephemeral Prefect API on the shared ~/.prefect database; its telemetry write is the
# one statement that contends with another local Prefect process, and it reports nothing we need.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect's 20 s default for starting that ephemeral API is too short on a busy CI runner.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

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
    """Run one optimization cycle and print the allocation table (writes status back unless --dry-run).

    Exit codes: 0 clean, 2 could not run, 3 ran degraded (see flows/exitcodes.py)."""
    from flows.optimize import optimize as optimize_flow

    report = run_flow_or_exit(
        optimize_flow,
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
        exit_with_outcome(report.problems)
    table = Table(title="Modelplane allocation")
    for column in ("namespace", "name", "model", "accelerator", "current", "desired", "cost", "reason"):
        table.add_column(column, justify="right" if column in ("current", "desired", "cost") else "left")
    for row in report.rows:
        changed = row.desired is not None and row.current is not None and row.desired != row.current
        desired = f"[bold]{row.desired}[/bold]" if changed else str(row.desired if row.desired is not None else "-")
        table.add_row(row.namespace, row.name, row.model, row.accelerator, str(row.current if row.current is not None else "-"), desired, row.cost, row.reason)
    console.print(table)
    console.print(report.summary)
    exit_with_outcome(report.problems)


def run_flow_or_exit(flow: Any, **parameters: Any) -> Any:
    """Run ``flow`` in-process; when it cannot run (no cluster, bad parameter, missing file) print one line
    and exit COULD_NOT_RUN instead of a traceback."""
    from prefect.exceptions import ParameterTypeError
    from prefect.logging.loggers import disable_logger

    from flows.exitcodes import ExitCode
    from tasks.cluster.errors import ClusterError

    try:
        with disable_logger("prefect.flows"):  # the deployment schema's checks, before any run or log line
            flow.validate_parameters(parameters)
        return flow(**parameters)
    except ParameterTypeError as exc:
        reason = " ".join(str(exc).split())
    except ClusterError as exc:
        reason = f"cluster: {exc}"
    except (OSError, ValueError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    except RuntimeError as exc:
        if "Prefect API" not in str(exc):  # anything else is a bug: keep its traceback
            raise
        reason = str(exc)
    err.print(f"[red]{flow.name} could not run: {escape(reason)}[/red]", highlight=False, soft_wrap=True)
    raise typer.Exit(ExitCode.COULD_NOT_RUN)


def exit_with_outcome(problems: list[str]) -> None:
    """Print a degraded cycle's problems on stderr and exit DEGRADED; exit CLEAN otherwise."""
    from flows.exitcodes import outcome_code

    for problem in problems:
        err.print(f"[yellow]degraded: {escape(problem)}[/yellow]", highlight=False, soft_wrap=True)
    raise typer.Exit(int(outcome_code(problems)))


@app.command()
def serve() -> None:
    """Serve every deployment of deployments/prefect.yaml from this process, named '<name>-local', with its
    schedules and triggers (on the Prefect server of PREFECT_API_URL, else an ephemeral one)."""
    from prefect import serve as prefect_serve

    from flows.deployments import runner_deployments

    if not os.environ.get("PREFECT_API_URL"):
        err.print("PREFECT_API_URL is not set: serving against an ephemeral Prefect API")
    prefect_serve(*runner_deployments(PREFECT_YAML))


@app.command()
def deploy(
    pool_type: str = typer.Option("kubernetes", "--pool-type", help="'kubernetes' (deployments/work-pool-template.json) or 'process' (a local worker)."),
    pool: Optional[str] = typer.Option(None, "--pool", help="Work pool name (default modelplane-kubernetes / modelplane-process)."),
) -> None:
    """Create the work pool if missing, then register every deployment of deployments/prefect.yaml on the
    Prefect server of PREFECT_API_URL (runs 'prefect --no-prompt deploy --all --prefect-file deployments/prefect.yaml')."""
    import asyncio

    from prefect.client.orchestration import get_client

    from flows.deployments import KUBERNETES_POOL, PROCESS_POOL, ensure_work_pool, run_deploy
    from flows.exitcodes import ExitCode

    if pool_type not in ("kubernetes", "process"):
        err.print(f"[red]--pool-type must be 'kubernetes' or 'process', not {pool_type!r}[/red]")
        raise typer.Exit(ExitCode.COULD_NOT_RUN)
    if not os.environ.get("PREFECT_API_URL"):
        err.print("[red]PREFECT_API_URL is not set: point it at the Prefect server to deploy to (e.g. http://127.0.0.1:4200/api)[/red]")
        raise typer.Exit(ExitCode.COULD_NOT_RUN)
    name = pool or (KUBERNETES_POOL if pool_type == "kubernetes" else PROCESS_POOL)

    async def create_pool() -> bool:
        async with get_client() as client:
            return await ensure_work_pool(client, name, pool_type)

    try:
        created = asyncio.run(create_pool())
    except Exception as exc:  # the server is unreachable or refuses the pool: one line, no traceback
        err.print(f"[red]work pool {name!r}: {type(exc).__name__}: {exc}[/red]", highlight=False)
        raise typer.Exit(ExitCode.COULD_NOT_RUN)
    err.print(f"work pool {name!r} ({pool_type}): {'created' if created else 'exists'}")
    result = run_deploy(pool=None if name == KUBERNETES_POOL else name)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        err.print(f"[red]prefect deploy failed with exit code {result.returncode}[/red]")
        raise typer.Exit(ExitCode.COULD_NOT_RUN)
    err.print(f"registered the deployments of deployments/prefect.yaml on {name!r}; start a worker: prefect worker start --pool {name}")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
