"""The AIM lifecycles as commands: ``discover-models``, ``resolve-templates``, ``rollout-services``, and
``reconcile-aim`` running all three in one process (what ``./dev.sh demo`` runs). Every one is pre-checked the
same way: the AIM CRDs must be readable on the cluster before Prefect starts."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from flows.cli.common import (
    Check,
    cluster_option,
    command,
    console,
    drain_rejections,
    exit_with_outcome,
    json_option,
    namespaces_option,
    run_flow,
    table_of,
    track_option,
    warn_degraded,
)
from flows.cli.options import duration_option
from flows.exitcodes import degraded_summary, exit_code
from flows.parameters import DISCOVERY_RESYNC_S

MODEL_COLUMNS = ("model", "image", "result", "deployments", "templates")
SERVICE_COLUMNS = ("namespace", "service", "status", "reason", "workload", "action")


def aim_check() -> Check:
    """The AIM flows' pre-check: the cluster serves AIMClusterModels (API access, the AIM CRDs installed).

    Returns:
        The check: None when AIMClusterModels can be listed, else why not.
    """
    from engine.api.aim import API_VERSION
    from engine.api.registry import AIM_CLUSTER_MODEL
    from flows.cli.common import needs

    return needs(API_VERSION, AIM_CLUSTER_MODEL)


def _print_aim(
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
        warn_degraded(errors)
        if last:
            raise typer.Exit(exit_code(errors))
        return
    console.print(table_of(title, columns, rows))
    console.print(degraded_summary(summary, errors[:3] + ([f"{len(errors) - 3} more"] if len(errors) > 3 else [])))
    if last:
        raise typer.Exit(exit_code(errors))


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


def _discover(
    cluster: str | None,
    namespaces: list[str] | None,
    resync: float,
    insecure: list[str],
    mirrors: list[str],
    track: bool,
) -> Any:
    """One discover-models run (the report)."""
    return run_flow(
        "flows.discover_models:discover_models",
        track=track,
        check=aim_check(),
        namespaces=namespaces,
        resync_interval_s=int(resync),
        insecure_registries=insecure or None,
        registry_mirrors=_mirrors(mirrors),
        cluster=cluster,
    )


def _run_aim(flow: str, namespaces: list[str] | None, cluster: str | None, track: bool) -> Any:
    """One run of the AIM flow ``flow`` (its module's name) on ``namespaces`` (the report)."""
    return run_flow(f"flows.{flow}:{flow}", track=track, check=aim_check(), namespaces=namespaces, cluster=cluster)


def _model_rows(report: Any) -> list[tuple[object, ...]]:
    return [(r.name, r.image, r.result, r.deployments, r.templates) for r in report.rows]


def _service_rows(report: Any) -> list[tuple[object, ...]]:
    return [(r.namespace, r.name, r.status, r.reason, r.workload, r.action) for r in report.rows]


def resync_option() -> Any:
    """``--resync-interval``: how long an unchanged image stays unread.

    Returns:
        The typer option (a duration in seconds, at least 60).
    """
    return duration_option(
        DISCOVERY_RESYNC_S, "--resync-interval", help="Read unchanged images again after this long.", minimum=60
    )


def insecure_registry_option() -> Any:
    """``--insecure-registry HOST`` (repeatable).

    Returns:
        The typer option (a list of hosts, empty by default).
    """
    return typer.Option(
        [], "--insecure-registry", metavar="HOST", help="Registry host spoken to over plain HTTP (repeatable)."
    )


def registry_mirror_option() -> Any:
    """``--registry-mirror HOST=MIRROR`` (repeatable).

    Returns:
        The typer option (a list of ``HOST=MIRROR`` entries, empty by default).
    """
    return typer.Option(
        [], "--registry-mirror", metavar="HOST=MIRROR", help="HOST=MIRROR or HOST=oci-layout:DIR (repeatable)."
    )


@command("discover-models", renamed={"--resync-seconds": "--resync-interval"})
def discover_models_command(
    cluster: str | None = cluster_option(),
    namespace: list[str] = namespaces_option(
        "Create templates in these namespaces (default: every namespace with an AIMNamespaceConfig)."
    ),
    resync: float = resync_option(),
    insecure_registry: list[str] = insecure_registry_option(),
    registry_mirror: list[str] = registry_mirror_option(),
    track: bool = track_option(),
    as_json: bool = json_option(),
) -> None:
    """Read every AIMClusterModel's image labels and create its recommended AIMServiceTemplates.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        namespace: ``--namespace``/``-n``: Create templates in these namespaces (default: every namespace with an
            AIMNamespaceConfig).
        resync: ``--resync-interval``: Read unchanged images again after this long. In seconds (the option reads 90s,
            5m, 1d; default 1d).
        insecure_registry: ``--insecure-registry``: Registry host spoken to over plain HTTP (repeatable).
        registry_mirror: ``--registry-mirror``: HOST=MIRROR or HOST=oci-layout:DIR (repeatable).
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON list instead of a table.
    """
    report = _discover(cluster, namespace or None, resync, insecure_registry, registry_mirror, track)
    _print_aim(
        "AIM model discovery", MODEL_COLUMNS, _model_rows(report), report.summary, report.degraded, as_json=as_json
    )


@command("resolve-templates")
def resolve_templates_command(
    cluster: str | None = cluster_option(),
    namespace: list[str] = namespaces_option(),
    track: bool = track_option(),
    as_json: bool = json_option(),
) -> None:
    """Resolve every AIMServiceTemplate to a runtime profile, check GPUs, request caches when warmCache.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        namespace: ``--namespace``/``-n``: Limit to these namespaces (repeatable).
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON list instead of a table.
    """
    report = _run_aim("resolve_templates", namespace or None, cluster, track)
    _print_aim(
        "AIM templates",
        ("namespace", "template", "status", "reason", "message"),
        [(r.namespace, r.name, r.status, r.reason, r.message) for r in report.rows],
        report.summary,
        report.degraded,
        as_json=as_json,
    )


@command("rollout-services")
def rollout_services_command(
    cluster: str | None = cluster_option(),
    namespace: list[str] = namespaces_option(),
    track: bool = track_option(),
    as_json: bool = json_option(),
) -> None:
    """Roll out every AIMService as a KServe InferenceService and Gateway HTTPRoute and report its status.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        namespace: ``--namespace``/``-n``: Limit to these namespaces (repeatable).
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON list instead of a table.
    """
    report = _run_aim("rollout_services", namespace or None, cluster, track)
    _print_aim("AIM services", SERVICE_COLUMNS, _service_rows(report), report.summary, report.degraded, as_json=as_json)


@command("reconcile-aim", "aim", renamed={"--resync-seconds": "--resync-interval"})
def reconcile_aim(
    cluster: str | None = cluster_option(),
    namespace: list[str] = namespaces_option(
        "Create templates, resolve and roll out in these namespaces only (repeatable; default: all)."
    ),
    resync: float = resync_option(),
    insecure_registry: list[str] = insecure_registry_option(),
    registry_mirror: list[str] = registry_mirror_option(),
    track: bool = track_option(),
    as_json: bool = json_option("one JSON object (models, templates, services)"),
) -> None:
    """The three AIM lifecycles in one process: discover-models, resolve-templates, rollout-services.

    Exit codes: 0 clean; 2 could not run (cluster path missing, no Kubernetes access,
    AIM CRDs not installed), with one line on stderr; 3 ran degraded (writes failed), one line per error.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        namespace: ``--namespace``/``-n``: Create templates, resolve and roll out in these namespaces only (repeatable;
            default: all).
        resync: ``--resync-interval``: Read unchanged images again after this long. In seconds (the option reads 90s,
            5m, 1d; default 1d).
        insecure_registry: ``--insecure-registry``: Registry host spoken to over plain HTTP (repeatable).
        registry_mirror: ``--registry-mirror``: HOST=MIRROR or HOST=oci-layout:DIR (repeatable).
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print one JSON object (models, templates, services) instead of a table.
    """
    namespaces = namespace or None
    found = _discover(cluster, namespaces, resync, insecure_registry, registry_mirror, track)
    resolved = _run_aim("resolve_templates", namespaces, cluster, track)
    rolled = _run_aim("rollout_services", namespaces, cluster, track)
    errors = found.degraded + resolved.degraded + rolled.degraded
    if as_json:
        document = {
            "models": [dict(zip(MODEL_COLUMNS, row)) for row in _model_rows(found)],
            "templates": [
                {"namespace": r.namespace, "template": r.name, "status": r.status, "reason": r.reason}
                for r in resolved.rows
            ],
            "services": [dict(zip(SERVICE_COLUMNS, row)) for row in _service_rows(rolled)],
            "summary": {"models": found.summary, "templates": resolved.summary, "services": rolled.summary},
        }
        sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
        exit_with_outcome(errors)
    _print_aim("AIM model discovery", MODEL_COLUMNS, _model_rows(found), found.summary, found.degraded, last=False)
    _print_aim(
        "AIM templates",
        ("namespace", "template", "status", "reason"),
        [(r.namespace, r.name, r.status, r.reason) for r in resolved.rows],
        resolved.summary,
        resolved.degraded,
        last=False,
    )
    _print_aim("AIM services", SERVICE_COLUMNS, _service_rows(rolled), rolled.summary, rolled.degraded, last=False)
    rejected = drain_rejections()
    warn_degraded(rejected)
    raise typer.Exit(exit_code(errors + rejected))
