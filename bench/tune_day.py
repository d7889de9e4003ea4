"""Benchmark: how long the tune flow's sweep takes on a day of traffic.

    python -m bench.tune_day [--trace /work/shared/data/azure-llm-inference-2023-conv.csv] [--workers 2] [--no-write]

A day is the conversation trace played end to end for 24 hours (:func:`bench.simulate.repeated`: no silent
minute at the seams) under a day-shaped envelope (floor 0.2, one period per
day), split between the two models of deployments/simulation: two model-days. Every candidate of
:func:`engine.simulate.tune.candidates` is replayed on it as the tune flow does (the flow runs them as Prefect tasks
on two threads; here on ``--workers`` processes), and the table gives each candidate's replay time (CPU seconds in
its process) and the sweep's wall time.

Writes its section of docs/benchmarks.md (between the tune-day markers) and prints it.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.engine import machine, write_section
from bench.simulate import DEFAULT_TRACE, SIMULATION, load_average, repeated
from engine.simulate.outcome import summarize_outcome
from engine.simulate.policies import run_policy
from engine.simulate.records import SimConfig
from engine.simulate.scenario import Scenario, build_scenario, served_models
from engine.simulate.trace import TraceShape, parse_trace_rows, shape_trace
from engine.simulate.tune import Candidate, candidates, interpolated_floors, with_candidate
from flows.parameters import SIMULATE_INTERVAL_S, SIMULATE_STARTUP_DELAY_S, SYSTEM_NAMESPACE
from tasks.simulate import read_description

START, END = "<!-- tune-day:start -->", "<!-- tune-day:end -->"
DAY_S = 86400.0


def day_scenario(trace_path: str, seed: int = 0) -> Scenario:
    """The trace played end to end over a day, cut at 24 hours, thinned to a day shape (floor 0.2), on
    deployments/simulation."""
    with open(trace_path, newline="") as handle:
        arrival, prompt, output = repeated(*parse_trace_rows(csv.reader(handle)), DAY_S)
    day = arrival < DAY_S
    description = read_description(str(SIMULATION), SYSTEM_NAMESPACE)
    shape = TraceShape({m: 1.0 for m in served_models(description)}, seed=seed, wave_floor=0.2, wave_period_s=DAY_S)
    trace = shape_trace(arrival[day], prompt[day], output[day], shape)
    config = SimConfig(interval_s=SIMULATE_INTERVAL_S, startup_delay_s=SIMULATE_STARTUP_DELAY_S, seed=seed)
    return dataclasses.replace(build_scenario(description, trace, config), start_from_static=True)


def replay(job: tuple[str, Candidate]) -> dict[str, Any]:
    """One candidate's replay of the day, as the tune flow's task does; its CPU time in this process."""
    trace_path, candidate = job
    scenario = day_scenario(trace_path)
    started = time.process_time()
    tuned = with_candidate(scenario, candidate)
    outcome = summarize_outcome("modelplane", tuned, run_policy("modelplane", tuned))
    return {
        "candidate": candidate.name,
        "cpu_s": time.process_time() - started,
        "attainment": outcome.attainment,
        "cost": outcome.cost,
        "outcome": outcome,
    }


def render(rows: list[dict[str, Any]], requests: int, wall_s: float, workers: int, command: str, load: str) -> str:
    """The section: one row per candidate, then the sweep."""
    lines = [
        START,
        "## The tune sweep of a day",
        "",
        f"`{command}` ({machine()}). A day of the conversation trace (played end to end for 24 hours, day-shaped with a "
        f"floor of 0.2) on deployments/simulation: {requests:,} requests over its two models (two model-days). Each "
        "candidate of the tune flow replayed once, as the flow does (a floor named with a model is the flow's second round, "
        "interpolated between the two floors that bracket that model's target; its attainment and cost are the "
        "whole cluster's in that replay); *replay* is the CPU time of that replay in its "
        f"process, *wall* the whole sweep on {workers} processes (the flow runs its replays on two threads, so a "
        "nightly run takes about the sum of the replays divided by the cores it gets).",
        "",
        "| candidate | replay (CPU s) | attainment | cost |",
        "|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['candidate']} | {row['cpu_s']:,.0f} | {100 * row['attainment']:.1f} % | {row['cost']:,.1f} |"
        )
    total = sum(row["cpu_s"] for row in rows)
    lines += [
        "",
        f"Sum of the replays: {total:,.0f} CPU s, about {total / workers:,.0f} s on {workers} idle cores; the sweep's "
        f"wall time here: {wall_s:,.0f} s (load average {load} when it ended).",
        END,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trace", default=DEFAULT_TRACE)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="print the section, do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    scenario = day_scenario(args.trace)
    grid = candidates(scenario)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(replay, [(args.trace, candidate) for candidate in grid]))
        # The flow's second round: a floor between the two that bracket a model's target, for that model.
        between = interpolated_floors(scenario, [(c, row["outcome"]) for c, row in zip(grid, rows)])
        rows += [
            {**row, "candidate": f"{row['candidate']} ({', '.join(sorted(c.models or ()))})"}
            for c, row in zip(between, pool.map(replay, [(args.trace, candidate) for candidate in between]))
        ]
    wall = time.perf_counter() - started
    section = render(rows, len(scenario.trace), wall, args.workers, "python -m bench.tune_day", load_average())
    sys.stdout.write(section)
    if not args.no_write:
        write_section(section, START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
