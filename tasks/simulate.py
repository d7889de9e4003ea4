"""I/O of the simulate flow: read a trace file and a cluster description, write the report (PNG plots + HTML + JSON).

The cluster description is read with the optimize flow's own tasks (one LIST per kind through the
cluster interface, the WVA ConfigMaps parsed the same way), so a simulation sees exactly what a
cycle of the optimize flow would.  Plots use matplotlib's Agg backend (no display).
"""

from __future__ import annotations

import base64
import csv
import html
import json
import pathlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from engine.api.views import ModelRoute
from engine.rollout.kthena_native import NETWORKING_API as KTHENA_NETWORKING_API
from engine.simulate.frontier import Limits
from engine.simulate.outcome import PolicyOutcome
from engine.simulate.records import Trace
from engine.simulate.scenario import DEFAULT_HPA_POLICY, ClusterDescription, Scenario
from engine.simulate.trace import TraceError, TraceShape, parse_trace_rows, shape_trace
from tasks.clients.cluster import connect
from tasks.optimize.read import list_optional, read_cluster_state, read_current_replicas, scale_targets_of
from tasks.progress import step


def read_trace(path: str | pathlib.Path, shape: TraceShape) -> Trace:
    """Read a trace CSV and shape it for the simulator; a missing or malformed file raises TraceError.

    Args:
        path: The trace CSV (arrival time, prompt tokens, output tokens per request).
        shape: How the trace is replayed: the slice, compression, rate scaling, the models' shares, a day's wave.

    Returns:
        The shaped trace: each request's arrival, token counts and model.

    Raises:
        TraceError: The file does not exist or its rows are malformed.
    """
    file = pathlib.Path(path)
    if not file.is_file():
        raise TraceError(f"trace file {file} does not exist")
    with file.open(newline="") as handle:
        arrival, prompt, output = parse_trace_rows(csv.reader(handle))
    return shape_trace(arrival, prompt, output, shape)


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
    """
    conn = connect(cluster, dry_run=dry_run)
    state = read_cluster_state.fn(conn, namespaces, config_namespace)
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

_STYLES = [
    {"lw": 3.0, "ls": "-", "alpha": 0.6},
    {"lw": 1.6, "ls": "--"},
    {"lw": 1.6, "ls": ":"},
    {"lw": 1.2, "ls": "-."},
    {"lw": 1.0, "ls": "-"},
]
# Colour, line style and marker differ per policy: lines that coincide stay visible (and print in grey).
_POLICY_STYLES: dict[str, dict[str, Any]] = {
    "modelplane": {"color": "#1f77b4", "ls": "-", "marker": "o", "lw": 2.2},
    "saturation-only": {"color": "#ff7f0e", "ls": (0, (6, 2)), "marker": "s", "lw": 1.6},
    "wva-greedy": {"color": "#2ca02c", "ls": "-.", "marker": "^", "lw": 1.6},
    "hpa": {"color": "#d62728", "ls": ":", "marker": "D", "lw": 2.0},
    "static-peak": {"color": "#7f7f7f", "ls": (0, (3, 1, 1, 1, 1, 1)), "marker": "v", "lw": 1.6},
    "oracle": {"color": "#000000", "ls": "--", "marker": "*", "lw": 1.8},
}
_LEGEND_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, "fontsize": 8}


CLAIRVOYANT = "clairvoyant schedule"
"""How reports name the policy ``oracle``: a schedule computed with the trace's future arrivals, not a lower bound
on cost (its capacities are measured on single-variant pools under Poisson arrivals, so a policy may cost less)."""


def policy_label(policy: str) -> str:
    """A policy's name in tables and legends (``oracle`` reads as the clairvoyant schedule it is).

    Args:
        policy: A policy's name as the simulator knows it.

    Returns:
        The label tables and legends show.
    """
    return f"{CLAIRVOYANT} (oracle)" if policy == "oracle" else policy


def policy_style(policy: str, markevery: int | None = None, order: int = 0) -> dict[str, Any]:
    """Matplotlib keywords of a policy's line (colour, dash pattern, marker).

    With ``markevery`` (a time series) the markers shrink with ``order`` and later lines draw on top, so a
    line that runs on another's keeps both markers visible.

    Args:
        policy: A policy's name.
        markevery: Every how many points a marker is drawn (a time series), or None for every point.
        order: The line's index among those drawn, so later lines are smaller and on top.

    Returns:
        Keyword arguments for matplotlib's ``plot``/``step``.
    """
    style = dict(_POLICY_STYLES.get(policy, {"color": "#9467bd", "ls": "-", "marker": "x", "lw": 1.2}))
    if markevery is not None:
        style.update(markevery=markevery, markersize=max(8.0 - 1.1 * order, 3.0), zorder=2 + order)
    return style


def _pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend (no display), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_load_capacity(outcomes: Sequence[PolicyOutcome], scenario: Scenario, path: pathlib.Path) -> pathlib.Path:
    """Per model: the arrival rate and each policy's provisioned capacity (ready replicas x max rate).

    Args:
        outcomes: Each policy's replay result (its time series).
        scenario: The replayed scenario (its trace's models, one panel each).
        path: The PNG file to write.

    Returns:
        ``path``, written.
    """
    plt = _pyplot()
    models = list(scenario.trace.models)
    fig, axes = plt.subplots(len(models), 1, figsize=(10.5, 2.6 * len(models)), sharex=True, squeeze=False)
    for ax, model in zip(axes[:, 0], models):
        first = outcomes[0].series
        minutes = [t / 60 for t in first["time_s"]]
        ax.fill_between(minutes, first["load_rps"][model], step="pre", color="#cccccc", label="load")
        for order, o in enumerate(outcomes):
            ax.step(
                [t / 60 for t in o.series["time_s"]],
                o.series["capacity_rps"][model],
                label=policy_label(o.policy),
                where="pre",
                **policy_style(o.policy, markevery=max(len(o.series["time_s"]) // 12, 1), order=order),
            )
        ax.set_title(model, fontsize=9)
        ax.set_ylabel("req/s")
    axes[0, 0].legend(**_LEGEND_OUTSIDE)
    axes[-1, 0].set_xlabel("minutes")
    fig.suptitle("Load vs provisioned capacity (ready replicas x model max rate at the SLO)", fontsize=10)
    return _save(fig, plt, path)


def plot_replicas(outcomes: Sequence[PolicyOutcome], path: pathlib.Path) -> pathlib.Path:
    """Accelerators in use per type over time, one panel per policy.

    Args:
        outcomes: Each policy's replay result (its accelerators per type over time).
        path: The PNG file to write.

    Returns:
        ``path``, written.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(len(outcomes), 1, figsize=(10.5, 1.9 * len(outcomes)), sharex=True, squeeze=False)
    for ax, o in zip(axes[:, 0], outcomes):
        minutes = [t / 60 for t in o.series["time_s"]]
        # Distinct styles: types with equal counts would otherwise hide each other.
        for (accelerator, counts), style in zip(o.series["accelerators"].items(), _STYLES):
            ax.step(minutes, counts, label=accelerator, **style)
        ax.set_title(policy_label(o.policy), fontsize=9)
        ax.set_ylabel("accelerators")
    axes[0, 0].legend(**_LEGEND_OUTSIDE)
    axes[-1, 0].set_xlabel("minutes")
    fig.suptitle("Accelerators per type (replicas x accelerators per replica)", fontsize=10)
    return _save(fig, plt, path)


def plot_latency(outcomes: Sequence[PolicyOutcome], scenario: Scenario, path: pathlib.Path) -> pathlib.Path:
    """TTFT and ITL percentiles per policy and model, against the SLO (dashed).

    The percentiles are of the requests that were served; a request dropped at the gateway has no latency, so
    each policy's label says how many of the model's requests it left unserved (left out of its bars).

    Args:
        outcomes: Each policy's replay result (its latency percentiles per model).
        scenario: The replayed scenario (its models and SLOs).
        path: The PNG file to write.

    Returns:
        ``path``, written.
    """
    plt = _pyplot()
    models = list(scenario.trace.models)
    fig, axes = plt.subplots(len(models), 2, figsize=(9, 2.9 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        slo = scenario.slos[model]
        names = [_latency_label(o, model) for o in outcomes]
        for col, (metric, target) in enumerate((("ttft", slo.ttft_ms), ("itl", slo.itl_ms))):
            ax = axes[row, col]
            for offset, q in enumerate((50, 90, 99)):
                values = [o.latency_ms[model][f"{metric}_p{q}"] for o in outcomes]
                ax.bar([i + (offset - 1) * 0.27 for i in range(len(names))], values, width=0.27, label=f"p{q}")
            if target:
                ax.axhline(target, color="black", ls="--", lw=1, label="SLO")
            ax.set_yscale("log")
            ax.set_xticks(range(len(names)), names, fontsize=6, rotation=15)
            ax.set_title(f"{model} {metric.upper()} (ms), served requests only", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(
        "Latency percentiles of the served requests; unserved requests are left out (counted per label)", fontsize=9
    )
    fig.tight_layout()
    return _save(fig, plt, path)


def _latency_label(outcome: PolicyOutcome, model: str) -> str:
    """The policy's tick label in the latency plot, with the model's unserved requests when there are any."""
    unserved = outcome.unserved_by_model.get(model, 0)
    return f"{policy_label(outcome.policy)}\n{unserved} unserved" if unserved else policy_label(outcome.policy)


def plot_cost(outcomes: Sequence[PolicyOutcome], path: pathlib.Path) -> pathlib.Path:
    """Cumulative accelerator cost over time per policy.

    Args:
        outcomes: Each policy's replay result (its cost per hour over time).
        path: The PNG file to write.

    Returns:
        ``path``, written.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10.5, 3.2))
    for order, o in enumerate(outcomes):
        times = o.series["time_s"]
        rate = o.series["cost_per_hour"]
        total, cumulative = 0.0, []
        for i, r in enumerate(rate):
            step = (times[i + 1] - times[i]) if i + 1 < len(times) else 0.0
            total += r * step / 3600.0
            cumulative.append(total)
        ax.plot(
            [t / 60 for t in times],
            cumulative,
            label=policy_label(o.policy),
            **policy_style(o.policy, markevery=max(len(times) // 12, 1), order=order),
        )
    ax.set_xlabel("minutes")
    ax.set_ylabel("cost (unit cost x accelerator-hours)")
    ax.set_title("Cumulative accelerator cost", fontsize=10)
    ax.legend(**_LEGEND_OUTSIDE)
    return _save(fig, plt, path)


def plot_frontier(limits: Limits, path: pathlib.Path) -> pathlib.Path:
    """SLO attainment against cost: every policy's curve over its own knob, joined in attainment order.

    The clairvoyant schedule (policy ``oracle``) is one more curve, not a bound: nothing is shaded as
    unreachable.  The attainment ceiling is a horizontal line; the policies as configured are ringed.

    Args:
        limits: The trace's limits: the attainment ceiling and every policy's (attainment, cost) points over its knob.
        path: The PNG file to write.

    Returns:
        ``path``, written.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10.5, 5.0))
    policies = list(dict.fromkeys(p.policy for p in limits.frontier))
    curves = frontier_curves(limits)
    for order, policy in enumerate(policies):
        points = curves[policy]
        label = policy_label(policy)
        # Later policies draw smaller markers on top: a point two policies share shows both.
        ax.plot(
            [c for _, c in points],
            [100 * a for a, _ in points],
            label=label,
            markersize=max(10 - 1.2 * order, 4),
            zorder=2 + order,
            **policy_style(policy),
        )
        configured = [p for p in limits.frontier if p.policy == policy and p.setting == "as configured"]
        for p in configured:
            ax.plot(
                [p.cost],
                [100 * p.attainment],
                marker="o",
                markersize=14,
                markerfacecolor="none",
                markeredgecolor=policy_style(policy)["color"],
                ls="none",
            )
    ceiling = limits.ceiling.get("all")
    if ceiling is not None and ceiling == ceiling:
        ax.axhline(100 * ceiling, color="#444444", ls=(0, (1, 2)), lw=1.2, label=f"attainment ceiling {ceiling:.1%}")
    ax.plot(
        [],
        [],
        marker="o",
        markersize=12,
        markerfacecolor="none",
        markeredgecolor="#444444",
        ls="none",
        label="as configured",
    )
    ax.set_xlabel("cost over the replay (unit cost x accelerator-hours)")
    ax.set_ylabel("SLO attainment (% of requests)")
    ax.set_title("Cost vs SLO attainment: each policy over its own knob", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(**_LEGEND_OUTSIDE)
    return _save(fig, plt, path)


def frontier_curves(limits: Limits) -> dict[str, list[tuple[float, float]]]:
    """Per policy, its (attainment, cost) points in the order its curve joins them: by attainment (then cost), since
    a knob moves attainment and cost need not follow it monotonically.

    Args:
        limits: The trace's limits, with every policy's frontier points.

    Returns:
        Each policy's (attainment, cost) points, sorted by attainment then cost.
    """
    curves: dict[str, list[tuple[float, float]]] = {}
    for p in limits.frontier:
        curves.setdefault(p.policy, []).append((p.attainment, p.cost))
    return {policy: sorted(points) for policy, points in curves.items()}


def _save(fig: Any, plt: Any, path: pathlib.Path) -> pathlib.Path:
    fig.tight_layout()
    fig.savefig(path, dpi=72, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


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
        row: dict[str, Any] = {"policy": policy_label(o.policy), "SLO attainment": f"{o.attainment:.1%}"}
        for model, value in o.attainment_by_model.items():
            row[f"attainment {model}"] = f"{value:.1%}"
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
    """Per model: the SLO targets attainment is judged against, the ones the policies size for, the router, the ceiling.

    Args:
        scenario: The replayed scenario (models, SLOs, sizing SLOs, routing).
        limits: The trace's limits, for the per-model attainment ceiling; None to leave that column out.

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
            row["attainment ceiling"] = f"{limits.ceiling.get(model, float('nan')):.1%}"
        rows.append(row)
    return rows


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
    (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    images = "".join(
        f'<h2>{html.escape(name.replace("_", " "))}</h2><img alt="{name}" src="data:image/png;base64,'
        f'{base64.b64encode(path.read_bytes()).decode()}"/>'
        for name, path in plots.items()
    )
    settings_html = "".join(f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>" for k, v in settings.items())
    ceiling = (
        (
            f"<p><b>Attainment ceiling of this trace: {limits.ceiling['all']:.1%}</b> of requests. "
            f"{html.escape(CEILING_DEFINITION)}</p><p>{html.escape(ORACLE_DEFINITION)}</p>"
        )
        if limits is not None
        else ""
    )
    (directory / "report.html").write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}td,th{border:1px solid #ccc;padding:2px 6px}"
        "table{border-collapse:collapse;margin:6px 0}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>"
        f"<h2>What is measured</h2>{_html_table(targets_table(scenario, limits))}"
        f"<p>{html.escape(ATTAINMENT_DEFINITION)}</p>{ceiling}<p>{html.escape(cost_unit(scenario))}</p>"
        f"<h2>Settings</h2><ul>{settings_html}</ul>"
        f"<h2>Policies</h2>{_html_table(summary_table(outcomes, limits))}{images}</body></html>\n"
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
