"""One Kthena ``Model``'s rollout plan: every child it renders and what its backends report, in one place.

The rollout task reads the cluster (the Model, its children, the kinds served, its caches) and writes what
this module decides; it does not stitch the renderings itself. Per backend, once its weights and LoRA
adapters are resolved (:mod:`engine.rollout.kthena_weights`), :func:`render_backend` decides its children:
Deployments (with the runtime sidecar under Kthena's networking), Services and ray Services, or one
ModelServing, and the ModelServer; :func:`owned_children` names what a backend owns, so a backend waiting
for a cache keeps its live objects; :func:`runtime_lora_plan` tells whether a LoRA-only change is applied on
running pods instead. Per Model, :func:`model_children` decides the autoscaling objects and the route, and
:func:`backend_states` reads each backend's replicas and availability from the children for the status
(:mod:`engine.rollout.kthena_status`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.api.kthena import Model, ModelBackend
from engine.rollout.kthena import Manifest, ModelRef, backend_name, multi_node_hold, selector_labels, workloads_of
from engine.rollout.kthena_autoscaling import desired_replicas, is_autoscaled, render_autoscaling
from engine.rollout.kthena_native import (
    ENTRY_ADDRESS,
    NativeMode,
    model_serving_available,
    render_model_route,
    render_model_server,
    render_model_serving,
    scale_workload,
    with_runtime,
)
from engine.rollout.kthena_status import BackendState, deployment_available
from engine.rollout.kthena_weights import Mount, Weights
from engine.rollout.kthena_workloads import (
    LoraChange,
    ray_service_name,
    render_ray_service,
    render_route,
    render_service,
    render_workload,
    runtime_lora_change,
)
from engine.rollout.workloads import revision, stamp
from engine.status import count_at, mapping_at

ChildKey = tuple[str, str]
"""A child of the Model: ``(kind, name)``."""


def owned_children(ref: ModelRef, backend: ModelBackend) -> set[ChildKey]:
    """Every child a backend may own: its Deployments and Services, the ray Services of multi-pod workers,
    and its ModelServing and ModelServer."""
    workloads = workloads_of(ref, backend)
    owned = {("Deployment", w.name) for w in workloads} | {("Service", w.name) for w in workloads}
    owned |= {("Service", ray_service_name(w.name)) for w in workloads if w.scaled and (w.worker.pods or 1) > 1}
    owned |= {("ModelServing", backend_name(ref, backend)), ("ModelServer", backend_name(ref, backend))}
    return owned


@dataclass(frozen=True)
class LoraPlan:
    """A LoRA-only change to apply on the ready pods of the backend's primary workload (``selector``), whose
    engine serves the runtime API on ``port``."""

    change: LoraChange
    port: int
    selector: dict[str, str]


def runtime_lora_plan(
    ref: ModelRef, backend: ModelBackend, weights: Weights, live: Mapping[ChildKey, Manifest], mode: NativeMode
) -> LoraPlan | None:
    """The runtime LoRA change of a backend's primary Deployment (:func:`runtime_lora_change`), with the
    engine port its pods serve the runtime API on; ``None`` to roll out (always with ModelServing)."""
    if mode.model_serving:
        return None
    primary = workloads_of(ref, backend)[0]
    base = render_workload(ref, backend, primary, weights, {}, 0)
    change = runtime_lora_change(backend, live.get(("Deployment", primary.name)), revision(base))
    if change is None:
        return None
    port = int(base["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"])
    return LoraPlan(change, port, selector_labels(ref, backend, primary))


@dataclass
class BackendRender:
    """What one backend renders: its stamped children, and the workloads (``Kind/name``) whose rollout
    marks the caches they mount as used."""

    objects: list[Manifest] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)


def render_backend(
    model: Model,
    ref: ModelRef,
    backend: ModelBackend,
    weights: Weights,
    loras: Mapping[str, tuple[Mount, str]],
    live: Mapping[ChildKey, Manifest],
    mode: NativeMode,
) -> BackendRender:
    """Every child of one backend, stamped with its revision: its ModelServer (Kthena networking), then one
    ModelServing (its replicas are groups) or its Deployments, Services and ray Services. Replicas are the
    live ones inside the bounds once autoscaled (:func:`desired_replicas`); ray followers get ``pods - 1``
    per leader replica, whatever the optimizer made of the leader."""
    result = BackendRender()
    workloads = workloads_of(ref, backend)
    if mode.networking:
        result.objects.append(stamp(render_model_server(ref, backend, mode)))
    if mode.model_serving:
        templates = {}
        for workload in workloads:
            follower = not workload.scaled
            rendered = render_workload(
                ref, backend, workload, weights, loras, 0, leader_service=ENTRY_ADDRESS if follower else None
            )
            template = rendered["spec"]["template"]
            templates[workload.role] = (
                template
                if follower or not mode.networking
                else with_runtime(template, ref, backend, workload.worker, mode.runtime_image)
            )
        unit = scale_workload(ref, backend)
        replicas = desired_replicas(unit, live.get(("ModelServing", unit.name)), is_autoscaled(model, backend))
        result.objects.append(stamp(render_model_serving(ref, backend, templates, replicas, mode)))
        result.workloads.append(f"ModelServing/{unit.name}")
        return result
    leader_replicas: dict[str, int] = {}
    for workload in workloads:
        live_obj = live.get(("Deployment", workload.name))
        if workload.scaled:
            replicas = desired_replicas(workload, live_obj, is_autoscaled(model, backend))
            leader_replicas[workload.role] = replicas
        else:
            leader_role = workload.role.removesuffix("-worker")
            replicas = leader_replicas.get(leader_role, 0) * ((workload.worker.pods or 1) - 1)
        leader = ray_service_name(workload.name.removesuffix("-worker")) if not workload.scaled else None
        deployment = render_workload(ref, backend, workload, weights, loras, replicas, leader_service=leader)
        if mode.networking and workload.scaled:  # Kthena's runtime sidecar: kthena:* metrics on RUNTIME_PORT
            deployment["spec"]["template"] = with_runtime(
                deployment["spec"]["template"], ref, backend, workload.worker, mode.runtime_image
            )
        base_rev = revision(render_workload(ref, backend, workload, weights, {}, 0, leader_service=leader))
        result.objects.append(stamp(deployment, base_rev))
        result.workloads.append(f"Deployment/{workload.name}")
        if workload.scaled:
            result.objects.append(stamp(render_service(ref, backend, workload)))
            if (workload.worker.pods or 1) > 1:
                result.objects.append(stamp(render_ray_service(ref, backend, workload)))
    return result


def model_children(model: Model, ref: ModelRef, mode: NativeMode) -> list[Manifest]:
    """The Model-level children, stamped: the AutoscalingPolicy/Binding objects, then the route (Kthena's
    ModelRoute under its networking, else the route ConfigMap)."""
    objects = [
        stamp(obj) for obj in render_autoscaling(model, ref, model_serving=mode.model_serving, runtime=mode.networking)
    ]
    objects.append(stamp(render_model_route(model, ref) if mode.networking else render_route(model, ref)))
    return objects


def backend_states(
    model: Model,
    objects: Mapping[ChildKey, Mapping[str, Any]],
    waiting: Mapping[str, str],
    model_serving: bool = False,
) -> list[BackendState]:
    """Per backend: replicas the Deployments (or its ModelServing) report, and whether all are available
    (a backend waiting for a cache is not, whatever runs), and why Deployments hold a multi-node backend at
    one group (:func:`engine.rollout.kthena.multi_node_hold`)."""
    ref = ModelRef.of(model)
    states = []
    for backend in model.spec.backends:
        if model_serving:
            serving = objects.get(("ModelServing", backend_name(ref, backend)))
            replicas = count_at(mapping_at(serving, "status"), "replicas")
            available = serving is not None and model_serving_available(serving)
            states.append(
                BackendState(
                    backend.name, replicas, available and backend.name not in waiting, waiting.get(backend.name)
                )
            )
            continue
        deployments = [objects.get(("Deployment", w.name)) for w in workloads_of(ref, backend)]
        present = [d for d in deployments if d is not None]
        replicas = sum(count_at(mapping_at(d, "status"), "replicas") for d in present)
        available = bool(present) and len(present) == len(deployments) and all(deployment_available(d) for d in present)
        states.append(
            BackendState(
                backend.name,
                replicas,
                available and backend.name not in waiting,
                waiting.get(backend.name),
                held=multi_node_hold(backend),
            )
        )
    return states
