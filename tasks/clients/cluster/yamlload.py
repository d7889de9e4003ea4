"""The YAML reader of manifests: PyYAML's safe loader (libyaml's parser when present) checked as the API server
checks a request body.

Timestamps stay strings (as in API-server JSON) rather than becoming ``datetime``; a mapping with the same key
twice and an alias inside its own anchor are refused at their line; the common shapes (mappings, sequences, the
core scalar tags) are built in the same pass that checks them (:func:`construct_tree` for a document without
anchors, :func:`construct_plain` for one with them), anything else checked whole and built by PyYAML's
constructor.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from engine.yaml11 import (
    CONSTRUCTOR_ERRORS,
    MAX_NESTING,
    SCALAR_CONSTRUCTORS,
    CheckedConstruction,
    check_document,
    constructible,
    duplicate_key,
    scalar_value,
    unbuildable,
)

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


_MERGE_TAG = "tag:yaml.org,2002:merge"


@functools.lru_cache(maxsize=65536)
def _resolved_tag(kind: Any, value: Any, implicit: Any) -> str:
    """The tag PyYAML's resolver gives a node of ``kind`` holding ``value`` (for a scalar: plain or quoted, the
    ``implicit`` pair), with :class:`Loader`'s implicit resolvers (no timestamps). Cached: manifests repeat the
    same keys and values in every document, and the resolver tries a regular expression per candidate.

    A plain scalar that PyYAML's number patterns match but that is no number (``0b_``, ``0x_``: an empty digit
    string once the underscores go, on which PyYAML's constructor raises ``ValueError``) is a string, as the
    Kubernetes YAML reader reads it (:mod:`engine.yaml11`)."""
    if kind is yaml.ScalarNode and implicit[0]:
        resolvers = Loader.yaml_implicit_resolvers
        for tag, regexp in resolvers.get(value[0] if value else "", []) + resolvers.get(None, []):
            if regexp.match(value):
                return str(tag) if constructible(str(tag), value) else str(Loader.DEFAULT_SCALAR_TAG)
    if kind is yaml.ScalarNode:
        return str(Loader.DEFAULT_SCALAR_TAG)
    return str(Loader.DEFAULT_SEQUENCE_TAG if kind is yaml.SequenceNode else Loader.DEFAULT_MAPPING_TAG)


class Loader(CheckedConstruction, _BaseLoader):  # type: ignore[misc, valid-type]
    """A safe loader that keeps ``2024-01-01T00:00:00Z`` as a string, as the API server's JSON does, and
    refuses what the API server refuses: a mapping with the same key twice (kubectl: "mapping key already
    defined"; PyYAML would keep the last value silently) and an alias inside its own anchor (``&r {x: *r}``,
    a document that is no JSON object; it would loop every comparison and copy of it)."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._text = stream if isinstance(stream, str) else None
        """The text parsed, when it was given as a string: where :meth:`construct_document` looks for anchors."""

    resolve = staticmethod(_resolved_tag)
    """Tags from the cache (:func:`_resolved_tag`), called straight from libyaml's composer: this loader has no
    path resolvers, so a node's tag depends on its kind, value and quoting only."""

    # No path resolvers either: the composer's bookkeeping for them, called for every node, is skipped with C
    # built-ins that take the same arguments and do nothing with them (a Python no-op costs more per node).
    descend_resolver = staticmethod(slice)
    ascend_resolver = staticmethod(tuple)

    def construct_document(self, node: yaml.Node) -> Any:
        """The document's value: built by :func:`construct_tree` when its text holds no ``&`` (no anchor, so no
        alias: each node is used once; it refuses nesting beyond :data:`engine.yaml11.MAX_NESTING` and repeated
        keys itself), else, or when that refuses the document, checked whole (:func:`engine.yaml11.check_document`:
        nesting, aliases, duplicate keys, recursive aliases) and built by :func:`construct_plain` (each shared node
        built once); a document with merge keys or other tags is built by PyYAML's constructor, which gives the
        same values more slowly."""
        if self._text is not None and self._text.find("&", node.start_mark.index, node.end_mark.index) < 0:
            try:
                return construct_tree(node)  # no alias to expand; nesting and repeated keys are its own checks
            except Exception:  # noqa: BLE001 - anything it refuses is built (or refused) the checked way below
                pass
        check_document(node)
        try:
            return construct_plain(node, self)
        except _NotPlain:
            return super().construct_document(node)


class _NotPlain(Exception):
    """A document :func:`construct_plain` leaves to PyYAML's constructor (a merge key, another tag)."""


_STR_TAG, _MAP_TAG, _SEQ_TAG = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_NULL_TAG = "tag:yaml.org,2002:null"
_ScalarNode, _MappingNode, _SequenceNode = yaml.ScalarNode, yaml.MappingNode, yaml.SequenceNode


@functools.lru_cache(maxsize=65536)
def _scalar(tag: str, value: str) -> Any:
    """The value of a ``null``/``bool``/``int``/``float`` scalar (:func:`engine.yaml11.scalar_value`);
    :class:`_NotPlain` for another tag. Cached: manifests repeat the same numbers and booleans, and every one of
    these values is immutable."""
    if tag not in SCALAR_CONSTRUCTORS:
        raise _NotPlain(tag)
    return scalar_value(tag, value)


NOT_PLAIN = object()
"""What :func:`plain_scalar` gives for a scalar this reader does not build in its own pass."""


@functools.lru_cache(maxsize=65536)
def plain_scalar(value: str) -> Any:
    """The value of an untagged plain scalar as this reader builds it (:func:`_resolved_tag`, then
    :func:`_scalar`): for a reader that meets scalars without PyYAML's nodes (the compiled reader,
    :mod:`tasks.clients.cluster.yamlcompiled`). Cached: manifests repeat the same numbers and booleans, and every
    one of these values is immutable.

    Args:
        value: The scalar's text.

    Returns:
        Its value; :data:`NOT_PLAIN` when this reader leaves the scalar's document to PyYAML's constructor (a
        merge key ``<<``, ``=``) or its constructor raises (the document's reader raises it then).
    """
    tag = _resolved_tag(yaml.ScalarNode, value, (True, False))
    if tag == _STR_TAG:
        return value
    try:
        return _scalar(tag, value)
    except Exception:  # noqa: BLE001 - _NotPlain, or a constructor's error, raised again when the document is read
        return NOT_PLAIN


def construct_tree(node: yaml.Node, depth: int = 1) -> Any:
    """The value of a node tree made of mappings, sequences and ``str``/``null``/``bool``/``int``/``float``
    scalars, the value :func:`construct_plain` builds, in one recursion with no bookkeeping: for a document
    without anchors, where no node is used twice (a shared node would be built once per use). A list or mapping
    as a key raises ``TypeError``.

    Args:
        node: The root of a document without anchors.
        depth: How many collections ``node`` is inside of, itself included.

    Returns:
        The document's value.

    Raises:
        _NotPlain: A node of another kind (another tag, a merge key), a key written twice or nesting deeper than
            :data:`engine.yaml11.MAX_NESTING`: the caller checks the document (:func:`engine.yaml11.check_document`)
            and builds or refuses it then, at its line.
    """
    kind = type(node)
    if kind is _ScalarNode:
        return node.value if node.tag == _STR_TAG else _scalar(node.tag, node.value)
    if depth > MAX_NESTING:
        raise _NotPlain("nested too deep")
    if kind is _MappingNode and node.tag == _MAP_TAG:
        pairs = node.value
        # a string key or value (most of them) is taken as it is, without a call
        mapping = {
            (key.value if type(key) is _ScalarNode and key.tag == _STR_TAG else construct_tree(key, depth + 1)): (
                value.value
                if type(value) is _ScalarNode and value.tag == _STR_TAG
                else construct_tree(value, depth + 1)
            )
            for key, value in pairs
        }
        if len(mapping) != len(pairs):
            raise _NotPlain("a key written twice")
        return mapping
    if kind is _SequenceNode and node.tag == _SEQ_TAG:
        return [
            item.value if type(item) is _ScalarNode and item.tag == _STR_TAG else construct_tree(item, depth + 1)
            for item in node.value
        ]
    raise _NotPlain(node.tag)


def construct_plain(root: yaml.Node, loader: Any) -> Any:
    """The value of a node graph made of mappings, sequences and ``str``/``null``/``bool``/``int``/``float``
    scalars that :func:`engine.yaml11.check_document` has passed (no recursive alias, no key written twice), built
    directly in one pass that also refuses keys equal once built (``1`` and ``1.0``); non-string scalars go through
    the loader's own constructors, so every value is the one PyYAML would build. An aliased node is built once and
    shared, as PyYAML does. Raises :class:`_NotPlain` for anything else.

    Args:
        root: The document's root node.
        loader: The loader whose scalar constructors build ``bool``, ``int``, ``float`` and ``null``.

    Returns:
        The document's value.

    Raises:
        ConstructorError: A key equal to another of its mapping once built, or a tagged scalar its constructor
            refuses, at its line.
        _NotPlain: A node of another kind (another tag, a merge key, an unhashable key), left to PyYAML.
    """
    built: dict[int, Any] = {}
    scalar = yaml.ScalarNode

    def value(node: yaml.Node) -> Any:
        if type(node) is scalar:
            if node.tag == _STR_TAG:
                return node.value
            method = SCALAR_CONSTRUCTORS.get(node.tag)
            if method is None:
                raise _NotPlain(node.tag)
            try:
                return getattr(loader, method)(node)
            except CONSTRUCTOR_ERRORS as exc:  # !!bool maybe, !!int abc
                raise unbuildable(node, exc) from None
        ident = id(node)
        known = built.get(ident)
        if known is not None:  # an alias of a node built before (check_document refused one inside itself)
            return known
        if type(node) is yaml.MappingNode and node.tag == _MAP_TAG:
            mapping: dict[Any, Any] = {}
            built[ident] = mapping
            for key_node, value_node in node.value:
                # a string key or value (most of them) is taken as it is, without a call
                key = key_node.value if type(key_node) is scalar and key_node.tag == _STR_TAG else value(key_node)
                if key_node.tag == _MERGE_TAG:
                    raise _NotPlain(_MERGE_TAG)
                try:
                    repeated = key in mapping
                except TypeError:  # a list or mapping as a key
                    raise _NotPlain("unhashable key") from None
                if repeated:
                    raise duplicate_key(key_node)
                mapping[key] = (
                    value_node.value if type(value_node) is scalar and value_node.tag == _STR_TAG else value(value_node)
                )
            return mapping
        if type(node) is yaml.SequenceNode and node.tag == _SEQ_TAG:
            sequence: list[Any] = []
            built[ident] = sequence
            sequence.extend([value(item) for item in node.value])
            return sequence
        raise _NotPlain(node.tag)

    return value(root)


def load_text(text: str) -> Any:
    """Parse one YAML document with :class:`Loader`.

    Args:
        text: One YAML document.

    Returns:
        Its value.

    Raises:
        YAMLError: The text is not valid YAML, or has a duplicate key or a recursive alias.
    """
    return yaml.load(text, Loader=Loader)  # noqa: S506 - Loader derives from SafeLoader
