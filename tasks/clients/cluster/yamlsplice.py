"""Status writes as text splices: every byte of a document outside its ``status`` block stays as read.

A status write (the ``/status`` subresource, what a flow does to every object it reconciles, and what the
boundary reader does to every invalid object) changes only ``status`` and the bookkeeping in ``metadata``.
Re-serialising the whole document for that, even through ``ruamel.yaml``'s round-trip tree, re-renders what
the write never touched: odd floats (``2.5e-179``, ``1e-300``), an empty-string key or a 100 000-character
string can come back written differently (sometimes as a different value for a YAML 1.1 reader), and a
round trip of a large document costs far more than the write itself.

So when a document's top level is a block mapping and what changed is ``status`` (plus metadata scalars the
document already spells on one line, such as its ``resourceVersion``), :func:`splice_status` cuts the old
``status:`` block out of the text, by the positions the C YAML parser reports, and puts the freshly dumped
one in its place (or after the last top-level entry when there was none); a changed one-line metadata
scalar is replaced in place. The result is parsed again and must read back as the new status with every
other field as before; anything else (flow-style documents, ``List`` items, spec writes, a check that fails)
returns ``None`` and the caller edits the round-trip tree instead (:mod:`tasks.clients.cluster.yamlfile`).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_KEEP_ABSENT_META = frozenset({"uid", "resourceVersion", "creationTimestamp", "generation"})
"""Bookkeeping metadata the backend keeps in memory: a document that does not spell it stays without it."""


def splice_status(text: str, old: Any, new: Any, load: Any) -> str | None:
    """``text`` with its ``status`` block (and one-line metadata scalars) changed from ``old`` to ``new``,
    every other byte as it was; ``None`` when the change is not such a write or the text is not a block
    mapping (the caller falls back to a round-trip edit). ``load`` parses a document as the backend reads it.

    Args:
        text: One document's text.
        old: The document as read.
        new: The document as written.
        load: Parses a document's text as the backend reads it (the splice is checked by reading it back).

    Returns:
        The edited text, or None.
    """
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None
    changed = {k for k in old.keys() | new.keys() if old.get(k, _MISSING) != new.get(k, _MISSING)}
    if not changed <= {"status", "metadata"}:
        return None
    try:
        root: Any = yaml.compose(text, Loader=_Loader)  # noqa: S506 - safe loader: nodes and marks only
    except yaml.YAMLError:
        return None
    if not _block_mapping_at_column_0(root):
        return None
    edits: list[tuple[int, int, str]] = []
    edited: set[str] = set()
    if "metadata" in changed:
        meta_edits = _metadata_edits(root, old.get("metadata"), new.get("metadata"))
        if meta_edits is None:
            return None
        edits += [edit for _, edit in meta_edits]
        edited = {key for key, _ in meta_edits}
    if "status" in changed:
        status_edit = _status_edit(text, root, new.get("status", _MISSING))
        if status_edit is None:
            return None
        edits.append(status_edit)
    spliced = text
    for start, end, replacement in sorted(edits, reverse=True):
        spliced = spliced[:start] + replacement + spliced[end:]
    return spliced if _reads_back(text, spliced, new, edited, load) else None


def _metadata_edits(root: yaml.MappingNode, old: Any, new: Any) -> list[tuple[str, tuple[int, int, str]]] | None:
    """(key, in-place replacement) of each changed one-line metadata scalar; None when a change needs more."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None
    node = _value_of(root, "metadata")
    written = _keys_of(node) if isinstance(node, yaml.MappingNode) else {}
    edits = []
    for key in old.keys() | new.keys():
        before, after = old.get(key, _MISSING), new.get(key, _MISSING)
        if before == after:
            continue
        scalar = written.get(key)
        if scalar is None and key in _KEEP_ABSENT_META:
            continue  # memory-only bookkeeping: the document never spelled it
        if not _one_line_scalar(scalar) or not isinstance(after, (str, int)) or isinstance(after, bool):
            return None
        assert scalar is not None
        edits.append((key, (scalar.start_mark.index, scalar.end_mark.index, _scalar_text(after))))
    return edits


def _status_edit(text: str, root: yaml.MappingNode, status: Any) -> tuple[int, int, str] | None:
    """The replacement of the top-level ``status`` entry (whole lines), or of nothing after the last entry."""
    block = "" if status is _MISSING else _dump_status(status)
    if block is None:
        return None
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "status":
            start = key.start_mark.index
            end = _line_end(text, _content_end(value))
            return start, end, block
    if status is _MISSING:
        return None
    end = _line_end(text, _content_end(root.value[-1][1]))
    prefix = "" if end == 0 or text[end - 1] == "\n" else "\n"
    return end, end, prefix + block


def _dump_status(status: Any) -> str | None:
    """``status:`` and its block as the backend writes new documents; None when it cannot be dumped."""
    try:
        return yaml.dump(
            {"status": status},
            Dumper=_Dumper,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=4096,
        )
    except yaml.YAMLError:
        return None


def _reads_back(text: str, spliced: str, new: dict[str, Any], edited: set[str], load: Any) -> bool:
    """Whether ``spliced`` reads as ``text`` did with only the written fields changed: its status is the new
    one, the ``edited`` metadata keys hold their new values, and nothing else changed."""
    try:
        before, after = load(text), load(spliced)
    except yaml.YAMLError:
        return False
    if not isinstance(before, dict) or not isinstance(after, dict):
        return False
    if after.get("status", _MISSING) != new.get("status", _MISSING):
        return False
    others = (before.keys() | after.keys()) - {"status", "metadata"}
    if any(before.get(k, _MISSING) != after.get(k, _MISSING) for k in others):
        return False
    old_meta, new_meta = before.get("metadata"), after.get("metadata")
    if not isinstance(old_meta, dict) or not isinstance(new_meta, dict):
        return not edited and old_meta == new_meta
    return all(
        new_meta.get(k, _MISSING) == (new["metadata"][k] if k in edited else old_meta.get(k, _MISSING))
        for k in old_meta.keys() | new_meta.keys()
    )


def _block_mapping_at_column_0(root: Any) -> bool:
    """A document whose top level is a block mapping with every key at the start of its line."""
    return (
        isinstance(root, yaml.MappingNode)
        and not root.flow_style
        and bool(root.value)
        and all(key.start_mark.column == 0 for key, _ in root.value)
    )


def _value_of(mapping: yaml.MappingNode, name: str) -> yaml.Node | None:
    return _keys_of(mapping).get(name)


def _keys_of(mapping: yaml.MappingNode) -> dict[str, yaml.Node]:
    return {k.value: v for k, v in mapping.value if isinstance(k, yaml.ScalarNode)}


def _one_line_scalar(node: yaml.Node | None) -> bool:
    return (
        isinstance(node, yaml.ScalarNode)
        and node.start_mark.line == node.end_mark.line
        and node.style in (None, "", "'", '"')
        and node.tag in ("tag:yaml.org,2002:str", "tag:yaml.org,2002:int")
    )


def _scalar_text(value: str | int) -> str:
    """A one-line YAML scalar that reads back as ``value`` in YAML 1.1 and 1.2 (JSON is valid for both)."""
    return json.dumps(value)


def _content_end(node: yaml.Node) -> int:
    """Where ``node``'s own text ends: its last scalar or closing bracket, not the comments and blank lines
    the parser folds into a block collection's end."""
    if isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False):
        return int(node.end_mark.index)
    if isinstance(node, yaml.MappingNode) and node.value:
        return _content_end(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and node.value:
        return _content_end(node.value[-1])
    return int(node.end_mark.index)


def _line_end(text: str, index: int) -> int:
    """The index just after the end of the line holding ``index - 1`` (its newline included)."""
    if index > 0 and text[index - 1] == "\n":
        return index
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline + 1


_MISSING = object()
