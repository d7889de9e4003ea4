"""Benchmark of the test suite's tiers: ``python -m bench.suite [--tier fast] [--tier full] [--no-write]``.

Runs each tier as a person would (``./dev.sh test-fast``, ``./dev.sh test``), with a JUnit report, and writes
the "Test suite" section of docs/benchmarks.md: wall time, the tests' summed time (what one process would
spend), tests passed/failed/skipped, the load average before and after (the machine may be shared: the
numbers mean little without it) and the slowest tests. ``--junit LABEL=PATH`` adds a row from a run made
elsewhere (for instance the serial baseline, ``./dev.sh test -n 0 --junitxml=PATH``) without re-running it.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from bench.engine import machine, publish_section

REPO = pathlib.Path(__file__).resolve().parents[1]
START, END = "<!-- suite-bench:start -->", "<!-- suite-bench:end -->"
TIERS: dict[str, list[str]] = {
    "fast": ["./dev.sh", "test-fast", "-q"],
    "full": ["./dev.sh", "test", "-q"],
    "full-serial": ["./dev.sh", "test", "-q", "-n", "0"],
}
SLOWEST = 12


@dataclass
class Run:
    """One tier's run: its counts from the JUnit report, wall time and the load around it."""

    label: str
    command: str
    wall_s: float | None
    cpu_s: float | None
    summed_s: float
    passed: int
    failed: int
    skipped: int
    load: str
    slowest: list[tuple[float, str]] = field(default_factory=list)


def read_junit(path: pathlib.Path) -> tuple[float, int, int, int, list[tuple[float, str]]]:
    """Summed test time, passed, failed (errors included), skipped and every test's (seconds, id)."""
    root = ET.parse(path).getroot()
    cases = list(root.iter("testcase"))
    times: list[tuple[float, str]] = []
    failed = skipped = 0
    for case in cases:
        seconds = float(case.get("time") or 0)
        times.append((seconds, f"{case.get('classname')}::{case.get('name')}"))
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
    return sum(t for t, _ in times), len(cases) - failed - skipped, failed, skipped, sorted(times, reverse=True)


def children_cpu() -> float:
    """User + system CPU seconds of every finished child process (the tier's workers and servers included):
    unlike wall time, it hardly depends on what else the machine runs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    """The 1- and 5-minute load averages."""
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def run_tier(label: str, extra: list[str]) -> Run:
    """Run one tier with a JUnit report; its exit code is recorded through the report's counts."""
    with tempfile.TemporaryDirectory() as scratch:
        report = pathlib.Path(scratch) / "junit.xml"
        command = [*TIERS[label], *extra, f"--junitxml={report}"]
        before = load()
        cpu_before = children_cpu()
        start = time.monotonic()
        subprocess.run(command, cwd=REPO, check=False)
        wall = time.monotonic() - start
        cpu = children_cpu() - cpu_before
        summed, passed, failed, skipped, times = read_junit(report)
    command_line = " ".join(TIERS[label] + extra)
    return Run(label, command_line, wall, cpu, summed, passed, failed, skipped, f"{before} → {load()}", times)


def from_junit(spec: str) -> Run:
    """A row from an existing report: ``LABEL=PATH[=LOAD]`` (its wall time is the report's own)."""
    label, path, *rest = spec.split("=")
    summed, passed, failed, skipped, times = read_junit(pathlib.Path(path))
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite") or suite
    wall = float(suite.get("time") or 0) or None
    return Run(label, "(JUnit report)", wall, None, summed, passed, failed, skipped, rest[0] if rest else "?", times)


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s" if seconds >= 60 else f"{seconds:.1f} s"


def render(runs: list[Run]) -> str:
    """The marked section: one row per run, then each run's slowest tests."""
    lines = [
        START,
        "## Test suite",
        "",
        f"`python -m bench.suite` on {machine(('pytest', 'pytest-xdist', 'prefect'))}.",
        "Wall time is the tier's whole run (setup, collection on every worker, teardown); summed is the tests'",
        "own time added up (what one process spends in them); CPU is user + system of every process the tier",
        "started (workers, servers, subprocesses); load is the 1/5-minute load average before → after.",
        "",
        "| tier | command | wall | CPU | summed test time | passed | failed | skipped | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run.label} | `{run.command}` | {minutes(run.wall_s)} | {minutes(run.cpu_s)} | {minutes(run.summed_s)} | "
            f"{run.passed} | "
            f"{run.failed} | {run.skipped} | {run.load} |"
        )
    for run in runs:
        lines += ["", f"Slowest tests, {run.label}:", ""]
        lines += [f"- {seconds:.0f} s `{name}`" for seconds, name in run.slowest[:SLOWEST]]
    lines.append(END)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", action="append", choices=sorted(TIERS), help="tier to run (repeatable)")
    parser.add_argument("--junit", action="append", default=[], help="LABEL=PATH[=LOAD]: a row from a report")
    parser.add_argument("--no-write", action="store_true", help="Print the section only.")
    args, extra = parser.parse_known_args(argv)
    runs = [from_junit(spec) for spec in args.junit]
    runs += [run_tier(label, extra) for label in args.tier or ([] if args.junit else ["fast", "full"])]
    section = render(runs)
    publish_section(section, START, END, write=not args.no_write)
    return 0 if all(run.failed == 0 for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
