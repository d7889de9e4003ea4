"""The public functions of tasks/ and flows/ document what they take, return and raise (Google style sections).

A lifecycle module reads a client's docstring instead of its body, and a flow's ``Args:`` become the Prefect UI's
parameter descriptions and the generated reference: every public module-level function (``def`` or ``async def``)
of the modules below says, in an ``Args:`` section, what each parameter is; in ``Returns:`` (or ``Yields:``) what
comes back unless it returns None (or never returns); in ``Raises:`` every exception it raises itself. Methods of classes are not
checked: a class's docstring says what its instances are, and its methods are read beside it.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTED = sorted([*(ROOT / "tasks").rglob("*.py"), *(ROOT / "flows").rglob("*.py")])
NOT_DOCUMENTED = frozenset({"AssertionError", "NotImplementedError"})  # "unreachable" markers, not failures


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _public_functions(path: pathlib.Path) -> list[Function]:
    tree = ast.parse(path.read_text())
    return [n for n in tree.body if isinstance(n, Function) and not n.name.startswith("_")]


def _section(doc: str, title: str) -> str | None:
    """The text of a Google-style section, up to the next section or the end."""
    lines = doc.splitlines()
    if f"{title}:" not in (line.strip() for line in lines):
        return None
    start = next(i for i, line in enumerate(lines) if line.strip() == f"{title}:")
    body = []
    for line in lines[start + 1 :]:
        if line and not line.startswith(" ") and line.rstrip().endswith(":"):
            break
        body.append(line)
    return "\n".join(body)


def _raised(fn: Function) -> set[str]:
    """Exception classes ``fn`` raises by name in its own body (nested functions left out). A raised variable
    (``raise failure``: an exception caught or built before) names no class; its class is documented as any other."""
    names: set[str] = set()
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id[:1].isupper():
                names.add(target.id)
        stack.extend(ast.iter_child_nodes(node))
    return names - NOT_DOCUMENTED


def _problems(fn: Function) -> list[str]:
    doc = ast.get_docstring(fn) or ""
    problems = []
    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs] if a.arg not in ("self", "cls")]
    params += [f"*{fn.args.vararg.arg}"] if fn.args.vararg else []
    params += [f"**{fn.args.kwarg.arg}"] if fn.args.kwarg else []
    args = _section(doc, "Args")
    if params and args is None:
        problems.append("no Args section")
    for name in params:
        if args is not None and f"{name}:" not in args:
            problems.append(f"Args does not describe {name}")
    returns_nothing = fn.returns is not None and ast.unparse(fn.returns) in ("None", "NoReturn")
    if not returns_nothing and _section(doc, "Returns") is None and _section(doc, "Yields") is None:
        problems.append("no Returns section")
    raises = _section(doc, "Raises") or ""
    problems += [f"Raises does not name {name}" for name in sorted(_raised(fn)) if f"{name}:" not in raises]
    return problems


@pytest.mark.parametrize("path", DOCUMENTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_public_functions_document_args_returns_and_raises(path: pathlib.Path) -> None:
    problems = [f"{fn.name}: {problem}" for fn in _public_functions(path) for problem in _problems(fn)]
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_the_check_finds_a_missing_section() -> None:
    fn = ast.parse('def f(a: int) -> int:\n    """Twice a."""\n    raise ValueError(a)\n').body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert _problems(fn) == ["no Args section", "no Returns section", "Raises does not name ValueError"]


def test_the_check_names_raised_classes_not_variables() -> None:
    source = (
        'def f(error: Exception) -> None:\n    """Raise."""\n    if error:\n        raise error\n    raise KeyError\n'
    )
    fn = ast.parse(source).body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert _problems(fn) == ["no Args section", "Raises does not name KeyError"]


def test_a_commands_help_stops_before_its_docstrings_sections() -> None:
    """A command's docstring documents its parameters after a form feed (click's marker); ``--help`` and the
    generated reference (tests/cli_reference.py) show only what comes before it."""
    import inspect

    import typer

    from flows.cli import app

    pending, commands = [typer.main.get_command(app)], []
    while pending:
        group = pending.pop()
        for command in group.commands.values():  # type: ignore[attr-defined]
            (pending if hasattr(command, "commands") else commands).append(command)
    assert len(commands) > 10
    for command in commands:
        doc = inspect.getdoc(command.callback) or ""
        assert "\f" in doc and "Args:" in doc.partition("\f")[2], command.name
        assert "Args:" not in (command.help or "") and "\f" not in (command.help or ""), command.name
