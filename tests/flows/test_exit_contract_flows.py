"""The exit-code contract on runs that start a flow (docs/platform.md, "Exit codes"): a parameter the flow rejects or
an unknown flavor is exit 2 with no traceback anywhere in the output; images that cannot be read make
discover-models exit 3. Each runs the real entry point against a Prefect API (this test worker's), as a CI job would."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from flows.exitcodes import ExitCode

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "examples"

pytestmark = pytest.mark.timeout(900)


def run(prefect_api: str, tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    cluster = tmp_path / "cluster"
    if not cluster.exists():
        shutil.copytree(EXAMPLES, cluster)
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "KUBECONFIG": str(tmp_path / "no-kubeconfig")}
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args, "--cluster", str(cluster)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_cannot_run_without_traceback(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == ExitCode.CANNOT_RUN, output
    assert "Traceback" not in output and "│" not in output, output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and fragment in errors[0], result.stderr


def test_a_rejected_flow_parameter_is_one_line(prefect_api: str, tmp_path: pathlib.Path) -> None:
    """The flow's schema rejects a parameter (the error names it); the command's own bound names its flag."""
    assert_cannot_run_without_traceback(
        run(prefect_api, tmp_path, "discover-models", "--namespace", "Not_A_Namespace"), "namespaces"
    )
    assert_cannot_run_without_traceback(
        run(prefect_api, tmp_path, "discover-models", "--resync-seconds", "0"), "--resync-interval"
    )


def test_an_unknown_flavor_is_one_line(prefect_api: str, tmp_path: pathlib.Path) -> None:
    assert_cannot_run_without_traceback(
        run(prefect_api, tmp_path, "serve-openmodel", "qwen2-5-0-5b-instruct", "-n", "llm-serving", "--flavor", "tpu"),
        "flavor 'tpu'",
    )


def test_images_that_cannot_be_read_make_discovery_degraded(prefect_api: str, tmp_path: pathlib.Path) -> None:
    # no --registry-mirror: docker.io is out of reach here, so the example's image cannot be read
    result = run(prefect_api, tmp_path, "discover-models", "--json")
    assert result.returncode == ExitCode.DEGRADED, result.stdout + result.stderr
    assert "degraded: AIMClusterModel meta-llama-3-1-8b-instruct: image" in result.stderr
    assert "Traceback" not in result.stderr
