"""Which caches other resources need, pure: the sources of AIM templates that warm their cache, AIM
services that cache their model, Kthena Model backends that download their model, and llmaz OpenModels.

Each resource arrives as its API model, parsed once at the boundary (``tasks.boundary``): a spec that does
not parse (``cacheModel: "no"``, a string spec, a ``backends`` that is not a list) never reaches these
rules, its own reader reports it naming the field. Each need is a :class:`CacheRequest` (namespace,
source, who asks, download env); a resource whose source cannot be parsed as a model source becomes a
:class:`RequestProblem` naming the field, and the others proceed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.api.aim import AIMService, AIMServiceTemplate
from engine.api.kthena import Model, ModelBackend
from engine.api.llmaz import OpenModel
from engine.api.meta import ObjectMeta
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


Consumer = AIMServiceTemplate | AIMService | Model | OpenModel
"""The kinds whose cache needs are decided here."""


def _namespace(meta: ObjectMeta) -> str:
    return meta.namespace or ""


def _consumer(obj: Consumer) -> str:
    """``Kind/namespace/name`` (``Kind/name`` when cluster-scoped): who asks, as recorded on the cache."""
    meta = obj.metadata
    return "/".join(part for part in (obj.kind, meta.namespace or "", meta.name or "") if part)


def _sources_of_template(
    template: AIMServiceTemplate, consumer: str, problems: list[RequestProblem]
) -> list[ModelSource]:
    """The template's resolved ``status.modelSources`` as sources; an entry that does not parse is a problem."""
    sources = []
    written = (template.status.model_sources if template.status is not None else None) or []
    for index, uri in enumerate(written):
        try:
            sources.append(parse_source(uri))
        except ValueError as exc:
            problems.append(RequestProblem(consumer, f"status.modelSources[{index}]", str(exc)))
    return sources


def template_requests(templates: Iterable[AIMServiceTemplate], problems: list[RequestProblem]) -> list[CacheRequest]:
    """AIMServiceTemplates with ``warmCache: true``: every resolved ``status.modelSources`` entry."""
    requests = []
    for template in templates:
        if not template.spec.warm_cache:
            continue
        consumer = _consumer(template)
        for source in _sources_of_template(template, consumer, problems):
            if source.downloadable:
                requests.append(CacheRequest(_namespace(template.metadata), source, consumer))
    return requests


def service_requests(
    services: Iterable[AIMService], templates: Iterable[AIMServiceTemplate], problems: list[RequestProblem]
) -> list[CacheRequest]:
    """AIMServices with ``cacheModel`` (default true): the model sources of their template, once resolved.

    A service without ``templateRef`` is left to rollout-services, which selects its template and
    requests its caches itself."""
    by_name = {(_namespace(t.metadata), t.metadata.name or ""): t for t in templates}
    requests = []
    for service in services:
        if service.spec.cache_model is False:  # absent (None) is the default, true
            continue
        namespace = _namespace(service.metadata)
        template = by_name.get((namespace, service.spec.template_ref or ""))
        if template is None:
            continue  # the rollout reports a missing template (or selects one); nothing to cache until it exists
        consumer = _consumer(service)
        for source in _sources_of_template(template, consumer, problems):
            if source.downloadable:
                requests.append(CacheRequest(namespace, source, consumer))
    return requests


def _download_env(backend: ModelBackend) -> tuple[Mapping[str, Any], ...]:
    """The backend's env entries a download needs, as written (secrets stay references, never values)."""
    return tuple(
        item.model_dump(by_alias=True, exclude_none=True, mode="json")
        for item in backend.env or []
        if is_download_env(item.name)
    )


def kthena_requests(models: Iterable[Model], problems: list[RequestProblem]) -> list[CacheRequest]:
    """Kthena Model backends with a downloadable ``modelURI`` and no ``cacheURI`` (an emptyDir otherwise,
    re-downloaded by every pod): one shared cache instead."""
    requests = []
    for model in models:
        namespace = _namespace(model.metadata)
        consumer = _consumer(model)
        for index, backend in enumerate(model.spec.backends):
            if not backend.model_uri or backend.cache_uri:
                continue
            path = f"spec.backends[{index}].modelURI"
            try:
                source = from_kthena_uri(backend.model_uri, path)
            except ValueError as exc:
                problems.append(RequestProblem(consumer, path, str(exc)))
                continue
            if source.downloadable:
                requests.append(CacheRequest(namespace, source, consumer, _download_env(backend)))
    return requests


def openmodel_requests(
    openmodels: Iterable[OpenModel], namespace: str | None, problems: list[RequestProblem]
) -> list[CacheRequest]:
    """llmaz OpenModels (cluster-scoped) with a downloadable source, cached in ``namespace`` (none: skipped)."""
    if not namespace:
        return []
    requests = []
    for model in openmodels:
        consumer = _consumer(model)
        try:
            source = from_openmodel_source(model.spec.source.model_dump(by_alias=True, exclude_none=True))
        except ValueError as exc:
            problems.append(RequestProblem(consumer, getattr(exc, "field", None) or "spec.source", str(exc)))
            continue
        if source.downloadable:
            requests.append(CacheRequest(namespace, source, consumer))
    return requests
