"""The references a policy is judged against: a clairvoyant schedule (policy ``oracle``) and the attainment
ceiling of a trace.

Why: a policy's cost and SLO attainment mean little alone.  Two references make them readable:

* the **attainment ceiling**: the share of requests that can meet their SLO at all, on the fastest
  variant of their model running them alone (batch 1, no queue).  A long prompt whose prefill takes
  longer than the TTFT target on every accelerator misses under any policy;
* the **clairvoyant schedule** (the policy named ``oracle``): a controller that knows the future arrivals of every model per control interval
  and provisions the minimum-cost replicas that carry them, under the same inventory, start-up delay,
  control interval and gateway routing as every other policy.  Its schedule is one integer program
  over the whole replay (:func:`solve_schedule`): a replica ready in an interval must have been paid
  for since its start-up began, so the oracle starts replicas one start-up delay ahead and keeps one
  through a lull shorter than a start-up when that is cheaper.

What one replica carries at a given attainment is measured, not modelled (:func:`measure_capacity`):
a pool of replicas of the variant is replayed in the simulator at increasing per-replica rates with the
model's own prompt and output lengths, and the capacity at attainment ``q`` is the highest rate whose
share of requests within the SLO is at least ``q``.  The schedule's knob is that target ``q``: swept, it
draws the cost-attainment curve every other policy's cost is divided by (:func:`oracle_cost_at`).

It is a reference, not a lower bound on cost: the capacities are measured on pools of one variant under
Poisson arrivals, while the replay serves the trace's own within-minute arrivals on pools of the sizes the
schedule picks (and, under a latency router, of mixed variants).  A policy can therefore attain as much for
less (a cost ratio below 1), and nothing is cheaper than it "by necessity"; reports call it the clairvoyant
schedule and shade no region as unreachable.

Pure and deterministic: no I/O, no clock; the measurement's draws come from a generator seeded by the
scenario's seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.allocation.problem import deterministic_highs
from engine.simulate.records import Controller, Observation, SimConfig, Trace, VariantModel
from engine.simulate.replay import simulate
from engine.simulate.scenario import Scenario

__all__ = [
    "ORACLE_TARGETS",
    "CapacityCurve",
    "attainment_allowed",
    "attainment_ceiling",
    "measure_capacity",
    "oracle_cost_at",
    "oracle_policy",
    "solve_schedule",
    "ScheduleSolve",
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
MIP_REL_GAP = 1e-6
"""The schedule's integer program stops at this relative gap (every measured solve reaches it, docs/simulate.md)."""
MIP_MAX_NODES = 20_000
"""...and after at most this many branch-and-bound nodes: a deterministic bound on the solve (about 25x the most
any measured scenario needed), where a time limit made the schedule depend on the machine's load."""
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


def attainment_allowed(trace: Trace, ceilings: Mapping[str, float], targets: Mapping[str, float]) -> float:
    """The share of all requests within the SLO when every model attains its target, or its attainment ceiling where
    that is lower (a model without a target: its ceiling); NaN for an empty trace. ``ceilings``: the trace's
    per-model ceilings (:func:`attainment_ceiling`).

    Why: attainment over all requests weighs each model by its requests, so a model whose target is above its
    ceiling keeps the whole trace under a target every model shares even when each model meets all it can: with half
    of the requests on a model whose ceiling is 85 %, a 90 % target on every model allows 87.5 % overall. Each
    model's loop serves its own target, so the overall figure is read against this, not against the target.
    """
    if not len(trace):
        return math.nan
    counts = np.bincount(trace.model_index, minlength=len(trace.models))
    met = sum(
        count * min(targets.get(model, ceilings[model]), ceilings[model])
        for model, count in zip(trace.models, counts, strict=True)
        if count
    )
    return float(met / len(trace))


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
        faster variant, see :func:`solve_schedule`), prompt and output lengths together, arriving as a Poisson
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


@dataclass(frozen=True)
class ScheduleSolve:
    """How the schedule's integer program ended: HiGHS's model status, branch-and-bound nodes, relative gap."""

    status: str
    nodes: int
    gap: float

    @property
    def optimal(self) -> bool:
        """Proven optimal within :data:`MIP_REL_GAP` (else the node limit stopped it at its best schedule)."""
        return self.status == "Optimal"


def solve_schedule(
    scenario: Scenario,
    capacity: Mapping[str, float],
    rates: np.ndarray | None = None,
    tails: Mapping[tuple[int, float], np.ndarray] | None = None,
    max_nodes: int = MIP_MAX_NODES,
) -> tuple[list[dict[str, int]], ScheduleSolve]:
    """Replicas per variant key alive in each control interval: the minimum-cost schedule that carries every
    interval's arrivals (``rates``, default :func:`interval_rates`) at ``capacity`` req/s per replica; and how
    its solve ended.

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

    HiGHS on one thread, seed 0, stopping at a relative gap of :data:`MIP_REL_GAP` or after ``max_nodes``
    branch-and-bound nodes, never on the clock: a time limit made the schedule depend on the machine's load
    (the same replay cost 689.6 or 652.1), a node limit stops at the same incumbent on any machine.
    """
    if rates is None:
        rates = interval_rates(scenario)
        tails = tail_rates(scenario) if tails is None else tails
    variants = [v for v in scenario.variants if capacity.get(v.key, 0.0) > 0]
    model = _ScheduleModel(scenario, variants, rates.shape[1])
    model.add_rows(scenario, capacity, rates, tails or {})
    counts, solve = model.solve(max_nodes)
    schedule = [
        {v.key: int(round(counts[i, k])) for i, v in enumerate(variants)}
        | {v.key: 0 for v in scenario.variants if capacity.get(v.key, 0.0) <= 0}
        for k in range(rates.shape[1])
    ]
    return schedule, solve


class _ScheduleModel:
    """The schedule's integer program in HiGHS: columns ``x`` (alive, integer), ``r`` (ready), ``s`` (shortfall)
    per variant / model and interval, rows added as sparse (index, value) lists."""

    def __init__(self, scenario: Scenario, variants: Sequence[VariantModel], intervals: int) -> None:
        models = list(scenario.trace.models)
        self.variants, self.intervals, self.models = variants, intervals, models
        self.inventory = dict(scenario.description.inventory or {})
        n, k = len(variants), intervals
        self.x0, self.r0, self.s0 = 0, n * k, 2 * n * k
        upper = [
            self.inventory[v.accelerator] // v.accelerators_per_replica if v.accelerator in self.inventory else math.inf
            for v in variants
        ]
        self.upper = np.concatenate([np.repeat(upper, k), np.repeat(upper, k), np.full(len(models) * k, math.inf)])
        penalty = [SHORTAGE_PENALTY / max(scenario.priorities.get(m, 1), 1) for m in models]
        self.cost = np.concatenate(
            [np.repeat([v.replica_cost_per_hour for v in variants], k), np.zeros(n * k), np.repeat(penalty, k)]
        )
        self.rows: list[tuple[float, float, list[int], list[float]]] = []

    def x(self, i: int, k: int) -> int:
        return self.x0 + i * self.intervals + k

    def r(self, i: int, k: int) -> int:
        return self.r0 + i * self.intervals + k

    def s(self, m: int, k: int) -> int:
        return self.s0 + m * self.intervals + k

    def add_rows(
        self,
        scenario: Scenario,
        capacity: Mapping[str, float],
        rates: np.ndarray,
        tails: Mapping[tuple[int, float], np.ndarray],
    ) -> None:
        """Readiness after start-up, demand per model and per long-prompt tail, inventory per accelerator."""
        lead = int(math.ceil(scenario.config.startup_delay_s / scenario.config.interval_s - 1e-9))
        variants, models, inf = self.variants, self.models, math.inf
        for i in range(len(variants)):
            for k in range(self.intervals):
                for back in sorted({max(k - a, 0) for a in range(lead + 1)}):
                    self.rows.append((-inf, 0.0, [self.r(i, k), self.x(i, back)], [1.0, -1.0]))
        for m, name in enumerate(models):
            own = [(i, capacity[v.key]) for i, v in enumerate(variants) if v.model == name]
            for k in range(self.intervals):
                self._demand(own, m, k, float(rates[m, k]))
        for (m, longest), beyond in tails.items():
            slo = scenario.slos[models[m]]
            able = [
                (i, capacity[v.key])
                for i, v in enumerate(variants)
                if v.model == models[m] and prompt_limit(v, slo) > longest
            ]
            for k in range(self.intervals):
                if beyond[k] > 0:
                    self._demand(able, m, k, float(beyond[k]))
        for accelerator, limit in self.inventory.items():
            members = [(i, v.accelerators_per_replica) for i, v in enumerate(variants) if v.accelerator == accelerator]
            if members:
                for k in range(self.intervals):
                    self.rows.append(
                        (-inf, float(limit), [self.x(i, k) for i, _ in members], [float(a) for _, a in members])
                    )

    def _demand(self, carriers: Sequence[tuple[int, float]], m: int, k: int, rate: float) -> None:
        index = [self.r(i, k) for i, _ in carriers] + [self.s(m, k)]
        self.rows.append((rate, math.inf, index, [c for _, c in carriers] + [1.0]))

    def solve(self, max_nodes: int) -> tuple[np.ndarray, ScheduleSolve]:
        """The alive replicas per (variant, interval) of the best schedule found, and how the solve ended."""
        import highspy

        h = deterministic_highs(mip_rel_gap=MIP_REL_GAP, mip_max_nodes=max_nodes)
        columns = len(self.cost)
        inf = highspy.kHighsInf
        h.addVars(columns, np.zeros(columns), np.minimum(self.upper, inf))
        h.changeColsCost(columns, np.arange(columns, dtype=np.int32), self.cost)
        alive = self.r0
        h.changeColsIntegrality(alive, np.arange(alive, dtype=np.int32), np.ones(alive, dtype=np.uint8))
        lower = np.array([max(lo, -inf) for lo, _, _, _ in self.rows])
        upper = np.array([min(hi, inf) for _, hi, _, _ in self.rows])
        starts = np.cumsum([0] + [len(idx) for _, _, idx, _ in self.rows[:-1]]).astype(np.int32)
        index = np.fromiter((j for _, _, idx, _ in self.rows for j in idx), dtype=np.int32)
        value = np.fromiter((c for _, _, _, val in self.rows for c in val), dtype=float)
        h.addRows(len(self.rows), lower, upper, len(index), starts, index, value)
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        info = h.getInfo()
        if info.primal_solution_status != 2:  # kSolutionStatusFeasible: with shortfall columns one always exists
            raise RuntimeError(f"the oracle's schedule found no feasible solution (HiGHS: {status})")
        values = np.asarray(h.getSolution().col_value, dtype=float)[: self.r0]
        solve = ScheduleSolve(status, int(info.mip_node_count), float(info.mip_gap))
        return values.reshape(len(self.variants), self.intervals), solve


@dataclass
class OracleRun:
    """The oracle's controller, the replicas it starts with, the schedule it follows and how its solve ended."""

    controller: Controller
    initial: dict[str, int]
    schedule: list[dict[str, int]] = field(default_factory=list)
    solve: ScheduleSolve | None = None


def oracle_policy(scenario: Scenario, capacity: Mapping[str, float]) -> OracleRun:
    """The oracle as a controller: at the cycle at ``k x interval`` it asks for the schedule's interval ``k``."""
    schedule, solve = solve_schedule(scenario, capacity)
    interval = scenario.config.interval_s

    def decide(obs: Observation) -> dict[str, int]:
        k = min(int(round(obs.time_s / interval)), len(schedule) - 1)
        return dict(schedule[k])

    return OracleRun(decide, dict(schedule[0]), schedule, solve)


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
