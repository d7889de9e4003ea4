"""The compiled reader of manifest files: libyaml's events turned straight into dicts, lists and scalars.

An optional C extension (``_modelplane_yaml``, built from ``yamlcompiled.c`` beside this module when the install
has a C compiler and libyaml's headers; a top-level module, so a ``pip install .`` serves a checkout on
``sys.path`` too) reads a whole file in one call, where the Python reader (:mod:`tasks.clients.cluster.yamlload`)
makes a PyYAML node object per value and walks them. It reads only what it reads exactly as the Python reader
does, and hands the rest back:

- a document made of mappings, sequences and untagged scalars becomes its value; quoted and block scalars are
  strings, and a plain scalar that could be something else (it is empty, or its first character starts one of
  the YAML 1.1 implicit types) is resolved by the Python reader's own resolver and constructors
  (:func:`~tasks.clients.cluster.yamlload.plain_scalar`), so ``yes``, ``0755``, ``1:30`` or ``.inf`` get the
  same value;
- a document with an anchor, an alias, a tag, a merge key, a collection as a key, a key written twice, nesting
  deeper than 100 levels (which the Python reader refuses: ``engine.yaml11.MAX_NESTING``), an explicit key in a
  flow sequence or a scalar the Python reader leaves to PyYAML comes back as :data:`~tasks.clients.cluster.yamlload.NOT_PLAIN` (the system's libyaml 0.2.5 and the newer one
  PyYAML's wheels bundle differ in two places: the newer one refuses nesting beyond 1,000 levels, and reads
  ``[? ]`` where 0.2.5 reads ``[? ]]``);
- a stream libyaml refuses, one with a ``%YAML``/``%TAG`` directive, or with more documents than the file has
  chunks, gives None.

:mod:`tasks.clients.cluster.yamlfile` reads each document handed back from its own text with the Python reader,
and a file it cannot read exactly so (an error, a document not where the split expects it) the Python way
whole: every value, refusal and line number is the Python reader's. ``MODELPLANE_YAML_READER=python`` turns the
compiled reader off (:func:`reader` says which one reads), as does a PyYAML without libyaml (its own parser,
in Python, differs from libyaml's in odd documents).
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Protocol, cast

import yaml

from tasks.clients.cluster.yamlload import NOT_PLAIN, Loader, plain_scalar

READER_VARIABLE = "MODELPLANE_YAML_READER"
"""The environment variable that turns the compiled reader off when it is ``python``."""


class _Extension(Protocol):
    def read_documents(
        self, text: str, resolve: Any, resolvable: bytes, not_plain: object, limit: int, /
    ) -> list[tuple[int, Any]] | None: ...

    def libyaml_version(self) -> str: ...


def _load_extension() -> tuple[_Extension | None, str]:
    """The extension, or None and why the Python reader reads without it."""
    if not issubclass(Loader, getattr(yaml, "CSafeLoader", ())):
        # PyYAML built without libyaml parses in Python, with differences from libyaml in odd documents: the
        # compiled reader could not read exactly as it does
        return None, "PyYAML has no libyaml here"
    try:
        return cast(_Extension, importlib.import_module("_modelplane_yaml")), ""
    except ImportError:  # not built (no compiler or no libyaml headers at install)
        return None, "the compiled reader is not built in this install"


_EXTENSION, _WITHOUT = _load_extension()


def _resolvable_first_bytes() -> bytes:
    """256 flags: the first bytes of the plain scalars the Python reader must resolve (the UTF-8 lead byte of each
    first character its implicit resolvers are registered for; every byte when a resolver takes any first
    character). The empty scalar is always resolved; any other plain scalar is a string."""
    firsts = Loader.yaml_implicit_resolvers.keys()
    if None in firsts:
        return bytes([1] * 256)
    table = bytearray(256)
    for first in firsts:
        if first:
            table[str(first).encode()[0]] = 1
    return bytes(table)


_RESOLVABLE = _resolvable_first_bytes()


def reader() -> str:
    """Which reader :func:`compiled_documents` uses now, for a user.

    Returns:
        ``compiled (libyaml X.Y.Z)``, or ``Python (PyYAML)`` with the reason when the compiled reader is not used.
    """
    if _EXTENSION is None:
        return f"Python (PyYAML; {_WITHOUT})"
    if os.environ.get(READER_VARIABLE) == "python":
        return f"Python (PyYAML; {READER_VARIABLE}=python)"
    return f"compiled (libyaml {_EXTENSION.libyaml_version()})"


def compiled_documents(text: str, most: int) -> list[tuple[int, Any]] | None:
    """Each document of ``text`` read by the compiled reader: the 0-based line of its root node and its value, or
    :data:`NOT_PLAIN`; documents whose value is null (empty, ``~``) are left out, as the Python reader skips them.

    Args:
        text: A YAML stream (a manifest file's text).
        most: The most documents to read (the chunks a file is split into: one more means two documents in one
            chunk, which the caller reads the Python way), so a stream of countless tiny documents costs no more
            than the Python reader makes of it.

    Returns:
        The documents, or None when the compiled reader is not used (not built, or turned off), libyaml refuses
        the stream, it has a directive, or more than ``most`` documents.
    """
    if _EXTENSION is None or os.environ.get(READER_VARIABLE) == "python":
        return None
    return _EXTENSION.read_documents(text, plain_scalar, _RESOLVABLE, NOT_PLAIN, most)
