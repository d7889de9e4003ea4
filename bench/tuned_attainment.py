"""Benchmark: the attainment loop with the nightly tune, on the bursty traces.

    python -m bench.tuned_attainment [--trace /work/shared/data/azure-llm-inference-2023-conv.csv] [--seeds 0 1 2]
                                     [--workers 2] [--traffic log|prometheus] [--no-write]

The attainment loop alone learns only from misses it has already paid for, and a burst larger than any it has seen
finds the capacity of the last one (docs/benchmarks.md, "Attainment tracking"). In production the ``tune``
deployment replays the previous window's traffic every night and writes per model the cheapest setting that met
the target (of those within 10 % of the cheapest, the one attaining least; :mod:`engine.simulate.tune`: the loop,
pinned percentiles, static-peak floors). This benchmark runs that procedure as production does, day after day:
for every bursty trace, seed ``s`` and target, the tune candidates are replayed on *the previous day* (the same
traffic variant drawn with seed ``s + 100``, its own bursts), the choice is written onto the VariantAutoscalings
(:func:`engine.simulate.tune.with_choices`), and the day of seed ``s`` is replayed with it. Nothing here is
chosen by hand: the tune procedure is the shipped one, the held-out variants are tuned only on their own previous
day, as a cluster's would be.

``--traffic`` says what the tune replays of the previous day: ``log`` (the default), the day's requests as a request
log gives them; ``prometheus``, the day as the tune flow rebuilds it without a log (:mod:`engine.simulate.rebuild`)
from what Prometheus keeps of it (:func:`prometheus_view`: requests per minute and the token histograms), with the
flow's calibration (:func:`engine.simulate.tune.calibrations`): the attainment the cluster measured under the
settings that ran (the shipped manifests, the attainment loop: the true day replayed with them) against the replay of
those settings on the rebuilt day.

Static peak's headroom curve on the evaluated day gives the cost static provisioning pays for the same attainment,
as in ``bench.attainment``. Writes its section of docs/benchmarks.md (between the tuned-attainment markers, or the
tuned-prometheus markers) and prints it.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from bench.attainment import (
    TARGETS,
    TRACES,
    replay_cell,
    replay_parser,
    scenario_for,
    static_curves,
    table,
    table_row,
)
from bench.engine import machine, publish_section, reproduce
from bench.simulate import WARMUP_S
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE, PromptDistribution
from engine.simulate.outcome import PolicyOutcome, summarize_outcome
from engine.simulate.policies import prompt_distribution, run_policy
from engine.simulate.rebuild import TRAFFIC_STEP_S, ModelTraffic, rebuild_trace
from engine.simulate.records import Trace
from engine.simulate.scenario import Scenario, build_scenario, with_scenario_variants, with_slo_attainment
from engine.simulate.tune import (
    AS_CONFIGURED,
    COST_TOLERANCE,
    FLOOR_MARGIN,
    MAX_CALIBRATION,
    Calibration,
    Candidate,
    calibrations,
    candidates,
    choose,
    interpolated_floors,
    with_candidate,
    with_choices,
)
from engine.simulate.windows import PROMPT_TOKEN_BUCKETS

MARKERS = {
    "log": ("<!-- tuned-attainment:start -->", "<!-- tuned-attainment:end -->"),
    "prometheus": ("<!-- tuned-prometheus:start -->", "<!-- tuned-prometheus:end -->"),
}
PREVIOUS_DAY_SEED = 100
"""The previous day of seed ``s`` is the same traffic variant drawn with seed ``s + PREVIOUS_DAY_SEED``."""
BURSTY_ROWS = tuple(i for i, (label, _, _) in enumerate(TRACES) if label.startswith("bursty"))


def day(trace_path: str, row: int, seed: int, target: float) -> Scenario:
    """One day of a benchmark trace at one target, started as the CLI starts it (from static peak)."""
    scenario = scenario_for(trace_path, TRACES[row][2], seed, "static")
    return with_scenario_variants(scenario, with_slo_attainment(scenario.description, target))


def prometheus_view(trace: Trace) -> dict[str, ModelTraffic]:
    """What Prometheus keeps of a day's traffic, per model: the requests of each minute (counted at arrival) and the
    prompt- and output-token histograms at vLLM's buckets (``build_1_2_5_buckets``) with their means."""
    minutes = int(trace.duration_s // TRAFFIC_STEP_S) + 1
    found = {}
    for index, model in enumerate(trace.models):
        mine = trace.model_index == index
        counts = np.bincount((trace.arrival_s[mine] // TRAFFIC_STEP_S).astype(int), minlength=minutes)
        found[model] = ModelTraffic(
            tuple(float(c) for c in counts),
            TRAFFIC_STEP_S,
            _histogram(trace.in_tokens[mine]),
            _histogram(trace.out_tokens[mine]),
        )
    return found


def _histogram(lengths: np.ndarray) -> PromptDistribution | None:
    """The lengths as a vLLM token histogram (cumulative counts at its bounds, +Inf, and the mean)."""
    cumulative = [int(np.count_nonzero(lengths <= bound)) for bound in (*PROMPT_TOKEN_BUCKETS, math.inf)]
    found = prompt_distribution(cumulative)
    return found.with_mean(float(lengths.mean())) if found is not None else None


def rebuilt(scenario: Scenario) -> Scenario:
    """The day as the tune flow replays it without a request log: its traffic rebuilt from what Prometheus keeps."""
    trace = rebuild_trace(prometheus_view(scenario.trace), seed=scenario.config.seed)
    again = build_scenario(scenario.description, trace, scenario.config)
    return dataclasses.replace(again, start_from_static=scenario.start_from_static)


def uses_target(candidate: Candidate) -> bool:
    """Whether a candidate's replay depends on the target: a pinned percentile turns the loop off."""
    return ANNOTATION_TTFT_PERCENTILE not in candidate.annotations


def replay_candidate(job: tuple[str, int, int, float, Candidate, str]) -> PolicyOutcome:
    """One tune candidate replayed on a day (its traffic as ``log`` or ``prometheus`` gives it), as the tune flow's
    task replays it."""
    trace_path, row, seed, target, candidate, traffic = job
    scenario = day(trace_path, row, seed, target)
    scenario = with_candidate(rebuilt(scenario) if traffic == "prometheus" else scenario, candidate)
    return summarize_outcome("modelplane", scenario, run_policy("modelplane", scenario), warmup_s=WARMUP_S)


def replay_tuned(job: tuple[str, int, int, float, list[Any]]) -> dict[str, Any]:
    """The day replayed with the choices the previous night's tune wrote."""
    trace_path, row, seed, target, choices = job
    scenario = with_choices(day(trace_path, row, seed, target), choices)
    outcome = summarize_outcome("modelplane", scenario, run_policy("modelplane", scenario), warmup_s=WARMUP_S)
    return {
        **replay_cell(outcome, scenario),
        "chosen": {choice.model.rsplit("/", 1)[-1]: choice.chosen.candidate.name for choice in choices},
    }


def nightly_choices(
    trace_path: str, rows: Sequence[int], seeds: Sequence[int], pool: ProcessPoolExecutor, traffic: str = "log"
) -> dict[tuple[int, int, float], list[Any]]:
    """Per (row, seed, target): what the tune flow chooses on the previous day's traffic (``traffic``: as a request
    log or Prometheus gives it; from Prometheus, calibrated as the flow calibrates). A candidate whose replay does
    not depend on the target (a pinned percentile) is replayed once per day."""
    jobs: dict[tuple[int, int, float | None, str], tuple[str, int, int, float, Candidate, str]] = {}
    measured: dict[tuple[int, int, float], tuple[str, int, int, float, Candidate, str]] = {}
    for row in rows:
        for seed in seeds:
            previous = seed + PREVIOUS_DAY_SEED
            settings = candidates(day(trace_path, row, previous, TARGETS[0]))
            for candidate in [*settings, AS_CONFIGURED] if traffic == "prometheus" else settings:
                for target in TARGETS if uses_target(candidate) else (TARGETS[0],):
                    key = (row, seed, target if uses_target(candidate) else None, candidate.name)
                    jobs[key] = (trace_path, row, previous, target, candidate, traffic)
            if traffic == "prometheus":  # what the cluster attained under the settings that ran: the true day's
                measured.update({(row, seed, t): (trace_path, row, previous, t, AS_CONFIGURED, "log") for t in TARGETS})
    outcomes = dict(zip(jobs, pool.map(replay_candidate, jobs.values())))
    attained = dict(zip(measured, pool.map(replay_candidate, measured.values())))
    grid: dict[tuple[int, int, float], list[tuple[Candidate, PolicyOutcome]]] = {}
    previous_days: dict[tuple[int, int, float], Scenario] = {}
    calibration: dict[tuple[int, int, float], dict[str, Calibration]] = {}
    between: list[tuple[tuple[int, int, float], Candidate]] = []
    for row in rows:
        for seed in seeds:
            for target in TARGETS:
                key = (row, seed, target)
                grid[key] = [
                    (job[4], outcomes[job_key])
                    for job_key, job in jobs.items()
                    if job_key[:2] == (row, seed) and job_key[2] in (target, None)
                ]
                previous_days[key] = day(trace_path, row, seed + PREVIOUS_DAY_SEED, target)
                calibration[key] = _calibration(grid[key], attained.get(key))
                between += [
                    (key, candidate)
                    for candidate in interpolated_floors(previous_days[key], grid[key], calibration[key])
                ]
    # The flow's second round: the floors interpolated between the two that bracket a model's target.
    refined = pool.map(
        replay_candidate,
        [
            (trace_path, row, seed + PREVIOUS_DAY_SEED, target, candidate, traffic)
            for (row, seed, target), candidate in between
        ],
    )
    for (key, candidate), outcome in zip(between, refined):
        grid[key].append((candidate, outcome))
    return {key: choose(previous_days[key], replays, calibration[key]) for key, replays in grid.items()}


def _calibration(
    replays: list[tuple[Candidate, PolicyOutcome]], measured: PolicyOutcome | None
) -> dict[str, Calibration]:
    """The flow's calibration of one day's replays (none without a measurement: a request log's day)."""
    return calibrations(replays, dict(measured.attainment_by_model)) if measured is not None else {}


def bench(
    trace_path: str, rows: Sequence[int], seeds: Sequence[int], workers: int, traffic: str = "log"
) -> list[dict[str, Any]]:
    """Every bursty trace x seed x target: the day replayed with the previous night's choice (made on ``traffic``),
    against static peak's curve on that day."""
    with ProcessPoolExecutor(max_workers=workers) as pool:
        choices = nightly_choices(trace_path, rows, seeds, pool, traffic)
        jobs = [(trace_path, row, seed, target, chosen) for (row, seed, target), chosen in choices.items()]
        tuned = dict(zip(choices, pool.map(replay_tuned, jobs)))
        static = static_curves(trace_path, rows, seeds, "static", pool)
    return table(rows, seeds, tuned, static)


def _chosen(cells: Sequence[dict[str, Any]]) -> str:
    """What the nightly tune chose, per model, on each seed's previous day (the distinct choices)."""
    per_model: dict[str, list[str]] = {}
    for cell in cells:
        for model, name in cell["chosen"].items():
            if name not in per_model.setdefault(model, []):
                per_model[model].append(name)
    return "; ".join(f"{model}: {', '.join(names)}" for model, names in sorted(per_model.items()))


def render(
    rows: list[dict[str, Any]], command: str, seeds: Sequence[int], elapsed_s: float, traffic: str = "log"
) -> str:
    """The section: one row per trace and target, means over the seeds, the worst seed in the verdicts."""
    start, end = MARKERS[traffic]
    title = "Attainment tracking with the nightly tune" + (
        " from Prometheus (bursty traces)" if traffic == "prometheus" else " (bursty traces)"
    )
    source = (
        " The tune replays the previous day as it rebuilds it without a request log: each minute's requests (counted "
        "at arrival) spread evenly over the minute, their prompt and output lengths drawn from the day's token "
        "histograms at vLLM's buckets; and it judges each candidate by its replayed attainment less the calibration "
        "offset: what the replay of the settings that ran (the attainment loop) reached on the rebuilt day, less what "
        "the cluster attained under them (the true day's replay), per model, within "
        f"{100 * MAX_CALIBRATION:g} points."
        if traffic == "prometheus"
        else ""
    )
    lines = [
        start,
        f"## {title}",
        "",
        f"`{command}` ({machine()}; {elapsed_s:.0f} s). deployments/simulation, seeds {', '.join(map(str, seeds))}, "
        "the reactive policies starting from static peak (the CLI default). Each day is replayed with what the tune "
        f"flow chose on the previous day (the same traffic variant drawn with seed + {PREVIOUS_DAY_SEED}): per model "
        "of its candidates (the attainment loop, pinned percentiles p70-p95 for a model with a request "
        "in every minute, which no bursty day has, static-peak floors "
        "x0.6-x2 under the loop, and a floor interpolated between the two that bracket the model's target) that met "
        f"the target there (a floor: within {100 * FLOOR_MARGIN:g} points of it) and cost within "
        f"{100 * COST_TOLERANCE:g} % of the cheapest of them, the one attaining least, else the one that came closest. "
        f"{source} Columns as in "
        "*Attainment tracking* above; *chosen* lists the distinct choices over the seeds.",
        "",
        "| trace | rows | target | attained | cost | static at equal attainment | ceiling | tracks | tracks per model "
        "| no costlier | chosen |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"{table_row(row)} {_chosen(row['cells'])} |" for row in rows]
    lines += ["", end, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = replay_parser(__doc__)
    parser.add_argument("--traffic", choices=sorted(MARKERS), default="log", help="what the tune replays")
    args = parser.parse_args(argv)
    command = reproduce("bench.tuned_attainment", parser, args, "seeds", "traffic")
    started = time.perf_counter()
    rows = bench(args.trace, BURSTY_ROWS, args.seeds, args.workers, args.traffic)
    section = render(rows, command, args.seeds, time.perf_counter() - started, args.traffic)
    publish_section(section, *MARKERS[args.traffic], write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
