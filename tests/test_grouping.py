"""The suite's parallel run keeps a module's shared fixture on one worker (tests/grouping.py).

pytest-xdist's ``--dist loadgroup`` groups tests by rewriting each node's id; pytest 9.2 reads the id from
another attribute, and the grouping silently stopped: every worker then started its own copy of each
module-scoped Prefect server and deployed pool (four servers where one was meant). This runs a small suite of
its own on two workers, with the installed pytest and pytest-xdist, and checks where each test ran.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

SHARED = """
import json, os, pathlib, pytest

@pytest.fixture(scope="module")
def server():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("n", range(6))
def test_shared(server, n):
    pathlib.Path(os.environ["OUT"], f"shared-{n}").write_text(json.dumps([server, os.environ["PYTEST_XDIST_WORKER"]]))
"""

SPREAD = """
import os, pathlib, pytest

@pytest.mark.parametrize("n", range(6))
def test_spread(n):
    pathlib.Path(os.environ["OUT"], f"spread-{n}").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_a_module_scoped_fixture_starts_once(tmp_path: pathlib.Path) -> None:
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "test_shared.py").write_text(SHARED)
    (suite / "test_spread.py").write_text(SPREAD)
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.grouping"]
        + ["-n", "2", "--dist", "loadgroup", "--rootdir", str(suite), str(suite)],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    shared = [json.loads((out / f"shared-{n}").read_text()) for n in range(6)]
    assert len({worker for _, worker in shared}) == 1, f"the module's tests ran on several workers: {shared}"
    assert all(fixture_worker == worker for fixture_worker, worker in shared)
    assert all((out / f"spread-{n}").exists() for n in range(6))  # where they run depends on the machine's load


ORDERED = """
import pytest

@pytest.fixture
def prefect_api():
    return "http://127.0.0.1:1/api"

def test_pure():
    pass

def test_flow(prefect_api):
    pass

@pytest.mark.long_wall
def test_long():
    pass
"""


def test_long_wall_tests_come_first_then_flow_tests_then_the_rest(tmp_path: pathlib.Path) -> None:
    """The order single tests are handed out in: ``long_wall`` first, then those using the Prefect API."""
    (tmp_path / "test_order.py").write_text(ORDERED)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "tests.grouping"]
        + ["--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    collected = [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line]
    assert collected == ["test_long", "test_flow", "test_pure"]
