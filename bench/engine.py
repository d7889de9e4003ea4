"""Benchmarks of the sizing model and the allocation solver; writes docs/benchmarks.md.

Run from the repository root::

    python -m bench.engine            # full run, rewrites the engine sections of docs/benchmarks.md
    python -m bench.engine --quick    # smaller instances, prints only

This module is the one exception to engine/'s purity (see tests/test_architecture.py): it times
and writes its report.  Nothing else in engine/ imports it.  Only the region between the
``<!-- engine-bench:start -->`` / ``<!-- engine-bench:end -->`` markers of docs/benchmarks.md is
rewritten, so other sections (e.g. the flow-cycle benchmark) are left alone.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from importlib import metadata

import numpy as np

from engine.allocation import AllocationProblem, ModelDemand, VariantOption, greedy, solve
from engine.perf.queueing import SLO, PerfProfile, Workload
from engine.perf.sizing import size_arrays

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
START, END = "<!-- engine-bench:start -->", "<!-- engine-bench:end -->"


# --------------------------------------------------------------------------------------------------
# (a) sizing throughput


def sizing_inputs(n: int, seed: int = 0) -> dict:
    """n random (variant, workload, SLO) triples, max batch uniform in 4..512."""
    rng = np.random.default_rng(seed)
    batch = rng.integers(4, 513, n)
    alpha = rng.uniform(5, 30, n)
    beta = rng.uniform(0.05, 0.5, n)
    return dict(
        alpha=alpha,
        beta=beta,
        gamma=rng.uniform(2, 20, n),
        delta=rng.uniform(0.005, 0.1, n),
        max_batch=batch,
        in_tokens=rng.integers(0, 2048, n),
        out_tokens=rng.integers(1, 1024, n),
        ttft_ms=rng.uniform(100, 3000, n),
        itl_ms=alpha + beta * batch * rng.uniform(0.05, 1.2, n),
        tps=None,
    )


def bench_sizing(n: int, repeats: int) -> dict:
    inputs = sizing_inputs(n)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = size_arrays(**inputs)
        times.append(time.perf_counter() - t0)
    return dict(
        pairs=n, first=times[0], best=min(times), median=statistics.median(times), feasible=int(res.feasible.sum())
    )


# --------------------------------------------------------------------------------------------------
# allocation instances


@dataclass
class Instance:
    models: list[ModelDemand]
    variants: list[VariantOption]
    unit_costs: dict[str, float]
    accelerators: list[str]


def allocation_instance(n_models: int, n_acc: int, per_model: int, seed: int) -> Instance:
    """Models qualified on ``per_model`` of ``n_acc`` accelerator types; faster types cost more."""
    rng = np.random.default_rng(seed)
    accs = [f"gpu{i}" for i in range(n_acc)]
    speed = rng.uniform(0.5, 2.0, n_acc)
    unit = {a: float(round(10 * s**1.3 * rng.uniform(0.8, 1.2), 2)) for a, s in zip(accs, speed)}
    models, variants = [], []
    for i in range(n_models):
        name = f"m{i:04d}"
        size = rng.uniform(0.5, 3)
        models.append(
            ModelDemand(
                name=name,
                load_rps=float(rng.gamma(2.0, 2.0)),
                workload=Workload(float(rng.integers(64, 2048)), float(rng.integers(32, 1024))),
                slo=SLO(ttft_ms=float(rng.uniform(500, 3000)), itl_ms=float(rng.uniform(30, 80))),
                priority=int(rng.integers(1, 4)),
            )
        )
        for j in sorted(rng.choice(n_acc, per_model, replace=False)):
            k = size / speed[j]
            variants.append(
                VariantOption(
                    name=f"{name}-{accs[j]}",
                    model=name,
                    accelerator=accs[j],
                    accelerators_per_replica=int(rng.choice([1, 1, 2, 4])),
                    profile=PerfProfile(
                        alpha=10 * k,
                        beta=0.2 * k,
                        gamma=5 * k,
                        delta=0.02 * k,
                        max_batch=int(rng.choice([16, 32, 64, 128, 256])),
                    ),
                    current_replicas=int(rng.integers(0, 3)) if rng.random() < 0.3 else 0,
                )
            )
    return Instance(models, variants, unit, accs)


def usage(inst: Instance, replicas: dict[str, int]) -> dict[str, int]:
    by_name = {v.name: v for v in inst.variants}
    out = {a: 0 for a in inst.accelerators}
    for name, n in replicas.items():
        out[by_name[name].accelerator] += n * by_name[name].accelerators_per_replica
    return out


def allocation_scenarios(n_models: int, per_model: int) -> tuple[Instance, dict[str, dict[str, int]]]:
    """1000 models x 8 accelerator types (each qualified on ``per_model`` of them), inventory derived
    from the unconstrained optimum: binding but sufficient, and a real shortage."""
    inst = allocation_instance(n_models, 8, per_model, seed=1)
    free = solve(AllocationProblem(inst.models, inst.variants, inst.unit_costs))
    need = usage(inst, free.replicas)
    cheap = sorted(inst.accelerators, key=lambda a: inst.unit_costs[a])[:4]
    return inst, {
        "binding (4 cheapest types at 80%, others 200%)": {
            a: int(need[a] * (0.8 if a in cheap else 2.0)) for a in inst.accelerators
        },
        "shortage (every type at 70%)": {a: int(need[a] * 0.7) for a in inst.accelerators},
    }


def bench_allocation(n_models: int, time_limit: float, per_model: int = 3) -> list[dict]:
    inst, scenarios = allocation_scenarios(n_models, per_model)
    rows = []
    for label, inventory in scenarios.items():
        problem = AllocationProblem(
            inst.models, inst.variants, inst.unit_costs, inventory, time_limit_s=time_limit, mip_gap=1e-3
        )
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        alloc = solve(problem)
        elapsed = time.perf_counter() - t0
        base = greedy(problem)
        rows.append(
            dict(
                scenario=label,
                models=n_models,
                per_model=per_model,
                variants=len(inst.variants),
                time=elapsed,
                status=alloc.status,
                gap=alloc.gap,
                stage_gaps=alloc.stage_gaps,
                cost=alloc.cost,
                unserved=alloc.total_unserved_rps,
                levels=weighted(alloc, inst.models),
                greedy_cost=base.cost,
                greedy_unserved=base.total_unserved_rps,
                greedy_levels=weighted(base, inst.models),
                load=sum(m.load_rps for m in inst.models),
                infeasible=len(alloc.infeasible_variants),
                loadavg=load_before,
            )
        )
    return rows


ALTERNATIVES = {
    "compact MILP, HiGHS branch-and-bound alone": {"engine.allocation.solver.DECOMPOSE_FROM_VARIANTS": 10**9},
    "column generation + seeded pools (each variant alone)": {"engine.allocation.decomposition.SEED_POOLS": True},
    "column generation + price smoothing (Wentges, 0.5)": {"engine.allocation.decomposition.SMOOTHING": 0.5},
    "column generation without LP rounding": {"engine.allocation.decomposition.ROUND_LP": False},
    "column generation as kept": {},
}
"""Solver configurations measured on the shortage scenarios (module constants set for the run)."""


def bench_alternatives(n_models: int, time_limit: float) -> list[dict]:
    """The shortage scenarios under each configuration of :data:`ALTERNATIVES`."""
    import importlib

    rows = []
    for per_model in (3, 8):
        inst, scenarios = allocation_scenarios(n_models, per_model)
        inventory = scenarios["shortage (every type at 70%)"]
        for name, settings in ALTERNATIVES.items():
            saved = {}
            for path, value in settings.items():
                module, attr = path.rsplit(".", 1)
                mod = importlib.import_module(module)
                saved[(mod, attr)] = getattr(mod, attr)
                setattr(mod, attr, value)
            try:
                problem = AllocationProblem(
                    inst.models, inst.variants, inst.unit_costs, inventory, time_limit_s=time_limit, mip_gap=1e-3
                )
                t0 = time.perf_counter()
                alloc = solve(problem)
                elapsed = time.perf_counter() - t0
            finally:
                for (mod, attr), value in saved.items():
                    setattr(mod, attr, value)
            rows.append(
                dict(
                    config=name,
                    per_model=per_model,
                    time=elapsed,
                    status=alloc.status,
                    stage_gaps=alloc.stage_gaps,
                    levels=weighted(alloc, inst.models),
                    cost=alloc.cost,
                )
            )
    return rows


# --------------------------------------------------------------------------------------------------
# (c) quality versus greedy


def weighted(alloc, models) -> tuple[float, ...]:
    """Unserved load per priority level, highest priority first (compared lexicographically)."""
    levels = sorted({m.priority for m in models})
    return tuple(round(sum(alloc.unserved_rps[m.name] for m in models if m.priority == p), 6) for p in levels)


def bench_quality(count: int, time_limit: float) -> dict:
    rng = np.random.default_rng(2024)
    better = equal = worse = 0
    cost_ratios, unserved_ratios, times = [], [], []
    costlier_at_equal = 0
    statuses: dict[str, int] = {}
    for k in range(count):
        inst = allocation_instance(int(rng.integers(10, 41)), 4, int(rng.integers(2, 4)), seed=10_000 + k)
        free = solve(AllocationProblem(inst.models, inst.variants, inst.unit_costs))
        need = usage(inst, free.replicas)
        inventory = {a: int(need[a] * rng.uniform(0.5, 1.1)) for a in inst.accelerators}
        problem = AllocationProblem(
            inst.models, inst.variants, inst.unit_costs, inventory, time_limit_s=time_limit, mip_gap=1e-4
        )
        t0 = time.perf_counter()
        alloc = solve(problem)
        times.append(time.perf_counter() - t0)
        base = greedy(problem)
        statuses[alloc.status] = statuses.get(alloc.status, 0) + 1
        ws, wg = weighted(alloc, inst.models), weighted(base, inst.models)
        if ws == wg:
            if alloc.cost < base.cost - 1e-6:
                better += 1
            elif alloc.cost > base.cost + 1e-6:
                costlier_at_equal += 1
                worse += 1
            else:
                equal += 1
        elif ws < wg:
            better += 1
        else:
            worse += 1
        cost_ratios.append(alloc.cost / base.cost if base.cost else 1.0)
        gu = base.total_unserved_rps
        unserved_ratios.append(
            alloc.total_unserved_rps / gu if gu > 1e-9 else (1.0 if alloc.total_unserved_rps <= 1e-9 else float("inf"))
        )
    finite = [r for r in unserved_ratios if np.isfinite(r)]
    return dict(
        instances=count,
        better=better,
        equal=equal,
        worse=worse,
        costlier_at_equal=costlier_at_equal,
        cost_ratio_mean=float(np.mean(cost_ratios)),
        cost_ratio_min=float(np.min(cost_ratios)),
        cost_ratio_max=float(np.max(cost_ratios)),
        unserved_ratio_mean=float(np.mean(finite)) if finite else float("nan"),
        unserved_ratio_max=float(np.max(finite)) if finite else float("nan"),
        statuses=statuses,
        time_mean=float(np.mean(times)),
        time_max=float(np.max(times)),
    )


# --------------------------------------------------------------------------------------------------
# report


def machine(packages: tuple[str, ...] = ("numpy", "PuLP", "highspy")) -> str:
    """One line naming the OS, CPU, core count, Python and the package versions that matter."""
    cpu = platform.processor() or "unknown"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in packages)
    return (
        f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {versions}"
    )


def stage_gaps(gaps: dict) -> str:
    """``priority 3: 0.021%, cost: 0.004%`` (``n/a``: no proven bound)."""
    return ", ".join(f"{k}: {'n/a' if g is None else f'{100 * g:.3f}%'}" for k, g in gaps.items()) or "-"


def levels(values: tuple[float, ...]) -> str:
    return " / ".join(f"{v:,.2f}" for v in values)


def render(command: str, sizing: dict, alloc_rows: list[dict], alternatives: list[dict], quality: dict) -> str:
    lines = [
        START,
        "",
        f"Produced by `{command}` on {machine()}.",
        "",
        "## Sizing",
        "",
        "`engine.perf.sizing.size_arrays` (the batched `max_rates`): per-replica max request rate under TTFT",
        "and ITL SLOs with the WVA queueing model, for random (variant, workload, SLO) triples with max",
        "batch 4..512 (state space up to 5,633 states each), all bisected together.  Target < 2 s.",
        "",
        "| pairs | first run | best | median | feasible |",
        "|---|---|---|---|---|",
        f"| {sizing['pairs']:,} | {sizing['first']:.3f} s | {sizing['best']:.3f} s | {sizing['median']:.3f} s "
        f"| {sizing['feasible']:,} |",
        "",
        "## Allocation",
        "",
        "`engine.allocation.solve` on 1,000 models x 8 accelerator types, each model qualified on 3 of",
        "the types (3,000 variants) or on all 8 (8,000 variants), priorities 1-3, rates computed from",
        "the profiles inside the timed call, inventory limits on every type derived from the",
        f"unconstrained optimum of the same instance.  Time limit {alloc_rows[0]['time_limit']:g} s, `mip_gap` 1e-3.",
        "Target: each within 5 s with a proven gap under 1%.  Load average (1 min) of the shared",
        "machine just before each run in the last column.",
        "",
        "| types per model (variants) | scenario | time | status | proven gap per stage | unserved req/s per "
        "priority 1/2/3 (of total) | cost | greedy unserved per priority | greedy cost | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in alloc_rows:
        lines.append(
            f"| {r['per_model']} ({r['variants']:,}) | {r['scenario']} | {r['time']:.2f} s | {r['status']} "
            f"| {stage_gaps(r['stage_gaps'])} | {levels(r['levels'])} (of {r['load']:,.1f}) | {r['cost']:,.2f} "
            f"| {levels(r['greedy_levels'])} | {r['greedy_cost']:,.2f} | {r['loadavg']:.1f} |"
        )
    lines += [
        "",
        "Percentages of the scenarios are of the unconstrained optimum's usage per type.  Times include",
        "computing the per-replica rates, the greedy warm start and building the models.",
        "",
        "**What the gap is relative to.**  The objective is lexicographic: served load of priority 1,",
        "then of priority 2, ..., then cost plus transition penalty.  Each stage reports its own proven",
        "gap.  A priority stage's gap is the req/s a better allocation might still serve at that level,",
        "as a share of the level's *demand*: that is what an operator reads (\"priority 3 gets 17% of",
        "what it asks for, and at most 0.02 points more are possible\").  Relative to the level's",
        "unserved load it would blow up when nearly everything is served, relative to its served load",
        "when nearly nothing is (the lowest level in a shortage).  The cost stage's gap is relative to",
        "its objective.  A stage within `mip_gap` is proven optimal; `Allocation.gap` is the largest.",
        "",
        "**How.**  The only coupling between models is the inventory (one row per accelerator type) and,",
        "once a level is decided, that level's total unserved load.  Each stage is solved by column",
        "generation over per-model replica patterns: the LP over the patterns found so far prices the",
        "inventory and level rows; the exact per-model search answers, for every model, its best",
        "pattern at those prices; the sum of those answers minus the priced capacities is a Lagrangian",
        "lower bound of the stage, which pays for every model's partly used last replica (the compact",
        "model's LP relaxation does not, which is why HiGHS alone cannot close these gaps).  The",
        "incumbent: the master LP's solution rounded and repaired (moves off over-used rows, then",
        "improving moves), then HiGHS on the restricted master (one pattern per model; first only the",
        "columns whose reduced cost leaves room to reach the target, then all that could improve), then",
        "each model's best pattern in the inventory the others leave.  The integer search aims at 1% of",
        "the stage's tolerance, not just the tolerance: a priority level decided tighter is what the",
        "strict order asks of the levels after it.  A stage still open continues with HiGHS's",
        "branch-and-bound on the compact model, warm-started, for the stage's remaining time.  Below 1,000",
        "variants HiGHS on the compact model solves the stages directly (it proves such instances in",
        "milliseconds, before the decomposition gets going).",
        "",
        "**Where the 3-types shortage stands.**  The last priority level keeps a gap near 1% of its",
        "demand: the bound is the Dantzig-Wolfe (Lagrangian) bound at its best, and the restricted",
        "master's integer optimum over the generated patterns, proven by HiGHS given 40 s, stays where",
        "it is -- closing the rest needs branching inside the column generation (branch-and-price on",
        "replica counts), which the solver does not do.",
        "",
        "**Not every shortage is this tractable.**  On the tests' 8-types generator (seed 7, every type",
        "at 70%) with 100, 200 and 400 models, where two levels are only partly served, the last level",
        "keeps gaps of 13.7%, 24.4% and 3.8% of its demand at a 3.5 s limit (HiGHS alone: 13.7%, 15.3%,",
        "8.8%), for the same reason; the results are still lexicographically better than greedy's",
        "(tested).",
        "",
        "### Alternatives measured (shortage scenarios)",
        "",
        "| types per model | configuration | time | status | proven gap per stage | unserved per priority | cost |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in alternatives:
        lines.append(
            f"| {r['per_model']} | {r['config']} | {r['time']:.2f} s | {r['status']} | {stage_gaps(r['stage_gaps'])} "
            f"| {levels(r['levels'])} | {r['cost']:,.2f} |"
        )
    lines += [
        "",
        "## Allocation quality",
        "",
        f"{quality['instances']} random capacity-constrained instances (seed 2024; 10-40 models, 4",
        "accelerator types, 2-3 variants per model, inventory 50-110% of the unconstrained optimum's",
        "usage), `solve` versus the greedy baseline (`engine.allocation.greedy`, WVA-style: models in",
        "priority order, each takes its cheapest variant with inventory left, then the next cheapest).",
        "An instance is *better* when `solve` leaves lexicographically less unserved load (priority 1",
        "first) or, at equal unserved load, costs less.",
        "",
        "| instances | better | equal | worse | costlier at equal served load | cost ratio mean (min..max) "
        "| unserved ratio mean (max) | statuses | time mean (max) |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {quality['instances']} | {quality['better']} | {quality['equal']} | {quality['worse']} "
        f"| {quality['costlier_at_equal']} | {quality['cost_ratio_mean']:.4f} ({quality['cost_ratio_min']:.4f}.."
        f"{quality['cost_ratio_max']:.4f}) | {quality['unserved_ratio_mean']:.4f} ({quality['unserved_ratio_max']:.4f}) "
        f"| {', '.join(f'{k}: {v}' for k, v in sorted(quality['statuses'].items()))} "
        f"| {quality['time_mean']:.3f} s ({quality['time_max']:.3f} s) |",
        "",
        "Ratios are solve / greedy.  A cost ratio above 1 only occurs where `solve` serves",
        "lexicographically more load (never at equal served load: column 5).  The unserved ratio can",
        "exceed 1 in total req/s where `solve` serves more priority-1/2 load at the expense of a",
        "larger amount of lower-priority load, as the strict priority order requires.",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_section(section: str, start: str = START, end: str = END, doc: pathlib.Path = DOC) -> None:
    """Replace the part of ``doc`` between ``start`` and ``end`` with ``section`` (which carries the
    markers); append it when the markers are absent, create the file if needed. Each benchmark owns
    one marked section, so re-running one leaves the others as they were measured."""
    if doc.exists():
        text = doc.read_text()
        if start in text and end in text:
            head, rest = text.split(start, 1)
            _, tail = rest.split(end, 1)
            text = head + section.rstrip("\n") + tail
        else:
            text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    else:
        text = "# Benchmarks\n\n" + section.rstrip("\n") + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)


def publish_section(
    section: str, start: str = START, end: str = END, write: bool = True, doc: pathlib.Path = DOC
) -> None:
    """Print a benchmark's section and, unless ``write`` is off (``--no-write``), put it into its place in
    ``doc`` (:func:`write_section`)."""
    print(section)
    if write:
        write_section(section, start, end, doc)


def reproduce(module: str, parser: argparse.ArgumentParser, args: argparse.Namespace, *shown: str) -> str:
    """The command that reproduces a section: ``python -m <module>`` with each option of ``shown`` (dest names) that
    differs from the parser's default, lists spelled as the shell takes them."""
    command = f"python -m {module}"
    for dest in shown:
        value = getattr(args, dest)
        if value != parser.get_default(dest):
            spelled = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            command += f" --{dest.replace('_', '-')} {spelled}"
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small instances, do not write the doc")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--time-limit", type=float, default=3.5, help="allocation time limit (s)")
    args = parser.parse_args(argv)
    quick = args.quick
    sizing = bench_sizing(1000 if quick else 8000, 2 if quick else 5)
    print(f"sizing: {sizing}")
    rows = [row for per_model in (3, 8) for row in bench_allocation(100 if quick else 1000, args.time_limit, per_model)]
    for r in rows:
        r["time_limit"] = args.time_limit
        print(f"allocation: {r}")
    alternatives = bench_alternatives(100 if quick else 1000, args.time_limit)
    for r in alternatives:
        print(f"alternative: {r}")
    quality = bench_quality(10 if quick else 200, 2.0)
    print(f"quality: {quality}")
    command = "python -m bench.engine" + (" --quick" if quick else "")
    if args.time_limit != 3.5:
        command += f" --time-limit {args.time_limit:g}"
    section = render(command, sizing, rows, alternatives, quality)
    print(section)
    if not (quick or args.no_write):
        write_section(section)
        print(f"wrote {DOC.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
