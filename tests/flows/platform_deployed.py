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

from flows.deployments import PROCESS_POOL, deployment_entries
from tests.flows.platform_support import LOCAL_RUN_PARAMETERS
from tests.flows.prefect_server import PrefectServer
from tests.waiting import wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
ENTRIES = deployment_entries()
IDS = [e["name"] for e in ENTRIES]
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


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


def wait_until_idle(platform: PrefectServer, stored: dict[str, Any], entry: dict[str, Any]) -> None:
    """Let a run an earlier test's event chained into this deployment end first: with CANCEL_NEW it would
    otherwise cancel the run the test starts."""
    wait_for(
        lambda: all((r.get("state") or {}).get("type") in TERMINAL for r in platform.runs(stored["id"])),
        120,
        f"{entry['name']} idle",
    )
