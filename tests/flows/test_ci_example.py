"""deployments/ci/preview-allocation.yml works as written: its shell steps run in order (real `kubectl get -o
yaml` against a Kubernetes API test server holding the example cluster, then `modelplane validate-manifests` and
`modelplane optimize --dry-run --json` on the snapshot), pass on a clean cycle and fail on a degraded one
with the documented exit code, leaving the allocation for the artifact step."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml

from flows.exitcodes import ExitCode
from tests.flows.platform_support import cluster_server, load_example_cluster  # noqa: F401
from tests.servers.kubeserver.fixture import KubeServer

REPO = pathlib.Path(__file__).resolve().parents[2]
PIPELINE = REPO / "deployments" / "ci" / "preview-allocation.yml"
# Steps the CI machine does that the test environment already has: the package is installed, and the
# kubeconfig points at the test server.
PROVIDED = {"install", "kubeconfig"}


def job() -> dict[str, Any]:
    return yaml.safe_load(PIPELINE.read_text())["jobs"]["preview"]


def run_pipeline(
    workdir: pathlib.Path, kubeconfig: str, prefect_api: str, **env_overrides: str
) -> list[tuple[str, int]]:
    """Run the job's `run` steps like the CI runner (bash -eo pipefail, the job's env, stop at the first
    failure) against ``prefect_api`` (without one each command would start an ephemeral API, the laptop
    path tests/test_demo.py runs); returns (step id, exit code) of each step that ran."""
    spec = job()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({k: str(v) for k, v in spec["env"].items()})
    env.update(
        KUBECONFIG=kubeconfig,
        PREFECT_HOME=str(workdir / ".prefect"),
        PREFECT_API_URL=prefect_api,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        **env_overrides,
    )
    results = []
    for step in spec["steps"]:
        if "run" not in step or step.get("id") in PROVIDED:
            continue
        assert step.get("shell", spec["defaults"]["run"]["shell"]) == "bash"
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        results.append((step["id"], done.returncode))
        (workdir / f"{step['id']}.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            break
    return results


@pytest.fixture()
def checkout(tmp_path: pathlib.Path) -> pathlib.Path:
    """The job's working directory: a checkout whose deployments/ is this repository's."""
    (tmp_path / "deployments").symlink_to(REPO / "deployments")
    return tmp_path


@pytest.fixture(scope="module")
def example_server(cluster_server: KubeServer) -> KubeServer:  # noqa: F811
    load_example_cluster(cluster_server)
    return cluster_server


def test_pipeline_previews_the_allocation_of_a_kubectl_snapshot(
    example_server: KubeServer, prefect_api: str, checkout: pathlib.Path
) -> None:
    results = run_pipeline(checkout, example_server.kubeconfig, prefect_api)
    assert results == [("snapshot", 0), ("validate", 0), ("preview", 0)], (
        results,
        (checkout / f"{results[-1][0]}.log").read_text(),
    )
    snapshot = yaml.safe_load((checkout / "cluster-snapshot.yaml").read_text())
    assert snapshot["kind"] == "List" and any(item["kind"] == "VariantAutoscaling" for item in snapshot["items"])
    rows = {row["name"]: row for row in json.loads((checkout / "allocation.json").read_text())}
    assert rows["llama-3-1-8b-h100"]["desired"] == 3 and rows["llama-3-1-8b-h100"]["applied"] is False
    assert "status" not in next(i for i in snapshot["items"] if i["kind"] == "VariantAutoscaling"), (
        "kubectl saw no write"
    )


def test_pipeline_fails_on_a_degraded_cycle(
    example_server: KubeServer, prefect_api: str, checkout: pathlib.Path
) -> None:
    metrics = checkout / "no-load.yaml"
    metrics.write_text("collectedAt: 2026-11-22T12:00:00Z\nmodels: []\n")
    results = run_pipeline(checkout, example_server.kubeconfig, prefect_api, METRICS_FILE=str(metrics))
    assert results[-1] == ("preview", int(ExitCode.DEGRADED)), (results, (checkout / "preview.log").read_text())
    log = (checkout / "preview.log").read_text()
    assert "degraded:" in log and "Traceback" not in log
    assert json.loads((checkout / "allocation.json").read_text()), "the preview is still there for the artifact step"


def test_pipeline_cannot_run_without_the_cluster(prefect_api: str, checkout: pathlib.Path) -> None:
    """No snapshot (kubectl failed): the job stops at the snapshot step, before any preview."""
    missing = checkout / "missing-kubeconfig"
    results = run_pipeline(checkout, str(missing), prefect_api)
    assert results[0][0] == "snapshot" and results[0][1] != 0 and len(results) == 1
