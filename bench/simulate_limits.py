"""Benchmark: the limits the policy comparison is judged against -- the attainment ceiling of the
trace, the clairvoyant schedule's cost-attainment curve (policy ``oracle``), each policy's cost as a ratio to the
schedule's at equal attainment, and how much of the gap the gateway's router closes.

    python -m bench.simulate_limits [--trace /work/shared/data/azure-llm-inference-2023-conv.csv] [--no-write]

Writes its section of docs/benchmarks.md (between the simulate-limits-bench markers) and the frontier plot
docs/simulate/limits_frontier.png, and prints the tables.

The simulation-cluster rows replay bench.simulate's scenario (``simulation_scenario``: the shipped defaults,
seed 0, reactive policies starting from static peak's allocation), so their figures are the acceptance
block's under the least-outstanding router. The inventory-short example cluster keeps the cold start from
the manifests' replicas, as bench.simulate's five-policy comparison on it does.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time
from typing import Any

from bench.engine import machine, write_section
from bench.simulate import simulation_scenario
from engine.perf.prompt_split import ROUTERS
from engine.simulate.frontier import Limits, knob_settings, limits, with_oracle_curves
from engine.simulate.oracle import attainment_ceiling
from engine.simulate.outcome import PolicyOutcome, summarize_outcome
from engine.simulate.policies import run_policy
from engine.simulate.records import SimConfig
from engine.simulate.scenario import Scenario, build_scenario, served_models
from engine.simulate.trace import TraceShape
from flows.parameters import SYSTEM_NAMESPACE
from tasks.simulate import read_description, read_trace
from tasks.simulate_plots import plot_frontier, policy_label

REPO = pathlib.Path(__file__).resolve().parents[1]
PLOTS = REPO / "docs" / "simulate"
START, END = "<!-- simulate-limits-bench:start -->", "<!-- simulate-limits-bench:end -->"
DEFAULT_TRACE = "/work/shared/data/azure-llm-inference-2023-conv.csv"
SIMULATION = REPO / "deployments" / "simulation"
SCENARIOS = (
    ("deployments/simulation, full trace at 1x", SIMULATION, 1.0, 1.0),
    ("deployments/simulation, full trace at 2x rate", SIMULATION, 1.0, 2.0),
    ("deployments/examples (inventory-short), full trace compressed x1.2", REPO / "deployments" / "examples", 1.2, 1.0),
)
COMPARED = ("modelplane", "static-peak", "wva-greedy", "hpa")


def scenario_for(cluster: pathlib.Path, trace_path: str, compression: float, rate: float, router: str) -> Scenario:
    """The cluster and the trace (split evenly between the models, seed 0) with the given router.

    On the simulation cluster it is the acceptance rows' scenario (warm start from static peak); on the
    example cluster the cold start from the manifests' replicas, as in bench.simulate's comparison there.
    """
    if cluster == SIMULATION and compression == 1.0:
        return simulation_scenario(trace_path, rate_scale=rate, router=router)
    description = read_description(str(cluster), SYSTEM_NAMESPACE)
    models = served_models(description)
    trace = read_trace(trace_path, TraceShape({m: 1.0 for m in models}, compression=compression, rate_scale=rate))
    return build_scenario(description, trace, SimConfig(interval_s=60.0, startup_delay_s=120.0), router=router)


def replay(name: str, scenario: Scenario) -> tuple[PolicyOutcome, float]:
    started = time.perf_counter()
    outcome = summarize_outcome(name, scenario, run_policy(name, scenario))
    return outcome, time.perf_counter() - started


def measure(label: str, cluster: pathlib.Path, trace_path: str, compression: float, rate: float) -> dict[str, Any]:
    """Per router: the compared policies as configured and the oracle over its target attainment."""
    rows: dict[str, Any] = {"label": label, "routers": {}}
    for router in ROUTERS:
        started = time.perf_counter()
        scenario = with_oracle_curves(scenario_for(cluster, trace_path, compression, rate, router))
        curves_s = time.perf_counter() - started
        configured = []
        seconds = {}
        for name in (*COMPARED, "oracle"):
            outcome, seconds[name] = replay(name, scenario)
            configured.append(outcome)
            print(
                f"{label} | {router} | {name}: {outcome.attainment:.1%} at {outcome.cost:.1f} ({seconds[name]:.1f} s)",
                flush=True,
            )
        swept = []
        for setting, tuned in knob_settings(scenario, "oracle"):
            outcome, _ = replay("oracle", tuned)
            swept.append(("oracle", setting, outcome))
            print(f"{label} | {router} | oracle {setting}: {outcome.attainment:.1%} at {outcome.cost:.1f}", flush=True)
        bounds = limits(scenario, configured, swept)
        rows["routers"][router] = {"outcomes": configured, "limits": bounds, "seconds": seconds, "curves_s": curves_s}
        rows["requests"] = len(scenario.trace)
        rows["ceiling"] = bounds.ceiling
    return rows


def frontier_of(cluster: pathlib.Path, trace_path: str, router: str) -> tuple[Limits, float]:
    """Every policy over its own knob on the simulation cluster at 1x (the plot)."""
    started = time.perf_counter()
    scenario = with_oracle_curves(scenario_for(cluster, trace_path, 1.0, 1.0, router))
    configured = [replay(name, scenario)[0] for name in (*COMPARED, "oracle")]
    swept = [
        (name, setting, replay(name, tuned)[0])
        for name in (*COMPARED, "oracle")
        for setting, tuned in knob_settings(scenario, name)
    ]
    return limits(scenario, configured, swept), time.perf_counter() - started


def long_prompt_ceiling(trace_path: str) -> dict[str, float]:
    """The ceiling of the long-prompt variant (every prompt x3) on the simulation cluster."""
    scenario = scenario_for(SIMULATION, trace_path, 1.0, 1.0, "auto")
    longer = dataclasses.replace(scenario.trace, in_tokens=scenario.trace.in_tokens * 3)
    return attainment_ceiling(dataclasses.replace(scenario, trace=longer))


def ratio(bounds: Limits, o: PolicyOutcome) -> str:
    value = bounds.cost_ratio(o.attainment, o.cost)
    return f"{value:.2f}x" if value is not None else "outside"


def render(
    command: str, measured: list[dict[str, Any]], frontier: Limits, frontier_s: float, long_ceiling: dict[str, float]
) -> str:
    lines = [
        START,
        "",
        f"Produced by `{command}` on {machine(('numpy', 'PuLP', 'highspy', 'matplotlib'))}.",
        "",
        "## Limits: attainment ceiling, the clairvoyant schedule, routers",
        "",
        "Attainment = share of requests with TTFT and mean ITL within their model's Premium targets (llama 500 ms / "
        "24 ms, granite 800 ms / 40 ms). Ceiling = share that can meet them at all (fastest variant, batch 1). "
        "Cost = accelerator-hours x unit cost (A100 40, H100 75, L40S 22 per hour). `cost / clairvoyant` = the cost over "
        "the clairvoyant schedule's (policy `oracle`) at the same attainment, interpolated between its points (targets "
        "60-95 %); `outside` = the attainment is outside the range its points span. The clairvoyant schedule is a "
        "reference, not a lower bound: its per-replica capacities are measured on single-variant pools under Poisson "
        "arrivals, so a policy can cost less than it (a ratio below 1). Routers ([the simulator](simulate.md#routers)): "
        "`least-outstanding` (fewest requests running and queued), `least-load` (llm-d / Kthena: queue + KV-cache utilisation), "
        "`least-latency` (predicted TTFT/ITL against the SLO). Default settings (Modelplane p80 of the achievable "
        "requests), seed 0; the clairvoyant schedule sized for 90 %. On `deployments/simulation` every reactive policy starts "
        "from static peak's allocation (`Scenario.start_from_static`), as in the acceptance rows below, so the "
        "least-outstanding row repeats their seed-0 figures; on `deployments/examples` every policy starts cold "
        "from the manifests' replicas (the inventory-short scenario of the five-policy comparison).",
        "",
    ]
    for block in measured:
        ceiling = block["ceiling"]
        lines += [
            f"### {block['label']}",
            "",
            f"{block['requests']:,} requests; attainment ceiling {ceiling['all']:.2%} ("
            + ", ".join(f"{m.split('/')[-1]} {v:.2%}" for m, v in ceiling.items() if m != "all")
            + ").",
            "",
            "| router | "
            + " | ".join(f"{p} attainment / cost / cost vs clairvoyant" for p in COMPARED)
            + " | clairvoyant schedule (90 %) attainment / cost | clairvoyant schedule's points (attainment: cost) |",
            "|---|" + "---|" * (len(COMPARED) + 2),
        ]
        for router, data in block["routers"].items():
            by = {o.policy: o for o in data["outcomes"]}
            cells = [f"{by[p].attainment:.1%} / {by[p].cost:.1f} / {ratio(data['limits'], by[p])}" for p in COMPARED]
            oracle = by["oracle"]
            points = "; ".join(f"{a:.1%}: {c:.0f}" for a, c in sorted(data["limits"].oracle_points()))
            lines.append(
                f"| {router} | " + " | ".join(cells) + f" | {oracle.attainment:.1%} / {oracle.cost:.1f} | {points} |"
            )
        lines += [
            "",
            "Seconds per replay (least-outstanding): "
            + ", ".join(f"{p} {s:.1f}" for p, s in block["routers"]["least-outstanding"]["seconds"].items())
            + f"; the clairvoyant schedule's capacity measurement {block['routers']['least-outstanding']['curves_s']:.1f} s.",
            "",
        ]
    lines += [
        f"Long-prompt variant (every prompt x3, simulation cluster): attainment ceiling {long_ceiling['all']:.1%} ("
        + ", ".join(f"{m.split('/')[-1]} {v:.1%}" for m, v in long_ceiling.items() if m != "all")
        + ").",
        "",
        "### Every policy over its own knob (simulation cluster, full trace at 1x, least-outstanding router)",
        "",
        f"All {len(frontier.frontier)} replays took {frontier_s:.0f} s.",
        "",
        "| policy | setting | SLO attainment | cost | cost / clairvoyant | replica changes |",
        "|---|---|---|---|---|---|",
    ]
    for p in sorted(frontier.frontier, key=lambda p: (p.policy, p.attainment)):
        value = frontier.cost_ratio(p.attainment, p.cost)
        lines.append(
            f"| {policy_label(p.policy)} | {p.setting} | {p.attainment:.1%} | {p.cost:.1f} | "
            f"{f'{value:.2f}x' if value is not None else 'outside'} | {p.replica_changes} |"
        )
    lines += [
        "",
        "![cost against attainment, the clairvoyant schedule among the curves](simulate/limits_frontier.png)",
        "",
        END,
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=DEFAULT_TRACE)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    command = "python -m bench.simulate_limits" + (f" --trace {args.trace}" if args.trace != DEFAULT_TRACE else "")
    measured = [
        measure(label, cluster, args.trace, compression, rate) for label, cluster, compression, rate in SCENARIOS
    ]
    frontier, frontier_s = frontier_of(SIMULATION, args.trace, "least-outstanding")
    section = render(command, measured, frontier, frontier_s, long_prompt_ceiling(args.trace))
    print(section)
    if not args.no_write:
        PLOTS.mkdir(parents=True, exist_ok=True)
        plot_frontier(frontier, PLOTS / "limits_frontier.png")
        write_section(section, START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
