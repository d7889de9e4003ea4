"""``./dev.sh``'s choice of interpreter for the virtualenvs it makes (CONTRIBUTING.md, "Set up"): ``$MODELPLANE_PYTHON``,
else the distribution's Python 3.11 when it can make a virtualenv, else the first ``python3.11`` on ``PATH``; the
other supported Pythons it tests, the pins it installs, and how a failure on one of them reaches CI's result."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

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


def dev_function(names: tuple[str, ...], call: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``call`` with dev.sh's functions ``names`` sourced (nothing installed, nothing run but them)."""
    functions = "; ".join(f"/^{name}() {{/,/^}}/p" for name in names)
    script = f"set -euo pipefail; cd {REPO}; source <(sed -n '{functions}' {REPO / 'dev.sh'}); {call}"
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def supported_pythons() -> list[str]:
    """The Python versions pyproject.toml's requires-python admits, as X.Y."""
    requires = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"])
    return [f"3.{minor}" for minor in range(8, 20) if requires.contains(f"3.{minor}.0")]


def test_ci_runs_every_supported_python() -> None:
    """The whole suite runs on the virtualenv's Python 3.11 and the fast tier on every other Python that
    requires-python admits (dev.sh's default $MODELPLANE_TEST_PYTHONS): no supported version goes untested."""
    default = re.search(r"MODELPLANE_TEST_PYTHONS-([\d. ]+)}", (REPO / "dev.sh").read_text())
    assert default is not None
    assert ["3.11", *default.group(1).split()] == supported_pythons()


def test_every_dependency_is_pinned_on_every_supported_python() -> None:
    """constraints.txt pins one version of every dependency pyproject.toml names (extras included) for each
    supported Python, a version the requirement admits: an install from it is the one CI tested."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pins = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    assert all(len(pin.specifier) == 1 and next(iter(pin.specifier)).operator == "==" for pin in pins), pins
    wanted = [Requirement(r) for r in [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]]
    for python in supported_pythons():
        environment = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux"}
        pinned = {
            canonicalize_name(pin.name): next(iter(pin.specifier)).version
            for pin in pins
            if pin.marker is None or pin.marker.evaluate(environment)
        }
        for requirement in wanted:
            name = canonicalize_name(requirement.name)
            if name == "modelplane" or (requirement.marker and not requirement.marker.evaluate(environment)):
                continue
            assert name in pinned, f"{requirement.name} is not pinned for Python {python}: run ./dev.sh lock"
            assert requirement.specifier.contains(pinned[name], prereleases=True), (
                f"{requirement.name}=={pinned[name]} is outside {requirement.specifier}: run ./dev.sh lock"
            )


def test_an_interpreter_is_found_under_pyenv_when_path_has_none(tmp_path: pathlib.Path) -> None:
    """A version pyenv installed but did not select (its shim on PATH fails) is found in pyenv's versions, the
    newest patch release first; a version that is nowhere is one error line naming it."""
    for patch in ("9", "10"):
        python = tmp_path / "versions" / f"3.99.{patch}" / "bin" / "python3.99"
        python.parent.mkdir(parents=True)
        python.symlink_to(sys.executable)
    env = {**os.environ, "PYENV_ROOT": str(tmp_path)}
    found = dev_function(("can_make_venv", "python_version_path"), "python_version_path 3.99", env)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(tmp_path / "versions" / "3.99.10" / "bin" / "python3.99")
    missing = dev_function(("can_make_venv", "python_version_path"), "python_version_path 3.98", env)
    assert missing.returncode != 0
    assert missing.stderr.strip().splitlines() == [
        "error: no Python 3.98 that can make a virtualenv (pyenv install 3.98, or leave 3.98 out: MODELPLANE_TEST_PYTHONS)"
    ]


def test_only_a_run_of_the_whole_suite_tests_the_other_pythons() -> None:
    """`./dev.sh test tests/flows -x` is a developer's run of some tests: the other Pythons wait for the whole
    suite (no argument that is a test path)."""
    env = dict(os.environ)
    for args, whole in (
        ("-q -n 0", True),
        ("-k tune -o testpaths=tests/flows", True),
        ("tests/flows -x", False),
        ("-q tests/test_cli.py::test_help", False),
    ):
        result = dev_function(("names_a_test_path",), f"names_a_test_path {args}", env)
        assert (result.returncode != 0) is whole, args


@pytest.mark.long_wall  # the suite's setup (services, olah, the Prefect database) before a one-file run
def test_a_failure_on_another_python_fails_the_run_with_one_line(tmp_path: pathlib.Path) -> None:
    """`./dev.sh test` (what CI runs) fails when another Python fails, even when the suite itself passed, and says
    which Python on one line; the suite's own result is printed as usual."""
    env = {**os.environ, "MODELPLANE_TEST_PYTHONS": "3.98", "PYENV_ROOT": str(tmp_path)}
    result = subprocess.run(
        [
            str(REPO / "dev.sh"),
            "test",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "-o",
            "testpaths=tests/test_exitcodes.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout, result.stdout[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: Python 3.98 failed"), result.stderr[-2000:]
