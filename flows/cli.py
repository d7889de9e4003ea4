"""The ``modelplane`` command line: run flows locally, print CRDs, validate manifests, serve deployments."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import re
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flows.exitcodes import (
    CannotRun,
    ExitCode,
    OneLineErrorGroup,
    cli_errors,
    degraded_summary,
    exit_code,
    one_line,
    quiet_expected_failures,
)
from flows.image import IMAGE

# Local runs start an ephemeral Prefect API on the shared ~/.prefect database; its telemetry write is the
# one statement that contends with another local Prefect process, and it reports nothing we need.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect's 20 s default for starting that ephemeral API is too short on a busy CI runner.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    cls=OneLineErrorGroup,
    help="Modelplane: a control plane for serving LLMs on Kubernetes.",
)
# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns and cut names; use a wide page.
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)

REPO = pathlib.Path(__file__).resolve().parents[1]
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"
_CLUSTER_HELP = (
    "A manifests directory or file, 'kubeconfig:PATH' or 'kubeconfig:PATH#CONTEXT'; absent or empty: $MODELPLANE_CLUSTER, "
    "else the current kubeconfig or in-cluster config (never the working directory)."
)


@app.command()
def crds(write: pathlib.Path | None = typer.Option(None, help="Write one file per kind into this directory.")) -> None:
    """Print the CustomResourceDefinitions generated from the API models."""
    from engine.api.crds import render_crds

    _write_or_print(render_crds(), write, "---\n", lambda rendered: f"{len(rendered)} CRDs")


def _write_or_print(
    rendered: dict[str, str], write: pathlib.Path | None, separator: str, what: Callable[[dict[str, str]], str]
) -> None:
    """Generated files: one file each into ``write``, or all on stdout joined by ``separator``, in name order."""
    if write is not None:
        write.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            (write / name).write_text(text)
        err.print(f"wrote {what(rendered)} to {write}")
        return
    sys.stdout.write(separator.join(rendered[name] for name in sorted(rendered)))


@app.command()
def image(
    build: bool = typer.Option(
        False, "--build", help="Build it: docker build -f deployments/Dockerfile -t REFERENCE ."
    ),
    push: bool = typer.Option(False, "--push", help="Build and push it (docker push REFERENCE)."),
    tag: str | None = typer.Option(None, "--tag", help="Another tag than the package version (a test build)."),
) -> None:
    """Print Modelplane's image reference (its tag is the package version: flows/image.py); with --build or
    --push, run the docker commands from the repository root, each printed first."""
    import subprocess

    from flows.image import build_commands
    from flows.image import image as image_reference

    reference = image_reference(tag)
    if not (build or push):
        sys.stdout.write(reference + "\n")
        return
    for command in build_commands(reference, push=push):
        err.print("$ " + " ".join(command))
        try:
            done = subprocess.run(command, cwd=REPO, check=False)
        except FileNotFoundError:
            sys.stderr.write(
                f"error: {command[0]} is not installed: build the image with it, or run the command above elsewhere\n"
            )
            raise typer.Exit(ExitCode.CANNOT_RUN) from None
        if done.returncode != 0:
            sys.stderr.write(f"error: {' '.join(command[:2])} failed with exit code {done.returncode}\n")
            raise typer.Exit(ExitCode.CANNOT_RUN)
    sys.stdout.write(reference + "\n")


@app.command("worker-manifests")
def worker_manifests(
    write: pathlib.Path | None = typer.Option(None, help="Write the files into this directory (deployments/worker)."),
) -> None:
    """Print the Prefect Kubernetes worker's install: worker.yaml (ServiceAccount, Role, Deployment) and values for
    Prefect's prefect-worker Helm chart, both with Modelplane's image of this version."""
    from flows.worker_manifests import render_worker_manifests

    _write_or_print(render_worker_manifests(), write, "\n", lambda rendered: ", ".join(sorted(rendered)))


@app.command()
def validate(
    cluster_option: str = typer.Option(
        ..., "--cluster", help="Manifests directory or multi-document file (not empty)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON list (source, kind, namespace, name, result) instead of a table."
    ),
) -> None:
    """Load and validate a manifests directory; print every resource and every invalid one with its reason.

    Exit codes (flows/exitcodes.py): 0 all valid, 2 the path does not exist, 3 some resources are invalid.
    """
    from engine.api.validate import load_documents
    from tasks.manifests import read_manifest_documents

    with cli_errors():
        cluster = manifests_path(cluster_option)
        if not cluster.exists():
            raise CannotRun(f"cluster path {cluster} does not exist")
        documents, read_errors = read_manifest_documents(cluster)
    report = load_documents(documents)
    base = f"{cluster}/" if cluster.is_dir() else ""

    def short(source: str) -> str:
        return source.removeprefix(base)

    rows: list[tuple[str, str, str, str, str, bool]] = []  # source, kind, namespace, name, result, valid
    for source, obj in report.valid:
        meta = _meta_of(obj)
        rows.append((short(source), _kind_of(obj), meta.get("namespace") or "", meta.get("name") or "", "valid", True))
    for source, error in report.invalid:
        rows.append(
            (
                short(source),
                error.kind or "",
                error.namespace or "",
                error.name or "",
                f"{error.field_path}: {error.message}",
                False,
            )
        )
    for source, message in read_errors:
        rows.append((short(source), "", "", "", message.removeprefix(base), False))
    invalid = [
        f"{source}: " + (f"{kind} {namespace + '/' if namespace else ''}{name}: " if kind else "") + result
        for source, kind, namespace, name, result, ok in rows
        if not ok
    ]
    if as_json:
        columns = ("source", "kind", "namespace", "name", "result")
        sys.stdout.write(json.dumps([dict(zip(columns, row[:5])) for row in rows], indent=2) + "\n")
        exit_with_outcome(invalid, flow_ran=False)  # validation reads no cluster: no boundary rejections are its own
    table = Table(title=f"Resources in {cluster}")
    for column in ("source", "kind", "namespace", "name", "result"):
        table.add_column(column)
    for source, kind, namespace, name, result, ok in rows:
        table.add_row(source, kind, namespace, name, "[green]valid[/green]" if ok else f"[red]{escape(result)}[/red]")
    console.print(table)
    console.print(f"{len(report.valid)} valid, {len(invalid)} invalid")
    raise typer.Exit(exit_code(invalid))


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
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    metrics: pathlib.Path | None = typer.Option(
        None, "--metrics", exists=True, dir_okay=False, help="Metrics YAML file (instead of Prometheus)."
    ),
    prometheus: str | None = typer.Option(None, "--prometheus", help="Prometheus base URL (default $PROMETHEUS_URL)."),
    rate_window: str | None = typer.Option(
        None,
        "--rate-window",
        help="PromQL window of the arrival-rate query, e.g. 1m or 30s (default $PROMETHEUS_RATE_WINDOW, else 1m).",
    ),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    namespace_selector: str | None = typer.Option(
        None, "--namespace-selector", "-l", help="Label selector on Namespaces."
    ),
    config_namespace: str = typer.Option("modelplane-system", help="Namespace of the WVA ConfigMaps."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Decide and print, write nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
    pushgateway: str | None = typer.Option(
        None,
        "--pushgateway",
        help="Prometheus Pushgateway URL to publish wva_desired_replicas and Modelplane's metrics to "
        "(default $MODELPLANE_PUSHGATEWAY_URL; unset = off).",
    ),
) -> None:
    """Run one optimization cycle and print the allocation table (writes status back unless --dry-run).

    Exit codes (flows/exitcodes.py): 0 clean; 2 could not run (cluster path missing, no Kubernetes access,
    configuration ConfigMap missing, a parameter rejected), with one line on stderr; 3 ran degraded
    (metrics missing, resources invalid or not ready, write errors), as the summary line says.
    """
    from flows.optimize import RATE_WINDOW_PATTERN
    from flows.optimize import optimize as optimize_flow
    from tasks.cluster import connect
    from tasks.optimize.read import cannot_run_reason

    if rate_window is not None and not re.match(RATE_WINDOW_PATTERN, rate_window):
        raise typer.BadParameter(
            f"{rate_window!r} is not a PromQL duration such as 1m or 30s", param_hint="--rate-window"
        )
    with cli_errors():
        problem = cannot_run_reason(connect(cluster), config_namespace)  # before Prefect starts: one clear line
        if problem:
            raise CannotRun(problem)
    report = run_flow_or_exit(
        optimize_flow,
        namespaces=namespace or None,
        namespace_selector=namespace_selector,
        config_namespace=config_namespace,
        prometheus_url=prometheus,
        metrics_file=str(metrics) if metrics else None,
        rate_window=rate_window,
        cluster=cluster,
        dry_run=dry_run,
        pushgateway_url=pushgateway,
    )
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
        exit_with_outcome(report.degraded)
    table = Table(title="Modelplane allocation")
    for column in ("namespace", "name", "model", "accelerator", "current", "desired", "cost", "reason"):
        table.add_column(column, justify="right" if column in ("current", "desired", "cost") else "left")
    for row in report.rows:
        changed = row.desired is not None and row.current is not None and row.desired != row.current
        desired = f"[bold]{row.desired}[/bold]" if changed else str(row.desired if row.desired is not None else "-")
        table.add_row(
            row.namespace,
            row.name,
            row.model,
            row.accelerator,
            str(row.current if row.current is not None else "-"),
            desired,
            row.cost,
            row.reason,
        )
    console.print(table)
    console.print(report.summary)
    if report.metrics_error:
        err.print(f"[yellow]metrics unavailable: {report.metrics_error}[/yellow]")
    exit_with_outcome(report.degraded)


def run_flow_or_exit(flow: Any, _cannot_run: tuple[type[Exception], ...] = (), **parameters: Any) -> Any:
    """Run ``flow`` in-process; when it cannot run (no cluster, bad parameter, missing file, or one of the
    flow's own ``_cannot_run`` errors) print one ``error:`` line and exit CANNOT_RUN instead of a traceback."""
    from prefect.logging.loggers import disable_logger

    def run() -> Any:
        with disable_logger("prefect.flows"):  # the deployment schema's checks, before any run or log line
            flow.validate_parameters(parameters)
        return flow(**parameters)

    return _flow_or_exit(flow.name, run, _cannot_run)


def _flow_or_exit(name: str, run: Callable[[], Any], extra: tuple[type[Exception], ...] = ()) -> Any:
    """``run()``; an error that means the flow could not run is one ``error:`` line and exit 2 (Prefect's own
    log of it keeps its line but loses the traceback); anything else is a bug and keeps its traceback."""
    from prefect.exceptions import ParameterTypeError

    from tasks.cluster.errors import ClusterError

    expected = (ParameterTypeError, CannotRun, ClusterError, OSError, ValueError, *extra)
    drain_rejections()  # this run's rejections only (several commands may run in one process)
    try:
        with quiet_expected_failures(expected):
            return run()
    except (ParameterTypeError, CannotRun, ClusterError, *extra) as exc:
        reason = one_line(exc)
    except (OSError, ValueError) as exc:
        reason = f"{type(exc).__name__}: {one_line(exc)}"
    except RuntimeError as exc:
        if "Prefect API" not in str(exc):  # anything else is a bug: keep its traceback
            raise
        reason = one_line(exc)
    sys.stderr.write(f"error: {name} could not run: {reason}\n")
    raise typer.Exit(ExitCode.CANNOT_RUN)


def drain_rejections() -> list[str]:
    """The objects the boundary reader (tasks/boundary.py) rejected since the last call, one line each."""
    from tasks.boundary import drain_rejections as drain

    return drain()


def exit_with_outcome(problems: list[str], flow_ran: bool = True) -> None:
    """Print a degraded run's problems (and, when ``flow_ran``, every object the boundary reader rejected
    during it) on stderr and exit DEGRADED (3); exit OK (0) otherwise."""
    problems = [*problems, *(drain_rejections() if flow_ran else [])]
    for problem in problems:
        err.print(f"[yellow]degraded: {escape(problem)}[/yellow]", highlight=False, soft_wrap=True)
    raise typer.Exit(int(exit_code(problems)))


def _aim_table(
    title: str,
    columns: tuple[str, ...],
    rows: list[tuple[object, ...]],
    summary: str,
    errors: list[str],
    last: bool = True,
    as_json: bool = False,
) -> None:
    """Print an AIM flow's table and summary (or, ``as_json``, a JSON list of rows); with ``last``, exit 3
    (degraded, one line per error) when writes failed, else 0 (flows/exitcodes.py)."""
    if last:
        errors = [*errors, *drain_rejections()]
    if as_json:
        sys.stdout.write(json.dumps([dict(zip(columns, row)) for row in rows], indent=2, default=str) + "\n")
        for line in errors:
            err.print(f"[yellow]degraded: {escape(line)}[/yellow]", highlight=False, soft_wrap=True)
        if last:
            raise typer.Exit(exit_code(errors))
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(value) for value in row))
    console.print(table)
    console.print(degraded_summary(summary, errors[:3] + ([f"{len(errors) - 3} more"] if len(errors) > 3 else [])))
    if last:
        raise typer.Exit(exit_code(errors))


@app.command("discover-models")
def discover_models_command(
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option(
        [],
        "--namespace",
        "-n",
        help="Create templates in these namespaces (default: every namespace with an AIMNamespaceConfig).",
    ),
    resync: int = typer.Option(86400, "--resync-seconds", help="Read unchanged images again after this many seconds."),
    insecure_registry: list[str] = typer.Option(
        [], "--insecure-registry", help="Registry host spoken to over plain HTTP (repeatable)."
    ),
    registry_mirror: list[str] = typer.Option(
        [], "--registry-mirror", help="HOST=MIRROR or HOST=oci-layout:DIR (repeatable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
) -> None:
    """Read every AIMClusterModel's image labels and create its recommended AIMServiceTemplates."""
    from flows.discover_models import discover_models

    mirrors = _mirrors(registry_mirror)
    report = _run_flow(
        cluster,
        lambda: discover_models(
            namespaces=namespace or None,
            resync_interval_s=resync,
            insecure_registries=insecure_registry or None,
            registry_mirrors=mirrors,
            cluster=cluster,
        ),
    )
    _aim_table(
        "AIM model discovery",
        ("model", "image", "result", "deployments", "templates"),
        [(r.name, r.image, r.result, r.deployments, r.templates) for r in report.rows],
        report.summary,
        report.degraded,
        as_json=as_json,
    )


@app.command("resolve-templates")
def resolve_templates_command(
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
) -> None:
    """Resolve every AIMServiceTemplate to a runtime profile, check GPUs, request caches when warmCache."""
    from flows.resolve_templates import resolve_templates

    report = _run_flow(cluster, lambda: resolve_templates(namespaces=namespace or None, cluster=cluster))
    _aim_table(
        "AIM templates",
        ("namespace", "template", "status", "reason", "message"),
        [(r.namespace, r.name, r.status, r.reason, r.message) for r in report.rows],
        report.summary,
        report.degraded,
        as_json=as_json,
    )


@app.command("rollout-services")
def rollout_services_command(
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
) -> None:
    """Roll out every AIMService as a KServe InferenceService and Gateway HTTPRoute and report its status."""
    from flows.rollout_services import rollout_services

    report = _run_flow(cluster, lambda: rollout_services(namespaces=namespace or None, cluster=cluster))
    _aim_table(
        "AIM services",
        ("namespace", "service", "status", "reason", "workload", "action"),
        [(r.namespace, r.name, r.status, r.reason, r.workload, r.action) for r in report.rows],
        report.summary,
        report.degraded,
        as_json=as_json,
    )


@app.command("aim")
def aim_command(
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option(
        [],
        "--namespace",
        "-n",
        help="Create templates, resolve and roll out in these namespaces only (repeatable; default: all).",
    ),
    resync: int = typer.Option(
        86400, "--resync-seconds", min=60, help="Read unchanged images again after this many seconds (at least 60)."
    ),
    insecure_registry: list[str] = typer.Option(
        [], "--insecure-registry", help="Registry host spoken to over plain HTTP (repeatable)."
    ),
    registry_mirror: list[str] = typer.Option(
        [], "--registry-mirror", help="HOST=MIRROR or HOST=oci-layout:DIR (repeatable)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object (models, templates, services) instead of tables."
    ),
) -> None:
    """The three AIM lifecycles in one process: discover-models, resolve-templates, rollout-services.

    Exit codes (flows/exitcodes.py): 0 clean; 2 could not run (cluster path missing, no Kubernetes access,
    AIM CRDs not installed), with one line on stderr; 3 ran degraded (writes failed), one line per error.
    """
    from flows.discover_models import discover_models
    from flows.resolve_templates import resolve_templates
    from flows.rollout_services import rollout_services

    mirrors = _mirrors(registry_mirror)
    namespaces = namespace or None
    found = _run_flow(
        cluster,
        lambda: discover_models(
            namespaces=namespaces,
            resync_interval_s=resync,
            insecure_registries=insecure_registry or None,
            registry_mirrors=mirrors,
            cluster=cluster,
        ),
    )
    resolved = _run_flow(cluster, lambda: resolve_templates(namespaces=namespaces, cluster=cluster))
    rolled = _run_flow(cluster, lambda: rollout_services(namespaces=namespaces, cluster=cluster))
    errors = found.degraded + resolved.degraded + rolled.degraded
    if as_json:
        sys.stdout.write(
            json.dumps(
                {
                    "models": [
                        {
                            "model": r.name,
                            "image": r.image,
                            "result": r.result,
                            "deployments": r.deployments,
                            "templates": r.templates,
                        }
                        for r in found.rows
                    ],
                    "templates": [
                        {"namespace": r.namespace, "template": r.name, "status": r.status, "reason": r.reason}
                        for r in resolved.rows
                    ],
                    "services": [
                        {
                            "namespace": r.namespace,
                            "service": r.name,
                            "status": r.status,
                            "reason": r.reason,
                            "workload": r.workload,
                            "action": r.action,
                        }
                        for r in rolled.rows
                    ],
                    "summary": {"models": found.summary, "templates": resolved.summary, "services": rolled.summary},
                },
                indent=2,
                default=str,
            )
            + "\n"
        )
        exit_with_outcome(errors)
    _aim_table(
        "AIM model discovery",
        ("model", "image", "result", "deployments", "templates"),
        [(r.name, r.image, r.result, r.deployments, r.templates) for r in found.rows],
        found.summary,
        found.degraded,
        last=False,
    )
    _aim_table(
        "AIM templates",
        ("namespace", "template", "status", "reason"),
        [(r.namespace, r.name, r.status, r.reason) for r in resolved.rows],
        resolved.summary,
        resolved.degraded,
        last=False,
    )
    _aim_table(
        "AIM services",
        ("namespace", "service", "status", "reason", "workload", "action"),
        [(r.namespace, r.name, r.status, r.reason, r.workload, r.action) for r in rolled.rows],
        rolled.summary,
        rolled.degraded,
        last=False,
    )
    rejected = drain_rejections()
    for line in rejected:
        err.print(f"[yellow]degraded: {escape(line)}[/yellow]", highlight=False, soft_wrap=True)
    raise typer.Exit(exit_code(errors + rejected))


def _mirrors(pairs: list[str]) -> dict[str, str]:
    """``HOST=TARGET`` options as a dict; a malformed one is a one-line error."""
    result: dict[str, str] = {}
    for pair in pairs:
        host, sep, target = pair.partition("=")
        if not sep or not host.strip() or not target.strip():
            raise typer.BadParameter(
                f"{pair!r}: expected HOST=MIRROR or HOST=oci-layout:DIR", param_hint="--registry-mirror"
            )
        result[host.strip()] = target.strip()
    return result


def _run_flow(cluster: str | None, run: Callable[[], Any]) -> Any:
    """Run a flow after checking it can run at all: a missing path, no API access or missing AIM CRDs is
    one ``error:`` line and exit 2 before Prefect starts."""
    from tasks.aim import cannot_run_reason
    from tasks.cluster import connect

    with cli_errors():
        problem = cannot_run_reason(connect(cluster))
        if problem:
            raise CannotRun(problem)
    return _flow_or_exit("the flow", run)


@app.command()
def serve() -> None:
    """Serve every deployment of deployments/prefect.yaml from this process, named '<name>-local', with its
    schedules and triggers (on the Prefect server of PREFECT_API_URL, else an ephemeral one)."""
    from prefect import serve as prefect_serve

    from flows.deployments import runner_deployments

    if not os.environ.get("PREFECT_API_URL"):
        err.print("PREFECT_API_URL is not set: serving against an ephemeral Prefect API")
    prefect_serve(*runner_deployments(PREFECT_YAML))


cache_app = typer.Typer(
    no_args_is_help=True, help="Model caches: fill a directory (a mounted PVC) from a model source."
)
app.add_typer(cache_app, name="cache")


@cache_app.command("fill")
def cache_fill(
    source: str = typer.Argument(
        ...,
        help="Model source: hf://org/name@REV?allow=GLOB&ignore=GLOB&filename=F (all optional after the name) or s3://bucket/prefix.",
    ),
    dest: pathlib.Path = typer.Argument(..., help="Cache directory (the PVC mount); the model files land at its root."),
    capacity: str | None = typer.Option(
        None, "--capacity", help="Volume size (e.g. 11Gi) when the filesystem does not report it (shared filesystems)."
    ),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=64, help="Parallel transfers (files or S3 parts)."),
    part_size_mib: int = typer.Option(16, "--part-size-mib", min=5, help="S3 ranged part size in MiB."),
    lock_timeout: float | None = typer.Option(
        None, "--lock-timeout", help="Seconds to wait for another filler of the same cache (default: wait)."
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
    Exits 1 with one line naming the reason when the fill fails, 2 when SOURCE is not a valid source.
    """
    from engine.caches.sources import parse_source
    from engine.units import parse_quantity
    from tasks.downloader import DownloadError, fill_cache

    try:
        parsed = parse_source(source)
        capacity_bytes = int(parse_quantity(capacity)) if capacity else None
    except ValueError as exc:
        sys.stderr.write(f"cache fill: invalid argument: {exc}\n")
        raise typer.Exit(2) from None
    reporter = _CacheFillProgress(parsed.uri)
    try:
        with reporter:
            manifest = fill_cache(
                parsed,
                dest,
                progress=reporter.update,
                capacity_bytes=capacity_bytes,
                concurrency=concurrency,
                part_size=part_size_mib * 1024 * 1024,
                lock_timeout=lock_timeout,
                on_wait=lambda holder: sys.stderr.write(f"waiting for another filler of {dest} ({holder})\n"),
            )
    except DownloadError as exc:
        sys.stderr.write(f"cache fill failed ({exc.reason}): {exc.message}\n")
        _write_fill_report(termination_log, reason=exc.reason, message=exc.message)
        raise typer.Exit(1) from None
    except OSError as exc:
        message = f"{exc.strerror or exc} ({exc.filename or dest})"
        sys.stderr.write(f"cache fill failed (FilesystemError): {message}\n")
        _write_fill_report(termination_log, reason="FilesystemError", message=message)
        raise typer.Exit(1) from None
    _write_fill_report(termination_log, manifest.to_json())
    if as_json:
        sys.stdout.write(json.dumps(manifest.to_json(), indent=2) + "\n")
        return
    fetched = manifest.stats.get("bytesFetched", 0)
    console.print(
        f"cache {dest} complete: {len(manifest.files)} files, {manifest.total_bytes} bytes "
        f"({fetched} fetched now) from {manifest.source}" + (f" at {manifest.revision}" if manifest.revision else ""),
        markup=False,
        highlight=False,
    )


def _write_fill_report(path: pathlib.Path | None, marker: dict | None = None, **failure: str) -> None:
    """The fill's verdict for the warm-caches flow (read back from the Job pod's termination message)."""
    if path is None:
        return
    from engine.caches.plan import fill_report

    try:
        path.write_text(fill_report(marker, **failure))
    except OSError as exc:
        sys.stderr.write(f"cache fill: cannot write the termination log {path}: {exc.strerror or exc}\n")


class _CacheFillProgress:
    """A rich progress bar on a terminal; one log line every 10 s otherwise (Job logs)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.interactive = err.is_terminal
        self._last_line = 0.0
        self._bar = None
        self._task = None

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
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=err,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=None)
        return self

    def update(self, snapshot) -> None:  # type: ignore[no-untyped-def]
        if self._bar is not None:
            self._bar.update(self._task, completed=snapshot.bytes_done, total=snapshot.bytes_total or None)
            return
        import time

        now = time.monotonic()
        if now - self._last_line >= 10 or snapshot.phase != "downloading":
            self._last_line = now
            sys.stderr.write(f"{self.label}: {snapshot.describe()}\n")
            sys.stderr.flush()

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


@app.command("rollout-models")
def rollout_models_command(
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    downloader_image: str = typer.Option(IMAGE, help="Image of the init container that downloads into a cacheURI."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
    name: list[str] = typer.Option([], "--name", help="Only the Models with these names (repeatable)."),
    kthena_networking: str = typer.Option(
        "auto",
        "--kthena-networking",
        help="auto: render Kthena's ModelServer/ModelRoute and runtime sidecar when the cluster serves networking.serving.volcano.sh; off: never.",
    ),
    workload: str = typer.Option(
        "Deployment",
        "--workload",
        help="Deployment, or ModelServing (Kthena's gang-scheduled workload, where its CRD is served).",
    ),
) -> None:
    """Roll out every Kthena Model once and print what changed.

    Exit codes (flows/exitcodes.py): 0 every Model rolled out; 2 could not run (cluster path missing, no
    Kubernetes access, the Kthena CRDs not installed, a parameter rejected), with one line on stderr;
    3 degraded: a Model is Failed, as its row says.
    """
    from engine.api.kthena import API_VERSION as KTHENA_API_VERSION
    from flows.rollout_models import rollout_models

    with cli_errors():
        require_cluster(cluster, KTHENA_API_VERSION, "Model")
    report = run_flow_or_exit(
        rollout_models,
        namespaces=namespace or None,
        names=name or None,
        cluster=cluster,
        downloader_image=downloader_image,
        kthena_networking=kthena_networking,
        workload=workload,
    )
    failed = report.degraded
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(m) for m in report.models], indent=2, default=str) + "\n")
        exit_with_outcome(failed)
    table = Table(title="Kthena Models")
    for column in ("namespace", "model", "result", "changes"):
        table.add_column(column)
    for m in report.models:
        changes = [f"+{c}" for c in m.created] + [f"~{u}" for u in m.updated] + [f"-{d}" for d in m.deleted] + m.lora
        table.add_row(m.namespace, m.name, m.result, "\n".join(changes) or "-")
    console.print(table)
    console.print(report.summary)
    exit_with_outcome(failed)


@app.command("serve-openmodel")
def serve_openmodel_command(
    model: str = typer.Argument(..., help="Name of the OpenModel."),
    namespace: str = typer.Option(..., "--namespace", "-n", help="Namespace to serve it in."),
    replicas: int = typer.Option(1, "--replicas", min=0, help="vLLM replicas."),
    flavor: str | None = typer.Option(None, "--flavor", help="Flavor to start from (default: the first)."),
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object instead of a table."),
) -> None:
    """Serve an llmaz OpenModel with vLLM from its shared cache, placed by its flavors.

    Exit codes (flows/exitcodes.py): 0 Serving; 2 could not run (cluster path missing, no Kubernetes access,
    the OpenModel or namespace missing, no flavor fits), with one line on stderr; 3 not Serving (yet), as
    the state line says.
    """
    from engine.api.llmaz import API_VERSION as LLMAZ_API_VERSION
    from flows.serve_openmodel import ServeError, serve_openmodel

    with cli_errors():
        require_cluster(cluster, LLMAZ_API_VERSION, "OpenModel")
    report = run_flow_or_exit(
        serve_openmodel,
        model=model,
        namespace=namespace,
        replicas=replicas,
        flavor=flavor,
        cluster=cluster,
        _cannot_run=(ServeError,),
    )
    problems = report.degraded
    if as_json:
        sys.stdout.write(json.dumps(dataclasses.asdict(report), indent=2, default=str) + "\n")
        exit_with_outcome(problems)
    changes = ", ".join(report.writes.created + report.writes.updated) or "nothing changed"
    console.print(f"{report.model} in {report.namespace}: {report.state} - {report.message} ({changes})")
    exit_with_outcome(problems)


@app.command("warm-caches")
def warm_caches(
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    image: str | None = typer.Option(None, "--image", help="Modelplane's image for the fill Jobs."),
    openmodel_namespace: str | None = typer.Option(
        None, "--openmodel-namespace", help="Cache llmaz OpenModels in this namespace."
    ),
    no_consumers: bool = typer.Option(
        False, "--no-consumers", help="Only fill existing ModelCaches; create none for consumers."
    ),
    gc_unused_after: str | None = typer.Option(
        None, "--gc-unused-after", help="Delete caches unused this long and unmounted, e.g. 7d, 12h."
    ),
    max_fill_attempts: int = typer.Option(
        4, "--max-fill-attempts", min=1, help="Fills per cache generation before it stays Failed."
    ),
    retry_backoff_s: float = typer.Option(
        300.0, "--retry-backoff-s", min=0, help="Wait after the first failed fill (doubles)."
    ),
    timeout_s: float = typer.Option(
        86400.0, "--timeout-s", min=1, help="Stop the run after this long (local fills run in-process)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Run one warm-caches pass: create PVCs, fill every ModelCache (Jobs in a cluster, in-process locally), report.

    Exit codes (flows/exitcodes.py): 0 every cache reconciled; 2 could not run (cluster path missing, no
    Kubernetes access, a bad argument), with one line on stderr; 3 ran degraded (a cache Failed, a consumer's
    source invalid, an API error on one cache), as the summary says.
    """
    from flows.warm_caches import DEFAULT_IMAGE
    from flows.warm_caches import warm_caches as warm_caches_flow

    try:
        unused_after = _duration(gc_unused_after) if gc_unused_after else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--gc-unused-after") from None
    with cli_errors():
        require_local_path(cluster)
    report = run_flow_or_exit(
        warm_caches_flow.with_options(timeout_seconds=timeout_s),
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
            console.print(line, markup=False, highlight=False)
        console.print(report.summary)
    exit_with_outcome(report.degraded)


def _duration(text: str) -> datetime.timedelta:
    """``7d``, ``12h``, ``30m``, ``90s`` (or a Go duration such as ``1h30m``) as a timedelta."""

    from engine.api.meta import parse_duration

    text = text.strip()
    if text.endswith("d") and text[:-1].replace(".", "", 1).isdigit():
        return datetime.timedelta(days=float(text[:-1]))
    return datetime.timedelta(seconds=parse_duration(text))


@app.command()
def simulate(
    cluster_option: str = typer.Option(
        ..., "--cluster", help="Manifests directory/file: VariantAutoscalings, targets, WVA ConfigMaps (not empty)."
    ),
    trace: pathlib.Path = typer.Option(
        ..., "--trace", help="Trace CSV (timestamp, prompt tokens, output tokens; Azure format as is)."
    ),
    policy: list[str] = typer.Option(
        [], "--policy", "-p", help="Policy to compare (repeatable); default: all, the oracle included."
    ),
    compression: float = typer.Option(1.0, help="Divide inter-arrival times by this (time compression)."),
    rate_scale: float = typer.Option(1.0, "--rate-scale", help="Multiply the number of requests."),
    start: float = typer.Option(0.0, help="Slice start, seconds after the first request."),
    duration: float | None = typer.Option(None, help="Slice length in seconds (before compression)."),
    share: list[str] = typer.Option(
        [], "--share", help="MODEL=WEIGHT share of a model ('namespace/modelID') in the trace (repeatable)."
    ),
    interval: float = typer.Option(60.0, help="Control interval in simulated seconds."),
    startup_delay: float = typer.Option(120.0, "--startup-delay", help="Seconds a new replica takes to become ready."),
    sizing_ttft_scale: float = typer.Option(
        1.0,
        "--sizing-ttft-scale",
        help="Policies size for the TTFT targets x this; attainment is judged against the targets.",
    ),
    hpa_metric: str | None = typer.Option(
        None,
        "--hpa-metric",
        help="Per-replica metric of the HPA-style policy (default: the cluster's AutoscalingPolicy).",
    ),
    hpa_target: float | None = typer.Option(None, "--hpa-target", help="Target per replica of --hpa-metric."),
    router: str = typer.Option(
        "auto",
        "--router",
        help="Gateway router: least-outstanding, least-load (llm-d/Kthena: queue + KV), "
        "least-latency (predicted TTFT/ITL vs SLO); auto = what the cluster says (docs/simulate.md).",
    ),
    frontier: bool = typer.Option(
        True,
        "--frontier/--no-frontier",
        help="Also sweep each policy's knob and the oracle: "
        "cost-attainment frontier, attainment ceiling, cost / oracle.",
    ),
    seed: int = typer.Option(0, help="Seed of every random draw."),
    output: pathlib.Path = typer.Option(pathlib.Path("simulation-report"), "--output", "-o", help="Report directory."),
    config_namespace: str = typer.Option("modelplane-system", help="Namespace of the WVA ConfigMaps."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON summary instead of a table."),
) -> None:
    """Replay a trace against a cluster description and compare autoscaling policies (table, JSON, HTML report).

    Exit codes (flows/exitcodes.py): 0 done; 2 could not run (missing cluster or trace, malformed trace,
    unknown policy, a VariantAutoscaling that cannot be simulated), with one line on stderr.
    """
    import csv

    from engine.optimize.spec import SpecError
    from engine.simulate.policies import POLICIES
    from engine.simulate.records import ROUTERS
    from engine.simulate.scenario import ROUTER_AUTO
    from engine.simulate.trace import TraceError, parse_trace_rows
    from flows.simulate import simulate as simulate_flow
    from tasks.simulate import summary_table

    with cli_errors():
        # Check what can be checked before a flow run starts: bad input gives one line, not a failed run's log.
        shares: dict[str, float] = {}
        for item in share:
            model, _, weight = item.rpartition("=")
            try:
                shares[model] = float(weight)
            except ValueError:
                raise CannotRun(f"--share {item!r}: expected MODEL=WEIGHT with a number") from None
        cluster = manifests_path(cluster_option)
        if not cluster.exists():
            raise CannotRun(f"cluster description {cluster} does not exist")
        unknown = [p for p in policy if p not in POLICIES]
        if unknown:
            raise CannotRun(f"unknown policy {', '.join(unknown)}; choose from {', '.join(POLICIES)}")
        if router != ROUTER_AUTO and router not in ROUTERS:
            raise CannotRun(f"unknown router {router!r}; choose from {ROUTER_AUTO}, {', '.join(ROUTERS)}")
        if not trace.is_file():
            raise CannotRun(f"trace file {trace} does not exist")
        try:
            with trace.open(newline="") as handle:
                parse_trace_rows(csv.reader(handle))
        except (TraceError, UnicodeDecodeError) as exc:
            raise CannotRun(f"{trace}: {exc}") from None
        drain_rejections()
        try:
            report = simulate_flow(
                cluster=str(cluster),
                trace=str(trace),
                config_namespace=config_namespace,
                policies=policy or None,
                compression=compression,
                rate_scale=rate_scale,
                start_s=start,
                duration_s=duration,
                model_shares=shares or None,
                interval_s=interval,
                startup_delay_s=startup_delay,
                sizing_ttft_scale=sizing_ttft_scale,
                hpa_metric=hpa_metric,
                hpa_target=hpa_target,
                router=router,
                frontier=frontier,
                seed=seed,
                output_dir=str(output),
            )
        except (TraceError, SpecError, ValueError) as exc:
            raise CannotRun(str(exc)) from None
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
        exit_with_outcome([])
    rows = summary_table(report.outcomes, report.limits)
    ceiling = f", attainment ceiling {report.limits.ceiling['all']:.1%}" if report.limits is not None else ""
    table = Table(title=f"Policies replayed on {trace.name} ({report.settings['requests']} requests{ceiling})")
    for column in rows[0]:
        table.add_column(column, justify="left" if column == "policy" else "right")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    console.print(table)
    console.print(f"report: {report.files['html']}  summary: {report.files['json']}")
    exit_with_outcome([])  # 3 when the boundary reader left invalid VariantAutoscalings out


@app.command()
def calibrate(
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    prometheus: str | None = typer.Option(None, "--prometheus", help="Prometheus base URL (default $PROMETHEUS_URL)."),
    windows: pathlib.Path | None = typer.Option(None, "--windows", help="Windows YAML file (instead of Prometheus)."),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Limit to these namespaces (repeatable)."),
    lookback: str = typer.Option("24h", help="How far back to read metrics (a day: gamma needs hours of varied load)."),
    window: str = typer.Option("5m", help="Length of one metrics window."),
    config_namespace: str = typer.Option("modelplane-system", help="Namespace of the WVA ConfigMaps."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Fit and print, write nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
) -> None:
    """Fit performance profiles (alpha, beta, gamma, delta) from vLLM metrics; write them only where opted in.

    Exit codes (flows/exitcodes.py): 0 every variant got a profile; 2 could not run (bad windows file, no
    Kubernetes access), with one line on stderr; 3 degraded: some variants got no profile (no metrics, data
    that cannot determine it) or could not be written, as their rows say.
    """
    from engine.api.registry import LLMD_API
    from flows.calibrate import calibrate as calibrate_flow
    from tasks.calibrate import WindowsFileError, read_windows_file

    with cli_errors():
        if windows is not None:
            try:
                read_windows_file(windows)  # before Prefect starts: a bad file is one line
            except WindowsFileError as exc:
                raise CannotRun(str(exc)) from None
        require_cluster(cluster, LLMD_API, "VariantAutoscaling")
        drain_rejections()
        report = calibrate_flow(
            namespaces=namespace or None,
            config_namespace=config_namespace,
            cluster=cluster,
            prometheus_url=prometheus,
            windows_file=str(windows) if windows else None,
            lookback=lookback,
            window=window,
            dry_run=dry_run,
        )
    degraded = report.degraded
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2, default=str) + "\n")
        exit_with_outcome(degraded)
    table = Table(title="Calibrated performance profiles")
    for column in ("namespace", "name", "result", "alpha", "beta", "gamma", "delta", "written"):
        table.add_column(column)
    for row in report.rows:
        values = [
            f"{row.fit[n]['value']:.4g}" + ("*" if row.fit[n]["fixed"] else "") if row.fit else "-"
            for n in ("alpha", "beta", "gamma", "delta")
        ]
        table.add_row(row.namespace, row.name, row.reason, *values, "yes" if row.spec_written else "no")
    console.print(table)
    for row in report.rows:
        console.print(f"{row.namespace}/{row.name}: {row.message}", highlight=False)
    exit_with_outcome(degraded)


@app.command()
def deploy(
    pool_type: str = typer.Option(
        "kubernetes",
        "--pool-type",
        help="'kubernetes' (deployments/work-pool-template.json) or 'process' (a local worker).",
    ),
    pool: str | None = typer.Option(
        None, "--pool", help="Work pool name (default modelplane-kubernetes / modelplane-process)."
    ),
) -> None:
    """Create the work pool if missing, then register every deployment of deployments/prefect.yaml on the
    Prefect server of PREFECT_API_URL (runs 'prefect --no-prompt deploy --all --prefect-file deployments/prefect.yaml')."""
    import asyncio

    from prefect.client.orchestration import get_client

    from flows.deployments import KUBERNETES_POOL, PROCESS_POOL, ensure_work_pool, run_deploy

    if pool_type not in ("kubernetes", "process"):
        sys.stderr.write(f"error: --pool-type must be 'kubernetes' or 'process', not {pool_type!r}\n")
        raise typer.Exit(ExitCode.CANNOT_RUN)
    if not os.environ.get("PREFECT_API_URL"):
        sys.stderr.write(
            "error: PREFECT_API_URL is not set: point it at the Prefect server to deploy to (e.g. http://127.0.0.1:4200/api)\n"
        )
        raise typer.Exit(ExitCode.CANNOT_RUN)
    name = pool or (KUBERNETES_POOL if pool_type == "kubernetes" else PROCESS_POOL)

    async def create_pool() -> bool:
        async with get_client() as client:
            return await ensure_work_pool(client, name, pool_type)

    try:
        created = asyncio.run(create_pool())
    except Exception as exc:  # the server is unreachable or refuses the pool: one line, no traceback
        sys.stderr.write(f"error: work pool {name!r}: {type(exc).__name__}: {one_line(exc)}\n")
        raise typer.Exit(ExitCode.CANNOT_RUN) from None
    err.print(f"work pool {name!r} ({pool_type}): {'created' if created else 'exists'}")
    result = run_deploy(pool=None if name == KUBERNETES_POOL else name, pool_type=pool_type)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        sys.stderr.write(f"error: prefect deploy failed with exit code {result.returncode} (its output above)\n")
        raise typer.Exit(ExitCode.CANNOT_RUN)
    err.print(
        f"registered the deployments of deployments/prefect.yaml on {name!r}; start a worker: prefect worker start --pool {name}"
        + (" --type kubernetes" if pool_type == "kubernetes" else "")
    )


def require_local_path(cluster: str | None) -> Any:
    """The cluster ``cluster`` names (``tasks.cluster.connect``: absent or empty = $MODELPLANE_CLUSTER, else
    kubeconfig); :class:`CannotRun` when it is a local path that does not exist or cannot be read."""
    from tasks.cluster import connect
    from tasks.optimize.read import local_path_problem

    target = connect(cluster)
    problem = local_path_problem(target)
    if problem:
        raise CannotRun(problem)
    return target


def manifests_path(cluster: str, option: str = "--cluster") -> pathlib.Path:
    """A command that reads manifest files only (validate, simulate): ``cluster`` must name them; an empty
    value is a one-line error, never the working directory."""
    if not cluster.strip():
        raise CannotRun(f"{option} is empty: name a manifests directory or file")
    return pathlib.Path(cluster.strip())


def require_cluster(cluster: str | None, api_version: str, kind: str) -> None:
    """Raise :class:`CannotRun` when a flow cannot run on ``cluster`` at all: a local path that does not exist,
    or no way to read ``kind`` (no API access, forbidden, the CRD not installed). Checked before Prefect
    starts, so the command (inside ``cli_errors``) prints one ``error:`` line and exits 2 instead of a failed
    run's traceback."""
    from tasks.cluster import ClusterError

    target = require_local_path(cluster)
    try:
        target.list(api_version, kind)
    except ClusterError as exc:
        raise CannotRun(f"cannot read {kind}s: {exc.message}") from None


@app.command("watch-models")
def watch_models_command(
    cluster: str | None = typer.Option(None, "--cluster", help=_CLUSTER_HELP),
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Watch these namespaces only (repeatable)."),
    watch_seconds: float = typer.Option(45.0, "--watch-seconds", help="How long the watch stays open (0 < s <= 50)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object instead of a table."),
) -> None:
    """Watch the Kthena Models for WATCH_SECONDS and emit modelplane.kthena.model.changed for each Model whose
    spec rollout-models has not rolled out yet (the event triggers its rollout).

    Exit codes (flows/exitcodes.py): 0 the watch ran (changes or none); 2 could not run (cluster path missing,
    no Kubernetes access, the Kthena Model CRD not installed, a parameter rejected), with one line on stderr.
    """
    from engine.api.kthena import API_VERSION
    from flows.watch_models import watch_models

    with cli_errors():
        require_cluster(cluster, API_VERSION, "Model")
    report = run_flow_or_exit(watch_models, namespaces=namespace or None, watch_seconds=watch_seconds, cluster=cluster)
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
        exit_with_outcome([])
    table = Table(title="Kthena Model changes announced")
    for column in ("namespace", "model", "generation", "rolled out", "seen as"):
        table.add_column(column)
    for row in report.changes:
        observed = "never" if row.observed_generation is None else str(row.observed_generation)
        table.add_row(row.namespace, row.name, str(row.generation), observed, row.seen_as)
    console.print(table)
    console.print(report.summary)
    exit_with_outcome([])


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
