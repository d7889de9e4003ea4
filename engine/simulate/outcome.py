"""What a policy achieved on a replayed trace: SLO attainment, cost, latency, and the comparison of policies.

Why a module of its own: every policy (and the oracle) is judged the same way, per request against the
model's configured SLO (TTFT and ITL within the targets; unserved requests miss), with cost in
accelerator-hours times unit cost; the report, the frontier and the benchmark read these outcomes.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.perf.queueing import Workload
from engine.perf.sizing import max_rates
from engine.simulate.policies import POLICIES, run_policy
from engine.simulate.records import SimResult
from engine.simulate.scenario import Scenario

__all__ = [
    "PolicyOutcome",
    "capacity_rps",
    "compare",
    "json_number",
    "requests_met",
    "summarize_outcome",
    "time_series",
]


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
    unserved_by_model: dict[str, int] = field(default_factory=dict)
    """Per model: its requests never served (dropped at the gateway); they have no latency."""
    after_warmup: dict[str, float] = field(default_factory=dict)
    """With a warm-up: ``warmup_s``, ``attainment`` of the requests arriving after it and ``cost`` from it on."""

    def as_json(self) -> dict[str, Any]:
        """The outcome without the time series (for the JSON summary)."""
        return {
            "policy": self.policy,
            "requests": self.requests,
            "slo_attainment": json_number(self.attainment, 4),
            "slo_attainment_by_model": {k: json_number(v, 4) for k, v in self.attainment_by_model.items()},
            "cost": round(self.cost, 2),
            "accelerator_hours": {k: round(v, 3) for k, v in self.accelerator_hours.items()},
            "replica_changes": self.replica_changes,
            "unserved_requests": self.unserved,
            "unserved_share": round(self.unserved_share, 4),
            "unserved_by_model": dict(self.unserved_by_model),
            "latency_ms": {m: {k: json_number(v, 1) for k, v in d.items()} for m, d in self.latency_ms.items()},
            **(
                {"after_warmup": {k: json_number(v, 4) for k, v in self.after_warmup.items()}}
                if self.after_warmup
                else {}
            ),
        }


def json_number(value: float, digits: int) -> float | None:
    """``value`` rounded for a JSON document, None where it is NaN: an attainment or latency of a model with no
    request (or none served) in the replay is no number, and JSON has no NaN."""
    return None if math.isnan(value) else round(value, digits)


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


def requests_met(scenario: Scenario, result: SimResult) -> np.ndarray:
    """Per request of the trace, whether it met its model's SLO: served, TTFT within the target and ITL within it
    (a request of one output token has no ITL). What every attainment of a replay counts, over any span of it."""
    trace = scenario.trace
    met = np.zeros(len(trace), dtype=bool)
    for index, model in enumerate(trace.models):
        slo = scenario.slos[model]
        good = result.completed & (trace.model_index == index)
        if slo.ttft_ms:
            good &= result.ttft_s * 1000.0 <= slo.ttft_ms
        if slo.itl_ms:
            good &= (result.itl_s * 1000.0 <= slo.itl_ms) | (trace.out_tokens <= 1)
        met |= good
    return met


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
    met = requests_met(scenario, result)
    by_model: dict[str, float] = {}
    latency: dict[str, dict[str, float]] = {}
    for index, model in enumerate(trace.models):
        mask = trace.model_index == index
        by_model[model] = float(met[mask].mean()) if mask.any() else math.nan
        served = mask & ok
        latency[model] = {
            **_percentiles(ttft[served], "ttft"),
            **_percentiles(itl[served & (trace.out_tokens > 1)], "itl"),
        }
    changes = sum(abs(c.desired[k] - c.replicas[k]) for c in (*result.cycles, *result.wakes) for k in c.replicas)
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
        unserved_by_model={m: int((~ok & (trace.model_index == i)).sum()) for i, m in enumerate(trace.models)},
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
