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
from typing import Any, Sequence

from engine.simulate import Trace
from engine.simulate_policies import DEFAULT_HPA_POLICY, ClusterDescription, PolicyOutcome, Scenario
from engine.simulate_trace import TraceError, TraceShape, parse_trace_rows, shape_trace
from tasks.cluster import connect
from tasks.optimizer import read_cluster_state, read_current_replicas, scale_targets_of


def read_trace(path: str | pathlib.Path, shape: TraceShape) -> Trace:
    """Read a trace CSV and shape it for the simulator; a missing or malformed file raises TraceError."""
    file = pathlib.Path(path)
    if not file.is_file():
        raise TraceError(f"trace file {file} does not exist")
    with file.open(newline="") as handle:
        arrival, prompt, output = parse_trace_rows(csv.reader(handle))
    return shape_trace(arrival, prompt, output, shape)


def read_description(cluster: str, config_namespace: str, namespaces: list[str] | None = None) -> ClusterDescription:
    """The VariantAutoscalings, current replicas, WVA ConfigMaps and the first AutoscalingPolicy of a cluster."""
    conn = connect(cluster)
    state = read_cluster_state.fn(conn, namespaces, config_namespace)
    replicas = read_current_replicas.fn(conn, scale_targets_of(state))
    hpa = next(iter(sorted(state.policies.items())), None)
    return ClusterDescription(
        variants=state.variants,
        current_replicas=replicas.current,
        accelerator_costs=state.accelerator_costs,
        service_classes=state.service_classes,
        saturation_data=state.saturation_data,
        inventory=state.inventory,
        hpa_policy=(hpa[1].get("spec") or DEFAULT_HPA_POLICY) if hpa else DEFAULT_HPA_POLICY,
    )


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

_STYLES = [
    {"lw": 3.0, "ls": "-", "alpha": 0.6}, {"lw": 1.6, "ls": "--"}, {"lw": 1.6, "ls": ":"}, {"lw": 1.2, "ls": "-."},
    {"lw": 1.0, "ls": "-"},
]
_COLORS = {"modelplane": "#1f77b4", "saturation-only": "#ff7f0e", "wva-greedy": "#2ca02c", "hpa": "#d62728", "static-peak": "#7f7f7f"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_load_capacity(outcomes: Sequence[PolicyOutcome], scenario: Scenario, path: pathlib.Path) -> pathlib.Path:
    """Per model: the arrival rate and each policy's provisioned capacity (ready replicas x max rate)."""
    plt = _pyplot()
    models = list(scenario.trace.models)
    fig, axes = plt.subplots(len(models), 1, figsize=(9, 2.6 * len(models)), sharex=True, squeeze=False)
    for ax, model in zip(axes[:, 0], models):
        first = outcomes[0].series
        minutes = [t / 60 for t in first["time_s"]]
        ax.fill_between(minutes, first["load_rps"][model], step="pre", color="#cccccc", label="load")
        for o in outcomes:
            ax.step([t / 60 for t in o.series["time_s"]], o.series["capacity_rps"][model], color=_COLORS.get(o.policy), label=o.policy, lw=1.2)
        ax.set_title(model, fontsize=9)
        ax.set_ylabel("req/s")
    axes[0, 0].legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("minutes")
    fig.suptitle("Load vs provisioned capacity (ready replicas x model max rate at the SLO)", fontsize=10)
    return _save(fig, plt, path)


def plot_replicas(outcomes: Sequence[PolicyOutcome], path: pathlib.Path) -> pathlib.Path:
    """Accelerators in use per type over time, one panel per policy."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(outcomes), 1, figsize=(9, 1.9 * len(outcomes)), sharex=True, squeeze=False)
    for ax, o in zip(axes[:, 0], outcomes):
        minutes = [t / 60 for t in o.series["time_s"]]
        # Distinct styles: types with equal counts would otherwise hide each other.
        for (accelerator, counts), style in zip(o.series["accelerators"].items(), _STYLES):
            ax.step(minutes, counts, label=accelerator, **style)
        ax.set_title(o.policy, fontsize=9)
        ax.set_ylabel("accelerators")
    axes[0, 0].legend(fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("minutes")
    fig.suptitle("Accelerators per type (replicas x accelerators per replica)", fontsize=10)
    return _save(fig, plt, path)


def plot_latency(outcomes: Sequence[PolicyOutcome], scenario: Scenario, path: pathlib.Path) -> pathlib.Path:
    """TTFT and ITL percentiles per policy and model, against the SLO (dashed)."""
    plt = _pyplot()
    models = list(scenario.trace.models)
    fig, axes = plt.subplots(len(models), 2, figsize=(9, 2.6 * len(models)), squeeze=False)
    names = [o.policy for o in outcomes]
    for row, model in enumerate(models):
        slo = scenario.slos[model]
        for col, (metric, target) in enumerate((("ttft", slo.ttft_ms), ("itl", slo.itl_ms))):
            ax = axes[row, col]
            for offset, q in enumerate((50, 90, 99)):
                values = [o.latency_ms[model][f"{metric}_p{q}"] for o in outcomes]
                ax.bar([i + (offset - 1) * 0.27 for i in range(len(names))], values, width=0.27, label=f"p{q}")
            if target:
                ax.axhline(target, color="black", ls="--", lw=1, label="SLO")
            ax.set_yscale("log")
            ax.set_xticks(range(len(names)), names, fontsize=7, rotation=15)
            ax.set_title(f"{model} {metric.upper()} (ms)", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, plt, path)


def plot_cost(outcomes: Sequence[PolicyOutcome], path: pathlib.Path) -> pathlib.Path:
    """Cumulative accelerator cost over time per policy."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for o in outcomes:
        times = o.series["time_s"]
        rate = o.series["cost_per_hour"]
        total, cumulative = 0.0, []
        for i, r in enumerate(rate):
            step = (times[i + 1] - times[i]) if i + 1 < len(times) else 0.0
            total += r * step / 3600.0
            cumulative.append(total)
        ax.plot([t / 60 for t in times], cumulative, color=_COLORS.get(o.policy), label=o.policy)
    ax.set_xlabel("minutes")
    ax.set_ylabel("cost (unit-cost x hours)")
    ax.set_title("Cumulative accelerator cost", fontsize=10)
    ax.legend(fontsize=7, ncol=3)
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: pathlib.Path) -> pathlib.Path:
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path


def summary_table(outcomes: Sequence[PolicyOutcome]) -> list[dict[str, Any]]:
    """One row per policy: attainment, per-model attainment, cost, replica changes, unserved requests."""
    rows = []
    for o in outcomes:
        row: dict[str, Any] = {"policy": o.policy, "SLO attainment": f"{o.attainment:.1%}"}
        for model, value in o.attainment_by_model.items():
            row[f"attainment {model}"] = f"{value:.1%}"
        row.update({"cost": f"{o.cost:.1f}", "replica changes": o.replica_changes, "unserved": f"{o.unserved} ({o.unserved_share:.1%})"})
        rows.append(row)
    return rows


def write_report(
    outcomes: Sequence[PolicyOutcome], scenario: Scenario, directory: pathlib.Path, title: str, settings: dict[str, Any]
) -> dict[str, pathlib.Path]:
    """Write ``summary.json``, four PNG plots and ``report.html`` (plots embedded) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    plots = {
        "load_capacity": plot_load_capacity(outcomes, scenario, directory / "load_capacity.png"),
        "replicas": plot_replicas(outcomes, directory / "replicas.png"),
        "latency": plot_latency(outcomes, scenario, directory / "latency.png"),
        "cost": plot_cost(outcomes, directory / "cost.png"),
    }
    summary = {"settings": settings, "slos": {m: {"ttft_ms": s.ttft_ms, "itl_ms": s.itl_ms} for m, s in scenario.slos.items()},
               "policies": [o.as_json() for o in outcomes]}
    (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    rows = summary_table(outcomes)
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>" for row in rows)
    images = "".join(
        f'<h2>{html.escape(name.replace("_", " "))}</h2><img alt="{name}" src="data:image/png;base64,'
        f'{base64.b64encode(path.read_bytes()).decode()}"/>'
        for name, path in plots.items()
    )
    settings_html = "".join(f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>" for k, v in settings.items())
    (directory / "report.html").write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:960px;margin:auto}td,th{border:1px solid #ccc;padding:2px 6px}"
        "table{border-collapse:collapse}</style></head>"
        f"<body><h1>{html.escape(title)}</h1><ul>{settings_html}</ul><table><tr>{head}</tr>{body}</table>{images}</body></html>\n"
    )
    return {"html": directory / "report.html", "json": directory / "summary.json", **plots}


def markdown_report(outcomes: Sequence[PolicyOutcome], paths: dict[str, pathlib.Path], settings: dict[str, Any]) -> str:
    """The Prefect artifact: settings, the comparison table and the plots inline."""
    rows = summary_table(outcomes)
    lines = ["# Policy comparison", "", *[f"- {k}: {v}" for k, v in settings.items()], "",
             "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in rows]
    lines += ["", f"Full report: `{paths['html']}`", ""]
    for name in ("load_capacity", "replicas", "latency", "cost"):
        data = base64.b64encode(paths[name].read_bytes()).decode()
        lines += [f"![{name}](data:image/png;base64,{data})", ""]
    return "\n".join(lines)
