"""Read a manifests directory (or multi-document file) document by document, for validation reports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tasks.clients.cluster.local_store import manifest_paths
from tasks.clients.cluster.yamlfile import read_file


def _objects_of(source: str, data: Any) -> Iterator[tuple[str, Any]]:
    """The document, or each item of a ``kind: *List`` document (``<file>#<doc>.items[<i>]``), as the
    local backend loads them: a List's items are validated one by one."""
    if data is None:
        return
    if isinstance(data, dict) and str(data.get("kind", "")).endswith("List") and isinstance(data.get("items"), list):
        for i, item in enumerate(data["items"]):
            yield f"{source}.items[{i}]", item
        return
    yield source, data


def read_manifest_documents(path: str | Path) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """``([(source, document)], [(file, error)])`` for every manifest file of ``path``.

    ``source`` is ``<file>#<index>`` so a report can point at the exact document; a file that does not
    parse is reported once with its error and does not hide the other files; a malformed document is
    reported with its file and line and does not hide the valid documents of the same file.
    """
    documents: list[tuple[str, Any]] = []
    errors: list[tuple[str, str]] = []
    for file in manifest_paths(Path(path)):
        parsed = read_file(file)
        if parsed.error:
            errors.append((str(file), parsed.error))
            continue
        errors += [(str(file), message) for message in parsed.doc_errors]
        for index, doc in enumerate(parsed.docs):
            documents += list(_objects_of(f"{file}#{index}", doc.data))
    return documents, errors
