"""Mirrors and OCI image layouts (air-gapped clusters, the offline demo)."""

from __future__ import annotations

import hashlib
import pathlib
import re
import stat
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
        ValueError: A mirror carries credentials (``user:password@host``), which would reach logs and conditions; or
            an ``oci-layout:`` mirror names no directory or one that does not exist (or is not a directory, or
            cannot be read). Either is a configuration error of the whole run, found before any image is read: read
            per image, a missing layout directory would be every image's terminal ImageNotFound.
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
            result[host.strip()] = layout_directory(host.strip(), target[len(LAYOUT_PREFIX) :].strip())
        elif target:
            result[host.strip()] = target
    return result


def layout_directory(host: str, directory: str) -> pathlib.Path:
    """The directory of an ``oci-layout:DIR`` mirror, which must exist now.

    Args:
        host: The registry host it mirrors, for the message.
        directory: ``DIR`` as given (``~`` is expanded; a relative one is relative to the working directory).

    Returns:
        The directory.

    Raises:
        ValueError: ``DIR`` is empty (which would have read the working directory), cannot be expanded (``~user``
            of no user), does not exist, is not a directory or cannot be read; the message names the mirror and path.
    """
    what = f"the registry mirror of {host}, {LAYOUT_PREFIX}{directory}"
    if not directory:
        raise ValueError(f"the registry mirror of {host}, {LAYOUT_PREFIX}, names no directory: give {LAYOUT_PREFIX}DIR")
    try:
        path = pathlib.Path(directory).expanduser()
    except RuntimeError as exc:  # "~nobody/images": no such user's home
        raise ValueError(f"{what}: {exc}") from None
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise ValueError(f"{what}: directory {path} does not exist") from None
    except OSError as exc:
        raise ValueError(f"{what}: {path} cannot be read ({exc.strerror})") from None
    if not stat.S_ISDIR(mode):
        raise ValueError(f"{what}: {path} is not a directory")
    return path


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
        RegistryError: ``not-found`` (no layout for the repository, no such tag or blob), ``invalid`` (a file that is
            not a JSON object or cannot be read, an entry or descriptor without a digest), as the registry path
            classifies them; ``unavailable`` when ``root`` itself is gone (checked when the run started, so it went
            away since: temporary, never a model's terminal ImageNotFound).
    """
    layout = root / ref.repository  # the repository was validated by parse_reference: no "..", no absolute path
    try:
        index_file = _layout_file(layout / "index.json", image, MAX_MANIFEST_BYTES, f"no image layout at {layout}")
    except RegistryError as exc:
        if exc.kind == "not-found" and not root.is_dir():  # gone since the run checked it (an unmounted volume)
            raise RegistryError("unavailable", f"{image}: the image layout directory {root} is gone") from None
        raise
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
