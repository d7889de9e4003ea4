"""Multi-document YAML files edited one field at a time, written back atomically.

The local backend must rewrite only what changed: an operator's hand-written manifests keep their
comments, ordering, indentation and quoting everywhere except in the fields Modelplane changed. So a
file is kept as a list of :class:`Document` chunks, each holding its original text. A status write is
spliced into the chunk's text, every byte outside ``status`` kept (:mod:`tasks.clients.cluster.yamlsplice`); for
any other change the chunk is loaded once with ``ruamel.yaml``'s round-trip parser and only the changed
fields are edited in that tree (:func:`apply_changes`), which is then dumped with the chunk's own
indentation style. Reading parses the whole file at once (one parser for all its documents), with the compiled
reader of :mod:`tasks.clients.cluster.yamlcompiled` when it is built, else (and for what it hands back) the
checked safe loader of :mod:`tasks.clients.cluster.yamlload`; each document's value goes to the chunk it
starts in.

A chunk that does not parse is kept as it is and reported with its file and line
(:attr:`YamlFile.doc_errors`); the valid documents of the same file still load.
"""

from __future__ import annotations

import bisect
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from tasks.clients.cluster.yamlcompiled import compiled_documents
from tasks.clients.cluster.yamlload import NOT_PLAIN, Loader, load_text
from tasks.clients.cluster.yamlsplice import splice_status
from tasks.clients.files import write_atomically

_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_NULL_TAG = "tag:yaml.org,2002:null"
_MARKER_RE = re.compile(r"^---(?:[ \t].*)?$")


def dump(data: Any) -> str:
    """Serialise one document the way the backend writes manifests (block style, key order kept).

    Args:
        data: One document.

    Returns:
        The YAML text.
    """
    return yaml.dump(data, Dumper=_BaseDumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


_INDENT_STYLES = ((2, 2, 0), (2, 4, 2), (4, 4, 2), (4, 4, 0), (2, 3, 1), (4, 6, 4))
"""``(mapping, sequence, offset)`` indentations tried, in order, to reproduce a chunk exactly."""

_KEEP_ABSENT = {("metadata", "uid"), ("metadata", "resourceVersion"), ("metadata", "creationTimestamp")}
"""Bookkeeping the backend keeps in memory: written only into documents that already carry it."""


def _round_tripper(style: tuple[int, int, int], marker: bool) -> YAML:
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never re-wrap long strings
    rt.indent(mapping=style[0], sequence=style[1], offset=style[2])
    rt.explicit_start = marker
    return rt


def _rt_dump(rt: YAML, node: Any) -> str:
    buf = io.StringIO()
    rt.dump(node, buf)
    return buf.getvalue()


def load_round_trip(text: str, marker: bool) -> tuple[YAML, Any]:
    """The chunk's round-trip tree and a dumper in the chunk's own indentation style (the first
    style that reproduces the text byte for byte, else the common ``2/4/2``).

    Args:
        text: One document's text.
        marker: Whether the document starts with a ``---`` line.

    Returns:
        The dumper and the round-trip tree (None for an empty document).
    """
    chosen: tuple[YAML, Any] | None = None
    for style in _INDENT_STYLES:
        rt = _round_tripper(style, marker)
        node = rt.load(text)
        if node is None or _rt_dump(rt, node) == text:
            return rt, node
        if chosen is None or style == (2, 4, 2):
            chosen = (rt, node)
    assert chosen is not None
    return chosen


def apply_changes(node: Any, old: Any, new: Any, path: tuple[str, ...] = ()) -> None:
    """Edit the round-trip mapping ``node`` so the fields that differ between ``old`` and ``new`` take
    their new values, touching nothing else: keys the write removed go, added or changed ones are set
    (recursing into mappings and same-length lists so comments around unchanged entries stay), and
    keys only the file has (pruned fields, ``stringData``) or only memory has (defaults) are left alone.

    Args:
        node: The round-trip mapping, edited in place.
        old: The document as it was read.
        new: The document as written.
        path: The keys from the document's root to ``node``.
    """
    for key in [k for k in old if k not in new]:
        if key in node:
            del node[key]
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if before == value:
            continue
        if key not in node and (*path[-1:], key) in _KEEP_ABSENT:
            continue
        current = node.get(key, _MISSING) if hasattr(node, "get") else _MISSING
        if isinstance(value, dict) and isinstance(before, dict) and hasattr(current, "items"):
            apply_changes(current, before, value, (*path, key))
        elif (
            isinstance(value, list)
            and isinstance(before, list)
            and isinstance(current, list)
            and len(value) == len(before) == len(current)
        ):
            _apply_list(current, before, value, (*path, key))
        elif key in node:
            node[key] = yaml11_safe(value)
        else:
            node[yaml11_safe(key)] = yaml11_safe(value)


def yaml11_safe(value: Any) -> Any:
    """``value`` with every string that a YAML 1.1 reader would not read back as that string quoted.

    ruamel.yaml writes YAML 1.2, where ``3:1``, ``yes``, ``on`` or ``0755`` are plain strings; PyYAML and
    many Kubernetes tools read YAML 1.1, where they are a number or a boolean. Quoting them keeps an
    annotation ``"3:1"`` a string for every reader.

    Args:
        value: A value about to be written.

    Returns:
        The value with such strings wrapped as double-quoted scalars (mappings and lists copied).
    """
    if isinstance(value, str):
        tag = _YAML11.resolve(yaml.ScalarNode, value, (True, False))
        return value if tag == _STR_TAG or "\n" in value else DoubleQuotedScalarString(value)
    if isinstance(value, dict):
        return {yaml11_safe(k): yaml11_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [yaml11_safe(v) for v in value]
    return value


_YAML11 = yaml.resolver.Resolver()
_STR_TAG = "tag:yaml.org,2002:str"


def _apply_list(node: list[Any], old: list[Any], new: list[Any], path: tuple[str, ...]) -> None:
    for i, (before, value) in enumerate(zip(old, new)):
        if before == value:
            continue
        if isinstance(value, dict) and isinstance(before, dict) and hasattr(node[i], "items"):
            apply_changes(node[i], before, value, path)
        else:
            node[i] = yaml11_safe(value)


_MISSING = object()


@dataclass
class Document:
    """One ``---``-separated chunk of a file: its original ``text``, its parsed ``data`` and, once
    edited, its round-trip tree or (a status write, :mod:`tasks.clients.cluster.yamlsplice`) its spliced text.
    ``line`` is the 1-based line where the chunk starts in the file."""

    text: str
    data: Any
    has_marker: bool
    dirty: bool = False
    line: int = 1
    _rt: Any = field(default=None, repr=False, compare=False)
    _node: Any = field(default=None, repr=False, compare=False)
    _spliced: str | None = field(default=None, repr=False, compare=False)
    _rendered: str | None = field(default=None, repr=False, compare=False)

    def _tree(self) -> Any:
        if self._rt is None:
            self._rt, self._node = load_round_trip(self._current_text(), self.has_marker)
            self._spliced = None  # the tree now holds it
        return self._node

    def update(self, old: Any, new: Any, item: int | None = None) -> None:
        """Record that the object of this document (or item ``item`` of its List) went from ``old``
        to ``new``: only the changed fields are rewritten when the file is rendered."""
        if item is None:
            self.data = new
        else:
            self.data["items"][item] = new
        self._rendered = None
        if self.text:
            spliced = self._splice(old, new) if item is None else None
            if spliced is not None:
                self._spliced, self._rt, self._node = spliced, None, None
            else:
                tree = self._tree()
                apply_changes(tree if item is None else tree["items"][item], old, new)
        self.dirty = True

    def _splice(self, old: Any, new: Any) -> str | None:
        """The text with only the status written (:func:`~tasks.clients.cluster.yamlsplice.splice_status`), when that
        is all that changed and no round-trip edit is pending; else None."""
        if self.dirty and self._spliced is None:
            return None  # a round-trip edit not yet written: keep editing that tree
        return splice_status(self._current_text(), old, new, load_text)

    def _current_text(self) -> str:
        """The text as edited so far: a splice not yet written, else the text read (or last written)."""
        return self._spliced if self.dirty and self._spliced is not None else self.text

    def remove_item(self, item: int) -> None:
        """Drop item ``item`` of this List document (the other items keep their text)."""
        del self.data["items"][item]
        self._rendered = None
        if self.text:
            del self._tree()["items"][item]
        self.dirty = True

    def render(self) -> str:
        """The chunk's text: the original when unchanged, the edited tree or a fresh dump otherwise."""
        if not self.dirty:
            return self.text
        if self._rendered is None:
            if self._spliced is not None:
                self._rendered = self._spliced
            elif self.text:
                self._rendered = _rt_dump(self._rt, self._node)
            else:
                self._rendered = ("---\n" if self.has_marker else "") + dump(self.data)
        return self._rendered

    def plain(self) -> Any:
        """The document as it is to be written, as plain data: the edited round-trip tree (only the changed
        fields differ from the text read), else the data of a new document or the text as read."""
        if self.dirty and self._spliced is not None:
            return load_text(self._spliced)
        if self.dirty and self.text:
            self._tree()
            return self._node
        if self.dirty or not self.text.strip():
            return self.data
        return load_text(self.text)

    def written(self) -> None:
        """The rendered text is now what the file holds."""
        if self.dirty:
            self.text, self.dirty = self.render(), False
            self._spliced = self._rendered = None


@dataclass
class YamlFile:
    """A multi-document YAML file as an ordered list of documents; ``error`` if it could not be read,
    ``doc_errors`` (file and line of each) for documents that do not parse."""

    path: Path
    docs: list[Document] = field(default_factory=list)
    error: str | None = None
    stamp: tuple[int, int, int] | None = None
    doc_errors: list[str] = field(default_factory=list)

    @property
    def writable_error(self) -> str | None:
        """Why this file must not be written (unreadable, or holding a malformed document), or None."""
        if self.error:
            return self.error
        if self.doc_errors:
            return f"{self.doc_errors[0]} (fix it first: a file holding a malformed document is never written)"
        return None

    def render(self) -> str:
        """The whole file's text, unchanged documents byte-for-byte as they were read (a changed ``.json``
        file is written back as JSON: one object, or a ``List`` when it holds several)."""
        if self.path.suffix == ".json" and any(doc.dirty for doc in self.docs):
            return _render_json([doc.plain() for doc in self.docs if doc.data is not None])
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


def _render_json(values: list[Any]) -> str:
    """A JSON manifest file's text (2-space indent, as ``kubectl get -o json``)."""
    if len(values) == 1:
        value = values[0]
    else:
        items = [
            item
            for v in values
            for item in (v.get("items") or [] if isinstance(v, dict) and v.get("kind") == "List" else [v])
        ]
        value = {"apiVersion": "v1", "kind": "List", "items": items}
    return json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"


def split_documents(text: str) -> list[tuple[str, bool]]:
    """Split a YAML stream into ``(chunk_text, starts_with_marker)`` at top-level ``---`` lines.

    Args:
        text: A YAML stream.

    Returns:
        Each document's text and whether it starts with a ``---`` line.
    """
    return [(chunk, marker) for chunk, marker, _ in _split_with_lines(text)]


def _split_with_lines(text: str) -> list[tuple[str, bool, int]]:
    """:func:`split_documents` plus the 1-based line each chunk starts on."""
    chunks: list[tuple[str, bool, int]] = []
    start = 1
    for chunk, marker in _split(text):
        chunks.append((chunk, marker, start))
        start += chunk.count("\n")
    return chunks


_MARKER_AFTER_BREAK_RE = re.compile(r"\n---(?=[ \t\n]|\Z)")
"""A ``---`` line (:data:`_MARKER_RE`) after the line break before it, in a text whose only line break is ``\n``:
a literal prefix the regular expression engine finds quickly."""
_OTHER_BREAKS = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
"""The line breaks other than ``\n`` that ``str.splitlines`` also splits at."""


def _split(text: str) -> list[tuple[str, bool]]:
    """:func:`split_documents`: cut at the ``---`` lines found by one search of the whole text (a loop over the
    lines took a tenth of the time a large file's parsing takes), or line by line (:func:`_split_lines`) when
    the text has other line breaks than ``\n``."""
    if any(other in text for other in _OTHER_BREAKS):
        return _split_lines(text)
    starts = [found.start() + 1 for found in _MARKER_AFTER_BREAK_RE.finditer(text)]
    if _MARKER_RE.match(text.partition("\n")[0]):
        starts.insert(0, 0)
    if not starts:
        return [(text, False)] if text else []
    chunks = [(text[: starts[0]], False)] if starts[0] else []
    chunks += [(text[start:end], True) for start, end in zip(starts, [*starts[1:], len(text)])]
    return chunks


def _split_lines(text: str) -> list[tuple[str, bool]]:
    """:func:`split_documents` line by line, at every line break ``str.splitlines`` knows."""
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
    replace changes the inode even when size and a coarse mtime do not).

    Args:
        path: The file.

    Returns:
        The stamp, or None when the file does not exist.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest manifest file read (16 MiB, about 1,500 VariantAutoscalings with their Deployments); a larger
one is refused whole, before it is read, with its size: split it into several files."""
MAX_DOCUMENTS_PER_FILE = 10_000
"""The most YAML documents one manifest file may hold; a file with more is refused whole."""
MAX_FLOW_DEPTH = 1_000
"""How deep ``[`` and ``{`` may nest in a manifest file: the YAML readers refuse a document nested deeper
("exceeded maximum nesting depth"), but only after scanning it in time that grows with the square of its
brackets (100 KB of ``[`` took 12 s, 1 MB would stall every command for minutes); such a file is refused whole
before it is parsed."""
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def flow_depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting in ``text``, counted over its brackets alone (regex and ``accumulate``,
    both in C): brackets inside quoted strings count too, so it never reads less than the YAML nesting.

    Args:
        text: A manifest file's text.

    Returns:
        The most ``[``/``{`` open at once (0 for none).
    """
    return max(accumulate(map(_BRACKET_STEP.__getitem__, _NOT_BRACKETS.sub("", text))), default=0)


def read_file(path: Path) -> YamlFile:
    """Read and parse a file document by document; a parse error is kept in ``error`` (with the name), as is
    a file beyond :data:`MAX_FILE_BYTES`, :data:`MAX_DOCUMENTS_PER_FILE` or :data:`MAX_FLOW_DEPTH` (never written
    then either).

    Args:
        path: The manifest file.

    Returns:
        The file's documents, its stamp, and the file's error or each malformed document's error.
    """
    result = YamlFile(path=path, stamp=file_stamp(path))
    if result.stamp is not None and result.stamp[1] > MAX_FILE_BYTES:
        result.error = (
            f"{path}: {result.stamp[1]} bytes, more than the {MAX_FILE_BYTES} bytes a manifest file may hold: "
            "split it into several files"
        )
        return result
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        result.error = f"{path}: cannot read: {exc}"
        return result
    depth = flow_depth(text)
    if depth > MAX_FLOW_DEPTH:
        result.error = (
            f"{path}: '[' and '{{' nested {depth} deep, more than the {MAX_FLOW_DEPTH} levels a manifest may nest"
        )
        return result
    docs: list[Document] = []
    failures: list[str] = []
    chunks = _split_with_lines(text)
    if len(chunks) > MAX_DOCUMENTS_PER_FILE:
        result.error = (
            f"{path}: {len(chunks)} documents, more than the {MAX_DOCUMENTS_PER_FILE} a manifest file may hold: "
            "split it into several files"
        )
        return result
    values = _chunk_values(text, chunks)
    if values is not None:
        result.docs = [
            Document(text=chunk, data=value, has_marker=marker, line=line)
            for (chunk, marker, line), value in zip(chunks, values)
        ]
        return result
    for chunk, marker, line in chunks:
        try:
            docs.append(Document(text=chunk, data=load_text(chunk), has_marker=marker, line=line))
        except yaml.YAMLError as exc:
            first = line + 1 if marker else line  # the document starts after its ``---``
            failures.append(f"{path}: document at line {first}: invalid YAML{_where(exc, line)}")
            docs.append(Document(text=chunk, data=None, has_marker=marker, line=line))
    if failures:
        whole = _whole_stream(text)
        if whole is not None:
            docs, failures = whole, []
    result.docs, result.doc_errors = docs, failures
    return result


_BLANK_RE = re.compile(r"^(?:---)?[ \t]*(?:#.*)?$")


def _chunk_values(text: str, chunks: list[tuple[str, bool, int]]) -> list[Any] | None:
    """The value of each chunk, parsed as one stream by one parser (a parser per chunk costs more than the
    parsing): by the compiled reader when it is built (:mod:`tasks.clients.cluster.yamlcompiled`; a document it
    leaves to the Python reader is read from its chunk by :func:`load_text`), else, or when that cannot stand for
    the Python reader's reading of the whole file, by :class:`Loader`. None when that cannot stand for parsing
    chunk by chunk: a document does not parse (the caller then parses chunk by chunk to report each malformed one
    with its line), two documents start in one chunk, or a chunk holding more than blanks, comments and its marker
    gets no document (a directive, an explicit ``null``)."""
    compiled = compiled_documents(text, most=len(chunks))
    if compiled is not None:
        values = _assigned(chunks, compiled, _compiled_value)
        if values is not None:
            return values
    loader = Loader(text)
    try:
        return _assigned(chunks, _roots(loader), lambda node, _: loader.construct_document(node))
    finally:
        loader.dispose()


def _compiled_value(value: Any, chunk: str) -> Any:
    """A document's value as the compiled reader read it, or as :func:`load_text` reads its chunk when the
    compiled reader handed it back (:data:`NOT_PLAIN`)."""
    return load_text(chunk) if value is NOT_PLAIN else value


def _roots(loader: Any) -> Iterator[tuple[int, yaml.Node]]:
    """The root node of each document ``loader`` parses but the null ones, with the 0-based line it starts on."""
    while loader.check_node():
        node = loader.get_node()
        if node is None or (type(node) is yaml.ScalarNode and node.tag == _NULL_TAG):
            continue
        yield node.start_mark.line, node


def _assigned(
    chunks: list[tuple[str, bool, int]], roots: Iterable[tuple[int, Any]], build: Callable[[Any, str], Any]
) -> list[Any] | None:
    """Each chunk's value, from the documents ``roots`` gives (the line of each one's root and what ``build``
    makes its value from, with the text of its chunk; a null value is a document skipped); None when a document
    does not parse, two start in one chunk, or a chunk with more than blanks, comments and its marker gets none."""
    starts = [line - 1 for _, _, line in chunks]  # 0-based, as the parser's marks count
    values: list[Any] = [None] * len(chunks)
    assigned = [False] * len(chunks)
    try:
        for line, root in roots:
            index = bisect.bisect_right(starts, line) - 1
            if index < 0 or assigned[index]:
                return None
            value = build(root, chunks[index][0])
            if value is not None:  # a null document (read from its chunk), as the stream's reader skips it
                values[index], assigned[index] = value, True
    except yaml.YAMLError:
        return None
    for (chunk, _, _), taken in zip(chunks, assigned):
        if not taken and not all(_BLANK_RE.match(line) for line in chunk.splitlines()):
            return None
    return values


def _whole_stream(text: str) -> list[Document] | None:
    """Fallback for valid streams the line-based split cannot cut (directives, exotic markers).

    The documents are kept as parsed but without their text, so the first write to this file
    re-serialises all of it (its comments are lost then; nothing is written just for loading).
    None when the stream does not parse either: the malformed chunks are reported then.
    """
    try:
        documents = list(yaml.load_all(text, Loader=Loader))  # noqa: S506 - safe loader
    except yaml.YAMLError:
        return None
    return [Document(text="", data=data, has_marker=i > 0, dirty=True) for i, data in enumerate(documents)]


def _where(exc: yaml.YAMLError, first_line: int = 1) -> str:
    """Position (in the file, for a chunk starting at ``first_line``) and problem of a parse error,
    without the snippet of file content PyYAML quotes (the offending line may hold Secret data)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    position = f" at line {mark.line + first_line}, column {mark.column + 1}" if mark is not None else ""
    return position + (f": {problem}" if problem else "")


def atomic_write(path: Path, text: str) -> tuple[int, int, int] | None:
    """Replace ``path`` with ``text`` atomically (:func:`tasks.clients.files.write_atomically`); returns the new file's stamp.

    Args:
        path: The file to replace.
        text: Its new content.

    Returns:
        The new file's stamp (mtime in ns, size, inode).
    """
    return file_stamp(write_atomically(path, text))
