"""Benchmark: how soon the ``modelplane`` command answers, against ``modelplane --help``.

    python -m bench.cli_latency [--runs 5] [--before /work/main] [--no-write]

Commands, each run ``--runs`` times in a fresh process (the real console script, output to pipes as in CI):
``modelplane --help``; ``modelplane optimize-allocation --cluster COPY --metrics-file deployments/example-metrics.yaml --dry-run``
on a fresh copy of deployments/examples (no Prefect API: a dry run on a manifests directory); the same with
``--track`` (a Prefect run on a temporary API, what every local run cost before). Reported per command: the
median wall time, the median time to its first byte of output (stdout or stderr), their ratios to ``--help``,
and the median CPU time of the process and its children. ``--before PATH`` also measures another checkout's
commands (its own ``flows`` package, same interpreter) and prints them, for a comparison in a review; the table
of this checkout is printed and written between the cli-latency markers of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from bench.engine import machine, publish_section

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"
METRICS = REPO / "deployments" / "example-metrics.yaml"
START, END = "<!-- cli-latency-bench:start -->", "<!-- cli-latency-bench:end -->"


@dataclass(frozen=True)
class Timing:
    """One run of one command."""

    wall_s: float
    first_output_s: float
    cpu_s: float
    exit_code: int


def timed_run(args: list[str], checkout: pathlib.Path, env: dict[str, str]) -> Timing:
    """Run ``modelplane ARGS`` (``python -m flows.cli`` of ``checkout``) once: wall time, time to its first
    byte on stdout or stderr, CPU time of the process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=checkout,
        env={**env, "PYTHONPATH": str(checkout)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first: float | None = None
    with selectors.DefaultSelector() as selector:
        assert process.stdout is not None and process.stderr is not None
        for stream in (process.stdout, process.stderr):
            selector.register(stream, selectors.EVENT_READ)
        open_streams = 2
        while open_streams:
            for key, _ in selector.select():
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
                elif first is None:
                    first = time.monotonic() - start
    code = process.wait()
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, first if first is not None else wall, cpu, code)


def commands(cluster: pathlib.Path) -> dict[str, list[str]]:
    """The measured commands, by the label the table shows."""
    optimize = ["optimize", "--cluster", str(cluster), "--metrics", str(METRICS), "--dry-run"]
    return {
        "modelplane --help": ["--help"],
        "optimize --dry-run (examples)": optimize,
        "optimize --dry-run --track (examples)": [*optimize, "--track"],
    }


def measure(checkout: pathlib.Path, runs: int, work: pathlib.Path) -> dict[str, list[Timing]]:
    """Every command ``runs`` times; the optimize runs each on a fresh copy of the examples."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    results: dict[str, list[Timing]] = {}
    for run in range(runs):
        cluster = work / f"cluster-{run}"
        shutil.rmtree(cluster, ignore_errors=True)
        shutil.copytree(EXAMPLES, cluster)
        for label, args in commands(cluster).items():
            if "--track" in args and not supports_track(checkout):
                args = [a for a in args if a != "--track"]  # before: every local run was tracked
            timing = timed_run(args, checkout, env)
            if timing.exit_code != 0:
                raise SystemExit(f"{label} exited {timing.exit_code} in {checkout}")
            results.setdefault(label, []).append(timing)
    return results


def supports_track(checkout: pathlib.Path) -> bool:
    """Whether a checkout's CLI has ``--track`` (before it, every local run was a Prefect run)."""
    return "--track" in (checkout / "flows" / "cli" / "common.py").read_text()


def table(rows: dict[str, dict[str, list[Timing]]]) -> list[str]:
    """Markdown rows: per command, medians and ratios to ``--help`` (a first column per checkout when several)."""
    several = len(rows) > 1
    lines = [
        ("| checkout " if several else "")
        + "| command | wall (s) | first output (s) | CPU (s) | wall / --help | first output / --help |",
        ("|---" if several else "") + "|---|---|---|---|---|---|",
    ]
    for checkout, results in rows.items():
        help_wall = statistics.median(t.wall_s for t in results["modelplane --help"])
        help_first = statistics.median(t.first_output_s for t in results["modelplane --help"])
        for label, timings in results.items():
            wall = statistics.median(t.wall_s for t in timings)
            first = statistics.median(t.first_output_s for t in timings)
            cpu = statistics.median(t.cpu_s for t in timings)
            lines.append(
                (f"| {checkout} " if several else "") + f"| `{label}` | {wall:.2f} | {first:.2f} | {cpu:.2f} | "
                f"x{wall / help_wall:.1f} | x{first / help_first:.1f} |"
            )
    return lines


def load_average() -> str:
    """The 1-minute load average, as the table's context (the machine is shared)."""
    return f"{os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command (the table shows medians)")
    parser.add_argument("--before", type=pathlib.Path, help="another checkout to measure the same way")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    loads = [load_average()]
    rows: dict[str, dict[str, list[Timing]]] = {}
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as work:
        if args.before is not None:
            rows[f"before ({args.before})"] = measure(args.before.resolve(), args.runs, pathlib.Path(work))
        rows["this checkout"] = measure(REPO, args.runs, pathlib.Path(work))
    loads.append(load_average())
    if len(rows) > 1:
        print("\n".join(table(rows)) + "\n")
    rows = {"this checkout": rows["this checkout"]}
    command = f"python -m bench.cli_latency --runs {args.runs}"
    section = "\n".join(
        [
            START,
            "",
            "## Command-line latency",
            "",
            f"Command: `{command}` on {machine(('prefect', 'typer', 'rich'))}.",
            "",
            f"Medians of {args.runs} runs per command, each in a fresh process with its output on pipes (as in CI);",
            "first output: the first byte on stdout or stderr. The optimize runs use a fresh copy of",
            "deployments/examples. Without `--track` a dry run on a manifests directory needs no Prefect API and",
            "does not import Prefect; with it the run is recorded in a temporary Prefect API started for it. Wall",
            f"times depend on the machine's load: {loads[0]} at the start, {loads[1]} at the end (a shared 2-core machine);",
            "CPU time much less so.",
            "",
            *table(rows),
            "",
            END,
        ]
    )
    publish_section(section, START, END, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
