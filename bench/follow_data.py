"""Follow the data: which of Modelplane's files one AIMService rollout and one optimize cycle pass through, how
often the run moves between the top-level packages (``flows``, ``tasks``, ``engine``) and how it comes back.

    python -m bench.follow_data [--before DIR]

Each lifecycle runs once, untracked (no Prefect API), on a copy of the example cluster (deployments/examples:
the AIMService ``llama-chat`` of 40-aim.yaml alone; the whole directory with deployments/example-metrics.yaml for
the optimize cycle), under a profiler hook (``sys.setprofile``, ``threading.setprofile``: the per-object writes
run on a thread pool) that sees every Python call and return. Counted, each once however often it happens (the
numbers do not grow with the number of objects):

- files: the modules of ``flows/``, ``tasks/`` and ``engine/`` with a function that ran;
- moves: call edges (calling function -> called function) between two top-level packages; a function of a
  library in between (Prefect, a thread pool, ``contextlib``) is looked through to the Modelplane function
  that called it;
- up: those of the moves that call back up a layer (``engine`` -> ``tasks`` or ``flows``, ``tasks`` -> ``flows``:
  a callback);
- returns: those of the moves whose called function returned a value (not ``None``) to the other package.

``--before DIR`` runs the same in another checkout (e.g. main) with its own path, for the comparison in
DESIGN.md's "Following the data".
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
LAYERS = {"engine": 1, "tasks": 2, "flows": 3}


@dataclass
class Trail:
    """What the profiler saw of one run."""

    root: pathlib.Path
    files: set[str] = field(default_factory=set)
    moves: set[tuple[str, str]] = field(default_factory=set)
    returns: set[tuple[str, str]] = field(default_factory=set)

    def place(self, frame: FrameType | None) -> tuple[str, str] | None:
        """(package, ``file:function``) of the nearest Modelplane frame at or above ``frame``."""
        while frame is not None:
            path = frame.f_code.co_filename
            if path.startswith(str(self.root)):
                relative = path[len(str(self.root)) + 1 :]
                package = relative.split("/", 1)[0]
                if package in LAYERS:
                    return package, f"{relative}:{frame.f_code.co_name}"
            frame = frame.f_back
        return None

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        """The profiler: record a Modelplane function's call or return."""
        if event not in ("call", "return"):
            return
        here = self.place(frame)
        if here is None or not frame.f_code.co_filename.startswith(str(self.root)):
            return
        caller = self.place(frame.f_back)
        self.files.add(here[1].split(":", 1)[0])
        if caller is None or caller[0] == here[0]:
            return
        edge = (f"{caller[0]}|{caller[1]}", f"{here[0]}|{here[1]}")
        if event == "call":
            self.moves.add(edge)
        elif arg is not None:
            self.returns.add(edge)

    def counts(self) -> dict[str, int]:
        """The numbers DESIGN.md reports."""
        up = sum(1 for a, b in self.moves if LAYERS[a.split("|")[0]] < LAYERS[b.split("|")[0]])
        return {"files": len(self.files), "moves": len(self.moves), "up": up, "returns": len(self.returns)}


def followed(root: pathlib.Path, run: Callable[[], Any]) -> dict[str, int]:
    """The counts of ``run`` under the profiler."""
    trail = Trail(root)
    threading.setprofile(trail.hook)
    sys.setprofile(trail.hook)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return trail.counts()


def one_aim_service(examples: pathlib.Path, directory: pathlib.Path) -> pathlib.Path:
    """A cluster directory holding 40-aim.yaml's objects: one AIMService with its template, model and cache."""
    directory.mkdir()
    documents = [d for d in yaml.safe_load_all((examples / "40-aim.yaml").read_text()) if d]
    (directory / "aim.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return directory


def measure(root: pathlib.Path) -> dict[str, dict[str, int]]:
    """Both runs in this process (``root`` is the checkout on ``sys.path``)."""
    from flows.optimize import optimize
    from flows.rollout_services import rollout_services
    from flows.runs import run_untracked

    examples, metrics = root / "deployments" / "examples", root / "deployments" / "example-metrics.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        aim = one_aim_service(examples, pathlib.Path(tmp) / "aim")
        cycle = pathlib.Path(tmp) / "cycle"
        shutil.copytree(examples, cycle)
        return {
            "one AIMService (rollout-services)": followed(
                root, lambda: run_untracked(rollout_services, {"cluster": str(aim)})
            ),
            "one optimize cycle": followed(
                root, lambda: run_untracked(optimize, {"cluster": str(cycle), "metrics_file": str(metrics)})
            ),
        }


def main(argv: list[str] | None = None) -> int:
    """Print the counts as a Markdown table (and those of ``--before`` when given)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=pathlib.Path, help="another checkout to measure the same way")
    parser.add_argument("--json", action="store_true", help="print JSON (what --before reads)")
    parser.add_argument("--root", type=pathlib.Path, default=REPO, help="the checkout measured (default: this one)")
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    sys.path.insert(0, str(args.root.resolve()))
    now = measure(args.root.resolve())
    if args.json:
        sys.stdout.write(json.dumps(now) + "\n")
        return 0
    before: dict[str, dict[str, int]] = {}
    if args.before is not None:
        out = subprocess.run(
            [sys.executable, __file__, "--json", "--root", str(args.before)],
            cwd=args.before,
            env={"PYTHONPATH": str(args.before), "PATH": "/usr/bin:/bin", "HOME": str(pathlib.Path.home())},
            capture_output=True,
            text=True,
            check=True,
        )
        before = json.loads(out.stdout.strip().splitlines()[-1])
    sys.stdout.write("| run | files | moves between packages | of them back up a layer | returns across packages |\n")
    sys.stdout.write("|---|---|---|---|---|\n")
    for name, counts in now.items():
        was = before.get(name)
        cells = [
            f"{was[key]} -> {counts[key]}" if was else str(counts[key]) for key in ("files", "moves", "up", "returns")
        ]
        sys.stdout.write(f"| {name} | " + " | ".join(cells) + " |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
