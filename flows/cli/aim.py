"""The AIM lifecycles as commands: ``discover-models``, ``resolve-templates``, ``rollout-services``, and
``reconcile-aim`` running all three in one process (what ``./dev.sh demo`` runs). Every one is pre-checked the
same way: the AIM CRDs must be readable on the cluster before Prefect starts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
from flows.cli.output import print_json
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
        print_json([dict(zip(columns, row)) for row in rows])
        warn_degraded(errors)
        if last:
            raise typer.Exit(exit_code(errors))
        return
    console.print(table_of(title, columns, rows))
    console.print(degraded_summary(summary, errors[:3] + ([f"{len(errors) - 3} more"] if len(errors) > 3 else [])))
    if last:
        raise typer.Exit(exit_code(errors))


def _mirrors(pairs: list[str]) -> dict[str, str]:
    """``HOST=TARGET`` options as a dict; a malformed one, or an ``oci-layout:DIR`` whose directory does not exist
    (:func:`tasks.clients.oci.layout.parse_mirrors`, which the flow applies too), is a one-line error and exit 2
    before the flow starts: never a verdict on every model the mirror serves."""
    result: dict[str, str] = {}
    for pair in pairs:
        host, sep, target = pair.partition("=")
        if not sep or not host.strip() or not target.strip():
            raise typer.BadParameter(
                f"{pair!r}: expected HOST=MIRROR or HOST=oci-layout:DIR", param_hint="--registry-mirror"
            )
        if "@" in target and not target.strip().startswith("oci-layout:"):  # the option is never echoed: a secret
            raise typer.BadParameter(
                f"the mirror of {host.strip()} names a user ('user:password@'): give HOST=MIRROR[:PORT] and the "
                "mirror's credentials in a pull secret for it",
                param_hint="--registry-mirror",
            )
        result[host.strip()] = target.strip()
    from tasks.clients.oci.layout import parse_mirrors

    try:
        parse_mirrors(result)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--registry-mirror") from None
    return result


@dataclass(frozen=True)
class _Discovery:
    """What discover-models and reconcile-aim were asked for: the discovery options, as their flows take them."""

    cluster: str | None
    namespaces: list[str] | None
    resync: float
    insecure: list[str]
    mirrors: list[str]
    track: bool


def _discover(options: _Discovery) -> Any:
    """One discover-models run (the report)."""
    return run_flow(
        "flows.discover_models:discover_models",
        track=options.track,
        check=aim_check(),
        namespaces=options.namespaces,
        resync_interval_s=int(options.resync),
        insecure_registries=options.insecure or None,
        registry_mirrors=_mirrors(options.mirrors),
        cluster=options.cluster,
    )


def _run_aim(flow: str, namespaces: list[str] | None, cluster: str | None, track: bool) -> Any:
    """One run of the AIM flow ``flow`` (its module's name) on ``namespaces`` (the report)."""
    return run_flow(f"flows.{flow}:{flow}", track=track, check=aim_check(), namespaces=namespaces, cluster=cluster)


def _model_rows(report: Any) -> list[tuple[object, ...]]:
    return [(r.name, r.image, r.result, r.deployments, r.templates) for r in report.rows]


def _template_rows(report: Any) -> list[tuple[object, ...]]:
    return [(r.namespace, r.name, r.status, r.reason, r.message) for r in report.rows]


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


_Rows = Callable[[Any], list[tuple[object, ...]]]
"""A report's table rows."""


def _namespaced_command(name: str, summary: str, title: str, columns: tuple[str, ...], rows: _Rows) -> None:
    """Register ``modelplane NAME``, one run of the AIM flow of the same name on the ``--namespace`` asked for,
    printed as the table ``title`` (``columns``, ``rows`` of the report) or as ``--json``; ``summary`` is its help."""

    @command(name, help=summary)
    def run(
        cluster: str | None = cluster_option(),
        namespace: list[str] = namespaces_option(),
        track: bool = track_option(),
        as_json: bool = json_option(),
    ) -> None:
        """One run of the flow, printed (the command's help is ``summary``).\f

        Args:
            cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the
                default.
            namespace: ``--namespace``/``-n``: Limit to these namespaces (repeatable).
            track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
            as_json: ``--json``: Print a JSON list instead of a table.
        """
        report = _run_aim(name.replace("-", "_"), namespace or None, cluster, track)
        _print_aim(title, columns, rows(report), report.summary, report.degraded, as_json=as_json)


def _discovering_command(
    name: str, *aliases: str, namespace_help: str, json_what: str = "a JSON list"
) -> Callable[[Callable[[_Discovery, bool], None]], Callable[[_Discovery, bool], None]]:
    """Register the decorated function as ``modelplane NAME`` (and ``aliases``), its docstring the help, with the
    options of discovery: it is called with them and ``--json``."""

    def register(body: Callable[[_Discovery, bool], None]) -> Callable[[_Discovery, bool], None]:
        @command(name, *aliases, renamed={"--resync-seconds": "--resync-interval"}, help=body.__doc__)
        def run(
            cluster: str | None = cluster_option(),
            namespace: list[str] = namespaces_option(namespace_help),
            resync: float = resync_option(),
            insecure_registry: list[str] = insecure_registry_option(),
            registry_mirror: list[str] = registry_mirror_option(),
            track: bool = track_option(),
            as_json: bool = json_option(json_what),
        ) -> None:
            """Call ``body`` with the options (the command's help is its docstring).\f

            Args:
                cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None:
                    the default.
                namespace: ``--namespace``/``-n``: ``namespace_help``.
                resync: ``--resync-interval``: Read unchanged images again after this long. In seconds (the option
                    reads 90s, 5m, 1d; default 1d).
                insecure_registry: ``--insecure-registry``: Registry host spoken to over plain HTTP (repeatable).
                registry_mirror: ``--registry-mirror``: HOST=MIRROR or HOST=oci-layout:DIR (repeatable).
                track: ``--track``: Record the run in Prefect where it needs none
                    (:func:`flows.cli.common.tracking_wanted`).
                as_json: ``--json``: Print ``json_what`` instead of a table.
            """
            body(_Discovery(cluster, namespace or None, resync, insecure_registry, registry_mirror, track), as_json)

        return body

    return register


@_discovering_command(
    "discover-models",
    namespace_help="Create templates in these namespaces (default: every namespace with an AIMNamespaceConfig).",
)
def discover_models_command(options: _Discovery, as_json: bool) -> None:
    """Read every AIMClusterModel's image labels and create its recommended AIMServiceTemplates.\f

    Args:
        options: The discovery options asked for (:func:`_discovering_command`).
        as_json: ``--json``: Print a JSON list instead of a table.
    """
    report = _discover(options)
    _print_aim(
        "AIM model discovery", MODEL_COLUMNS, _model_rows(report), report.summary, report.degraded, as_json=as_json
    )


_namespaced_command(
    "resolve-templates",
    "Resolve every AIMServiceTemplate to a runtime profile, check GPUs, request caches when warmCache.",
    "AIM templates",
    ("namespace", "template", "status", "reason", "message"),
    _template_rows,
)
_namespaced_command(
    "rollout-services",
    "Roll out every AIMService as a KServe InferenceService and Gateway HTTPRoute and report its status.",
    "AIM services",
    SERVICE_COLUMNS,
    _service_rows,
)


@_discovering_command(
    "reconcile-aim",
    "aim",
    namespace_help="Create templates, resolve and roll out in these namespaces only (repeatable; default: all).",
    json_what="one JSON object (models, templates, services)",
)
def reconcile_aim(options: _Discovery, as_json: bool) -> None:
    """The three AIM lifecycles in one process: discover-models, resolve-templates, rollout-services.

    Exit codes: 0 clean; 2 could not run (cluster path missing, no Kubernetes access,
    AIM CRDs not installed), with one line on stderr; 3 ran degraded (writes failed), one line per error.\f

    Args:
        options: The discovery options asked for (:func:`_discovering_command`).
        as_json: ``--json``: Print one JSON object (models, templates, services) instead of a table.
    """
    found = _discover(options)
    resolved = _run_aim("resolve_templates", options.namespaces, options.cluster, options.track)
    rolled = _run_aim("rollout_services", options.namespaces, options.cluster, options.track)
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
        print_json(document)
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
