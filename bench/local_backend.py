"""Benchmark: CPU time of flow commands on the local (manifests-directory) backend as the directory grows.

    python -m bench.local_backend [--sizes 100 300 1000] [--before /work/main] [--no-write] [--profile DIR]

For each size N a copy of the example cluster (deployments/examples) gets N more Kthena Models and N more
VariantAutoscalings, each with the Deployment it scales (one file per object, as ``--cluster DIR`` users keep
them); then ``modelplane rollout-models --cluster DIR`` runs (it writes the status of every Model and creates
each Model's Deployment, Service, AutoscalingPolicy and binding: about 5 writes per Model) and then
``modelplane optimize-allocation --cluster DIR --metrics-file deployments/example-metrics.yaml`` (a status write per
VariantAutoscaling). Reported: the CPU seconds of the process running the command (the backend runs
in-process; the Prefect test server's own process is not counted), the objects in the directory after the run
and the flow's summary line.

Each tree is measured in its own process (``--before DIR`` adds a run of another checkout, e.g. main, with its
own ``.venv``, read-only: to compare the backend before and after a change). ``--profile DIR`` writes a
cProfile of every command there. The table goes between the local-backend-bench markers of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from engine.api.registry import MODEL, VARIANT_AUTOSCALING

REPO = pathlib.Path(__file__).resolve().parents[1]
START, END = "<!-- local-backend-bench:start -->", "<!-- local-backend-bench:end -->"
COMMANDS = ("rollout-models", "optimize")


def _documents(path: pathlib.Path) -> list[dict[str, Any]]:
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def populate(target: pathlib.Path, examples: pathlib.Path, count: int) -> None:
    """The example cluster plus ``count`` Models and ``count`` VariantAutoscalings (each with its Deployment),
    one object per file, each a renamed copy of the example's own."""

    shutil.copytree(examples, target)
    model = next(d for d in _documents(examples / "20-kthena.yaml") if d["kind"] == MODEL)
    pair = [
        d for d in _documents(examples / "10-llama-3.1-8b.yaml") if d["kind"] in ("Deployment", VARIANT_AUTOSCALING)
    ]
    deployment, variant = pair[0], next(d for d in pair if d["kind"] == VARIANT_AUTOSCALING)
    for i in range(count):
        name = f"bench-{i:04d}"
        m = json.loads(json.dumps(model))
        m["metadata"]["name"] = m["spec"]["name"] = f"{name}-model"
        _write(target / f"90-model-{name}.yaml", m)
        d = json.loads(json.dumps(deployment))
        d["metadata"]["name"] = f"{name}-a100"
        _write(target / f"91-deployment-{name}.yaml", d)
        v = json.loads(json.dumps(variant))
        v["metadata"]["name"] = f"{name}-a100"
        v["spec"]["scaleTargetRef"]["name"] = f"{name}-a100"
        _write(target / f"92-variant-{name}.yaml", v)


def _write(path: pathlib.Path, obj: dict[str, Any]) -> None:
    import yaml

    path.write_text(yaml.safe_dump(obj, sort_keys=False))


def measure(sizes: list[int], profile: str | None) -> list[dict[str, Any]]:
    """Run in the process of the tree being measured: every command on every size, CPU seconds each.

    The flows are called as the CLI calls them, with their run timeout lifted (the "before" code can take
    longer than a scheduled run may on a loaded machine)."""
    import cProfile
    import time

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.testing.utilities import prefect_test_harness

    from flows.optimize import optimize
    from flows.rollout_models import rollout_models

    repo = pathlib.Path.cwd()  # the tree measured (this code may run from a copy of the file)
    examples, metrics = repo / "deployments" / "examples", repo / "deployments" / "example-metrics.yaml"
    flows = {
        "rollout-models": lambda cluster: rollout_models.with_options(timeout_seconds=36000)(cluster=cluster),
        "optimize": lambda cluster: optimize.with_options(timeout_seconds=36000)(
            cluster=cluster, metrics_file=str(metrics)
        ),
    }
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=300):
        warm = pathlib.Path(tmp) / "warm"
        populate(warm, examples, 0)
        for command in COMMANDS:
            flows[command](str(warm))  # imports, the Prefect client's first connection
        for size in sizes:
            cluster = pathlib.Path(tmp) / f"n{size}"
            populate(cluster, examples, size)
            for command in COMMANDS:
                profiler = cProfile.Profile() if profile else None
                start = time.process_time()
                if profiler:
                    profiler.enable()
                report = flows[command](str(cluster))
                if profiler:
                    profiler.disable()
                    profiler.dump_stats(str(pathlib.Path(profile) / f"{command}-{size}.prof"))
                cpu = time.process_time() - start
                files = sum(1 for p in cluster.rglob("*.yaml") if not p.name.startswith("."))
                summary = str(getattr(report, "summary", ""))
                rows.append({"size": size, "command": command, "cpu_s": round(cpu, 2), "files": files})
                rows[-1]["summary"] = summary
                if partial := os.environ.get("LOCAL_BENCH_PARTIAL"):  # each row as it is measured (long runs)
                    with open(partial, "a") as handle:
                        handle.write(json.dumps(rows[-1]) + "\n")
    return rows


def run_tree(tree: pathlib.Path, sizes: list[int], profile: str | None) -> list[dict[str, Any]]:
    """Measure ``tree`` (a checkout with its own ``.venv``) in a fresh process; its rows."""
    python = tree / ".venv" / "bin" / "python"
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from bench_local_measure import measure; "
        "print('ROWS ' + json.dumps(measure([int(s) for s in sys.argv[3].split(',')], sys.argv[2] or None)))"
    )
    with tempfile.TemporaryDirectory() as shim:
        # the measuring code is this file's, whichever tree is measured (the tree may predate it)
        shutil.copy(__file__, pathlib.Path(shim) / "bench_local_measure.py")
        out = subprocess.run(
            [str(python), "-c", code, shim, profile or "", ",".join(map(str, sizes))],
            cwd=tree,
            capture_output=True,
            text=True,
            check=False,
        )
    for line in out.stdout.splitlines():
        if line.startswith("ROWS "):
            rows: list[dict[str, Any]] = json.loads(line[5:])
            return rows
    raise SystemExit(f"error: measuring {tree} failed: {out.stderr.strip().splitlines()[-3:]}")


def render(
    sizes: list[int],
    after: list[dict[str, Any]],
    before: list[dict[str, Any]] | None,
    label: str,
    profiled: bool = False,
    note: str = "",
) -> str:
    """The docs/benchmarks.md section: one row per size and command."""
    sys.path.insert(0, str(REPO))
    from bench.engine import machine

    def cell(rows: list[dict[str, Any]] | None, size: int, command: str) -> dict[str, Any] | None:
        return next((r for r in rows or [] if r["size"] == size and r["command"] == command), None)

    lines = [
        START,
        "",
        "## Local backend at scale (`--cluster DIR`)",
        "",
        f"Command: `python -m bench.local_backend --sizes {' '.join(map(str, sizes))}"
        + (f" --before {label}" if before else "")
        + (" --profile DIR`" if profiled else "`")
        + f" on {machine(('prefect', 'ruamel.yaml', 'PyYAML'))}.",
        "",
        "The example cluster plus N Kthena Models and N VariantAutoscalings (each with its Deployment), one object",
        "per file; `rollout-models` then `optimize --metrics deployments/example-metrics.yaml` on it. CPU seconds of",
        "the process running the command (the backend runs in it; the Prefect test server's process not counted);",
        "files: manifests in the directory after the command. The machine is shared (2 cores, other work running):",
        "CPU time, not wall time, is the measure."
        + (" Measured under cProfile (the profiles say where the time went): it inflates" if profiled else ""),
        *(["CPU time, for both trees alike."] if profiled else []),
        "",
        "| N per kind | command | files after | summary | CPU before (s) | CPU after (s) | speed-up | after, ms per N |"
        if before
        else "| N per kind | command | files after | summary | CPU (s) | ms per N |",
        "|---|---|---|---|---|---|---|---|" if before else "|---|---|---|---|---|---|",
    ]
    for size in sizes:
        for command in COMMANDS:
            now, old = cell(after, size, command), cell(before, size, command)
            if now is None:
                continue
            summary = now["summary"].split(";")[0].split(" — ")[0]
            row = f"| {size} | {command} | {now['files']} | {summary} |"
            if before:
                was = f"{old['cpu_s']:.2f}" if old else "-"
                gain = f"x{old['cpu_s'] / max(now['cpu_s'], 0.01):.1f}" if old else "-"
                row += f" {was} | {now['cpu_s']:.2f} | {gain} | {1000 * now['cpu_s'] / size:.0f} |"
            else:
                row += f" {now['cpu_s']:.2f} | {1000 * now['cpu_s'] / size:.0f} |"
            lines.append(row)
    lines += [*([""] + note.splitlines() if note else []), "", END, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--before", type=pathlib.Path, help="another checkout (with .venv) to measure first")
    parser.add_argument("--profile", help="write a cProfile of each command into this directory")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    parser.add_argument("--rows", type=pathlib.Path, nargs=2, metavar=("BEFORE", "AFTER"), help="render saved rows")
    parser.add_argument("--save", type=pathlib.Path, help="also write the measured rows to this JSON file")
    parser.add_argument("--note", default="", help="a paragraph to print under the table")
    args = parser.parse_args(argv)
    if args.rows:
        before_rows, after_rows = (json.loads(path.read_text()) for path in args.rows)
        label = str(args.before or "main")
        section = render(args.sizes, after_rows, before_rows, label, bool(args.profile), args.note)
        print(section)
        if not args.no_write:
            from bench.engine import write_section

            write_section(section, START, END)
        return 0
    if args.profile:
        for sub in ("before", "after"):
            pathlib.Path(args.profile, sub).mkdir(parents=True, exist_ok=True)
    before = run_tree(args.before, args.sizes, args.profile and f"{args.profile}/before") if args.before else None
    after = run_tree(REPO, args.sizes, args.profile and f"{args.profile}/after")
    if args.save:
        args.save.write_text(json.dumps({"before": before, "after": after}, indent=1))
    label = str(args.before) if args.before else ""
    section = render(args.sizes, after, before, label, bool(args.profile), args.note)
    print(section)
    if not args.no_write:
        from bench.engine import write_section

        write_section(section, START, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
