"""The CLI's exit-code convention (flows/exitcodes.py), as an operator meets it in a shell.

Could-not-run cases exit 2 with exactly one ``error:`` line on stderr and no traceback, before any
Prefect machinery starts; these run the real ``modelplane`` entry point in a subprocess.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.exitcodes import ExitCode, degraded_summary, exit_code

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"


def modelplane(*args: str) -> subprocess.CompletedProcess[str]:
    """The real entry point in a subprocess: what a shell sees, stderr included."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "KUBECONFIG": "/nonexistent-kubeconfig"}
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in-process (fast), shaped like :func:`modelplane`'s result."""
    result = CliRunner().invoke(app, list(args), terminal_width=200)
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == ExitCode.CANNOT_RUN, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0]


def test_convention() -> None:
    assert (ExitCode.OK, ExitCode.CANNOT_RUN, ExitCode.DEGRADED) == (0, 2, 3)
    assert exit_code([]) == ExitCode.OK and exit_code(["metrics unavailable"]) == ExitCode.DEGRADED
    assert degraded_summary("4 variants", []) == "4 variants"
    assert degraded_summary("4 variants", ["a", "b"]) == "4 variants — DEGRADED: a; b"


@pytest.mark.parametrize("command", ["optimize", "validate-manifests"])
def test_missing_cluster_path(command: str) -> None:
    assert_one_line_error(invoke(command, "--cluster", "/nonexistent"), "/nonexistent", "does not exist")


def test_bad_kubeconfig_is_one_line(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("just a string, not a kubeconfig\n")
    assert_one_line_error(
        modelplane("optimize", "--cluster", f"kubeconfig:{bad}"), "cannot load Kubernetes configuration", str(bad)
    )
    assert_one_line_error(invoke("optimize", "--cluster", f"kubeconfig:{tmp_path / 'none'}#ctx"), "ctx")


def test_unreachable_api_server_is_one_line(tmp_path: pathlib.Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    config = tmp_path / "kubeconfig"
    config.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\n"
        "users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
    )
    assert_one_line_error(invoke("optimize", "--cluster", f"kubeconfig:{config}"), "cannot read the cluster")


def test_missing_configuration_is_reported_as_such(tmp_path: pathlib.Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "cluster")
    result = invoke("optimize", "--cluster", str(tmp_path / "cluster"), "--config-namespace", "modelplan-system")
    assert_one_line_error(result, "accelerator-unit-costs", "modelplan-system")
    assert "unknown accelerator" not in result.stdout + result.stderr


def test_missing_metrics_file_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(app, ["optimize", "--cluster", str(EXAMPLES), "--metrics", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2


def test_help_shows_targets_and_rate_window() -> None:
    result = CliRunner().invoke(app, ["optimize", "--help"], terminal_width=200)
    text = " ".join(result.stdout.split())
    assert (
        "kubeconfig:PATH#CONTEXT" in text
        and "MODELPLANE_CLUSTER" in text
        and "--rate-window" in text
        and "PROMETHEUS_RATE_WINDOW" in text
    )
    assert "Exit codes" in text


def test_bad_rate_window_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["optimize", "--cluster", str(EXAMPLES), "--rate-window", "1 minute"])
    assert result.exit_code == 2


def test_deploy_without_a_server_is_one_line() -> None:
    result = invoke_env({"PREFECT_API_URL": ""}, "register-deployments", "--pool-type", "process")
    assert_one_line_error(result, "PREFECT_API_URL is not set")
    assert_one_line_error(
        invoke_env({"PREFECT_API_URL": "http://127.0.0.1:9/api"}, "register-deployments", "--pool-type", "laptop"),
        "--pool-type",
    )


def invoke_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """:func:`invoke` with environment variables set for the call."""
    result = CliRunner().invoke(app, list(args), env=env, terminal_width=200)
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def test_a_degraded_flow_result_is_a_failed_state_named_degraded_with_the_reasons() -> None:
    """A degraded result whose caller takes it from an exception (the CLI's tracked run; a deployment's run) is a
    ``Failed`` state named ``Degraded`` (the UI colours by type: a Completed one was green like a clean run),
    its data the report inside a :class:`DegradedRun`; a flow called from Python gets a ``Completed`` named
    ``Degraded`` holding the report; an untracked run (tasks/tracking.py) has no run state and gets the report
    itself, whose ``degraded`` list gives the command its exit code."""
    import pickle

    from prefect.states import State

    from flows.exitcodes import DEGRADED_STATE, MAX_STATE_REASONS, DegradedRun, degraded_raises, flow_result
    from tasks.tracking import untracked_run

    report = {"rows": 3}
    reasons = [f"ns/model-{i}: MetricsUnavailable" for i in range(MAX_STATE_REASONS + 3)]
    with untracked_run():
        assert flow_result(report, reasons) is report
    assert flow_result(report, []) is report
    called = flow_result(report, reasons)
    assert isinstance(called, State) and called.is_completed() and called.name == DEGRADED_STATE
    assert called.data is report
    with degraded_raises():
        state = flow_result(report, reasons)
        assert flow_result(report, []) is report
    assert isinstance(state, State) and state.is_failed() and not state.is_completed()
    assert state.name == DEGRADED_STATE and state.type.value == "FAILED"
    assert state.message == called.message
    assert state.message.startswith(f"DEGRADED ({len(reasons)}): ns/model-0: MetricsUnavailable;")
    assert state.message.endswith("; and 3 more") and "\n" not in state.message
    assert isinstance(state.data, DegradedRun) and state.data.report is report and state.data.degraded == reasons
    assert str(state.data) == state.message
    stored = pickle.loads(pickle.dumps(state.data))  # a state's data is persisted as a result
    assert stored.report == report and stored.degraded == reasons
