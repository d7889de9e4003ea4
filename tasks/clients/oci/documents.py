"""The documents an image read parses: manifests, indexes and config blobs, each checked before it is used."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasks.clients.oci.references import DIGEST, INDEX_TYPES, PLATFORM, RegistryError


@dataclass(frozen=True)
class ImageConfig:
    """What one read returned: the manifest digest and, unless unchanged, the config labels."""

    digest: str
    labels: dict[str, str] | None
    unchanged: bool = False


def json_object(data: bytes, what: str) -> dict[str, Any]:
    """A manifest, index or config as a JSON object.

    Args:
        data: The document's bytes.
        what: What it is, for the error.

    Returns:
        The object.

    Raises:
        RegistryError: ``invalid`` naming ``what`` when it is not JSON (not UTF-8, nested deeper than the decoder's
            recursion limit, a number too long to convert) or not an object.
    """
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise RegistryError("invalid", f"{what} is not JSON") from None
    if not isinstance(document, dict):
        raise RegistryError("invalid", f"{what} is not a JSON object but a {type(document).__name__}")
    return document


DIGEST_ALGORITHMS = ("sha256", "sha512")
"""The digest algorithms the OCI image spec registers; content addressed by any other is refused, never trusted."""


def verify_digest(data: bytes, digest: str, what: str) -> None:
    """Content addressed by ``digest`` is that content (a registry that substitutes a manifest or config for the
    one an image is pinned to is refused, as Docker refuses it).

    Args:
        data: The content as fetched.
        digest: The digest it was fetched by (``algorithm:hex``).
        what: What it is, for the error.

    Raises:
        RegistryError: ``invalid`` naming ``what`` when the content does not match, or when the digest's algorithm
            is not one of :data:`DIGEST_ALGORITHMS`.
    """
    algorithm, _, expected = digest.partition(":")
    if algorithm not in DIGEST_ALGORITHMS:
        raise RegistryError("invalid", f"{what}: unsupported digest algorithm {algorithm!r}")
    if hashlib.new(algorithm, data).hexdigest() != expected:
        raise RegistryError("invalid", f"{what} does not match its digest {digest}")


def is_index(manifest: Mapping[str, Any]) -> bool:
    """Whether a manifest document is an image index (its media type, or a ``manifests`` list).

    Args:
        manifest: The document.

    Returns:
        True for an index (OCI or Docker manifest list).
    """
    media_type = manifest.get("mediaType")
    return (isinstance(media_type, str) and media_type in INDEX_TYPES) or "manifests" in manifest


def config_digest(manifest: Mapping[str, Any], image: str) -> str:
    """The digest of a manifest's config blob, checked (it goes into a URL or a path).

    Args:
        manifest: The image manifest.
        image: The image, for the error.

    Returns:
        The config's digest.

    Raises:
        RegistryError: ``invalid`` when there is no config descriptor with a well-formed digest.
    """
    config = manifest.get("config")
    digest = config.get("digest") if isinstance(config, dict) else None
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise RegistryError("invalid", f"{image}: the manifest has no config descriptor")
    return digest


def config_labels(blob: bytes, image: str) -> dict[str, str]:
    """The ``config.Labels`` of a config blob.

    Args:
        blob: The config blob.
        image: The image, for the error.

    Returns:
        The labels (empty when absent).

    Raises:
        RegistryError: ``invalid`` when the blob, its ``config`` or its ``config.Labels`` is not an object.
    """
    config = json_object(blob, f"{image}: the config blob").get("config") or {}
    labels = (config.get("Labels") or {}) if isinstance(config, dict) else None
    if not isinstance(labels, dict):
        raise RegistryError("invalid", f"{image}: the config blob's config or config.Labels is not an object")
    return {str(k): str(v) for k, v in labels.items()}


def descriptors(index: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries of an index's ``manifests`` that are objects.

    Args:
        index: The image index.

    Returns:
        Its object entries (none when ``manifests`` is not a list).
    """
    manifests = index.get("manifests")
    return [e for e in manifests if isinstance(e, dict)] if isinstance(manifests, list) else []


def _platform(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    platform = entry.get("platform")
    return platform if isinstance(platform, dict) else {}


def select_platform(index: Mapping[str, Any], image: str, platform: tuple[str, str] = PLATFORM) -> str:
    """The digest of an image index's entry for ``platform``; a one-entry index without platforms is taken as it is.

    Args:
        index: The image index (OCI) or manifest list (Docker).
        image: The image reference, for the error.
        platform: ``(os, architecture)``, linux/amd64 by default.

    Returns:
        The entry's manifest digest (entries whose digest is not one are left out).

    Raises:
        RegistryError: ``not-found``: the index offers no manifest for the platform (the message lists those it has).
    """
    entries = [e for e in descriptors(index) if isinstance(e.get("digest"), str) and DIGEST.match(e["digest"])]
    for entry in entries:
        plat = _platform(entry)
        if (plat.get("os"), plat.get("architecture")) == platform:
            return str(entry["digest"])
    if len(entries) == 1 and not entries[0].get("platform"):
        return str(entries[0]["digest"])
    offered = ", ".join(f"{_platform(e).get('os')}/{_platform(e).get('architecture')}" for e in entries) or "none"
    raise RegistryError(
        "not-found", f"{image}: the image index has no {platform[0]}/{platform[1]} manifest (offers {offered})"
    )
