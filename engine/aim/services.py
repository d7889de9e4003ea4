"""AIMService workloads, decided without I/O: names, InferenceService, HTTPRoute and status.

Given a service whose references resolved (:mod:`engine.aim.references`),
:func:`render_inference_service` and :func:`render_http_route` build the KServe
``serving.kserve.io/v1beta1`` InferenceService (raw deployment, inline ``kserve-container``) and the
Gateway API ``gateway.networking.k8s.io/v1`` HTTPRoute, owned by the service, under names unique per
(namespace, service). :func:`service_status` reads what the cluster reports back;
:func:`blocked_status` is the status of a service whose references stop the rollout.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.aim.discovery import DOMAIN, REASON_IMAGE_NOT_FOUND
from engine.aim.gpus import GpuInventory, gpu_resource_name, node_affinity
from engine.aim.names import DNS_LABEL_MAX, derived, owner_reference
from engine.aim.references import (
    STATUS_DEGRADED,
    STATUS_FAILED,
    STATUS_PENDING,
    STATUS_RUNNING,
    STATUS_STARTING,
    Resolution,
    condition_of,
)
from engine.api.aim import AIMNamespaceConfig, AIMService
from engine.api.views import HTTPRoute, InferenceService
from engine.caches.sources import parse_source
from engine.status import ConditionUpdate

KSERVE_API = "serving.kserve.io/v1beta1"
GATEWAY_API = "gateway.networking.k8s.io/v1"
CONTAINER_NAME = "kserve-container"
CONTAINER_PORT = 8000
PREDICTOR_SERVICE_PORT = 80
CACHE_ROOT = "/workspace/cache"
SHM_SIZE = "8Gi"
HOST_LABEL_SUFFIX = len("-predictor-")
MIN_NAME = 10
SERVICE_LABEL, TEMPLATE_LABEL, MODEL_LABEL = f"{DOMAIN}/service", f"{DOMAIN}/template", f"{DOMAIN}/model"
METRIC_LABEL, PRECISION_LABEL = f"{DOMAIN}/metric", f"{DOMAIN}/precision"
MANAGED_BY = {"app.kubernetes.io/managed-by": "modelplane"}

COND_RESOLVED, COND_CACHE_READY, COND_RUNTIME_READY, COND_ROUTING_READY = (
    "Resolved",
    "CacheReady",
    "RuntimeReady",
    "RoutingReady",
)
COND_READY, COND_PROGRESSING, COND_FAILURE = "Ready", "Progressing", "Failure"


# --------------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------------


def _unique_name(service: str, namespace: str, limit: int) -> str:
    """``derived([service], [namespace])`` (aim-engine's name) when the service name survives whole and
    unchanged in it; otherwise ``derived([service], [namespace, service])``, so that two services whose
    names were cut (or sanitised) to the same prefix still get different hashes. Unique per
    (namespace, service) and stable across runs; names that fit keep aim-engine's form."""
    upstream = derived([service], [namespace], max_len=limit)
    if upstream[: -len("-12345678")] == service:
        return upstream
    return derived([service], [namespace, service], max_len=limit)


def workload_name(service: str, namespace: str) -> str:
    """The InferenceService name, short enough that KServe's host label ``{isvc}-predictor-{namespace}``
    stays within 63 characters (a hash is always added, see :func:`_unique_name`).
    ``ValueError`` when the namespace leaves fewer than 10 characters."""
    limit = 63 - HOST_LABEL_SUFFIX - len(namespace)
    if limit < MIN_NAME:
        raise ValueError(
            f"namespace {namespace!r} is too long for KServe's 63-character host label {{isvc}}-predictor-{{namespace}}"
        )
    return _unique_name(service, namespace, limit)


def route_name(service: str, namespace: str) -> str:
    """The HTTPRoute name: ``derived([service], [namespace])``, unique per (namespace, service) as
    :func:`_unique_name` makes it."""
    return _unique_name(service, namespace, DNS_LABEL_MAX)


_LABEL_INVALID = re.compile(r"[^a-z0-9._-]+")


def label_value(text: str) -> str:
    """A label-safe value: lowercase, invalid runs to ``_``, trimmed, at most 63 characters."""
    value = _LABEL_INVALID.sub("_", text.lower()).strip("_.-")[:63]
    return value.rstrip("_.-")


def _segment(text: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", text.strip().lower()).strip("-")[:63].strip("-")


def route_path(namespace: str, uid: str) -> str:
    """``/<namespace>/<workload_id>`` normalised (segments RFC 1123, no trailing slash); the workload id is the UID."""
    segments = [s for s in (_segment(namespace), _segment(uid)) if s]
    return ("/" + "/".join(segments))[:200]


# --------------------------------------------------------------------------------------------------
# Caches of a service
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheMount:
    """One Available cache a workload mounts: its source, ModelCache name and PVC."""

    source: str
    cache: str
    pvc: str

    @property
    def volume(self) -> str:
        """The pod volume name (DNS-1123, ``.`` -> ``-``)."""
        return derived([f"cache-{self.cache}".replace(".", "-")], [self.cache], hash_len=6)

    @property
    def mount_path(self) -> str:
        """``/workspace/cache/<model id>`` (``..`` stripped)."""
        try:
            name = parse_source(self.source).display_name
        except ValueError:
            name = self.cache
        parts = [p for p in name.split("/") if p and p not in (".", "..")]
        return "/".join([CACHE_ROOT, *parts]) if parts else f"{CACHE_ROOT}/{self.cache}"


# --------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------


def _quantity_gi(value: int) -> str:
    return f"{value}Gi"


def render_inference_service(
    service: AIMService,
    resolution: Resolution,
    inventory: GpuInventory,
    mounts: Sequence[CacheMount],
    config: AIMNamespaceConfig | None,
) -> dict[str, Any]:
    """The KServe InferenceService of a resolved service (raw deployment, inline container); ``config`` is the
    namespace's AIMNamespaceConfig the resolution found (its HF token and image pull secrets)."""
    name, namespace = str(service.metadata.name), str(service.metadata.namespace)
    model, template = resolution.model, resolution.template
    credentials = config.spec.credentials if config is not None else None
    images = config.spec.images if config is not None else None
    tspec = template.spec if template is not None else None
    deployment = resolution.deployment or {}
    gpu_model = (tspec.gpu_model if tspec else None) or deployment.get("gpuModel")
    gpus = int((tspec.gpus_per_replica if tspec else None) or deployment.get("gpuCount") or 0)
    metric = (tspec.metric if tspec else None) or deployment.get("metric")
    precision = deployment.get("precision") or (
        tspec.precision if tspec is not None and tspec.precision not in (None, "auto") else None
    )
    wanted_replicas = service.spec.replicas
    replicas = int(wanted_replicas) if wanted_replicas is not None else 1
    selections = {  # what the resolution chose, for the AIM image to serve; an unset choice is left out
        "AIM_PROFILE_ID": deployment.get("profileId"),
        "AIM_METRIC": metric,
        "AIM_PRECISION": precision,
        "AIM_GPU_MODEL": gpu_model,
        "AIM_GPU_COUNT": str(gpus) if gpus else None,
        "AIM_TENSOR_PARALLEL_SIZE": (
            str(tspec.tensor_parallelism) if tspec is not None and tspec.tensor_parallelism else None
        ),
    }
    env = {"AIM_CACHE_PATH": CACHE_ROOT, "VLLM_ENABLE_METRICS": "true"}
    env |= {name: value for name, value in selections.items() if value}
    env_list: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    token = credentials.hugging_face_token if credentials is not None else None
    if token is not None:
        env_list.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}})
    env_list.sort(key=lambda e: e["name"])
    resources: dict[str, Any] = {"requests": {}, "limits": {}}
    if gpus:
        resource = gpu_resource_name(gpu_model or "", inventory)
        resources = {
            "requests": {"cpu": str(4 * gpus), "memory": _quantity_gi(32 * gpus), resource: str(gpus)},
            "limits": {"memory": _quantity_gi(48 * gpus), resource: str(gpus)},
        }
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}}]
    volume_mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for mount in sorted(mounts, key=lambda m: m.cache):
        volumes.append({"name": mount.volume, "persistentVolumeClaim": {"claimName": mount.pvc, "readOnly": True}})
        volume_mounts.append({"name": mount.volume, "mountPath": mount.mount_path, "readOnly": True})
    container = {
        "name": CONTAINER_NAME,
        "image": model.spec.image if model is not None else None,
        "ports": [{"containerPort": CONTAINER_PORT, "name": "http", "protocol": "TCP"}],
        "env": env_list,
        "resources": resources,
        "volumeMounts": volume_mounts,
    }
    predictor: dict[str, Any] = {
        "minReplicas": replicas,
        "maxReplicas": replicas,
        "containers": [container],
        "volumes": volumes,
    }
    secrets = (images.image_pull_secrets if images is not None else None) or []
    if secrets:
        predictor["imagePullSecrets"] = [{"name": s} for s in secrets]
    affinity = node_affinity(gpu_model, inventory) if gpu_model else None
    if affinity:
        predictor["affinity"] = affinity
    labels = {
        "app.kubernetes.io/component": "inference",
        **MANAGED_BY,
        SERVICE_LABEL: label_value(name),
        TEMPLATE_LABEL: label_value((template.metadata.name if template is not None else None) or ""),
        MODEL_LABEL: label_value((model.metadata.name if model is not None else None) or ""),
    }
    if metric:
        labels[METRIC_LABEL] = label_value(metric)
    if precision:
        labels[PRECISION_LABEL] = label_value(precision)
    return {
        "apiVersion": KSERVE_API,
        "kind": "InferenceService",
        "metadata": {
            "name": workload_name(name, namespace),
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                "serving.kserve.io/deploymentMode": "RawDeployment",
                "serving.kserve.io/autoscalerClass": "none",
            },
            "ownerReferences": [owner_reference(service)],
        },
        "spec": {"predictor": predictor},
    }


def routing_of(config: AIMNamespaceConfig | None) -> tuple[bool, Mapping[str, Any] | None]:
    """``(enabled, gateway parentRef as written)`` of a namespace config (``autoCreateRoute`` defaults to true)."""
    routing = config.spec.routing if config is not None else None
    if routing is None:
        return True, None
    enabled = routing.auto_create_route
    gateway = routing.gateway.model_dump(by_alias=True, exclude_unset=True) if routing.gateway else None
    return (True if enabled is None else bool(enabled)), gateway


def render_http_route(service: AIMService, gateway: Mapping[str, Any], isvc_name: str) -> dict[str, Any]:
    """The HTTPRoute exposing the service under ``/<namespace>/<uid>`` on the namespace's Gateway
    (``gateway``: the parentRef as the namespace config writes it)."""
    name, namespace, uid = str(service.metadata.name), str(service.metadata.namespace), service.metadata.uid
    return {
        "apiVersion": GATEWAY_API,
        "kind": "HTTPRoute",
        "metadata": {
            "name": route_name(name, namespace),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/component": "routing",
                **MANAGED_BY,
                SERVICE_LABEL: label_value(name),
            },
            "ownerReferences": [owner_reference(service)],
        },
        "spec": {
            "parentRefs": [dict(gateway)],
            "rules": [
                {
                    "matches": [
                        {
                            "path": {
                                "type": "PathPrefix",
                                "value": route_path(namespace, uid if uid is not None else name),
                            }
                        }
                    ],
                    "filters": [
                        {
                            "type": "URLRewrite",
                            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
                        }
                    ],
                    "backendRefs": [
                        {
                            "group": "",
                            "kind": "Service",
                            "name": f"{isvc_name}-predictor",
                            "port": PREDICTOR_SERVICE_PORT,
                        }
                    ],
                }
            ],
        },
    }


def contains(existing: Any, desired: Any) -> bool:
    """Whether ``existing`` already holds everything ``desired`` says (dicts by key, lists exactly):
    fields a controller or the API server added are not a difference."""
    if isinstance(desired, dict):
        return isinstance(existing, dict) and all(contains(existing.get(k), v) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(existing, list)
            and len(existing) == len(desired)
            and all(contains(e, d) for e, d in zip(existing, desired))
        )
    return bool(existing == desired)


def update_patch(
    existing: Mapping[str, Any], desired: Mapping[str, Any], managed: Sequence[str] = ()
) -> dict[str, Any] | None:
    """The merge-patch bringing ``existing`` to ``desired`` (labels, annotations, ownerReferences,
    spec), or ``None`` when nothing differs. ``managed`` predictor keys absent from ``desired`` are removed."""
    want_meta = desired.get("metadata") or {}
    have_meta = existing.get("metadata") or {}
    patch: dict[str, Any] = {}
    meta_patch = {
        k: want_meta[k]
        for k in ("labels", "annotations", "ownerReferences")
        if k in want_meta and not contains(have_meta.get(k), want_meta[k])
    }
    if meta_patch:
        patch["metadata"] = meta_patch
    spec = dict(desired.get("spec") or {})
    have_spec = existing.get("spec") or {}
    removed = {}
    if "predictor" in spec:
        removed = {k: None for k in managed if k not in spec["predictor"] and k in (have_spec.get("predictor") or {})}
    if not contains(have_spec, spec) or removed:
        if removed:
            spec["predictor"] = {**spec["predictor"], **removed}
        patch["spec"] = spec
    return patch or None


# --------------------------------------------------------------------------------------------------
# Status
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceOutcome:
    """A service's ``status.status`` and conditions."""

    status: str
    conditions: list[ConditionUpdate] = field(default_factory=list)


def _ready_of(isvc: InferenceService | None) -> tuple[bool, str, str]:
    """Whether the InferenceService is ready, with the reason and message its status gives."""
    if isvc is None:
        return False, "CreatingRuntime", "InferenceService not created yet"
    failure = isvc.status.model_status.last_failure_info
    if failure.message or failure.reason:
        return False, "RuntimeFailed", str(failure.message or failure.reason)
    ready = condition_of(isvc.status.conditions, "Ready")
    if ready and ready.status == "True":
        return True, "RuntimeReady", "InferenceService is ready"
    return (
        False,
        "CreatingRuntime",
        (ready.message if ready else None) or "waiting for the InferenceService to become ready",
    )


def _route_of(route: HTTPRoute | None) -> tuple[bool, str, str]:
    """Whether the HTTPRoute's Gateways accepted it, with the reason and message they give."""
    if route is None:
        return False, "ConfiguringRoute", "HTTPRoute not created yet"
    parents = route.status.parents
    if not parents:
        return False, "ConfiguringRoute", "no Gateway has reported on the HTTPRoute yet"
    for parent in parents:
        for cond in parent.conditions:
            if cond.status == "False":
                return False, cond.reason or "RouteFailed", cond.message or f"{cond.type} is False"
    accepted = any(c.type == "Accepted" and c.status == "True" for p in parents for c in p.conditions)
    if not accepted:
        return False, "ConfiguringRoute", "the Gateway has not accepted the HTTPRoute yet"
    return True, "RouteReady", "HTTPRoute accepted by its Gateway"


RESOLVED_REASONS = frozenset({"TemplateNotAvailable", REASON_IMAGE_NOT_FOUND, "NoModelSources"})
"""Blocking reasons that come after model, template and namespace config were all found."""


def blocked_status(resolution: Resolution, workload_exists: bool) -> ServiceOutcome:
    """Status of a service whose references stop the rollout: ``Resolved`` is True only when the model,
    template and namespace config were found (what blocks is then the template or the image);
    ``Failure`` is True for Failed and Degraded; ``Progressing`` while Pending."""
    status = resolution.status or STATUS_FAILED
    broken = status in (STATUS_FAILED, STATUS_DEGRADED)
    message = resolution.message + (
        " (the existing workload is kept)" if workload_exists and status != STATUS_FAILED else ""
    )
    conditions = [
        ConditionUpdate(
            COND_RESOLVED,
            "True" if resolution.reason in RESOLVED_REASONS else "False",
            resolution.reason,
            resolution.message,
        ),
        ConditionUpdate(COND_READY, "False", resolution.reason, message),
        ConditionUpdate(
            COND_PROGRESSING, "True" if status == STATUS_PENDING else "False", resolution.reason, resolution.message
        ),
        ConditionUpdate(
            COND_FAILURE,
            "True" if broken else "False",
            resolution.reason if broken else "NoFailure",
            resolution.message if broken else "",
        ),
    ]
    return ServiceOutcome(status, conditions)


def service_status(
    caches_ready: bool,
    cache_reason: str,
    cache_message: str,
    isvc: InferenceService | None,
    route: HTTPRoute | None,
    routing_enabled: bool,
    routing_problem: str | None,
    selected: str = "",
    routing_reason: str = "GatewayNotConfigured",
) -> ServiceOutcome:
    """Status of a resolved service from its caches and what the cluster reports about its workload.

    Starting until the InferenceService is Ready and the route accepted by its Gateway, then Running;
    a failed cache is Failed (as aim-engine reports it); a runtime failure or a routing problem (no
    gateway configured: ``GatewayNotConfigured``; a route of the wanted name another object controls:
    ``RouteFailed``, given as ``routing_reason``) is Degraded. ``selected`` says how the template was chosen
    (auto-selection).
    """
    resolved = ConditionUpdate(
        COND_RESOLVED,
        "True",
        "Resolved",
        "model, template and namespace config found" + (f"; {selected}" if selected else ""),
    )
    cache = ConditionUpdate(COND_CACHE_READY, "True" if caches_ready else "False", cache_reason, cache_message)
    runtime_ok, runtime_reason, runtime_message = _ready_of(isvc)
    if not routing_enabled:
        route_ok, route_reason, route_message = (
            True,
            "RoutingDisabled",
            "Routing disabled (routing.autoCreateRoute is false)",
        )
    elif routing_problem:
        route_ok, route_reason, route_message = False, routing_reason, routing_problem
    else:
        route_ok, route_reason, route_message = _route_of(route)
    runtime = ConditionUpdate(COND_RUNTIME_READY, "True" if runtime_ok else "False", runtime_reason, runtime_message)
    routing = ConditionUpdate(COND_ROUTING_READY, "True" if route_ok else "False", route_reason, route_message)
    degraded_reason = None
    if cache_reason == "CacheFailed":
        degraded_reason, degraded_message = cache_reason, cache_message
    elif runtime_reason == "RuntimeFailed":
        degraded_reason, degraded_message = runtime_reason, runtime_message
    elif routing_problem and routing_enabled:
        degraded_reason, degraded_message = route_reason, route_message
    elif route_reason not in ("ConfiguringRoute", "RouteReady", "RoutingDisabled"):
        degraded_reason, degraded_message = route_reason, route_message
    if degraded_reason:
        status = STATUS_FAILED if degraded_reason == "CacheFailed" else STATUS_DEGRADED
        ready = ConditionUpdate(COND_READY, "False", degraded_reason, degraded_message)
        failure = ConditionUpdate(COND_FAILURE, "True", degraded_reason, degraded_message)
        progressing = ConditionUpdate(COND_PROGRESSING, "False", degraded_reason, degraded_message)
    elif not caches_ready:
        status = STATUS_STARTING
        ready = ConditionUpdate(COND_READY, "False", cache_reason, cache_message)
        failure = ConditionUpdate(COND_FAILURE, "False", "NoFailure", "")
        progressing = ConditionUpdate(COND_PROGRESSING, "True", cache_reason, cache_message)
    elif runtime_ok and route_ok:
        status = STATUS_RUNNING
        ready = ConditionUpdate(COND_READY, "True", "RuntimeReady", "the service is running")
        failure = ConditionUpdate(COND_FAILURE, "False", "NoFailure", "")
        progressing = ConditionUpdate(COND_PROGRESSING, "False", "RuntimeReady", "the service is running")
    else:
        status = STATUS_STARTING
        reason, message = (runtime_reason, runtime_message) if not runtime_ok else (route_reason, route_message)
        ready = ConditionUpdate(COND_READY, "False", reason, message)
        failure = ConditionUpdate(COND_FAILURE, "False", "NoFailure", "")
        progressing = ConditionUpdate(COND_PROGRESSING, "True", reason, message)
    return ServiceOutcome(status, [resolved, cache, runtime, routing, ready, progressing, failure])
