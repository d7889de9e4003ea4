"""``./dev.sh``'s choice of interpreter for the virtualenvs it makes (CONTRIBUTING.md, "Set up"): ``$MODELPLANE_PYTHON``,
else the distribution's Python 3.11 when it can make a virtualenv, else the first ``python3.11`` on ``PATH``."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
DISTRIBUTION_PYTHON = pathlib.Path("/usr/bin/python3.11")


def venv_python(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run dev.sh's ``venv_python`` function alone, with the check it calls (sourced from the script, so nothing
    is installed)."""
    functions = "/^can_make_venv() {/,/^}/p; /^venv_python() {/,/^}/p"
    script = f"set -euo pipefail; source <(sed -n '{functions}' {REPO / 'dev.sh'}); venv_python"
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def can_make_a_venv(python: pathlib.Path) -> bool:
    return (
        python.exists() and subprocess.run([str(python), "-c", "import ensurepip"], capture_output=True).returncode == 0
    )


def test_an_unusable_override_is_one_error_line_and_installs_nothing(tmp_path: pathlib.Path) -> None:
    venv = tmp_path / "venv"
    env = {**os.environ, "MODELPLANE_PYTHON": str(tmp_path / "no-python"), "MODELPLANE_VENV": str(venv)}
    result = subprocess.run(
        [str(REPO / "dev.sh"), "test-fast"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"error: MODELPLANE_PYTHON={tmp_path / 'no-python'} cannot make a virtualenv"
    ], result.stderr
    assert not venv.exists()


def test_the_distribution_python_is_chosen_over_one_earlier_on_path(tmp_path: pathlib.Path) -> None:
    if not can_make_a_venv(DISTRIBUTION_PYTHON):  # checked when the test runs, not in every worker's collection
        pytest.skip("no distribution Python 3.11 with venv here")
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "python3.11").symlink_to(DISTRIBUTION_PYTHON)  # a usable python3.11 that PATH finds first
    env = {k: v for k, v in os.environ.items() if k != "MODELPLANE_PYTHON"}
    env["PATH"] = f"{shadow}:{env['PATH']}"
    result = venv_python(env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(DISTRIBUTION_PYTHON)
    env["MODELPLANE_PYTHON"] = str(shadow / "python3.11")
    assert venv_python(env).stdout.strip() == str(shadow / "python3.11")  # the override wins
