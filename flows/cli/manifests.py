"""Commands over manifest files, no flow and no cluster: ``render-crds`` prints the CustomResourceDefinitions the
API models generate, ``validate-manifests`` checks a manifests directory against them."""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from flows.cli.common import command, console, exit_with_outcome, manifests_path, write_or_print
from flows.exitcodes import CannotRun, cli_errors, exit_code


@command("render-crds", "crds")
def render_crds(
    write: pathlib.Path | None = typer.Option(None, help="Write one file per kind into this directory."),
) -> None:
    """Print the CustomResourceDefinitions generated from the API models."""
    from engine.api.crds import render_crds as render

    write_or_print(render(), write, "---\n", lambda rendered: f"{len(rendered)} CRDs")


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

    Exit codes (flows/exitcodes.py): 0 all valid, 2 the path does not exist, 3 some resources are invalid.
    """
    from engine.api.validate import load_documents
    from engine.caches.reconcile import endpoint_refusals
    from tasks.manifests import read_manifest_documents

    with cli_errors():
        cluster = manifests_path(cluster_option)
        if not cluster.exists():
            raise CannotRun(f"cluster path {cluster} does not exist")
        documents, read_errors = read_manifest_documents(cluster)
    report = load_documents(documents)
    base = f"{cluster}/" if cluster.is_dir() else ""

    def short(source: str) -> str:
        return source.removeprefix(base)

    refused = {source: message for source, _, message in endpoint_refusals(report.resources)}
    rows: list[tuple[str, str, str, str, str, bool]] = []  # source, kind, namespace, name, result, valid
    for source, obj in report.valid:
        meta = _meta_of(obj)
        result = refused.get(source, "valid")  # a cache whose URI would send the credentials elsewhere
        rows.append(
            (
                short(source),
                _kind_of(obj),
                meta.get("namespace") or "",
                meta.get("name") or "",
                result,
                result == "valid",
            )
        )
    for source, error in report.invalid:
        rows.append(
            (
                short(source),
                error.kind or "",
                error.namespace or "",
                error.name or "",
                f"{error.field_path}: {error.message}",
                False,
            )
        )
    for source, message in read_errors:
        rows.append((short(source), "", "", "", message.removeprefix(base), False))
    invalid = [
        f"{source}: " + (f"{kind} {namespace + '/' if namespace else ''}{name}: " if kind else "") + result
        for source, kind, namespace, name, result, ok in rows
        if not ok
    ]
    if as_json:
        columns = ("source", "kind", "namespace", "name", "result")
        sys.stdout.write(json.dumps([dict(zip(columns, row[:5])) for row in rows], indent=2) + "\n")
        exit_with_outcome(invalid)  # validation runs no flow: it collects no boundary rejections
    table = Table(title=f"Resources in {cluster}")
    for column in ("source", "kind", "namespace", "name", "result"):
        table.add_column(column)
    for source, kind, namespace, name, result, ok in rows:
        table.add_row(source, kind, namespace, name, "[green]valid[/green]" if ok else f"[red]{escape(result)}[/red]")
    console.print(table)
    console.print(f"{len(report.valid) - len(refused)} valid, {len(invalid)} invalid")
    raise typer.Exit(exit_code(invalid))


def _meta_of(obj: object) -> dict[str, Any]:
    """The metadata of a validated object (a typed model or a plain dict) as a dict."""
    if isinstance(obj, dict):
        return obj.get("metadata") or {}
    metadata = getattr(obj, "metadata", None)
    if metadata is None:
        return {}
    return metadata.model_dump(by_alias=True, exclude_none=True) if hasattr(metadata, "model_dump") else dict(metadata)


def _kind_of(obj: object) -> str:
    """The kind of a validated object (a typed model's class name)."""
    return obj.get("kind", "") if isinstance(obj, dict) else type(obj).__name__
