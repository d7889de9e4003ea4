"""Benchmark: the tail sizing model against the simulator, by pool size.

    python -m bench.tail_model [--trace /work/shared/data/azure-llm-inference-2023-conv.csv] [--requests 6000]
                               [--workers 2] [--no-write]

Model-based sizing asks :func:`engine.perf.tail_sizing.ttft_attainment` what share of a model's requests a pool of
replicas serves within the TTFT target at a per-replica rate; the attainment loop corrects whatever that answer
gets wrong.  This measures how wrong it is where sizing uses it: for every variant of deployments/simulation, at
the per-replica rate tail sizing sizes one replica for at p95, p90 and p80
(:func:`engine.perf.tail_sizing.tail_max_rate`: where the model puts that share of the achievable requests, those a
replica can prefill within the target alone, within the target), a pool of 1-16 replicas is replayed in the
simulator with Poisson arrivals and requests drawn from the trace's for that model (the least-outstanding router,
the first tenth left out as warm-up), and its TTFT attainment is set beside the model's for the same pool.

Writes its section of docs/benchmarks.md (between the tail-model markers) and prints it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from bench.engine import machine, publish_section
from bench.simulate import DEFAULT_TRACE, simulation_scenario
from engine.perf.queueing import Workload
from engine.perf.tail_sizing import PromptDistribution, tail_max_rate, ttft_attainment
from engine.simulate.policies import prompt_distribution
from engine.simulate.records import SimConfig, Trace, VariantModel
from engine.simulate.replay import simulate
from engine.simulate.scenario import Scenario
from engine.simulate.windows import PROMPT_TOKEN_BUCKETS

START, END = "<!-- tail-model:start -->", "<!-- tail-model:end -->"
POOLS = (1, 2, 4, 8, 16)
SHARES = (0.95, 0.90, 0.80)
"""The operating points: the sizing percentiles, as shares of the achievable requests within the target."""


def model_requests(scenario: Scenario, variant: VariantModel) -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output lengths of the trace's requests for the variant's model."""
    trace = scenario.trace
    mask = trace.model_index == trace.models.index(variant.model)
    return trace.in_tokens[mask], trace.out_tokens[mask]


def prompt_histogram(prompts: np.ndarray) -> PromptDistribution:
    """The prompts as the optimizer reads them from vLLM (:func:`engine.simulate.policies.prompt_distribution`):
    cumulative counts at vLLM's buckets, the shape inside them fitted to the mean prompt."""
    counts = [int((prompts <= bound).sum()) for bound in PROMPT_TOKEN_BUCKETS] + [len(prompts)]
    histogram = prompt_distribution(counts)
    assert histogram is not None, "no prompts"
    return histogram.with_mean(float(prompts.mean()))


def replay_pool(job: tuple[str, str, float, int, int]) -> float:
    """TTFT attainment of ``pool`` replicas of one variant at ``rate`` req/s per replica in the simulator."""
    trace_path, key, rate, pool, requests = job
    scenario = simulation_scenario(trace_path, seed=0)
    variant = next(v for v in scenario.variants if v.key == key)
    prompts, outputs = model_requests(scenario, variant)
    rng = np.random.default_rng(0)
    pick = rng.integers(0, len(prompts), requests)
    arrivals = np.cumsum(rng.exponential(1.0, requests)) / (rate * pool)
    sample = Trace(arrivals, prompts[pick], outputs[pick], np.zeros(requests, dtype=np.int64), (variant.model,))
    config = SimConfig(interval_s=max(float(arrivals[-1]), 1.0) * 2, horizon_s=float(arrivals[-1]))
    result = simulate([variant], sample, config, {variant.key: pool}, routing=scenario.routing)
    warm = arrivals >= 0.1 * arrivals[-1]
    within = result.completed & (result.ttft_s * 1000.0 <= scenario.slos[variant.model].ttft_ms)
    return float(within[warm].mean())


def bench(trace_path: str, requests: int, workers: int) -> list[dict[str, Any]]:
    """One row per variant and operating point: the rate, and each pool's simulated and modelled attainment."""
    scenario = simulation_scenario(trace_path, seed=0)
    points = []
    for variant in sorted(scenario.variants, key=lambda v: v.key):
        prompts, outputs = model_requests(scenario, variant)
        histogram, workload = prompt_histogram(prompts), Workload(float(prompts.mean()), float(outputs.mean()))
        ttft_ms = scenario.slos[variant.model].ttft_ms
        for share in SHARES:
            rate = tail_max_rate(variant.profile, workload, scenario.slos[variant.model], histogram, 100 * share)
            if rate is None:  # no TTFT target, or no prompt a replica serves within it
                continue
            modelled = [ttft_attainment(variant.profile, workload, histogram, ttft_ms, rate, pool) for pool in POOLS]
            points.append(
                {
                    "variant": variant.key.rsplit("/", 1)[-1],
                    "key": variant.key,
                    "share": share,
                    "rate": rate,
                    "model": modelled,
                }
            )
    jobs = [(trace_path, p["key"], p["rate"], pool, requests) for p in points for pool in POOLS]
    with ProcessPoolExecutor(max_workers=workers) as pool_executor:
        simulated = list(pool_executor.map(replay_pool, jobs))
    for index, point in enumerate(points):
        point["simulated"] = simulated[index * len(POOLS) : (index + 1) * len(POOLS)]
    return points


def render(points: Sequence[dict[str, Any]], command: str, requests: int, elapsed_s: float) -> str:
    """The section: one row per variant and operating point, each pool's cell simulated / modelled."""
    errors = [100 * (m - s) for p in points for m, s in zip(p["model"], p["simulated"])]
    lines = [
        START,
        "## Tail sizing model against the simulator, by pool size",
        "",
        f"`{command}` ({machine()}; {elapsed_s:.0f} s). Every variant of deployments/simulation with the conversation "
        "trace's requests for its model; *achievable* = the requests a replica prefills within the TTFT target alone "
        "(`ttft_ceiling`). Each row is one per-replica rate: the rate tail sizing sizes one replica for at that "
        "percentile (`engine.perf.tail_sizing.tail_max_rate`: where the model, `ttft_attainment`, puts that share of "
        "the achievable requests within the target on one replica). Each cell is a pool of that many replicas at that rate per replica, {requests:,} requests "
        "drawn from the trace's with Poisson arrivals, the least-outstanding router, the first tenth left out: the "
        "share within the TTFT target, simulated / modelled (the model's error in points). The attainment loop "
        "corrects the model's error as it runs; this is how far it has to.",
        "",
        "| variant | sized for | rate per replica | "
        + " | ".join(f"{n} replica{'s' if n > 1 else ''}" for n in POOLS)
        + " |",
        "|---|---|---|" + "---|" * len(POOLS),
    ]
    for p in points:
        cells = " | ".join(
            f"{100 * s:.1f} / {100 * m:.1f} ({100 * (m - s):+.1f})" for s, m in zip(p["simulated"], p["model"])
        )
        lines.append(f"| {p['variant']} | p{100 * p['share']:g} | {p['rate']:.2f} req/s | {cells} |")
    lines += [
        "",
        f"Over the {len(errors)} cells the model is {np.mean(np.abs(errors)):.1f} points from the simulator on average "
        f"(from {min(errors):+.1f} to {max(errors):+.1f}; negative: the model expects less than the simulator attains, "
        "and sizing buys more replicas than needed).",
        "",
        END,
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=DEFAULT_TRACE)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    command = "python -m bench.tail_model" + (f" --requests {args.requests}" if args.requests != 6000 else "")
    started = time.perf_counter()
    points = bench(args.trace, args.requests, args.workers)
    section = render(points, command, args.requests, time.perf_counter() - started)
    publish_section(section, START, END, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
