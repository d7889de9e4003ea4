"""The limits a policy is judged against: a clairvoyant oracle and the attainment ceiling of a trace.

Why: a policy's cost and SLO attainment mean little alone.  Two references make them readable:

* the **attainment ceiling**: the share of requests that can meet their SLO at all, on the fastest
  variant of their model running them alone (batch 1, no queue).  A long prompt whose prefill takes
  longer than the TTFT target on every accelerator misses under any policy;
* the **oracle**: a controller that knows the future arrivals of every model per control interval
  and provisions the minimum-cost replicas that carry them, under the same inventory, start-up delay,
  control interval and gateway routing as every other policy.  Its schedule is one integer program
  over the whole replay (:func:`oracle_schedule`): a replica ready in an interval must have been paid
  for since its start-up began, so the oracle starts replicas one start-up delay ahead and keeps one
  through a lull shorter than a start-up when that is cheaper.

What one replica carries at a given attainment is measured, not modelled (:func:`measure_capacity`):
a pool of replicas of the variant is replayed in the simulator at increasing per-replica rates with the
model's own prompt and output lengths, and the capacity at attainment ``q`` is the highest rate whose
share of requests within the SLO is at least ``q``.  The oracle's knob is that target ``q``: swept, it
draws the cost-attainment frontier every other policy's cost is divided by (:func:`oracle_cost_at`).

Pure and deterministic: no I/O, no clock; the measurement's draws come from a generator seeded by the
scenario's seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.simulate.policies import Policy
from engine.simulate.records import Observation, SimConfig, Trace, VariantModel
from engine.simulate.replay import simulate
from engine.simulate.scenario import Scenario

__all__ = [
    "ORACLE_TARGETS",
    "CapacityCurve",
    "attainment_ceiling",
    "measure_capacity",
    "oracle_cost_at",
    "oracle_policy",
    "oracle_schedule",
    "interval_rates",
]

ORACLE_TARGETS = (0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
"""The attainment targets the oracle's frontier is drawn over (each clipped to what a variant can reach)."""

POOL_REPLICAS = 8
"""Replicas in the measured pool: the gateway spreads a pool's requests, so one replica of a pool carries
more at the same attainment than a replica alone (docs/simulate.md)."""

RATE_FRACTIONS = (0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.4, 0.55, 0.7, 0.85, 1.0, 1.25)
"""Per-replica rates measured, as fractions of the rate that saturates a replica's batch (see measure_capacity)."""

MEASURED_REQUESTS = 2400
STOP_BELOW = 0.4
"""The sweep stops at the first rate attaining less than this (below every target the frontier uses)."""
SHORTAGE_PENALTY = 1e6
"""Cost per unit of unserved request rate in the schedule: load is served whenever the inventory allows."""


# --------------------------------------------------------------------------------------------
# Attainment ceiling
# --------------------------------------------------------------------------------------------


def request_can_meet_slo(scenario: Scenario) -> np.ndarray:
    """Per request: whether some variant of its model meets its TTFT and ITL targets at batch 1, unqueued.

    At batch 1 the TTFT is ``gamma + delta x prompt`` and the ITL ``alpha + beta`` (ms): the best any
    replica can do for that request.  A request with one output token has no ITL.
    """
    trace = scenario.trace
    ok = np.zeros(len(trace), dtype=bool)
    for index, model in enumerate(trace.models):
        mask = trace.model_index == index
        slo = scenario.slos[model]
        prompts = trace.in_tokens[mask].astype(float)
        single = trace.out_tokens[mask] <= 1
        best = np.zeros(int(mask.sum()), dtype=bool)
        for v in scenario.variants:
            if v.model != model:
                continue
            p = v.profile
            ttft = np.where(prompts > 0, p.gamma + p.delta * prompts, 0.0)
            good = ttft <= slo.ttft_ms if slo.ttft_ms else np.ones_like(best)
            if slo.itl_ms and p.alpha + p.beta > slo.itl_ms:
                good = good & single
            best |= good
        ok[mask] = best
    return ok


def prompt_limit(variant: VariantModel, slo: Any) -> float:
    """The longest prompt ``variant`` serves within the SLO at batch 1 (inf without a TTFT target; -1 when
    its ITL at batch 1 already misses, so it meets the SLO for no multi-token request)."""
    p = variant.profile
    if slo.itl_ms and p.alpha + p.beta > slo.itl_ms:
        return -1.0
    if not slo.ttft_ms:
        return math.inf
    return (slo.ttft_ms - p.gamma) / p.delta if p.delta > 0 else (math.inf if p.gamma <= slo.ttft_ms else -1.0)


def attainment_ceiling(scenario: Scenario) -> dict[str, float]:
    """The share of requests that can meet their SLO at all: overall (``"all"``) and per model."""
    ok = request_can_meet_slo(scenario)
    trace = scenario.trace
    out = {"all": float(ok.mean()) if len(trace) else math.nan}
    for index, model in enumerate(trace.models):
        mask = trace.model_index == index
        out[model] = float(ok[mask].mean()) if mask.any() else math.nan
    return out


# --------------------------------------------------------------------------------------------
# Capacity per replica at an attainment target (measured in the simulator)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityCurve:
    """One variant's measured attainment at per-replica rates (req/s), rates ascending, attainment non-increasing."""

    rates: tuple[float, ...]
    attainment: tuple[float, ...]

    def capacity(self, target: float) -> float:
        """The highest per-replica rate whose attainment is at least ``target`` (interpolated between measured
        rates); when no measured rate reaches it, the rate of the best attainment measured (never 0)."""
        rates, att = self.rates, self.attainment
        if att[0] < target:
            return rates[0]
        for i in range(1, len(rates)):
            if att[i] < target:
                lo, hi = att[i - 1], att[i]
                share = (lo - target) / (lo - hi) if lo > hi else 0.0
                return rates[i - 1] + share * (rates[i] - rates[i - 1])
        return rates[-1]


def _saturation_rate(variant: VariantModel, prompt: float, output: float) -> float:
    """Requests per second one replica completes with its batch full (an upper bound on what it carries)."""
    p, b = variant.profile, variant.profile.max_batch
    seconds = (p.gamma + p.delta * prompt * b + max(output - 1.0, 0.0) * (p.alpha + p.beta * b)) / 1000.0
    return b / max(seconds, 1e-9)


def measure_capacity(scenario: Scenario, seed: int | None = None) -> dict[str, CapacityCurve]:
    """Per variant key: its attainment curve, a pool of :data:`POOL_REPLICAS` replicas replayed at each rate.

        The requests are drawn from the trace's requests for the variant's model that it can serve within the
        SLO at all (prompts up to :func:`prompt_limit`: a router that predicts latency sends the longer ones to a
        faster variant, see :func:`oracle_schedule`), prompt and output lengths together, arriving as a Poisson
        process; the same draws serve every rate (common random numbers, so
        the curve is smooth); the first tenth of the replay is left out as warm-up.  The sweep stops at the first
    rate attaining less than :data:`STOP_BELOW`.  Attainment is judged as
        :func:`engine.simulate.outcome.summarize_outcome` judges it, against the model's configured SLO.
    """
    trace = scenario.trace
    rng = np.random.default_rng(scenario.config.seed if seed is None else seed)
    gaps = rng.exponential(1.0, MEASURED_REQUESTS)
    unit_arrivals = np.cumsum(gaps)
    curves: dict[str, CapacityCurve] = {}
    routing = scenario.routing
    for v in scenario.variants:
        index = trace.models.index(v.model) if v.model in trace.models else -1
        mask = trace.model_index == index
        if index < 0 or not mask.any():
            continue
        slo = scenario.slos[v.model]
        limit = prompt_limit(v, slo)
        own = mask & (trace.in_tokens <= limit)  # the requests this variant can serve within the SLO at all
        if not own.any():
            continue
        pick = rng.integers(0, int(own.sum()), MEASURED_REQUESTS)
        prompts, outputs = trace.in_tokens[own][pick], trace.out_tokens[own][pick]
        top = _saturation_rate(v, float(prompts.mean()), float(outputs.mean()))
        rates, attained = [], []
        for fraction in RATE_FRACTIONS:
            rate = top * fraction
            arrivals = unit_arrivals / (rate * POOL_REPLICAS)
            sample = Trace(arrivals, prompts, outputs, np.zeros(MEASURED_REQUESTS, dtype=np.int64), (v.model,))
            config = SimConfig(interval_s=max(arrivals[-1], 1.0) * 2, horizon_s=float(arrivals[-1]))
            result = simulate([v], sample, config, {v.key: POOL_REPLICAS}, routing=routing)
            warm = arrivals >= 0.1 * arrivals[-1]
            good = result.completed.copy()
            if slo.ttft_ms:
                good &= result.ttft_s * 1000.0 <= slo.ttft_ms
            if slo.itl_ms:
                good &= (result.itl_s * 1000.0 <= slo.itl_ms) | (outputs <= 1)
            rates.append(rate)
            attained.append(float(good[warm].mean()))
            if attained[-1] < STOP_BELOW:
                break  # beyond every target: higher rates only queue longer (and take longer to replay)
        curves[v.key] = CapacityCurve(tuple(rates), tuple(np.minimum.accumulate(attained).tolist()))
    return curves


# --------------------------------------------------------------------------------------------
# The clairvoyant schedule
# --------------------------------------------------------------------------------------------


def interval_rates(scenario: Scenario) -> np.ndarray:
    """Arrival rate (req/s) per model (rows, trace order) and control interval ``[k I, (k+1) I)`` (columns)."""
    trace, interval = scenario.trace, scenario.config.interval_s
    horizon = scenario.config.horizon_s if scenario.config.horizon_s is not None else trace.duration_s
    bins = int(math.floor(horizon / interval)) + 1
    rates = np.zeros((len(trace.models), bins))
    slot = np.minimum((trace.arrival_s // interval).astype(np.int64), bins - 1)
    for index in range(len(trace.models)):
        rates[index] = np.bincount(slot[trace.model_index == index], minlength=bins)[:bins] / interval
    return rates


def tail_rates(scenario: Scenario) -> dict[tuple[int, float], np.ndarray]:
    """Per (model index, prompt limit of one of its variants except the longest): the arrival rate per
    interval of the model's requests with longer prompts, which only variants with a higher limit serve
    within the SLO."""
    trace, interval = scenario.trace, scenario.config.interval_s
    horizon = scenario.config.horizon_s if scenario.config.horizon_s is not None else trace.duration_s
    bins = int(math.floor(horizon / interval)) + 1
    slot = np.minimum((trace.arrival_s // interval).astype(np.int64), bins - 1)
    out: dict[tuple[int, float], np.ndarray] = {}
    for index, model in enumerate(trace.models):
        limits = sorted({prompt_limit(v, scenario.slos[model]) for v in scenario.variants if v.model == model})
        for limit in limits[:-1]:
            beyond = (trace.model_index == index) & (trace.in_tokens > limit)
            out[index, limit] = np.bincount(slot[beyond], minlength=bins)[:bins] / interval
    return out


def oracle_schedule(
    scenario: Scenario,
    capacity: Mapping[str, float],
    rates: np.ndarray | None = None,
    tails: Mapping[tuple[int, float], np.ndarray] | None = None,
) -> list[dict[str, int]]:
    """Replicas per variant key alive in each control interval: the minimum-cost schedule that carries every
    interval's arrivals (``rates``, default :func:`interval_rates`) at ``capacity`` req/s per replica.

    Integer program: ``x[v, k]`` replicas of variant ``v`` alive (paid) in interval ``k``, ``r[v, k]`` of them
    ready.  A replica is ready in ``k`` only if it was alive in every interval since its start-up began
    (``r[v, k] <= x[v, k - a]`` for ``a`` up to ``ceil(startup / interval)``; interval 0's replicas are
    ready at once, as every policy's initial replicas are).  Per model and interval the ready replicas
    carry the rate (``sum r x capacity >= rate``, any shortfall at :data:`SHORTAGE_PENALTY` per req/s,
    weighted by priority), and the requests with prompts too long for a variant to serve within the SLO
    (``tails``, default :func:`tail_rates` with the trace's own rates) are carried by the variants that can
    (heterogeneous accelerators: the cheaper one for the base load, the faster one for the long prompts,
    as a latency-aware router splits them); per accelerator and interval the inventory holds; the cost is
    the alive replicas' cost per interval.  Variants' ``minReplicas`` do not bind the oracle.
    """
    import pulp

    if rates is None:
        rates = interval_rates(scenario)
        tails = tail_rates(scenario) if tails is None else tails
    tails = tails or {}
    models = list(scenario.trace.models)
    intervals = rates.shape[1]
    lead = int(math.ceil(scenario.config.startup_delay_s / scenario.config.interval_s - 1e-9))
    inventory = dict(scenario.description.inventory or {})
    variants = [v for v in scenario.variants if capacity.get(v.key, 0.0) > 0]
    prob = pulp.LpProblem("oracle", pulp.LpMinimize)
    x: dict[tuple[int, int], pulp.LpVariable] = {}
    r: dict[tuple[int, int], pulp.LpVariable] = {}
    for i, v in enumerate(variants):
        limit = inventory.get(v.accelerator)
        upper = limit // v.accelerators_per_replica if limit is not None else None
        for k in range(intervals):
            x[i, k] = pulp.LpVariable(f"x_{i}_{k}", lowBound=0, upBound=upper, cat=pulp.LpInteger)
            r[i, k] = pulp.LpVariable(f"r_{i}_{k}", lowBound=0, upBound=upper)
    short = {(m, k): pulp.LpVariable(f"s_{m}_{k}", lowBound=0) for m in range(len(models)) for k in range(intervals)}
    cost = [(x[i, k], v.replica_cost_per_hour) for i, v in enumerate(variants) for k in range(intervals)]
    cost += [(s, SHORTAGE_PENALTY / max(scenario.priorities.get(models[m], 1), 1)) for (m, k), s in short.items()]
    prob += pulp.LpAffineExpression(cost)
    for i in range(len(variants)):
        for k in range(intervals):
            for a in range(lead + 1):
                prob += r[i, k] <= x[i, max(k - a, 0)]
    for m, model in enumerate(models):
        for k in range(intervals):
            terms = [(r[i, k], capacity[v.key]) for i, v in enumerate(variants) if v.model == model]
            prob += pulp.LpAffineExpression(terms + [(short[m, k], 1.0)]) >= float(rates[m, k])
    for (m, longest), beyond in tails.items():
        able = [
            (i, v)
            for i, v in enumerate(variants)
            if v.model == models[m] and prompt_limit(v, scenario.slos[models[m]]) > longest
        ]
        for k in range(intervals):
            if beyond[k] > 0:
                terms = [(r[i, k], capacity[v.key]) for i, v in able]
                prob += pulp.LpAffineExpression(terms + [(short[m, k], 1.0)]) >= float(beyond[k])
    for accelerator, limit in inventory.items():
        members = [(i, v) for i, v in enumerate(variants) if v.accelerator == accelerator]
        if members:
            for k in range(intervals):
                prob += pulp.LpAffineExpression([(x[i, k], v.accelerators_per_replica) for i, v in members]) <= limit
    prob.solve(pulp.HiGHS(msg=False, threads=1, gapRel=1e-6, timeLimit=60))
    schedule = []
    for k in range(intervals):
        schedule.append(
            {v.key: int(round(x[i, k].value() or 0.0)) for i, v in enumerate(variants)}
            | {v.key: 0 for v in scenario.variants if capacity.get(v.key, 0.0) <= 0}
        )
    return schedule


@dataclass
class OracleRun:
    """The oracle's controller, the replicas it starts with and the schedule it follows."""

    controller: Policy
    initial: dict[str, int]
    schedule: list[dict[str, int]] = field(default_factory=list)


def oracle_policy(scenario: Scenario, capacity: Mapping[str, float]) -> OracleRun:
    """The oracle as a controller: at the cycle at ``k x interval`` it asks for the schedule's interval ``k``."""
    schedule = oracle_schedule(scenario, capacity)
    interval = scenario.config.interval_s

    def decide(obs: Observation) -> dict[str, int]:
        k = min(int(round(obs.time_s / interval)), len(schedule) - 1)
        return dict(schedule[k])

    return OracleRun(decide, dict(schedule[0]), schedule)


def oracle_capacity(curves: Mapping[str, CapacityCurve], target: float) -> dict[str, float]:
    """Per variant key: what one replica carries at attainment ``target`` (from the measured curves)."""
    return {key: curve.capacity(target) for key, curve in curves.items()}


# --------------------------------------------------------------------------------------------
# The oracle's frontier
# --------------------------------------------------------------------------------------------


def oracle_cost_at(frontier: Sequence[tuple[float, float]], attainment: float) -> float | None:
    """The oracle's cost at ``attainment`` from its frontier points ``(attainment, cost)``.

    Linearly interpolated between the two points around ``attainment`` on the lower envelope (the points
    no other point beats on both cost and attainment); None outside the range the oracle's points span
    (no ratio at equal attainment exists there: the oracle's cost at a lower attainment than its lowest
    point is unknown, not its lowest point's cost).
    """
    points = sorted(frontier)
    if not points or attainment > points[-1][0] + 1e-12 or attainment < points[0][0] - 1e-12:
        return None
    # Lower envelope: cost non-decreasing in attainment (a costlier point attaining less is dominated).
    envelope: list[tuple[float, float]] = []
    for a, c in reversed(points):
        if not envelope or c < envelope[-1][1]:
            envelope.append((a, c))
    envelope.reverse()
    if attainment <= envelope[0][0]:
        return envelope[0][1]
    for a, c in envelope:
        if attainment == a:
            return c
    for (a0, c0), (a1, c1) in zip(envelope, envelope[1:]):
        if a0 <= attainment <= a1:
            share = (attainment - a0) / (a1 - a0) if a1 > a0 else 1.0
            return c0 + share * (c1 - c0)
    return envelope[-1][1]
