"""Kthena ``Model`` rollout decisions, as pure functions: validation, workloads, autoscaling objects, status.

A ``registry.volcano.sh/v1alpha1`` Model lists backends; each backend becomes plain Kubernetes workloads
with a scale subresource (apps/v1 Deployments, since Kthena's own ModelInfer kind is not in the seeds),
a Service per workload, and the AutoscalingPolicy/Binding the optimize flow runs. The rules follow
Kthena's registry webhook and model controller (``../shared/anchors/wave2.md`` section B), with the
upstream gaps closed:

* weights are mounted at absolute paths (upstream mounts ``pvc://X`` at the relative path ``X``, #1221),
  and a ``pvc://`` model is mounted directly instead of copied (users ask for it in #1221);
* SGLang gets a Deployment running SGLang's own server (upstream has no rollout for it);
* ``Failed`` clears once the cause is fixed (upstream never clears it);
* ``scaleToZeroGracePeriod`` reaches the bindings (annotation :data:`ANNOTATION_SCALE_TO_ZERO`).

Everything here is deterministic: the I/O (cluster, caches, the vLLM HTTP API) is in
:mod:`tasks.rollout_models`, which passes in what it read.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.api.kthena import API_VERSION, MAX_REPLICAS, Model, ModelBackend, ModelWorker
from engine.api.meta import parse_duration
from engine.api.registry import KTHENA_WORKLOAD_API
from engine.api.validate import ManifestInvalid, parse_object
from engine.caches.requests import is_download_env
from engine.caches.sources import ModelSource, SourceError, from_kthena_uri, from_lora_url
from engine.optimize.bindings import ANNOTATION_SCALE_GROUPS
from engine.rollout.workloads import ANNOTATION_BASE_REVISION, FieldError, annotation, drain_script, probe
from engine.status import ConditionUpdate, set_conditions

Manifest = dict[str, Any]

# ---------------------------------------------------------------------------------------------- names

LABEL_MODEL = "registry.volcano.sh/model-name"
LABEL_BACKEND = "registry.volcano.sh/backend-name"
LABEL_MODEL_UID = "registry.volcano.sh/model-uid"
LABEL_ROLE = "registry.volcano.sh/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "modelplane"

ANNOTATION_LORA = "modelplane.io/lora-adapters"
"""JSON ``{name: artifactURL}`` of the adapters baked into the pod template."""
ANNOTATION_SCALE_TO_ZERO = "modelplane.io/scale-to-zero-grace-period"
"""On a binding: how long the recommendation must stay at 0 before its targets reach 0."""
ROUTE_KEY = "route.json"
"""Key of the route ConfigMap ``<model>-route`` holding modelMatch, served name and per-backend weights."""

CONDITION_INITIALIZED = "Initialized"
CONDITION_ACTIVE = "Active"
CONDITION_FAILED = "Failed"
REASON_CREATING = "ModelCreating"
REASON_PROCESSING = "ModelProcessing"
REASON_AVAILABLE = "ModelAvailable"
REASON_ABNORMAL = "ModelAbnormal"
REASON_INVALID = "InvalidModel"
REASON_NOT_SUPPORTED = "BackendNotSupported"
REASON_CACHE_FAILED = "CacheFailed"
REASON_HEALTHY = "ModelHealthy"

RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
RUNTIME_HF_HOME = "/hf-home"
"""Where a runtime-LoRA backend's engine keeps the adapters it downloads (an emptyDir)."""
VLLM_PORT = 8000
SGLANG_PORT = 30000
MODEL_MOUNT = "/models"
LORA_MOUNT = "/loras"
TERMINATION_GRACE_S = 300
MAX_GRACE_PERIOD_S = 1800
DEFAULT_SCALE_TO_ZERO = "30s"
DEFAULT_COST_EXPANSION = 200
MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"
RAY_PORT = 6379
RAY_INIT_TIMEOUT_S = 1200
"""How long the multi-node script's leader waits for its workers (and a worker retries joining): its
default 300 s is shorter than pulling a vLLM image onto a fresh node. Below the leader's startup budget."""
STARTUP_BUDGET_S = 10 * 180

_SINGLE_SERVER_TYPES = ("vLLM", "SGLang", "MindIE")
_UNSUPPORTED_TYPES = ("MindIE", "MindIEDisaggregated")
_WORKER_TYPES = {
    "vLLM": ("server",),
    "SGLang": ("server",),
    "MindIE": ("server",),
    "vLLMDisaggregated": ("prefill", "decode"),
    "MindIEDisaggregated": ("prefill", "decode", "controller", "coordinator"),
}
# A container image reference: [registry[:port]/]path[:tag][@digest] (distribution's grammar, simplified).
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


# ---------------------------------------------------------------------------------------- validation


def validate_model(manifest: Mapping[str, Any]) -> tuple[Model | None, list[FieldError]]:
    """The Model parsed and defaulted as Kthena's mutating webhook does, and every rule it breaks.

    Schema errors (the CRD's own validation) come first; the webhook rules are only checked on a
    Model that parses.
    """
    try:
        model = parse_object(dict(manifest))
    except ManifestInvalid as exc:
        return None, [FieldError(path, message) for path, message in exc.errors]
    assert isinstance(model, Model)
    model = apply_webhook_defaults(model)
    return model, webhook_errors(model)


def apply_webhook_defaults(model: Model) -> Model:
    """Kthena's mutating webhook: with a model-level policy, ``scaleToZeroGracePeriod`` defaults to
    30 s on every backend and ``costExpansionRatePercent`` to 200."""
    if model.spec.autoscaling_policy is None:
        return model
    spec = model.spec.model_copy(deep=True)
    if spec.cost_expansion_rate_percent is None:
        spec.cost_expansion_rate_percent = DEFAULT_COST_EXPANSION
    for backend in spec.backends:
        if backend.scale_to_zero_grace_period is None:
            backend.scale_to_zero_grace_period = DEFAULT_SCALE_TO_ZERO
    return model.model_copy(update={"spec": spec})


def webhook_errors(model: Model) -> list[FieldError]:
    """The validating webhook's rules, each failure naming its field."""
    errors: list[FieldError] = []
    spec = model.spec
    seen: set[str] = set()
    for index, backend in enumerate(spec.backends):
        path = f"spec.backends[{index}]"
        if backend.name in seen:
            errors.append(FieldError(f"{path}.name", f"duplicate backend name {backend.name!r}"))
        seen.add(backend.name)
        errors += _worker_errors(backend, path)
        errors += _replica_errors(backend, path)
        errors += _source_errors(backend, path)
    total_max = sum(b.max_replicas or 0 for b in spec.backends)
    if total_max > MAX_REPLICAS:
        errors.append(FieldError("spec.backends", f"the sum of maxReplicas ({total_max}) exceeds {MAX_REPLICAS}"))
    errors += _autoscaling_errors(model)
    return errors


def _worker_errors(backend: ModelBackend, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    allowed = _WORKER_TYPES[backend.type]
    if backend.type in _SINGLE_SERVER_TYPES and (len(backend.workers) != 1 or backend.workers[0].type != "server"):
        errors.append(
            FieldError(f"{path}.workers", f"a {backend.type} backend needs exactly one worker, of type server")
        )
    for w, worker in enumerate(backend.workers):
        if worker.type not in allowed:
            errors.append(
                FieldError(
                    f"{path}.workers[{w}].type",
                    f"{worker.type!r} is not a {backend.type} worker type (allowed: {', '.join(allowed)})",
                )
            )
        if not worker.image:
            errors.append(FieldError(f"{path}.workers[{w}].image", "required"))
        elif not _IMAGE.match(worker.image):
            errors.append(FieldError(f"{path}.workers[{w}].image", f"{worker.image!r} is not a valid image reference"))
    if backend.type == "vLLMDisaggregated":
        for role in ("prefill", "decode"):
            count = sum(1 for w in backend.workers if w.type == role)
            if count != 1:
                errors.append(
                    FieldError(
                        f"{path}.workers", f"a vLLMDisaggregated backend needs exactly one {role} worker, found {count}"
                    )
                )
    return errors


def _replica_errors(backend: ModelBackend, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    low, high = backend.min_replicas, backend.max_replicas
    if low is not None and high is not None and low > high:
        errors.append(FieldError(f"{path}.minReplicas", f"{low} is above maxReplicas {high}"))
    if backend.scale_to_zero_grace_period is not None:
        seconds = parse_duration(backend.scale_to_zero_grace_period)
        if not 0 <= seconds <= MAX_GRACE_PERIOD_S:
            errors.append(
                FieldError(f"{path}.scaleToZeroGracePeriod", f"{backend.scale_to_zero_grace_period} is outside 0s..30m")
            )
    return errors


def _source_errors(backend: ModelBackend, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not backend.model_uri:
        errors.append(FieldError(f"{path}.modelURI", "required: the weights to serve (hf://, s3:// or pvc://)"))
    else:
        try:
            from_kthena_uri(backend.model_uri, f"{path}.modelURI")
        except SourceError as exc:
            errors.append(FieldError(f"{path}.modelURI", exc.reason))
    if backend.cache_uri:
        try:
            from_kthena_uri(backend.cache_uri, f"{path}.cacheURI")
            cache_mount(backend.cache_uri)
        except SourceError as exc:
            errors.append(FieldError(f"{path}.cacheURI", exc.reason))
        except ValueError as exc:
            errors.append(FieldError(f"{path}.cacheURI", str(exc)))
    names: set[str] = set()
    for a, adapter in enumerate(backend.lora_adapters or []):
        if adapter.name in names:
            errors.append(FieldError(f"{path}.loraAdapters[{a}].name", f"duplicate adapter name {adapter.name!r}"))
        names.add(adapter.name)
        try:
            from_lora_url(adapter.artifact_url, f"{path}.loraAdapters[{a}].artifactURL")
        except SourceError as exc:
            errors.append(FieldError(f"{path}.loraAdapters[{a}].artifactURL", exc.reason))
    return errors


def _autoscaling_errors(model: Model) -> list[FieldError]:
    spec = model.spec
    errors: list[FieldError] = []
    model_level = spec.autoscaling_policy is not None
    for index, backend in enumerate(spec.backends):
        path = f"spec.backends[{index}]"
        if model_level:
            if backend.autoscaling_policy is not None:
                errors.append(
                    FieldError(
                        f"{path}.autoscalingPolicy", "cannot be set together with spec.autoscalingPolicy (model-level)"
                    )
                )
            if backend.scaling_cost is None:
                errors.append(FieldError(f"{path}.scalingCost", "required when spec.autoscalingPolicy is set"))
            if backend.min_replicas is None:
                errors.append(FieldError(f"{path}.minReplicas", "required (>= 0) when spec.autoscalingPolicy is set"))
        elif backend.autoscaling_policy is not None:
            if (backend.min_replicas or 0) < 1:
                errors.append(FieldError(f"{path}.minReplicas", "must be >= 1 with a backend-level autoscalingPolicy"))
        else:
            if backend.min_replicas != backend.max_replicas:
                errors.append(
                    FieldError(
                        f"{path}.minReplicas",
                        f"must equal maxReplicas without an autoscaling policy ({backend.min_replicas} != {backend.max_replicas})",
                    )
                )
            for field_name, value in (
                ("scalingCost", backend.scaling_cost),
                ("scaleToZeroGracePeriod", backend.scale_to_zero_grace_period),
            ):
                if value is not None:
                    errors.append(FieldError(f"{path}.{field_name}", "only allowed with spec.autoscalingPolicy"))
        if backend.max_replicas is None:
            errors.append(FieldError(f"{path}.maxReplicas", "required"))
    if model_level and sum(b.min_replicas or 0 for b in spec.backends) < 1:
        errors.append(FieldError("spec.backends", "the sum of minReplicas must be >= 1 with spec.autoscalingPolicy"))
    if not model_level and spec.cost_expansion_rate_percent is not None:
        errors.append(FieldError("spec.costExpansionRatePercent", "only allowed with spec.autoscalingPolicy"))
    return errors


def unsupported_backends(model: Model) -> list[FieldError]:
    """Backends Modelplane cannot roll out (MindIE variants), as Kthena reports them."""
    return [
        FieldError(
            f"spec.backends[{i}].type",
            f"backend {b.name!r}: {b.type} is not supported (vLLM, vLLMDisaggregated and SGLang are)",
        )
        for i, b in enumerate(model.spec.backends)
        if b.type in _UNSUPPORTED_TYPES
    ]


# ------------------------------------------------------------------------------------------- weights


@dataclass(frozen=True)
class Mount:
    """One volume the engine container mounts."""

    volume: Manifest
    mount_path: str
    read_only: bool = True


@dataclass(frozen=True)
class Weights:
    """Where a backend's weights come from in the pod: mounts, the path the server starts on, and the
    init containers that fill a user-provided cache (``cacheURI``) before the server starts."""

    mounts: tuple[Mount, ...]
    model_path: str
    init_containers: tuple[Manifest, ...] = ()


def cache_mount(cache_uri: str) -> tuple[Mount, str]:
    """The volume of a ``cacheURI`` and the cache directory inside the pod, both absolute: ``pvc://X``
    mounts claim X at ``/X`` (its sub-path ``pvc://X/d`` is the directory ``/X/d``), ``hostpath:///p`` at
    ``/p`` (upstream mounts ``pvc://X`` at the relative ``X``, its issue #1221)."""
    scheme, _, rest = cache_uri.partition("://")
    rest = rest.strip("/")
    if scheme == "pvc":
        claim = rest.split("/", 1)[0]
        if not claim:
            raise ValueError(f"{cache_uri!r}: expected pvc://CLAIM")
        return Mount(
            {"name": "cache", "persistentVolumeClaim": {"claimName": claim}}, f"/{claim}", read_only=False
        ), f"/{rest}"
    if scheme == "hostpath":
        if not rest:
            raise ValueError(f"{cache_uri!r}: expected hostpath:///PATH")
        return Mount(
            {"name": "cache", "hostPath": {"path": f"/{rest}", "type": "DirectoryOrCreate"}},
            f"/{rest}",
            read_only=False,
        ), f"/{rest}"
    raise ValueError(f"{cache_uri!r}: a cacheURI is hostpath:// or pvc://")


def needs_managed_cache(backend: ModelBackend) -> ModelSource | None:
    """The source a Modelplane-managed ModelCache must hold for this backend, or ``None`` when the weights
    are mounted directly (``pvc://`` modelURI) or downloaded into the backend's own ``cacheURI``."""
    source = from_kthena_uri(backend.model_uri or "")
    if not source.downloadable or backend.cache_uri:
        return None
    return source


def direct_weights(backend: ModelBackend, downloader_image: str) -> Weights | None:
    """Weights that need no managed cache: a ``pvc://`` model mounted read-only (no copy), or a download
    into the ``cacheURI`` at ``<cache>/<md5(modelURI)>`` (Kthena's layout) by Modelplane's downloader,
    which skips a complete download, so a restart never downloads again. ``None``: use a managed cache."""
    uri = backend.model_uri or ""
    source = from_kthena_uri(uri)
    if source.scheme == "pvc":
        volume = {"name": "weights", "persistentVolumeClaim": {"claimName": source.claim, "readOnly": True}}
        path = f"{MODEL_MOUNT}/{source.path.strip('/')}" if source.path and source.path.strip("/") else MODEL_MOUNT
        return Weights((Mount(volume, MODEL_MOUNT),), path)
    if not backend.cache_uri:
        return None
    mount, cache_dir = cache_mount(backend.cache_uri)
    target = f"{cache_dir}/{hashlib.md5(uri.encode()).hexdigest()}"
    init = {
        "name": "model-downloader",
        "image": downloader_image,
        "command": ["modelplane", "cache", "fill", source.uri, target],
        "env": downloader_env(backend),
        "envFrom": [dict(e) for e in _dump_list(backend.env_from)],
        "volumeMounts": [{"name": mount.volume["name"], "mountPath": mount.mount_path}],
    }
    return Weights((mount,), target, (_prune(init),))


def managed_weights(pvc: str) -> Weights:
    """Weights from an Available managed ModelCache: its PVC mounted read-only, files at the root."""
    return Weights(
        (Mount({"name": "weights", "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}}, MODEL_MOUNT),),
        MODEL_MOUNT,
    )


def lora_mount(name: str, pvc: str, sub_path: str | None = None) -> tuple[Mount, str]:
    """An adapter's cache PVC mounted read-only at ``/loras/<name>``, and the path the engine loads."""
    volume = {"name": f"lora-{name}", "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}}
    path = f"{LORA_MOUNT}/{name}"
    return Mount(volume, path), f"{path}/{sub_path.strip('/')}" if sub_path and sub_path.strip("/") else path


def downloader_env(backend: ModelBackend) -> list[Manifest]:
    """The backend's env entries a download needs (Hugging Face and AWS variables and Kthena's ``ENDPOINT``,
    ``ACCESS_KEY``, ``SECRET_KEY``: the same rule the warm-caches flow applies); secrets stay references,
    never values."""
    return [e for e in _dump_list(backend.env) if is_download_env(str(e.get("name", "")))]


# ------------------------------------------------------------------------------------------ rendering


@dataclass(frozen=True)
class ModelRef:
    """The identity of the Model that owns what is rendered."""

    name: str
    namespace: str
    uid: str
    served_name: str

    @classmethod
    def of(cls, model: Model) -> ModelRef:
        meta = model.metadata
        return cls(meta.name or "", meta.namespace or "default", meta.uid or "", model.spec.name or meta.name or "")

    def owner_reference(self) -> Manifest:
        """A controller owner reference to the Model (garbage collection deletes the children with it)."""
        return {
            "apiVersion": API_VERSION,
            "kind": "Model",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class Workload:
    """One Deployment of a backend: its role, the worker it runs, and its replica bounds."""

    name: str
    role: str
    worker: ModelWorker
    min_replicas: int
    max_replicas: int
    scaled: bool = True  # a scale target of the optimizer (multi-pod worker Deployments follow their leader)


def backend_name(model: ModelRef, backend: ModelBackend) -> str:
    """``<model>-<backend>``, Kthena's GetBackendResourceName."""
    return f"{model.name}-{backend.name}" if backend.name else model.name


def workloads_of(model: ModelRef, backend: ModelBackend) -> list[Workload]:
    """The Deployments a backend becomes: one ``server`` (vLLM, SGLang), or ``prefill`` + ``decode``.

    A backend replica is one serving group; a worker with ``replicas: r`` puts ``r`` pods of its role in
    every group, so its Deployment's bounds are the backend's times ``r``. A worker with ``pods > 1``
    adds a ``-worker`` Deployment of ray workers joining the leader's ray head through its Service.
    """
    base = backend_name(model, backend)
    low, high = backend.min_replicas or 0, backend.max_replicas or max(backend.min_replicas or 1, 1)
    result: list[Workload] = []
    for worker in backend.workers:
        per_group = worker.replicas if worker.replicas is not None else 1
        name = base if worker.type == "server" else f"{base}-{worker.type}"
        result.append(Workload(name, worker.type or "server", worker, low * per_group, high * per_group))
        if (worker.pods or 1) > 1:
            followers = (worker.pods - 1) * per_group
            result.append(
                Workload(
                    f"{name}-worker", f"{worker.type}-worker", worker, low * followers, high * followers, scaled=False
                )
            )
    return result


def engine_port(backend: ModelBackend, worker: ModelWorker) -> int:
    """The port the engine listens on: the worker config's ``port``, else the engine's default."""
    value = (worker.config or {}).get("port")
    if value is not None:
        return int(value)
    return SGLANG_PORT if backend.type == "SGLang" else VLLM_PORT


def config_flags(config: Mapping[str, Any] | None, skip: Iterable[str] = ()) -> list[str]:
    """The worker ``config`` as engine flags, Kthena's way: keys sorted, ``_`` -> ``-``, ``--key value``;
    an empty string gives the bare flag; objects and lists become JSON. Booleans follow vLLM's argparse
    (Kthena writes ``--key true``, which vLLM's store-true flags reject): ``true`` -> ``--key``,
    ``false`` -> ``--no-key``."""
    skipped = {k.replace("_", "-") for k in skip}
    flags: list[str] = []
    for key in sorted(config or {}):
        flag = key.replace("_", "-")
        if flag in skipped:
            continue
        value = config[key]
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        elif value == "" or value is None:
            flags.append(f"--{flag}")
        elif isinstance(value, (dict, list)):
            flags += [f"--{flag}", json.dumps(value, sort_keys=True, separators=(",", ":"))]
        else:
            flags += [f"--{flag}", str(value)]
    return flags


def engine_args(
    model: ModelRef, backend: ModelBackend, worker: ModelWorker, model_path: str, loras: Mapping[str, str]
) -> list[str]:
    """The engine command line: the server on the cached path, the worker config as flags, LoRA modules."""
    config = dict(worker.config or {})
    port = engine_port(backend, worker)
    if backend.type == "SGLang":
        args = [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            model_path,
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ]
        if "served-model-name" not in config and "served_model_name" not in config:
            args += ["--served-model-name", model.served_name]
        args += config_flags(config, skip=("port", "host", "model-path"))
        if "enable-metrics" not in config:
            args.append("--enable-metrics")
        if loras:
            args += ["--lora-paths", *[f"{name}={path}" for name, path in sorted(loras.items())]]
        return args
    args = [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_path,
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
    ]
    if "served-model-name" not in config and "served_model_name" not in config:
        args += ["--served-model-name", model.served_name]
    args += config_flags(config, skip=("port", "host", "model"))
    if loras:
        args += ["--enable-lora", "--lora-modules", *[f"{name}={path}" for name, path in sorted(loras.items())]]
    return args


def served_model_name(model: ModelRef, backend: ModelBackend) -> str:
    """What clients send as ``model``: the server (or decode) worker's ``served-model-name``, else the Model's."""
    for worker in backend.workers:
        if worker.type in ("server", "decode"):
            config = worker.config or {}
            name = config.get("served-model-name") or config.get("served_model_name")
            if name:
                return str(name)
    return model.served_name


def _dump_list(items: Iterable[Any] | None) -> list[Manifest]:
    return [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in items or []]


def _prune(obj: Manifest) -> Manifest:
    """Drop empty lists/dicts so a rendered object carries only what it sets."""
    return {k: v for k, v in obj.items() if v not in (None, [], {})}


def selector_labels(model: ModelRef, backend: ModelBackend, workload: Workload) -> dict[str, str]:
    """The immutable selector of a workload's pods."""
    return {LABEL_MODEL: model.name, LABEL_BACKEND: backend.name, LABEL_ROLE: workload.role}


def child_labels(model: ModelRef, backend: ModelBackend | None = None) -> dict[str, str]:
    """Labels on every child: which Model (and backend) it belongs to, and who manages it."""
    labels = {LABEL_MODEL: model.name, LABEL_MODEL_UID: model.uid, LABEL_MANAGED_BY: MANAGED_BY}
    if backend is not None:
        labels[LABEL_BACKEND] = backend.name
    return labels


def runtime_lora_enabled(backend: ModelBackend) -> bool:
    """A vLLM backend whose env allows adapters to be loaded at runtime (``VLLM_ALLOW_RUNTIME_LORA_UPDATING=true``)."""
    env = {e.name: e.value for e in backend.env or []}
    return backend.type == "vLLM" and str(env.get(RUNTIME_LORA_ENV, "")).lower() == "true"


def _env(backend: ModelBackend, *, offline: bool) -> list[Manifest]:
    """The engine's env: the backend's, the pod identity, and ``HF_HUB_OFFLINE=1`` (the weights are on
    local storage: never fetch from a hub at start-up). A backend that loads LoRA adapters at runtime
    is not offline: vLLM resolves a loaded adapter's Hugging Face repo id with ``snapshot_download``,
    which the offline switch turns into ``LocalEntryNotFoundError``; its downloads land in
    :data:`RUNTIME_HF_HOME` (an emptyDir) and the base model still loads from its local path."""
    env = [e for e in _dump_list(backend.env)]
    names = {e.get("name") for e in env}
    extra = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    if runtime_lora_enabled(backend):
        extra += [{"name": "HF_HOME", "value": RUNTIME_HF_HOME}]
    elif offline:
        extra += [{"name": "HF_HUB_OFFLINE", "value": "1"}]
    return env + [e for e in extra if e["name"] not in names]


def render_workload(
    model: ModelRef,
    backend: ModelBackend,
    workload: Workload,
    weights: Weights,
    loras: Mapping[str, tuple[Mount, str]],
    replicas: int,
    leader_service: str | None = None,
) -> Manifest:
    """One apps/v1 Deployment of a backend (replicas are the caller's: the optimizer owns them once created)."""
    worker = workload.worker
    port = engine_port(backend, worker)
    engine = "sglang" if backend.type == "SGLang" else "vllm"
    mounts = list(weights.mounts) + [mount for mount, _ in loras.values()]
    args = engine_args(model, backend, worker, weights.model_path, {name: path for name, (_, path) in loras.items()})
    is_follower = workload.role.endswith("-worker")
    if (worker.pods or 1) > 1:
        command = ["bash", "-c", _multi_node_script(args, worker, leader_service, follower=is_follower)]
    else:
        command = args
    container: Manifest = {
        "name": "engine",
        "image": worker.image,
        "command": command[:1],
        "args": command[1:],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": _env(backend, offline=True),
        "envFrom": _dump_list(backend.env_from),
        "resources": worker.resources.model_dump(by_alias=True, exclude_none=True, mode="json")
        if worker.resources
        else {},
        "volumeMounts": [{"name": m.volume["name"], "mountPath": m.mount_path, "readOnly": m.read_only} for m in mounts]
        + [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if runtime_lora_enabled(backend):
        mounts.append(Mount({"name": "hf-home", "emptyDir": {}}, RUNTIME_HF_HOME, read_only=False))
        container["volumeMounts"].append({"name": "hf-home", "mountPath": RUNTIME_HF_HOME})
    if is_follower:  # Ready once the ray head it joins answers (the leader is Ready only when vLLM serves)
        container["readinessProbe"] = {
            "exec": {"command": ["bash", "-c", f"ray status --address={leader_service}:{RAY_PORT}"]},
            "periodSeconds": 10,
            "failureThreshold": 3,
            "timeoutSeconds": 10,
        }
    else:
        container.update(
            startupProbe=probe("/health", port, 10, STARTUP_BUDGET_S // 10),
            readinessProbe=probe("/health", port, 5, 3),
            livenessProbe=probe("/health", port, 15, 4),
            lifecycle={"preStop": {"exec": {"command": ["python3", "-c", drain_script(port, engine)]}}},
        )
    pod_spec: Manifest = {
        "initContainers": list(weights.init_containers),
        "containers": [_prune(container)],
        "volumes": [m.volume for m in mounts] + [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        "affinity": worker.affinity or {},
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
    }
    labels = {**child_labels(model, backend), **selector_labels(model, backend, workload)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": workload.name,
            "namespace": model.namespace,
            "labels": labels,
            "annotations": {
                ANNOTATION_LORA: json.dumps(
                    {n: u for n, u in _lora_urls(backend).items() if n in loras}, sort_keys=True
                )
            }
            if loras
            else {},
            "ownerReferences": [model.owner_reference()],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(model, backend, workload)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": labels}, "spec": _prune(pod_spec)},
        },
    }


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w@%+=:,./-]+", arg) else "'" + arg.replace("'", "'\"'\"'") + "'"


def _multi_node_script(args: list[str], worker: ModelWorker, ray_host: str | None, *, follower: bool) -> str:
    """A ray cluster of ``pods`` pods per group through vLLM's ``multi-node-serving.sh``: ``leader`` starts
    the head on :data:`RAY_PORT` and waits for ``pods`` nodes, then the server starts with the ray executor
    (as Kthena does); ``worker`` joins the head. The script dials ``$ray_address:$ray_port`` itself, so
    ``--ray_address`` is the host alone (the leader's ray Service) and the port goes in ``--ray_port``."""
    timeout = f"--ray_init_timeout={RAY_INIT_TIMEOUT_S}"
    if follower:
        return f"{MULTI_NODE_SCRIPT} worker --ray_address={ray_host} --ray_port={RAY_PORT} {timeout}"
    server = " ".join(_quote(a) for a in [*args, "--distributed-executor-backend", "ray"])
    return (
        f"{MULTI_NODE_SCRIPT} leader --ray_port={RAY_PORT} --ray_cluster_size={worker.pods} {timeout} "
        f"--num-gpus={worker_gpus(worker)} && {server}"
    )


def worker_gpus(worker: ModelWorker) -> int:
    """Accelerators one pod of the worker asks for (``nvidia.com/gpu`` + ``huawei.com/ascend-1980``)."""
    resources = worker.resources
    amounts = {**((resources.limits or {}) if resources else {}), **((resources.requests or {}) if resources else {})}
    return sum(int(str(amounts.get(k, 0))) for k in ("nvidia.com/gpu", "huawei.com/ascend-1980"))


def ray_service_name(workload_name: str) -> str:
    """The headless Service ray workers join a multi-node leader through."""
    return f"{workload_name}-ray"


def render_ray_service(model: ModelRef, backend: ModelBackend, workload: Workload) -> Manifest:
    """A headless Service on the leader pods' ray port that publishes not-ready addresses: the leader is
    Ready only once vLLM serves, which needs the workers to have joined first."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": ray_service_name(workload.name),
            "namespace": model.namespace,
            "labels": child_labels(model, backend),
            "ownerReferences": [model.owner_reference()],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(model, backend, workload),
            "ports": [{"name": "ray", "port": RAY_PORT, "targetPort": RAY_PORT, "protocol": "TCP"}],
        },
    }


def render_service(model: ModelRef, backend: ModelBackend, workload: Workload) -> Manifest:
    """A ClusterIP Service in front of a workload's pods, named like it (the router's endpoint)."""
    port = engine_port(backend, workload.worker)
    ports = [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": workload.name,
            "namespace": model.namespace,
            "labels": child_labels(model, backend),
            "ownerReferences": [model.owner_reference()],
        },
        "spec": {"type": "ClusterIP", "selector": selector_labels(model, backend, workload), "ports": ports},
    }


def _lora_urls(backend: ModelBackend) -> dict[str, str]:
    return {a.name: a.artifact_url for a in backend.lora_adapters or []}


# --------------------------------------------------------------------------------------- autoscaling


MODEL_SERVING_API = KTHENA_WORKLOAD_API
KTHENA_RUNTIME_PORT = 8100
"""The Kthena runtime sidecar's default port (seed 003's ``RUNTIME_PORT``, MetricEndpoint's default)."""


def _scale_target(workload: Workload, port: int, model_serving: bool = False) -> Manifest:
    api, kind = (MODEL_SERVING_API, "ModelServing") if model_serving else ("apps/v1", "Deployment")
    return {
        "targetRef": {"apiVersion": api, "kind": kind, "name": workload.name},
        "metricEndpoint": {"uri": "/metrics", "port": port},
    }


def runtime_port(backend: ModelBackend) -> int:
    """The runtime sidecar's port: the backend env's ``RUNTIME_PORT``, else 8100."""
    env = {e.name: e.value for e in backend.env or [] if e.value is not None}
    return int(env.get("RUNTIME_PORT") or KTHENA_RUNTIME_PORT)


@dataclass(frozen=True)
class ScaleUnit:
    """What one binding param scales: a workload, or a backend's serving group (P/D roles, a multi-node
    leader and its ray workers) through its first workload, with bounds in groups."""

    target: Workload
    port: int
    min_replicas: int
    max_replicas: int
    members: tuple[tuple[str, int, bool], ...] = ()  # (workload, replicas per group, serves metrics)


def scale_units(
    ref: ModelRef, backend: ModelBackend, *, model_serving: bool = False, runtime: bool = False
) -> list[ScaleUnit]:
    """The scale units of a backend. A backend of several workloads is one group, as Kthena scales a
    ModelServing group: ``minReplicas``..``maxReplicas`` groups, each of ``replicas`` pods per role (and
    ``(pods - 1) x replicas`` ray workers), so a declared prefill:decode ratio holds at any total. With
    ``model_serving`` the unit is the backend's ModelServing (its replicas are groups); with ``runtime``
    the metrics are the runtime sidecar's (``kthena:*`` on ``RUNTIME_PORT``)."""
    workloads = workloads_of(ref, backend)
    if model_serving or runtime:
        port = runtime_port(backend) if runtime else engine_port(backend, workloads[0].worker)
        if model_serving:
            low, high = backend.min_replicas or 0, backend.max_replicas or max(backend.min_replicas or 1, 1)
            unit = Workload(backend_name(ref, backend), "group", workloads[0].worker, low, max(high, 1))
            return [ScaleUnit(unit, port, low, max(high, 1))]
        return [ScaleUnit(u.target, port, u.min_replicas, u.max_replicas, u.members) for u in scale_units(ref, backend)]
    if len(workloads) == 1:
        w = workloads[0]
        return [ScaleUnit(w, engine_port(backend, w.worker), w.min_replicas, max(w.max_replicas, 1))]
    low, high = backend.min_replicas or 0, backend.max_replicas or max(backend.min_replicas or 1, 1)
    members = []
    for w in workloads:
        per_group = w.worker.replicas if w.worker.replicas is not None else 1
        if not w.scaled:
            per_group *= (w.worker.pods or 1) - 1
        members.append((w.name, max(per_group, 1), w.scaled))
    first = workloads[0]
    return [ScaleUnit(first, engine_port(backend, first.worker), low, max(high, 1), tuple(members))]


def _groups_annotation(units: Iterable[ScaleUnit]) -> dict[str, str]:
    groups = {
        u.target.name: [{"name": n, "perGroup": per, "serves": serves} for n, per, serves in u.members]
        for u in units
        if u.members
    }
    return {ANNOTATION_SCALE_GROUPS: json.dumps(groups, sort_keys=True)} if groups else {}


def render_autoscaling(
    model: Model, ref: ModelRef, *, model_serving: bool = False, runtime: bool = False
) -> list[Manifest]:
    """AutoscalingPolicy + AutoscalingPolicyBinding objects, as Kthena's controller builds them, targeting
    the Deployments: a model-level policy gives one binding with ``optimizerConfiguration`` over every
    backend (cost = ``scalingCost`` per backend replica); a backend-level policy gives a policy named
    after the backend and one binding with ``scalingConfiguration``. A backend of several workloads is
    scaled as one group (:func:`scale_units`, annotation ``modelplane.io/scale-groups``). The backends'
    ``scaleToZeroGracePeriod`` (the longest, for a model-level binding) is the binding annotation
    :data:`ANNOTATION_SCALE_TO_ZERO`."""
    spec = model.spec
    objects: list[Manifest] = []
    supported = [b for b in spec.backends if b.type not in _UNSUPPORTED_TYPES]
    if spec.autoscaling_policy is not None:
        params, units = [], []
        for backend in supported:
            for unit in scale_units(ref, backend, model_serving=model_serving, runtime=runtime):
                units.append(unit)
                params.append(
                    {
                        "target": _scale_target(unit.target, unit.port, model_serving),
                        "minReplicas": unit.min_replicas,
                        "maxReplicas": unit.max_replicas,
                        "cost": backend.scaling_cost or 0,
                    }
                )
        if params:
            graces = [parse_duration(b.scale_to_zero_grace_period) for b in supported if b.scale_to_zero_grace_period]
            objects.append(
                _policy(
                    ref,
                    ref.name,
                    spec.autoscaling_policy.model_dump(by_alias=True, exclude_none=True, mode="json"),
                    None,
                )
            )
            binding_spec = {
                "policyRef": {"name": ref.name},
                "optimizerConfiguration": {
                    "params": params,
                    "costExpansionRatePercent": spec.cost_expansion_rate_percent or DEFAULT_COST_EXPANSION,
                },
            }
            objects.append(
                _binding(ref, ref.name, binding_spec, None, max(graces) if graces else None, _groups_annotation(units))
            )
        return objects
    for backend in supported:
        if backend.autoscaling_policy is None:
            continue
        policy_name = backend_name(ref, backend)
        objects.append(
            _policy(
                ref,
                policy_name,
                backend.autoscaling_policy.model_dump(by_alias=True, exclude_none=True, mode="json"),
                backend,
            )
        )
        grace = parse_duration(backend.scale_to_zero_grace_period) if backend.scale_to_zero_grace_period else None
        for unit in scale_units(ref, backend, model_serving=model_serving, runtime=runtime):
            binding_spec = {
                "policyRef": {"name": policy_name},
                "scalingConfiguration": {
                    "target": _scale_target(unit.target, unit.port, model_serving),
                    "minReplicas": unit.min_replicas,
                    "maxReplicas": unit.max_replicas,
                },
            }
            objects.append(_binding(ref, policy_name, binding_spec, backend, grace, _groups_annotation([unit])))
    return objects


def _policy(ref: ModelRef, name: str, spec: Manifest, backend: ModelBackend | None) -> Manifest:
    return {
        "apiVersion": API_VERSION,
        "kind": "AutoscalingPolicy",
        "metadata": {
            "name": name,
            "namespace": ref.namespace,
            "labels": child_labels(ref, backend),
            "ownerReferences": [ref.owner_reference()],
        },
        "spec": spec,
    }


def _binding(
    ref: ModelRef,
    name: str,
    spec: Manifest,
    backend: ModelBackend | None,
    grace_s: float | None,
    extra: Mapping[str, str] | None = None,
) -> Manifest:
    annotations = {ANNOTATION_SCALE_TO_ZERO: f"{int(grace_s)}s"} if grace_s is not None else {}
    annotations.update(extra or {})
    meta: Manifest = {
        "name": name,
        "namespace": ref.namespace,
        "labels": child_labels(ref, backend),
        "ownerReferences": [ref.owner_reference()],
    }
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": "AutoscalingPolicyBinding", "metadata": meta, "spec": spec}


def render_route(model: Model, ref: ModelRef) -> Manifest:
    """The route a router needs, recorded in a ConfigMap ``<model>-route`` (key :data:`ROUTE_KEY`):
    ``modelMatch``, and per backend its served name, Service, port, ``routeWeight`` and LoRA names
    (Kthena's ModelRoute content; its kind is not in the seeds)."""
    backends = []
    for backend in model.spec.backends:
        if backend.type in _UNSUPPORTED_TYPES:
            continue
        entry = [w for w in workloads_of(ref, backend) if w.role in ("server", "decode")][0]
        backends.append(
            {
                "name": backend.name,
                "servedModelName": served_model_name(ref, backend),
                "service": entry.name,
                "port": engine_port(backend, entry.worker),
                "weight": backend.route_weight if backend.route_weight is not None else 100,
                "loraAdapters": sorted(_lora_urls(backend)),
            }
        )
    route = {"model": ref.served_name, "modelMatch": model.spec.model_match, "backends": backends}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{ref.name}-route",
            "namespace": ref.namespace,
            "labels": child_labels(ref),
            "ownerReferences": [ref.owner_reference()],
        },
        "data": {ROUTE_KEY: json.dumps(route, sort_keys=True, indent=2)},
    }


# ------------------------------------------------------------------------------------ change detection


def desired_replicas(workload: Workload, live: Mapping[str, Any] | None, autoscaled: bool) -> int:
    """Replicas to write: the minimum on creation (Kthena); afterwards the live value (the optimizer's)
    kept inside the bounds, or exactly the fixed size when nothing autoscales the backend."""
    if not autoscaled:
        return workload.min_replicas
    if live is None:
        return workload.min_replicas
    current = int(((live.get("spec") or {}).get("replicas")) or 0)
    return min(max(current, workload.min_replicas), max(workload.max_replicas, workload.min_replicas))


def is_autoscaled(model: Model, backend: ModelBackend) -> bool:
    return model.spec.autoscaling_policy is not None or backend.autoscaling_policy is not None


# -------------------------------------------------------------------------------------- runtime LoRA


@dataclass(frozen=True)
class LoraChange:
    """A LoRA-only change applied on running vLLM pods instead of a rollout."""

    unload: tuple[str, ...]
    load: tuple[tuple[str, str], ...]  # (lora_name, lora_path)


def runtime_lora_change(backend: ModelBackend, live: Mapping[str, Any] | None, base_revision: str) -> LoraChange | None:
    """The adapters to unload/load on running pods when only ``loraAdapters`` changed, the backend is
    vLLM, its env allows runtime updates (``VLLM_ALLOW_RUNTIME_LORA_UPDATING=true``) and the live
    Deployment differs from the desired one in nothing but its adapters; else ``None`` (roll out).

    New adapters are loaded by their Hugging Face repo id (vLLM fetches it itself); an adapter from
    another source needs its cache mounted, so it takes a rollout.
    """
    if not runtime_lora_enabled(backend) or live is None or annotation(live, ANNOTATION_BASE_REVISION) != base_revision:
        return None
    baked = json.loads(annotation(live, ANNOTATION_LORA) or "{}")
    wanted = _lora_urls(backend)
    if baked == wanted:
        return None
    unload = tuple(sorted(n for n, url in baked.items() if wanted.get(n) != url))
    load: list[tuple[str, str]] = []
    for name, url in sorted(wanted.items()):
        if baked.get(name) == url:
            continue
        source = from_lora_url(url)
        if source.scheme != "hf" or not source.repo:
            return None
        load.append((name, source.repo))
    return LoraChange(unload, tuple(load))


# ------------------------------------------------------------------------------------------- status


@dataclass
class BackendState:
    """What the rollout observed for one backend."""

    name: str
    replicas: int = 0
    available: bool = False
    waiting: str | None = None


@dataclass
class Failure:
    reason: str
    message: str


def deployment_available(deployment: Mapping[str, Any]) -> bool:
    """A Deployment serves: its ``Available`` condition is True (the Deployment controller's verdict)."""
    conditions = (deployment.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)


def model_status(
    old: Mapping[str, Any],
    generation: int | None,
    now: datetime,
    backends: list[BackendState],
    failure: Failure | None,
) -> dict[str, Any]:
    """The Model's status: ``Initialized`` once, ``Active`` when every backend is available, ``Failed``
    with its reason (set back to False once the cause is fixed), ``backendStatuses`` and
    ``observedGeneration``."""
    conditions = list(old.get("conditions") or [])
    updates = [ConditionUpdate(CONDITION_INITIALIZED, "True", REASON_CREATING, "Model initialized")]
    if failure is not None:
        updates.append(ConditionUpdate(CONDITION_FAILED, "True", failure.reason, failure.message))
        updates.append(ConditionUpdate(CONDITION_ACTIVE, "False", failure.reason, failure.message))
    else:
        if any(c.get("type") == CONDITION_FAILED for c in conditions):
            updates.append(ConditionUpdate(CONDITION_FAILED, "False", REASON_HEALTHY, "The model has no failure"))
        waiting = [f"{b.name}: {b.waiting or 'not available yet'}" for b in backends if not b.available]
        if backends and not waiting:
            updates.append(ConditionUpdate(CONDITION_ACTIVE, "True", REASON_AVAILABLE, "Model is ready"))
        else:
            updates.append(
                ConditionUpdate(
                    CONDITION_ACTIVE, "False", REASON_PROCESSING, "Model not ready yet: " + "; ".join(waiting)
                )
            )
    initialized = next((c for c in conditions if c.get("type") == CONDITION_INITIALIZED), None)
    if initialized is not None:
        updates = updates[1:]  # Initialized is set once and then left alone
    status: dict[str, Any] = dict(old)
    status["conditions"] = set_conditions(conditions, updates, now, generation)
    status["backendStatuses"] = [{"name": b.name, "replicas": b.replicas} for b in backends]
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def failure_of(errors: list[FieldError], reason: str) -> Failure:
    return Failure(reason, "; ".join(str(e) for e in errors))
