"""Mirrors and OCI image layouts (air-gapped clusters, the offline demo)."""

from __future__ import annotations

import hashlib
import pathlib
import re
from collections.abc import Mapping
from typing import Any

from tasks.clients.oci.documents import (
    ImageConfig,
    config_digest,
    config_labels,
    descriptors,
    is_index,
    json_object,
    select_platform,
)
from tasks.clients.oci.references import MAX_CONFIG_BYTES, MAX_MANIFEST_BYTES, ImageReference, RegistryError

LAYOUT_PREFIX = "oci-layout:"
REF_NAME = "org.opencontainers.image.ref.name"
_HEX_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def parse_mirrors(mirrors: Mapping[str, str]) -> dict[str, str | pathlib.Path]:
    """The registry mirrors a run reads images from instead of their registries.

    Args:
        mirrors: Registry host -> another registry host, or ``oci-layout:DIR`` (a directory holding one OCI image
            layout per repository, ``DIR/<repository>/index.json``); blank entries are left out.

    Returns:
        Registry host -> mirror host, or the layout directory as a path.

    Raises:
        ValueError: A mirror carries credentials (``user:password@host``), which would reach logs and conditions.
    """
    result: dict[str, str | pathlib.Path] = {}
    for host, target in mirrors.items():
        target = target.strip()
        if "@" in target and not target.startswith(LAYOUT_PREFIX):  # never quoted: the part before '@' is a secret
            raise ValueError(
                f"the mirror of {host.strip()} names a user ('user:password@'): give a mirror as HOST[:PORT] and its "
                "credentials in a pull secret for that host"
            )
        if target.startswith(LAYOUT_PREFIX):
            result[host.strip()] = pathlib.Path(target[len(LAYOUT_PREFIX) :]).expanduser()
        elif target:
            result[host.strip()] = target
    return result


def _layout_file(path: pathlib.Path, image: str, limit: int, missing: str) -> bytes:
    """A layout file's bytes (at most ``limit``): ``not-found`` saying ``missing`` when it is not there, ``invalid``
    when it cannot be read (a directory, no permission, a name too long)."""
    try:
        if path.stat().st_size > limit:
            raise RegistryError("invalid", f"{image}: {path} is larger than {limit} bytes")
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise RegistryError("not-found", f"{image}: {missing}") from None
    except OSError as exc:
        raise RegistryError("invalid", f"{image}: {path} cannot be read ({exc.strerror})") from None


def _layout_blob(layout: pathlib.Path, digest: str, image: str, limit: int) -> bytes:
    if not _HEX_DIGEST.match(digest):
        raise RegistryError("invalid", f"{image}: unsupported digest {digest!r} in the image layout")
    path = layout / "blobs" / "sha256" / digest.split(":", 1)[1]
    data = _layout_file(path, image, limit, f"blob {digest} is missing from the image layout")
    if hashlib.sha256(data).hexdigest() != digest.split(":", 1)[1]:
        raise RegistryError("invalid", f"{image}: blob {digest} does not match its digest")
    return data


def _names(entry: Mapping[str, Any], wanted: str) -> bool:
    """Whether a layout index entry is ``wanted``: its digest, or its ``org.opencontainers.image.ref.name``."""
    annotations = entry.get("annotations")
    return entry.get("digest") == wanted or (isinstance(annotations, dict) and annotations.get(REF_NAME) == wanted)


def read_layout_config(
    root: pathlib.Path, ref: ImageReference, image: str, known_digest: str | None = None
) -> ImageConfig:
    """:meth:`RegistryClient.read_config` from an OCI image layout at ``root/<repository>``.

    Args:
        root: The layouts' directory (an ``oci-layout:`` mirror).
        ref: The image; its tag is the ``org.opencontainers.image.ref.name`` annotation of an ``index.json`` entry.
        image: The image reference, for errors.
        known_digest: The manifest digest read last time: when unchanged, the config is not read again.

    Returns:
        The manifest digest and the config's labels (None with ``unchanged`` when the digest was known).

    Raises:
        RegistryError: ``not-found`` (no layout, no such tag or blob) or ``invalid`` (a file that is not a JSON object
            or cannot be read, an entry or descriptor without a digest), as the registry path classifies them.
    """
    layout = root / ref.repository  # the repository was validated by parse_reference: no "..", no absolute path
    index_file = _layout_file(layout / "index.json", image, MAX_MANIFEST_BYTES, f"no image layout at {layout}")
    index = json_object(index_file, f"{image}: {layout / 'index.json'}")
    wanted = ref.digest or ref.tag or "latest"
    entry = next((e for e in descriptors(index) if _names(e, wanted)), None)
    if entry is None:
        raise RegistryError("not-found", f"{image}: {wanted} is not in the image layout at {layout}")
    digest = entry.get("digest")
    if not isinstance(digest, str) or not digest:
        raise RegistryError("invalid", f"{image}: the image layout's entry for {wanted} has no digest")
    if known_digest and digest == known_digest:
        return ImageConfig(digest, None, unchanged=True)
    manifest = json_object(_layout_blob(layout, digest, image, MAX_MANIFEST_BYTES), f"{image}: the manifest")
    if is_index(manifest):
        child = _layout_blob(layout, select_platform(manifest, image), image, MAX_MANIFEST_BYTES)
        manifest = json_object(child, f"{image}: the manifest")
    blob = _layout_blob(layout, config_digest(manifest, image), image, MAX_CONFIG_BYTES)
    return ImageConfig(digest, config_labels(blob, image))
