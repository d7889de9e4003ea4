"""Which caches other resources need, pure: the sources of AIM templates that warm their cache, AIM
services that cache their model, Kthena Model backends that download their model, and llmaz OpenModels.

Each need is a :class:`CacheRequest` (namespace, source, who asks, download env); a resource whose
source cannot be parsed becomes a :class:`RequestProblem` naming the field, and the others proceed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.caches.source_fields import from_kthena_uri, from_openmodel_source
from engine.caches.sources import ModelSource, parse_source

CREDENTIAL_ENV_PREFIXES = ("HF_", "HUGGING_FACE_", "AWS_")
"""A Kthena backend's env entries a download needs (its other variables are for the server)."""
KTHENA_S3_ENV = ("ENDPOINT", "ACCESS_KEY", "SECRET_KEY")
"""Kthena's downloader names for an S3 endpoint and key pair (seed 003: ``ENDPOINT`` must be set for s3://)."""


def is_download_env(name: str) -> bool:
    """True for an env name a download reads: the Hugging Face and AWS variables, and Kthena's S3 names."""
    return name.startswith(CREDENTIAL_ENV_PREFIXES) or name in KTHENA_S3_ENV


@dataclass(frozen=True)
class CacheRequest:
    """One cache a resource needs."""

    namespace: str
    source: ModelSource
    requested_by: str  # Kind/namespace/name (Kind/name when cluster-scoped)
    env: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class RequestProblem:
    """A resource whose cache need could not be read."""

    consumer: str
    field: str
    message: str


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _consumer(obj: Mapping[str, Any]) -> str:
    namespace, name = _meta(obj)
    return "/".join(part for part in (obj.get("kind", ""), namespace, name) if part)


def _sources_of_template(
    template: Mapping[str, Any], consumer: str, problems: list[RequestProblem]
) -> list[ModelSource]:
    sources = []
    for index, uri in enumerate((template.get("status") or {}).get("modelSources") or []):
        try:
            sources.append(parse_source(str(uri)))
        except ValueError as exc:
            problems.append(RequestProblem(consumer, f"status.modelSources[{index}]", str(exc)))
    return sources


def _spec(obj: Mapping[str, Any], problems: list[RequestProblem]) -> Mapping[str, Any] | None:
    """The object's ``spec`` when it is an object (absent: empty); otherwise a problem naming ``spec``."""
    spec = obj.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        problems.append(RequestProblem(_consumer(obj), "spec", f"must be an object, not {type(spec).__name__}"))
        return None
    return spec


def _flag(
    obj: Mapping[str, Any], spec: Mapping[str, Any], key: str, default: bool, problems: list[RequestProblem]
) -> bool | None:
    """A boolean field of ``spec`` (absent: ``default``); any other value (``"no"``) is a problem naming
    the field and ``None``: no cache is requested on a guess (the API schema is boolean)."""
    value = spec.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        problems.append(RequestProblem(_consumer(obj), f"spec.{key}", f"must be true or false, not {value!r}"))
        return None
    return value


def template_requests(templates: Iterable[Mapping[str, Any]], problems: list[RequestProblem]) -> list[CacheRequest]:
    """AIMServiceTemplates with ``warmCache: true``: every resolved ``status.modelSources`` entry."""
    requests = []
    for template in templates:
        spec = _spec(template, problems)
        if spec is None or not _flag(template, spec, "warmCache", False, problems):
            continue
        consumer = _consumer(template)
        namespace, _ = _meta(template)
        for source in _sources_of_template(template, consumer, problems):
            if source.downloadable:
                requests.append(CacheRequest(namespace, source, consumer))
    return requests


def service_requests(
    services: Iterable[Mapping[str, Any]], templates: Iterable[Mapping[str, Any]], problems: list[RequestProblem]
) -> list[CacheRequest]:
    """AIMServices with ``cacheModel`` (default true): the model sources of their template, once resolved.

    A service without ``templateRef`` is left to rollout-services, which selects its template and
    requests its caches itself; a ``cacheModel`` that is not a boolean requests nothing (a problem)."""
    by_name = {_meta(t): t for t in templates}
    requests = []
    for service in services:
        spec = _spec(service, problems)
        if spec is None or not _flag(service, spec, "cacheModel", True, problems):
            continue
        namespace, _ = _meta(service)
        template = by_name.get((namespace, spec.get("templateRef") or ""))
        if template is None:
            continue  # the rollout reports a missing template (or selects one); nothing to cache until it exists
        consumer = _consumer(service)
        for source in _sources_of_template(template, consumer, problems):
            if source.downloadable:
                requests.append(CacheRequest(namespace, source, consumer))
    return requests


def kthena_requests(models: Iterable[Mapping[str, Any]], problems: list[RequestProblem]) -> list[CacheRequest]:
    """Kthena Model backends with a downloadable ``modelURI`` and no ``cacheURI`` (an emptyDir otherwise,
    re-downloaded by every pod): one shared cache instead."""
    requests = []
    for model in models:
        namespace, _ = _meta(model)
        consumer = _consumer(model)
        for index, backend in enumerate((model.get("spec") or {}).get("backends") or []):
            uri = backend.get("modelURI")
            if not uri or backend.get("cacheURI"):
                continue
            path = f"spec.backends[{index}].modelURI"
            try:
                source = from_kthena_uri(uri, path)
            except ValueError as exc:
                problems.append(RequestProblem(consumer, path, str(exc)))
                continue
            if source.downloadable:
                env = tuple(item for item in backend.get("env") or [] if is_download_env(str(item.get("name", ""))))
                requests.append(CacheRequest(namespace, source, consumer, env))
    return requests


def openmodel_requests(
    openmodels: Iterable[Mapping[str, Any]], namespace: str | None, problems: list[RequestProblem]
) -> list[CacheRequest]:
    """llmaz OpenModels (cluster-scoped) with a downloadable source, cached in ``namespace`` (none: skipped)."""
    if not namespace:
        return []
    requests = []
    for model in openmodels:
        consumer = _consumer(model)
        try:
            source = from_openmodel_source((model.get("spec") or {}).get("source"))
        except ValueError as exc:
            problems.append(RequestProblem(consumer, getattr(exc, "field", None) or "spec.source", str(exc)))
            continue
        if source.downloadable:
            requests.append(CacheRequest(namespace, source, consumer))
    return requests
