"""One deployed platform per test module: `prefect server start` on 127.0.0.1 (random port, temporary home,
tests/flows/prefect_server.py), every deployment registered by `modelplane register-deployments --pool-type
process` (work pool + the documented `prefect deploy`), and a process worker; with the helpers the platform
tests share. Each module that imports :func:`platform` gets its own (module scope), so the three platform
modules run on three pytest-xdist workers at once."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest

from flows.deployments import PROCESS_POOL, deployment_entries, load_prefect_yaml
from flows.exitcodes import DEGRADED_STATE
from tests.flows.platform_support import LOCAL_RUN_PARAMETERS
from tests.flows.prefect_server import PrefectServer
from tests.waiting import wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
ENTRIES = deployment_entries()
IDS = [e["name"] for e in ENTRIES]
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def run_outcome(state: dict[str, Any]) -> str:
    """A finished run's state type, with a degraded run (``Failed`` named Degraded: it ran, and said what it could
    not; test_platform_runs.py checks that state) read as COMPLETED: what these tests ask of a run is that it ran."""
    return "COMPLETED" if state.get("name") == DEGRADED_STATE else state["type"]


def deploy_on_process_pool(server: PrefectServer) -> None:
    """Register every deployment with `modelplane register-deployments --pool-type process` (it creates the pool)
    and start a process worker on it."""
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "register-deployments", "--pool-type", "process"],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"work pool '{PROCESS_POOL}' (process): created" in result.stderr
    entries = len(load_prefect_yaml()["deployments"])  # progress off a terminal: a line per registration, then done
    assert f"register-deployments: {entries}/{entries} deployments" in result.stderr, result.stderr
    server.start_worker(PROCESS_POOL)


@pytest.fixture(scope="module")
def platform(prefect_server: PrefectServer, tmp_path_factory: pytest.TempPathFactory) -> PrefectServer:
    """The server with every deployment registered by `modelplane register-deployments --pool-type process` and a worker."""
    deploy_on_process_pool(prefect_server)
    return prefect_server


def local_parameters(entry: dict[str, Any], cluster: pathlib.Path) -> dict[str, Any]:
    """Parameters that point a flow at a private copy of the example cluster."""
    return {"cluster": str(cluster), **LOCAL_RUN_PARAMETERS.get(entry["name"], {})}


def example_cluster(tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / "cluster"
    shutil.copytree(REPO / "deployments" / "examples", target)
    return target


def wait_until_idle(platform: PrefectServer, deployment_id: str, timeout: float = 120) -> None:
    """Wait until every run of the deployment has ended: a run still going (a chained run, a queued one) holds
    the deployment's one concurrency slot, and with CANCEL_NEW it would cancel the run a test starts next."""
    wait_for(
        lambda: all((r.get("state") or {}).get("type") in TERMINAL for r in platform.runs(deployment_id)),
        timeout,
        f"the runs of deployment {deployment_id} to end",
    )


def run_when_idle(
    platform: PrefectServer,
    deployment_id: str,
    parameters: dict[str, Any],
    attempts: int = 2,
    idle_timeout: float = 120,
    run_timeout: float = 240,
) -> dict[str, Any]:
    """Create a run of the deployment once it is idle and return the run in its final state. A run cancelled
    because another one took the slot meanwhile (a slot still being released, a chained run arriving just after
    we looked) is started again, up to ``attempts`` runs in all."""
    for _attempt in range(attempts):
        wait_until_idle(platform, deployment_id, idle_timeout)
        run = platform.wait_for_run(platform.create_run(deployment_id, parameters)["id"], run_timeout)
        if run["state"]["type"] != "CANCELLED":
            break
    return run


def switch_automations(platform: PrefectServer, automations: list[dict[str, Any]], enabled: bool) -> None:
    """Switch the given automations on or off (the server reloads its triggers when one changes)."""
    for automation in automations:
        platform.patch(f"/automations/{automation['id']}", {"enabled": enabled})


def automations_of(platform: PrefectServer, deployment_id: str) -> list[dict[str, Any]]:
    """The automations whose action runs the deployment (its prefect.yaml triggers)."""
    return [
        a
        for a in platform.post("/automations/filter", {})
        if any(action.get("deployment_id") == deployment_id for action in a["actions"])
    ]
