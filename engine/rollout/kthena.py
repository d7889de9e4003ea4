"""Kthena ``Model`` rollout: what a Model's children are called, labelled and made of.

A ``registry.volcano.sh/v1alpha1`` Model lists backends; each backend becomes plain Kubernetes workloads
with a scale subresource (apps/v1 Deployments, since Kthena's own ModelInfer kind is not in the seeds),
a Service per workload, and the AutoscalingPolicy/Binding the optimize flow runs. The rules follow
Kthena's registry webhook and model controller (``../shared/anchors/wave2.md`` section B), with the
upstream gaps closed:

* weights are mounted at absolute paths (upstream mounts ``pvc://X`` at the relative path ``X``, #1221),
  and a ``pvc://`` model is mounted directly instead of copied (users ask for it in #1221);
* SGLang gets a Deployment running SGLang's own server (upstream has no rollout for it);
* ``Failed`` clears once the cause is fixed (upstream never clears it);
* ``scaleToZeroGracePeriod`` reaches the bindings (annotation
  :data:`engine.rollout.kthena_autoscaling.ANNOTATION_SCALE_TO_ZERO`).

This module decides the identity every rendering shares: the owning Model (:class:`ModelRef`), the
workloads a backend becomes (:func:`workloads_of`), their names, ports and labels. The decisions built on
it live beside it, one concern each:

* :mod:`engine.rollout.kthena_validation`: the Model parsed, defaulted and checked as Kthena's webhooks do;
* :mod:`engine.rollout.kthena_weights`: where a backend's weights come from in the pod;
* :mod:`engine.rollout.kthena_workloads`: the Deployments, Services and route, and runtime LoRA changes;
* :mod:`engine.rollout.kthena_autoscaling`: the AutoscalingPolicy/Binding objects and replica ownership;
* :mod:`engine.rollout.kthena_status`: the Model's status;
* :mod:`engine.rollout.kthena_plan`: every child of a backend and of the Model, and the backend states, in one
  call each (what :mod:`tasks.rollout_models` asks once it has read the cluster).

Everything here is deterministic: the I/O (cluster, caches, the vLLM HTTP API) is in
:mod:`tasks.rollout_models`, which passes in what it read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.api.kthena import API_VERSION, Model, ModelBackend, ModelWorker
from engine.api.registry import MODEL

Manifest = dict[str, Any]

LABEL_MODEL = "registry.volcano.sh/model-name"
LABEL_BACKEND = "registry.volcano.sh/backend-name"
LABEL_MODEL_UID = "registry.volcano.sh/model-uid"
LABEL_ROLE = "registry.volcano.sh/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "modelplane"

VLLM_PORT = 8000
SGLANG_PORT = 30000
UNSUPPORTED_TYPES = ("MindIE", "MindIEDisaggregated")
"""Backend types Modelplane does not roll out (Kthena reports them ``BackendNotSupported``)."""


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
            "kind": MODEL,
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
    per_group: int = 1  # pods per serving group


def backend_name(model: ModelRef, backend: ModelBackend) -> str:
    """``<model>-<backend>``, Kthena's GetBackendResourceName."""
    return f"{model.name}-{backend.name}" if backend.name else model.name


def backend_bounds(backend: ModelBackend) -> tuple[int, int]:
    """The backend's ``minReplicas``..``maxReplicas`` in serving groups (``maxReplicas`` defaults to the
    minimum, at least 1)."""
    low = backend.min_replicas or 0
    return low, max(backend.max_replicas or max(low, 1), 1)


def is_multi_node(backend: ModelBackend) -> bool:
    """Whether a worker of the backend spans several pods (a ray head and ``pods - 1`` ray workers)."""
    return any((w.pods or 1) > 1 for w in backend.workers)


def deployment_bounds(backend: ModelBackend) -> tuple[int, int]:
    """The backend's bounds in groups as Deployments run it: a multi-node backend is held at one group.

    Its ray workers find their head through one headless Service in front of the leader Deployment, so a
    second head (a second group, or a worker's ``replicas > 1``) would split the ray workers between heads
    that each wait for the whole group (``--ray_cluster_size``). A ModelServing has one entry address per
    group and scales groups instead (:func:`multi_node_hold`)."""
    low, high = backend_bounds(backend)
    return (min(low, 1), 1) if is_multi_node(backend) else (low, high)


def multi_node_hold(backend: ModelBackend) -> str | None:
    """Why Deployments run fewer groups (or heads) than the backend asks for, or ``None``."""
    if not is_multi_node(backend):
        return None
    low, high = backend_bounds(backend)
    heads = max((w.replicas if w.replicas is not None else 1) for w in backend.workers if (w.pods or 1) > 1)
    if high <= 1 and heads <= 1:
        return None
    return (
        f"backend {backend.name}: held at one serving group of one ray head (minReplicas {low}, maxReplicas "
        f"{high}, {heads} head(s) per group asked): with Deployments every ray worker joins the head behind one "
        "Service, so a second head would split them; --workload ModelServing scales multi-node groups"
    )


def workloads_of(model: ModelRef, backend: ModelBackend) -> list[Workload]:
    """The Deployments a backend becomes: one ``server`` (vLLM, SGLang), or ``prefill`` + ``decode``.

    A backend replica is one serving group; a worker with ``replicas: r`` puts ``r`` pods of its role in
    every group, so its Deployment's bounds are the backend's times ``r``. A worker with ``pods > 1``
    adds a ``-worker`` Deployment of ray workers joining the leader's ray head through its Service; such a
    backend runs one group with one head (:func:`deployment_bounds`).
    """
    base = backend_name(model, backend)
    low, high = deployment_bounds(backend)
    result: list[Workload] = []
    for worker in backend.workers:
        per_group = _per_group(backend, worker)
        name = base if worker.type == "server" else f"{base}-{worker.type}"
        result.append(
            Workload(name, worker.type or "server", worker, low * per_group, high * per_group, per_group=per_group)
        )
        if (worker.pods or 1) > 1:
            followers = ((worker.pods or 1) - 1) * per_group
            result.append(
                Workload(
                    f"{name}-worker",
                    f"{worker.type}-worker",
                    worker,
                    low * followers,
                    high * followers,
                    scaled=False,
                    per_group=followers,
                )
            )
    return result


def _per_group(backend: ModelBackend, worker: ModelWorker) -> int:
    """Pods of a worker's role per group as Deployments run it: its ``replicas``, one head if multi-node."""
    if is_multi_node(backend) and (worker.pods or 1) > 1:
        return 1
    return worker.replicas if worker.replicas is not None else 1


def engine_port(backend: ModelBackend, worker: ModelWorker) -> int:
    """The port the engine listens on: the worker config's ``port``, else the engine's default."""
    value = (worker.config or {}).get("port")
    if value is not None:
        return int(value)
    return SGLANG_PORT if backend.type == "SGLang" else VLLM_PORT


def served_model_name(model: ModelRef, backend: ModelBackend) -> str:
    """What clients send as ``model``: the server (or decode) worker's ``served-model-name``, else the Model's."""
    for worker in backend.workers:
        if worker.type in ("server", "decode"):
            config = worker.config or {}
            name = config.get("served-model-name") or config.get("served_model_name")
            if name:
                return str(name)
    return model.served_name


def selector_labels(model: ModelRef, backend: ModelBackend, workload: Workload) -> dict[str, str]:
    """The immutable selector of a workload's pods."""
    return {LABEL_MODEL: model.name, LABEL_BACKEND: backend.name, LABEL_ROLE: workload.role}


def child_labels(model: ModelRef, backend: ModelBackend | None = None) -> dict[str, str]:
    """Labels on every child: which Model (and backend) it belongs to, and who manages it."""
    labels = {LABEL_MODEL: model.name, LABEL_MODEL_UID: model.uid, LABEL_MANAGED_BY: MANAGED_BY}
    if backend is not None:
        labels[LABEL_BACKEND] = backend.name
    return labels


def dump_list(items: Iterable[Any] | None) -> list[Manifest]:
    return [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in items or []]


def prune(obj: Manifest) -> Manifest:
    """Drop empty lists/dicts so a rendered object carries only what it sets."""
    return {k: v for k, v in obj.items() if v not in (None, [], {})}
