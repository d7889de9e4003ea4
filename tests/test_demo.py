"""``./dev.sh demo`` works on a copy: the checked-in examples stay clean and every demo starts afresh."""

from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess
import sys

import pytest

from tests.prefect_db import seed_prefect_home, trust_env

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_demo(demo_dir: pathlib.Path, prefect_api: str | None = None) -> subprocess.CompletedProcess[str]:
    """``./dev.sh demo`` into ``demo_dir``: with no Prefect API configured (the demo starts one for its commands
    on a Prefect home of its own, as on a laptop), or against ``prefect_api``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(trust_env(), MODELPLANE_VENV=sys.prefix, MODELPLANE_DEMO_DIR=str(demo_dir))
    if prefect_api:
        env["PREFECT_API_URL"] = prefect_api
    else:
        env["PREFECT_HOME"] = str(seed_prefect_home(demo_dir.parent / f"{demo_dir.name}-prefect-home"))
    return subprocess.run(
        [str(REPO / "dev.sh"), "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def api_address(log: pathlib.Path) -> tuple[str, int]:
    """The host and port of the API a ``prefect server start`` log says it serves."""
    found = re.search(r"PREFECT_API_URL=http://([\d.]+):(\d+)/api", log.read_text())
    assert found, log.read_text()
    return found.group(1), int(found.group(2))


@pytest.mark.long_wall  # about 2 minutes (tests/grouping.py)
@pytest.mark.timeout(1500)  # three demos on a runner shared by 4 workers
def test_demo_twice_leaves_the_examples_untouched(prefect_api: str, tmp_path: pathlib.Path) -> None:
    before = snapshot(EXAMPLES)
    demo_dir = tmp_path / "demo"
    first = run_demo(demo_dir)
    assert f"a copy of deployments/examples in {demo_dir}" in first.stdout, first.stdout + first.stderr
    assert "Modelplane allocation" in first.stdout
    assert "docs.prefect.io" not in first.stdout + first.stderr  # Prefect's temporary-server lines are dropped
    written = snapshot(demo_dir)
    assert written != {k: v for k, v in before.items()} | {".modelplane-demo": b""}  # the demo wrote status
    # The demo's own Prefect API (its log beside the copy) is stopped when the demo ends.
    host, port = api_address(tmp_path / "demo.prefect-api.log")
    with socket.socket() as sock:
        assert sock.connect_ex((host, port)) != 0, f"the demo's Prefect API still listens on {host}:{port}"
    # The second demo runs against a Prefect API, as for a person who started a server: the same allocation,
    # and it starts no API of its own.
    second = run_demo(demo_dir, prefect_api)
    assert "Modelplane allocation" in second.stdout, second.stdout + second.stderr
    assert (
        first.stdout.split("Modelplane allocation")[1] == second.stdout.split("Modelplane allocation")[1]
    )  # same start
    assert snapshot(EXAMPLES) == before
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    refused = run_demo(tmp_path / "mine")
    assert refused.returncode == 2 and (tmp_path / "mine" / "keep.txt").exists()
