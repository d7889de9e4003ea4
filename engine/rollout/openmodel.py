"""llmaz ``OpenModel`` decisions, as pure functions: source validation, flavor placement, the vLLM workload.

An OpenModel is a cluster-scoped catalog entry (seed 002). llmaz's own controller sets nothing on it and
re-downloads the weights into an emptyDir on every pod start (its issue #119 asks for a reusable cache).
Modelplane validates the source as llmaz's webhook does (through :func:`engine.caches.source_fields.from_openmodel_source`),
warms it once into a shared ModelCache per namespace, and serves it on request (llmaz's Playground role):
a vLLM Deployment + Service from the cache, placed by the model's flavors in order, falling back to the
next flavor when no Node matches one (llmaz only does this in a scheduler plugin).

Conditions written on the OpenModel (upstream defines none): ``Validated`` (``SourceValid`` /
``InvalidSource`` / ``InvalidFlavor``) and ``Cached`` (``CacheAvailable`` / ``CachePending`` / ``CacheFailed``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api.identity import DNS1123_LABEL_MAX, LABEL_VALUE_MAX, name_error
from engine.api.llmaz import API_VERSION, FAMILY_NAME_LABEL, Flavor, OpenModel
from engine.api.registry import OPEN_MODEL
from engine.api.validate import ManifestInvalid, parse_object
from engine.caches.plan import dns_label
from engine.caches.source_fields import from_openmodel_source
from engine.caches.sources import ModelSource, SourceError
from engine.rollout.workloads import FieldError, drain_script, probe, resource_errors, whole_count, without_status

Manifest = dict[str, Any]

MODEL_NAME_LABEL = "llmaz.io/model-name"
OWNED_BY_LABEL = "llmaz.io/owned-by"
FLAVOR_LABEL = "llmaz.io/flavor"
FLAVORS_ANNOTATION = "llmaz.io/inference-service-flavors"
PLACEMENT_ANNOTATION = "modelplane.io/placement"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "modelplane"

CONDITION_VALIDATED = "Validated"
CONDITION_CACHED = "Cached"
REASON_SOURCE_VALID = "SourceValid"
REASON_INVALID_SOURCE = "InvalidSource"
REASON_INVALID_FLAVOR = "InvalidFlavor"
REASON_CACHE_AVAILABLE = "CacheAvailable"
REASON_CACHE_PENDING = "CachePending"
REASON_CACHE_FAILED = "CacheFailed"

MODEL_MOUNT = "/workspace/models"  # llmaz's model path
PORT = 8080  # llmaz's model-runner port
DEFAULT_IMAGE = "vllm/vllm-openai:v0.10.1"
TERMINATION_GRACE_S = 130  # llmaz's worker pod grace period
DEFAULT_RESOURCES: dict[str, str] = {"cpu": "4", "memory": "8Gi"}
"""cpu/memory of llmaz's vLLM BackendRuntime ``default`` recommended config (requests = limits); a
flavor's own ``limits`` override the same keys, as llmaz's flavor limits do."""
SHARED_MEMORY_SIZE = "2Gi"  # the same config's sharedMemorySize: /dev/shm is a Memory emptyDir of this size
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
PARALLEL_PARAMS = ("TP", "PP")
"""The flavor params that are parallelism sizes (seed 002's preset parameters), passed to vLLM."""
MAX_PARALLEL_SIZE = 1024
"""The largest ``TP``/``PP`` accepted: far above the accelerators any node or multi-node group has (a larger
size is a typo, and vLLM would only fail at start-up after the pods were scheduled)."""

_LABEL_VALUE_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def validate_openmodel(manifest: Mapping[str, Any]) -> tuple[OpenModel | None, ModelSource | None, list[FieldError]]:
    """The OpenModel, its source, and what llmaz's webhook would reject (each naming its field). The status
    is not read: Modelplane writes it, and a malformed one is replaced by the next write."""
    try:
        model = parse_object(without_status(manifest))
    except ManifestInvalid as exc:
        return None, None, [FieldError(path, message) for path, message in exc.errors]
    assert isinstance(model, OpenModel)
    errors: list[FieldError] = []
    name = model.metadata.name or ""
    if name_error(API_VERSION, OPEN_MODEL, name):
        errors.append(FieldError("metadata.name", f"{name!r} is not a DNS-1123 subdomain"))
    source: ModelSource | None = None
    try:
        source = from_openmodel_source(model.spec.source.model_dump(by_alias=True, exclude_none=True), "spec.source")
    except SourceError as exc:
        errors.append(FieldError(exc.field or "spec.source", exc.reason))
    if source is not None and not (source.downloadable or source.scheme in ("host", "hostpath")):
        errors.append(
            FieldError("spec.source", f"{source.uri}: vLLM cannot serve it from a cache (hf, s3 and host sources can)")
        )
    return model, source, errors + flavor_errors(model)


def invalid_reason(errors: list[FieldError]) -> str:
    """The ``Validated`` False reason for ``errors``: ``InvalidFlavor`` when only flavors are wrong (the source and
    name are fine), else ``InvalidSource``."""
    flavors_only = all(e.field.startswith("spec.inferenceConfig.") for e in errors)
    return REASON_INVALID_FLAVOR if errors and flavors_only else REASON_INVALID_SOURCE


def flavor_errors(model: OpenModel) -> list[FieldError]:
    """What in the flavors cannot be rendered, each naming its field: an accelerator (an extended resource) limit
    that is not a whole count, which the API server would refuse on the Deployment, and a ``TP``/``PP`` param
    that is not an integer in 1..:data:`MAX_PARALLEL_SIZE`. Every flavor is checked, since a fallback may
    choose any of them."""
    errors: list[FieldError] = []
    for index, flavor in enumerate(model.spec.inference_config.flavors or []):
        path = f"spec.inferenceConfig.flavors[{index}]"
        errors += resource_errors(flavor.limits, f"{path}.limits")
        for key in PARALLEL_PARAMS:
            value = (flavor.params or {}).get(key)
            if value is not None and parallel_size(value) is None:
                errors.append(
                    FieldError(f"{path}.params.{key}", f"{value!r} is not an integer from 1 to {MAX_PARALLEL_SIZE}")
                )
    return errors


def parallel_size(value: str) -> int | None:
    """A ``TP``/``PP`` param as its size, or ``None`` when it is not an integer in 1..:data:`MAX_PARALLEL_SIZE`."""
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > len(str(MAX_PARALLEL_SIZE)):
        return None
    size = int(text)
    return size if 1 <= size <= MAX_PARALLEL_SIZE else None


# ------------------------------------------------------------------------------------------ flavors


@dataclass(frozen=True)
class Placement:
    """The flavor chosen, and why (each skipped flavor with its reason)."""

    flavor: Flavor | None
    message: str
    checked: bool  # whether Nodes were visible to check the selectors against


def _matches(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in (selector or {}).items())


def check_flavor(model: OpenModel, requested: str | None) -> None:
    """Raise ``ValueError`` when ``requested`` names no flavor of ``model`` (a bad parameter, known before
    anything is cached or placed)."""
    if not requested:
        return
    names = [f.name for f in model.spec.inference_config.flavors or []]
    if not names:
        raise ValueError(f"flavor {requested!r}: the OpenModel has no flavors")
    if requested not in names:
        raise ValueError(f"flavor {requested!r} is not one of the OpenModel's flavors ({', '.join(names)})")


def choose_flavor(model: OpenModel, requested: str | None, node_labels: list[Mapping[str, str]] | None) -> Placement:
    """The requested flavor (or the first), falling back to the next in order while no Node matches its
    ``nodeSelector``. ``node_labels`` is ``None`` when Nodes cannot be listed: placement is then the
    requested/first flavor, unchecked. Raises ``ValueError`` for an unknown requested flavor."""
    flavors = list(model.spec.inference_config.flavors or [])
    check_flavor(model, requested)
    if not flavors:
        return Placement(
            None, "no flavors: no accelerator limits and no node selector", checked=node_labels is not None
        )
    start = [f.name for f in flavors].index(requested) if requested else 0
    candidates = flavors[start:]
    if node_labels is None:
        return Placement(
            candidates[0], f"flavor {candidates[0].name}: Nodes not visible, node selector not checked", checked=False
        )
    skipped: list[str] = []
    for flavor in candidates:
        if any(_matches(flavor.node_selector, labels) for labels in node_labels):
            why = f"flavor {flavor.name}: a Node matches {_selector_text(flavor)}"
            if skipped:
                why += " (skipped: " + "; ".join(skipped) + ")"
            return Placement(flavor, why, checked=True)
        skipped.append(f"{flavor.name}: no Node matches {_selector_text(flavor)}")
    return Placement(None, "no Node matches any flavor: " + "; ".join(skipped), checked=True)


def _selector_text(flavor: Flavor) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((flavor.node_selector or {}).items())) or "(any node)"


# ---------------------------------------------------------------------------------------- rendering


def label_value(text: str) -> str:
    """``text`` as a valid label value (<= 63 characters of ``[A-Za-z0-9_.-]``, alphanumeric ends)."""
    return _LABEL_VALUE_UNSAFE.sub("-", text)[:63].strip("-_.")


def _digest(name: str) -> str:
    """A short hash of ``name``: what keeps a name that had to be cut or changed apart from the others like it."""
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def model_name_label(name: str) -> str:
    """The ``llmaz.io/model-name`` value of an OpenModel's pods, which the Deployment and the Service select on:
    the name itself (llmaz's label) when it is a label value, else the name cut to fit with a short hash of the
    whole name. An OpenModel's name may hold 253 characters, a label value 63: two names alike in their first 63
    characters would otherwise select each other's pods."""
    if label_value(name) == name and len(name) <= LABEL_VALUE_MAX:
        return name
    digest = _digest(name)
    return f"{label_value(name)[: LABEL_VALUE_MAX - len(digest) - 1].rstrip('-_.')}-{digest}"


def service_name(name: str) -> str:
    """The Service in front of the OpenModel's pods: its name when that is a DNS-1035 label (a Service's name must
    be one), else one derived from it, starting with a letter, with a short hash of the name (so two OpenModels
    whose names read alike, ``qwen2.5-0.5b`` and ``qwen2-5-0-5b``, never share a Service)."""
    if name_error("v1", "Service", name) is None:
        return name
    digest = _digest(name)
    label = dns_label(name if name[:1].isalpha() else f"om-{name}", len(name) + 3)  # label characters, never cut
    return f"{label[: DNS1123_LABEL_MAX - len(digest) - 1].rstrip('-')}-{digest}"


def model_path(source: ModelSource) -> str:
    """Where the server finds the weights: the cache root (or the one file of a ``filename`` source), or a host path."""
    if source.scheme in ("host", "hostpath"):
        return source.path or "/"
    if source.filename:
        return f"{MODEL_MOUNT}/{source.filename}"
    return MODEL_MOUNT


def weights_volume(source: ModelSource, pvc: str | None) -> tuple[Manifest, str]:
    """The volume holding the weights and where it is mounted: the cache PVC read-only, or a host path."""
    if source.scheme in ("host", "hostpath"):
        path = source.path or "/"
        mount = path if not source.filename else path.rsplit("/", 1)[0] or "/"
        return {"name": "model-volume", "hostPath": {"path": mount, "type": "Directory"}}, mount
    return {"name": "model-volume", "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}}, MODEL_MOUNT


def labels_of(model: OpenModel, flavor: Flavor | None) -> dict[str, str]:
    """``llmaz.io/model-name``, the family name and ``ownedBy`` as labels, and the flavor served."""
    labels = {
        MODEL_NAME_LABEL: model_name_label(model.metadata.name or ""),
        FAMILY_NAME_LABEL: label_value(model.spec.family_name),
        OWNED_BY_LABEL: label_value(model.spec.owned_by or "llmaz"),
        MANAGED_BY_LABEL: MANAGED_BY,
    }
    if flavor is not None:
        labels[FLAVOR_LABEL] = label_value(flavor.name)
    return labels


def runner_resources(flavor: Flavor | None) -> Manifest:
    """The model-runner's requests and limits: llmaz's vLLM defaults (4 cpu, 8Gi, requests = limits)
    with the flavor's ``limits`` written over the same keys in both, as llmaz does."""
    flavor_limits = {k: str(v) for k, v in ((flavor.limits or {}) if flavor else {}).items()}
    resources = {**DEFAULT_RESOURCES, **flavor_limits}
    return {"requests": dict(resources), "limits": dict(resources)}


def parallelism_args(flavor: Flavor | None) -> list[str]:
    """vLLM parallelism from the flavor: its ``TP``/``PP`` params (seed 002's preset parameters), else
    tensor parallel over the GPUs one replica gets (``nvidia.com/gpu``/``amd.com/gpu`` limits), so a
    two-GPU flavor serves on both GPUs instead of one. Nothing for a single GPU or none. The flavor is one
    :func:`flavor_errors` accepts; ``ValueError`` otherwise."""
    if flavor is None:
        return []
    params = flavor.params or {}
    gpus = sum(whole_count(v) for k, v in (flavor.limits or {}).items() if k in GPU_RESOURCES)
    tensor = _param_size(params, "TP") or gpus
    pipeline = _param_size(params, "PP") or 1
    args: list[str] = []
    if tensor > 1:
        args += ["--tensor-parallel-size", str(tensor)]
    if pipeline > 1:
        args += ["--pipeline-parallel-size", str(pipeline)]
    return args


def _param_size(params: Mapping[str, str], key: str) -> int | None:
    """The ``TP``/``PP`` param ``key`` as its size (``None`` when absent); ``ValueError`` when it is not one."""
    if key not in params:
        return None
    size = parallel_size(params[key])
    if size is None:
        raise ValueError(f"params.{key}: {params[key]!r} is not an integer from 1 to {MAX_PARALLEL_SIZE}")
    return size


def render_openmodel(
    model: OpenModel,
    source: ModelSource,
    pvc: str | None,
    namespace: str,
    replicas: int,
    placement: Placement,
    image: str = DEFAULT_IMAGE,
) -> list[Manifest]:
    """The vLLM Deployment and Service serving the OpenModel in ``namespace``, named after it (the Service by
    :func:`service_name`: an OpenModel's name need not be a DNS-1035 label)."""
    name = model.metadata.name or ""
    flavor = placement.flavor
    labels = labels_of(model, flavor)
    selector = {MODEL_NAME_LABEL: labels[MODEL_NAME_LABEL], MANAGED_BY_LABEL: MANAGED_BY}
    volume, mount = weights_volume(source, pvc)
    container: Manifest = {
        "name": "model-runner",
        "image": image,
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": [
            "--model",
            model_path(source),
            "--served-model-name",
            name,
            "--host",
            "0.0.0.0",
            "--port",
            str(PORT),
            *parallelism_args(flavor),
        ],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        "volumeMounts": [
            {"name": "model-volume", "mountPath": mount, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "startupProbe": probe("/health", PORT, 10, 180),
        "readinessProbe": probe("/health", PORT, 5, 3),
        "livenessProbe": probe("/health", PORT, 15, 4),
        "lifecycle": {"preStop": {"exec": {"command": ["python3", "-c", drain_script(PORT, "vllm")]}}},
        "resources": runner_resources(flavor),
    }
    pod_spec: Manifest = {
        "containers": [container],
        "volumes": [volume, {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHARED_MEMORY_SIZE}}],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
    }
    if flavor is not None and flavor.node_selector:
        pod_spec["nodeSelector"] = dict(flavor.node_selector)
    owner = {
        "apiVersion": API_VERSION,
        "kind": OPEN_MODEL,
        "name": name,
        "uid": model.metadata.uid or "",
        "blockOwnerDeletion": True,
        "controller": True,
    }
    annotations = {PLACEMENT_ANNOTATION: placement.message}
    if model.spec.inference_config.flavors:
        annotations[FLAVORS_ANNOTATION] = ",".join(f.name for f in model.spec.inference_config.flavors)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(name),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }
    return [deployment, service]
