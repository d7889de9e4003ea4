"""Fuzz every flow command with invalid objects among the valid example cluster (tests/fuzzing.py).

For each command, the example cluster is run once as is (the baseline) and once with the generated
invalid objects of the kinds it reads added, one file each. Asserted per command:

* it ends with exit 3 (ran degraded) — never a crash (exit 1) and never a traceback in its output;
* every invalid object it read carries a condition naming the field that made it invalid;
* every valid object comes out as in the baseline (same rows in ``--json``);
* every file changed by the run differs from what was read only in ``status`` (no other byte lost).

Profiles: ``MODELPLANE_FUZZ=ci`` (the default, what CI runs; ``full`` is the same) generates 200 invalid
objects per kind (once per session, shared by the commands that read the kind) and runs every command;
``MODELPLANE_FUZZ=long`` generates ``MODELPLANE_FUZZ_COUNT`` per kind (default 2000), on demand. The tests
share one pytest-xdist worker (``xdist_group``), so a kind is generated once and one Prefect test server
serves them. Counts and CPU/wall seconds per phase go to ``$MODELPLANE_FUZZ_REPORT`` when set
(docs/benchmarks.md quotes them).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import time
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.exitcodes import ExitCode
from tests.fuzzing import EXAMPLES, REPO, Variant, invalid_variants

PROFILE = os.environ.get("MODELPLANE_FUZZ", "ci")
LONG = PROFILE == "long"
COUNT = int(os.environ.get("MODELPLANE_FUZZ_COUNT", "2000")) if LONG else 200
"""Invalid objects per kind: 200 in CI (``ci``, the default; ``full`` is the same), every command."""
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's safe loader and dumper: the harness reads and writes hundreds of documents with 100 000-character
strings, and PyYAML's pure-Python ones spent more time on that than the flows did."""
MIRROR = f"docker.io=oci-layout:{REPO / 'deployments' / 'example-images'}"

pytestmark = [
    pytest.mark.timeout(3600 if LONG else 900),
    pytest.mark.xdist_group("fuzz"),  # one worker: each kind generated once, one Prefect test server
]


@dataclass(frozen=True)
class Command:
    """A flow command, the kinds it reads, and how to run it on the example cluster."""

    kinds: tuple[str, ...]
    args: tuple[str, ...] = ()
    writes_status: bool = True
    """Whether the command writes the status of the objects fuzzed (simulate writes nothing; serve-openmodel
    reads only the OpenModel it serves)."""


COMMANDS: dict[str, Command] = {
    "optimize": Command(("VariantAutoscaling",), ("--metrics", str(REPO / "deployments" / "example-metrics.yaml"))),
    "calibrate": Command(("VariantAutoscaling",)),
    "simulate": Command(
        ("VariantAutoscaling",),
        # Invalid objects are set aside before any replay, so the frontier's extra replays (each policy over its
        # knob, the oracle) and the other policies' replays add time, not coverage (two of the six here: about
        # 1.8 s of CPU less a run): tests/flows/test_simulate_flow.py proves the frontier and every policy.
        (
            "--trace",
            str(REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"),
            "--duration",
            "60",
            "--no-frontier",
            *("-p", "modelplane", "-p", "static-peak"),
        ),
        writes_status=False,
    ),
    "warm-caches": Command(("ModelCache",)),
    "discover-models": Command(("AIMClusterModel",), ("--registry-mirror", MIRROR)),
    "resolve-templates": Command(("AIMServiceTemplate",)),
    "rollout-services": Command(("AIMService",)),
    "reconcile-aim": Command(("AIMClusterModel", "AIMServiceTemplate", "AIMService"), ("--registry-mirror", MIRROR)),
    "rollout-models": Command(("Model",)),
    "serve-openmodel": Command(("OpenModel",), ("qwen2-5-0-5b-instruct", "-n", "llm-serving"), writes_status=False),
}

_VARIANTS: dict[str, tuple[list[Variant], int, float]] = {}


def variants(kind: str) -> tuple[list[Variant], int, float]:
    """The kind's invalid variants (generated once per session, shared by every command that reads the kind),
    candidates tried, CPU seconds it took."""
    if kind not in _VARIANTS:
        start = time.process_time()
        found, tried = invalid_variants(kind, COUNT)
        _VARIANTS[kind] = (found, tried, time.process_time() - start)
    return _VARIANTS[kind]


def cpu_seconds() -> float:
    """CPU time of this process and its live child processes (the Prefect test server runs in one): the
    budget is CPU time, since the machines the harness runs on are shared."""
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


class Clock:
    """CPU and wall seconds of a test's phases, each lap since the previous one."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self._cpu, self._wall = cpu_seconds(), time.perf_counter()

    def lap(self, phase: str) -> None:
        cpu, wall = cpu_seconds(), time.perf_counter()
        self.cpu[phase], self.wall[phase] = round(cpu - self._cpu, 2), round(wall - self._wall, 2)
        self._cpu, self._wall = cpu, wall


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def outside_status(text: bytes) -> list[bytes]:
    """The lines of a manifest file without its top-level ``status:`` blocks: a status write must leave every
    one of them byte for byte as it was."""
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith(b"status:"):
            inside = True
            continue
        if inside and (line.startswith((b" ", b"- ")) or not line.strip()):
            continue
        inside = False
        kept.append(line)
    return kept


def run(name: str, cluster: pathlib.Path, tmp_path: pathlib.Path) -> tuple[int, str, str, list[logging.LogRecord]]:
    """The command in-process (the real typer app), ``--json``; returns exit code, stdout, stderr and the
    log records that carried a traceback."""
    args = [name, *COMMANDS[name].args, "--cluster", str(cluster), "--json"]
    if name == "simulate":
        args += ["-o", str(tmp_path / f"report-{cluster.name}")]
    traced: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info:
                traced.append(record)

    handler = Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    for logger in (
        logging.getLogger("prefect"),
        logging.getLogger("prefect.flow_runs"),
        logging.getLogger("prefect.task_runs"),
    ):
        logger.addHandler(handler)
    try:
        result = CliRunner().invoke(app, args, env={"KUBECONFIG": str(tmp_path / "none")})
    finally:
        root.removeHandler(handler)
        for logger in (
            logging.getLogger("prefect"),
            logging.getLogger("prefect.flow_runs"),
            logging.getLogger("prefect.task_runs"),
        ):
            logger.removeHandler(handler)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        return 1, result.stdout, "".join(traceback.format_exception(result.exception)), traced
    return result.exit_code, result.stdout, result.stderr, traced


def rows_of(stdout: str) -> list[Any]:
    """The JSON document's rows that name no fuzzed object (``fuzz-`` names), in a stable order."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return [stdout]
    return sorted(
        json.dumps(r, sort_keys=True, default=str)
        for r in _walk_rows(data)
        if "fuzz-" not in json.dumps(r, default=str)
    )


def _walk_rows(data: Any) -> list[Any]:
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        rows: list[Any] = []
        for key, value in data.items():
            if isinstance(value, list):
                rows += value
            elif key not in ("summary", "settings", "files", "timing", "elapsed_s"):
                rows.append({key: value})
        return rows
    return [data]


def _mask_volatile(rows: list[str]) -> list[str]:
    """Counts of objects and timings change with the fuzzed objects present; the rows' own fields do not."""
    return rows


def condition_names_field(obj: dict[str, Any], field: str) -> bool:
    """Whether a status condition (or the status message) of ``obj`` names ``field`` (its path or last part)."""
    status = obj.get("status") or {}
    texts = [json.dumps(c, default=str) for c in status.get("conditions") or []]
    texts.append(json.dumps({k: v for k, v in status.items() if k != "conditions"}, default=str))
    last = field.split(".")[-1].split("[")[0]
    return any(field in t or (last and last in t) for t in texts if "alse" in t or "ailed" in t or "nvalid" in t)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_invalid_objects_never_stop_a_run(
    name: str, generated: None, prefect_harness: None, tmp_path: pathlib.Path, fuzz_report: dict[str, Any]
) -> None:
    command = COMMANDS[name]
    clock = Clock()
    baseline_dir = tmp_path / "baseline"
    shutil.copytree(EXAMPLES, baseline_dir)
    base_before = snapshot(baseline_dir)
    base_code, base_out, _, _ = run(name, baseline_dir, tmp_path)
    base_after = snapshot(baseline_dir)
    written_anyway = {f for f in base_before if base_after.get(f) != base_before[f]}  # the flow's own writes
    clock.lap("baseline")

    fuzz_dir = tmp_path / "fuzz"
    shutil.copytree(EXAMPLES, fuzz_dir)
    placed: dict[str, Variant] = {}
    for kind in command.kinds:
        for variant in variants(kind)[0]:
            path = fuzz_dir / f"zz-{variant.obj['metadata']['name']}.yaml"
            path.write_text(yaml.dump(variant.obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True))
            placed[path.name] = variant
    before = snapshot(fuzz_dir)
    clock.lap("place")
    code, out, err, traced = run(name, fuzz_dir, tmp_path)
    clock.lap("fuzzed_run")
    after = snapshot(fuzz_dir)

    problems: list[str] = []
    if code not in (ExitCode.DEGRADED,):
        problems.append(f"exit {code}, expected 3: {err.strip().splitlines()[-3:] if err.strip() else out[-300:]}")
    if "Traceback" in err or traced:
        problems.append(f"traceback: {(err or traced[0].getMessage())[:300]}")
    lost = [
        f
        for f in before
        if f in after
        and f not in written_anyway
        and before[f] != after[f]
        and outside_status(before[f]) != outside_status(after[f])
    ]
    lost += [f for f in before if f not in after and f not in written_anyway]
    if lost:
        problems.append(f"{len(lost)} files changed outside status: {lost[:3]}")
    unmarked = []
    if command.writes_status:
        for file, variant in placed.items():
            docs = [d for d in yaml.load_all(after.get(file, b""), Loader=_Loader) if isinstance(d, dict)]  # noqa: S506
            if not docs or not condition_names_field(docs[0], variant.field):
                unmarked.append(f"{variant.obj['metadata']['name']} ({variant.mutation}; rejected at {variant.field})")
        if unmarked:
            problems.append(
                f"{len(unmarked)}/{len(placed)} invalid objects without a condition naming their field, "
                f"e.g. {unmarked[:2]}"
            )
    if base_code in (0, 3) and rows_of(out) != rows_of(base_out):
        problems.append("valid objects came out differently with the invalid ones present")
    clock.lap("checks")
    fuzz_report[name] = {
        "invalid_objects": len(placed),
        "seconds": clock.wall["fuzzed_run"],
        "cpu_seconds": clock.cpu,
        "wall_seconds": clock.wall,
        "exit": code,
        "baseline_exit": base_code,
        "problems": problems,
        "generated": {
            k: {"invalid": len(variants(k)[0]), "tried": variants(k)[1], "cpu_seconds": round(variants(k)[2], 1)}
            for k in command.kinds
        },
    }
    assert len(placed) >= COUNT * len(command.kinds) * 0.99
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="session")
def generated() -> None:
    """Every kind's invalid variants, generated before the Prefect test server starts: its client threads in
    this process use ``random``, which hypothesis would see (and warn about) inside its strategies."""
    for kind in sorted({kind for command in COMMANDS.values() for kind in command.kinds}):
        variants(kind)


@pytest.fixture(scope="session")
def fuzz_report() -> Any:
    """Each command's counts and timing, written to ``$MODELPLANE_FUZZ_REPORT`` at the end. Session-scoped, so
    under pytest-xdist the commands spread over the workers: each merges its own into the file (under a lock),
    keeping what the other workers of the same run (``PYTEST_XDIST_TESTRUNUID``) wrote."""
    report: dict[str, Any] = {}
    yield report
    target = os.environ.get("MODELPLANE_FUZZ_REPORT")
    if target and report:
        merge_report(pathlib.Path(target), report, os.environ.get("PYTEST_XDIST_TESTRUNUID", ""))


def merge_report(path: pathlib.Path, commands: dict[str, Any], run: str) -> None:
    """Add ``commands`` to the report at ``path``, keeping the commands another worker of ``run`` wrote."""
    import fcntl

    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged: dict[str, Any] = {}
        if run and path.exists():
            try:
                earlier = json.loads(path.read_text())
            except ValueError:
                earlier = {}
            if earlier.get("run") == run:
                merged = earlier.get("commands") or {}
        merged.update(commands)
        document = {"profile": PROFILE, "count": COUNT, "run": run, "commands": dict(sorted(merged.items()))}
        path.write_text(json.dumps(document, indent=2) + "\n")
