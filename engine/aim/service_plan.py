"""The rollout of one AIMService, decided at once without I/O: what rollout-services writes for it.

:func:`plan_service` takes the service (its API model, with the status it had) and :class:`ServiceWorld`,
what the flow read from the cluster, typed and indexed by namespace, and decides everything: its references
(:func:`engine.aim.references.resolve_references`), the workload and route names (unique per namespace
and service, never taking over an InferenceService another object controls), the caches it mounts and
the ones to request, the rendered InferenceService and HTTPRoute with the merge-patches that bring
existing ones to them, the objects it controls under an older name (to delete), and its status. The
flow writes the :class:`ServicePlan` in order: requested caches, the InferenceService, ``lastUsed`` on
the mounted caches, the HTTPRoute, the retired objects, the status.

A cache the plan requests is not Available by definition (it is created now and filled by
warm-caches), so the status needs no answer from the write.

A child is the service's only when its controller reference names the service (uid, kind, API group, name)
and it is in the service's namespace (owner references are namespace-local): :func:`controlled_by`. A child
whose reference has the service's uid but names another object shows that two objects share the uid (a copied
manifest in a snapshot); the service is then refused like one whose InferenceService another object controls,
so neither deletes the other's workload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from engine.aim.gpus import GpuInventory, cluster_gpus
from engine.aim.references import STATUS_FAILED, Resolution, resolve_references
from engine.aim.services import (
    COND_READY,
    CacheMount,
    ServiceOutcome,
    blocked_status,
    render_http_route,
    render_inference_service,
    routing_of,
    service_status,
    update_patch,
    workload_name,
)
from engine.aim.templates import ModelCatalog
from engine.api.aim import AIMClusterModel, AIMNamespaceConfig, AIMService, AIMServiceTemplate, ModelCache
from engine.api.views import HTTPRoute, InferenceService, Node, Observed, OwnerReference
from engine.caches.lookup import CacheRequest, find_model_cache, model_cache_pvc, model_cache_status
from engine.caches.sources import parse_source

Manifest = dict[str, Any]

MANAGED_PREDICTOR_KEYS = ("imagePullSecrets", "affinity")
"""Predictor keys Modelplane renders and removes again when the rendering no longer has them."""


class _Meta(Protocol):
    @property
    def name(self) -> str | None: ...

    @property
    def namespace(self) -> str | None: ...


class _Named(Protocol):
    @property
    def metadata(self) -> _Meta: ...


N = TypeVar("N", bound=_Named)


def by_namespace(items: Iterable[N]) -> dict[str, dict[str, N]]:
    """``namespace -> name -> object`` of typed objects (our kinds' models, views of the others)."""
    result: dict[str, dict[str, N]] = {}
    for item in items:
        result.setdefault(item.metadata.namespace or "", {})[item.metadata.name or ""] = item
    return result


def caches_by_namespace(caches: Iterable[ModelCache]) -> dict[str, list[ModelCache]]:
    """``namespace -> its ModelCaches``, in the order read."""
    result: dict[str, list[ModelCache]] = {}
    for cache in caches:
        result.setdefault(cache.metadata.namespace or "", []).append(cache)
    return result


@dataclass(frozen=True)
class ServiceWorld:
    """What one rollout-services run read, indexed for per-service planning."""

    catalog: ModelCatalog
    templates: Mapping[str, Mapping[str, AIMServiceTemplate]]
    configs: Mapping[str, Mapping[str, AIMNamespaceConfig]]
    caches: Mapping[str, Sequence[ModelCache]]
    """namespace -> its ModelCaches."""
    isvcs: Mapping[str, Mapping[str, InferenceService]]
    routes: Mapping[str, Mapping[str, HTTPRoute]]
    inventory: GpuInventory
    controlled: Mapping[str, Sequence[InferenceService | HTTPRoute]] = field(default_factory=dict)
    """controller uid -> the InferenceServices and HTTPRoutes whose controller reference has it, in every namespace
    (whether one is a given service's is decided on the whole reference: :func:`controlled_by`)."""

    @classmethod
    def of(
        cls,
        *,
        models: Sequence[AIMClusterModel],
        templates: Sequence[AIMServiceTemplate],
        configs: Sequence[AIMNamespaceConfig],
        caches: Sequence[ModelCache],
        nodes: Sequence[Node],
        isvcs: Sequence[InferenceService],
        routes: Sequence[HTTPRoute],
    ) -> ServiceWorld:
        """Index what the flow read by namespace and name."""
        controlled: dict[str, list[InferenceService | HTTPRoute]] = {}
        children: list[InferenceService | HTTPRoute] = [*isvcs, *routes]
        for obj in children:
            uid = obj.metadata.controller_uid()
            if uid:
                controlled.setdefault(uid, []).append(obj)
        return cls(
            catalog=ModelCatalog(models),
            templates=by_namespace(templates),
            configs=by_namespace(configs),
            caches=caches_by_namespace(caches),
            isvcs=by_namespace(isvcs),
            routes=by_namespace(routes),
            inventory=cluster_gpus(nodes),
            controlled=controlled,
        )


@dataclass(frozen=True)
class ObjectWrite:
    """One rendered object: created when ``existing`` is None, merge-patched with ``patch`` when given
    (``existing`` keeps the object as read, which the write goes through)."""

    desired: Manifest
    existing: Observed | None
    patch: Mapping[str, Any] | None

    @property
    def action(self) -> str:
        """``created``, ``updated`` or ``unchanged``."""
        if self.existing is None:
            return "created"
        return "unchanged" if self.patch is None else "updated"


@dataclass(frozen=True)
class ServicePlan:
    """Everything rollout-services writes for one AIMService, and the line it reports."""

    namespace: str
    name: str
    outcome: ServiceOutcome
    workload: str
    """The InferenceService name reported (the existing one of a blocked service, else the desired one)."""
    reason: str
    blocked: bool = False
    """Whether a reference (or a name) stops the rollout: only the status is written."""
    cache_requests: tuple[CacheRequest, ...] = ()
    isvc: ObjectWrite | None = None
    route: ObjectWrite | None = None
    mounted: tuple[ModelCache, ...] = ()
    """The Available caches the InferenceService mounts (their ``lastUsed`` is set when it is written)."""
    retire: tuple[InferenceService | HTTPRoute, ...] = ()
    """InferenceServices and HTTPRoutes the service controls under another name."""

    @property
    def action(self) -> str:
        """What happened to the workload: ``none`` when blocked, else the InferenceService's action, or the
        HTTPRoute's when the InferenceService is unchanged."""
        if self.blocked:
            return "none"
        action = self.isvc.action if self.isvc else "unchanged"
        return self.route.action if action == "unchanged" and self.route is not None else action


@dataclass(frozen=True)
class _Caches:
    """The caches of a resolved service: their readiness condition, mounts, and what to request."""

    ready: bool
    reason: str
    message: str
    mounts: tuple[CacheMount, ...]
    mounted: tuple[ModelCache, ...]
    requests: tuple[CacheRequest, ...]


def _plan_caches(
    sources: Sequence[str], caches: Sequence[ModelCache], storage_class: str | None, request: bool, requested_by: str
) -> _Caches:
    """Each source's cache from the namespace's LIST; with ``request`` a missing downloadable one is
    requested (and not Available yet). Existing Available caches are mounted even when not requested."""
    found: list[tuple[str, ModelCache | None]] = []
    requests: list[CacheRequest] = []
    for text in sources:
        try:
            source = parse_source(text)
        except ValueError:
            found.append((text, None))
            continue
        cache = find_model_cache(caches, source, storage_class)
        if cache is None and request and source.downloadable:
            requests.append(CacheRequest(text, storage_class, requested_by))
        found.append((text, cache))
    available = [(text, cache) for text, cache in found if cache is not None and model_cache_pvc(cache)]
    failed = [text for text, cache in found if cache is not None and model_cache_status(cache) == "Failed"]
    if failed:
        ready, reason, message = False, "CacheFailed", f"cache of {', '.join(failed)} failed"
    elif request and len(available) < len(found):
        ready, reason, message = False, "WaitingForCache", f"{len(available)} of {len(found)} model caches available"
    else:
        ready, reason = True, "CacheWarm"
        message = (
            f"{len(available)} model caches mounted"
            if available
            else "caching not requested; the runtime downloads the model"
        )
    mounts = tuple(
        CacheMount(text, cache.metadata.name or "", model_cache_pvc(cache) or "") for text, cache in available
    )
    return _Caches(ready, reason, message, mounts, tuple(cache for _, cache in available), tuple(requests))


def _controller_ref(obj: Observed) -> OwnerReference | None:
    """The object's controller reference (its ``ownerReferences`` entry with ``controller: true``)."""
    return next((ref for ref in obj.metadata.owner_references if ref.controller), None)


def _api_group(api_version: str | None) -> str:
    """The group of an ``apiVersion`` (``aim.silogen.ai/v1alpha1`` -> ``aim.silogen.ai``): a reference written
    under another version of the kind still names the same object."""
    return (api_version or "").rpartition("/")[0]


def controlled_by(service: AIMService, obj: Observed) -> bool:
    """Whether ``obj`` is this service's: its controller reference names the service by uid, kind, API group and
    name, and it is in the service's namespace (an owner reference names an owner in the object's own namespace,
    so a child elsewhere with the same reference belongs to another object)."""
    ref = _controller_ref(obj)
    return (
        ref is not None
        and bool(ref.uid)
        and ref.uid == service.metadata.uid
        and ref.kind == service.kind
        and ref.name == service.metadata.name
        and _api_group(ref.api_version) == _api_group(service.api_version)
        and obj.metadata.namespace == service.metadata.namespace
    )


def _uid_shared(service: AIMService, world: ServiceWorld) -> Resolution | None:
    """The refusal of a service whose uid another object's children name as their controller (two objects share
    the uid: a copied manifest), naming a few of them; None when the uid is the service's alone. Retiring by
    that uid would delete the other's workload, and the other's would delete this one's."""
    uid = service.metadata.uid
    others = [o for o in world.controlled.get(uid, ()) if not controlled_by(service, o)] if uid else []
    if not others:
        return None
    named: list[str] = []
    for obj in others[:3]:
        ref = _controller_ref(obj)  # never None: the index holds objects by their controller's uid
        owner = f"{ref.kind} {obj.metadata.namespace}/{ref.name}" if ref else "?"
        named.append(f"{type(obj).__name__} {obj.metadata.namespace}/{obj.metadata.name} (controller {owner})")
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    return Resolution(
        STATUS_FAILED,
        "ValidationFailed",
        f"uid {uid} is also the controller uid of {', '.join(named)}{more}: another object has this uid (a copied "
        "manifest keeps the original's); nothing is written or deleted for this service until each has its own uid",
    )


def _blocking(
    service: AIMService,
    resolution: Resolution,
    isvc_name: str | None,
    existing: InferenceService | None,
    world: ServiceWorld,
) -> tuple[Resolution, InferenceService | None]:
    """The resolution and the service's existing InferenceService, or what else stops the rollout: a uid
    another object's children name too (:func:`_uid_shared`, reported before the references: nothing may be
    retired by it), a namespace too long for KServe's host label, or an InferenceService of the wanted name that
    another object controls (it is then not this service's workload)."""
    shared = _uid_shared(service, world)
    if shared is not None:
        return shared, existing if existing is not None and controlled_by(service, existing) else None
    if resolution.blocked:
        return resolution, existing
    namespace = service.metadata.namespace
    if isvc_name is None:
        return Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"namespace {namespace!r} is too long for KServe's 63-character host label {{isvc}}-predictor-{{namespace}}",
        ), existing
    other = existing.metadata.controller_uid() if existing is not None else None
    if existing is not None and other not in (None, service.metadata.uid):
        return Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"InferenceService {isvc_name!r} exists and is controlled by another object (uid {other}); it is left alone",
        ), None
    return resolution, existing


def _after_write(isvc: ObjectWrite) -> InferenceService:
    """The InferenceService's status once written: a new one has none yet; an existing one keeps its
    status (the rendered spec changes it only when the controller reports again)."""
    return isvc.existing if isinstance(isvc.existing, InferenceService) else InferenceService()


def _route_after_write(route: ObjectWrite) -> HTTPRoute:
    """The HTTPRoute's status once written: a new or changed route has no Gateway's report on it yet."""
    return route.existing if route.action == "unchanged" and isinstance(route.existing, HTTPRoute) else HTTPRoute()


def _workload_name(service: AIMService) -> str | None:
    """The service's InferenceService name, or None when its namespace is too long for one."""
    try:
        return workload_name(str(service.metadata.name), str(service.metadata.namespace))
    except ValueError:
        return None


def _retired(
    service: AIMService, world: ServiceWorld, isvc_name: str, route_name: str | None
) -> tuple[InferenceService | HTTPRoute, ...]:
    """The InferenceServices and HTTPRoutes this service controls (:func:`controlled_by`) under another name (a
    name an earlier version gave it, e.g. before names hashed the service too); routes only once the current one
    exists."""
    uid = service.metadata.uid
    if not uid:
        return ()
    owned = [o for o in world.controlled.get(uid, []) if controlled_by(service, o)]
    stale: list[InferenceService | HTTPRoute] = [
        o for o in owned if isinstance(o, InferenceService) and o.metadata.name != isvc_name
    ]
    if route_name is not None:
        stale += [o for o in owned if isinstance(o, HTTPRoute) and o.metadata.name != route_name]
    return tuple(stale)


def plan_service(service: AIMService, world: ServiceWorld) -> ServicePlan:
    """Decide one service's rollout: references, names, caches, rendered children, retired objects, status."""
    namespace, name = service.metadata.namespace or "", str(service.metadata.name)
    resolution = resolve_references(
        service,
        world.catalog,
        world.templates.get(namespace, {}),
        world.configs.get(namespace, {}),
        world.inventory,
    )
    isvc_name = _workload_name(service)
    existing = world.isvcs.get(namespace, {}).get(isvc_name) if isvc_name else None
    resolution, existing = _blocking(service, resolution, isvc_name, existing, world)
    if resolution.blocked or isvc_name is None:
        outcome = blocked_status(resolution, existing is not None)
        workload = (existing.metadata.name or "") if existing else ""
        return ServicePlan(namespace, name, outcome, workload, resolution.reason, blocked=True)

    config = resolution.config
    storage_class = config.spec.cache_storage_class_name if config else None
    caches = _plan_caches(
        resolution.sources,
        world.caches.get(namespace, []),
        storage_class,
        service.spec.cache_model is not False,
        f"AIMService/{namespace}/{name}",
    )
    enabled, gateway = routing_of(config)
    routing_problem = (
        None
        if gateway or not enabled
        else "routing.autoCreateRoute is true but the AIMNamespaceConfig names no routing.gateway"
    )
    isvc = route = None
    routing_reason = "GatewayNotConfigured"
    retire: tuple[InferenceService | HTTPRoute, ...] = ()
    if caches.ready:
        desired = render_inference_service(service, resolution, world.inventory, caches.mounts, config)
        isvc = ObjectWrite(
            desired, existing, update_patch(existing.object, desired, MANAGED_PREDICTOR_KEYS) if existing else None
        )
        if enabled and gateway:
            desired_route = render_http_route(service, gateway, desired["metadata"]["name"])
            old_route = world.routes.get(namespace, {}).get(desired_route["metadata"]["name"])
            other = old_route.metadata.controller_uid() if old_route is not None else None
            if other not in (None, service.metadata.uid):  # not this service's route: never patched
                routing_reason = "RouteFailed"
                routing_problem = (
                    f"HTTPRoute {desired_route['metadata']['name']!r} exists and is controlled by another object "
                    f"(uid {other}); it is left alone"
                )
            else:
                route = ObjectWrite(
                    desired_route, old_route, update_patch(old_route.object, desired_route) if old_route else None
                )
        retire = _retired(service, world, isvc_name, route.desired["metadata"]["name"] if route else None)
    outcome = service_status(
        caches.ready,
        caches.reason,
        caches.message,
        _after_write(isvc) if isvc else existing,
        _route_after_write(route) if route else None,
        enabled,
        routing_problem,
        resolution.selected,
        routing_reason,
    )
    ready = next((c for c in outcome.conditions if c.type == COND_READY), None)
    return ServicePlan(
        namespace,
        name,
        outcome,
        isvc_name,
        ready.reason if ready else "",
        cache_requests=caches.requests,
        isvc=isvc,
        route=route,
        mounted=caches.mounted if isvc and isvc.action != "unchanged" else (),
        retire=retire,
    )
