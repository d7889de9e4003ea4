"""The simulate report's plots (PNG): load against each policy's capacity, accelerators in use, latency
percentiles, cumulative cost and the cost-attainment frontier, with the labels and line styles that tell the
policies apart in every table and legend.  Plots use matplotlib's Agg backend (no display).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from engine.simulate.frontier import Limits
from engine.simulate.outcome import PolicyOutcome
from engine.simulate.scenario import Scenario
from tasks.clients.files import open_own

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
    with os.fdopen(open_own(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as handle:  # never via a link
        fig.savefig(handle, format="png", dpi=72, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path
