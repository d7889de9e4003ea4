"""Benchmark: ``modelplane validate-manifests`` on a folder of many large manifest files.

    python -m bench.validate_manifests [--files 20] [--per-file 9900] [--runs 1] [--before /work/main] [--no-write]

The folder holds ``--files`` files of ``--per-file`` documents each (20 x 9,900 = 198,000 documents by default,
each file under the per-file caps): every document of deployments/examples (VariantAutoscalings, Deployments,
ConfigMaps, Kthena Models, AIM services, ModelCaches, ...) renamed ``<name>-<file>-<copy>``, round and round until
the file is full. The real console script runs on it (``--json``, output to a pipe as in CI; the table form is
measured too). Reported per run: wall seconds, CPU seconds of the process tree (the command and any worker
processes it starts), the peak resident memory of that tree (sampled every 50 ms, the sum over its processes)
and the exit code (3: the examples hold no invalid document, but the Secret's data is checked like any other).
``--before PATH`` measures another checkout's ``--json`` command the same way (its own ``flows`` package, same
interpreter), for a comparison in a review. The table goes between the validate-manifests-bench markers of
docs/benchmarks.md; the machine's load average before and after is part of it (a shared 2-core machine).
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
from dataclasses import dataclass
from typing import Any

from bench.engine import machine, publish_section

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"
START, END = "<!-- validate-manifests-bench:start -->", "<!-- validate-manifests-bench:end -->"
WHERE_IT_GOES = (
    "Where the CPU time goes (one 9,900-document file in one process, timed part by part): reading and validation",
    "about equally (0.29 s and 0.26 s). Reading is mostly libyaml's parser itself (0.18 s): the compiled YAML",
    "reader builds each document's values straight from its events (PyYAML's reader, which makes a Python node per",
    "value first, takes 0.7 s; `MODELPLANE_YAML_READER=python`). Validation is identity, the kind's pydantic model",
    "and the compiled spec schema check. The rest of the command's CPU time is starting it, compiling the checks,",
    "and the verdicts' way back from the worker processes and into the report. No file's documents are walked by",
    "Python's cyclic garbage collector, in the workers or in the command that receives their verdicts. On two idle",
    "cores the two workers make the wall time about half the CPU time; on a loaded machine wall time is several",
    "times the CPU time.",
)
"""A note under the table: what the time is spent on, measured separately (not by this script)."""


def example_documents() -> list[dict[str, Any]]:
    """Every object of deployments/examples, in file order."""
    import yaml

    documents: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        documents += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return documents


def populate(target: pathlib.Path, files: int, per_file: int) -> int:
    """Write ``files`` files of ``per_file`` renamed example documents into ``target``; the bytes written."""
    import yaml

    target.mkdir(parents=True, exist_ok=True)
    texts = [yaml.safe_dump(d, sort_keys=False) for d in example_documents()]
    names = [str(d["metadata"]["name"]) for d in example_documents()]
    written = 0
    for index in range(files):
        chunks: list[str] = []
        for n in range(per_file):
            text, name = texts[n % len(texts)], names[n % len(texts)]
            copy = f"{name}-{index}-{n // len(texts)}"
            chunks.append(text.replace(f"name: {name}\n", f"name: {copy}\n", 1))
        body = "---\n".join(chunks)
        (target / f"{index:02d}-bench.yaml").write_text(body)
        written += len(body.encode())
    return written


@dataclass(frozen=True)
class Run:
    """One run of the command."""

    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    exit_code: int


def tree_rss_kb(root: int) -> int:
    """The resident memory of ``root`` and every descendant process, in KiB (from /proc; gone processes count 0)."""
    total, frontier = 0, [root]
    while frontier:
        pid = frontier.pop()
        try:
            status = pathlib.Path(f"/proc/{pid}/status").read_text()
            children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        frontier += [int(child) for child in children]
    return total


def timed_run(args: list[str], checkout: pathlib.Path) -> Run:
    """Run ``modelplane ARGS`` of ``checkout`` once, its output discarded through a pipe."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with tempfile.TemporaryFile() as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", *args],
            cwd=checkout,
            env={**env, "PYTHONPATH": str(checkout)},
            stdout=sink,
            stderr=subprocess.DEVNULL,
        )
        peak = 0
        while process.poll() is None:
            peak = max(peak, tree_rss_kb(process.pid))
            time.sleep(0.05)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, peak / 1024, process.returncode)


def measure(checkout: pathlib.Path, folder: pathlib.Path, runs: int, table_form: bool = True) -> dict[str, list[Run]]:
    """``--json`` (and the table form unless ``table_form`` is False), ``runs`` times each."""
    forms = {"validate-manifests --json": ["validate-manifests", "--cluster", str(folder), "--json"]}
    if table_form:
        forms["validate-manifests (table)"] = ["validate-manifests", "--cluster", str(folder)]
    return {label: [timed_run(args, checkout) for _ in range(runs)] for label, args in forms.items()}


def table(rows: dict[str, dict[str, list[Run]]]) -> list[str]:
    """Markdown rows, one per checkout, command and run."""
    lines = [
        "| checkout | command | run | wall (s) | CPU (s) | peak RSS (MB) | exit |",
        "|---|---|---|---|---|---|---|",
    ]
    for checkout, results in rows.items():
        for label, runs in results.items():
            for number, run in enumerate(runs, 1):
                lines.append(
                    f"| {checkout} | `{label}` | {number} | {run.wall_s:.1f} | {run.cpu_s:.1f} | "
                    f"{run.peak_rss_mb:.0f} | {run.exit_code} |"
                )
    return lines


def uptime() -> str:
    """The load averages (1, 5, 15 minutes), as ``uptime`` prints them."""
    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20, help="manifest files in the folder")
    parser.add_argument("--per-file", type=int, default=9900, help="documents per file")
    parser.add_argument("--runs", type=int, default=1, help="runs per command")
    parser.add_argument("--before", type=pathlib.Path, help="another checkout to measure the same way")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    rows: dict[str, dict[str, list[Run]]] = {}
    with tempfile.TemporaryDirectory(prefix="validate-bench-") as work:
        folder = pathlib.Path(work) / "cluster"
        size = populate(folder, args.files, args.per_file)
        loads = [uptime()]
        if args.before is not None:
            # --json only: before, the table listed every one of the documents (minutes of layout alone)
            rows["earlier checkout"] = measure(args.before.resolve(), folder, args.runs, table_form=False)
        rows["this checkout"] = measure(REPO, folder, args.runs)
        loads.append(uptime())
    command = f"python -m bench.validate_manifests --files {args.files} --per-file {args.per_file} --runs {args.runs}"
    section = "\n".join(
        [
            START,
            "",
            "## Validating a large manifests folder",
            "",
            f"Command: `{command}`"
            + (" (with `--before PATH`: an earlier checkout)" if args.before else "")
            + f" on {machine(('PyYAML', 'pydantic', 'rich'))}.",
            "",
            f"{args.files * args.per_file:,} documents in {args.files} files ({size / 1e6:.0f} MB): the objects of",
            "deployments/examples renamed, round and round. `modelplane validate-manifests --cluster DIR` in a fresh",
            "process, its output to a pipe: wall time, CPU time of the process and its workers, their summed peak",
            f"resident memory. Load average (1, 5, 15 min) at the start: {loads[0]}; at the end: {loads[1]}",
            "(a shared 2-core machine: wall time depends on it, CPU time much less).",
            "",
            *table(rows),
            "",
            *WHERE_IT_GOES,
            "",
            END,
        ]
    )
    publish_section(section, START, END, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
