"""The simulator's inputs and outputs: variants, the trace, routing, configuration, observations, results.

Why a module of its own: the policies, the oracle, the calibration and the benchmark build these
records and read them back without running the event loop (:mod:`engine.simulate.replay`), so they
live apart from it.  Plain data plus small derived views (cost, latencies); :func:`poisson_trace`
makes a synthetic trace for tests and the agreement benchmark.

Pure and deterministic: no I/O and no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.perf.prompt_split import check_router
from engine.perf.queueing import PerfProfile

__all__ = [
    "VariantModel",
    "Trace",
    "Routing",
    "SimConfig",
    "ReplicaGauges",
    "Observation",
    "Controller",
    "CycleRecord",
    "SimResult",
    "poisson_trace",
]


@dataclass(frozen=True)
class VariantModel:
    """The simulator's view of one variant: which model it serves, on what, how fast, at what price.

    ``key`` is the VariantAutoscaling's ``namespace/name``; ``model`` the served model's
    ``namespace/modelID`` (the routing pool); ``target`` the scale target's name (pods are named
    ``<target>-<n>``); ``unit_cost`` the cost of one accelerator per hour.
    """

    key: str
    model: str
    target: str
    accelerator: str
    accelerators_per_replica: int
    unit_cost: float
    profile: PerfProfile
    kv_capacity_tokens: int

    @property
    def replica_cost_per_hour(self) -> float:
        """Cost of one replica for one hour (unit cost x accelerators per replica)."""
        return self.unit_cost * self.accelerators_per_replica


@dataclass(frozen=True)
class Trace:
    """Requests to replay: arrival times (s from the start, sorted), prompt and output tokens, model index."""

    arrival_s: np.ndarray
    in_tokens: np.ndarray
    out_tokens: np.ndarray
    model_index: np.ndarray
    models: tuple[str, ...]

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name in ("in_tokens", "out_tokens", "model_index"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Trace.{name} has {len(getattr(self, name))} entries, arrival_s {n}")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("Trace.arrival_s must be sorted")
        if n and (np.any(self.out_tokens < 1) or np.any(self.in_tokens < 0)):
            raise ValueError("Trace: output tokens must be >= 1 and prompt tokens >= 0")
        if n and (self.model_index.min() < 0 or self.model_index.max() >= len(self.models)):
            raise ValueError("Trace.model_index out of range of Trace.models")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        """Time of the last arrival (0 for an empty trace)."""
        return float(self.arrival_s[-1]) if len(self.arrival_s) else 0.0


@dataclass(frozen=True)
class Routing:
    """How the gateway picks a replica for each request, per model.

    * ``least-outstanding``: the replica with the fewest requests running + queued (a
      least-request load balancer; balances requests, not capacity).
    * ``least-load``: llm-d's inference scheduler with its queue and KV-cache-utilisation scorers
      at equal weight (Kthena's router: least-request + KV-cache plugins): each replica scores
      ``(1 - waiting / max waiting over the pool) + (1 - kv_cache_usage)``, the highest wins; ties go
      to the fewest outstanding.  KV usage is relative to the replica's own cache, so a replica that
      holds its requests longer (a slower accelerator) or holds longer prompts draws fewer.
    * ``least-latency``: a latency-predicting router (llm-d's predicted-latency scorer, Kthena's
      least-latency plugin): the TTFT the replica's profile predicts for this request if it joined
      now (``gamma + delta x prompt x (n + 1)`` plus, with the batch full, the wait for a slot) and
      the ITL at batch ``n + 1``, each over the model's SLO target (``slo_s``: TTFT and ITL in s,
      0 = none), the larger ratio lowest wins.  Without targets: the predicted TTFT.

    ``per_model`` overrides ``default`` for the models it names (``namespace/modelID``).
    """

    default: str = "least-outstanding"
    per_model: Mapping[str, str] = field(default_factory=dict)
    slo_s: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (self.default, *self.per_model.values()):
            check_router(name)

    def router_of(self, model: str) -> str:
        """The router the gateway uses for ``model``."""
        return self.per_model.get(model, self.default)


@dataclass(frozen=True)
class SimConfig:
    """Simulation settings: control interval, start-up delay, gateway timeout, jitter, seed."""

    interval_s: float = 60.0
    startup_delay_s: float = 120.0
    gateway_timeout_s: float = 300.0
    prefill_jitter: float = 0.0
    seed: int = 0
    horizon_s: float | None = None  # controller cycles and cost stop here; default: the trace's end
    gateway_poll_s: float = 0.1
    """How soon a gateway hook sees a request waiting for a model with a variant at zero replicas (WVA's
    scale-from-zero engine polls the inference gateway's queue every 100 ms)."""

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError("SimConfig.interval_s must be > 0")
        if self.startup_delay_s < 0 or self.gateway_timeout_s < 0 or self.prefill_jitter < 0 or self.gateway_poll_s < 0:
            raise ValueError("SimConfig: delays, timeout, poll and jitter must be >= 0")


SCRAPE_S = 15.0
"""The scrape interval the simulated Prometheus resolves sub-minute arrival peaks at (a common scrape interval)."""


@dataclass(frozen=True)
class ReplicaGauges:
    """vLLM's gauges of one replica at a cycle: pod name, running, waiting, KV-cache usage (0..1), ready."""

    pod: str
    running: int
    waiting: int
    kv_cache_usage: float
    ready: bool


@dataclass(frozen=True)
class Observation:
    """What a controller sees at one cycle.

    ``replicas``: per variant key, the replicas it is scaled to (starting + ready, draining excluded);
    ``ready``: of those, how many are ready; ``pods``: per variant the gauges of its ready replicas;
    per model over the last interval: ``completed`` (vllm:request_success_total increase),
    ``arrived``, ``prompt_tokens`` and ``generated_tokens`` of the completed requests; per model now:
    ``gateway_waiting``, the requests held at the gateway because the model has no ready replica (the
    inference scheduler's flow-control queue, ``inference_extension_flow_control_queue_size``: what WVA's
    scale-from-zero engine reads, since a model at zero replicas exports no vLLM metric).
    """

    time_s: float
    interval_s: float
    replicas: Mapping[str, int]
    ready: Mapping[str, int]
    pods: Mapping[str, list[ReplicaGauges]]
    completed: Mapping[str, int]
    arrived: Mapping[str, int]
    prompt_tokens: Mapping[str, float]
    generated_tokens: Mapping[str, float]
    prompt_buckets: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Per model, the completed requests of the interval per :data:`PROMPT_TOKEN_BUCKETS` bound, cumulative
    (``increase(vllm:request_prompt_tokens_bucket[1m])``); the last entry is the ``+Inf`` bucket."""
    ttft_buckets: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Per model, the requests whose first token came in the interval per
    :data:`~engine.simulate.windows.TTFT_BUCKETS_S` bound, cumulative, ``+Inf`` last
    (``increase(vllm:time_to_first_token_seconds_bucket[1m])``: vLLM observes TTFT at the first token)."""
    itl_buckets: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Per model, the requests completed in the interval per :data:`~engine.simulate.windows.ITL_BUCKETS_S`
    bound by their mean inter-token latency (0 for a single output token), cumulative, ``+Inf`` last
    (``increase(vllm:request_time_per_output_token_seconds_bucket[1m])``, observed at completion)."""
    arrival_peak: Mapping[str, int] = field(default_factory=dict)
    """Per model, the most requests that arrived within one :data:`SCRAPE_S` scrape of the interval (what
    ``max_over_time(increase(...[15s])[1m:15s])`` shows at a 15 s scrape: the interval's sub-minute peak)."""
    ttft_sum: Mapping[str, float] = field(default_factory=dict)
    """Per model, the sum of those TTFTs in seconds (``increase(vllm:time_to_first_token_seconds_sum[1m])``)."""
    itl_sum: Mapping[str, float] = field(default_factory=dict)
    """Per model, the sum of those mean ITLs in seconds (``..._request_time_per_output_token_seconds_sum``)."""
    gateway_waiting: Mapping[str, int] = field(default_factory=dict)


Controller = Callable[[Observation], Mapping[str, int]]


@dataclass(frozen=True)
class CycleRecord:
    """One cycle: time, replicas per variant before and after the decision, ready replicas, arrivals per model."""

    time_s: float
    replicas: dict[str, int]
    desired: dict[str, int]
    ready: dict[str, int]
    arrived: dict[str, int]


@dataclass
class SimResult:
    """Per-request records (NaN where a step never happened), replica lifetimes and the cycles."""

    variants: list[VariantModel]
    trace: Trace
    horizon_s: float
    arrival_s: np.ndarray
    admit_s: np.ndarray
    first_s: np.ndarray
    done_s: np.ndarray
    variant_index: np.ndarray  # -1 when never served
    replica_index: np.ndarray  # the replica that served the request, -1 when never served
    dropped: np.ndarray  # bool: timed out at the gateway or still waiting at the end
    replica_variant: np.ndarray
    replica_created_s: np.ndarray
    replica_ready_s: np.ndarray  # NaN when never ready
    replica_removed_s: np.ndarray  # NaN when alive at the end
    replica_pod: list[str] = field(default_factory=list)  # pod name of each replica
    cycles: list[CycleRecord] = field(default_factory=list)
    wakes: list[CycleRecord] = field(default_factory=list)  # scalings by the gateway hook between cycles
    max_running_seen: dict[int, int] = field(default_factory=dict)  # replica -> max batch observed

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token per request (queueing + prefill)."""
        return np.asarray(self.first_s - self.arrival_s, dtype=float)

    @property
    def itl_s(self) -> np.ndarray:
        """Mean inter-token latency per request (0 for single-token requests)."""
        gaps = self.trace.out_tokens - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.where(gaps > 0, (self.done_s - self.first_s) / np.maximum(gaps, 1), 0.0), dtype=float)

    @property
    def e2e_s(self) -> np.ndarray:
        """End-to-end latency per request."""
        return np.asarray(self.done_s - self.arrival_s, dtype=float)

    @property
    def completed(self) -> np.ndarray:
        """Mask of the requests that completed."""
        return np.asarray(~np.isnan(self.done_s), dtype=bool)

    def accelerator_hours(self, start_s: float = 0.0) -> dict[str, float]:
        """Accelerator-hours per variant key, from replica creation to removal (within ``start_s`` .. the horizon)."""
        hours: dict[str, float] = {v.key: 0.0 for v in self.variants}
        end = np.where(
            np.isnan(self.replica_removed_s), self.horizon_s, np.minimum(self.replica_removed_s, self.horizon_s)
        )
        alive = np.maximum(end - np.clip(self.replica_created_s, start_s, self.horizon_s), 0.0)
        for index, variant in enumerate(self.variants):
            seconds = float(alive[self.replica_variant == index].sum())
            hours[variant.key] = seconds / 3600.0 * variant.accelerators_per_replica
        return hours

    def cost(self, start_s: float = 0.0) -> float:
        """Total accelerator cost over the horizon, or from ``start_s`` on (accelerator-hours x unit cost)."""
        hours = self.accelerator_hours(start_s)
        return sum(hours[v.key] * v.unit_cost for v in self.variants)


def poisson_trace(
    rate_rps: float,
    duration_s: float,
    in_tokens: int | np.ndarray,
    out_tokens: int | np.ndarray,
    seed: int = 0,
    model: str = "default/model",
) -> Trace:
    """A Poisson arrival stream of fixed-size (or given-distribution) requests for one model."""
    rng = np.random.default_rng(seed)
    count = int(rng.poisson(rate_rps * duration_s))
    arrivals = np.sort(rng.uniform(0.0, duration_s, count))

    def tokens(spec: int | np.ndarray) -> np.ndarray:
        if np.ndim(spec) == 0:
            return np.full(count, int(spec), dtype=np.int64)
        return rng.choice(np.asarray(spec, dtype=np.int64), size=count)

    return Trace(arrivals, tokens(in_tokens), tokens(out_tokens), np.zeros(count, dtype=np.int64), (model,))
