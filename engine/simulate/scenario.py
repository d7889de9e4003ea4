"""The cluster a simulation replays against, parsed once: variants, SLOs, routing, the knobs of each policy.

Why a module of its own: every policy, the oracle, the frontier sweep and the benchmark start from the
same :class:`Scenario` (the VariantAutoscalings parsed as the optimize flow parses them, the SLO each
model is judged against, the gateway's router), and the knob variants of a description
(:func:`with_ttft_percentile`, :func:`with_hpa_metric`, :func:`with_sizing_ttft_scale`) are what the
sweeps turn.  Deciding what to provision is :mod:`engine.simulate.policies`' job.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from engine.api.kthena import AutoscalingPolicyMetric, AutoscalingPolicySpec
from engine.api.llmd import VariantAutoscaling
from engine.optimize.config import AcceleratorCost, ConfigError, ModelSLO, ServiceClass
from engine.optimize.spec import SpecError, VariantSpec, model_targets, parse_variant
from engine.optimize.stabilization import DEFAULT_SCALE_DOWN_WINDOW_S
from engine.perf.prompt_split import ANNOTATION_ROUTER, ROUTERS, check_router
from engine.perf.queueing import SLO
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE
from engine.simulate.records import ReplicaGauges, Routing, SimConfig, Trace, VariantModel
from engine.slo.target import ANNOTATION_SLO_ATTAINMENT, check_attainment

__all__ = [
    "ClusterDescription",
    "DEFAULT_HPA_POLICY",
    "EPOCH",
    "HPA_GAUGES",
    "ROUTER_AUTO",
    "Scenario",
    "attainment_targets",
    "build_scenario",
    "check_gateway_router",
    "cluster_routing",
    "joined_key",
    "model_slo",
    "scaled_ttft",
    "served_models",
    "with_hpa_metric",
    "with_scenario_variants",
    "with_sizing_ttft_scale",
    "with_slo_attainment",
    "with_ttft_percentile",
]

ROUTER_AUTO: Final = "auto"
_SloT = TypeVar("_SloT", SLO, ModelSLO)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_KV_TOKENS_PER_SLOT = 2048
# Kthena's example policy (deployments/examples/20-kthena.yaml): 5 waiting requests per pod.
DEFAULT_HPA_POLICY = AutoscalingPolicySpec.model_validate(
    {
        "tolerancePercent": 10,
        "metrics": [{"metricName": "vllm:num_requests_waiting", "targetValue": "5"}],
        "behavior": {
            "scaleUp": {
                "stablePolicy": {
                    "instances": 2,
                    "percent": 100,
                    "period": "15s",
                    "selectPolicy": "Or",
                    "stabilizationWindow": "1m",
                },
                "panicPolicy": {"percent": 1000, "period": "15s", "panicThresholdPercent": 200, "panicModeHold": "60s"},
            },
            "scaleDown": {
                "instances": 1,
                "percent": 50,
                "period": "30s",
                "selectPolicy": "And",
                "stabilizationWindow": "5m",
            },
        },
    }
)
HPA_GAUGES: dict[str, Callable[[ReplicaGauges], float]] = {
    # The per-replica gauges an HPA-style policy can scale on (what the simulator exports per pod).
    "vllm:num_requests_waiting": lambda g: float(g.waiting),
    "vllm:num_requests_running": lambda g: float(g.running),
    "vllm:kv_cache_usage_perc": lambda g: float(g.kv_cache_usage),
}


@dataclass(frozen=True)
class ClusterDescription:
    """A cluster as the optimize flow reads it: VariantAutoscalings, current replicas, WVA ConfigMaps.

    ``current_replicas`` is keyed by ``(namespace, kind, name)`` of the scale targets;
    ``hpa_policy`` is the AutoscalingPolicy spec the ``hpa`` policy uses.
    """

    variants: list[VariantAutoscaling]
    """As the boundary reader parsed them (``tasks.optimize.read``): metadata and spec."""
    current_replicas: Mapping[tuple[str, str, str], int]
    accelerator_costs: Mapping[str, AcceleratorCost]
    service_classes: Mapping[tuple[str, str], ServiceClass | ConfigError]
    saturation_data: Mapping[str, Any]
    inventory: Mapping[str, int] | None
    hpa_policy: AutoscalingPolicySpec = field(default_factory=lambda: DEFAULT_HPA_POLICY)
    kv_tokens_per_slot: int = DEFAULT_KV_TOKENS_PER_SLOT
    routed_models: Mapping[str, str] = field(default_factory=dict)
    """Models (``namespace/modelID``) behind a load-aware router in the cluster, and why (e.g. a Kthena ModelRoute)."""


@dataclass(frozen=True)
class Scenario:
    """What every policy is replayed against: variants, their parsed specs, SLOs per model, the trace."""

    description: ClusterDescription
    specs: list[VariantSpec]
    variants: list[VariantModel]
    slos: dict[str, SLO]  # model key "ns/modelID" -> the configured SLO, which attainment is judged against
    priorities: dict[str, int]
    trace: Trace
    config: SimConfig
    sizing_slos: dict[str, SLO] = field(default_factory=dict)  # what the policies size for (default: slos)
    scale_down_window_s: float = DEFAULT_SCALE_DOWN_WINDOW_S
    """The optimize flow's ``scale_down_stabilization_s`` for the Modelplane policies (the annotation overrides it)."""
    hold_quantile: float | None = None
    """With a value: the Modelplane policies hold capacity for the rate :func:`engine.perf.load_hold.hold_rate`
    gives at this quantile (the trace's own variability over the start-up horizon) instead of the recent
    peak plus the fixed ``scale_down_window_s`` (which is then not applied)."""
    start_from_static: bool = False
    """Whether the reactive policies start from static peak's allocation instead of the scale targets' current
    replicas: the replay then asks what switching a policy on does to a statically provisioned service,
    instead of charging every reactive policy a cold start from the manifests' replicas (which no
    reactive policy can avoid: its first decision serves one interval plus the start-up delay later)."""
    routing: Routing = field(default_factory=Routing)
    """The gateway's router per model, the same for every policy."""
    static_headroom: float = 0.0
    """Static peak provisions for the peak interval's rate times ``1 + static_headroom`` (its knob)."""
    oracle_target: float = 0.9
    """The attainment the oracle sizes each replica's load for (its knob)."""
    oracle_curves: Mapping[str, Any] | None = None
    """The oracle's measured capacity curves per variant (engine.simulate.oracle.measure_capacity), once measured."""

    def sizing_slo(self, model: str) -> SLO:
        """The SLO the policies size ``model`` for."""
        return self.sizing_slos.get(model, self.slos[model])

    def spec_of(self, key: str) -> VariantSpec:
        """The parsed VariantAutoscaling of a variant key."""
        return next(s for s in self.specs if joined_key(s.key) == key)


def joined_key(pair: tuple[str, str]) -> str:
    """``namespace/name`` of a (namespace, name) pair: how variants and models are keyed in the simulator."""
    return f"{pair[0]}/{pair[1]}"


def model_slo(spec: VariantSpec, classes: Mapping[tuple[str, str], ServiceClass | ConfigError]) -> tuple[SLO, int]:
    if spec.slo_ref is None:
        raise SpecError("spec.sloClassRef", "required to judge SLO attainment in a simulation")
    entry = classes.get(spec.slo_ref)
    if entry is None or isinstance(entry, ConfigError):
        raise SpecError(
            "spec.sloClassRef", f"service class {spec.slo_ref[0]}/{spec.slo_ref[1]} is missing or invalid: {entry}"
        )
    slo = entry.slo_for(spec.model_id)
    if slo is None:
        raise SpecError("spec.sloClassRef", f"service class {entry.name!r} has no SLO for model {spec.model_id!r}")
    return SLO(ttft_ms=slo.ttft_ms, itl_ms=slo.itl_ms, tps=slo.tps), entry.priority


def with_sizing_ttft_scale(description: ClusterDescription, scale: float) -> ClusterDescription:
    """The description with every service class's TTFT target multiplied by ``scale`` (what policies size for).

    Why: WVA's targets bound the *mean* TTFT, while attainment counts the requests within the target;
    an operator who wants most requests within 500 ms configures a tighter class.  This lets the
    simulation show that trade-off without editing the ConfigMap.
    """
    if scale == 1.0:
        return description
    if not scale > 0:
        raise ValueError(f"sizing TTFT scale must be > 0, got {scale!r}")
    classes: dict[tuple[str, str], ServiceClass | ConfigError] = {}
    for key, entry in description.service_classes.items():
        if isinstance(entry, ServiceClass):
            entry = dataclasses.replace(entry, slos={m: scaled_ttft(slo, scale) for m, slo in entry.slos.items()})
        classes[key] = entry
    return dataclasses.replace(description, service_classes=classes)


def scaled_ttft(slo: _SloT, scale: float) -> _SloT:
    """An SLO (a service class's or the queueing model's) with its TTFT target, when it has one, times ``scale``."""
    return dataclasses.replace(slo, ttft_ms=slo.ttft_ms * scale) if slo.ttft_ms else slo


def served_models(description: ClusterDescription) -> list[str]:
    """The models the described cluster serves (``namespace/modelID`` of its VariantAutoscalings), sorted."""
    models: set[str] = set()
    for va in description.variants:
        if va.spec.model_id:
            models.add(f"{va.metadata.namespace or 'default'}/{va.spec.model_id}")
    return sorted(models)


def attainment_targets(description: ClusterDescription) -> dict[str, float]:
    """Each served model's SLO attainment target (``namespace/modelID``): its VariantAutoscalings' annotation, else
    its service class's ``slo-attainment``, else the default (:func:`engine.optimize.spec.model_targets`)."""
    targets = model_targets(description.variants, description.service_classes)
    return {joined_key(key): target.attainment for key, target in targets.items()}


def with_ttft_percentile(description: ClusterDescription, percentile: str) -> ClusterDescription:
    """The description with every VariantAutoscaling annotated ``modelplane.io/ttft-percentile: <percentile>``."""
    variants = [va.model_copy(deep=True) for va in description.variants]
    for va in variants:
        va.metadata.annotations[ANNOTATION_TTFT_PERCENTILE] = percentile
    return dataclasses.replace(description, variants=variants)


def with_slo_attainment(description: ClusterDescription, attainment: float) -> ClusterDescription:
    """The description with every VariantAutoscaling annotated ``modelplane.io/slo-attainment: <attainment>``
    (every model's target; checked as the annotation is)."""
    value = f"{check_attainment(attainment):g}"
    variants = [va.model_copy(deep=True) for va in description.variants]
    for va in variants:
        va.metadata.annotations[ANNOTATION_SLO_ATTAINMENT] = value
    return dataclasses.replace(description, variants=variants)


def with_hpa_metric(description: ClusterDescription, metric: str, target: float) -> ClusterDescription:
    """The description with the HPA-style policy scaling on ``metric`` per replica at ``target`` (behaviour kept)."""
    if metric not in HPA_GAUGES:
        raise ValueError(f"hpa metric {metric!r} is not simulated; use one of {', '.join(sorted(HPA_GAUGES))}")
    if not target > 0:
        raise ValueError(f"hpa target must be > 0, got {target!r}")
    metrics = [AutoscalingPolicyMetric(metric_name=metric, target_value=str(target))]
    return dataclasses.replace(description, hpa_policy=description.hpa_policy.model_copy(update={"metrics": metrics}))


def check_gateway_router(router: str) -> None:
    """``ValueError`` naming the accepted choices when ``router`` (a replay's gateway router: ``auto`` or one of
    :data:`engine.perf.prompt_split.ROUTERS`) is neither."""
    if router != ROUTER_AUTO and router not in ROUTERS:
        raise ValueError(f"unknown router {router!r}; choose from {ROUTER_AUTO}, {', '.join(ROUTERS)}")


def cluster_routing(description: ClusterDescription, router: str, slos: Mapping[str, SLO]) -> Routing:
    """The gateway's router per model: ``router`` for all, or with ``auto`` what the cluster says.

    With ``auto``, a model is routed by the router named in the ``modelplane.io/router`` annotation of
    any of its VariantAutoscalings; else by ``least-load`` when the cluster routes it through a load-aware
    router (``routed_models``: a Kthena ModelRoute for the model, whose router scores endpoints by queue and
    KV cache); else by ``least-outstanding``.  An unknown router name raises SpecError naming the resource.
    The routers get each model's SLO targets (the latency-predicting router scores against them).
    """
    slo_s = {m: ((s.ttft_ms or 0.0) / 1000.0, (s.itl_ms or 0.0) / 1000.0) for m, s in slos.items()}
    check_gateway_router(router)
    if router != ROUTER_AUTO:
        return Routing(router, slo_s=slo_s)
    per_model = {m: "least-load" for m in description.routed_models}
    for va in description.variants:
        meta = va.metadata
        named = meta.annotations.get(ANNOTATION_ROUTER)
        if named is None or not va.spec.model_id:
            continue
        try:
            check_router(named)
        except ValueError as exc:
            raise SpecError(
                f"metadata.annotations[{ANNOTATION_ROUTER}]", f"VariantAutoscaling {_where(va)}: {exc}"
            ) from None
        per_model[f"{meta.namespace or 'default'}/{va.spec.model_id}"] = named
    return Routing(per_model=per_model, slo_s=slo_s)


def _where(va: VariantAutoscaling) -> str:
    """``namespace/name`` of a VariantAutoscaling for a message (``default``/``?`` when unset)."""
    return f"{va.metadata.namespace if va.metadata.namespace is not None else 'default'}/{va.metadata.name or '?'}"


def build_scenario(
    description: ClusterDescription,
    trace: Trace,
    config: SimConfig,
    sizing_ttft_scale: float = 1.0,
    router: str = ROUTER_AUTO,
) -> Scenario:
    """Parse every VariantAutoscaling into a simulated variant; a variant that cannot be simulated raises SpecError.

    A simulated variant needs a performance profile (the simulator's service law), an accelerator with
    a unit cost, and an SLO class (to judge attainment); the error names the resource and the field.
    Attainment is judged against the configured SLOs; the policies size for the TTFT targets scaled by
    ``sizing_ttft_scale`` (see :func:`with_sizing_ttft_scale`).  Every policy's requests go through the
    gateway router :func:`cluster_routing` picks (``router``: ``auto`` or one of engine.perf.prompt_split.ROUTERS).
    """
    specs: list[VariantSpec] = []
    variants: list[VariantModel] = []
    slos: dict[str, SLO] = {}
    priorities: dict[str, int] = {}
    for va in description.variants:
        where = f"VariantAutoscaling {_where(va)}"
        try:
            spec = parse_variant(va)
            if spec.profile is None:
                raise SpecError(
                    "spec.variantProfile", "required: the simulator serves requests with the variant's profile"
                )
            if not spec.accelerator or spec.accelerator not in description.accelerator_costs:
                raise SpecError("spec.accelerator", f"{spec.accelerator!r} has no unit cost in accelerator-unit-costs")
            slo, priority = model_slo(spec, description.service_classes)
        except SpecError as exc:
            raise SpecError(exc.field, f"{where}: {exc.detail}") from None
        model = joined_key(spec.model_key)
        if model not in priorities or priority < priorities[model]:
            slos[model], priorities[model] = slo, priority
        specs.append(spec)
        variants.append(
            VariantModel(
                key=joined_key(spec.key),
                model=model,
                target=spec.target_name,
                accelerator=spec.accelerator,
                accelerators_per_replica=spec.accelerator_count,
                unit_cost=description.accelerator_costs[spec.accelerator].cost,
                profile=spec.profile,
                kv_capacity_tokens=int(spec.profile.max_batch * description.kv_tokens_per_slot),
            )
        )
    missing = [m for m in trace.models if m not in slos]
    if missing:
        raise SpecError("trace", f"no VariantAutoscaling serves model(s) {', '.join(missing)}")
    sizing = {m: scaled_ttft(slo, sizing_ttft_scale) for m, slo in slos.items()}
    routing = cluster_routing(description, router, slos)
    return Scenario(
        with_sizing_ttft_scale(description, sizing_ttft_scale),
        specs,
        variants,
        slos,
        priorities,
        trace,
        config,
        sizing,
        routing=routing,
    )


def with_scenario_variants(scenario: Scenario, description: ClusterDescription) -> Scenario:
    """The scenario with another description (same trace, specs and SLOs)."""
    return dataclasses.replace(scenario, description=description)
