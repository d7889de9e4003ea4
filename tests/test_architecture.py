"""The layering is enforced, not just described: flows -> tasks -> engine, and engine does no I/O."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold() -> None:
    """import-linter checks the contracts declared in pyproject.toml."""
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken" in result.stdout


CLOCK_AND_IO_CALLS = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("time", "time"),
    ("time", "monotonic"),
    ("date", "today"),
}
IO_BUILTINS = {"open", "print", "input"}


def _engine_sources() -> list[pathlib.Path]:
    return list((REPO / "engine").rglob("*.py"))


def test_engine_reads_no_clock_and_opens_no_files() -> None:
    """engine/ is deterministic: time is passed in as ``now``; no file or console I/O."""
    offenders = []
    for path in _engine_sources():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if (func.value.id, func.attr) in CLOCK_AND_IO_CALLS:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {func.value.id}.{func.attr}()")
            elif isinstance(func, ast.Name) and func.id in IO_BUILTINS:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {func.id}()")
    assert not offenders, "engine/ must stay pure:\n" + "\n".join(offenders)


MAX_MODULE_LINES = 600
MAX_ENGINE_TOP_LEVEL_MODULES = 10


def test_no_module_is_longer_than_a_reader_can_hold() -> None:
    """Every module in flows/, tasks/ and engine/ stays under 600 lines: a longer one mixes concerns (issue 23)."""
    long = [
        f"{p.relative_to(REPO)}: {n} lines"
        for layer in ("flows", "tasks", "engine")
        for p in sorted((REPO / layer).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "split these modules:\n" + "\n".join(long)


def test_engine_is_grouped_by_domain() -> None:
    """engine/ holds its domains as packages, each saying what it decides, and few loose modules."""
    loose = [p.name for p in (REPO / "engine").glob("*.py") if p.name != "__init__.py"]
    assert len(loose) <= MAX_ENGINE_TOP_LEVEL_MODULES, loose
    for package in (p for p in (REPO / "engine").iterdir() if p.is_dir() and not p.name.startswith("__")):
        docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert docstring and len(docstring) > 40, f"engine/{package.name}/__init__.py must say what the package decides"


def _tool(name: str) -> str:
    return str(pathlib.Path(sys.executable).with_name(name))


def test_ruff_lint_and_format_pass() -> None:
    """The stated rule set (pyproject.toml [tool.ruff]) holds and every file is formatted."""
    for command in (
        [_tool("ruff"), "check", "--no-cache", "."],
        [_tool("ruff"), "format", "--check", "--no-cache", "."],
    ):
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        assert result.returncode == 0, " ".join(command[1:]) + "\n" + result.stdout + result.stderr


def test_mypy_strict_on_engine() -> None:
    """engine/ type-checks under mypy --strict (pyproject.toml [tool.mypy])."""
    result = subprocess.run([_tool("mypy")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
