"""Prefect tasks of the three AIM lifecycles: read the cluster into typed objects (one LIST per kind, the
custom resources through the boundary reader into their API models, with their status; Nodes,
InferenceServices and HTTPRoutes into the views of ``engine.api.views``), read images from registries, and
write the plans the engine decided through the objects as read (:func:`write_model_plan`,
:func:`write_template_plan`, :func:`write_service_plan`: annotations, templates, caches, workloads, status).

Writes happen only for changes: a status is patched when its merge-patch is not empty, a template or
workload only when it is missing or differs from what is rendered. Status patches carry the read
``resourceVersion`` and are recomputed on a conflict.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from engine.aim.discovery import (
    API_VERSION,
    METADATA_ANNOTATION,
    REASON_AUTH_FAILED,
    REASON_EXTRACTION_FAILED,
    REASON_IMAGE_NOT_FOUND,
    REASON_INVALID_IMAGE,
    REASON_REGISTRY_UNAVAILABLE,
    REASON_SECRET_NOT_FOUND,
    DiscoveryRecord,
    LabelError,
    parse_image_labels,
)
from engine.aim.discovery_plan import ModelPlan
from engine.aim.service_plan import ServicePlan
from engine.aim.template_plan import ResolvePlan
from engine.api.aim import AIMClusterModel, AIMNamespaceConfig, AIMService, AIMServiceTemplate, ModelCache
from engine.api.meta import KubeModel
from engine.api.registry import AIM_CLUSTER_MODEL, AIM_NAMESPACE_CONFIG, AIM_SERVICE, AIM_SERVICE_TEMPLATE, MODEL_CACHE
from engine.api.views import HTTPRoute, InferenceService, Node, Observed
from engine.caches.lookup import CacheRequest, find_model_cache
from engine.caches.sources import parse_source
from engine.status import ConditionUpdate, changed_fields, set_conditions
from tasks.boundary import Accepted, accept, accept_as
from tasks.caches import ensure_cache, mark_used
from tasks.cluster import Cluster, Manifest, ObjectRef
from tasks.cluster.errors import ClusterError, Conflict, NotFound
from tasks.cluster.recorder import record_event
from tasks.oci import Credential, RegistryClient, RegistryError, credential_for, parse_dockerconfigjson, parse_reference
from tasks.tracking import task

log = logging.getLogger("modelplane.aim")

NODE_API = "v1"
KSERVE_API = "serving.kserve.io/v1beta1"
GATEWAY_API = "gateway.networking.k8s.io/v1"
DOCKERCONFIG_TYPE = "kubernetes.io/dockerconfigjson"
WORKERS = 8


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


def list_kind(
    cluster: Cluster, api_version: str, kind: str, *, optional: bool = False, label_selector: str | None = None
) -> list[Manifest]:
    """One LIST of a kind across all namespaces through the boundary reader (invalid custom resources
    are marked and left out); a kind the cluster does not serve is empty when ``optional``."""
    try:
        return accept(cluster, cluster.list(api_version, kind, label_selector=label_selector))
    except NotFound:
        if not optional:
            raise
        log.info("%s/%s is not served by this cluster", api_version, kind)
        return []


M = TypeVar("M", bound=KubeModel)


@dataclass
class AimState:
    """Everything one AIM flow run reads, one LIST per kind, typed: our custom resources as
    :class:`tasks.boundary.Accepted` (the API model with its status, which the engine decides from, and
    the object as read, which writes go through); Nodes, InferenceServices and HTTPRoutes as views."""

    models: list[Accepted[AIMClusterModel]] = field(default_factory=list)
    configs: list[Accepted[AIMNamespaceConfig]] = field(default_factory=list)
    templates: list[Accepted[AIMServiceTemplate]] = field(default_factory=list)
    services: list[Accepted[AIMService]] = field(default_factory=list)
    caches: list[Accepted[ModelCache]] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    isvcs: list[InferenceService] = field(default_factory=list)
    routes: list[HTTPRoute] = field(default_factory=list)


def typed(items: Iterable[Accepted[M]]) -> list[M]:
    """The API models of accepted objects, in order."""
    return [item.model for item in items]


def _accepted(cluster: Cluster, kind: str, model: type[M], label_selector: str | None = None) -> list[Accepted[M]]:
    """One LIST of an AIM kind through the boundary reader, each object with its API model."""
    return accept_as(cluster, cluster.list(API_VERSION, kind, label_selector=label_selector), model)


@task(name="read-aim-state", retries=2, retry_delay_seconds=2)
def read_aim_state(cluster: Cluster, kinds: Sequence[str], model_selector: str | None = None) -> AimState:
    """LIST the kinds a flow needs (``models``, ``configs``, ``templates``, ``services``, ``caches``,
    ``nodes``, ``isvcs``, ``routes``), each once across all namespaces; ``model_selector`` is a label
    selector on the AIMClusterModels. Custom resources that do not parse are marked invalid by the
    boundary reader and left out."""
    sources: dict[str, Callable[[], list[Any]]] = {
        "models": lambda: _accepted(cluster, AIM_CLUSTER_MODEL, AIMClusterModel, model_selector),
        "configs": lambda: _accepted(cluster, AIM_NAMESPACE_CONFIG, AIMNamespaceConfig),
        "templates": lambda: _accepted(cluster, AIM_SERVICE_TEMPLATE, AIMServiceTemplate),
        "services": lambda: _accepted(cluster, AIM_SERVICE, AIMService),
        "caches": lambda: _accepted(cluster, MODEL_CACHE, ModelCache),
        "nodes": lambda: [Node.model_validate(n) for n in list_kind(cluster, NODE_API, "Node", optional=True)],
        "isvcs": lambda: [
            InferenceService.read(o) for o in list_kind(cluster, KSERVE_API, "InferenceService", optional=True)
        ],
        "routes": lambda: [HTTPRoute.read(o) for o in list_kind(cluster, GATEWAY_API, "HTTPRoute", optional=True)],
    }
    state = AimState()
    for kind in kinds:
        setattr(state, kind, sources[kind]())
    return state


# --------------------------------------------------------------------------------------------------
# Registry credentials and image reads
# --------------------------------------------------------------------------------------------------


@dataclass
class Keychain:
    """Registry credentials from the pull secrets AIMNamespaceConfigs name, and the secrets that are
    missing or unusable (``namespace/name: why``)."""

    credentials: dict[str, Credential] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@task(name="read-pull-secrets", retries=2, retry_delay_seconds=2)
def read_keychain(cluster: Cluster, configs: Sequence[AIMNamespaceConfig]) -> Keychain:
    """Credentials from every ``images.imagePullSecrets`` Secret (``kubernetes.io/dockerconfigjson``)
    named by an AIMNamespaceConfig, read from the config's namespace; the first one for a registry
    (by namespace and name order) wins."""
    keychain = Keychain()
    wanted: list[tuple[str, str]] = []
    for config in sorted(configs, key=lambda c: (c.metadata.namespace or "", c.metadata.name or "")):
        namespace = config.metadata.namespace or "default"
        for name in pull_secrets(config):
            if (namespace, name) not in wanted:
                wanted.append((namespace, name))
    for namespace, name in wanted:
        try:
            secret = cluster.get("v1", "Secret", name, namespace)
        except NotFound:
            keychain.problems.append(f"{namespace}/{name}: Secret not found")
            continue
        if secret.get("type") != DOCKERCONFIG_TYPE:
            keychain.problems.append(f"{namespace}/{name}: type is {secret.get('type')!r}, not {DOCKERCONFIG_TYPE}")
            continue
        raw = (secret.get("data") or {}).get(".dockerconfigjson")
        try:
            found = parse_dockerconfigjson(base64.b64decode(raw or ""))
        except ValueError as exc:
            keychain.problems.append(f"{namespace}/{name}: {exc}")
            continue
        for host, credential in found.items():
            keychain.credentials.setdefault(host, credential)
    return keychain


def pull_secrets(config: AIMNamespaceConfig) -> list[str]:
    """The ``images.imagePullSecrets`` an AIMNamespaceConfig names."""
    return list(config.spec.images.image_pull_secrets or []) if config.spec.images else []


def failure_record(
    image: str, now: datetime, error: Exception, previous: DiscoveryRecord | None, keychain: Keychain
) -> DiscoveryRecord:
    """The record of a failed read: the reason from the error class (401/403 auth, 404 not found,
    5xx/network unavailable, unparsable label), attempts counted up while the image stays the same."""
    if isinstance(error, LabelError):
        reason, message = REASON_EXTRACTION_FAILED, str(error)
    elif isinstance(error, RegistryError) and error.kind == "not-found":
        reason, message = REASON_IMAGE_NOT_FOUND, error.message
    elif isinstance(error, RegistryError) and error.kind == "auth":
        if keychain.problems:
            reason, message = REASON_SECRET_NOT_FOUND, f"{error.message}; pull secrets: {'; '.join(keychain.problems)}"
        else:
            reason, message = REASON_AUTH_FAILED, error.message
    elif (
        isinstance(error, RegistryError) and error.kind == "invalid" and "not a valid image reference" in error.message
    ):
        reason, message = REASON_INVALID_IMAGE, f"spec.image: {error.message}"
    elif isinstance(error, RegistryError) and error.kind == "invalid":
        reason, message = REASON_EXTRACTION_FAILED, error.message
    else:
        reason, message = REASON_REGISTRY_UNAVAILABLE, getattr(error, "message", None) or type(error).__name__
    attempts = previous.attempts + 1 if previous is not None and previous.image == image and previous.reason else 1
    return DiscoveryRecord(image=image, read_at=now, reason=reason, message=message, attempts=attempts)


def inspect_image(
    client: RegistryClient, image: str, keychain: Keychain, previous: DiscoveryRecord | None, now: datetime
) -> DiscoveryRecord:
    """Read one image's labels (or confirm its digest is unchanged) into a :class:`DiscoveryRecord`."""
    try:
        credential = credential_for(parse_reference(image), keychain.credentials)
        known = previous.digest if previous is not None and previous.ok and previous.image == image else None
        config = client.read_config(image, credential, known_digest=known)
        if config.unchanged and previous is not None:
            return DiscoveryRecord(image=image, read_at=now, digest=previous.digest, metadata=previous.metadata)
        return DiscoveryRecord(
            image=image, read_at=now, digest=config.digest, metadata=parse_image_labels(config.labels)
        )
    except (RegistryError, LabelError) as exc:
        return failure_record(image, now, exc, previous, keychain)


@task(name="inspect-images")
def inspect_images(
    client: RegistryClient,
    wanted: Mapping[str, DiscoveryRecord | None],
    keychain: Keychain,
    now: datetime,
) -> dict[str, DiscoveryRecord]:
    """Read every image in ``wanted`` (image -> previous record) once, in parallel."""
    images = sorted(wanted)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        records = list(pool.map(lambda image: inspect_image(client, image, keychain, wanted[image], now), images))
    return dict(zip(images, records))


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def _conditions_hold(
    conditions: Sequence[Mapping[str, Any]], updates: Sequence[ConditionUpdate], generation: int | None
) -> bool:
    """Whether every update is already recorded as it is (the common case of an unchanged run)."""
    by_type = {c.get("type"): c for c in conditions}
    for update in updates:
        held = by_type.get(update.type)
        if held is None or (held.get("status"), held.get("reason"), held.get("message") or "") != (
            update.status,
            update.reason,
            update.message,
        ):
            return False
        if generation is not None and held.get("observedGeneration") != generation:
            return False
    return True


def new_status(
    obj: Manifest, updates: Sequence[ConditionUpdate], now: datetime, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The object's status with ``updates`` applied and ``observedGeneration`` set."""
    old = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    status: dict[str, Any] = dict(old)
    status.update(extra or {})
    held = old.get("conditions") or []
    status["conditions"] = (
        held if _conditions_hold(held, updates, generation) else set_conditions(held, updates, now, generation)
    )
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def write_status(cluster: Cluster, obj: Manifest, status: Mapping[str, Any]) -> bool:
    """Patch the status fields that differ (with the read resourceVersion); ``False`` when none do.
    On a conflict the object is re-read and the same fields are written over the fresh copy."""
    patch = changed_fields(obj.get("status") or {}, dict(status))
    if patch is None:
        return False
    ref = ObjectRef.of(obj)
    try:
        cluster.patch_status(ref, patch, resource_version=obj["metadata"].get("resourceVersion"))
    except Conflict:
        fresh = cluster.get(ref.api_version, ref.kind, ref.name, ref.namespace)
        again = changed_fields(fresh.get("status") or {}, dict(status))
        if again is not None:
            cluster.patch_status(ref, again, resource_version=fresh["metadata"].get("resourceVersion"))
    return True


def write_record(cluster: Cluster, model: Manifest, record: DiscoveryRecord) -> Manifest:
    """Persist the discovery record in the model's annotation (only when it changed)."""
    text = record.to_json()
    if (model["metadata"].get("annotations") or {}).get(METADATA_ANNOTATION) == text:
        return model
    return cluster.patch_spec(
        ObjectRef.of(model),
        {"metadata": {"annotations": {METADATA_ANNOTATION: text}}},
        resource_version=model["metadata"].get("resourceVersion"),
    )


@dataclass
class WriteCounts:
    """What a run wrote, for the summary."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    statuses: int = 0
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def merge(self, other: WriteCounts) -> None:
        """Add another worker's counts to these."""
        self.created += other.created
        self.updated += other.updated
        self.deleted += other.deleted
        self.statuses += other.statuses
        self.skipped += other.skipped
        self.errors += other.errors


T = TypeVar("T")
R = TypeVar("R")


def for_each(
    items: Sequence[T], work: Callable[[T, WriteCounts], R], writes: WriteCounts, workers: int = WORKERS
) -> list[R]:
    """Run ``work(item, counts)`` for every item on a small thread pool (the per-object reads and
    writes are independent API calls), in order; each call counts into its own :class:`WriteCounts`,
    merged into ``writes`` afterwards."""

    def one(item: T) -> tuple[R, WriteCounts]:
        counts = WriteCounts()
        return work(item, counts), counts

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, items))
    for _, counts in results:
        writes.merge(counts)
    return [result for result, _ in results]


def create_objects(cluster: Cluster, objects: Sequence[Manifest], counts: WriteCounts) -> None:
    """Create each object (the engine decided they are missing); one created concurrently by someone
    else is reported as skipped, another failure as an error of the run."""
    for obj in objects:
        meta = obj["metadata"]
        try:
            cluster.create(obj)
            counts.created += 1
        except Conflict:
            counts.skipped.append(f"{meta['namespace']}/{meta['name']}: created concurrently")
        except ClusterError as exc:
            counts.errors.append(f"{obj['kind']} {meta['namespace']}/{meta['name']}: {exc.message}")


def ref_of(obj: AIMServiceTemplate) -> ObjectRef:
    """The reference of a typed custom resource."""
    return ObjectRef(obj.api_version, obj.kind, str(obj.metadata.name), obj.metadata.namespace)


def delete_stale(cluster: Cluster, stale: Sequence[ObjectRef], counts: WriteCounts) -> None:
    """Delete objects this flow created that are no longer wanted (auto-created templates of an image
    the model no longer names, workloads under a retired name); one that is already gone is fine."""
    for ref in stale:
        try:
            cluster.delete(ref)
            counts.deleted += 1
        except NotFound:
            pass
        except ClusterError as exc:
            counts.errors.append(f"{ref.kind} {ref.namespace}/{ref.name}: cannot delete: {exc.message}")


def apply_object(
    cluster: Cluster, desired: Manifest, existing: Manifest | None, patch: Mapping[str, Any] | None
) -> str:
    """Create ``desired`` when absent, merge-patch ``existing`` with ``patch`` when given; returns
    ``created``, ``updated`` or ``unchanged``."""
    if existing is None:
        cluster.create(desired)
        return "created"
    if patch is None:
        return "unchanged"
    cluster.patch_spec(
        ObjectRef.of(existing), dict(patch), resource_version=existing["metadata"].get("resourceVersion")
    )
    return "updated"


# --------------------------------------------------------------------------------------------------
# Caches
# --------------------------------------------------------------------------------------------------


class SharedCaches:
    """The ModelCaches of each namespace as this run knows them (the LIST plus the ones requested
    since), shared by the run's workers: objects of one namespace request each cache once."""

    def __init__(self, caches: Iterable[Accepted[ModelCache]]) -> None:
        self._by_namespace: dict[str, list[Accepted[ModelCache]]] = {}
        for cache in caches:
            self._by_namespace.setdefault(cache.model.metadata.namespace or "", []).append(cache)
        self._lock = threading.Lock()

    def as_read(self, cache: ModelCache) -> Accepted[ModelCache] | None:
        """The object as read (or as requested) behind a ModelCache the engine decided on."""
        namespace, name = cache.metadata.namespace or "", cache.metadata.name
        with self._lock:
            return next((c for c in self._by_namespace.get(namespace, []) if c.model.metadata.name == name), None)

    def request(self, cluster: Cluster, namespace: str, requests: Sequence[CacheRequest]) -> int:
        """Create (or adopt, :func:`tasks.caches.ensure_cache`) the cache of each request that no cache
        of the namespace holds yet; returns how many were requested from the cluster."""
        requested = 0
        with self._lock:
            known = self._by_namespace.setdefault(namespace, [])
            for request in requests:
                source = parse_source(request.source)
                if find_model_cache([c.model for c in known], source, request.storage_class) is not None:
                    continue
                known.append(
                    ensure_cache(
                        cluster,
                        namespace,
                        source,
                        storage_class=request.storage_class,
                        requested_by=request.requested_by,
                    )
                )
                requested += 1
        return requested


def mark_caches_used(cluster: Cluster, caches: Iterable[Accepted[ModelCache]], now: datetime) -> None:
    """``status.lastUsed = now`` on every cache a rolled-out workload mounts."""
    for cache in caches:
        try:
            mark_used(cluster, cache, now)
        except ClusterError as exc:
            log.warning("ModelCache %s/%s: cannot write lastUsed: %s", cache.namespace, cache.name, exc.message)


def write_service_plan(
    cluster: Cluster, service: Manifest, plan: ServicePlan, caches: SharedCaches, now: datetime, counts: WriteCounts
) -> None:
    """Write what :func:`engine.aim.service_plan.plan_service` decided, in order: the requested caches,
    the InferenceService (and ``lastUsed`` on the caches it mounts), the HTTPRoute, the objects the
    service controls under an older name, then the status (not written when a write before it fails)."""
    if plan.cache_requests:
        caches.request(cluster, plan.namespace, plan.cache_requests)
    rendered: list[str] = []
    if plan.isvc is not None:
        action = apply_object(cluster, plan.isvc.desired, _as_read(plan.isvc.existing), plan.isvc.patch)
        _count(counts, action)
        rendered += (
            [f"InferenceService {describe_rendered(plan.isvc.desired)} {action}"] if action != "unchanged" else []
        )
        if plan.mounted:
            mark_caches_used(cluster, [c for c in map(caches.as_read, plan.mounted) if c is not None], now)
    if plan.route is not None:
        action = apply_object(cluster, plan.route.desired, _as_read(plan.route.existing), plan.route.patch)
        _count(counts, action)
        rendered += [f"HTTPRoute {plan.route.desired['metadata']['name']} {action}"] if action != "unchanged" else []
    if rendered:
        record_event(cluster, service, ROLLED_OUT_REASON, "; ".join(rendered))
    if plan.retire:
        delete_stale(cluster, [ObjectRef.of(obj.object) for obj in plan.retire], counts)
    status = new_status(service, plan.outcome.conditions, now, {"status": plan.outcome.status})
    if write_status(cluster, service, status):
        counts.statuses += 1
        post_status_event(cluster, service, plan.outcome.status, plan.outcome.conditions)


def write_model_plan(cluster: Cluster, model: Manifest, plan: ModelPlan, now: datetime, counts: WriteCounts) -> None:
    """Write what :func:`engine.aim.discovery_plan.plan_model` decided, in order: the record read now
    (the model's annotation), the missing templates, the deletion of stale ones, the model's conditions."""
    if plan.persist is not None:
        model = write_record(cluster, model, plan.persist)
    create_objects(cluster, plan.create, counts)
    counts.skipped += plan.skipped
    delete_stale(cluster, [ref_of(t) for t in plan.stale], counts)
    if write_status(cluster, model, new_status(model, plan.conditions, now)):
        counts.statuses += 1
        if plan.result == "ok":
            created = ", ".join(str(t["metadata"]["name"]) for t in plan.create)
            message = f"image {plan.image}: {plan.deployments} recommended deployments, {plan.templates} templates"
            record_event(cluster, model, DISCOVERED_REASON, message + (f"; created {created}" if created else ""))
        else:
            post_status_event(cluster, model, "Failed", plan.conditions)


def write_template_plan(
    cluster: Cluster, template: Manifest, plan: ResolvePlan, caches: SharedCaches, now: datetime, counts: WriteCounts
) -> None:
    """Write what :func:`engine.aim.template_plan.plan_template` decided: the requested caches (each
    one requested from the cluster counts as created), then the status where it changed."""
    if plan.cache_requests:
        counts.created += caches.request(cluster, plan.namespace, plan.cache_requests)
    if write_status(cluster, template, new_status(template, plan.outcome.conditions, now, plan.status_fields)):
        counts.statuses += 1
        requested = ", ".join(r.source for r in plan.cache_requests)
        sources = ", ".join(plan.outcome.model_sources)
        post_status_event(
            cluster,
            template,
            plan.outcome.status,
            plan.outcome.conditions,
            f"model sources {sources}" if sources else "",
            f"caches requested for {requested}" if requested else "",
        )


ROLLED_OUT_REASON = "RolledOut"
"""Event reason: the objects a service or model renders were created or updated."""
DISCOVERED_REASON = "ModelDiscovered"
"""Event reason: a model's image was read and its templates follow from it."""
WARNING_STATUSES = frozenset({"Failed", "Degraded"})


def post_status_event(
    cluster: Cluster, obj: Manifest, status: str, conditions: Sequence[ConditionUpdate], *details: str
) -> None:
    """An Event on ``obj`` saying what its status, just written, decided and why: the reason and message of its
    ``Ready`` condition (else of its first condition that is not True), a Warning when the status is Failed or
    Degraded."""
    cause = next((c for c in conditions if c.type == "Ready"), None) or next(
        (c for c in conditions if c.status != "True"), None
    )
    reason = cause.reason if cause is not None and cause.reason else status
    message = "; ".join(p for p in (status, cause.message if cause is not None else "", *details) if p)
    record_event(cluster, obj, reason, message, "Warning" if status in WARNING_STATUSES else "Normal")


def describe_rendered(obj: Manifest) -> str:
    """``name`` of a rendered InferenceService, with the image of its first predictor container when it has one."""
    containers = (obj["spec"].get("predictor") or {}).get("containers") or [{}]  # rendered by engine.aim: has a spec
    image = containers[0].get("image") if isinstance(containers[0], dict) else None
    return f"{obj['metadata']['name']}" + (f" (image {image})" if image else "")


def _as_read(view: Observed | None) -> Manifest | None:
    """The object as read behind a view (what a write goes through), or None."""
    return view.object if view is not None else None


def _count(counts: WriteCounts, action: str) -> None:
    if action == "created":
        counts.created += 1
    elif action == "updated":
        counts.updated += 1
