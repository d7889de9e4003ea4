"""``./dev.sh demo`` works on a copy: the checked-in examples stay clean and every demo starts afresh."""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
import subprocess
import sys

import pytest

from tests.prefect_db import seed_prefect_home, trust_env

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_demo(demo_dir: pathlib.Path, prefect_api: str | None = None) -> subprocess.CompletedProcess[str]:
    """``./dev.sh demo`` into ``demo_dir``: with no Prefect API configured (its commands run untracked, as on a
    laptop; a Prefect home of its own shows nothing wrote there), or against ``prefect_api``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(trust_env(), MODELPLANE_VENV=sys.prefix, MODELPLANE_DEMO_DIR=str(demo_dir))
    if prefect_api:
        env["PREFECT_API_URL"] = prefect_api
    else:
        env["PREFECT_HOME"] = str(seed_prefect_home(demo_dir.parent / f"{demo_dir.name}-prefect-home"))
    return subprocess.run(
        [str(REPO / "dev.sh"), "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


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
    # With no API configured the demo's commands run untracked: no API started, nothing recorded in Prefect.
    assert "not recorded in Prefect" in first.stderr and not (tmp_path / "demo.prefect-api.log").exists()
    with contextlib.closing(sqlite3.connect(tmp_path / "demo-prefect-home" / "prefect.db")) as db:
        assert db.execute("SELECT count(*) FROM flow_run").fetchone() == (0,)
    # The second demo runs against a Prefect API, as for a person who started a server (every run recorded
    # there): the same allocation as untracked.
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
