"""The layering is enforced, not just described: flows -> tasks -> engine, inside tasks lifecycles -> clients, and
engine does no I/O."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold() -> None:
    """import-linter checks the contracts declared in pyproject.toml."""
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 5 kept, 0 broken" in result.stdout
    assert "tasks: lifecycles above shared I/O above clients above run plumbing KEPT" in result.stdout


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


# A fresh clone's mypy has no cache: 80 s of CPU, the longest test that uses no Prefect API. Those are handed
# out last (tests/grouping.py), and it ended a full run alone on one worker while the other core idled. Its
# timeout is the suite's 300 s thrice: it is CPU-bound, and on a machine at load 9 it got a third of a core.
@pytest.mark.long_wall
@pytest.mark.timeout(900)
def test_mypy_strict_on_engine_tasks_and_flows() -> None:
    """engine/, tasks/ and flows/ type-check under mypy --strict (pyproject.toml [tool.mypy] packages)."""
    result = subprocess.run([_tool("mypy")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr


KIND_PARAMETERS = frozenset(
    {"model", "models", "template", "templates", "service", "services", "config", "configs", "cache", "caches"}
    | {"spec", "service_spec", "node", "nodes", "isvc", "isvcs", "route", "routes", "existing"}
)
"""Parameter names that carry one of our custom resources (or its spec) or a core object the AIM engine
reads (issues 22/23: parse once at the boundary, the engine receives typed objects)."""
DICT_PARAMETERS = dict.fromkeys(
    ("engine.aim.services.update_patch.existing", "engine.aim.services.contains.existing"),
    "a merge-patch diff over the whole object as read (InferenceService/HTTPRoute.object): a view declares "
    "only the fields the engine reads",
)
"""Kind-named parameters that still take dicts, and why (the report of issue 22 lists them)."""


def _engine_aim_functions() -> list[tuple[str, object]]:
    """Every function and method written in the modules of ``engine/aim`` (public and private; not the
    ``__init__`` a dataclass generates from its fields)."""
    import importlib
    import inspect

    found: list[tuple[str, object]] = []
    for path in sorted((REPO / "engine" / "aim").glob("*.py")):
        module = importlib.import_module(f"engine.aim.{path.stem}")
        for name, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__ == module.__name__:
                found.append((f"{module.__name__}.{name}", value))
            elif inspect.isclass(value) and value.__module__ == module.__name__:
                for attr, member in vars(value).items():
                    func = getattr(member, "__func__", member)
                    if inspect.isfunction(func) and func.__code__.co_filename == str(path):  # not generated
                        found.append((f"{module.__name__}.{name}.{attr}", func))
    return found


def _leaves(annotation: object) -> list[object]:
    """What an annotation is made of (``Sequence[X] | None`` -> ``[Union, Sequence, X, NoneType]``)."""
    import typing

    origin = typing.get_origin(annotation)
    if origin is None:
        return [annotation]
    return [origin, *(leaf for arg in typing.get_args(annotation) for leaf in _leaves(arg))]


def test_the_aim_engine_receives_typed_objects() -> None:
    """No engine/aim function takes one of our kinds (or a Node, InferenceService, HTTPRoute) as a dict: a
    parameter named like one is never annotated with ``Manifest``/``dict``/``Mapping[str, Any]``/``Any``
    (names and GPU models are plain ``str``, which passes), except the few :data:`DICT_PARAMETERS` say why."""
    import typing

    from pydantic import BaseModel

    untyped: list[str] = []
    typed = 0
    for qualname, func in _engine_aim_functions():
        for parameter, annotation in typing.get_type_hints(func).items():
            if parameter == "return" or parameter not in KIND_PARAMETERS:
                continue
            leaves = _leaves(annotation)
            typed += any(isinstance(leaf, type) and issubclass(leaf, BaseModel) for leaf in leaves)
            loose = typing.Any in leaves or dict in leaves
            if loose and f"{qualname}.{parameter}" not in DICT_PARAMETERS:
                untyped.append(f"{qualname}({parameter}: {annotation})")
    assert typed >= 30, typed  # the check sees the planners' typed parameters, not an empty list
    assert not untyped, "engine/aim takes dicts of our kinds:\n" + "\n".join(untyped)
