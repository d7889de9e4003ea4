"""YAML 1.1 text read as the Kubernetes YAML reader reads it, for the configuration Modelplane parses itself.

Why: PyYAML's implicit resolvers tag a plain scalar by its pattern, then construct it; a few texts match a number
pattern without being a number (``0b_``, ``0x_``: an empty digit string once the underscores go), and PyYAML's
constructor raises ``ValueError`` on them, which no caller expects from a YAML read. The Kubernetes YAML reader
(go-yaml) reads a plain scalar that does not parse as a number as a string; so does :class:`Loader`. Everything
else is PyYAML's safe loading (libyaml's parser when present), YAML 1.1 as kubectl reads it.

Pure: parsing text, no I/O.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

__all__ = ["SCALAR_CONSTRUCTORS", "Loader", "constructible", "safe_load", "scalar_value"]

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
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


class Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader, with a plain scalar that matches a number pattern but is no number read as a string."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """The tag PyYAML gives the node, a string's where that tag's number constructor would raise."""
        tag = super().resolve(kind, value, implicit)
        if kind is yaml.ScalarNode and not constructible(str(tag), value):
            return self.DEFAULT_SCALAR_TAG
        return tag


def safe_load(text: str | bytes) -> Any:
    """The single document of ``text``, read as :class:`Loader` reads it.

    Args:
        text: YAML text.

    Returns:
        The document's value (None for an empty text).

    Raises:
        yaml.YAMLError: The text is not YAML or holds more than one document.
    """
    return yaml.load(text, Loader=Loader)  # noqa: S506 - Loader is a SafeLoader
