"""``./dev.sh demo`` works on a copy: the checked-in examples stay clean and every demo starts afresh."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_demo(demo_dir: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MODELPLANE_VENV": sys.prefix, "MODELPLANE_DEMO_DIR": str(demo_dir)}
    return subprocess.run(
        [str(REPO / "dev.sh"), "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.timeout(1500)  # two demos, each starting ephemeral Prefect APIs, on a CI runner shared by 4 workers
def test_demo_twice_leaves_the_examples_untouched(tmp_path: pathlib.Path) -> None:
    before = snapshot(EXAMPLES)
    demo_dir = tmp_path / "demo"
    first = run_demo(demo_dir)
    assert f"a copy of deployments/examples in {demo_dir}" in first.stdout, first.stdout + first.stderr
    assert "Modelplane allocation" in first.stdout
    written = snapshot(demo_dir)
    assert written != {k: v for k, v in before.items()} | {".modelplane-demo": b""}  # the demo wrote status
    second = run_demo(demo_dir)
    assert "Modelplane allocation" in second.stdout, second.stdout + second.stderr
    assert (
        first.stdout.split("Modelplane allocation")[1] == second.stdout.split("Modelplane allocation")[1]
    )  # same start
    assert snapshot(EXAMPLES) == before
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    refused = run_demo(tmp_path / "mine")
    assert refused.returncode == 2 and (tmp_path / "mine" / "keep.txt").exists()
