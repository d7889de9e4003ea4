"""docs/reference/cli.md, generated from the ``modelplane`` command line's own definitions (the typer app of
``flows.cli``): every command the help lists, its description, usage and options, as ``--help`` states them.

    python -m tests.cli_reference            # rewrite docs/reference/cli.md
    python -m tests.cli_reference --check    # exit 1 when the page differs from the definitions

tests/test_docs_site.py fails when the checked-in page is not what this renders, so a changed option or help
text is a regeneration away, never a hand edit.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reference" / "cli.md"
HEADER = """# Command line

Every `modelplane` command, as its `--help` describes it. Each flow command runs one Prefect flow on the cluster
`--cluster` names (a folder of manifests, or your kubeconfig's cluster without it), prints a table (or `--json`)
and exits 0 (clean), 2 (could not run: one `error:` line) or 3 (ran degraded):
[exit codes](../platform.md#exit-codes-flowsexitcodespy). The same flows run as Prefect deployments with the
same parameters ([The Prefect platform](../platform.md)).

This page is generated from the command line's own definitions (`python -m tests.cli_reference`); do not edit it
by hand.
"""


def _cell(text: str) -> str:
    """One Markdown table cell: a single line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _paragraphs(text: str) -> str:
    """A command's help as Markdown paragraphs: click's no-rewrap markers dropped, each paragraph on one line."""
    blocks = [block for block in text.replace("\b\n", "").split("\n\n") if block.strip()]
    return "\n\n".join(" ".join(block.split()) for block in blocks)


def _visible(group: Any, ctx: Any) -> list[tuple[str, Any]]:
    """The commands a group's help lists, by name."""
    return sorted((name, command) for name, command in group.commands.items() if not command.hidden)


def _command_section(path: str, command: Any, ctx: Any) -> list[str]:
    """One command's section: heading, description, usage and a table of its arguments and options."""
    lines = [f"## `{path}`", ""]
    if command.help:
        lines += [_paragraphs(command.help), ""]
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines += ["```text", f"{path} {usage}".rstrip(), "```", ""]
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        rows.append(f"| `{_cell(names)}` | {_cell(help_text)} |")
    if rows:
        lines += ["| argument or option | description |", "|---|---|", *rows, ""]
    return lines


def render() -> str:
    """The whole page."""
    import typer

    from flows.cli import app

    root = typer.main.get_command(app)
    root_ctx = root.make_context("modelplane", [], resilient_parsing=True)
    lines = [HEADER]
    pending: list[tuple[str, Any, Any]] = [("modelplane", root, root_ctx)]
    while pending:
        path, group, ctx = pending.pop(0)
        for name, command in _visible(group, ctx):
            sub_ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
            if hasattr(command, "commands"):
                pending.append((f"{path} {name}", command, sub_ctx))
                continue
            lines += _command_section(f"{path} {name}", command, sub_ctx)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs; write nothing")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        same = PAGE.exists() and PAGE.read_text() == page
        if not same:
            print(f"{PAGE.relative_to(REPO)} is out of date: run python -m tests.cli_reference", file=sys.stderr)
        return 0 if same else 1
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
