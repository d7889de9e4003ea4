"""Benchmark: what the attainment loop attains hour by hour once it has run for an hour, on bursty traffic.

    python -m bench.hourly_attainment [--trace /work/shared/data/azure-llm-inference-2023-conv.csv] [--hours 3]
                                      [--seeds 0 1 2] [--workers 2] [--no-write]

``bench.attainment`` replays 57-minute traces, and the loop's evaluation window is an hour: every row there is the
loop's first window, which starts with no measurement at all. A cluster runs the loop for days, so this benchmark
draws every bursty variant's process for ``--hours`` hours (the same parameters and rate, one seeded draw) and
replays the Modelplane policy with its shipped defaults over all of it (deployments/simulation, the reactive
policies starting from static peak, the CLI default; each target set on every VariantAutoscaling). The loop keeps
its state from one hour to the next, as it does in status. Each hour's attainment is that of the requests
arriving in it; each hour's cost that of the accelerators it held.

Writes its section of docs/benchmarks.md (between the hourly-attainment markers) and prints it.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.attainment import TARGETS, TOLERANCE, replay_parser
from bench.engine import machine, publish_section, reproduce
from bench.simulate import simulation_scenario
from engine.simulate.bursts import BURSTY_HELD_OUT, BURSTY_TUNING
from engine.simulate.oracle import attainment_ceiling
from engine.simulate.outcome import requests_met
from engine.simulate.policies import run_policy
from engine.simulate.scenario import with_scenario_variants, with_slo_attainment

START, END = "<!-- hourly-attainment:start -->", "<!-- hourly-attainment:end -->"
HOUR_S = 3600.0
VARIANTS: tuple[tuple[str, bool], ...] = (
    *((name, True) for name in BURSTY_TUNING),
    *((name, False) for name in BURSTY_HELD_OUT),
)
"""(bursty variant, tuning?): the tuning variants chose the loop's constants; the held-out ones did not."""


def replay_hours(job: tuple[str, str, int, float, int]) -> list[dict[str, Any]]:
    """One Modelplane replay of a variant drawn for ``hours`` hours at one target: per hour, the share of its
    requests within their SLO (over all models and per model), its cost, and each model's attainment ceiling
    over the whole replay (the share of its requests any variant can serve within the TTFT target at all)."""
    trace_path, variant, seed, target, hours = job
    scenario = simulation_scenario(trace_path, seed=seed, bursty=variant, bursty_minutes=60 * hours)
    scenario = with_scenario_variants(scenario, with_slo_attainment(scenario.description, target))
    result = run_policy("modelplane", scenario)
    met = requests_met(scenario, result)
    trace = scenario.trace
    ceilings = attainment_ceiling(scenario)
    found = []
    for hour in range(hours):
        inside = (trace.arrival_s >= hour * HOUR_S) & (trace.arrival_s < (hour + 1) * HOUR_S)
        by_model = {
            model: float(met[inside & (trace.model_index == index)].mean())
            for index, model in enumerate(trace.models)
            if (inside & (trace.model_index == index)).any()
        }
        found.append(
            {
                "attained": float(met[inside].mean()) if inside.any() else float("nan"),
                "by_model": by_model,
                "model_ceilings": {model: ceilings[model] for model in trace.models},
                "cost": result.cost(hour * HOUR_S) - result.cost((hour + 1) * HOUR_S),
            }
        )
    return found


def bench(trace_path: str, seeds: Sequence[int], hours: int, workers: int) -> list[dict[str, Any]]:
    """One row per variant and target: every seed's hours."""
    keys = [(variant, tuning, target) for variant, tuning in VARIANTS for target in TARGETS]
    jobs = [(trace_path, variant, seed, target, hours) for variant, _, target in keys for seed in seeds]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        replayed = iter(pool.map(replay_hours, jobs))
        return [
            {"variant": variant, "tuning": tuning, "target": target, "seeds": [next(replayed) for _ in seeds]}
            for variant, tuning, target in keys
        ]


def after_first(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Every seed's hours after the first (the loop has measured a whole window by then)."""
    return [hour for seed in row["seeds"] for hour in seed[1:]]


def model_deviations(row: dict[str, Any]) -> dict[str, list[float]]:
    """Per model, its attainment less the target in every hour after the first, where the model's ceiling allows
    the target (as ``bench.attainment`` judges a model)."""
    found: dict[str, list[float]] = {}
    for hour in after_first(row):
        for model, attained in hour["by_model"].items():
            if hour["model_ceilings"][model] >= row["target"] + TOLERANCE:
                found.setdefault(model.rsplit("/", 1)[-1], []).append(attained - row["target"])
    return found


def table_row(row: dict[str, Any], hours: int) -> str:
    """One variant and target: the mean of each hour over the seeds, how many later hours came within 1.5 points
    (over all requests, and each model), each model's mean deviation in them, and the cost per hour."""
    target = row["target"]
    by_hour = [statistics.fmean(seed[hour]["attained"] for seed in row["seeds"]) for hour in range(hours)]
    later = after_first(row)
    within = sum(abs(hour["attained"] - target) <= TOLERANCE for hour in later)
    deviations = model_deviations(row)
    per_model = (
        "; ".join(
            f"{model} {sum(abs(d) <= TOLERANCE for d in values)}/{len(values)}, {statistics.fmean(values) * 100:+.1f}"
            for model, values in sorted(deviations.items())
        )
        or "no model's ceiling allows the target"
    )
    first_cost = statistics.fmean(seed[0]["cost"] for seed in row["seeds"])
    later_cost = statistics.fmean(hour["cost"] for hour in later)
    return (
        f"| bursty {row['variant']} | {'tuning' if row['tuning'] else 'held out'} | {target * 100:.0f} % | "
        + " | ".join(f"{value * 100:.1f} %" for value in by_hour)
        + f" | {within}/{len(later)} | {per_model} | {first_cost:,.1f} | {later_cost:,.1f} |"
    )


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """One sentence per kind of variant: the later hours within 1.5 points, over all requests and per model."""
    parts = []
    for tuning in (True, False):
        chosen = [row for row in rows if row["tuning"] is tuning]
        hours = [abs(hour["attained"] - row["target"]) for row in chosen for hour in after_first(row)]
        models = [abs(d) for row in chosen for values in model_deviations(row).values() for d in values]
        parts.append(
            f"{'tuning' if tuning else 'held-out'} variants: {sum(d <= TOLERANCE for d in hours)} of {len(hours)} "
            f"later hours within 1.5 points over all requests (mean distance {statistics.fmean(hours) * 100:.1f} "
            f"points), {sum(d <= TOLERANCE for d in models)} of {len(models)} model-hours (mean distance "
            f"{statistics.fmean(models) * 100:.1f})"
        )
    return "After the first hour: " + "; ".join(parts) + "."


def render(rows: list[dict[str, Any]], command: str, seeds: Sequence[int], hours: int, elapsed_s: float) -> str:
    """The section: one row per variant and target, means over the seeds."""
    hour_columns = " | ".join(f"hour {hour + 1}" for hour in range(hours))
    lines = [
        START,
        "## Attainment hour by hour (bursty traffic, the loop running for hours)",
        "",
        f"`{command}` ({machine()}; {elapsed_s:.0f} s). Every bursty variant drawn for {hours} hours (its parameters "
        f"and rate, one draw per seed; seeds {', '.join(map(str, seeds))}), deployments/simulation, the reactive "
        "policies starting from static peak (the CLI default), each target set on every VariantAutoscaling; the "
        "loop keeps its state from hour to hour. *Hour N*: the share of that hour's requests within their SLO, the "
        "mean over the seeds. *Later hours within 1.5 points*: of every seed's hours after the first (the loop has "
        "measured a whole window by then), how many came within 1.5 points of the target over all requests; *per "
        "model*: the same for each model's own requests, and its mean deviation from the target in points, where "
        "the model's attainment ceiling allows the target. *Cost*: accelerator cost per hour, the first hour and "
        "the mean of the later ones. Tuning variants chose the loop's constants; held-out variants did not.",
        "",
        f"| trace | rows | target | {hour_columns} | later hours within 1.5 points | per model (within, mean "
        "deviation) | cost, hour 1 | cost, later hours |",
        "|---|---|---|" + "---|" * hours + "---|---|---|---|",
    ]
    lines += [table_row(row, hours) for row in rows]
    lines += ["", summary(rows), "", END, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = replay_parser(__doc__)
    parser.add_argument("--hours", type=int, default=3, help="hours each variant is drawn for (at least 2)")
    args = parser.parse_args(argv)
    if args.hours < 2:
        parser.error("--hours must be at least 2: the first hour is the loop's first window")
    command = reproduce("bench.hourly_attainment", parser, args, "hours", "seeds")
    started = time.perf_counter()
    rows = bench(args.trace, args.seeds, args.hours, args.workers)
    section = render(rows, command, args.seeds, args.hours, time.perf_counter() - started)
    publish_section(section, START, END, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
