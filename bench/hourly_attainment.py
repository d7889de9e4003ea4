"""Benchmark: what the attainment loop attains hour by hour once it has run for an hour.

    python -m bench.hourly_attainment [--trace /work/shared/data/azure-llm-inference-2023-conv.csv] [--hours 3]
                                      [--seeds 0 1 2] [--workers 2] [--no-write]

``bench.attainment`` replays traces of under an hour, and the loop's evaluation window is an hour: every row there
is the loop's first window, which starts with no measurement at all and from static peak's allocation. A cluster
runs the loop for days, so this benchmark replays ``--hours`` hours of each kind of traffic with the Modelplane
policy and its shipped defaults over all of it (deployments/simulation, the reactive policies starting from static
peak, the CLI default; each target set on every VariantAutoscaling), and judges the hours after the first:

* steady traffic: the conversation trace played end to end for the hours (at 1x, 2x, and 2x day-shaped with one
  period over the whole replay). Its first half-hour is the tuning rows' traffic, the rest held out;
* bursty traffic: every bursty variant's process drawn for the hours (the same parameters and rate, one seeded
  draw).

The loop keeps its state from one hour to the next, as it does in status. Each hour's attainment is that of the
requests arriving in it; each hour's cost that of the accelerators it held.

Writes its section of docs/benchmarks.md (between the hourly-attainment markers) and prints it.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.attainment import (
    STATIC_HEADROOMS,
    TARGETS,
    TOLERANCE,
    against_static,
    economy_verdict,
    replay_parser,
    static_column,
)
from bench.engine import machine, publish_section, reproduce
from bench.simulate import simulation_scenario
from engine.simulate.bursts import BURSTY_HELD_OUT, BURSTY_TUNING
from engine.simulate.oracle import attainment_ceiling
from engine.simulate.outcome import requests_met
from engine.simulate.policies import run_policy
from engine.simulate.scenario import with_scenario_variants, with_slo_attainment

START, END = "<!-- hourly-attainment:start -->", "<!-- hourly-attainment:end -->"
HOUR_S = 3600.0
STEADY: tuple[tuple[str, dict[str, Any]], ...] = (
    ("conversation, 1x", {}),
    ("conversation, 2x", {"rate_scale": 2.0}),
    ("day-shaped, floor 0.2, 2x", {"rate_scale": 2.0, "wave_floor": 0.2}),
)
"""Steady traffic: a label and :func:`bench.simulate.simulation_scenario`'s shaping (played for the hours)."""
MIXED, TUNING, HELD_OUT = "tuning and held out", "tuning", "held out"
VARIANTS: tuple[tuple[str, dict[str, Any], str], ...] = (
    *((label, shape, MIXED) for label, shape in STEADY),
    *((f"bursty {name}", {"bursty": name}, TUNING) for name in BURSTY_TUNING),
    *((f"bursty {name}", {"bursty": name}, HELD_OUT) for name in BURSTY_HELD_OUT),
)
"""(label, shaping, rows): tuning variants chose the loop's constants, held-out ones did not; the steady ones
replay both (the tuning rows are the trace's first half-hour)."""


def for_hours(shape: dict[str, Any], hours: int) -> dict[str, Any]:
    """A variant's shaping for ``hours`` hours: a bursty process drawn that long, or the recorded trace played end
    to end until it covers them, cut at their end."""
    if "bursty" in shape:
        return {**shape, "bursty_minutes": 60 * hours}
    return {**shape, "repeat_for_s": hours * HOUR_S, "duration_s": hours * HOUR_S}


def replay_hours(job: tuple[str, dict[str, Any], int, float, int]) -> list[dict[str, Any]]:
    """One Modelplane replay of a variant for ``hours`` hours at one target: per hour, the share of its requests
    within their SLO (over all models and per model), its cost, and each model's attainment ceiling over the whole
    replay (the share of its requests any variant can serve within the TTFT target at all)."""
    trace_path, shape, seed, target, hours = job
    scenario = simulation_scenario(trace_path, seed=seed, **for_hours(shape, hours))
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
                "requests": int(inside.sum()),
                "by_model": by_model,
                "model_ceilings": {model: ceilings[model] for model in trace.models},
                "cost": result.cost(hour * HOUR_S) - result.cost((hour + 1) * HOUR_S),
            }
        )
    return found


def replay_static_later(job: tuple[str, dict[str, Any], int, float, int]) -> tuple[float, float]:
    """Static peak at one headroom over the same hours: (share of the requests after the first hour within their
    SLO, cost of those hours), the point of its curve the loop's later hours are compared with."""
    trace_path, shape, seed, headroom, hours = job
    scenario = simulation_scenario(trace_path, seed=seed, **for_hours(shape, hours))
    scenario = dataclasses.replace(scenario, static_headroom=headroom)
    result = run_policy("static-peak", scenario)
    later = scenario.trace.arrival_s >= HOUR_S
    return float(requests_met(scenario, result)[later].mean()), result.cost(HOUR_S) - result.cost(hours * HOUR_S)


def bench(
    trace_path: str, seeds: Sequence[int], hours: int, workers: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One row per variant and target with every seed's hours; and per steady variant and target, each seed's later
    hours against static peak's curve over the same hours."""
    keys = [(label, shape, rows, target) for label, shape, rows in VARIANTS for target in TARGETS]
    jobs = [(trace_path, shape, seed, target, hours) for _, shape, _, target in keys for seed in seeds]
    static_keys = [(label, seed, headroom) for label, _ in STEADY for seed in seeds for headroom in STATIC_HEADROOMS]
    shapes = dict(STEADY)
    static_jobs = [(trace_path, shapes[label], seed, headroom, hours) for label, seed, headroom in static_keys]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        replayed = iter(pool.map(replay_hours, jobs))
        rows = [
            {"variant": label, "rows": kind, "target": target, "seeds": [next(replayed) for _ in seeds]}
            for label, _, kind, target in keys
        ]
        static = dict(zip(static_keys, pool.map(replay_static_later, static_jobs)))
    economy = [
        {
            "variant": row["variant"],
            "target": row["target"],
            "cells": [
                against_static(later_hours(seed), [static[(row["variant"], s, h)] for h in STATIC_HEADROOMS])
                for s, seed in zip(seeds, row["seeds"])
            ],
        }
        for row in rows
        if row["rows"] == MIXED
    ]
    return rows, economy


def later_hours(seed: list[dict[str, Any]]) -> dict[str, float]:
    """One seed's hours after the first, together: the share of their requests within their SLO, and their cost."""
    later = seed[1:]
    requests = sum(hour["requests"] for hour in later)
    attained = sum(hour["attained"] * hour["requests"] for hour in later) / requests if requests else float("nan")
    return {"attained": attained, "cost": sum(hour["cost"] for hour in later)}


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
        f"| {row['variant']} | {row['rows']} | {target * 100:.0f} % | "
        + " | ".join(f"{value * 100:.1f} %" for value in by_hour)
        + f" | {within}/{len(later)} | {per_model} | {first_cost:,.1f} | {later_cost:,.1f} |"
    )


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """One sentence per kind of variant: the later hours within 1.5 points, over all requests and per model."""
    parts = []
    for kind, named in (
        (MIXED, "steady traffic"),
        (TUNING, "bursty tuning variants"),
        (HELD_OUT, "bursty held-out variants"),
    ):
        chosen = [row for row in rows if row["rows"] == kind]
        if not chosen:
            continue
        hours = [abs(hour["attained"] - row["target"]) for row in chosen for hour in after_first(row)]
        models = [abs(d) for row in chosen for values in model_deviations(row).values() for d in values]
        parts.append(
            f"{named}: {sum(d <= TOLERANCE for d in hours)} of {len(hours)} "
            f"later hours within 1.5 points over all requests (mean distance {statistics.fmean(hours) * 100:.1f} "
            f"points), {sum(d <= TOLERANCE for d in models)} of {len(models)} model-hours (mean distance "
            f"{statistics.fmean(models) * 100:.1f})"
        )
    return "After the first hour: " + "; ".join(parts) + "."


def economy_row(row: dict[str, Any]) -> str:
    """One steady variant and target after the first hour: the loop's attainment and cost (means over the seeds),
    static peak's cost at the same attainment, and whether every seed cost at most that (the worst ratio)."""
    cells = row["cells"]
    return (
        f"| {row['variant']} | {row['target'] * 100:.0f} % | {statistics.fmean(c['attained'] for c in cells) * 100:.1f} % "
        f"| {statistics.fmean(c['cost'] for c in cells):,.1f} | {static_column(cells)} | {economy_verdict(cells)} |"
    )


def render(
    rows: list[dict[str, Any]],
    economy: list[dict[str, Any]],
    command: str,
    seeds: Sequence[int],
    hours: int,
    elapsed_s: float,
) -> str:
    """The section: one row per variant and target, means over the seeds."""
    hour_columns = " | ".join(f"hour {hour + 1}" for hour in range(hours))
    lines = [
        START,
        "## Attainment hour by hour (the loop running for hours)",
        "",
        f"`{command}` ({machine()}; {elapsed_s:.0f} s). {hours} hours of each traffic: the conversation trace played "
        "end to end (each copy one median gap after the last, so no seam is a silent minute; the day shape one "
        f"period over the {hours} hours), and every bursty variant drawn for the hours (its parameters and rate, one "
        f"draw per seed); seeds {', '.join(map(str, seeds))}, deployments/simulation, the reactive "
        "policies starting from static peak (the CLI default), each target set on every VariantAutoscaling; the "
        "loop keeps its state from hour to hour. *Hour N*: the share of that hour's requests within their SLO, the "
        "mean over the seeds. *Later hours within 1.5 points*: of every seed's hours after the first (the loop has "
        "measured a whole window by then), how many came within 1.5 points of the target over all requests; *per "
        "model*: the same for each model's own requests, and its mean deviation from the target in points, where "
        "the model's attainment ceiling allows the target. *Cost*: accelerator cost per hour, the first hour and "
        "the mean of the later ones. Tuning variants chose the loop's constants; held-out variants did not; the "
        "steady ones hold both (the trace's first half-hour is the tuning rows' traffic).",
        "",
        f"| trace | rows | target | {hour_columns} | later hours within 1.5 points | per model (within, mean "
        "deviation) | cost, hour 1 | cost, later hours |",
        "|---|---|---|" + "---|" * hours + "---|---|---|---|",
    ]
    lines += [table_row(row, hours) for row in rows]
    lines += [
        "",
        summary(rows),
        "",
        "Steady traffic after the first hour against static peak: the loop's later hours together (the share of "
        "their requests within their SLO, and their cost), and static peak's cost at the same attainment over the "
        "same hours, interpolated on its headroom curve (-30 % to +100 %) per seed; *no costlier*: every seed cost "
        "at most that (the worst ratio).",
        "",
        "| trace | target | attained, later hours | cost, later hours | static at equal attainment | no costlier |",
        "|---|---|---|---|---|---|",
        *(economy_row(row) for row in economy),
        "",
        END,
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = replay_parser(__doc__)
    parser.add_argument("--hours", type=int, default=3, help="hours each variant is drawn for (at least 2)")
    args = parser.parse_args(argv)
    if args.hours < 2:
        parser.error("--hours must be at least 2: the first hour is the loop's first window")
    command = reproduce("bench.hourly_attainment", parser, args, "hours", "seeds")
    started = time.perf_counter()
    rows, economy = bench(args.trace, args.seeds, args.hours, args.workers)
    section = render(rows, economy, command, args.seeds, args.hours, time.perf_counter() - started)
    publish_section(section, START, END, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
