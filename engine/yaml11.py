"""YAML 1.1 text read as the Kubernetes YAML reader reads it, for the configuration Modelplane parses itself.

Why: PyYAML's implicit resolvers tag a plain scalar by its pattern, then construct it; a few texts match a number
pattern without being a number (``0b_``, ``0x_``: an empty digit string once the underscores go), and PyYAML's
constructor raises ``ValueError`` on them, which no caller expects from a YAML read. The Kubernetes YAML reader
(go-yaml) reads a plain scalar that does not parse as a number as a string; so does :class:`Loader`. Everything
else is PyYAML's safe loading (libyaml's parser when present), YAML 1.1 as kubectl reads it.

A document is also checked as the API server checks a request body before anything walks it: a key written twice,
an alias inside its own anchor, aliases that expand a few hundred bytes into gigabytes ("billion laughs") and nesting
deeper than Python's stack can copy or compare are refused at their line (:func:`check_document`), and a tagged
scalar its constructor cannot build (``!!bool maybe``, ``!!int abc``) is a :class:`yaml.YAMLError` at its line
like any other, not the constructor's ``KeyError`` or ``ValueError``.

Pure: parsing text, no I/O.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from engine.errors import shown

__all__ = [
    "CONSTRUCTOR_ERRORS",
    "MAX_EXPANDED_BYTES",
    "MAX_EXPANDED_NODES",
    "MAX_NESTING",
    "SCALAR_CONSTRUCTORS",
    "CheckedConstruction",
    "Loader",
    "check_document",
    "constructible",
    "duplicate_key",
    "safe_load",
    "scalar_value",
]

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"
SCALAR_CONSTRUCTORS = {
    "tag:yaml.org,2002:null": "construct_yaml_null",
    "tag:yaml.org,2002:bool": "construct_yaml_bool",
    _INT_TAG: "construct_yaml_int",
    _FLOAT_TAG: "construct_yaml_float",
}
"""The safe constructor's method for each implicit scalar tag that is not a string (timestamps aside)."""
_CONSTRUCTOR = yaml.constructor.SafeConstructor()


def scalar_value(tag: str, value: str) -> Any:
    """The value PyYAML's safe constructor builds from a scalar tagged ``tag`` (a key of
    :data:`SCALAR_CONSTRUCTORS`), which reads only the tag and the text.

    Args:
        tag: A key of :data:`SCALAR_CONSTRUCTORS`.
        value: The scalar's text.

    Returns:
        The scalar's value.

    Raises:
        KeyError: ``tag`` has no constructor here.
        ValueError: The constructor refuses ``value`` (``0b_`` tagged int).
    """
    return getattr(_CONSTRUCTOR, SCALAR_CONSTRUCTORS[tag])(yaml.ScalarNode(tag, value))


@functools.lru_cache(maxsize=4096)
def constructible(tag: str, value: str) -> bool:
    """Whether PyYAML's safe constructor builds the number ``tag`` says from ``value`` (every other tag: True).

    Args:
        tag: The tag a resolver gave the plain scalar.
        value: The scalar's text.

    Returns:
        False only for an int or float tag whose constructor raises on ``value``.
    """
    if tag not in (_INT_TAG, _FLOAT_TAG):
        return True
    try:
        scalar_value(tag, value)
    except ValueError:
        return False
    return True


CONSTRUCTOR_ERRORS = (ArithmeticError, AttributeError, LookupError, TypeError, ValueError)
"""What PyYAML's constructors raise on a value their tag cannot build (``KeyError`` for ``!!bool maybe``,
``ValueError`` for ``!!int abc``, ``AttributeError`` for ``!!timestamp nope``), besides its own YAML errors."""


class CheckedConstruction:
    """A loader mixin: a value its constructor cannot build (``!!bool maybe``, ``!!int abc``, ``!!timestamp no``)
    is a :class:`yaml.constructor.ConstructorError` at the node's line, as a parse error is, instead of the
    constructor's own ``KeyError``, ``ValueError`` or ``AttributeError``, which no caller of a YAML read expects."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's ``construct_object``, its constructors' errors raised as a ConstructorError at ``node``."""
        try:
            return super().construct_object(node, deep)  # type: ignore[misc]
        except yaml.YAMLError:
            raise
        except CONSTRUCTOR_ERRORS as exc:
            raise unbuildable(node, exc) from None


def unbuildable(node: yaml.Node, exc: Exception) -> yaml.constructor.ConstructorError:
    """The error for a node its tag's constructor refuses, naming the tag and a bounded quote of the text.

    Args:
        node: The node.
        exc: What the constructor raised.

    Returns:
        The ConstructorError at the node's line.
    """
    quoted = shown(node.value) if isinstance(node, yaml.ScalarNode) else "collection"
    return yaml.constructor.ConstructorError(
        None, None, f"cannot read {quoted} as {node.tag} ({type(exc).__name__})", node.start_mark
    )


class Loader(CheckedConstruction, _BaseLoader):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader, with a plain scalar that matches a number pattern but is no number read as a string,
    and each document checked (:func:`check_document`) before it is built."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """The tag PyYAML gives the node, a string's where that tag's number constructor would raise."""
        tag = super().resolve(kind, value, implicit)
        if kind is yaml.ScalarNode and not constructible(str(tag), value):
            return self.DEFAULT_SCALAR_TAG
        return tag

    def construct_document(self, node: yaml.Node) -> Any:
        """The document's value, built once :func:`check_document` has passed it."""
        check_document(node)
        return super().construct_document(node)


def safe_load(text: str | bytes) -> Any:
    """The single document of ``text``, read as :class:`Loader` reads it.

    Args:
        text: YAML text.

    Returns:
        The document's value (None for an empty text).

    Raises:
        yaml.YAMLError: The text is not YAML, holds more than one document, or is refused by
            :func:`check_document` or by a tag's constructor.
    """
    return yaml.load(text, Loader=Loader)  # noqa: S506 - Loader is a SafeLoader


MAX_NESTING = 100
"""How many mappings and sequences a document may nest one inside another. Kubernetes objects nest 10 to 20 deep;
a few kilobytes of brackets nest a thousand deep, which overflows Python's stack wherever the value is copied,
compared, printed or encoded (``copy.deepcopy`` failed at about 450 levels, ``==`` and ``repr`` at about 990)."""
MAX_EXPANDED_NODES = 1_000_000
"""The most nodes a document may hold once its aliases are expanded, when that is more than ten times the nodes
written: a few hundred bytes of nested aliases (a "billion laughs") stand for billions of nodes, which every
comparison, copy or JSON encoding of the value then walks. A manifest written by hand or by a tool shares a
block or two."""
MAX_EXPANDED_BYTES = 32 * 1024 * 1024
"""The most bytes of scalar text a document may hold once its aliases are expanded, when that is more than ten
times the text written: 20,000 aliases of one 64 KiB string are 1.3 GB to every JSON encoding of the value."""


def check_document(root: yaml.Node) -> None:
    """Refuse a document nested deeper than :data:`MAX_NESTING`, one whose aliases expand it beyond
    :data:`MAX_EXPANDED_NODES` nodes or :data:`MAX_EXPANDED_BYTES` of text (and ten times what is written; go-yaml,
    the API server's reader, refuses such documents too: "excessive aliasing"), a mapping with a key written twice
    (PyYAML would keep the last value silently; kubectl: "mapping key already defined") and an alias inside its own
    anchor (``&r {x: *r}``, no JSON value). Iterative, and each node is visited once, so the check costs the nodes
    written, however deep or aliased the document.

    Args:
        root: The document's root node.

    Raises:
        ConstructorError: The document is refused, at the offending line.
    """
    sizes: dict[int, tuple[int, int, int]] = {}  # node id -> (nodes, text bytes, nesting) once expanded
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = (1, len(node.value), 0)
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
        if leaving:
            on_path.discard(id(node))
            parts = [sizes[id(child)] for child in children]
            nesting = 1 + max((part[2] for part in parts), default=0)
            if nesting > MAX_NESTING:
                raise _refused(node, f"nested more than {MAX_NESTING} levels deep (a document may nest {MAX_NESTING})")
            sizes[id(node)] = (1 + sum(part[0] for part in parts), sum(part[1] for part in parts), nesting)
            continue
        if id(node) in on_path:
            raise _recursive_alias(node)
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.MappingNode):
            _check_keys(node)
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(children) if id(child) not in sizes)
    _check_expansion(root, sizes)


def _check_expansion(root: yaml.Node, sizes: dict[int, tuple[int, int, int]]) -> None:
    """Refuse a document whose expanded size (``sizes`` of its root) is beyond both its limit and ten times what
    is written (each node in ``sizes`` once)."""
    nodes, text, _ = sizes[id(root)]
    written_text = sum(text for _, text, nesting in sizes.values() if nesting == 0)  # the scalars, each once
    if nodes > MAX_EXPANDED_NODES and nodes > 10 * len(sizes):
        raise _refused(
            root,
            f"excessive aliasing: {len(sizes)} nodes written expand to {nodes} (a document may expand to "
            f"{MAX_EXPANDED_NODES:,} nodes, or to ten times the nodes written when that is more)",
        )
    if text > MAX_EXPANDED_BYTES and text > 10 * written_text:
        raise _refused(
            root,
            f"excessive aliasing: {written_text} bytes of text written expand to {text} (a document may expand "
            f"to {MAX_EXPANDED_BYTES:,} bytes, or to ten times the text written when that is more)",
        )


def _check_keys(node: yaml.MappingNode) -> None:
    """Refuse a scalar key written twice in one mapping (merge keys ``<<`` aside)."""
    seen: set[tuple[str, str]] = set()
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        if (key.tag, key.value) in seen:
            raise duplicate_key(key)
        seen.add((key.tag, key.value))


def _refused(node: yaml.Node, problem: str) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


def _recursive_alias(node: yaml.Node) -> yaml.constructor.ConstructorError:
    """The error for an alias inside its own anchor, at ``node``'s line.

    Args:
        node: The node that refers to itself.

    Returns:
        The ConstructorError.
    """
    return _refused(node, "recursive alias: a node refers to itself (not representable as JSON)")


def duplicate_key(key: yaml.Node) -> yaml.constructor.ConstructorError:
    """The error for a mapping key written twice, at the second one's line.

    Args:
        key: The key node written the second time.

    Returns:
        The ConstructorError.
    """
    return _refused(key, f"duplicate key {shown(key.value)} (the last value would silently win)")
