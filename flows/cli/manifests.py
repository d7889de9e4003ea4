"""Commands over manifest files, no flow and no cluster: ``render-crds`` prints the CustomResourceDefinitions the
API models generate, ``validate-manifests`` checks a manifests directory against them."""

from __future__ import annotations

import gc
import json
import pathlib
import sys
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from flows.cli.common import command, console, exit_with_outcome, manifests_path, write_or_print
from flows.exitcodes import CannotRun, cli_errors, exit_code

if TYPE_CHECKING:
    from tasks.manifests import FolderCheck


@command("render-crds", "crds")
def render_crds(
    write: pathlib.Path | None = typer.Option(None, help="Write one file per kind into this directory."),
) -> None:
    """Print the CustomResourceDefinitions generated from the API models.\f

    Args:
        write: ``--write``: Write one file per kind into this directory.
    """
    from engine.api.crds import render_crds as render

    write_or_print(render(), write, "---\n", lambda rendered: f"{len(rendered)} CRDs")


TABLE_ROWS = 1000
"""The most rows the table lists; past it only the invalid resources are listed (``--json`` lists every one)."""


@command("validate-manifests", "validate")
def validate_manifests(
    cluster_option: str = typer.Option(
        ..., "--cluster", help="Manifests directory or multi-document file (not empty)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON list (source, kind, namespace, name, result) instead of a table."
    ),
) -> None:
    """Load and validate a manifests directory; print every resource and every invalid one with its reason.

    Files are read by the compiled YAML reader (libyaml) when the install built it, else by PyYAML's; both give the
    same report. MODELPLANE_YAML_READER=python chooses PyYAML's.

    Exit codes (flows/exitcodes.py): 0 all valid, 2 the path does not exist, 3 some resources are invalid.\f

    Args:
        cluster_option: ``--cluster``: Manifests directory or multi-document file (not empty).
        as_json: ``--json``: Print a JSON list (source, kind, namespace, name, result) instead of a table.

    Raises:
        CannotRun: The path is empty or does not exist (:func:`cli_errors` prints it as one ``error:`` line and
            exits 2).
    """
    from engine.caches.reconcile import ENDPOINT_KINDS
    from tasks.manifests import check_manifests

    with cli_errors():
        cluster = manifests_path(cluster_option)
        if not cluster.exists():
            raise CannotRun(f"cluster path {cluster} does not exist")
        check = check_manifests(cluster, keep=ENDPOINT_KINDS)
    # the verdicts (hundreds of thousands for a large folder) hold no cycles: out of the collector's generations
    # while the report is written, they are not walked again each time it allocates (a second for a large folder)
    gc.freeze()
    try:
        _report(check, cluster, as_json)
    finally:
        gc.unfreeze()


def _report(check: FolderCheck, cluster: pathlib.Path, as_json: bool) -> None:
    """Print ``validate-manifests``' table or JSON list and exit with its outcome."""
    from engine.caches.reconcile import endpoint_refusals

    base = f"{cluster}/" if cluster.is_dir() else ""

    def short(source: str) -> str:
        return source.removeprefix(base)

    refused = {source: message for source, _, message in endpoint_refusals(check.resources)}
    rows: list[tuple[str, str, str, str, str, bool]] = []  # source, kind, namespace, name, result, valid
    for verdict in [v for v in check.verdicts if v.problem is None] + [v for v in check.verdicts if v.problem]:
        # refused: a cache whose URI would send the credentials elsewhere
        result = verdict.problem.replace(base, "") if verdict.problem else refused.get(verdict.source, "valid")
        rows.append((short(verdict.source), verdict.kind, verdict.namespace, verdict.name, result, result == "valid"))
    for source, message in check.read_errors:
        rows.append((short(source), "", "", "", message.removeprefix(base), False))
    invalid = [
        f"{source}: " + (f"{kind} {namespace + '/' if namespace else ''}{name}: " if kind else "") + result
        for source, kind, namespace, name, result, ok in rows
        if not ok
    ]
    if as_json:
        sys.stdout.write(_json_list(rows))
        exit_with_outcome(invalid)  # validation runs no flow: it collects no boundary rejections
    listed = rows if len(rows) <= TABLE_ROWS else [row for row in rows if not row[5]]
    table = Table(title=f"Resources in {cluster}")
    for column in ("source", "kind", "namespace", "name", "result"):
        table.add_column(column)
    for source, kind, namespace, name, result, ok in listed:
        table.add_row(source, kind, namespace, name, Text(result, style="green" if ok else "red"))
    console.print(table)
    if len(listed) < len(rows):
        console.print(f"The valid resources are not listed (more than {TABLE_ROWS} rows): --json lists every one.")
    console.print(f"{len(rows) - len(invalid)} valid, {len(invalid)} invalid")
    raise typer.Exit(exit_code(invalid))


_JSON_COLUMNS = ("source", "kind", "namespace", "name", "result")
_JSON_OBJECT = "  {\n" + ",\n".join(f"    {json.dumps(column)}: %s" for column in _JSON_COLUMNS) + "\n  }"
"""One row of the ``--json`` list as ``json.dumps(..., indent=2)`` lays it out, its values to fill in."""


def _json_list(rows: list[tuple[str, str, str, str, str, bool]]) -> str:
    """The ``--json`` list, as ``json.dumps(..., indent=2)`` writes it: the indenting encoder is pure Python and
    took longer than the validation of a large folder, so each value is encoded by the C string encoder that
    ``json.dumps`` uses for a string, and laid out in :data:`_JSON_OBJECT`."""
    if not rows:
        return "[]\n"
    try:
        objects = [_JSON_OBJECT % tuple(map(encode_basestring_ascii, row[:5])) for row in rows]
    except TypeError:  # a value that is no string: json.dumps writes it
        objects = [_JSON_OBJECT % tuple(json.dumps(value) for value in row[:5]) for row in rows]
    return "[\n" + ",\n".join(objects) + "\n]\n"
