"""The model-source fields of each kind read as one :class:`~engine.caches.sources.ModelSource`, with each
kind's own rules.

Decides what an llmaz OpenModel ``spec.source`` (``modelHub`` or ``uri``, with llmaz's webhook rules) and a
Kthena ``modelURI``, ``cacheURI`` or ``LoraAdapter.artifactURL`` (with the CRD's scheme patterns) mean, and
rejects what those projects reject, each error naming the field path (``spec.source.modelHub.filename: ...``)
so the resource's status says what to fix. The source model itself, its parsing and canonical URI are
:mod:`engine.caches.sources`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.caches.sources import ModelSource, SourceError, parse_source, validate_source

# llmaz hub names (OpenModel CRD enum) and the scheme each maps to.
HUGGING_FACE_HUB = "Huggingface"
MODELSCOPE_HUB = "ModelScope"
HUB_NAMES: dict[str, str] = {HUGGING_FACE_HUB: "hf", MODELSCOPE_HUB: "modelscope"}
# llmaz source.uri protocols (webhook SUPPORTED_OBJ_STORES plus host/ollama); Modelplane also accepts hf://.
OPENMODEL_URI_SCHEMES: frozenset[str] = frozenset({"oss", "s3", "gcs", "host", "ollama", "hf"})
# Kthena CRD patterns.
KTHENA_MODEL_URI_SCHEMES: frozenset[str] = frozenset({"hf", "s3", "pvc"})
KTHENA_CACHE_URI_SCHEMES: frozenset[str] = frozenset({"hostpath", "pvc"})


def from_openmodel_source(spec_source: Mapping[str, Any] | None, path: str = "spec.source") -> ModelSource:
    """An llmaz OpenModel ``spec.source`` (``modelHub`` or ``uri``) as a source, with llmaz's webhook rules.

    Rejected, each with the field path: no source at all; an unknown URI scheme; oss without a bucket or
    endpoint; an unknown hub name; filename together with allowPatterns or ignorePatterns; filename with
    ModelScope. When both are given the hub wins (llmaz's loader checks the hub first).
    """
    spec_source = spec_source or {}
    hub = spec_source.get("modelHub")
    uri = spec_source.get("uri")
    if not hub and not uri:
        raise SourceError("model source can't be all null: set modelHub or uri", path)
    if hub:
        return _from_model_hub(hub, f"{path}.modelHub")
    return _from_openmodel_uri(uri, f"{path}.uri")


def _from_model_hub(hub: Mapping[str, Any], path: str) -> ModelSource:
    name = hub.get("name") or HUGGING_FACE_HUB
    if name not in HUB_NAMES:
        raise SourceError(f"unknown model hub {name!r}; expected one of {', '.join(HUB_NAMES)}", f"{path}.name")
    model_id = hub.get("modelID")
    if not model_id or not isinstance(model_id, str):
        raise SourceError("modelID is required", f"{path}.modelID")
    filename = hub.get("filename") or None
    allow = list(hub.get("allowPatterns") or [])
    ignore = list(hub.get("ignorePatterns") or [])
    if filename is not None:
        if hub.get("allowPatterns") is not None:
            raise SourceError("filename and allowPatterns cannot be set at the same time", f"{path}.allowPatterns")
        if hub.get("ignorePatterns") is not None:
            raise SourceError("filename and ignorePatterns cannot be set at the same time", f"{path}.ignorePatterns")
        if name != HUGGING_FACE_HUB:
            raise SourceError("filename can only be set when the model hub is Huggingface", f"{path}.filename")
    source = ModelSource(
        scheme=HUB_NAMES[name],
        repo=model_id,
        revision=hub.get("revision") or None,
        filename=filename,
        allow_patterns=tuple(allow),
        ignore_patterns=tuple(ignore),
    )
    try:
        validate_source(source)
    except SourceError as exc:
        raise SourceError(exc.reason, _hub_field(exc.reason, path)) from None
    return source


def _hub_field(reason: str, path: str) -> str:
    if reason.startswith("repository id") or "repository id" in reason:
        return f"{path}.modelID"
    if reason.startswith("revision"):
        return f"{path}.revision"
    if reason.startswith("filename"):
        return f"{path}.filename"
    if reason.startswith("pattern"):
        return f"{path}.allowPatterns"
    return path


def _from_openmodel_uri(uri: Any, path: str) -> ModelSource:
    if not isinstance(uri, str) or "://" not in uri:
        raise SourceError(f"URI {uri!r} with wrong address: expected protocol://address", path)
    scheme = uri.split("://", 1)[0].lower()
    if scheme not in OPENMODEL_URI_SCHEMES:
        raise SourceError(
            f"unknown schema {scheme!r} in {uri!r}; expected one of {', '.join(sorted(OPENMODEL_URI_SCHEMES))}", path
        )
    return _parse_with_field(uri, path)


def from_kthena_uri(uri: str, field: str = "modelURI") -> ModelSource:
    """A Kthena URI as a source, with the CRD's pattern for its field.

    ``modelURI`` and ``artifactURL`` accept ``hf://``, ``s3://``, ``pvc://``; ``cacheURI`` accepts
    ``hostpath://`` and ``pvc://`` (an empty cacheURI means an emptyDir and has no source: callers check
    that first). ``field`` is the path used in errors (e.g. ``spec.backends[0].modelURI``).
    """
    leaf = field.rsplit(".", 1)[-1].split("[", 1)[0]
    schemes = KTHENA_CACHE_URI_SCHEMES if leaf == "cacheURI" else KTHENA_MODEL_URI_SCHEMES
    if not isinstance(uri, str) or not uri:
        raise SourceError("must not be empty", field)
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme not in schemes:
        expected = "|".join(f"{s}://" for s in sorted(schemes))
        raise SourceError(f"{uri!r} does not match ^({expected}).+", field)
    return _parse_with_field(uri, field)


def from_lora_url(url: str, field: str = "artifactURL") -> ModelSource:
    """A Kthena ``LoraAdapter.artifactURL`` (``hf://``, ``s3://``, ``pvc://``) as a source."""
    return from_kthena_uri(url, field)


def _parse_with_field(text: str, field: str) -> ModelSource:
    try:
        return parse_source(text)
    except SourceError as exc:
        raise SourceError(exc.reason, field) from None
