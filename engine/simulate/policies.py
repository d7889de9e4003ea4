"""Autoscaling policies driven through the simulator: what each provisions, cycle by cycle.

Judging their outcomes is :mod:`engine.simulate.outcome`; the scenario they run on, :mod:`engine.simulate.scenario`.

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
(:class:`engine.simulate.records.Routing`) the cluster chooses (:func:`engine.simulate.scenario.cluster_routing`).

Pure: no I/O, no clock (cycle times are derived from a fixed epoch plus simulated seconds).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Final, Literal

import numpy as np

from engine.allocation import AllocationProblem, ModelDemand, VariantOption, greedy, solve
from engine.api.llmd import VariantAutoscaling
from engine.optimize.model_based import variant_option
from engine.optimize.plan import VariantDecision, plan_variants
from engine.optimize.scaling.behavior import Behavior, ScalingState, correct
from engine.optimize.scaling.distribution import Group, distribute
from engine.optimize.scaling.recommendation import recommend, tolerance_from_percent
from engine.optimize.spec import CycleInputs, ModelLoad, PodSample, VariantSpec, model_targets
from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING
from engine.perf.load_burst import burst_rate
from engine.perf.load_hold import hold_rate
from engine.perf.load_peak import HOLD_WINDOWS_S, lowest_rate, peak_window_s, recent_peak
from engine.perf.load_trend import rate_changes
from engine.perf.saturation import SaturationConfigSet
from engine.perf.tail_sizing import PromptDistribution
from engine.simulate.oracle import measure_capacity, oracle_capacity, oracle_policy
from engine.simulate.records import SCRAPE_S, Controller, Observation, SimResult
from engine.simulate.replay import simulate
from engine.simulate.scenario import EPOCH, HPA_GAUGES, Scenario, joined_key, with_ttft_percentile
from engine.simulate.windows import ITL_BUCKETS_S, PROMPT_TOKEN_BUCKETS, TTFT_BUCKETS_S
from engine.slo.measure import RECENT_WINDOW_S, LatencyHistograms, ModelAttainment, model_attainment

__all__ = [
    "POLICIES",
    "Policy",
    "gateway_hook",
    "scale_from_zero",
    "allocation_problem",
    "initial_replicas",
    "make_policy",
    "modelplane_policy",
    "observed_loads",
    "peak_loads",
    "run_policy",
    "static_allocation",
    "variants_by_model",
]

PolicyName = Literal["modelplane", "saturation-only", "wva-greedy", "hpa", "static-peak", "oracle"]
"""The policies a simulation compares."""
POLICIES: Final[tuple[PolicyName, ...]] = (
    "modelplane",
    "saturation-only",
    "wva-greedy",
    "hpa",
    "static-peak",
    "oracle",
)


def initial_replicas(scenario: Scenario) -> dict[str, int]:
    """Replicas each variant starts with: the scale targets' current replicas (1 when unknown), or static
    peak's allocation with :attr:`Scenario.start_from_static`."""
    if scenario.start_from_static:
        return static_allocation(scenario)
    return {
        joined_key(s.key): max(int(scenario.description.current_replicas.get(s.target_key, 1)), s.min_replicas)
        for s in scenario.specs
    }


# --------------------------------------------------------------------------------------------
# Observations -> the optimizer's inputs
# --------------------------------------------------------------------------------------------


def observed_loads(scenario: Scenario, obs: Observation) -> dict[tuple[str, str], ModelLoad]:
    """Per (namespace, modelID): completions per second over the interval and their mean token counts."""
    loads: dict[tuple[str, str], ModelLoad] = {}
    for spec in scenario.specs:
        model = joined_key(spec.model_key)
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
        completed={m: int(sum(o.completed.get(m, 0) for o in observations)) for m in models},
        prompt_tokens=total("prompt_tokens"),
        generated_tokens=total("generated_tokens"),
        prompt_buckets=buckets,
    )


def observed_pods(scenario: Scenario, obs: Observation) -> dict[tuple[str, str], list[PodSample]]:
    """Per (namespace, modelID): the saturation gauges of every ready replica of the model."""
    pods: dict[tuple[str, str], list[PodSample]] = {}
    for spec in scenario.specs:
        samples = pods.setdefault(spec.model_key, [])
        samples.extend(
            PodSample(g.pod, g.kv_cache_usage, float(g.waiting)) for g in obs.pods.get(joined_key(spec.key), [])
        )
    return pods


def cycle_inputs(scenario: Scenario, obs: Observation, variants: list[VariantAutoscaling] | None = None) -> CycleInputs:
    """The optimize flow's :class:`CycleInputs` for one simulated cycle (with the flow's scale-down window)."""
    desc = scenario.description
    current = {s.target_key: obs.replicas[joined_key(s.key)] for s in scenario.specs}
    ready = {s.target_key: obs.ready[joined_key(s.key)] for s in scenario.specs}
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
        # What the optimize flow reads from the inference scheduler's flow-control queue.
        gateway_waiting={
            s.model_key: float(obs.gateway_waiting.get(joined_key(s.model_key), 0)) for s in scenario.specs
        },
    )


def persist_stabilization(variants: list[VariantAutoscaling], decisions: Sequence[VariantDecision]) -> None:
    """Write each decision's scale-down window state onto its VariantAutoscaling, as the optimize flow does.

    The flow patches ``modelplane.io/scale-down-pending`` on the resource whenever the window's state
    changes (``tasks.optimize.write``); the next cycle reads it back.  Without this the simulated policy
    would start a new window every cycle and never scale down at all.
    """
    by_key = {(va.metadata.namespace or "default", va.metadata.name): va for va in variants}
    for decision in decisions:
        va = by_key.get((decision.namespace, decision.name))
        if va is None or not decision.stabilization_changed:
            continue
        annotations = va.metadata.annotations
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
        model = joined_key(spec.model_key)
        load = loads.get(spec.model_key)
        if load is None:
            continue
        demands[model] = ModelDemand(
            model, load.arrival_rate_rps, load.workload, scenario.sizing_slo(model), scenario.priorities[model]
        )
        options.append(variant_option(spec, int(current.get(joined_key(spec.key), 0))))
    return AllocationProblem(
        models=list(demands.values()),
        variants=options,
        unit_costs={name: cost.cost for name, cost in desc.accelerator_costs.items()},
        inventory=dict(desc.inventory) if desc.inventory else None,
    )


# --------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------


Policy = Controller
"""What a policy is: the simulator's controller (an observation in, replicas per variant out)."""


def modelplane_policy(scenario: Scenario, saturation_only: bool = False, load_shape: bool = True) -> Policy:
    """The optimize flow's decision (``plan_variants``); with ``saturation_only`` the profiles are removed.

    With ``load_shape`` (what the optimize flow reads from Prometheus) every cycle also gets the recent
    peak rate over the start-up window and the request shape (mean tokens, prompt histogram) over the
    last :data:`SHAPE_WINDOWS` intervals; without it, only the last interval (as before tail- and
    start-up-aware sizing, kept for the before/after comparison).
    """
    # The policy's own copy: it writes annotations.
    variants = [va.model_copy(deep=True) for va in scenario.description.variants]
    if saturation_only:
        for va in variants:
            va.spec.variant_profile = None

    history: dict[tuple[str, str], list[float]] = {}
    window = peak_window_s(scenario.config.startup_delay_s, scenario.config.interval_s)
    horizon = max(int(math.ceil(window / scenario.config.interval_s - 1e-9)), 1)

    def held(rates: list[float], interval_s: float) -> float | None:
        """The rate the cycle holds capacity for: the variability hold when configured and known, else the recent peak."""
        if scenario.hold_quantile is not None:
            rate = hold_rate(rates, horizon, scenario.hold_quantile)
            if rate is not None:
                return rate
        return recent_peak(rates, interval_s, window)

    shapes: list[Observation] = []
    bursts: dict[tuple[str, str], list[int]] = {}
    scrape_bins = max(int(math.ceil(scenario.config.interval_s / SCRAPE_S - 1e-9)), 1)
    measure = attainment_meter(scenario, variants)
    loop: dict[tuple[str, str], float] = {}
    holds: dict[tuple[str, str], float] = {}
    factors: dict[tuple[str, str], float] = {}

    def decide(obs: Observation) -> dict[str, int]:
        inputs = dataclasses.replace(
            cycle_inputs(scenario, obs, variants),
            attainment=measure(obs),
            loop_percentiles=dict(loop),
            loop_holds=dict(holds),
            loop_factors=dict(factors),
        )
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
            # What the flow's max_over_time / quantile_over_time subqueries of the rate's changes return.
            change, noise = rate_changes(rates)
            # What max_over_time(increase(vllm:request_success_total[15s])[W:15s]) returns at a 15 s scrape.
            peaks = bursts.setdefault(key, [])
            peaks.append(obs.arrival_peak.get(joined_key(key), 0))
            del peaks[:-horizon]
            tokens = shape[key]
            loads[key] = dataclasses.replace(
                load,
                avg_in_tokens=tokens.avg_in_tokens or load.avg_in_tokens,
                avg_out_tokens=tokens.avg_out_tokens or load.avg_out_tokens,
                prompt_tokens=tokens.prompt_tokens,
                recent_peak_rps=held(rates, obs.interval_s),
                # Read for every model; the plan uses it for those whose variants ask (modelplane.io/burst-sizing).
                burst_rps=burst_rate(max(peaks), SCRAPE_S, scrape_bins * len(peaks)),
                peaks_rps={w: recent_peak(rates, obs.interval_s, w) or 0.0 for w in HOLD_WINDOWS_S if w >= window},
                lowest_rps=lowest_rate(rates, obs.interval_s, max(HOLD_WINDOWS_S)),
                recent_change_rps=change,
                change_noise_rps=noise,
            )
        decisions = plan_variants(dataclasses.replace(inputs, loads=loads))
        persist_stabilization(variants, decisions)
        loop.update({(d.namespace, d.model_id or ""): d.sizing_percentile for d in decisions if d.sizing_percentile})
        holds.update({(d.namespace, d.model_id or ""): d.peak_hold_s for d in decisions if d.peak_hold_s})
        factors.update({(d.namespace, d.model_id or ""): d.load_factor for d in decisions if d.load_factor})
        return {f"{d.namespace}/{d.name}": d.desired for d in decisions if d.desired is not None}

    return decide


def attainment_meter(
    scenario: Scenario, variants: list[VariantAutoscaling]
) -> Callable[[Observation], dict[tuple[str, str], ModelAttainment]]:
    """What the optimize flow reads from Prometheus for the attainment loop, from the simulated histograms.

    Per model, every cycle: the TTFT and request-ITL bucket increases (:attr:`Observation.ttft_buckets`,
    :attr:`Observation.itl_buckets`) summed over the model's evaluation window and over the loop's recent range
    (:data:`engine.slo.measure.RECENT_WINDOW_S`), turned into attainment by :func:`engine.slo.measure.model_attainment`
    against the model's SLO -- the same arithmetic, interpolation inside buckets included, as on a cluster.
    """
    targets = model_targets(variants, scenario.description.service_classes)
    interval = scenario.config.interval_s
    history: dict[str, list[tuple[tuple[int, ...], tuple[int, ...], float, float]]] = {}
    recent_n = max(int(round(RECENT_WINDOW_S / interval)), 1)

    def summed(rows: list[tuple[int, ...]], bounds: tuple[float, ...]) -> list[tuple[float, float]] | None:
        if not rows:
            return None
        return list(zip((*bounds, math.inf), (float(sum(c)) for c in zip(*rows))))

    def measure(obs: Observation) -> dict[tuple[str, str], ModelAttainment]:
        measured: dict[tuple[str, str], ModelAttainment] = {}
        for key, target in targets.items():
            model = joined_key(key)
            if model not in scenario.slos:
                continue
            rows = history.setdefault(model, [])
            if model in obs.ttft_buckets and model in obs.itl_buckets:
                rows.append(
                    (
                        obs.ttft_buckets[model],
                        obs.itl_buckets[model],
                        obs.ttft_sum.get(model, 0.0),
                        obs.itl_sum.get(model, 0.0),
                    )
                )
            window_n = max(int(math.ceil(target.window_s / interval - 1e-9)), 1)
            del rows[:-window_n]
            window, recent = rows, rows[-recent_n:]
            histograms = LatencyHistograms(
                ttft_window=summed([r[0] for r in window], TTFT_BUCKETS_S),
                ttft_recent=summed([r[0] for r in recent], TTFT_BUCKETS_S),
                itl_window=summed([r[1] for r in window], ITL_BUCKETS_S),
                itl_recent=summed([r[1] for r in recent], ITL_BUCKETS_S),
                ttft_window_sum=sum(r[2] for r in window),
                ttft_recent_sum=sum(r[2] for r in recent),
                itl_window_sum=sum(r[3] for r in window),
                itl_recent_sum=sum(r[3] for r in recent),
            )
            slo = scenario.slos[model]
            measured[key] = model_attainment(target, histograms, slo.ttft_ms or None, slo.itl_ms or None)
        return measured

    return measure


def variants_by_model(scenario: Scenario) -> dict[str, list[VariantSpec]]:
    """Each model key ("ns/modelID") with the specs of the variants that serve it, in the scenario's order."""
    models: dict[str, list[VariantSpec]] = {}
    for s in scenario.specs:
        models.setdefault(joined_key(s.model_key), []).append(s)
    return models


def scale_from_zero(models: Mapping[str, list[str]], obs: Observation) -> dict[str, int]:
    """WVA's scale-from-zero engine: every variant at zero replicas of a model with requests waiting in the
    gateway's flow-control queue is scaled to one replica (all of them, not only the cheapest, as WVA does today).

    ``models`` maps each model key to its variant keys."""
    return {
        key: 1
        for model, keys in models.items()
        if obs.gateway_waiting.get(model, 0) > 0
        for key in keys
        if obs.replicas[key] == 0
    }


def greedy_policy(scenario: Scenario) -> Policy:
    """WVA-style: size each variant from the queueing model, greedy cheapest-first, no saturation check.

    As WVA does around its optimizer: a model with no ready replica exports no vLLM metric, so the
    optimizer skips it (its variants keep their replicas; WVA logs "no metrics available"); and
    :func:`scale_from_zero` runs at every cycle and, between cycles, as the replay's gateway hook
    (:func:`gateway_hook`), as WVA's engine polls the gateway's queue every 100 ms.
    """
    models = greedy_models(scenario)

    def decide(obs: Observation) -> dict[str, int]:
        problem = allocation_problem(scenario, observed_loads(scenario, obs), obs.replicas)
        desired = dict(greedy(problem).replicas)
        for keys in models.values():
            if not any(obs.ready.get(k, 0) for k in keys):
                desired.update({k: obs.replicas[k] for k in keys})
        desired.update(scale_from_zero(models, obs))
        return desired

    return decide


def greedy_models(scenario: Scenario) -> dict[str, list[str]]:
    """Each model key with its variant keys (what :func:`scale_from_zero` reads)."""
    return {model: [joined_key(s.key) for s in specs] for model, specs in variants_by_model(scenario).items()}


def gateway_hook(name: str, scenario: Scenario) -> Policy | None:
    """What a policy does between its cycles when requests wait at the gateway for a variant at zero replicas:
    WVA-greedy scales from zero as WVA's engine does (:func:`scale_from_zero`); the others wait for their cycle."""
    if name == "wva-greedy":
        models = greedy_models(scenario)
        return lambda obs: scale_from_zero(models, obs)
    return None


def hpa_policy(scenario: Scenario) -> Policy:
    """Kthena: HPA-style recommendation per model, behaviour correction, cost-ordered distribution."""
    spec = scenario.description.hpa_policy
    targets = {m.metric_name: float(m.target_value) for m in spec.metrics}
    unknown = sorted(set(targets) - set(HPA_GAUGES))
    if unknown:
        raise ValueError(
            f"hpa policy metric(s) {', '.join(unknown)} are not simulated; use one of {', '.join(sorted(HPA_GAUGES))}"
        )
    tolerance = tolerance_from_percent(10 if spec.tolerance_percent is None else spec.tolerance_percent)
    behavior = Behavior.from_model(spec.behavior)
    inventory = scenario.description.inventory or {}
    models = variants_by_model(scenario)
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
            keys = [joined_key(s.key) for s in specs]
            current = sum(obs.replicas[k] for k in keys)
            instances = [{name: HPA_GAUGES[name](g) for name in targets} for k in keys for g in obs.pods.get(k, [])]
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
        spec = next(s for s in scenario.specs if joined_key(s.model_key) == model)
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
        curves = scenario.oracle_curves if scenario.oracle_curves is not None else measure_capacity(scenario)
        run = oracle_policy(scenario, oracle_capacity(curves, scenario.oracle_target))
        return run.controller, run.initial
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


def run_policy(name: str, scenario: Scenario) -> SimResult:
    """Replay the scenario's trace under one policy."""
    controller, start = make_policy(name, scenario)
    return simulate(
        scenario.variants,
        scenario.trace,
        scenario.config,
        start,
        controller,
        routing=scenario.routing,
        gateway_hook=gateway_hook(name, scenario),
    )
