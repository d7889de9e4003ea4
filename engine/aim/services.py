"""AIMService rollout, decided without I/O: references, workload names, InferenceService, HTTPRoute, status.

An AIMService binds a canonical model (an AIMClusterModel's ``spec.name``) to an AIMServiceTemplate of
its namespace; the namespace's AIMNamespaceConfig (``configRef``, default ``default``) brings pull
secrets and routing. :func:`resolve_references` checks them in the order aim-engine/kaiwo do and
gives each missing or mismatched one its seed status and reason. :func:`render_inference_service`
and :func:`render_http_route` build the KServe ``serving.kserve.io/v1beta1`` InferenceService (raw
deployment, inline ``kserve-container``) and the Gateway API ``gateway.networking.k8s.io/v1``
HTTPRoute, owned by the service. :func:`service_status` reads what the cluster reports back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.aim.discovery import DNS_LABEL_MAX, DOMAIN, REASON_IMAGE_NOT_FOUND, derived, owner_reference
from engine.aim.templates import (
    METRIC_PREFERENCE,
    PRECISION_PREFERENCE,
    GpuInventory,
    ModelCatalog,
    gpu_resource_name,
    match_profile,
    models_named,
    node_affinity,
    normalize_gpu_model,
    preference_rank,
    record_of,
)
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

STATUS_PENDING, STATUS_STARTING, STATUS_RUNNING, STATUS_FAILED, STATUS_DEGRADED = (
    "Pending",
    "Starting",
    "Running",
    "Failed",
    "Degraded",
)
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
# References
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """A service's references: either all found (model, template, profile, config) or the status,
    reason and message that stop the rollout, and whether an existing workload is kept."""

    status: str | None = None
    reason: str = ""
    message: str = ""
    model: Mapping[str, Any] | None = None
    template: Mapping[str, Any] | None = None
    config: Mapping[str, Any] | None = None
    deployment: Mapping[str, Any] | None = None
    sources: tuple[str, ...] = ()
    selected: str = ""
    """How the template was chosen when the service names none (empty with ``templateRef``)."""

    @property
    def blocked(self) -> bool:
        """Whether a reference stops the rollout."""
        return self.status is not None


def _condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


GPU_PREFERENCE = ("MI325X", "MI300X", "MI250X", "MI210")
"""aim-engine's GPU generation order for template selection (newest first); other models rank after."""
PROFILE_TYPE_PREFERENCE = ("optimized", "preview", "unoptimized")


@dataclass(frozen=True)
class Selection:
    """The outcome of choosing a template for a service without ``templateRef``: the template, or the
    status, reason and message that stop the rollout; ``ranked`` names the candidates in rank order."""

    template: Mapping[str, Any] | None = None
    status: str | None = None
    reason: str = ""
    message: str = ""
    ranked: tuple[str, ...] = ()


def _template_profile(template: Mapping[str, Any], deployments: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The recommended deployment a template selects (its "status profile"), or ``{}``."""
    return match_profile(template.get("spec") or {}, deployments) or {}


def select_template(
    service_spec: Mapping[str, Any],
    templates: Mapping[str, Mapping[str, Any]],
    deployments: Sequence[Mapping[str, Any]],
    inventory: GpuInventory,
) -> Selection:
    """Choose the template of a service that names none, as aim-engine does.

    Filter (each step explains what it removed): the namespace's templates of ``spec.model``; status
    Available; profile type ``optimized`` unless ``spec.allowUnoptimized`` (a recommended deployment
    without a ``type`` is optimized: the image recommends it); its GPU present in the cluster (templates
    without a GPU pass). Only namespaced templates exist in the seed, so aim-engine's "namespace
    templates before cluster templates" step has nothing to drop. Rank, lexicographically: profile type
    (optimized < preview < unoptimized), GPU (MI325X < MI300X < MI250X < MI210), metric (latency <
    throughput), precision (fp4 < ... < fp32); unknown values rank last. A tie at the best rank is
    ambiguous: nothing is chosen (``TemplateSelectionAmbiguous``, Failed until ``templateRef`` is set
    or a template goes away). No template of the model yet, or none Available yet: Pending
    (``TemplateNotFound`` / ``TemplateNotReady``); all filtered out: Failed ``TemplateNotFound``.
    """
    canonical = service_spec.get("model", "")
    candidates = sorted(
        (t for t in templates.values() if (t.get("spec") or {}).get("model") == canonical),
        key=lambda t: t["metadata"]["name"],
    )
    if not candidates:
        return Selection(
            status=STATUS_PENDING,
            reason="TemplateNotFound",
            message=f"no AIMServiceTemplate in this namespace serves {canonical!r} yet (spec.templateRef is not set)",
        )
    ready = [t for t in candidates if (t.get("status") or {}).get("status") == "Available"]
    if not ready:
        names = ", ".join(t["metadata"]["name"] for t in candidates)
        return Selection(
            status=STATUS_PENDING,
            reason="TemplateNotReady",
            message=f"templates of {canonical!r} exist but none is Available yet: {names}",
        )
    allow_unoptimized = service_spec.get("allowUnoptimized") is True
    rejected: list[str] = []
    kept: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    for template in ready:
        name, spec = template["metadata"]["name"], template.get("spec") or {}
        profile = _template_profile(template, deployments)
        kind = str(profile.get("type") or "optimized") if profile else "unoptimized"
        if kind != "optimized" and not allow_unoptimized:
            rejected.append(f"{name}: UnoptimizedTemplateFiltered ({kind})")
            continue
        gpu = spec.get("gpuModel") or profile.get("gpuModel")
        if gpu and not inventory.of(str(gpu)):
            rejected.append(f"{name}: RequiredGPUNotInCluster ({gpu})")
            continue
        kept.append((template, profile))
    if not kept:
        return Selection(
            status=STATUS_FAILED,
            reason="TemplateNotFound",
            message=f"no Available template of {canonical!r} can be used: {'; '.join(rejected)}",
        )

    def rank(item: tuple[Mapping[str, Any], Mapping[str, Any]]) -> tuple[int, int, int, int]:
        template, profile = item
        spec = template.get("spec") or {}
        gpu = normalize_gpu_model(str(spec.get("gpuModel") or profile.get("gpuModel") or ""))
        precision = profile.get("precision") or (spec.get("precision") if spec.get("precision") != "auto" else None)
        return (
            preference_rank(str(profile.get("type") or "optimized"), PROFILE_TYPE_PREFERENCE),
            preference_rank(gpu, GPU_PREFERENCE),
            preference_rank(profile.get("metric") or spec.get("metric"), METRIC_PREFERENCE),
            preference_rank(precision, PRECISION_PREFERENCE),
        )

    ordered = sorted(kept, key=lambda item: (rank(item), item[0]["metadata"]["name"]))
    names = tuple(t["metadata"]["name"] for t, _ in ordered)
    best = rank(ordered[0])
    tied = [t["metadata"]["name"] for t, p in ordered if rank((t, p)) == best]
    if len(tied) > 1:
        return Selection(
            status=STATUS_FAILED,
            reason="TemplateSelectionAmbiguous",
            message=f"{len(tied)} templates of {canonical!r} rank equally ({', '.join(tied)}); set spec.templateRef",
            ranked=names,
        )
    return Selection(
        template=ordered[0][0],
        reason="BestMatch",
        message=f"template {names[0]!r} selected (best of {len(names)})",
        ranked=names,
    )


def resolve_references(
    service: Mapping[str, Any],
    models: Sequence[Mapping[str, Any]] | ModelCatalog,
    templates: Mapping[str, Mapping[str, Any]],
    configs: Mapping[str, Mapping[str, Any]],
    inventory: GpuInventory | None = None,
    invalid: Mapping[tuple[str, str], str] | None = None,
) -> Resolution:
    """Model, template and namespace config of a service, checked in kaiwo's order.

    Missing model or template, or a template of another model: Failed (``ModelNotFound``,
    ``TemplateNotFound``, ``ValidationFailed``). Without ``templateRef`` the template is chosen by
    :func:`select_template` (needs ``inventory``). Missing namespace config: Failed
    ``RuntimeConfigMissing`` (as aim-engine reports a missing reference). Model image missing: Degraded
    ``ImageNotFound``. Template Failed: Failed; not yet Available: Pending ``TemplateNotAvailable``;
    Available without model sources: Degraded ``NoModelSources``. ``templates``/``configs`` are the
    service namespace's, by name; ``invalid`` holds the namespace's objects that do not parse (``(kind,
    name)`` -> problem): referring to one is Failed ``ValidationFailed``.
    """
    invalid = invalid or {}
    spec = service.get("spec") or {}
    canonical = spec.get("model", "")
    named = models_named(models, canonical)
    if not named and isinstance(models, ModelCatalog) and canonical in models.invalid:
        return Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"the AIMClusterModel with spec.name {canonical!r} is invalid: {models.invalid[canonical]}",
        )
    if not named:
        return Resolution(
            STATUS_FAILED, "ModelNotFound", f"no AIMClusterModel has spec.name {canonical!r} (spec.model)"
        )
    if len(named) > 1:
        return Resolution(
            STATUS_FAILED, "ValidationFailed", f"several AIMClusterModels have spec.name {canonical!r} (spec.model)"
        )
    model = named[0]
    record = record_of(models, model)
    metadata = record.metadata if record is not None and record.ok else None
    template_ref = spec.get("templateRef") or ""
    selection: Selection | None = None
    if not template_ref:
        selection = select_template(
            spec, templates, metadata.recommended_deployments if metadata else (), inventory or GpuInventory()
        )
        if selection.template is None:
            return Resolution(selection.status, selection.reason, selection.message, model=model)
        template_ref = selection.template["metadata"]["name"]
    template = templates.get(template_ref)
    if template is None and ("AIMServiceTemplate", template_ref) in invalid:
        return Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"AIMServiceTemplate {template_ref!r} is invalid: {invalid['AIMServiceTemplate', template_ref]}",
            model=model,
        )
    if template is None:
        return Resolution(
            STATUS_FAILED,
            "TemplateNotFound",
            f"AIMServiceTemplate {template_ref!r} not found (spec.templateRef)",
            model=model,
        )
    if (template.get("spec") or {}).get("model") != canonical:
        return Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"template {template_ref!r} serves {(template.get('spec') or {}).get('model')!r}, not spec.model {canonical!r}",
            model=model,
            template=template,
        )
    config_ref = spec.get("configRef") or "default"
    config = configs.get(config_ref)
    if config is None and ("AIMNamespaceConfig", config_ref) in invalid:
        return Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"AIMNamespaceConfig {config_ref!r} is invalid: {invalid['AIMNamespaceConfig', config_ref]}",
            model=model,
            template=template,
        )
    if config is None:
        return Resolution(
            STATUS_FAILED,
            "RuntimeConfigMissing",
            f"AIMNamespaceConfig {config_ref!r} not found (spec.configRef)",
            model=model,
            template=template,
        )
    if record is not None and record.reason == REASON_IMAGE_NOT_FOUND and record.image == model["spec"].get("image"):
        return Resolution(
            STATUS_DEGRADED, REASON_IMAGE_NOT_FOUND, record.message, model=model, template=template, config=config
        )
    template_status = (template.get("status") or {}).get("status")
    if template_status == "Failed":
        failure = _condition(template, "Failure") or {}
        return Resolution(
            STATUS_FAILED,
            failure.get("reason") or "TemplateFailed",
            f"template {template_ref!r} failed: {failure.get('message', '')}".rstrip(": "),
            model=model,
            template=template,
            config=config,
        )
    if template_status != "Available":
        ready = _condition(template, "Ready") or {}
        detail = ready.get("message") or f"status {template_status or 'Pending'}"
        return Resolution(
            STATUS_PENDING,
            "TemplateNotAvailable",
            f"waiting for template {template_ref!r}: {detail}",
            model=model,
            template=template,
            config=config,
        )
    sources = tuple((template.get("status") or {}).get("modelSources") or ())
    if not sources:
        return Resolution(
            STATUS_DEGRADED,
            "NoModelSources",
            f"template {template_ref!r} lists no model sources",
            model=model,
            template=template,
            config=config,
        )
    deployment = match_profile(template.get("spec") or {}, metadata.recommended_deployments) if metadata else None
    return Resolution(
        model=model,
        template=template,
        config=config,
        deployment=deployment or {},
        sources=sources,
        selected=selection.message if selection else "",
    )


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
    service: Mapping[str, Any],
    resolution: Resolution,
    inventory: GpuInventory,
    mounts: Sequence[CacheMount],
) -> dict[str, Any]:
    """The KServe InferenceService of a resolved service (raw deployment, inline container)."""
    meta, spec = service["metadata"], service.get("spec") or {}
    namespace = meta["namespace"]
    model, template, config = resolution.model or {}, resolution.template or {}, resolution.config or {}
    tspec = template.get("spec") or {}
    deployment = resolution.deployment or {}
    gpu_model = tspec.get("gpuModel") or deployment.get("gpuModel")
    gpus = int(tspec.get("gpusPerReplica") or deployment.get("gpuCount") or 0)
    metric = tspec.get("metric") or deployment.get("metric")
    precision = deployment.get("precision") or (
        tspec.get("precision") if tspec.get("precision") not in (None, "auto") else None
    )
    replicas = int(spec.get("replicas") if spec.get("replicas") is not None else 1)
    env = {"AIM_CACHE_PATH": CACHE_ROOT, "VLLM_ENABLE_METRICS": "true"}
    if deployment.get("profileId"):
        env["AIM_PROFILE_ID"] = deployment["profileId"]
    if metric:
        env["AIM_METRIC"] = metric
    if precision:
        env["AIM_PRECISION"] = precision
    if gpu_model:
        env["AIM_GPU_MODEL"] = gpu_model
    if gpus:
        env["AIM_GPU_COUNT"] = str(gpus)
    if tspec.get("tensorParallelism"):
        env["AIM_TENSOR_PARALLEL_SIZE"] = str(tspec["tensorParallelism"])
    env_list: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    token = ((config.get("spec") or {}).get("credentials") or {}).get("huggingFaceToken")
    if token and token.get("name") and token.get("key"):
        env_list.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token["name"], "key": token["key"]}}}
        )
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
        "image": model.get("spec", {}).get("image"),
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
    secrets = ((config.get("spec") or {}).get("images") or {}).get("imagePullSecrets") or []
    if secrets:
        predictor["imagePullSecrets"] = [{"name": s} for s in secrets]
    affinity = node_affinity(gpu_model, inventory) if gpu_model else None
    if affinity:
        predictor["affinity"] = affinity
    labels = {
        "app.kubernetes.io/component": "inference",
        **MANAGED_BY,
        SERVICE_LABEL: label_value(meta["name"]),
        TEMPLATE_LABEL: label_value(template.get("metadata", {}).get("name", "")),
        MODEL_LABEL: label_value(model.get("metadata", {}).get("name", "")),
    }
    if metric:
        labels[METRIC_LABEL] = label_value(metric)
    if precision:
        labels[PRECISION_LABEL] = label_value(precision)
    return {
        "apiVersion": KSERVE_API,
        "kind": "InferenceService",
        "metadata": {
            "name": workload_name(meta["name"], namespace),
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


def routing_of(config: Mapping[str, Any] | None) -> tuple[bool, Mapping[str, Any] | None]:
    """``(enabled, gateway parentRef)`` of a namespace config (``autoCreateRoute`` defaults to true)."""
    routing = ((config or {}).get("spec") or {}).get("routing") or {}
    enabled = routing.get("autoCreateRoute")
    return (True if enabled is None else bool(enabled)), routing.get("gateway")


def render_http_route(service: Mapping[str, Any], gateway: Mapping[str, Any], isvc_name: str) -> dict[str, Any]:
    """The HTTPRoute exposing the service under ``/<namespace>/<uid>`` on the namespace's Gateway."""
    meta = service["metadata"]
    namespace = meta["namespace"]
    return {
        "apiVersion": GATEWAY_API,
        "kind": "HTTPRoute",
        "metadata": {
            "name": route_name(meta["name"], namespace),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/component": "routing",
                **MANAGED_BY,
                SERVICE_LABEL: label_value(meta["name"]),
            },
            "ownerReferences": [owner_reference(service)],
        },
        "spec": {
            "parentRefs": [dict(gateway)],
            "rules": [
                {
                    "matches": [
                        {"path": {"type": "PathPrefix", "value": route_path(namespace, meta.get("uid", meta["name"]))}}
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
    return existing == desired


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


def _ready_of(isvc: Mapping[str, Any] | None) -> tuple[bool, str, str]:
    if isvc is None:
        return False, "CreatingRuntime", "InferenceService not created yet"
    status = isvc.get("status") or {}
    failure = (status.get("modelStatus") or {}).get("lastFailureInfo") or {}
    if failure.get("message") or failure.get("reason"):
        return False, "RuntimeFailed", str(failure.get("message") or failure.get("reason"))
    ready = _condition(isvc, "Ready")
    if ready and ready.get("status") == "True":
        return True, "RuntimeReady", "InferenceService is ready"
    return False, "CreatingRuntime", (ready or {}).get("message") or "waiting for the InferenceService to become ready"


def _route_of(route: Mapping[str, Any] | None) -> tuple[bool, str, str]:
    if route is None:
        return False, "ConfiguringRoute", "HTTPRoute not created yet"
    parents = ((route.get("status") or {}).get("parents")) or []
    if not parents:
        return False, "ConfiguringRoute", "no Gateway has reported on the HTTPRoute yet"
    for parent in parents:
        for cond in parent.get("conditions") or []:
            if cond.get("status") == "False":
                return False, cond.get("reason") or "RouteFailed", cond.get("message") or f"{cond.get('type')} is False"
    accepted = any(
        c.get("type") == "Accepted" and c.get("status") == "True" for p in parents for c in p.get("conditions") or []
    )
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
    isvc: Mapping[str, Any] | None,
    route: Mapping[str, Any] | None,
    routing_enabled: bool,
    routing_problem: str | None,
    selected: str = "",
) -> ServiceOutcome:
    """Status of a resolved service from its caches and what the cluster reports about its workload.

    Starting until the InferenceService is Ready and the route accepted by its Gateway, then Running;
    a failed cache is Failed (as aim-engine reports it); a runtime failure or a routing problem (no
    gateway configured) is Degraded. ``selected`` says how the template was chosen (auto-selection).
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
        route_ok, route_reason, route_message = False, "GatewayNotConfigured", routing_problem
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
