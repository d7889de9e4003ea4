"""Autoscaling policies driven through the simulator, and the comparison of their outcomes.

Five policies see the same simulated metrics every cycle and answer with replicas per variant:

* ``modelplane`` -- :func:`engine.optimize.plan.plan_variants`, exactly what the optimize flow runs
  (model-based MILP allocation + saturation analysis + hybrid arbitration + safety rules), fed a
  :class:`engine.optimize.spec.CycleInputs` built from the cluster's manifests and the simulated
  vLLM metrics (arrival rate = completed requests over the interval, as
  ``rate(vllm:request_success_total[1m])``; mean prompt and output tokens of those requests;
  per-pod ``kv_cache_usage_perc`` and ``num_requests_waiting``).
* ``saturation-only`` -- the same code with the performance profiles removed from the
  VariantAutoscalings, so only WVA's saturation analysis decides.
* ``wva-greedy`` -- per-variant sizing with the queueing model and :func:`engine.allocation.greedy`
  (models in priority order, cheapest variant first), no saturation safety net.
* ``hpa`` -- Kthena's HPA-style recommendation on a per-replica metric
  (:func:`engine.optimize.scaling.recommendation.recommend`), its behaviour correction (:func:`engine.optimize.scaling.behavior.correct`:
  stabilization windows, rate limits, panic mode) and cost-ordered distribution over the
  model's variants (:func:`engine.optimize.scaling.distribution.distribute`), configured by an AutoscalingPolicy spec.
* ``static-peak`` -- the optimizer's allocation for the trace's peak load (per-interval peak
  arrival rate of each model, times ``1 + static_headroom``), provisioned from the start and never changed.
* ``oracle`` -- the clairvoyant limit (:mod:`engine.simulate.oracle`): knows every interval's arrivals
  and provisions the minimum-cost schedule that carries them at a target attainment.

Every policy's requests go through the same simulated gateway, whose router per model
(:class:`engine.simulate.replay.Routing`) the cluster chooses (:func:`cluster_routing`).

Pure: no I/O, no clock (cycle times are derived from a fixed epoch plus simulated seconds).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import numpy as np

from engine.allocation import AllocationProblem, ModelDemand, VariantOption, greedy, solve
from engine.optimize.config import AcceleratorCost, ConfigError, ModelSLO, ServiceClass
from engine.optimize.plan import (
    ANNOTATION_SCALE_DOWN_PENDING,
    DEFAULT_SCALE_DOWN_WINDOW_S,
    VariantDecision,
    plan_variants,
)
from engine.optimize.scaling.behavior import Behavior, ScalingState, correct
from engine.optimize.scaling.distribution import Group, distribute
from engine.optimize.scaling.recommendation import recommend, tolerance_from_percent
from engine.optimize.spec import CycleInputs, ModelLoad, PodSample, SpecError, VariantSpec, parse_variant
from engine.perf.load_peak import peak_window_s, recent_peak
from engine.perf.queueing import SLO, Workload
from engine.perf.saturation import SaturationConfigSet
from engine.perf.sizing import max_rates
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE, PromptDistribution
from engine.simulate.replay import (
    PROMPT_TOKEN_BUCKETS,
    ROUTERS,
    Observation,
    Routing,
    SimConfig,
    SimResult,
    Trace,
    VariantModel,
    simulate,
)

__all__ = [
    "POLICIES",
    "ClusterDescription",
    "DEFAULT_HPA_POLICY",
    "PolicyOutcome",
    "Scenario",
    "build_scenario",
    "cluster_routing",
    "make_policy",
    "model_slo",
    "run_policy",
    "summarize_outcome",
    "with_hpa_metric",
    "with_ttft_percentile",
    "with_sizing_ttft_scale",
]

POLICIES = ("modelplane", "saturation-only", "wva-greedy", "hpa", "static-peak", "oracle")
ANNOTATION_ROUTER = "modelplane.io/router"
"""On a VariantAutoscaling: the router the gateway in front of its model uses (one of engine.simulate.replay.ROUTERS)."""
ROUTER_AUTO = "auto"
_SloT = TypeVar("_SloT", SLO, ModelSLO)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_KV_TOKENS_PER_SLOT = 2048
# Kthena's example policy (deployments/examples/20-kthena.yaml): 5 waiting requests per pod.
DEFAULT_HPA_POLICY: dict[str, Any] = {
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
_GAUGES = {
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

    variants: list[dict[str, Any]]
    current_replicas: Mapping[tuple[str, str, str], int]
    accelerator_costs: Mapping[str, AcceleratorCost]
    service_classes: Mapping[tuple[str, str], ServiceClass | ConfigError]
    saturation_data: Mapping[str, Any]
    inventory: Mapping[str, int] | None
    hpa_policy: Mapping[str, Any] = field(default_factory=lambda: DEFAULT_HPA_POLICY)
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
        return next(s for s in self.specs if _key(s.key) == key)


def _key(pair: tuple[str, str]) -> str:
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
            entry = dataclasses.replace(entry, slos={m: _scaled_ttft(slo, scale) for m, slo in entry.slos.items()})
        classes[key] = entry
    return dataclasses.replace(description, service_classes=classes)


def _scaled_ttft(slo: _SloT, scale: float) -> _SloT:
    """An SLO (a service class's or the queueing model's) with its TTFT target, when it has one, times ``scale``."""
    return dataclasses.replace(slo, ttft_ms=slo.ttft_ms * scale) if slo.ttft_ms else slo


def with_ttft_percentile(description: ClusterDescription, percentile: str) -> ClusterDescription:
    """The description with every VariantAutoscaling annotated ``modelplane.io/ttft-percentile: <percentile>``."""
    variants = copy.deepcopy(description.variants)
    for obj in variants:
        obj.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION_TTFT_PERCENTILE] = percentile
    return dataclasses.replace(description, variants=variants)


def with_hpa_metric(description: ClusterDescription, metric: str, target: float) -> ClusterDescription:
    """The description with the HPA-style policy scaling on ``metric`` per replica at ``target`` (behaviour kept)."""
    if metric not in _GAUGES:
        raise ValueError(f"hpa metric {metric!r} is not simulated; use one of {', '.join(sorted(_GAUGES))}")
    if not target > 0:
        raise ValueError(f"hpa target must be > 0, got {target!r}")
    policy = {**description.hpa_policy, "metrics": [{"metricName": metric, "targetValue": str(target)}]}
    return dataclasses.replace(description, hpa_policy=policy)


def cluster_routing(description: ClusterDescription, router: str, slos: Mapping[str, SLO]) -> Routing:
    """The gateway's router per model: ``router`` for all, or with ``auto`` what the cluster says.

    With ``auto``, a model is routed by the router named in the ``modelplane.io/router`` annotation of
    any of its VariantAutoscalings; else by ``least-load`` when the cluster routes it through a load-aware
    router (``routed_models``: a Kthena ModelRoute for the model, whose router scores endpoints by queue and
    KV cache); else by ``least-outstanding``.  An unknown router name raises SpecError naming the resource.
    The routers get each model's SLO targets (the latency-predicting router scores against them).
    """
    slo_s = {m: ((s.ttft_ms or 0.0) / 1000.0, (s.itl_ms or 0.0) / 1000.0) for m, s in slos.items()}
    if router != ROUTER_AUTO:
        if router not in ROUTERS:
            raise ValueError(f"unknown router {router!r}; choose from {ROUTER_AUTO}, {', '.join(ROUTERS)}")
        return Routing(router, slo_s=slo_s)
    per_model = {m: "least-load" for m in description.routed_models}
    for obj in description.variants:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        named = (meta.get("annotations") or {}).get(ANNOTATION_ROUTER)
        if named is None or not spec.get("modelID"):
            continue
        if named not in ROUTERS:
            raise SpecError(
                f"metadata.annotations[{ANNOTATION_ROUTER}]",
                f"VariantAutoscaling {meta.get('namespace', 'default')}/{meta.get('name', '?')}: "
                f"unknown router {named!r}; choose from {', '.join(ROUTERS)}",
            )
        per_model[f"{meta.get('namespace') or 'default'}/{spec['modelID']}"] = named
    return Routing(per_model=per_model, slo_s=slo_s)


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
    gateway router :func:`cluster_routing` picks (``router``: ``auto`` or one of engine.simulate.replay.ROUTERS).
    """
    specs: list[VariantSpec] = []
    variants: list[VariantModel] = []
    slos: dict[str, SLO] = {}
    priorities: dict[str, int] = {}
    for obj in description.variants:
        meta = obj.get("metadata") or {}
        where = f"VariantAutoscaling {meta.get('namespace', 'default')}/{meta.get('name', '?')}"
        try:
            spec = parse_variant(obj)
            if spec.profile is None:
                raise SpecError(
                    "spec.variantProfile", "required: the simulator serves requests with the variant's profile"
                )
            if not spec.accelerator or spec.accelerator not in description.accelerator_costs:
                raise SpecError("spec.accelerator", f"{spec.accelerator!r} has no unit cost in accelerator-unit-costs")
            slo, priority = model_slo(spec, description.service_classes)
        except SpecError as exc:
            raise SpecError(exc.field, f"{where}: {exc.detail}") from None
        model = _key(spec.model_key)
        if model not in priorities or priority < priorities[model]:
            slos[model], priorities[model] = slo, priority
        specs.append(spec)
        variants.append(
            VariantModel(
                key=_key(spec.key),
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
    sizing = {m: _scaled_ttft(slo, sizing_ttft_scale) for m, slo in slos.items()}
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


def initial_replicas(scenario: Scenario) -> dict[str, int]:
    """Replicas each variant starts with: the scale targets' current replicas (1 when unknown), or static
    peak's allocation with :attr:`Scenario.start_from_static`."""
    if scenario.start_from_static:
        return static_allocation(scenario)
    return {
        _key(s.key): max(int(scenario.description.current_replicas.get(s.target_key, 1)), s.min_replicas)
        for s in scenario.specs
    }


# --------------------------------------------------------------------------------------------
# Observations -> the optimizer's inputs
# --------------------------------------------------------------------------------------------


def observed_loads(scenario: Scenario, obs: Observation) -> dict[tuple[str, str], ModelLoad]:
    """Per (namespace, modelID): completions per second over the interval and their mean token counts."""
    loads: dict[tuple[str, str], ModelLoad] = {}
    for spec in scenario.specs:
        model = _key(spec.model_key)
        done = obs.completed.get(model, 0)
        if done:
            loads[spec.model_key] = ModelLoad(
                done / obs.interval_s,
                obs.prompt_tokens[model] / done,
                obs.generated_tokens[model] / done,
                prompt_distribution(obs.prompt_buckets.get(model)),
            )
        else:
            loads[spec.model_key] = ModelLoad(0.0, 0.0, 0.0)
    return loads


def prompt_distribution(cumulative: Sequence[int] | None) -> PromptDistribution | None:
    """The interval's prompt-token histogram (vLLM's buckets, +Inf last) as the optimizer reads it."""
    if not cumulative or cumulative[-1] <= 0:
        return None
    return PromptDistribution.from_buckets(list(zip((*PROMPT_TOKEN_BUCKETS, math.inf), cumulative)))


SHAPE_WINDOWS = 5


def merged_observation(observations: Sequence[Observation]) -> Observation:
    """The request-shape counters (completions, token sums, prompt buckets) summed over several intervals."""
    last = observations[-1]
    models = list(last.completed)

    def total(attr: str) -> dict[str, float]:
        return {m: sum(getattr(o, attr).get(m, 0) for o in observations) for m in models}

    buckets = {
        m: tuple(int(sum(c)) for c in zip(*[o.prompt_buckets[m] for o in observations if m in o.prompt_buckets]))
        for m in models
    }
    return dataclasses.replace(
        last,
        interval_s=last.interval_s * len(observations),
        completed=total("completed"),
        prompt_tokens=total("prompt_tokens"),
        generated_tokens=total("generated_tokens"),
        prompt_buckets=buckets,
    )


def observed_pods(scenario: Scenario, obs: Observation) -> dict[tuple[str, str], list[PodSample]]:
    """Per (namespace, modelID): the saturation gauges of every ready replica of the model."""
    pods: dict[tuple[str, str], list[PodSample]] = {}
    for spec in scenario.specs:
        samples = pods.setdefault(spec.model_key, [])
        samples.extend(PodSample(g.pod, g.kv_cache_usage, float(g.waiting)) for g in obs.pods.get(_key(spec.key), []))
    return pods


def cycle_inputs(scenario: Scenario, obs: Observation, variants: list[dict[str, Any]] | None = None) -> CycleInputs:
    """The optimize flow's :class:`CycleInputs` for one simulated cycle (with the flow's scale-down window)."""
    desc = scenario.description
    current = {s.target_key: obs.replicas[_key(s.key)] for s in scenario.specs}
    ready = {s.target_key: obs.ready[_key(s.key)] for s in scenario.specs}
    return CycleInputs(
        now=EPOCH + timedelta(seconds=obs.time_s),
        variants=variants if variants is not None else desc.variants,
        current_replicas=current,
        ready_replicas=ready,
        accelerator_costs=desc.accelerator_costs,
        service_classes=desc.service_classes,
        saturation=SaturationConfigSet.from_configmap(desc.saturation_data),
        inventory=desc.inventory,
        loads=observed_loads(scenario, obs),
        pods=observed_pods(scenario, obs),
        scale_down_window_s=scenario.scale_down_window_s,
    )


def persist_stabilization(variants: list[dict[str, Any]], decisions: Sequence[VariantDecision]) -> None:
    """Write each decision's scale-down window state onto its VariantAutoscaling, as the optimize flow does.

    The flow patches ``modelplane.io/scale-down-pending`` on the resource whenever the window's state
    changes (``tasks.optimize``); the next cycle reads it back.  Without this the simulated policy
    would start a new window every cycle and never scale down at all.
    """
    by_key = {
        ((o.get("metadata") or {}).get("namespace") or "default", (o.get("metadata") or {}).get("name")): o
        for o in variants
    }
    for decision in decisions:
        obj = by_key.get((decision.namespace, decision.name))
        if obj is None or not decision.stabilization_changed:
            continue
        annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
        if decision.stabilization is None:
            annotations.pop(ANNOTATION_SCALE_DOWN_PENDING, None)
        else:
            annotations[ANNOTATION_SCALE_DOWN_PENDING] = decision.stabilization


def allocation_problem(
    scenario: Scenario, loads: Mapping[tuple[str, str], ModelLoad], current: Mapping[str, int]
) -> AllocationProblem:
    """The allocation the optimizer would solve for these loads (models, variants, costs, inventory)."""
    desc = scenario.description
    demands: dict[str, ModelDemand] = {}
    options: list[VariantOption] = []
    for spec in scenario.specs:
        model = _key(spec.model_key)
        load = loads.get(spec.model_key)
        if load is None:
            continue
        workload = Workload(in_tokens=load.avg_in_tokens, out_tokens=max(load.avg_out_tokens, 1.0))
        demands[model] = ModelDemand(
            model, load.arrival_rate_rps, workload, scenario.sizing_slo(model), scenario.priorities[model]
        )
        assert spec.profile is not None and spec.accelerator is not None
        options.append(
            VariantOption(
                name=_key(spec.key),
                model=model,
                accelerator=spec.accelerator,
                accelerators_per_replica=spec.accelerator_count,
                profile=spec.profile,
                min_replicas=spec.min_replicas,
                max_replicas=spec.max_replicas,
                current_replicas=int(current.get(_key(spec.key), 0)),
            )
        )
    return AllocationProblem(
        models=list(demands.values()),
        variants=options,
        unit_costs={name: cost.cost for name, cost in desc.accelerator_costs.items()},
        inventory=dict(desc.inventory) if desc.inventory else None,
    )


# --------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------


Policy = Callable[[Observation], Mapping[str, int]]


def modelplane_policy(scenario: Scenario, saturation_only: bool = False, load_shape: bool = True) -> Policy:
    """The optimize flow's decision (``plan_variants``); with ``saturation_only`` the profiles are removed.

    With ``load_shape`` (what the optimize flow reads from Prometheus) every cycle also gets the recent
    peak rate over the start-up window and the request shape (mean tokens, prompt histogram) over the
    last :data:`SHAPE_WINDOWS` intervals; without it, only the last interval (as before tail- and
    start-up-aware sizing, kept for the before/after comparison).
    """
    variants = copy.deepcopy(scenario.description.variants)  # the policy's own copy: it writes annotations
    if saturation_only:
        for obj in variants:
            obj.get("spec", {}).pop("variantProfile", None)

    history: dict[tuple[str, str], list[float]] = {}
    window = peak_window_s(scenario.config.startup_delay_s, scenario.config.interval_s)

    shapes: list[Observation] = []

    def decide(obs: Observation) -> dict[str, int]:
        inputs = cycle_inputs(scenario, obs, variants)
        if not load_shape:
            last_minute = {k: dataclasses.replace(v, prompt_tokens=None) for k, v in inputs.loads.items()}
            decisions = plan_variants(dataclasses.replace(inputs, loads=last_minute))
            persist_stabilization(variants, decisions)
            return {f"{d.namespace}/{d.name}": d.desired for d in decisions if d.desired is not None}
        shapes.append(obs)
        del shapes[:-SHAPE_WINDOWS]
        shape = observed_loads(scenario, merged_observation(shapes))
        loads = {}
        for key, load in inputs.loads.items():
            # What max_over_time(rate(vllm:request_success_total[1m])[W:1m]) returns from Prometheus.
            rates = history.setdefault(key, [])
            rates.append(load.arrival_rate_rps)
            tokens = shape[key]
            loads[key] = dataclasses.replace(
                load,
                avg_in_tokens=tokens.avg_in_tokens or load.avg_in_tokens,
                avg_out_tokens=tokens.avg_out_tokens or load.avg_out_tokens,
                prompt_tokens=tokens.prompt_tokens,
                recent_peak_rps=recent_peak(rates, obs.interval_s, window),
            )
        decisions = plan_variants(dataclasses.replace(inputs, loads=loads))
        persist_stabilization(variants, decisions)
        return {f"{d.namespace}/{d.name}": d.desired for d in decisions if d.desired is not None}

    return decide


def greedy_policy(scenario: Scenario) -> Policy:
    """WVA-style: size each variant from the queueing model, greedy cheapest-first, no saturation check."""

    def decide(obs: Observation) -> dict[str, int]:
        problem = allocation_problem(scenario, observed_loads(scenario, obs), obs.replicas)
        return dict(greedy(problem).replicas)

    return decide


def hpa_policy(scenario: Scenario) -> Policy:
    """Kthena: HPA-style recommendation per model, behaviour correction, cost-ordered distribution."""
    spec = scenario.description.hpa_policy
    targets = {m["metricName"]: float(m["targetValue"]) for m in spec.get("metrics") or []}
    unknown = sorted(set(targets) - set(_GAUGES))
    if unknown:
        raise ValueError(
            f"hpa policy metric(s) {', '.join(unknown)} are not simulated; use one of {', '.join(sorted(_GAUGES))}"
        )
    tolerance = tolerance_from_percent(spec.get("tolerancePercent", 10))
    behavior = Behavior.from_spec(spec.get("behavior"))
    inventory = scenario.description.inventory or {}
    models: dict[str, list[VariantSpec]] = {}
    for s in scenario.specs:
        models.setdefault(_key(s.model_key), []).append(s)
    states: dict[str, ScalingState] = {}

    def bound(s: VariantSpec) -> int:
        if s.max_replicas is not None:
            return s.max_replicas
        limit = inventory.get(s.accelerator or "")
        return limit // s.accelerator_count if limit is not None else 1000

    def decide(obs: Observation) -> dict[str, int]:
        now = EPOCH + timedelta(seconds=obs.time_s)
        desired: dict[str, int] = {}
        for model, specs in models.items():
            keys = [_key(s.key) for s in specs]
            current = sum(obs.replicas[k] for k in keys)
            instances = [{name: _GAUGES[name](g) for name in targets} for k in keys for g in obs.pods.get(k, [])]
            unready = sum(obs.replicas[k] - obs.ready[k] for k in keys)
            low, high = sum(s.min_replicas for s in specs), sum(bound(s) for s in specs)
            rec = recommend(current, low, high, tolerance, targets, instances, unready=unready)
            if rec is None:
                continue
            total, states[model] = correct(
                current, rec, behavior, states.get(model), now, min_replicas=low, max_replicas=high
            )
            groups = [
                Group(
                    s.accelerator_count * scenario.description.accelerator_costs[s.accelerator or ""].cost,
                    s.min_replicas,
                    bound(s),
                )
                for s in specs
            ]
            for key, count in zip(keys, distribute(groups, total)):
                desired[key] = count
        return desired

    return decide


def peak_loads(scenario: Scenario) -> dict[tuple[str, str], ModelLoad]:
    """Per model: the highest arrival rate over any control interval of the trace, with the trace's mean tokens."""
    trace, interval = scenario.trace, scenario.config.interval_s
    loads: dict[tuple[str, str], ModelLoad] = {}
    bins = max(int(math.ceil(max(trace.duration_s, interval) / interval)), 1)
    for index, model in enumerate(trace.models):
        mask = trace.model_index == index
        counts = np.bincount(np.minimum((trace.arrival_s[mask] // interval).astype(np.int64), bins - 1), minlength=bins)
        spec = next(s for s in scenario.specs if _key(s.model_key) == model)
        loads[spec.model_key] = ModelLoad(
            float(counts.max()) / interval * (1.0 + scenario.static_headroom) if counts.size else 0.0,
            float(trace.in_tokens[mask].mean()) if mask.any() else 0.0,
            float(trace.out_tokens[mask].mean()) if mask.any() else 1.0,
        )
    return loads


def static_allocation(scenario: Scenario) -> dict[str, int]:
    """The optimizer's allocation for the peak load, held for the whole trace."""
    return dict(solve(allocation_problem(scenario, peak_loads(scenario), {})).replicas)


def make_policy(name: str, scenario: Scenario) -> tuple[Policy, dict[str, int]]:
    """The policy's controller and the replicas it starts with."""
    start = initial_replicas(scenario)
    if name == "modelplane":
        return modelplane_policy(scenario), start
    if name == "modelplane-before":
        before = dataclasses.replace(
            scenario, description=with_ttft_percentile(scenario.description, "mean"), scale_down_window_s=0.0
        )
        return modelplane_policy(before, load_shape=False), start
    if name == "saturation-only":
        return modelplane_policy(scenario, saturation_only=True), start
    if name == "wva-greedy":
        return greedy_policy(scenario), start
    if name == "hpa":
        return hpa_policy(scenario), start
    if name == "static-peak":
        fixed = static_allocation(scenario)
        return (lambda obs: fixed), fixed
    if name == "oracle":
        from engine.simulate.oracle import measure_capacity, oracle_capacity, oracle_policy

        curves = scenario.oracle_curves if scenario.oracle_curves is not None else measure_capacity(scenario)
        run = oracle_policy(scenario, oracle_capacity(curves, scenario.oracle_target))
        return run.controller, run.initial
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


def with_scenario_variants(scenario: Scenario, description: ClusterDescription) -> Scenario:
    """The scenario with another description (same trace, specs and SLOs)."""
    return dataclasses.replace(scenario, description=description)


def run_policy(name: str, scenario: Scenario) -> SimResult:
    """Replay the scenario's trace under one policy."""
    controller, start = make_policy(name, scenario)
    return simulate(scenario.variants, scenario.trace, scenario.config, start, controller, routing=scenario.routing)


# --------------------------------------------------------------------------------------------
# Outcomes
# --------------------------------------------------------------------------------------------


@dataclass
class PolicyOutcome:
    """What one policy achieved on the trace; ``series`` holds the per-cycle time series for plots."""

    policy: str
    requests: int
    attainment: float
    attainment_by_model: dict[str, float]
    cost: float
    accelerator_hours: dict[str, float]
    replica_changes: int
    unserved: int
    unserved_share: float
    latency_ms: dict[str, dict[str, float]]  # model -> {ttft_p50, ttft_p90, ttft_p99, itl_p50, ...}
    series: dict[str, Any] = field(default_factory=dict)
    after_warmup: dict[str, float] = field(default_factory=dict)
    """With a warm-up: ``warmup_s``, ``attainment`` of the requests arriving after it and ``cost`` from it on."""

    def as_json(self) -> dict[str, Any]:
        """The outcome without the time series (for the JSON summary)."""
        return {
            "policy": self.policy,
            "requests": self.requests,
            "slo_attainment": round(self.attainment, 4),
            "slo_attainment_by_model": {k: round(v, 4) for k, v in self.attainment_by_model.items()},
            "cost": round(self.cost, 2),
            "accelerator_hours": {k: round(v, 3) for k, v in self.accelerator_hours.items()},
            "replica_changes": self.replica_changes,
            "unserved_requests": self.unserved,
            "unserved_share": round(self.unserved_share, 4),
            "latency_ms": {m: {k: round(v, 1) for k, v in d.items()} for m, d in self.latency_ms.items()},
            **({"after_warmup": {k: round(v, 4) for k, v in self.after_warmup.items()}} if self.after_warmup else {}),
        }


def _percentiles(values: np.ndarray, prefix: str) -> dict[str, float]:
    if values.size == 0:
        return {f"{prefix}_p{q}": math.nan for q in (50, 90, 99)}
    return {f"{prefix}_p{q}": float(np.percentile(values, q)) * 1000.0 for q in (50, 90, 99)}


def capacity_rps(scenario: Scenario) -> dict[str, float]:
    """Per variant key: the optimizer's max request rate per replica for its model's mean trace workload."""
    trace = scenario.trace
    profiles, workloads, slos, keys = [], [], [], []
    for v in scenario.variants:
        mask = trace.model_index == trace.models.index(v.model)
        if not mask.any():
            continue
        profiles.append(v.profile)
        workloads.append(Workload(float(trace.in_tokens[mask].mean()), max(float(trace.out_tokens[mask].mean()), 1.0)))
        slos.append(scenario.slos[v.model])
        keys.append(v.key)
    if not keys:
        return {}
    rates = max_rates(profiles, workloads, slos)
    return {k: (float(r) if np.isfinite(r) else 0.0) for k, r in zip(keys, rates)}


def summarize_outcome(name: str, scenario: Scenario, result: SimResult, warmup_s: float = 0.0) -> PolicyOutcome:
    """SLO attainment (per request: TTFT and ITL within the model's SLO), cost, replica changes, unserved load.

    With ``warmup_s`` the outcome also holds the attainment of the requests arriving after it and the cost
    from then on (``after_warmup``): the policies start from the cluster's current replicas, static peak
    from its peak allocation, and no reactive policy's first decision serves before one interval plus
    the start-up delay.
    """
    trace = scenario.trace
    ttft, itl = result.ttft_s, result.itl_s
    ok = result.completed
    met = np.zeros(len(trace), dtype=bool)
    by_model: dict[str, float] = {}
    latency: dict[str, dict[str, float]] = {}
    for index, model in enumerate(trace.models):
        slo = scenario.slos[model]
        mask = trace.model_index == index
        good = ok & mask
        if slo.ttft_ms:
            good &= ttft * 1000.0 <= slo.ttft_ms
        if slo.itl_ms:
            good &= (itl * 1000.0 <= slo.itl_ms) | (trace.out_tokens <= 1)
        met |= good
        by_model[model] = float(good.sum() / mask.sum()) if mask.any() else math.nan
        served = mask & ok
        latency[model] = {
            **_percentiles(ttft[served], "ttft"),
            **_percentiles(itl[served & (trace.out_tokens > 1)], "itl"),
        }
    changes = sum(abs(c.desired[k] - c.replicas[k]) for c in result.cycles for k in c.replicas)
    unserved = int((~ok).sum())
    outcome = PolicyOutcome(
        policy=name,
        requests=len(trace),
        attainment=float(met.mean()) if len(trace) else math.nan,
        attainment_by_model=by_model,
        cost=result.cost(),
        accelerator_hours=result.accelerator_hours(),
        replica_changes=int(changes),
        unserved=unserved,
        unserved_share=unserved / len(trace) if len(trace) else 0.0,
        latency_ms=latency,
    )
    outcome.series = time_series(scenario, result)
    if warmup_s > 0:
        later = trace.arrival_s >= warmup_s
        outcome.after_warmup = {
            "warmup_s": warmup_s,
            "attainment": float(met[later].mean()) if later.any() else math.nan,
            "cost": result.cost(warmup_s),
        }
    return outcome


def time_series(scenario: Scenario, result: SimResult) -> dict[str, Any]:
    """Per cycle: load and provisioned capacity per model (req/s), replicas per accelerator, cost rate per hour."""
    capacity = capacity_rps(scenario)
    times = [c.time_s for c in result.cycles]
    load = {m: [c.arrived.get(m, 0) / scenario.config.interval_s for c in result.cycles] for m in scenario.trace.models}
    provisioned = {
        m: [
            sum(c.ready[v.key] * capacity.get(v.key, 0.0) for v in scenario.variants if v.model == m)
            for c in result.cycles
        ]
        for m in scenario.trace.models
    }
    accelerators = sorted({v.accelerator for v in scenario.variants})
    per_accelerator = {
        a: [
            sum(c.desired[v.key] * v.accelerators_per_replica for v in scenario.variants if v.accelerator == a)
            for c in result.cycles
        ]
        for a in accelerators
    }
    cost_rate = [sum(c.desired[v.key] * v.replica_cost_per_hour for v in scenario.variants) for c in result.cycles]
    return {
        "time_s": times,
        "load_rps": load,
        "capacity_rps": provisioned,
        "accelerators": per_accelerator,
        "cost_per_hour": cost_rate,
    }


def compare(scenario: Scenario, policies: Sequence[str] = POLICIES) -> list[PolicyOutcome]:
    """Replay the trace under each policy and summarize each run."""
    return [summarize_outcome(name, scenario, run_policy(name, scenario)) for name in policies]
