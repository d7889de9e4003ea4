"""Kthena-native rendering of a ``Model``: what kthena-router reads, and Kthena's own serving workload.

When the cluster serves Kthena's networking CRDs (``networking.serving.volcano.sh``), a rollout renders,
as Kthena's model controller does (``../shared/anchors/wave2.md`` B, upstream ``convert/model_server.go``,
``model_route.go``):

* a **ModelServer** per backend (named ``<model>-<backend>``): ``model`` = the served name, the engine,
  ``workloadSelector`` by the Model's uid and the backend (plus ``pdGroup`` for prefill/decode),
  ``workloadPort`` = the engine port, retry 5 attempts at a 0 s interval, ``kvConnector`` from the worker
  config's ``kv-transfer-config.kv_connector``;
* one **ModelRoute** named after the Model: rule ``default`` over every backend's ModelServer with its
  ``routeWeight``, one rule per LoRA adapter over the backends that carry it, each with the Model's
  ``modelMatch`` and (with several backends) the ``body.model`` it serves, and the adapters in
  ``loraAdapters`` (:func:`render_model_route`);
* the **runtime sidecar** in every serving pod (container ``runtime``, Kthena's image, port
  ``RUNTIME_PORT`` = 8100, ``RUNTIME_URL``, ``RUNTIME_METRICS_PATH`` from the backend env as seed 003 lists
  them): it re-exports the engine's metrics as ``kthena:*`` on 8100, where the bindings' ``metricEndpoint``
  (and Prometheus, through the usual ``prometheus.io/*`` pod annotations) read them.

Clients ask for ``spec.name`` (else ``metadata.name``): the ModelRoute's ``modelName``, the key kthena-router
looks a request's ``model`` up by, is that name as Kthena's current controller sets it (HEAD
``model-booster-controller/convert/model_route.go``, ``modelRequestName``). The engine serves the same name
(``--served-model-name``) and the ModelServer's ``model``, which the router writes into a request before
forwarding it, names it too, unless a worker config sets ``served-model-name`` (then the engine serves that and
the ModelServer says so, as upstream's ``getServedModelName``). Deployments without Kthena's networking serve
the same names, so switching modes changes nothing for clients. Where the ModelServing CRD (``workload.serving.volcano.sh``) is served too, a backend
can become one **ModelServing** (gang-scheduled groups: roles ``leader`` or ``prefill``/``decode``, with
``workerReplicas = pods - 1``) instead of Deployments; its ``replicas`` are groups, so the optimizer scales
it directly.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api.kthena import Model, ModelBackend, ModelWorker
from engine.api.registry import KTHENA_NETWORKING_API, KTHENA_WORKLOAD_API
from engine.rollout.kthena import (
    LABEL_BACKEND,
    LABEL_MODEL_UID,
    LABEL_ROLE,
    UNSUPPORTED_TYPES,
    ModelRef,
    Workload,
    backend_bounds,
    backend_name,
    child_labels,
    engine_port,
    served_model_name,
    workloads_of,
)
from engine.rollout.kthena_autoscaling import KTHENA_RUNTIME_PORT, runtime_port
from engine.rollout.workloads import FieldError
from engine.status import condition_is_true, count_at, mapping_at

Manifest = dict[str, Any]

NETWORKING_API = KTHENA_NETWORKING_API
WORKLOAD_API = KTHENA_WORKLOAD_API
RUNTIME_IMAGE = "ghcr.io/volcano-sh/runtime:latest"
RUNTIME_PORT = KTHENA_RUNTIME_PORT
RUNTIME_METRICS_PATH = "/metrics"
RETRY_ATTEMPTS = 5
MODELSERVING_GROUP_KEY = "modelserving.volcano.sh/group-name"
MODELSERVING_ROLE = "modelserving.volcano.sh/role"
ENTRY_ADDRESS = "$ENTRY_ADDRESS"
"""The leader's address a ModelServing worker pod gets from Kthena's controller (shell-expanded)."""
KV_CONNECTORS = {
    "MooncakeConnectorV1": "mooncake",
    "MooncakeConnector": "mooncake",
    "LMCacheConnectorV1": "lmcache",
    "LMCacheConnector": "lmcache",
    "NixlConnector": "nixl",
}
MAX_LORA_ADAPTERS = 10
"""The ModelRoute CRD's ``loraAdapters`` maxItems (its 16 rules hold ``default`` and one per adapter)."""


@dataclass(frozen=True)
class NativeMode:
    """What the cluster serves of Kthena: its networking CRDs (ModelServer/ModelRoute and the runtime
    sidecar), and whether backends become ModelServings instead of Deployments."""

    networking: bool = False
    model_serving: bool = False
    runtime_image: str = RUNTIME_IMAGE


# ------------------------------------------------------------------------------------- runtime sidecar


@dataclass(frozen=True)
class Runtime:
    """The runtime sidecar's settings: its port, the engine URL it reads and the engine's metrics path."""

    port: int
    url: str
    metrics_path: str


def runtime_of(backend: ModelBackend, worker: ModelWorker) -> Runtime:
    """``RUNTIME_PORT`` (8100), ``RUNTIME_URL`` (``http://localhost:<engine port>``) and
    ``RUNTIME_METRICS_PATH`` (``/metrics``) from the backend env, seed 003's names and defaults."""
    env = {e.name: e.value for e in backend.env or [] if e.value is not None}
    port = runtime_port(backend)
    url = env.get("RUNTIME_URL") or f"http://localhost:{engine_port(backend, worker)}"
    return Runtime(port, url, env.get("RUNTIME_METRICS_PATH") or RUNTIME_METRICS_PATH)


def runtime_container(ref: ModelRef, backend: ModelBackend, worker: ModelWorker, image: str) -> Manifest:
    """Kthena's ``runtime`` container: re-exports the engine's metrics as ``kthena:*`` on its port."""
    runtime = runtime_of(backend, worker)
    return {
        "name": "runtime",
        "image": image,
        "args": [
            "--port",
            str(runtime.port),
            "--engine",
            "sglang" if backend.type == "SGLang" else "vllm",
            "--engine-base-url",
            runtime.url,
            "--engine-metrics-path",
            runtime.metrics_path,
            "--pod",
            "$(POD_NAME).$(NAMESPACE)",
            "--model",
            served_model_name(ref, backend),
        ],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "ports": [{"name": "runtime", "containerPort": runtime.port, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": runtime.port},
            "periodSeconds": 5,
            "failureThreshold": 3,
            "timeoutSeconds": 5,
        },
    }


def with_runtime(template: Manifest, ref: ModelRef, backend: ModelBackend, worker: ModelWorker, image: str) -> Manifest:
    """A pod template with the runtime sidecar and the annotations Prometheus scrapes it by."""
    result = copy.deepcopy(template)
    runtime = runtime_of(backend, worker)
    spec = result.setdefault("spec", {})
    spec["containers"] = [runtime_container(ref, backend, worker, image)] + [
        c for c in spec.get("containers", []) if c.get("name") != "runtime"
    ]
    annotations = result.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.update(
        {"prometheus.io/scrape": "true", "prometheus.io/port": str(runtime.port), "prometheus.io/path": "/metrics"}
    )
    return result


# ---------------------------------------------------------------------------------------- networking


def _kv_connector(backend: ModelBackend) -> str | None:
    for worker in backend.workers:
        config = worker.config or {}
        transfer = config.get("kv-transfer-config") or config.get("kv_transfer_config") or {}
        if isinstance(transfer, str):
            try:
                transfer = json.loads(transfer)
            except ValueError:
                transfer = {}
        connector = transfer.get("kv_connector") if isinstance(transfer, dict) else None
        if connector:
            return KV_CONNECTORS.get(str(connector), "http")
    return None


def render_model_server(ref: ModelRef, backend: ModelBackend, mode: NativeMode) -> Manifest:
    """The ModelServer kthena-router reads for one backend (its pods, port, retry, P/D pairing)."""
    entry = next(w for w in workloads_of(ref, backend) if w.role in ("server", "decode"))
    selector: Manifest = {"matchLabels": {LABEL_MODEL_UID: ref.uid, LABEL_BACKEND: backend.name}}
    if backend.type == "vLLMDisaggregated":
        if mode.model_serving:
            selector["pdGroup"] = {
                "groupKey": MODELSERVING_GROUP_KEY,
                "prefillLabels": {MODELSERVING_ROLE: "prefill"},
                "decodeLabels": {MODELSERVING_ROLE: "decode"},
            }
        else:  # Deployments have no group identity: every prefill pod of the backend pairs with every decode pod
            selector["pdGroup"] = {
                "groupKey": LABEL_BACKEND,
                "prefillLabels": {LABEL_ROLE: "prefill"},
                "decodeLabels": {LABEL_ROLE: "decode"},
            }
    spec: Manifest = {
        "model": served_model_name(ref, backend),
        "inferenceEngine": "SGLang" if backend.type == "SGLang" else "vLLM",
        "workloadSelector": selector,
        "workloadPort": {"port": engine_port(backend, entry.worker)},
        "trafficPolicy": {"retry": {"attempts": RETRY_ATTEMPTS, "retryInterval": "0s"}},
    }
    connector = _kv_connector(backend)
    if connector:
        spec["kvConnector"] = {"type": connector}
    return {
        "apiVersion": NETWORKING_API,
        "kind": "ModelServer",
        "metadata": {
            "name": backend_name(ref, backend),
            "namespace": ref.namespace,
            "labels": child_labels(ref, backend),
            "ownerReferences": [ref.owner_reference()],
        },
        "spec": spec,
    }


def render_model_route(model: Model, ref: ModelRef) -> Manifest:
    """The ModelRoute named after the Model, its rules as Kthena's model controller builds them
    (registry-era ``convert/model_route.go``, ``getRulesAndLoraAdapters``) so that kthena-router, which
    takes the first rule that matches, sends each request where its model is served:

    * one backend: rule ``default`` with the Model's ``modelMatch`` over that backend (every adapter is
      on it);
    * more backends: rule ``default`` with the Model's ``modelMatch`` plus ``body.model`` = the served
      name, over every backend by ``routeWeight``; then, per LoRA adapter in name order, a rule named
      after it with the Model's ``modelMatch`` plus ``body.model`` = the adapter, over the backends
      carrying it (a rule without ``body.model`` would match the adapter's requests too and send them to
      backends without it).

    One deviation: a single backend whose ``modelMatch`` pins ``body.model`` gets the per-adapter rules
    too, where upstream's one rule would turn its adapters' requests away."""
    backends = [b for b in model.spec.backends if b.type not in UNSUPPORTED_TYPES]
    match = dict(model.spec.model_match) if model.spec.model_match else None  # engine.api.kthena.ModelMatch
    adapters = sorted({a.name for b in backends for a in b.lora_adapters or []})[:MAX_LORA_ADAPTERS]
    pinned = bool(match and isinstance(match.get("body"), dict) and "model" in match["body"])
    if len(backends) == 1 and not (pinned and adapters):
        default: Manifest = {"name": "default", "targetModels": [_target(ref, backends[0])]}
        if match:
            default["modelMatch"] = match
        rules = [default]
    else:
        rules = [
            {
                "name": "default",
                "modelMatch": _match_model(match, ref.served_name),
                "targetModels": [_target(ref, b) for b in backends],
            }
        ]
        for adapter in adapters:
            carriers = [b for b in backends if any(a.name == adapter for a in b.lora_adapters or [])]
            rules.append(
                {
                    "name": adapter,
                    "modelMatch": _match_model(match, adapter),
                    "targetModels": [_target(ref, b) for b in carriers],
                }
            )
    spec: Manifest = {"modelName": ref.served_name, "rules": rules}
    if adapters:
        spec["loraAdapters"] = adapters
    return {
        "apiVersion": NETWORKING_API,
        "kind": "ModelRoute",
        "metadata": {
            "name": ref.name,
            "namespace": ref.namespace,
            "labels": child_labels(ref),
            "ownerReferences": [ref.owner_reference()],
        },
        "spec": spec,
    }


def route_errors(model: Model) -> list[FieldError]:
    """What the ModelRoute cannot hold: more distinct LoRA adapters than its ``loraAdapters`` (maxItems 10)
    takes, so kthena-router would not know the others; the first 10 by name are routed."""
    names = sorted(
        {a.name for b in model.spec.backends if b.type not in UNSUPPORTED_TYPES for a in b.lora_adapters or []}
    )
    if len(names) <= MAX_LORA_ADAPTERS:
        return []
    return [
        FieldError(
            "spec.backends[].loraAdapters",
            f"{len(names)} distinct adapters; Kthena's ModelRoute lists at most {MAX_LORA_ADAPTERS}, so kthena-router "
            f"does not route {', '.join(names[MAX_LORA_ADAPTERS:])}",
        )
    ]


def _match_model(match: Manifest | None, name: str) -> Manifest:
    """The Model's ``modelMatch`` (headers, uri) with ``body.model`` set to ``name``: upstream's
    ``getModelMatchWithBody``."""
    result: Manifest = copy.deepcopy(match) if match else {}
    body = result.get("body")
    result["body"] = {**(body if isinstance(body, dict) else {}), "model": name}
    return result


def _target(ref: ModelRef, backend: ModelBackend) -> Manifest:
    return {
        "modelServerName": backend_name(ref, backend),
        "weight": backend.route_weight if backend.route_weight is not None else 100,
    }


# ---------------------------------------------------------------------------------------- ModelServing


def render_model_serving(
    ref: ModelRef,
    backend: ModelBackend,
    templates: Mapping[str, Manifest],
    replicas: int,
    mode: NativeMode,
) -> Manifest:
    """One ModelServing for a backend: ``replicas`` groups; a role per worker (``leader`` for a server,
    else ``prefill``/``decode``) with the worker's ``replicas`` entry pods and ``pods - 1`` ray workers.
    ``templates`` maps each workload's role (``server``, ``prefill``, ``server-worker``...) to its pod
    template, as :func:`engine.rollout.kthena_workloads.render_workload` renders it."""
    roles = []
    gang: dict[str, int] = {}
    for worker in backend.workers:
        role = worker.type or "server"
        name = "leader" if role == "server" else role
        per_group = worker.replicas if worker.replicas is not None else 1
        entry = _role_template(templates[role], ref, backend, role)
        item: Manifest = {
            "name": name,
            "replicas": per_group,
            "entryTemplate": entry,
            "workerReplicas": max((worker.pods or 1) - 1, 0),
        }
        if f"{role}-worker" in templates:
            item["workerTemplate"] = _role_template(templates[f"{role}-worker"], ref, backend, f"{role}-worker")
        roles.append(item)
        gang[name] = per_group
    # Every role's pods of a group are scheduled together, as Kthena's templates (vllm.yaml, vllm-pd.yaml) ask.
    template: Manifest = {"gangPolicy": {"minRoleReplicas": gang}, "roles": roles}
    return {
        "apiVersion": WORKLOAD_API,
        "kind": "ModelServing",
        "metadata": {
            "name": backend_name(ref, backend),
            "namespace": ref.namespace,
            "labels": child_labels(ref, backend),
            "ownerReferences": [ref.owner_reference()],
        },
        "spec": {
            "replicas": replicas,
            "recoveryPolicy": "ServingGroupRecreate",
            "rolloutStrategy": {"type": "ServingGroupRollingUpdate"},
            "template": template,
        },
    }


def _role_template(template: Manifest, ref: ModelRef, backend: ModelBackend, role: str) -> Manifest:
    """A pod template as a ModelServing role takes it: labels and annotations, and the pod spec."""
    meta = template.get("metadata") or {}
    labels = {**child_labels(ref, backend), LABEL_ROLE: role}
    result: Manifest = {"metadata": {"labels": labels}, "spec": template.get("spec") or {}}
    if meta.get("annotations"):
        result["metadata"]["annotations"] = dict(meta["annotations"])
    return result


def scale_workload(ref: ModelRef, backend: ModelBackend) -> Workload:
    """The ModelServing as a scale unit: the backend's bounds, in groups."""
    first = workloads_of(ref, backend)[0]
    low, high = backend_bounds(backend)
    return Workload(backend_name(ref, backend), "group", first.worker, low, high)


def model_serving_available(serving: Mapping[str, Any]) -> bool:
    """A ModelServing serves: its ``Available`` condition is True, else every wanted group is available."""
    if condition_is_true(serving, "Available"):
        return True
    wanted = count_at(mapping_at(serving, "spec"), "replicas")
    return wanted > 0 and count_at(mapping_at(serving, "status"), "availableReplicas") >= wanted
