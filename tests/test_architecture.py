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
    result = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken" in result.stdout


CLOCK_AND_IO_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("time", "time"), ("time", "monotonic"), ("date", "today")}
IO_BUILTINS = {"open", "print", "input"}
# The benchmark script times and writes its report; it is the one exception in engine/.
EXEMPT = {"bench.py"}


def _engine_sources() -> list[pathlib.Path]:
    return [p for p in (REPO / "engine").rglob("*.py") if p.name not in EXEMPT]


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
