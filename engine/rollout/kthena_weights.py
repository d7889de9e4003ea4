"""Where a Kthena backend's weights come from in the pod.

Decides, per backend, whether its weights are mounted directly (a ``pvc://`` model, read-only, no copy),
downloaded by an init container into the backend's own ``cacheURI`` (Kthena's layout), or read from a
Modelplane-managed ModelCache; and where LoRA adapters are mounted. Paths are absolute (upstream mounts
``pvc://X`` at the relative ``X``, its issue #1221). Download credentials stay secret references.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from engine.api.kthena import ModelBackend
from engine.caches.requests import is_download_env
from engine.caches.source_fields import from_kthena_uri
from engine.caches.sources import ModelSource
from engine.rollout.kthena import Manifest, dump_list, prune

MODEL_MOUNT = "/models"
LORA_MOUNT = "/loras"


@dataclass(frozen=True)
class Mount:
    """One volume the engine container mounts."""

    volume: Manifest
    mount_path: str
    read_only: bool = True


@dataclass(frozen=True)
class Weights:
    """Where a backend's weights come from in the pod: mounts, the path the server starts on, and the
    init containers that fill a user-provided cache (``cacheURI``) before the server starts."""

    mounts: tuple[Mount, ...]
    model_path: str
    init_containers: tuple[Manifest, ...] = ()


def cache_mount(cache_uri: str) -> tuple[Mount, str]:
    """The volume of a ``cacheURI`` and the cache directory inside the pod, both absolute: ``pvc://X``
    mounts claim X at ``/X`` (its sub-path ``pvc://X/d`` is the directory ``/X/d``), ``hostpath:///p`` at
    ``/p`` (upstream mounts ``pvc://X`` at the relative ``X``, its issue #1221)."""
    scheme, _, rest = cache_uri.partition("://")
    rest = rest.strip("/")
    if scheme == "pvc":
        claim = rest.split("/", 1)[0]
        if not claim:
            raise ValueError(f"{cache_uri!r}: expected pvc://CLAIM")
        return Mount(
            {"name": "cache", "persistentVolumeClaim": {"claimName": claim}}, f"/{claim}", read_only=False
        ), f"/{rest}"
    if scheme == "hostpath":
        if not rest:
            raise ValueError(f"{cache_uri!r}: expected hostpath:///PATH")
        return Mount(
            {"name": "cache", "hostPath": {"path": f"/{rest}", "type": "DirectoryOrCreate"}},
            f"/{rest}",
            read_only=False,
        ), f"/{rest}"
    raise ValueError(f"{cache_uri!r}: a cacheURI is hostpath:// or pvc://")


def needs_managed_cache(backend: ModelBackend) -> ModelSource | None:
    """The source a Modelplane-managed ModelCache must hold for this backend, or ``None`` when the weights
    are mounted directly (``pvc://`` modelURI) or downloaded into the backend's own ``cacheURI``."""
    source = from_kthena_uri(backend.model_uri or "")
    if not source.downloadable or backend.cache_uri:
        return None
    return source


def direct_weights(backend: ModelBackend, downloader_image: str) -> Weights | None:
    """Weights that need no managed cache: a ``pvc://`` model mounted read-only (no copy), or a download
    into the ``cacheURI`` at ``<cache>/<md5(modelURI)>`` (Kthena's layout) by Modelplane's downloader,
    which skips a complete download, so a restart never downloads again. ``None``: use a managed cache."""
    uri = backend.model_uri or ""
    source = from_kthena_uri(uri)
    if source.scheme == "pvc":
        volume = {"name": "weights", "persistentVolumeClaim": {"claimName": source.claim, "readOnly": True}}
        path = f"{MODEL_MOUNT}/{source.path.strip('/')}" if source.path and source.path.strip("/") else MODEL_MOUNT
        return Weights((Mount(volume, MODEL_MOUNT),), path)
    if not backend.cache_uri:
        return None
    mount, cache_dir = cache_mount(backend.cache_uri)
    target = f"{cache_dir}/{hashlib.md5(uri.encode()).hexdigest()}"
    init = {
        "name": "model-downloader",
        "image": downloader_image,
        "command": ["modelplane", "cache", "fill", source.uri, target],
        "env": downloader_env(backend),
        "envFrom": [dict(e) for e in dump_list(backend.env_from)],
        "volumeMounts": [{"name": mount.volume["name"], "mountPath": mount.mount_path}],
    }
    return Weights((mount,), target, (prune(init),))


def managed_weights(pvc: str) -> Weights:
    """Weights from an Available managed ModelCache: its PVC mounted read-only, files at the root."""
    return Weights(
        (Mount({"name": "weights", "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}}, MODEL_MOUNT),),
        MODEL_MOUNT,
    )


def lora_mount(name: str, pvc: str, sub_path: str | None = None) -> tuple[Mount, str]:
    """An adapter's cache PVC mounted read-only at ``/loras/<name>``, and the path the engine loads."""
    volume = {"name": f"lora-{name}", "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}}
    path = f"{LORA_MOUNT}/{name}"
    return Mount(volume, path), f"{path}/{sub_path.strip('/')}" if sub_path and sub_path.strip("/") else path


def downloader_env(backend: ModelBackend) -> list[Manifest]:
    """The backend's env entries a download needs (Hugging Face and AWS variables and Kthena's ``ENDPOINT``,
    ``ACCESS_KEY``, ``SECRET_KEY``: the same rule the warm-caches flow applies); secrets stay references,
    never values."""
    return [e for e in dump_list(backend.env) if is_download_env(str(e.get("name", "")))]
