"""The warm-caches flow's I/O: read what caches exist and who needs them, create PVCs and fill Jobs,
run the downloader in-process for the local backend, read fill results, write status, collect garbage.

Decisions come from the engine: names, next steps, status and retries from :mod:`engine.caches.plan`, the PVC
and fill Job manifests and fill reports from :mod:`engine.caches.fill`, GC verdicts from :mod:`engine.caches.gc`; the
downloader is :mod:`tasks.downloader` (one implementation for the Job and the local fill).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from engine.api.aim import (
    AIMNamespaceConfig,
    AIMService,
    AIMServiceTemplate,
    AIMServiceTemplateStatus,
    ModelCache,
)
from engine.api.kthena import Model
from engine.api.llmaz import OpenModel
from engine.api.registry import (
    AIM_API,
    AIM_NAMESPACE_CONFIG,
    AIM_SERVICE,
    AIM_SERVICE_TEMPLATE,
    KTHENA_API,
    LLMAZ_API,
    MODEL,
    MODEL_CACHE,
    OPEN_MODEL,
)
from engine.api.views import Job, PersistentVolumeClaim, Pod
from engine.caches.fill import (
    JobSettings,
    quantity_bytes,
    render_job,
    render_pvc,
)
from engine.caches.gc import claims_mounted_by
from engine.caches.plan import (
    ATTEMPTS_ANNOTATION,
    CACHE_LABEL,
    MODELCACHE_API_VERSION,
    VERIFICATION_FAILED,
    Failure,
    attempts_annotation,
    fill_attempts,
    job_name,
    pvc_name,
    source_of,
)
from engine.caches.reconcile import CacheFacts
from engine.caches.sources import ModelSource
from tasks.boundary import Accepted, accept, accept_as, not_being_deleted
from tasks.clients.cluster import Cluster, Conflict, LocalCluster, Manifest, NotFound, ObjectRef
from tasks.clients.cluster.recorder import record_event
from tasks.progress import step
from tasks.tracking import tracked

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

AIM = AIM_API
VOLUMES_DIR = ".modelplane-volumes"
"""With the local backend, PVC ``<claim>`` of ``<namespace>`` is ``<state dir>/.modelplane-volumes/<namespace>/<claim>``."""


# ------------------------------------------------------------------------------------------ read


@dataclass
class CacheWorld:
    """Everything one warm-caches pass reads: one LIST per kind (per namespace when limited)."""

    caches: list[Accepted[ModelCache]]
    configs: dict[str, AIMNamespaceConfig]  # namespace -> its AIMNamespaceConfig "default"
    templates: list[AIMServiceTemplate]  # status.modelSources as written (see _with_written_sources)
    services: list[AIMService]
    models: list[Model]  # Kthena's
    openmodels: list[OpenModel]
    pvcs: dict[tuple[str, str], Manifest]
    jobs: dict[tuple[str, str], Manifest]
    pods: list[Pod]  # the fill Jobs' pods, as views (what their fills reported)


def _key(obj: Manifest) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _list(
    cluster: Cluster, api_version: str, kind: str, namespaces: list[str] | None, selector: str | None = None
) -> list[Manifest]:
    """Every object of a kind (all namespaces, or each of ``namespaces``); a kind the cluster does not
    serve (e.g. a CRD that is not installed) is empty. Other failures propagate: never act on half a view."""
    items: list[Manifest] = []
    for namespace in namespaces or [None]:  # type: ignore[list-item]
        try:
            items.extend(accept(cluster, cluster.list(api_version, kind, namespace, label_selector=selector)))
        except NotFound:
            return []
    return items


def _list_typed(
    cluster: Cluster, api_version: str, kind: str, namespaces: list[str] | None, model: type[M]
) -> list[Accepted[M]]:
    """:func:`_list` of a Modelplane kind, each object with its parsed API ``model``."""
    items: list[Accepted[M]] = []
    for namespace in namespaces or [None]:  # type: ignore[list-item]
        try:
            items.extend(accept_as(cluster, cluster.list(api_version, kind, namespace), model))
        except NotFound:
            return []
    return items


def read_world(cluster: Cluster, namespaces: Iterable[str] | None = None) -> CacheWorld:
    """Caches, their consumers, namespace configs, and the PVCs, Jobs and Pods the flow made.

    Args:
        cluster: The cluster to read.
        namespaces: The namespaces to read (OpenModels are cluster-scoped and always read); None or empty for all.

    Returns:
        Everything one warm-caches pass decides from, each kind listed once.
    """
    wanted = sorted(set(namespaces)) if namespaces else None
    return CacheWorld(
        caches=_list_typed(cluster, MODELCACHE_API_VERSION, MODEL_CACHE, wanted, ModelCache),  # status included
        configs={
            cfg.namespace: cfg.model
            for cfg in _list_typed(cluster, AIM, AIM_NAMESPACE_CONFIG, wanted, AIMNamespaceConfig)
            if cfg.name == "default"
        },
        templates=[
            _with_written_sources(t)
            for t in _list_typed(cluster, AIM, AIM_SERVICE_TEMPLATE, wanted, AIMServiceTemplate)
        ],
        # consumers being deleted request nothing (tasks.boundary.not_being_deleted)
        services=[s.model for s in not_being_deleted(_list_typed(cluster, AIM, AIM_SERVICE, wanted, AIMService))],
        models=[m.model for m in not_being_deleted(_list_typed(cluster, KTHENA_API, MODEL, wanted, Model))],
        openmodels=[m.model for m in not_being_deleted(_list_typed(cluster, LLMAZ_API, OPEN_MODEL, None, OpenModel))],
        pvcs={_key(p): p for p in _list(cluster, "v1", "PersistentVolumeClaim", wanted, CACHE_LABEL)},
        jobs={_key(j): j for j in _list(cluster, "batch/v1", "Job", wanted, CACHE_LABEL)},
        pods=[Pod.model_validate(p) for p in _list(cluster, "v1", "Pod", wanted, CACHE_LABEL)],
    )


def _with_written_sources(template: Accepted[AIMServiceTemplate]) -> AIMServiceTemplate:
    """The template's API model, its ``status.modelSources`` read entry by entry as text when the list as a
    whole did not parse (the boundary reads such a status field as absent): an entry that is not a source
    is then reported naming ``status.modelSources[i]`` and the other entries are still cached, as this flow
    has always read them. The status is rewritten by resolve-templates; the spec decided acceptance."""
    status = template.model.status
    if status is not None and status.model_sources is not None:
        return template.model
    written = template.obj.get("status")
    entries = written.get("modelSources") if isinstance(written, dict) else None
    if not isinstance(entries, list):
        return template.model
    sources = [str(entry) for entry in entries]
    repaired = (status or AIMServiceTemplateStatus()).model_copy(update={"model_sources": sources})
    return template.model.model_copy(update={"status": repaired})


def read_cache_facts(cluster: Cluster, cache: ModelCache, world: CacheWorld) -> CacheFacts:
    """What the engine's plan of one cache (:func:`engine.caches.reconcile.plan_cache`) needs, read: its PVC and
    namespace config from ``world``, the verdict of its current fill Job (cluster backend, once a fill was
    started), and with the local backend whether an Available cache's completion marker is still in place.

    Args:
        cluster: The cluster the cache lives in (a local cluster fills in this process).
        cache: The ModelCache's API model.
        world: What the pass read.

    Returns:
        The facts the engine plans the cache from.
    """
    namespace, name = cache.metadata.namespace or "", cache.metadata.name or ""
    raw = world.pvcs.get((namespace, pvc_name(name)))
    pvc = PersistentVolumeClaim.model_validate(raw) if raw is not None else None
    config = world.configs.get(namespace)
    if not isinstance(cluster, LocalCluster):
        attempts = fill_attempts(cache)
        job = world.jobs.get((namespace, job_name(name, attempts))) if attempts else None
        return CacheFacts(pvc, config, Job.model_validate(job) if job is not None else None, tuple(world.pods))
    source, invalid = source_of(cache.spec)
    available = cache.status is not None and cache.status.status == "Available"
    if invalid is None and available and pvc is not None:  # is the verified marker still in place?
        marker_ok = local_marker_ok(local_volume(cluster, namespace, pvc_name(name)), source.uri)
        return CacheFacts(pvc, config, fills_in_cluster=False, marker_ok=marker_ok)
    return CacheFacts(pvc, config, fills_in_cluster=False)


# ---------------------------------------------------------------------------------------- volumes


def local_volume(cluster: LocalCluster, namespace: str, claim: str) -> Path:
    """The directory backing a PVC with the local backend.

    Args:
        cluster: The local cluster (a folder or file of manifests).
        namespace: The PVC's namespace.
        claim: The PVC's name.

    Returns:
        The directory, under the cluster's state directory (it may not exist yet).

    Raises:
        ValueError: ``namespace`` or ``claim`` is not one path segment, or the directory would resolve outside
            the cluster's folder (a symbolic link on the way): fills write here and garbage collection deletes
            here, so a name taken from a status must never reach another directory.
    """
    for what, part in (("namespace", namespace), ("claim", claim)):
        if not part or part in (".", "..") or "/" in part or "\\" in part or "\0" in part:
            raise ValueError(f"{what} {part!r} cannot name a volume directory")
    root = cluster.path if not cluster.single_file else cluster.path.parent
    volume = root / VOLUMES_DIR / namespace / claim
    if root.resolve() not in volume.resolve().parents:
        raise ValueError(f"the volume of {namespace}/{claim} resolves to {volume.resolve()}, outside {root.resolve()}")
    return volume


def create_pvc(cluster: Cluster, cache: ModelCache, size: str, storage_class: str | None) -> Manifest:
    """Create the cache's PVC once (never patched: no resize, no class change). The local backend acts
    as its own provisioner: the claim is bound at once to a directory under the state directory.

    Args:
        cluster: The cluster to create in.
        cache: The ModelCache the claim belongs to.
        size: The claim's size, a Kubernetes quantity.
        storage_class: The claim's storage class, or None for the cluster's default.

    Returns:
        The PVC as created (or as it already existed), bound at once with the local backend.
    """
    pvc = render_pvc(cache, size, storage_class)
    meta = pvc["metadata"]
    try:
        created = cluster.create(pvc)
    except Conflict:
        created = cluster.get("v1", "PersistentVolumeClaim", meta["name"], meta["namespace"])
    if isinstance(cluster, LocalCluster) and PersistentVolumeClaim.model_validate(created).status.phase != "Bound":
        local_volume(cluster, meta["namespace"], meta["name"]).mkdir(parents=True, exist_ok=True)
        created = cluster.patch_status(
            ObjectRef.of(created),
            {
                "phase": "Bound",
                "accessModes": pvc["spec"]["accessModes"],
                "capacity": {"storage": size},
            },
        )
    return created


def pvc_capacity(pvc: Manifest | None) -> str | None:
    """What the PVC holds: its bound capacity, else its request.

    Args:
        pvc: The PVC as read, or None.

    Returns:
        Its capacity (or request) as a Kubernetes quantity, or None when there is no PVC or no size.
    """
    if not pvc:
        return None
    return PersistentVolumeClaim.model_validate(pvc).capacity()


# ------------------------------------------------------------------------------------------- jobs


def start_job(
    cluster: Cluster,
    cache: ModelCache,
    source_uri: str,
    attempt: int,
    env: list[dict[str, Any]],
    settings: JobSettings,
    previous: Manifest | None,
    capacity: str | None = None,
) -> Manifest:
    """Delete the previous attempt's Job (if any) and create this attempt's.

    Args:
        cluster: The cluster to create in.
        cache: The ModelCache the Job fills.
        source_uri: The model source the Job downloads.
        attempt: The fill attempt's number (part of the Job's name).
        env: The Job's environment entries (credentials as Secret references, never values).
        settings: The Job's image, retries and pod settings.
        previous: The previous attempt's Job, deleted first, or None.
        capacity: The PVC's capacity, which sets how long the Job may run (:func:`engine.caches.fill.fill_deadline_s`).

    Returns:
        The Job as created (or as it already existed).
    """
    if previous is not None:
        try:
            cluster.delete(ObjectRef.of(previous))
        except NotFound:
            pass
    job = render_job(cache, source_uri, attempt, env, settings, capacity)
    try:
        return cluster.create(job)
    except Conflict:
        return cluster.get("batch/v1", "Job", job["metadata"]["name"], job["metadata"]["namespace"])


# ------------------------------------------------------------------------------------------ status


def write_status(cluster: Cluster, cache: Manifest, status: Mapping[str, Any]) -> Manifest:
    """Merge-patch the changed top-level status fields (nothing when unchanged).

    Args:
        cluster: The cluster the cache lives in.
        cache: The ModelCache as last read or written.
        status: The whole status wanted.

    Returns:
        The cache as patched, or ``cache`` itself when no field changed.
    """
    from engine.status import changed_fields

    change = changed_fields(cache.get("status") or {}, status)
    if not change:
        return cache
    return cluster.patch_status(ObjectRef.of(cache), change)


def record_attempt(cluster: Cluster, cache: Manifest, generation: int | None, attempts: int) -> Manifest:
    """Persist the fill count of this generation on the cache (state survives between runs).

    Args:
        cluster: The cluster the cache lives in.
        cache: The ModelCache as read.
        generation: The spec generation the attempts count for (a new spec starts again), or None.
        attempts: The number of fill attempts so far, this one included.

    Returns:
        The cache as patched, or ``cache`` itself when the annotation already says so.
    """
    annotation = attempts_annotation(generation, attempts)
    if (cache["metadata"].get("annotations") or {}).get(ATTEMPTS_ANNOTATION) == annotation[ATTEMPTS_ANNOTATION]:
        return cache
    return cluster.patch_spec(ObjectRef.of(cache), {"metadata": {"annotations": annotation}})


def post_event(cluster: Cluster, cache: Manifest, reason: str, message: str, warning: bool = False) -> None:
    """An Event on the cache; a failure to record it is logged, never fatal.

    Args:
        cluster: The cluster the Event is recorded in.
        cache: The ModelCache as read.
        reason: The Event's reason, e.g. ``FillStarted``.
        message: The Event's message.
        warning: Whether it is a Warning Event (else Normal).
    """
    record_event(cluster, cache, reason, message, "Warning" if warning else "Normal")


def emit_cache_event(cache: Manifest, status: str, reason: str, source_uri: str, pvc: str) -> None:
    """A Prefect event for a stored status change: ``modelplane.aim.cache.<status>`` (e.g.
    ``tasks.clients.events.CACHE_AVAILABLE``) about the ModelCache, so rollouts waiting for it can be triggered.

    Args:
        cache: The ModelCache as written.
        status: Its new status (``Available``, ``Failed``, ...); lowercased into the event's name.
        reason: The reason of the change.
        source_uri: The model source the cache holds.
        pvc: The name of the cache's PVC.
    """
    from tasks.clients.events import emit_change

    emit_change(
        ObjectRef.of(cache), status.lower(), {"status": status, "reason": reason, "source": source_uri, "pvc": pvc}
    )


# ----------------------------------------------------------------------------------------- GC


def mounted_claims(cluster: Cluster, namespace: str) -> set[str]:
    """PVCs that Pods, Deployments, StatefulSets or InferenceServices in ``namespace`` mount now.
    A kind the cluster does not serve mounts nothing; any other failure propagates (never delete blind).

    Args:
        cluster: The cluster to list.
        namespace: The namespace to list.

    Returns:
        The names of the PVCs the workloads mount (the caches' own fill pods left out).
    """
    claims: set[str] = set()
    for api_version, kind in (
        ("v1", "Pod"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("serving.kserve.io/v1beta1", "InferenceService"),
    ):
        try:
            objects = cluster.list(api_version, kind, namespace)
        except NotFound:
            continue
        for obj in objects:
            if obj.get("metadata", {}).get("labels", {}).get(CACHE_LABEL):
                continue  # the cache's own fill pods
            claims |= claims_mounted_by(obj)
    return claims


def delete_cache(cluster: Cluster, cache: Accepted[ModelCache], world: CacheWorld) -> Manifest | None:
    """Delete a cache with its fill Jobs and PVC (and, locally, the volume directory). Only a PVC labelled as this
    cache's is deleted, whatever its status names.

    Args:
        cluster: The cluster the cache lives in.
        cache: The ModelCache to delete, with its API model.
        world: What the pass read (the Jobs and PVCs to find the cache's own).

    Returns:
        The PVC deleted with it, or None when it had none of its own.
    """
    namespace, name = cache.model.metadata.namespace or "", cache.name
    for (ns, _), job in world.jobs.items():
        if ns == namespace and job["metadata"].get("labels", {}).get(CACHE_LABEL) == name:
            _delete(cluster, job)
    claim = cache.model.status.persistent_volume_claim if cache.model.status is not None else None
    pvc = world.pvcs.get((namespace, claim or ""))
    own = pvc is not None and (pvc["metadata"].get("labels") or {}).get(CACHE_LABEL) == name
    if pvc is not None and own:
        _delete(cluster, pvc)
    elif claim:  # a status is anyone's to write: it never chooses what else is deleted
        log.warning(
            "ModelCache %s/%s: its status names PVC %r, which is not its own; left alone", namespace, name, claim
        )
    _delete(cluster, cache.obj)
    if isinstance(cluster, LocalCluster) and claim and own:
        shutil.rmtree(local_volume(cluster, namespace, claim), ignore_errors=True)
    return pvc if own else None


def _delete(cluster: Cluster, obj: Manifest) -> None:
    try:
        cluster.delete(ObjectRef.of(obj))
    except NotFound:
        pass


# ---------------------------------------------------------------------------------- local fills


def measure_source(source: ModelSource, env: Mapping[str, str]) -> int:
    """Bytes the source holds (Hugging Face file sizes of the revision; the S3 prefix listing).

    Args:
        source: The downloadable model source.
        env: The source's credentials and settings as environment values (e.g. ``HF_TOKEN``, AWS keys).

    Returns:
        The source's size, in bytes.
    """
    from tasks.downloader import Credentials, source_size

    return sum(source_size(source, Credentials.from_env(env)))


def fill_local(source: ModelSource, volume: Path, env: Mapping[str, str], capacity: str | None) -> Failure | None:
    """Run the downloader in this process into the local volume (bounded by the PVC's capacity, since a
    directory has no size of its own); ``None`` when the completion marker is written and the files are in
    place, else the typed failure (its message already free of secrets). Progress is a step (tasks/progress.py:
    a bar or lines in a command, log lines in a run) and, inside a tracked run, a Prefect progress artifact.

    Args:
        source: The downloadable model source.
        volume: The local directory backing the cache's PVC.
        env: The source's credentials and settings as environment values.
        capacity: The PVC's capacity (a Kubernetes quantity) the download may not exceed, or None for no bound.

    Returns:
        None when the cache is complete, else the failure with its reason.
    """
    from tasks.downloader import Credentials, DownloadError, ProgressSnapshot, fill_cache, is_complete, prefect_progress

    artifact = prefect_progress(f"Filling {volume.name} from {source.uri}") if tracked() else None
    with step(f"fill {volume.name}", total=100, unit="%") as shown:

        def progress(snapshot: ProgressSnapshot) -> None:
            shown.update(round(100 * snapshot.fraction, 1), note=snapshot.describe())
            if artifact is not None:
                artifact(snapshot)

        try:
            fill_cache(
                source,
                volume,
                Credentials.from_env(env),
                progress,
                capacity_bytes=quantity_bytes(capacity) if capacity else None,
            )
        except DownloadError as exc:
            return Failure(exc.reason, exc.message)
    if not is_complete(volume, source.uri):
        return Failure(
            VERIFICATION_FAILED, f"no complete cache of {source.uri} after the fill (marker missing or files changed)"
        )
    return None


def local_marker_ok(volume: Path, source_uri: str) -> bool:
    """Whether the local volume holds a complete cache of this source (marker and every file in place).

    Args:
        volume: The local directory backing the cache's PVC.
        source_uri: The model source the cache should hold.

    Returns:
        True when the completion marker names this source and every file it lists is unchanged.
    """
    from tasks.downloader import is_complete

    return is_complete(volume, source_uri)
