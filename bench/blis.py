"""Benchmark: the performance model against an outside reference, the llm-d planner's BLIS table.

For every configuration (model x GPU x count) of the planner's ``benchmarks_BLIS.json`` that has rows at both
512/256 and 4,096/512 prompt/output tokens, the profile is fitted on the 512/256 rows exactly as
``modelplane calibrate-profiles --from-benchmark`` fits it (engine/simulate/benchmarks.py), and the queueing model
(engine/perf/queueing.py, engine/perf/sizing.py) predicts the 4,096/512 rows: TTFT and ITL at each of their
rates, and the highest rate meeting a TTFT and an ITL target.

    pip download llm-d-planner --no-deps -d /work/tmp/planner
    python -m bench.blis [--table PATH] [--no-write]

``--table`` is the table's JSON or the downloaded wheel (read in place); by default the newest
``llm_d_planner-*.whl`` in /work/tmp/planner.  Writes its section of docs/benchmarks.md (between the
blis-bench markers) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import zipfile
from dataclasses import dataclass
from typing import Any

from bench.engine import machine, publish_section
from engine.perf.queueing import SLO, PerfProfile, Workload, analyze
from engine.perf.sizing import Infeasible, max_rate
from engine.simulate.benchmarks import BenchmarkPoint, fit_benchmark, group_points, points_from_document
from engine.simulate.calibrate import ProfileFit, Unidentifiable

START, END = "<!-- blis-bench:start -->", "<!-- blis-bench:end -->"
PLANNER_DIR = pathlib.Path("/work/tmp/planner")
MEMBER = "planner/data/performance/benchmarks_BLIS.json"
FIT_SHAPE, HELD_OUT_SHAPE = (512, 256), (4096, 512)
MAX_BATCH = 256
"""The max batch the predictions assume (vLLM's --max-num-seqs default; the table does not say)."""
TARGET_FACTOR = 1.25
"""The SLO: mean TTFT and mean ITL at most this multiple of their value at the lowest held-out rate."""
BAR = 0.15
"""The target for the median absolute error of the predicted highest rate."""


class TableMissing(Exception):
    """The planner's table is not on this machine; the message says how to get it."""


def read_table(path: pathlib.Path | None) -> tuple[str, dict[str, Any]]:
    """(where it was read, the parsed table) from ``path`` (JSON or wheel) or the newest downloaded wheel."""
    if path is None:
        wheels = sorted(PLANNER_DIR.glob("llm_d_planner-*.whl"))
        if not wheels:
            raise TableMissing(
                f"no llm-d planner wheel in {PLANNER_DIR}: run `pip download llm-d-planner --no-deps -d {PLANNER_DIR}` "
                "or pass --table"
            )
        path = wheels[-1]
    if not path.exists():
        raise TableMissing(f"{path}: no such file")
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            if MEMBER not in wheel.namelist():
                raise TableMissing(f"{path}: the wheel has no {MEMBER}")
            return f"{path.name}:{MEMBER}", json.loads(wheel.read(MEMBER))
    return path.name, json.loads(path.read_text())


@dataclass
class Row:
    """One configuration's fit and its predictions of the held-out shape."""

    config: str
    fit_points: int
    held_points: int
    fit: ProfileFit | None = None
    why: str | None = None
    ttft_mape: float | None = None
    itl_mape: float | None = None
    targets: tuple[float, float] | None = None
    actual: float | None = None
    censored: bool = False
    predicted: float | None = None
    both_ttft_mape: float | None = None
    both_predicted: float | None = None

    def error_of(self, predicted: float | None) -> float | None:
        """|predicted - measured| / measured of the highest rate meeting the targets (None when not measured)."""
        if self.actual is None or self.censored or predicted is None:
            return None
        return abs(predicted - self.actual) / self.actual

    @property
    def rate_error(self) -> float | None:
        """The held-out prediction's error of the highest rate."""
        return self.error_of(self.predicted)

    @property
    def both_error(self) -> float | None:
        """The same with both token shapes in the fit (in-sample): what the laws can represent at all."""
        return self.error_of(self.both_predicted)


def shape(point: BenchmarkPoint) -> tuple[int, int]:
    return round(point.in_tokens), round(point.out_tokens)


def measured_max_rate(points: list[BenchmarkPoint], ttft: float, itl: float) -> tuple[float, bool]:
    """Highest offered rate whose mean TTFT and ITL meet the targets, interpolated between the sweep's rows.

    ``(rate, censored)``: censored when every row meets them (the rate is then the sweep's highest, a lower bound).
    """
    rows = sorted(points, key=lambda p: p.rate_rps or 0.0)
    previous: tuple[float, float] | None = None
    for p in rows:
        rate = p.rate_rps or p.throughput_rps
        load = max(p.ttft_ms / ttft, p.itl_ms / itl)
        if load > 1.0:
            if previous is None:
                return rate, False
            r0, l0 = previous
            return r0 + (rate - r0) * (1.0 - l0) / (load - l0), False
        previous = (rate, load)
    assert previous is not None
    return previous[0], True


def mape(profile: PerfProfile, held: list[BenchmarkPoint]) -> tuple[float, float]:
    """Mean absolute percentage errors of the predicted mean TTFT and ITL at the held-out points' rates."""
    workload = Workload(*HELD_OUT_SHAPE)
    ttft_err, itl_err = [], []
    for p in held:
        predicted = analyze(profile, workload, p.rate_rps or p.throughput_rps)
        ttft_err.append(abs(predicted.ttft_ms - p.ttft_ms) / p.ttft_ms)
        itl_err.append(abs(predicted.itl_ms - p.itl_ms) / p.itl_ms)
    return statistics.fmean(ttft_err), statistics.fmean(itl_err)


def predicted_max_rate(profile: PerfProfile, targets: tuple[float, float]) -> float:
    """The model's highest rate meeting the targets at the held-out shape (0 when even an idle replica misses)."""
    try:
        return max_rate(profile, Workload(*HELD_OUT_SHAPE), SLO(ttft_ms=targets[0], itl_ms=targets[1]))
    except Infeasible:
        return 0.0


def evaluate(config: str, points: list[BenchmarkPoint]) -> Row:
    """Fit on the 512/256 points, predict the 4,096/512 ones; and the same fitted on both shapes."""
    train = [p for p in points if shape(p) == FIT_SHAPE]
    held = sorted((p for p in points if shape(p) == HELD_OUT_SHAPE), key=lambda p: p.rate_rps or 0.0)
    row = Row(config, len(train), len(held))
    try:
        row.fit = fit_benchmark(train)
    except Unidentifiable as exc:
        row.why = str(exc)
        return row
    profile = row.fit.profile(MAX_BATCH)
    row.ttft_mape, row.itl_mape = mape(profile, held)
    try:
        both = fit_benchmark(train + held).profile(MAX_BATCH)
    except Unidentifiable:
        both = None
    if both is not None:
        row.both_ttft_mape = mape(both, held)[0]
    if len(held) < 2:
        return row
    row.targets = (TARGET_FACTOR * held[0].ttft_ms, TARGET_FACTOR * held[0].itl_ms)
    row.actual, row.censored = measured_max_rate(held, *row.targets)
    row.predicted = predicted_max_rate(profile, row.targets)
    if both is not None:
        row.both_predicted = predicted_max_rate(both, row.targets)
    return row


def evaluate_table(table: dict[str, Any]) -> list[Row]:
    _, points = points_from_document(table, "benchmarks_BLIS.json")
    rows = []
    for config, group in group_points(points).items():
        shapes = {shape(p) for p in group}
        if FIT_SHAPE in shapes and HELD_OUT_SHAPE in shapes:
            rows.append(evaluate(config, group))
    return rows


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def render(rows: list[Row], source: str) -> str:
    fitted = [r for r in rows if r.fit is not None]
    measured = [r for r in fitted if r.rate_error is not None]
    errors = [r.rate_error for r in measured if r.rate_error is not None]
    within = sum(e <= BAR for e in errors)
    both_errors = [r.both_error for r in measured if r.both_error is not None]
    both_ttft = [r.both_ttft_mape for r in fitted if r.both_ttft_mape is not None]
    lines = [
        START,
        "## Performance model against the llm-d planner table",
        "",
        f"`python -m bench.blis` ({machine(('numpy',))}), from `{source}`. Every configuration with rows at both "
        "512/256 and 4,096/512 prompt/output tokens: the profile fitted on its 512/256 rows as "
        "`modelplane calibrate-profiles --from-benchmark` fits it, the queueing model (max batch "
        f"{MAX_BATCH}) predicting its 4,096/512 rows. *TTFT/ITL error*: mean absolute percentage error of the "
        "predicted means over the held-out rates. *Highest rate*: the highest request rate whose mean TTFT and "
        f"mean ITL stay within {TARGET_FACTOR:g}x their values at the lowest held-out rate (interpolated between "
        "the sweep's rates; `>=` when the sweep never crosses them), measured and predicted. The targets are relative "
        "because the configurations' latencies differ tenfold, so no fixed SLO binds them all inside their sweeps; "
        f"{TARGET_FACTOR:g}x the unloaded latency is where a sweep leaves its flat part.",
        "",
        f"- configurations: {len(rows)}; fitted: {len(fitted)} (the others have fewer than 3 rates at 512/256); "
        f"highest rate measured inside the sweep: {len(measured)}",
        f"- median TTFT error {pct(statistics.median([r.ttft_mape for r in fitted if r.ttft_mape is not None]))}, "
        f"median ITL error {pct(statistics.median([r.itl_mape for r in fitted if r.itl_mape is not None]))}",
        f"- **median absolute error of the predicted highest rate: {pct(statistics.median(errors) if errors else None)}** "
        f"(target under {BAR:.0%}); within {BAR:.0%}: {within} of {len(errors)}",
        f"- with both shapes in the fit (in-sample, *both* columns): median TTFT error "
        f"{pct(statistics.median(both_ttft) if both_ttft else None)}, median error of the highest rate "
        f"{pct(statistics.median(both_errors) if both_errors else None)}; within {BAR:.0%}: "
        f"{sum(e <= BAR for e in both_errors)} of {len(both_errors)}",
        "",
        "| configuration | rows fit/held | undetermined | TTFT error | ITL error | highest rate measured | predicted "
        "| error | both: TTFT error | both: predicted | both: error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.fit is None:
            lines.append(f"| {r.config} | {r.fit_points}/{r.held_points} | no fit: {r.why} |" + " - |" * 8)
            continue
        actual = "-" if r.actual is None else ((">= " if r.censored else "") + f"{r.actual:.2f}")
        predicted = "-" if r.predicted is None else f"{r.predicted:.2f}"
        both = "-" if r.both_predicted is None else f"{r.both_predicted:.2f}"
        lines.append(
            f"| {r.config} | {r.fit_points}/{r.held_points} | {', '.join(sorted(r.fit.undetermined)) or '-'} | "
            f"{pct(r.ttft_mape)} | {pct(r.itl_mape)} | {actual} | {predicted} | {pct(r.rate_error)} | "
            f"{pct(r.both_ttft_mape)} | {both} | {pct(r.both_error)} |"
        )
    lines += ["", END, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=pathlib.Path, help="benchmarks_BLIS.json or the llm-d-planner wheel")
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    try:
        source, table = read_table(args.table)
    except TableMissing as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    section = render(evaluate_table(table), source)
    publish_section(section, START, END, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
