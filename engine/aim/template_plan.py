"""The resolution of one AIMServiceTemplate, and its model's readiness, decided without I/O: what
resolve-templates writes.

:func:`plan_template` takes the template (its API model, with the status it had) and
:class:`TemplateWorld`, what the flow read indexed by namespace, and decides its profile
(:func:`engine.aim.templates.resolve_profile`), the caches to request when ``warmCache`` is set (the
namespace's ``default`` AIMNamespaceConfig names their storage class) and its status. A cache the plan
requests is not there yet (state ``None``: ``WarmRequested``), so the status needs no answer from the
write. :func:`plan_model_readiness` then gives each model whose templates discovery created its
``Ready`` from those templates as this run left them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.aim.discovery import MODEL_LABEL, is_auto_template, ready_condition
from engine.aim.gpus import GpuInventory, cluster_gpus
from engine.aim.service_plan import by_namespace, caches_by_namespace
from engine.aim.templates import ModelCatalog, TemplateOutcome, resolve_profile, template_status
from engine.api.aim import AIMClusterModel, AIMNamespaceConfig, AIMServiceTemplate, ModelCache
from engine.api.views import Node
from engine.caches.lookup import CacheRequest, find_model_cache, model_cache_status
from engine.caches.sources import parse_source
from engine.status import ConditionUpdate

DEFAULT_CONFIG = "default"
"""The AIMNamespaceConfig whose ``cacheStorageClassName`` a template's caches use."""


@dataclass(frozen=True)
class TemplateWorld:
    """What one resolve-templates run read, indexed for per-template planning."""

    catalog: ModelCatalog
    inventory: GpuInventory
    caches: Mapping[str, Sequence[ModelCache]]
    storage_classes: Mapping[str, str | None]
    """namespace -> ``cacheStorageClassName`` of its ``default`` AIMNamespaceConfig."""

    @classmethod
    def of(
        cls,
        *,
        models: Sequence[AIMClusterModel],
        configs: Sequence[AIMNamespaceConfig],
        caches: Sequence[ModelCache],
        nodes: Sequence[Node],
    ) -> TemplateWorld:
        """Index what the flow read."""
        return cls(
            catalog=ModelCatalog(models),
            inventory=cluster_gpus(nodes),
            caches=caches_by_namespace(caches),
            storage_classes={
                ns: config.spec.cache_storage_class_name
                for ns, named in by_namespace(configs).items()
                for name, config in named.items()
                if name == DEFAULT_CONFIG
            },
        )


@dataclass(frozen=True)
class ResolvePlan:
    """What resolve-templates writes for one template: caches to request, then its status."""

    namespace: str
    name: str
    outcome: TemplateOutcome
    cache_requests: tuple[CacheRequest, ...] = ()

    @property
    def status_fields(self) -> dict[str, Any]:
        """``status.status`` and ``status.modelSources`` (the conditions are applied separately)."""
        return {"status": self.outcome.status, "modelSources": self.outcome.model_sources}


def _cache_states(
    sources: Sequence[str], caches: Sequence[ModelCache], storage_class: str | None, requested_by: str
) -> tuple[dict[str, str | None], tuple[CacheRequest, ...]]:
    """``source -> status.status`` of its cache (``None`` when one is requested now), and the requests."""
    states: dict[str, str | None] = {}
    requests: list[CacheRequest] = []
    for text in sources:
        try:
            source = parse_source(text)
        except ValueError:
            states[text] = None
            continue
        cache = find_model_cache(caches, source, storage_class)
        if cache is None and source.downloadable:
            requests.append(CacheRequest(text, storage_class, requested_by))
        states[text] = model_cache_status(cache) if cache is not None else None
    return states, tuple(requests)


def plan_template(template: AIMServiceTemplate, world: TemplateWorld) -> ResolvePlan:
    """Decide one template's resolution: profile, GPU, caches to request (``warmCache``), status."""
    namespace, name = template.metadata.namespace or "", str(template.metadata.name)
    profile = resolve_profile(template, world.catalog, world.inventory)
    warm = bool(template.spec.warm_cache)
    states: dict[str, str | None] = {}
    requests: tuple[CacheRequest, ...] = ()
    if profile.discovered and warm:
        states, requests = _cache_states(
            profile.model_sources,
            world.caches.get(namespace, []),
            world.storage_classes.get(namespace),
            f"AIMServiceTemplate/{namespace}/{name}",
        )
    return ResolvePlan(namespace, name, template_status(profile, warm, states), requests)


def plan_model_readiness(
    models: Sequence[AIMClusterModel],
    templates: Sequence[AIMServiceTemplate],
    resolved: Mapping[tuple[str, str], str],
    catalog: ModelCatalog,
) -> list[tuple[AIMClusterModel, ConditionUpdate]]:
    """Each model's ``Ready`` from its auto-created templates (``resolved``: ``(namespace, name) ->
    status`` this run wrote; others as read), so a model turns Ready when its templates do, not on the
    next discovery run. Models without auto-created templates, or whose record is of another image,
    keep what discover-models wrote."""
    states: dict[str, list[str]] = {}
    for template in templates:
        if not is_auto_template(template):
            continue
        meta = template.metadata
        owner = meta.labels.get(MODEL_LABEL, "")
        status = (
            resolved.get((meta.namespace or "", meta.name or ""))
            or (template.status.status if template.status else None)
            or "Pending"
        )
        states.setdefault(owner, []).append(status)
    plans: list[tuple[AIMClusterModel, ConditionUpdate]] = []
    for model in models:
        name = model.metadata.name or ""
        if name not in states:
            continue
        record = catalog.record(model)
        if record is None or record.image != model.spec.image:
            continue
        plans.append((model, ready_condition(record, states[name], True)))
    return plans
