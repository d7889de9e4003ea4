"""The serving children of a Kthena ``Model``: Deployments, Services, the route, and runtime LoRA changes.

Decides what each backend workload runs (the engine command line from the worker config, Kthena's way, with
vLLM's boolean flags fixed), its probes, graceful drain and multi-node ray wiring, the Services in front of
it, the route a router needs, and when a LoRA-only change is applied on running vLLM pods instead of a
rollout. Replicas are the caller's (:mod:`engine.rollout.kthena_autoscaling` decides them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.api.kthena import Model, ModelBackend, ModelWorker
from engine.caches.source_fields import from_lora_url
from engine.rollout.kthena import (
    UNSUPPORTED_TYPES,
    Manifest,
    ModelRef,
    Workload,
    child_labels,
    dump_list,
    engine_port,
    prune,
    selector_labels,
    served_model_name,
    workloads_of,
)
from engine.rollout.kthena_weights import Mount, Weights
from engine.rollout.workloads import ANNOTATION_BASE_REVISION, annotation, drain_script, probe, whole_count

ANNOTATION_LORA = "modelplane.io/lora-adapters"
"""JSON ``{name: artifactURL}`` of the adapters baked into the pod template."""
ROUTE_KEY = "route.json"
"""Key of the route ConfigMap ``<model>-route`` holding modelMatch, served name and per-backend weights."""

RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
HUB_OFFLINE_ENV = "HF_HUB_OFFLINE"
RUNTIME_HF_HOME = "/hf-home"
"""Where a runtime-LoRA backend's engine keeps the adapters it downloads (an emptyDir)."""
TERMINATION_GRACE_S = 300
MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"
RAY_PORT = 6379
RAY_INIT_TIMEOUT_S = 1200
"""How long the multi-node script's leader waits for its workers (and a worker retries joining): its
default 300 s is shorter than pulling a vLLM image onto a fresh node. Below the leader's startup budget."""
STARTUP_BUDGET_S = 10 * 180


def config_flags(config: Mapping[str, Any] | None, skip: Iterable[str] = ()) -> list[str]:
    """The worker ``config`` as engine flags, Kthena's way: keys sorted, ``_`` -> ``-``, ``--key value``;
    an empty string gives the bare flag; objects and lists become JSON. Booleans follow vLLM's argparse
    (Kthena writes ``--key true``, which vLLM's store-true flags reject): ``true`` -> ``--key``,
    ``false`` -> ``--no-key``."""
    skipped = {k.replace("_", "-") for k in skip}
    values = config or {}
    flags: list[str] = []
    for key in sorted(values):
        flag = key.replace("_", "-")
        if flag in skipped:
            continue
        value = values[key]
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
    sglang = backend.type == "SGLang"
    module, model_flag = (
        ("sglang.launch_server", "model-path") if sglang else ("vllm.entrypoints.openai.api_server", "model")
    )
    args = ["python3", "-m", module, f"--{model_flag}", model_path, "--host", "0.0.0.0", "--port", str(port)]
    if "served-model-name" not in config and "served_model_name" not in config:
        args += ["--served-model-name", model.served_name]
    args += config_flags(config, skip=("port", "host", model_flag))
    if sglang and "enable-metrics" not in config:
        args.append("--enable-metrics")
    if loras:
        modules = [f"{name}={path}" for name, path in sorted(loras.items())]
        args += ["--lora-paths", *modules] if sglang else ["--enable-lora", "--lora-modules", *modules]
    return args


def runtime_lora_enabled(backend: ModelBackend) -> bool:
    """A vLLM backend whose env allows adapters to be loaded at runtime (``VLLM_ALLOW_RUNTIME_LORA_UPDATING=true``)."""
    env = {e.name: e.value for e in backend.env or []}
    return backend.type == "vLLM" and str(env.get(RUNTIME_LORA_ENV, "")).lower() == "true"


def hub_offline(backend: ModelBackend) -> bool:
    """A backend whose own env sets ``HF_HUB_OFFLINE`` (true as huggingface_hub reads it: 1, true, yes, on):
    its engine must never reach a hub, so an adapter cannot be fetched by the engine from its repo id."""
    env = {e.name: e.value for e in backend.env or []}
    return str(env.get(HUB_OFFLINE_ENV, "")).strip().lower() in {"1", "true", "yes", "on"}


def _env(backend: ModelBackend, *, offline: bool) -> list[Manifest]:
    """The engine's env: the backend's, the pod identity, and ``HF_HUB_OFFLINE=1`` (the weights are on
    local storage: never fetch from a hub at start-up). A backend that loads LoRA adapters at runtime
    is not offline: vLLM resolves a loaded adapter's Hugging Face repo id with ``snapshot_download``,
    which the offline switch turns into ``LocalEntryNotFoundError``; its downloads land in
    :data:`RUNTIME_HF_HOME` (an emptyDir) and the base model still loads from its local path."""
    env = [e for e in dump_list(backend.env)]
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
        "envFrom": dump_list(backend.env_from),
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
        "containers": [prune(container)],
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
            "template": {"metadata": {"labels": labels}, "spec": prune(pod_spec)},
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
    """Accelerators one pod of the worker asks for (``nvidia.com/gpu`` + ``huawei.com/ascend-1980``), each quantity
    read as its value (``"1e1"`` is 10); the worker's are whole counts (validated: ``ValueError`` otherwise)."""
    resources = worker.resources
    amounts = {**((resources.limits or {}) if resources else {}), **((resources.requests or {}) if resources else {})}
    return sum(whole_count(amounts.get(k, 0)) for k in ("nvidia.com/gpu", "huawei.com/ascend-1980"))


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


def render_route(model: Model, ref: ModelRef) -> Manifest:
    """The route a router needs, recorded in a ConfigMap ``<model>-route`` (key :data:`ROUTE_KEY`):
    ``modelMatch``, and per backend its served name, Service, port, ``routeWeight`` and LoRA names
    (Kthena's ModelRoute content; its kind is not in the seeds)."""
    backends = []
    for backend in model.spec.backends:
        if backend.type in UNSUPPORTED_TYPES:
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
    another source needs its cache mounted, so it takes a rollout.  So does every new adapter of a backend
    whose env sets ``HF_HUB_OFFLINE`` (:func:`hub_offline`): its engine cannot fetch a repo id, so the
    adapter is downloaded into its ModelCache and loaded by path (``--lora-modules``) from the mounted
    cache, as a backend without runtime updates loads it.
    """
    if not runtime_lora_enabled(backend) or live is None or annotation(live, ANNOTATION_BASE_REVISION) != base_revision:
        return None
    if hub_offline(backend):
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
