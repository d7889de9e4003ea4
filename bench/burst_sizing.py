"""Benchmark: what sizing for sub-minute bursts (``modelplane.io/burst-sizing: "true"``) adds on top of the
attainment loop, in attainment and in cost.

    python -m bench.burst_sizing [--trace /work/shared/data/azure-llm-inference-2023-conv.csv] [--seeds 0 1 2]
                                 [--workers 2] [--no-write]

Every row and target of ``bench.attainment`` (deployments/simulation, the reactive policies starting from static
peak, the CLI default) is replayed twice with the Modelplane policy: as shipped, and with every
VariantAutoscaling annotated ``modelplane.io/burst-sizing: "true"``. The table gives the means over the rows of
each kind (steady or bursty, tuning or held out) and over the seeds.

Writes its section of docs/benchmarks.md (between the burst-sizing markers) and prints it.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.attainment import TARGETS, TRACES, replay_modelplane, replay_parser
from bench.engine import machine, publish_section, reproduce
from engine.optimize.spec import ANNOTATION_BURST_SIZING

START, END = "<!-- burst-sizing:start -->", "<!-- burst-sizing:end -->"
SETTINGS: dict[str, dict[str, str]] = {"as shipped": {}, "burst sizing": {ANNOTATION_BURST_SIZING: "true"}}


def bench(trace_path: str, seeds: list[int], workers: int) -> dict[tuple[str, float], dict[str, list[dict[str, Any]]]]:
    """Per (kind of row, target): the replayed cells of every seed and row of that kind, per setting."""
    jobs = [
        (label, tuning, shape, seed, target) for label, tuning, shape in TRACES for seed in seeds for target in TARGETS
    ]
    cells: dict[tuple[str, float], dict[str, list[dict[str, Any]]]] = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for name, annotations in SETTINGS.items():
            replay = functools.partial(replay_modelplane, annotations=annotations)
            replayed = pool.map(
                replay, [(trace_path, shape, seed, "static", target) for _, _, shape, seed, target in jobs]
            )
            for (label, tuning, _, _, target), cell in zip(jobs, replayed):
                kind = f"{'bursty' if label.startswith('bursty') else 'steady and day-shaped'}, {'tuning' if tuning else 'held out'}"
                cells.setdefault((kind, target), {}).setdefault(name, []).append(cell)
    return cells


def render(
    cells: dict[tuple[str, float], dict[str, list[dict[str, Any]]]], command: str, seeds: list[int], elapsed_s: float
) -> str:
    """The section: one row per kind of trace and target, attainment and cost as shipped and with burst sizing."""
    lines = [
        START,
        "## Sizing for sub-minute bursts (`modelplane.io/burst-sizing`)",
        "",
        f"`{command}` ({machine()}; {elapsed_s:.0f} s). Every trace and target of the attainment "
        f"table above (seeds {', '.join(map(str, seeds))}, the reactive policies starting from static peak), replayed "
        'as shipped and with every VariantAutoscaling annotated `modelplane.io/burst-sizing: "true"`; means over '
        "the traces of each kind and the seeds. *Attained* is over all requests; *cost* the accelerator cost of the "
        "replay.",
        "",
        "| traces | target | attained as shipped | attained with burst sizing | cost as shipped | cost with burst sizing | cost change |",
        "|---|---|---|---|---|---|---|",
    ]
    for (kind, target), by_setting in sorted(cells.items(), key=lambda item: (item[0][0], item[0][1])):
        shipped, burst = by_setting["as shipped"], by_setting["burst sizing"]
        attained = [statistics.fmean(c["attained"] for c in group) * 100 for group in (shipped, burst)]
        cost = [statistics.fmean(c["cost"] for c in group) for group in (shipped, burst)]
        lines.append(
            f"| {kind} ({len(shipped) // len(seeds)} traces) | {target * 100:.0f} % | {attained[0]:.1f} % | "
            f"{attained[1]:.1f} % | {cost[0]:,.1f} | {cost[1]:,.1f} | {100 * (cost[1] / cost[0] - 1):+.0f} % |"
        )
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = replay_parser(__doc__)
    args = parser.parse_args(argv)
    command = reproduce("bench.burst_sizing", parser, args, "seeds")
    started = time.perf_counter()
    cells = bench(args.trace, args.seeds, args.workers)
    section = render(cells, command, args.seeds, time.perf_counter() - started)
    publish_section(section, START, END, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
