"""I/O of the ``rollout-models`` flow: read Models and their children, resolve caches, write workloads and
autoscaling objects, update LoRA adapters on running vLLM pods, write the Model's status.

The decisions are in :mod:`engine.rollout.kthena` and its ``kthena_*`` siblings (validation, weights, and per
backend and Model the children and states of :mod:`engine.rollout.kthena_plan`); this module only gathers what
they need and carries out what they decide. Children are found by the label ``registry.volcano.sh/model-uid``
(one LIST per kind and Model), so a backend removed from the spec is seen and deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import requests

from engine.api.aim import ModelCache
from engine.api.kthena import API_VERSION, Model, ModelBackend
from engine.api.registry import AUTOSCALING_POLICY, AUTOSCALING_POLICY_BINDING, MODEL
from engine.caches.lookup import model_cache_pvc, model_cache_status
from engine.caches.source_fields import from_lora_url
from engine.caches.sources import ModelSource
from engine.rollout.kthena import LABEL_MODEL_UID, ModelRef
from engine.rollout.kthena_native import (
    NETWORKING_API,
    RUNTIME_IMAGE,
    WORKLOAD_API,
    NativeMode,
    route_errors,
)
from engine.rollout.kthena_plan import backend_states, model_children, owned_children, render_backend, runtime_lora_plan
from engine.rollout.kthena_status import (
    REASON_ABNORMAL,
    REASON_CACHE_FAILED,
    REASON_INVALID,
    REASON_NOT_SUPPORTED,
    BackendState,
    Failure,
    failure_of,
    model_status,
)
from engine.rollout.kthena_validation import (
    PLAIN_CREDENTIAL_REASON,
    plain_credentials,
    unsupported_backends,
    validate_model,
)
from engine.rollout.kthena_weights import (
    Mount,
    direct_weights,
    downloader_env,
    lora_mount,
    managed_weights,
    needs_managed_cache,
)
from engine.rollout.kthena_workloads import LoraChange, hub_offline
from engine.rollout.workloads import identity_problems
from engine.status import changed_fields, condition_is_true, generation_of, mapping_at
from tasks.boundary import Accepted, accept_identity
from tasks.caches import ensure_cache, mark_used
from tasks.clients.cluster import Cluster, ObjectRef
from tasks.clients.cluster.errors import ClusterError, NotFound
from tasks.clients.cluster.recorder import record_event
from tasks.clients.cluster.retry import write_status
from tasks.tracking import task
from tasks.workloads import WriteLog, write_object

log = logging.getLogger(__name__)

CHILD_KINDS: tuple[tuple[str, str], ...] = (
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    (API_VERSION, AUTOSCALING_POLICY),
    (API_VERSION, AUTOSCALING_POLICY_BINDING),
    (NETWORKING_API, "ModelServer"),
    (NETWORKING_API, "ModelRoute"),
    (WORKLOAD_API, "ModelServing"),
)
LORA_HTTP_TIMEOUT_S = 300.0  # a load may download the adapter first (Kthena allows 5 minutes)


@dataclass
class ModelOutcome(WriteLog):
    """What one Model's reconcile did, for the flow's report."""

    namespace: str = ""
    name: str = ""
    lora: list[str] = field(default_factory=list)
    status_written: bool = False
    result: str = ""

    @property
    def writes(self) -> int:
        return len(self.created) + len(self.updated) + len(self.deleted) + int(self.status_written)


# ---------------------------------------------------------------------------------------------- reads


def list_models(cluster: Cluster, namespaces: list[str] | None) -> list[dict[str, Any]]:
    """Every Model in the namespaces (all when empty), one LIST per namespace (a namespace named twice is listed
    once); a Model whose name, namespace, labels or annotations the API server would refuse is reported and left out
    (:func:`accept_identity`).

    Args:
        cluster: The cluster to list.
        namespaces: The namespaces to list Models in; None or empty for all namespaces.

    Returns:
        The Models whose identity is sound, as manifests.
    """
    if not namespaces:
        return accept_identity(cluster, cluster.list(API_VERSION, MODEL))
    listed = [m for ns in dict.fromkeys(namespaces) for m in cluster.list(API_VERSION, MODEL, namespace=ns)]
    return accept_identity(cluster, listed)


def list_children(
    cluster: Cluster, namespace: str, uid: str, served: set[str] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """The objects this Model owns, keyed by (kind, name); ``served`` collects the kinds the cluster serves.

    Args:
        cluster: The cluster to list.
        namespace: The Model's namespace.
        uid: The Model's UID, which its children's owner label carries.
        served: A set the kinds the cluster serves are added to, or None.

    Returns:
        The Model's children by (kind, name); a child kind the cluster does not serve has none.
    """
    children: dict[tuple[str, str], dict[str, Any]] = {}
    for api_version, kind in CHILD_KINDS:
        try:
            items = cluster.list(api_version, kind, namespace=namespace, label_selector=f"{LABEL_MODEL_UID}={uid}")
            if served is not None:
                served.add(kind)
        except NotFound:  # the kind is not served (e.g. Kthena CRDs missing): nothing of it is ours
            items = []
        for item in items:
            children[(kind, item["metadata"]["name"])] = item
    return children


# ------------------------------------------------------------------------------------------- caches


@dataclass
class CacheResolution:
    """A cache-backed mount, or why it is not usable yet (``failed``: it will not become usable)."""

    pvc: str | None = None
    cache: Accepted[ModelCache] | None = None
    waiting: str | None = None
    failed: bool = False


def resolve_cache(
    cluster: Cluster, namespace: str, source: ModelSource, requested_by: str, env: list[dict[str, Any]]
) -> CacheResolution:
    """Create or adopt the shared ModelCache of ``source`` and tell whether its PVC can be mounted.

    Args:
        cluster: The cluster the cache lives in.
        namespace: The Model's namespace.
        source: The backend's downloadable model source.
        requested_by: The Model, as ``Kind/namespace/name``.
        env: Environment entries (credentials) the fill needs; empty for none.

    Returns:
        The cache and its PVC when it can be mounted; else what the backend waits for, and whether the cache failed.
    """
    cache = ensure_cache(cluster, namespace, source, env=env or None, requested_by=requested_by)
    state = model_cache_status(cache.model) or "Pending"
    if state == "Failed":
        return CacheResolution(cache=cache, waiting=f"ModelCache {cache.name} for {source.uri} failed", failed=True)
    pvc = model_cache_pvc(cache.model)
    if pvc is None:
        return CacheResolution(
            cache=cache, waiting=f"waiting for ModelCache {cache.name} ({state}) to hold {source.uri}"
        )
    return CacheResolution(pvc=pvc, cache=cache)


# ------------------------------------------------------------------------------------- runtime LoRA


def ready_pods(cluster: Cluster, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
    """The ready pods (with an IP) of a workload.

    Args:
        cluster: The cluster to list.
        namespace: The workload's namespace.
        selector: The workload's pod labels.

    Returns:
        The pods that are Ready and have a pod IP, as manifests.
    """
    text = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    pods = cluster.list("v1", "Pod", namespace=namespace, label_selector=text)
    return [p for p in pods if mapping_at(p, "status").get("podIP") and condition_is_true(p, "Ready")]


def apply_lora_change(
    pods: list[dict[str, Any]], port: int, change: LoraChange, session: requests.Session | None = None
) -> list[str]:
    """Unload and load adapters on each pod through vLLM's runtime API; returns what was done.

    Each pod's ``/v1/models`` says which adapters it holds, so a pod that restarted (and lost its
    runtime adapters) gets them again and nothing is loaded twice. Failures raise ``RuntimeError``
    naming the pod; the next run retries.

    Args:
        pods: The ready pods of a backend (each with a pod IP).
        port: The port vLLM's API listens on in each pod.
        change: The adapters to unload and to load (name and path).
        session: The HTTP session to use, or None for a new one.

    Returns:
        What was done, one line per adapter and pod (``POD: loaded NAME``); empty when every pod already matched.

    Raises:
        RuntimeError: A pod's runtime API failed; the message names the pod.
    """
    http = session or requests.Session()
    done: list[str] = []
    for pod in pods:
        base = f"http://{pod['status']['podIP']}:{port}"
        name = pod["metadata"]["name"]
        try:
            listing = http.get(f"{base}/v1/models", timeout=30)
            listing.raise_for_status()
            loaded = {m.get("id") for m in listing.json().get("data", []) if m.get("parent")}
            for lora in change.unload:
                if lora in loaded:
                    _post(http, f"{base}/v1/unload_lora_adapter", {"lora_name": lora})
                    loaded.discard(lora)
                    done.append(f"{name}: unloaded {lora}")
            for lora, path in change.load:
                if lora not in loaded:
                    _post(http, f"{base}/v1/load_lora_adapter", {"lora_name": lora, "lora_path": path})
                    done.append(f"{name}: loaded {lora}")
        except requests.RequestException as exc:
            raise RuntimeError(
                f"runtime LoRA update on pod {name} failed: {type(exc).__name__}: {_short(exc)}"
            ) from None
    return done


def _post(http: requests.Session, url: str, body: dict[str, Any]) -> None:
    response = http.post(url, json=body, timeout=LORA_HTTP_TIMEOUT_S)
    if response.status_code >= 400:
        raise requests.HTTPError(f"{response.status_code} from {url.rsplit('/', 1)[-1]}: {response.text[:200]}")


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else ""


# ------------------------------------------------------------------------------------------- writes


# ---------------------------------------------------------------------------------------- reconcile


@dataclass(frozen=True)
class RolloutOptions:
    """How Models are rendered: Kthena's networking objects when the cluster serves them (``auto``) or
    never (``off``); backends as ``Deployment``s or, where the CRD is served, ``ModelServing``s."""

    kthena_networking: str = "auto"
    workload: str = "Deployment"
    runtime_image: str = RUNTIME_IMAGE


def native_mode(options: RolloutOptions, served: set[str]) -> NativeMode:
    """What to render for a Model, from the options and the kinds the cluster serves.

    Args:
        options: The rollout's options (workload kind, Kthena networking, runtime image).
        served: The kinds the cluster serves.

    Returns:
        Whether to render ModelServer/ModelRoute networking and ModelServing workloads (each only when the cluster
        serves its kinds), and the runtime image.
    """
    networking = options.kthena_networking != "off" and {"ModelServer", "ModelRoute"} <= served
    model_serving = options.workload == "ModelServing" and "ModelServing" in served
    if options.workload == "ModelServing" and not model_serving:
        log.warning(
            "workload=ModelServing, but the cluster does not serve %s ModelServing: rendering Deployments", WORKLOAD_API
        )
    return NativeMode(networking=networking, model_serving=model_serving, runtime_image=options.runtime_image)


@dataclass
class _BackendResult:
    objects: list[dict[str, Any]] = field(default_factory=list)
    keep: set[tuple[str, str]] = field(default_factory=set)  # live objects left as they are
    caches: list[Accepted[ModelCache]] = field(default_factory=list)  # mounted by this backend's workloads
    deployments: list[str] = field(default_factory=list)
    waiting: str | None = None
    failure: Failure | None = None


@task(name="reconcile-model")
def reconcile_model(
    cluster: Cluster,
    manifest: dict[str, Any],
    now: datetime,
    downloader_image: str,
    lora_session: Callable[[], requests.Session] | None = None,
    options: RolloutOptions | None = None,
) -> ModelOutcome:
    """One reconcile pass for one Model: validate, render, write what changed, delete what was removed,
    update runtime LoRA adapters, write status. A failure is reported on the Model (``Failed``), never
    raised past it, so the other Models of the run proceed.

    Args:
        cluster: The cluster the Model and its workloads live in.
        manifest: The Model as read.
        now: The time the status's conditions use.
        downloader_image: The image of the init container that downloads a backend's model (Modelplane's image).
        lora_session: Makes the HTTP session runtime LoRA updates use, or None for a plain one.
        options: The rollout's options, or None for the defaults.

    Returns:
        The Model's outcome: objects created, updated and deleted, whether its status was written, and its result.
    """
    meta = manifest["metadata"]
    namespace, name = meta.get("namespace") or "default", meta["name"]
    outcome = ModelOutcome(namespace=namespace, name=name)
    model, errors = validate_model(manifest)
    backends: list[BackendState] = []
    failure: Failure | None = None
    try:
        if model is None or errors:
            failure = failure_of(errors, REASON_INVALID)
            if model is not None:  # report what runs now; change nothing until the spec is fixed
                backends = backend_states(model, list_children(cluster, namespace, meta.get("uid") or ""), {})
        else:
            failure, backends = _roll_out(
                cluster, model, now, downloader_image, outcome, lora_session, options or RolloutOptions()
            )
            if outcome.created or outcome.updated:
                warn_plain_credentials(cluster, manifest, model)
    except ClusterError as exc:
        failure = Failure(REASON_ABNORMAL, exc.message)
    except RuntimeError as exc:
        failure = Failure(REASON_ABNORMAL, str(exc))
    generation = generation_of(manifest)

    def build(current: dict[str, Any]) -> dict[str, Any] | None:
        old = mapping_at(current, "status")
        return changed_fields(old, model_status(old, generation, now, backends, failure))

    outcome.status_written = write_status(cluster, manifest, build)
    post_rollout_events(cluster, manifest, outcome, failure)
    outcome.result = (
        f"Failed: {failure.reason}: {failure.message}"
        if failure
        else ("Active" if backends and all(b.available for b in backends) else "Progressing")
    )
    return outcome


def post_rollout_events(
    cluster: Cluster, manifest: dict[str, Any], outcome: ModelOutcome, failure: Failure | None
) -> None:
    """Events on the Model for what this pass decided: the workloads it created, updated or deleted (Normal
    ``RolledOut``), and a failure (Warning, the status reason) when it is new on the status or the API failed
    (repeated failures bump one Event's count).

    Args:
        cluster: The cluster the Events are recorded in.
        manifest: The Model as read.
        outcome: What this pass created, updated and deleted, and whether it wrote the status.
        failure: The pass's failure (reason and message), or None.
    """
    if outcome.created or outcome.updated or outcome.deleted:
        record_event(cluster, manifest, "RolledOut", outcome.summary())
    if failure is not None and (outcome.status_written or failure.reason == REASON_ABNORMAL):
        record_event(cluster, manifest, failure.reason, failure.message, "Warning")


def warn_plain_credentials(cluster: Cluster, manifest: dict[str, Any], model: Model) -> None:
    """A Warning Event on the Model (and a log line) per credential its backends give as a plain env value, when
    this pass rendered it into a workload; the variable is named, the value never.

    Args:
        cluster: The cluster the Events are recorded in.
        manifest: The Model as read.
        model: The Model's parsed API model, whose backends' env is checked.
    """
    for problem in plain_credentials(model):
        log.warning("Model %s/%s: %s", model.metadata.namespace, model.metadata.name, problem)
        record_event(cluster, manifest, PLAIN_CREDENTIAL_REASON, str(problem), "Warning")


def _roll_out(
    cluster: Cluster,
    model: Model,
    now: datetime,
    image: str,
    outcome: ModelOutcome,
    lora_session: Callable[[], requests.Session] | None,
    options: RolloutOptions,
) -> tuple[Failure | None, list[BackendState]]:
    ref = ModelRef.of(model)
    served: set[str] = set()
    live = list_children(cluster, ref.namespace, ref.uid, served)
    mode = native_mode(options, served)
    unsupported = unsupported_backends(model)
    results: dict[str, _BackendResult] = {}
    for backend in model.spec.backends:
        if backend.type in ("MindIE", "MindIEDisaggregated"):
            continue
        results[backend.name] = _plan_backend(cluster, model, ref, backend, live, image, lora_session, outcome, mode)
    desired = [obj for result in results.values() for obj in result.objects] + model_children(model, ref, mode)
    refused = identity_problems(desired)  # e.g. a spec too large for the last-applied annotation (256 KiB in all)
    if refused:  # what the API server would refuse: nothing is written, the Model says why
        return Failure(REASON_INVALID, "; ".join(refused)), backend_states(model, live, {}, mode.model_serving)
    written: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in desired:
        key = (obj["kind"], obj["metadata"]["name"])
        written[key] = write_object(cluster, obj, live.get(key), outcome)
    keep = set(written) | {k for r in results.values() for k in r.keep}
    for key, obj in live.items():
        if key not in keep:
            cluster.delete(ObjectRef.of(obj))
            outcome.deleted.append(f"{key[0]}/{key[1]}")
    rolled_out = {label.split(" ")[0] for label in outcome.created + outcome.updated}
    for result in results.values():
        if any(name in rolled_out for name in result.deployments):
            for cache in result.caches:
                mark_used(cluster, cache, now)
    failures = [r.failure for r in results.values() if r.failure]
    if unsupported:
        failures.insert(0, failure_of(unsupported, REASON_NOT_SUPPORTED))
    if mode.networking and (unroutable := route_errors(model)):
        failures.append(failure_of(unroutable, REASON_INVALID))
    failure = Failure(failures[0].reason, "; ".join(f.message for f in failures)) if failures else None
    state = {**live, **written}
    waiting = {n: r.waiting for n, r in results.items() if r.waiting}
    return failure, backend_states(model, state, waiting, mode.model_serving)


def _plan_backend(
    cluster: Cluster,
    model: Model,
    ref: ModelRef,
    backend: ModelBackend,
    live: Mapping[tuple[str, str], dict[str, Any]],
    image: str,
    lora_session: Callable[[], requests.Session] | None,
    outcome: ModelOutcome,
    mode: NativeMode | None = None,
) -> _BackendResult:
    """Resolve one backend's weights and adapters (creating or adopting their caches), apply a LoRA-only
    change on running pods, or let the engine render its children (:func:`render_backend`); keep its live
    objects while its caches fill."""
    mode = mode or NativeMode()
    result = _BackendResult()
    requested_by = f"Model/{ref.namespace}/{ref.name}"
    owned = owned_children(ref, backend)
    weights = direct_weights(backend, image)
    if weights is None:
        source = needs_managed_cache(backend)
        assert source is not None
        resolution = resolve_cache(cluster, ref.namespace, source, requested_by, downloader_env(backend))
        if resolution.pvc is None:
            return _waiting(result, owned, live, resolution)
        weights = managed_weights(resolution.pvc)
        if resolution.cache is not None:
            result.caches.append(resolution.cache)
    lora_plan = runtime_lora_plan(ref, backend, weights, live, mode)
    if lora_plan is not None:
        pods = ready_pods(cluster, ref.namespace, lora_plan.selector)
        if pods:  # with no pod running there is nothing to update at runtime: roll out instead
            result.keep |= owned
            try:
                outcome.lora += apply_lora_change(
                    pods, lora_plan.port, lora_plan.change, lora_session() if lora_session else None
                )
            except RuntimeError as exc:  # reported on the Model and retried next pass; the rest proceeds
                result.failure = Failure(REASON_ABNORMAL, f"backend {backend.name}: {exc}")
                result.waiting = str(exc)
                return result
            _warm_lora_caches(cluster, ref, backend, requested_by)
            return result
    loras: dict[str, tuple[Mount, str]] = {}
    for adapter in backend.lora_adapters or []:
        source = from_lora_url(adapter.artifact_url)
        if source.scheme == "pvc":
            loras[adapter.name] = lora_mount(adapter.name, source.claim or "", source.path)
            continue
        resolution = resolve_cache(cluster, ref.namespace, source, requested_by, downloader_env(backend))
        if resolution.pvc is None:
            return _waiting(result, owned, live, _adapter_waiting(adapter.name, backend, resolution))
        loras[adapter.name] = lora_mount(adapter.name, resolution.pvc)
        if resolution.cache is not None:
            result.caches.append(resolution.cache)
    rendered = render_backend(model, ref, backend, weights, loras, live, mode)
    result.objects, result.deployments = rendered.objects, rendered.workloads
    return result


def _adapter_waiting(name: str, backend: ModelBackend, resolution: CacheResolution) -> CacheResolution:
    """The resolution of adapter ``name``'s cache with a message naming the adapter; a failed cache of an
    offline backend (``HF_HUB_OFFLINE``) says the adapter cannot be had offline, since its engine will not
    fetch it either."""
    if resolution.failed and hub_offline(backend):
        why = f"LoRA adapter {name} cannot be had offline: {resolution.waiting}"
    else:
        why = f"LoRA adapter {name}: {resolution.waiting}"
    return replace(resolution, waiting=why)


def _waiting(
    result: _BackendResult,
    owned: set[tuple[str, str]],
    live: Mapping[tuple[str, str], Any],
    resolution: CacheResolution,
) -> _BackendResult:
    """Leave a backend's live objects alone while a cache it needs is not ready (a failed cache fails it)."""
    result.keep |= {key for key in owned if key in live}
    result.waiting = resolution.waiting
    if resolution.failed:
        result.failure = Failure(REASON_CACHE_FAILED, resolution.waiting or "cache failed")
    return result


def _warm_lora_caches(cluster: Cluster, ref: ModelRef, backend: ModelBackend, requested_by: str) -> None:
    """Adapters loaded at runtime are also fetched into their caches, for the next rollout."""
    for adapter in backend.lora_adapters or []:
        source = from_lora_url(adapter.artifact_url)
        if source.downloadable:
            ensure_cache(cluster, ref.namespace, source, env=downloader_env(backend) or None, requested_by=requested_by)
