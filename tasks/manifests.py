"""Read a manifests directory (or multi-document file) document by document, for validation reports.

:func:`check_manifests` is ``validate-manifests``' reader: each file is parsed and validated on its own, a large
folder's files in parallel worker processes, and only each document's verdict (and the few resources a check
across documents needs) comes back, so a folder of 200,000 documents never holds them all at once.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel

from engine.api.validate import load_documents, prepare_spec_checks
from tasks.clients.cluster.local_paths import scan_manifests
from tasks.clients.cluster.local_store import manifest_paths
from tasks.clients.cluster.yamlfile import read_file

PARALLEL_BYTES = 8 * 1024 * 1024
"""From this many bytes of manifests on, :func:`check_manifests` spreads the files over worker processes (one
per CPU); below it starting them costs more than it saves."""


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

    Args:
        path: A manifest file, or a folder whose YAML files are read (recursively).

    Returns:
        Every object as ``(source, document)``, and every file or document that could not be read as
        ``(file, error)``.
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
    return documents, errors + _refused(Path(path))


def _refused(path: Path) -> list[tuple[str, str]]:
    """``(entry, why)`` for every entry of a folder the local backend reports instead of reading (a named pipe, a
    device, a symbolic link loop: :func:`~tasks.clients.cluster.local_paths.scan_manifests`), by path."""
    if not path.is_dir():
        return []
    return sorted((found.path, found.problem) for found in scan_manifests(str(path)) if found.problem is not None)


class Verdict(NamedTuple):
    """One document as ``validate-manifests`` reports it: ``problem`` is ``"field: message"`` when it is invalid,
    else None."""

    source: str
    kind: str
    namespace: str
    name: str
    problem: str | None
    api_version: str = ""


@dataclass
class FolderCheck:
    """What :func:`check_manifests` found: every document's verdict (file order), the valid resources of the
    kinds asked for (a check across documents reads them), and the files or documents that could not be read."""

    verdicts: list[Verdict] = field(default_factory=list)
    resources: list[tuple[str, BaseModel]] = field(default_factory=list)
    read_errors: list[tuple[str, str]] = field(default_factory=list)


def check_manifests(path: str | Path, keep: tuple[type[BaseModel], ...] = ()) -> FolderCheck:
    """Parse and validate every manifest file of ``path`` (:func:`engine.api.validate.load_documents`), the
    valid resources of the ``keep`` types returned whole. Files are checked one by one, in worker processes
    when they hold :data:`PARALLEL_BYTES` or more together; the result is the same, in file order.

    Args:
        path: A manifest file, or a folder whose YAML files are checked (recursively).
        keep: The API model classes whose valid resources the result carries whole (empty: verdicts only).

    Returns:
        The verdict of every document, the kept resources and the files that could not be read, in file order.
    """
    files = manifest_paths(Path(path))
    workers = min(os.cpu_count() or 1, len(files))
    check = partial(_check_file, keep=keep)
    # the results are received without the cyclic garbage collector: it walked every verdict received so far
    # each time it ran, for most of this process's own time
    with _collector_paused():
        if workers > 1 and sum(_size(file) for file in files) >= PARALLEL_BYTES:
            # the workers are forked with the collector paused (they run it again between files) and the checks
            # compiled
            prepare_spec_checks()
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(workers, mp_context=context, initializer=gc.enable) as pool:
                parts = list(pool.map(check, files))
        else:
            parts = [check(file) for file in files]
        result = FolderCheck()
        for part in parts:
            result.verdicts += part.verdicts
            result.resources += part.resources
            result.read_errors += part.read_errors
    result.read_errors += _refused(Path(path))
    result.verdicts = _duplicates_marked(result.verdicts)
    return result


def _duplicates_marked(verdicts: list[Verdict]) -> list[Verdict]:
    """``verdicts`` with every valid document after the first of the same object (apiVersion, kind, namespace,
    name) marked as a duplicate, as the local cluster backend reads the folder: it uses the first copy and
    ignores the others, so a copy reported valid would never be what a command reads."""
    first: dict[tuple[str, str, str, str], str] = {}
    marked = []
    for verdict in verdicts:
        key = (verdict.api_version, verdict.kind, verdict.namespace, verdict.name)
        if verdict.problem is None and key in first:
            verdict = verdict._replace(problem=f"duplicate object, also in {first[key]}: the first is used")
        elif verdict.problem is None:
            first[key] = verdict.source
        marked.append(verdict)
    return marked


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return 0


def _check_file(file: Path, keep: tuple[type[BaseModel], ...]) -> FolderCheck:
    """One file's :class:`FolderCheck`, found without the cyclic garbage collector (:func:`_collector_paused`):
    the file's documents are freed (by reference counting) before it runs again, so it never walks them."""
    with _collector_paused():
        return _checked_file(file, keep)


def _checked_file(file: Path, keep: tuple[type[BaseModel], ...]) -> FolderCheck:
    """:func:`_check_file`'s work: the documents it reads go when it returns."""
    result = FolderCheck()
    parsed = read_file(file)
    if parsed.error:
        result.read_errors.append((str(file), parsed.error))
        return result
    result.read_errors += [(str(file), message) for message in parsed.doc_errors]
    documents = [pair for index, doc in enumerate(parsed.docs) for pair in _objects_of(f"{file}#{index}", doc.data)]
    report = load_documents(documents)
    for source, obj in report.valid:
        api_version, kind, namespace, name = _identity_of(obj)
        result.verdicts.append(Verdict(source, kind, namespace, name, None, api_version))
        if isinstance(obj, keep):
            result.resources.append((source, obj))
    for source, error in report.invalid:
        problem = f"{error.field_path}: {error.message}"
        result.verdicts.append(Verdict(source, error.kind or "", error.namespace or "", error.name or "", problem))
    return result


def _identity_of(obj: BaseModel | dict[str, Any]) -> tuple[str, str, str, str]:
    """``(apiVersion, kind, namespace, name)`` of a valid document (a parsed model, or an object of another kind)."""
    if isinstance(obj, dict):
        meta = obj.get("metadata") or {}
        names = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        return str(obj.get("apiVersion", "")), str(obj.get("kind", "")), *names
    meta = getattr(obj, "metadata", None)
    names = str(getattr(meta, "namespace", None) or ""), str(getattr(meta, "name", None) or "")
    return str(getattr(obj, "api_version", "") or ""), type(obj).__name__, *names


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Run the block without Python's cyclic garbage collector: parsing builds hundreds of thousands of small
    acyclic objects that each collection would walk again (the collector ran for as long as the parsing did,
    and once more over all of them if they were still alive when it was enabled again); whatever cycles the
    block leaves are collected after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
