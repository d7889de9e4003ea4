"""Multi-document YAML files edited one document at a time, written back atomically.

The local backend must rewrite only what changed: an operator's hand-written manifests keep their
comments, ordering and formatting except in the one document Modelplane modified. So a file is kept
as a list of :class:`Document` chunks, each holding its original text; only a changed chunk is
re-serialised. Timestamps stay strings (as in API-server JSON) rather than becoming ``datetime``.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """A safe loader that keeps ``2024-01-01T00:00:00Z`` as a string, as the API server's JSON does."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }


_MARKER_RE = re.compile(r"^---(?:[ \t].*)?$")


def load_text(text: str) -> Any:
    """Parse one YAML document with :class:`Loader`."""
    return yaml.load(text, Loader=Loader)  # noqa: S506 - Loader derives from SafeLoader


def dump(data: Any) -> str:
    """Serialise one document the way the backend writes manifests (block style, key order kept)."""
    return yaml.dump(data, Dumper=_BaseDumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


@dataclass
class Document:
    """One ``---``-separated chunk of a file: its original ``text`` and its parsed ``data``."""

    text: str
    data: Any
    has_marker: bool
    dirty: bool = False

    def render(self) -> str:
        """The chunk's text: the original when unchanged, a fresh dump otherwise."""
        if not self.dirty:
            return self.text
        return ("---\n" if self.has_marker else "") + dump(self.data)


@dataclass
class YamlFile:
    """A multi-document YAML file as an ordered list of documents; ``error`` if it did not parse."""

    path: Path
    docs: list[Document] = field(default_factory=list)
    error: str | None = None
    stamp: tuple[int, int, int] | None = None

    def render(self) -> str:
        """The whole file's text, unchanged documents byte-for-byte as they were read."""
        out: list[str] = []
        for doc in self.docs:
            text = doc.render()
            if out and not out[-1].endswith("\n"):
                out.append("\n")
            out.append(text)
        return "".join(out)

    def is_empty(self) -> bool:
        """True when no document holds any data (only blanks, comments or markers)."""
        return all(doc.data is None for doc in self.docs)

    def append(self, data: Any) -> Document:
        """Add a new document at the end; it gets a ``---`` marker unless the file is empty."""
        if not any(d.text.strip() or d.dirty for d in self.docs):
            self.docs = []
        doc = Document(text="", data=data, has_marker=bool(self.docs), dirty=True)
        self.docs.append(doc)
        return doc


def split_documents(text: str) -> list[tuple[str, bool]]:
    """Split a YAML stream into ``(chunk_text, starts_with_marker)`` at top-level ``---`` lines."""
    chunks: list[tuple[str, bool]] = []
    current: list[str] = []
    marker = False
    for line in text.splitlines(keepends=True):
        if _MARKER_RE.match(line.rstrip("\r\n")):
            if current or marker:
                chunks.append(("".join(current), marker))
            current, marker = [line], True
        else:
            current.append(line)
    if current or marker:
        chunks.append(("".join(current), marker))
    return chunks


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """``(mtime_ns, size, inode)`` of a file, used to notice changes made by someone else (an atomic
    replace changes the inode even when size and a coarse mtime do not)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_file(path: Path) -> YamlFile:
    """Read and parse a file document by document; a parse error is kept in ``error`` (with the name)."""
    result = YamlFile(path=path, stamp=file_stamp(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        result.error = f"{path}: cannot read: {exc}"
        return result
    try:
        result.docs = [Document(text=chunk, data=load_text(chunk), has_marker=marker) for chunk, marker in split_documents(text)]
    except yaml.YAMLError:
        result.docs = _whole_stream(path, text, result)
    return result


def _whole_stream(path: Path, text: str, result: YamlFile) -> list[Document]:
    """Fallback for valid streams the line-based split cannot cut (directives, exotic markers).

    The documents are kept as parsed but without their text, so the first write to this file
    re-serialises all of it (its comments are lost then; nothing is written just for loading).
    If the stream does not parse either, the file is reported as invalid.
    """
    try:
        documents = list(yaml.load_all(text, Loader=Loader))  # noqa: S506 - safe loader
    except yaml.YAMLError as exc:
        result.error = f"{path}: invalid YAML{_where(exc)}"
        return []
    return [Document(text="", data=data, has_marker=i > 0, dirty=True) for i, data in enumerate(documents)]


def _where(exc: yaml.YAMLError) -> str:
    """Position and problem of a parse error, without the snippet of file content PyYAML quotes
    (the offending line may hold Secret data)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    position = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return position + (f": {problem}" if problem else "")


def atomic_write(path: Path, text: str) -> tuple[int, int, int] | None:
    """Replace ``path`` with ``text`` atomically (temp file in the same dir, fsync, ``os.replace``).

    Readers see either the old or the new file, never a torn one; the original file mode is kept.
    Returns the new file's stamp.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return file_stamp(path)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (best effort: not every filesystem allows fsync on a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
