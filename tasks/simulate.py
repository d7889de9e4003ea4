"""I/O of the simulate flow: read a trace file and a cluster description, write the report (PNG plots + HTML + JSON).

The cluster description is read with the optimize flow's own tasks (one LIST per kind through the
cluster interface, the WVA ConfigMaps parsed the same way), so a simulation sees exactly what a
cycle of the optimize flow would.  The plots are drawn by :mod:`tasks.simulate_plots`.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from engine.api.views import ModelRoute
from engine.optimize.config import ConfigError
from engine.rollout.kthena_native import NETWORKING_API as KTHENA_NETWORKING_API
from engine.simulate.frontier import Limits
from engine.simulate.outcome import PolicyOutcome
from engine.simulate.records import Trace
from engine.simulate.scenario import DEFAULT_HPA_POLICY, ClusterDescription, Scenario
from engine.simulate.trace import TraceShape, shape_trace
from tasks.clients.cluster import connect
from tasks.clients.files import open_own
from tasks.optimize.read import list_optional, read_cluster_state, read_current_replicas, scale_targets_of
from tasks.progress import step
from tasks.simulate_plots import (
    CLAIRVOYANT,
    plot_cost,
    plot_frontier,
    plot_latency,
    plot_load_capacity,
    plot_replicas,
    policy_label,
)
from tasks.traces import read_trace_rows


def read_trace(path: str | pathlib.Path, shape: TraceShape) -> Trace:
    """Read a trace CSV and shape it for the simulator; a missing or malformed file raises TraceError.

    Args:
        path: The trace CSV (arrival time, prompt tokens, output tokens per request).
        shape: How the trace is replayed: the slice, compression, rate scaling, the models' shares, a day's wave.

    Returns:
        The shaped trace: each request's arrival, token counts and model.

    Raises:
        TraceError: The file does not exist, is not a regular file or not UTF-8 text, or its rows are malformed (the
            message names the file: :func:`tasks.traces.read_trace_rows`), or the shape leaves nothing to replay.
    """
    arrival, prompt, output = read_trace_rows(path)
    return shape_trace(arrival, prompt, output, shape)


class InvalidConfiguration(ValueError):
    """An entry of the WVA ConfigMaps a simulation reads does not parse: a replay of the configuration as misread
    (a cost or an inventory left out) would compare policies on a cluster nobody has, so the run is refused."""


def check_configuration(errors: Sequence[ConfigError], config_namespace: str) -> None:
    """Refuse a simulation on a configuration with errors, naming each ConfigMap, key and reason.

    Args:
        errors: The configuration errors the read found (:attr:`tasks.optimize.read.ClusterState.config_errors`).
        config_namespace: The namespace of the ConfigMaps.

    Raises:
        InvalidConfiguration: ``errors`` is not empty; one line, the errors as the optimize flow logs them.
    """
    if errors:
        reasons = "; ".join(str(error) for error in errors)
        raise InvalidConfiguration(f"invalid configuration (ConfigMaps in {config_namespace}): {reasons}")


class OutputDirectoryError(ValueError):
    """The report's directory cannot be made or is not a directory."""


def _write_own(path: pathlib.Path, text: str) -> None:
    """Write one of the report's own files, never through a symbolic link left at its name (a shared or reused
    report folder): the link is removed, its target untouched (:func:`tasks.clients.files.open_own`)."""
    with os.fdopen(open_own(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w", encoding="utf-8") as handle:
        handle.write(text)


def check_output_dir(path: str | pathlib.Path) -> pathlib.Path:
    """Check that the report's directory can be made and written, before any replay, so a run never replays for
    minutes to fail writing its report; what the check makes is removed again, so a run that fails later leaves no
    empty folder behind (:func:`write_report` makes it).

    Args:
        path: The directory.

    Returns:
        The directory.

    Raises:
        OutputDirectoryError: Something other than a directory (a file) is in its place, or it cannot be made or
            written.
    """
    directory = pathlib.Path(path)
    missing = [d for d in (directory, *directory.parents) if not d.exists() and not d.is_symlink()]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise OutputDirectoryError(f"output directory {directory} cannot be written (permission denied)")
    except FileExistsError:
        raise OutputDirectoryError(f"output directory {directory} exists and is not a directory") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutputDirectoryError(f"output directory {directory} cannot be made ({reason})") from None
    finally:
        _remove_made(missing)
    return directory


def _remove_made(made: Sequence[pathlib.Path]) -> None:
    """Remove the directories a check made (deepest first), each only while still empty."""
    for made_dir in made:
        try:
            made_dir.rmdir()
        except OSError:
            return


def read_description(
    cluster: str, config_namespace: str, namespaces: list[str] | None = None, dry_run: bool = False
) -> ClusterDescription:
    """The VariantAutoscalings, current replicas, WVA ConfigMaps, the first AutoscalingPolicy of a cluster and
    the models its Kthena ModelRoutes send through Kthena's router (which picks endpoints by queue and KV load).
    ``dry_run``: the boundary reader's failure statuses (and the local backend's bookkeeping) change nothing.

    Args:
        cluster: The cluster to describe: a manifests directory or file, ``kubeconfig:PATH[#CONTEXT]``, or empty for
            the default (``$MODELPLANE_CLUSTER``, else the kubeconfig or in-cluster configuration).
        config_namespace: The namespace of the WVA ConfigMaps (accelerator costs, service classes, saturation).
        namespaces: The namespaces to read VariantAutoscalings in; None for all.
        dry_run: Whether the read may write nothing (the boundary reader's failure statuses are left out).

    Returns:
        What the simulator replays the trace against: variants, current replicas, costs, SLO classes, inventory, the
        HPA-style policy and the routed models.

    Raises:
        InvalidConfiguration: An entry of the WVA ConfigMaps (accelerator costs, inventory, optimizer settings) does
            not parse.
    """
    conn = connect(cluster, dry_run=dry_run)
    state = read_cluster_state.fn(conn, namespaces, config_namespace)
    check_configuration(state.config_errors, config_namespace)
    replicas = read_current_replicas.fn(conn, scale_targets_of(state))
    hpa = next(iter(sorted(state.policies.items())), None)
    return ClusterDescription(
        variants=state.variant_models(),
        current_replicas=replicas.current,
        accelerator_costs=state.accelerator_costs,
        service_classes=state.service_classes,
        saturation_data=state.saturation_data,
        inventory=state.inventory,
        hpa_policy=hpa[1].model.spec if hpa else DEFAULT_HPA_POLICY,
        routed_models=routed_models(list_optional(conn, KTHENA_NETWORKING_API, "ModelRoute")),
    )


def routed_models(routes: list[dict[str, Any]]) -> dict[str, str]:
    """Per served model (``namespace/modelName``) routed by a Kthena ModelRoute: the route that says so.

    Args:
        routes: The Kthena ModelRoutes as read.

    Returns:
        The route's description (``ModelRoute NAMESPACE/NAME``) by served model (``namespace/modelName``).
    """
    models: dict[str, str] = {}
    for route in (ModelRoute.model_validate(obj) for obj in routes):
        namespace = route.metadata.namespace or "default"
        if route.spec.model_name:
            models[f"{namespace}/{route.spec.model_name}"] = f"ModelRoute {namespace}/{route.metadata.name}"
    return models


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def summary_table(outcomes: Sequence[PolicyOutcome], limits: Limits | None = None) -> list[dict[str, Any]]:
    """One row per policy: attainment, per-model attainment, cost, its ratio to the clairvoyant schedule's at
    equal attainment (with ``limits``), replica changes, unserved requests.

    Args:
        outcomes: Each policy's replay result.
        limits: The trace's limits, for the cost ratio to the clairvoyant schedule; None to leave that column out.

    Returns:
        The rows, with values formatted for a table (percentages, ``x`` ratios).
    """
    rows = []
    for o in outcomes:
        row: dict[str, Any] = {"policy": policy_label(o.policy), "SLO attainment": share_text(o.attainment)}
        for model, value in o.attainment_by_model.items():
            row[f"attainment {model}"] = share_text(value)  # a model with no request in the replay has none
        row["cost/replay"] = f"{o.cost:.1f}"
        if limits is not None:
            ratio = limits.cost_ratio(o.attainment, o.cost)
            row[f"cost / {CLAIRVOYANT} at equal attainment"] = (
                f"{ratio:.2f}x" if ratio is not None else f"outside the {CLAIRVOYANT}'s curve"
            )
        row.update({"replica changes": o.replica_changes, "unserved": f"{o.unserved} ({o.unserved_share:.1%})"})
        rows.append(row)
    return rows


ATTAINMENT_DEFINITION = (
    "SLO attainment = the share of the trace's requests that completed with a time to first token (queueing + prefill) "
    "within their model's TTFT target and a mean inter-token latency (decode time over output tokens - 1) within its ITL "
    "target; requests never served count as missed."
)
CEILING_DEFINITION = (
    "Attainment ceiling = the share of requests that can meet their SLO at all: on the fastest variant of their model, "
    "alone in the batch (batch 1, no queue: TTFT = gamma + delta x prompt, ITL = alpha + beta). Long prompts whose "
    "prefill alone exceeds the TTFT target miss under any policy."
)
ORACLE_DEFINITION = (
    "Clairvoyant schedule (policy 'oracle') = a controller that knows each model's arrivals per control interval and "
    "provisions the minimum-cost replicas that carry them, under the same inventory, start-up delay, control interval "
    "and router; what one replica carries at a target attainment is measured in this simulator on single-variant "
    "pools under Poisson arrivals, so it is not a lower bound: a policy may cost less at the same attainment (a ratio "
    "below 1). 'cost / clairvoyant schedule' divides a policy's cost by the schedule's at the same attainment, "
    "interpolated between the schedule's points over its target attainment (none outside their range)."
)


def cost_unit(scenario: Scenario) -> str:
    """What a cost figure means, with the unit costs of the accelerators the variants use.

    Args:
        scenario: The replayed scenario (accelerator unit costs and the variants' accelerators).

    Returns:
        The sentence that defines a cost figure.
    """
    prices = ", ".join(
        f"{a} {c.cost:g}"
        for a, c in sorted(scenario.description.accelerator_costs.items())
        if any(v.accelerator == a for v in scenario.variants)
    )
    return (
        f"Cost = accelerator-hours x unit cost per accelerator-hour (accelerator-unit-costs: {prices}), summed over "
        "the replay; a replica is paid from its creation (start-up included) until it has drained and left."
    )


def targets_table(scenario: Scenario, limits: Limits | None) -> list[dict[str, str]]:
    """Per model: the SLO targets attainment is judged against, the ones the policies size for, the router, the
    attainment target and ceiling.

    Args:
        scenario: The replayed scenario (models, SLOs, sizing SLOs, routing).
        limits: The trace's limits, for the per-model attainment target and ceiling; None to leave those columns out.

    Returns:
        One row per model, values formatted for a table (``-`` where there is no target).
    """
    rows = []
    for model in scenario.trace.models:
        slo, sizing = scenario.slos[model], scenario.sizing_slo(model)
        row = {
            "model": model,
            "TTFT target (ms)": f"{slo.ttft_ms:g}" if slo.ttft_ms else "-",
            "ITL target (ms)": f"{slo.itl_ms:g}" if slo.itl_ms else "-",
            "policies size for TTFT (ms)": f"{sizing.ttft_ms:g}" if sizing.ttft_ms else "-",
            "router": scenario.routing.router_of(model),
        }
        if limits is not None:
            row["attainment target"] = f"{limits.targets[model]:.1%}" if model in limits.targets else "-"
            row["attainment ceiling"] = share_text(limits.ceiling.get(model, math.nan))
        rows.append(row)
    return rows


def share_text(value: float) -> str:
    """A share as a table shows it: a percentage, ``-`` for none (NaN: a model with no request in the replay).

    Args:
        value: The share, 0 to 1, or NaN.

    Returns:
        ``97.5%``, or ``-``.
    """
    return "-" if math.isnan(value) else f"{value:.1%}"


def _paragraph(text: str) -> str:
    """``text`` as an HTML paragraph, a sentence; nothing for no text."""
    return f"<p>{html.escape(text)}.</p>" if text else ""


def _html_table(rows: Sequence[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(
    outcomes: Sequence[PolicyOutcome],
    scenario: Scenario,
    directory: pathlib.Path,
    title: str,
    settings: dict[str, Any],
    limits: Limits | None = None,
) -> dict[str, pathlib.Path]:
    """Write ``summary.json``, the PNG plots and ``report.html`` (plots embedded) into ``directory``.

    The page states what the numbers mean before showing them: the SLO targets, the definition of
    attainment and the trace's attainment ceiling, the cost unit; with ``limits`` also each cost's ratio
    to the oracle's and the cost-attainment frontier.  Same inputs, same bytes (no time stamps).

    Args:
        outcomes: Each policy's replay result.
        scenario: The replayed scenario.
        directory: The folder the files are written to (created when missing; existing files are replaced).
        title: The page's title.
        settings: The run's settings, listed on the page and in ``summary.json``.
        limits: The trace's limits (ceiling, frontier), or None when they were not computed.

    Returns:
        The written files by name: ``html``, ``json`` and one per plot.
    """
    directory.mkdir(parents=True, exist_ok=True)
    drawings: dict[str, Callable[[], pathlib.Path]] = {}
    if limits is not None and limits.frontier:
        bounds: Limits = limits
        drawings["frontier"] = lambda: plot_frontier(bounds, directory / "frontier.png")
    drawings.update(
        {
            "load_capacity": lambda: plot_load_capacity(outcomes, scenario, directory / "load_capacity.png"),
            "replicas": lambda: plot_replicas(outcomes, directory / "replicas.png"),
            "latency": lambda: plot_latency(outcomes, scenario, directory / "latency.png"),
            "cost": lambda: plot_cost(outcomes, directory / "cost.png"),
        }
    )
    plots = {}
    with step(f"report {directory}", total=len(drawings), unit="plots") as drawn:
        for name, draw in drawings.items():
            plots[name] = draw()
            drawn.advance(note=name)
    summary: dict[str, Any] = {
        "settings": settings,
        "slos": {m: {"ttft_ms": s.ttft_ms, "itl_ms": s.itl_ms} for m, s in scenario.slos.items()},
        "routers": {m: scenario.routing.router_of(m) for m in scenario.trace.models},
        "cost_unit": cost_unit(scenario),
        "attainment_definition": ATTAINMENT_DEFINITION,
        "policies": [o.as_json() for o in outcomes],
    }
    if limits is not None:
        summary.update(limits.as_json())
        for entry, o in zip(summary["policies"], outcomes):
            ratio = limits.cost_ratio(o.attainment, o.cost)
            entry["cost_vs_oracle"] = round(ratio, 4) if ratio is not None else None
    _write_own(directory / "summary.json", json.dumps(summary, indent=2, allow_nan=False) + "\n")
    images = "".join(
        f'<h2>{html.escape(name.replace("_", " "))}</h2><img alt="{name}" src="data:image/png;base64,'
        f'{base64.b64encode(path.read_bytes()).decode()}"/>'
        for name, path in plots.items()
    )
    settings_html = "".join(f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>" for k, v in settings.items())
    ceiling = (
        (
            f"<p><b>Attainment ceiling of this trace: {limits.ceiling['all']:.1%}</b> of requests. "
            f"{html.escape(CEILING_DEFINITION)}</p>{_paragraph(limits.out_of_reach())}"
            f"<p>{html.escape(ORACLE_DEFINITION)}</p>"
        )
        if limits is not None
        else ""
    )
    _write_own(
        directory / "report.html",
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}td,th{border:1px solid #ccc;padding:2px 6px}"
        "table{border-collapse:collapse;margin:6px 0}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>"
        f"<h2>What is measured</h2>{_html_table(targets_table(scenario, limits))}"
        f"<p>{html.escape(ATTAINMENT_DEFINITION)}</p>{ceiling}<p>{html.escape(cost_unit(scenario))}</p>"
        f"<h2>Settings</h2><ul>{settings_html}</ul>"
        f"<h2>Policies</h2>{_html_table(summary_table(outcomes, limits))}{images}</body></html>\n",
    )
    return {"html": directory / "report.html", "json": directory / "summary.json", **plots}


def setting_text(value: Any) -> str:
    """One setting as a person reads it in the artifact: lists and mappings as compact JSON, not Python reprs.

    Args:
        value: A setting's value.

    Returns:
        ``yes``/``no`` for a boolean, compact JSON for a list or mapping, else its text; pipes escaped for a table.
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=str).replace("|", "\\|")
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A markdown table of ``rows`` (dicts with the same keys), header first.

    Args:
        rows: The rows, each a mapping of the same keys (the first row's keys are the header); not empty.

    Returns:
        The table's lines.
    """
    header = list(rows[0])
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(str(value) for value in row.values()) + " |" for row in rows],
    ]


def markdown_report(
    outcomes: Sequence[PolicyOutcome],
    paths: dict[str, pathlib.Path],
    settings: dict[str, Any],
    limits: Limits | None = None,
) -> str:
    """The Prefect artifact: settings, attainment ceiling, the comparison table and the plots inline.

    Args:
        outcomes: Each policy's replay result.
        paths: The files :func:`write_report` wrote, by name.
        settings: The run's settings; None values are left out.
        limits: The trace's limits, or None when they were not computed.

    Returns:
        The artifact's Markdown, the plots embedded as data URLs.
    """
    rows = summary_table(outcomes, limits)
    shown = {key: value for key, value in settings.items() if value is not None}
    structured = [key for key, value in shown.items() if isinstance(value, (dict, list, tuple))]
    lines = ["# Policy comparison", "", "| setting | value |", "|---|---|"]
    lines += [f"| {key} | {setting_text(value)} |" for key, value in shown.items() if key not in structured]
    # Lists and mappings below the table, as lines that wrap: the UI's table cells do not, and one would widen
    # the table past the pane.
    lines += ["", *[f"- {key}: {setting_text(shown[key])}" for key in structured], ""]
    if limits is not None:
        lines += [f"Attainment ceiling of the trace: {limits.ceiling['all']:.1%} ({CEILING_DEFINITION})", ""]
        if beyond := limits.out_of_reach():
            lines += [beyond + ".", ""]
    per_model = [key for key in rows[0] if key.startswith("attainment ")]
    overall = [{k: v for k, v in row.items() if k not in per_model} for row in rows]
    by_model = [{"policy": row["policy"], **{k.removeprefix("attainment "): row[k] for k in per_model}} for row in rows]
    lines += markdown_table(overall)  # two tables, each narrow enough for the UI's artifact pane
    if per_model:
        lines += ["", "SLO attainment by model:", "", *markdown_table(by_model)]
    lines += [
        "",
        ATTAINMENT_DEFINITION,
        "",
        f"The tables and plots are below; the run also wrote them to `{paths['html'].parent}` where it ran.",
        "",
    ]
    for name in ("frontier", "load_capacity", "replicas", "latency", "cost"):
        if name in paths:
            data = base64.b64encode(paths[name].read_bytes()).decode()
            lines += [f"![{name}](data:image/png;base64,{data})", ""]
    return "\n".join(lines)
