"""Cache identity, names and PVC sizes for model caches (pure).

A cache's identity is what it holds: the canonical source URI (scheme, repo or bucket/prefix, revision,
patterns, filename, endpoint) plus the storage class, so every consumer of the same weights in a namespace
shares one ModelCache and one PVC. Because the canonical URI already normalises (default revision, sorted
patterns), a ModelCache a person wrote by hand gets the same identity as the one Modelplane would create.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction

from engine.caches.sources import ModelSource, parse_source

CACHE_IDENTITY_LABEL = "modelplane.io/cache-identity"
"""Label carrying :func:`cache_identity` on a ModelCache and the PVC behind it."""
CACHE_MARKER = ".modelplane-cache.json"
"""The completion marker the downloader writes last at the cache root (the manifest of what it holds)."""

GI = 1024**3
IDENTITY_LENGTH = 32
"""Hex characters of the identity: 128 bits, and short enough for a label value (at most 63)."""
NAME_HASH_LENGTH = 10
MAX_NAME_LENGTH = 63
_NOT_DNS = re.compile(r"[^a-z0-9]+")


def cache_identity(source: ModelSource | str, storage_class: str | None = None) -> str:
    """A stable hex digest of what a cache holds (canonical source URI) and where (storage class).

    Accepts a :class:`ModelSource` or any source text (parsed first, so spelling variants such as
    ``hf://org/name@main`` and ``hf://org/name`` give one identity).
    """
    parsed = parse_source(source) if isinstance(source, str) else source
    text = f"{parsed.uri}\n{storage_class or ''}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:IDENTITY_LENGTH]


def cache_name(source: ModelSource | str, storage_class: str | None = None) -> str:
    """A deterministic DNS-1123 label (<= 63 characters) for the ModelCache of a source.

    A readable prefix from the scheme and repo (or bucket/prefix) followed by a short hash of the identity,
    e.g. ``hf-meta-llama-llama-3-1-8b-instruct-1a2b3c4d5e``.
    """
    parsed = parse_source(source) if isinstance(source, str) else source
    digest = cache_identity(parsed, storage_class)[:NAME_HASH_LENGTH]
    readable = _NOT_DNS.sub("-", f"{parsed.scheme}-{parsed.display_name}".lower()).strip("-")
    room = MAX_NAME_LENGTH - NAME_HASH_LENGTH - 1
    readable = readable[:room].rstrip("-") or parsed.scheme
    return f"{readable}-{digest}"


def _whole_bytes(size: object, index: int) -> int:
    """A size as whole bytes (int, or an integral float/Decimal such as a parsed quantity)."""
    if size is None:
        raise ValueError(f"size of source {index} is unknown")
    if isinstance(size, bool) or not isinstance(size, (int, float, Decimal)):
        raise ValueError(f"size of source {index} must be a whole number of bytes, not {size!r}")
    if not (size.is_finite() if isinstance(size, Decimal) else math.isfinite(size)):
        raise ValueError(f"size of source {index} is not a finite number ({size!r})")
    if size != int(size):
        raise ValueError(f"size of source {index} must be a whole number of bytes, not {size!r}")
    if size < 0:
        raise ValueError(f"size of source {index} is negative ({size} bytes)")
    return int(size)


def pvc_size(sizes_bytes: Iterable[int | None] | int | None, headroom_percent: float = 10) -> str:
    """The PVC request for sources of these sizes: total x (1 + headroom/100), rounded up to whole Gi.

    Follows AIM's ``ApplyHeadroomAndRound`` (10 GiB at 10 % -> ``"11Gi"``; 100 MiB -> ``"1Gi"``), never less
    than ``1Gi``. Raises ``ValueError`` when there are no sources, a size is unknown (None), negative or not
    an integer, or the headroom is negative.
    """
    if sizes_bytes is None:
        raise ValueError("the source size is unknown")
    single = isinstance(sizes_bytes, (int, float, Decimal)) and not isinstance(sizes_bytes, bool)
    sizes = [sizes_bytes] if single else list(sizes_bytes)  # type: ignore[arg-type]
    if not sizes:
        raise ValueError("no sources to size a cache for")
    total = 0
    for index, size in enumerate(sizes):
        total += _whole_bytes(size, index)
    if headroom_percent is None or headroom_percent < 0:
        raise ValueError(f"headroom must be at least 0 percent, not {headroom_percent!r}")
    with_headroom = int(total * (1 + Fraction(str(headroom_percent)) / 100))
    gibibytes = max(1, -(-with_headroom // GI))
    return f"{gibibytes}Gi"
