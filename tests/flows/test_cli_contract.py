"""Every `modelplane` command that runs a flow keeps the CI contract (flows/exitcodes.py, docs/platform.md):

(a) `--json` prints one parseable JSON document on stdout when the command ran (exit 0 or 3);
(b) a missing cluster path exits 2 with exactly one `error: ...` line on stderr and no traceback;
(c) a degraded run (here: the API server refuses every status write) still prints its JSON, ends with one
    `degraded: ...` line per problem on stderr and exits 3 (the run log before them may show a failed task).

The commands are enumerated from the typer app: each is either in FLOW_COMMANDS (how to run it on the
example cluster) or in NOT_FLOWS (with the reason), so a new command fails here until it is classified.
Runs (a) and (c) use the real entry point in a subprocess (what a CI job sees) against this test worker's
Prefect API (``prefect_api``); (b) exits before Prefect starts, so it runs in-process.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from flows.cli import app
from flows.exitcodes import ExitCode
from tests.flows.platform_support import cluster_server, load_example_cluster  # noqa: F401
from tests.servers.kubeserver.fixture import KubeServer

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "examples"
MIRROR = f"docker.io=oci-layout:{REPO / 'deployments' / 'example-images'}"

pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True)
class FlowCommand:
    """How to run one command on the example cluster."""

    args: tuple[str, ...] = ()
    clean: int = ExitCode.OK
    """Its exit code on the example cluster (3 where the example itself cannot be served cleanly: why)."""
    why_not_clean: str = ""
    degradable: str = "status writes"
    """What a refused status write degrades; empty where a run has no writes to refuse (why in NO_DEGRADED)."""
    extra: dict[str, Any] = field(default_factory=dict)


FLOW_COMMANDS: dict[str, FlowCommand] = {
    "optimize-allocation": FlowCommand(("--metrics-file", str(REPO / "deployments" / "example-metrics.yaml"))),
    "discover-models": FlowCommand(("--registry-mirror", MIRROR)),
    "resolve-templates": FlowCommand(
        clean=ExitCode.DEGRADED, why_not_clean="its template waits for its cache (Progressing)"
    ),
    "rollout-services": FlowCommand(clean=ExitCode.DEGRADED, why_not_clean="its services are not Running yet"),
    "reconcile-aim": FlowCommand(
        ("--registry-mirror", MIRROR),
        clean=ExitCode.DEGRADED,
        why_not_clean="its template waits for its cache; its services are not Running yet",
    ),
    "rollout-models": FlowCommand(),
    "serve-openmodel": FlowCommand(
        ("qwen2-5-0-5b-instruct", "-n", "llm-serving"),
        clean=ExitCode.DEGRADED,
        why_not_clean="its ModelCache is Pending until warm-caches fills it",
    ),
    # cache-demo's ModelCache is filled from S3 at a closed local port: Failed, degraded, fast and offline.
    "warm-caches": FlowCommand(
        ("-n", "cache-demo"), clean=ExitCode.DEGRADED, why_not_clean="its S3 endpoint is not running"
    ),
    # The frontier's extra replays touch no cluster either, nor do the other policies' replays (two of the six
    # here: 1.8 s of CPU less a run); tests/flows/test_simulate_flow.py proves them.
    "simulate-policies": FlowCommand(
        (
            "--trace",
            str(REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"),
            "--duration",
            "60",
            "--no-frontier",
            *("-p", "modelplane", "-p", "static-peak"),
        ),
        degradable="",
    ),
    "tune-sizing": FlowCommand(
        ("--trace", str(REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"), "--duration", "60")
    ),
    "calibrate-profiles": FlowCommand(clean=ExitCode.DEGRADED, why_not_clean="no metrics to fit a profile from"),
    "watch-models": FlowCommand(("--watch-seconds", "1"), degradable=""),
}
NO_DEGRADED = {
    "simulate-policies": "replays a trace against a copy of the cluster description in memory: no cluster writes (0 or 2)",
    "watch-models": "reads only: a watch that ran is a clean run (0 or 2)",
}
NOT_FLOWS = {
    "render-crds": "prints the generated CRDs",
    "validate-manifests": "validates manifests without a flow; --json, 0/2/3 (tests/test_cli.py, tests/test_exitcodes.py)",
    "serve-deployments": "serves the deployments until stopped",
    "register-deployments": "registers the deployments on a Prefect server",
    "build-image": "prints Modelplane's image reference, or runs docker build/push (tests/flows/test_worker_manifests.py)",
    "render-worker-manifests": "prints/writes the worker's install files (tests/flows/test_worker_manifests.py)",
    "fill-cache": "runs inside a fill Job (exit 1 fill failed, 2 bad source; tests/downloader)",
}
COMMANDS = sorted(FLOW_COMMANDS)


def test_every_command_is_classified() -> None:
    """Every visible command (the hidden ones are earlier names of these: tests/test_cli.py)."""
    commands = {name for name, c in typer.main.get_command(app).commands.items() if not c.hidden}
    assert commands == set(FLOW_COMMANDS) | set(NOT_FLOWS), (
        f"classify in FLOW_COMMANDS or NOT_FLOWS: {sorted(commands ^ (set(FLOW_COMMANDS) | set(NOT_FLOWS)))}"
    )
    assert {name for name, c in FLOW_COMMANDS.items() if not c.degradable} == set(NO_DEGRADED)


def modelplane(
    prefect_api: str | None, name: str, cluster: str, tmp_path: pathlib.Path
) -> subprocess.CompletedProcess[str]:
    """`modelplane NAME ARGS --cluster CLUSTER --json`, as a CI job runs it (its own process), tracked by the
    Prefect API ``prefect_api``, or (None) with no Prefect API configured: untracked on a manifests directory."""
    spec = FLOW_COMMANDS[name]
    args = [*spec.args, *(("-o", str(tmp_path / "report")) if name == "simulate-policies" else ())]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(
        {"KUBECONFIG": str(tmp_path / "no-kubeconfig"), **({"PREFECT_API_URL": prefect_api} if prefect_api else {})}
    )
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", name, *args, "--cluster", cluster, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_json_on_stdout(result: subprocess.CompletedProcess[str]) -> Any:
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"--json must print one JSON document on stdout, got:\n{result.stdout[:2000]}") from None


SAME_REPORT = ("optimize-allocation", "tune-sizing", "rollout-models")
"""Commands whose tracked and untracked runs must also print the same JSON report and leave the same files."""


@pytest.mark.parametrize("name", COMMANDS)
def test_json_on_the_example_cluster(name: str, prefect_api: str, tmp_path: pathlib.Path) -> None:
    """The same exit code, JSON and ``degraded:`` lines whether the run is tracked by a Prefect API or runs
    untracked on the manifests directory (tasks/tracking.py). For SAME_REPORT, one flow code path: the two runs,
    each on its own copy of the example cluster, print the same JSON report (times aside) and leave the same
    files. Both runs are in one test so each command's two runs are made once, not again for the comparison."""
    spec = FLOW_COMMANDS[name]
    outputs = []
    for tracked in (True, False):
        run_dir = tmp_path / ("tracked" if tracked else "untracked")
        cluster = run_dir / "cluster"
        shutil.copytree(EXAMPLES, cluster)
        result = modelplane(prefect_api if tracked else None, name, str(cluster), run_dir)
        where = "tracked" if tracked else "untracked"
        assert result.returncode == spec.clean, f"{where}: exit {result.returncode}:\n{result.stderr[-3000:]}"
        document = assert_json_on_stdout(result)
        assert "Traceback" not in result.stderr, where
        degraded = [line for line in result.stderr.splitlines() if line.startswith("degraded: ")]
        assert bool(degraded) == (spec.clean == ExitCode.DEGRADED), (where, spec.why_not_clean, result.stderr[-2000:])
        manifests = {path: text for path, text in tree_snapshot(cluster).items() if not path.startswith(".modelplane")}
        outputs.append((strip_times(document), manifests))
    if name in SAME_REPORT:
        assert outputs[0][0] == outputs[1][0]
        assert outputs[0][1].keys() == outputs[1][1].keys()


@pytest.mark.parametrize("name", COMMANDS)
def test_missing_cluster_path_is_one_line_and_exit_2(name: str, tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "no-such-cluster"
    spec = FLOW_COMMANDS[name]
    result = CliRunner().invoke(app, [name, *spec.args, "--cluster", str(missing), "--json"])
    assert result.exit_code == ExitCode.CANNOT_RUN, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), "no exception escapes (no traceback)"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(missing) in lines[0], result.stderr
    assert result.stdout == "", "nothing on stdout: a pipeline must not parse a half result"


# Commands whose example run is degraded already have shown (c) above.
@pytest.mark.parametrize(
    "name", [n for n in COMMANDS if FLOW_COMMANDS[n].degradable and FLOW_COMMANDS[n].clean == ExitCode.OK]
)
def test_refused_writes_make_a_degraded_run_exit_3(
    name: str, prefect_api: str, cluster_server: KubeServer, tmp_path: pathlib.Path
) -> None:
    """The example cluster on the Kubernetes API test server, which answers every status write 422: the
    command still runs (JSON on stdout), says what failed on stderr and exits 3."""
    load_example_cluster(cluster_server)
    cluster_server.inject("PATCH", r"/status$", 422, times=10_000, message="refused by the test")
    try:
        result = modelplane(prefect_api, name, f"kubeconfig:{cluster_server.kubeconfig}", tmp_path)
    finally:
        cluster_server.clear_injections()
    assert result.returncode == ExitCode.DEGRADED, f"exit {result.returncode}:\n{result.stderr[-3000:]}"
    assert_json_on_stdout(result)
    # The command ends on its own verdict, one line per problem (the run log above may show a task's failure).
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("degraded: ") and "refused by the test" in result.stderr, result.stderr[
        -2000:
    ]


def tree_snapshot(root: pathlib.Path) -> dict[str, bytes]:
    """Every file under ``root`` with its content."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", COMMANDS)
def test_empty_cluster_is_never_the_working_directory(
    name: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--cluster ""` with nothing configured (no $MODELPLANE_CLUSTER, no kubeconfig, not in a pod) is one
    `error:` line and exit 2; the working directory, here a copy of the example cluster a local run would
    happily rewrite, is left byte for byte as it was."""
    workdir = tmp_path / "cwd"
    shutil.copytree(EXAMPLES, workdir)
    before = tree_snapshot(workdir)
    monkeypatch.chdir(workdir)
    for variable in ("MODELPLANE_CLUSTER", "KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config
    spec = FLOW_COMMANDS[name]
    result = CliRunner().invoke(app, [name, *spec.args, "--cluster", "", "--json"])
    assert result.exit_code == ExitCode.CANNOT_RUN, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    describes = name in {
        "simulate-policies",
        "tune-sizing",
    }  # they read a cluster description: empty is an error, no default applies
    expected = "--cluster is empty" if describes else "no cluster configured"
    assert expected in lines[0], lines[0]
    if not describes:
        assert "MODELPLANE_CLUSTER" in lines[0], lines[0]
    assert result.stdout == ""
    assert tree_snapshot(workdir) == before, "the working directory was written"


def strip_times(document: Any) -> Any:
    """A report without the values that differ between two runs of the same inputs (times)."""
    if isinstance(document, dict):
        return {k: strip_times(v) for k, v in document.items() if "time" not in k.lower() and k != "now"}
    if isinstance(document, list):
        return [strip_times(v) for v in document]
    return document
