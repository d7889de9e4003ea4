"""The autoscaling objects of a Kthena ``Model``, and who owns a workload's replicas.

Decides the AutoscalingPolicy and AutoscalingPolicyBinding objects Kthena's controller builds (a model-level
policy: one binding with ``optimizerConfiguration`` over every backend; a backend-level one: a binding with
``scalingConfiguration``), what each binding param scales (a workload, or a backend's serving group so a
prefill:decode ratio holds at any size), and the replicas a rollout writes: the minimum on creation, the
optimizer's value afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.api.kthena import API_VERSION, Model, ModelBackend
from engine.api.meta import parse_duration
from engine.api.registry import AUTOSCALING_POLICY, AUTOSCALING_POLICY_BINDING, KTHENA_WORKLOAD_API
from engine.optimize.bindings import ANNOTATION_SCALE_GROUPS
from engine.rollout.kthena import (
    UNSUPPORTED_TYPES,
    Manifest,
    ModelRef,
    Workload,
    backend_bounds,
    backend_name,
    child_labels,
    deployment_bounds,
    engine_port,
    workloads_of,
)
from engine.rollout.kthena_validation import DEFAULT_COST_EXPANSION

ANNOTATION_SCALE_TO_ZERO = "modelplane.io/scale-to-zero-grace-period"
"""On a binding: how long the recommendation must stay at 0 before its targets reach 0."""
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
            low, high = backend_bounds(backend)
            unit = Workload(backend_name(ref, backend), "group", workloads[0].worker, low, high)
            return [ScaleUnit(unit, port, low, high)]
        return [ScaleUnit(u.target, port, u.min_replicas, u.max_replicas, u.members) for u in scale_units(ref, backend)]
    if len(workloads) == 1:
        w = workloads[0]
        return [ScaleUnit(w, engine_port(backend, w.worker), w.min_replicas, max(w.max_replicas, 1))]
    low, high = deployment_bounds(backend)  # a multi-node backend: one group
    members = []
    for w in workloads:
        members.append((w.name, max(w.per_group, 1), w.scaled))
    first = workloads[0]
    return [ScaleUnit(first, engine_port(backend, first.worker), low, high, tuple(members))]


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
    supported = [b for b in spec.backends if b.type not in UNSUPPORTED_TYPES]
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
        "kind": AUTOSCALING_POLICY,
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
    return {"apiVersion": API_VERSION, "kind": AUTOSCALING_POLICY_BINDING, "metadata": meta, "spec": spec}


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
