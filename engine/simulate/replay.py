"""A discrete-event simulator of continuous-batching LLM serving replicas.

Why: an operator wants to replay real traffic against their cluster description and see what an
autoscaling policy would have cost and which SLOs it would have missed, without trusting the very
queueing model the optimizer sizes with.  This module is that second opinion: it moves individual
requests through replicas, independent of :mod:`engine.perf.queueing`'s Markov chain.

The replica model (times in ms inside a profile, in seconds everywhere else):

* A replica runs at most ``maxBatchSize`` (``B``) requests at once; the rest wait in its FIFO
  queue.  A request is admitted when a slot is free and its prompt fits in the KV cache.
* Admission starts the request's prefill, which lasts ``gamma + delta * in_tokens * n`` ms, ``n``
  being the batch size the request joins (WVA's prefill law, charged to the batch it runs in).
  The first token appears when the prefill ends (TTFT = queueing + prefill).
* Every request past its prefill decodes one token per iteration; an iteration of a batch of ``n``
  takes ``alpha + beta * n`` ms.  The batch size changes only at admissions and completions, so
  between two such events every iteration has the same length: the simulator advances a shared
  decode clock (tokens per decoding request) over whole spans of iterations instead of
  looping over tokens, which keeps one event per admission, first token and completion.
* KV-cache usage is the prompt tokens of the running requests plus the tokens they have
  generated, over the replica's KV capacity in tokens.
* A gateway routes each arrival to a routable replica of its model, by the model's router
  (:class:`Routing`): ``least-outstanding`` (the fewest requests running + queued, the default),
  ``least-load`` (llm-d's inference scheduler / Kthena's router: queue depth and KV-cache
  utilisation scored per endpoint) or ``least-latency`` (the replica whose profile predicts the
  lowest TTFT and ITL for this request, relative to the model's SLO); with no ready replica the
  request waits at the gateway (counted in ``Observation.gateway_waiting``) and is dropped (unserved) after
  ``gateway_timeout_s``.
* Replicas added by a controller become ready ``startup_delay_s`` later (model load); removed ones
  stop receiving requests and drain: they leave once their batch and queue are empty.  A replica
  still starting when removed leaves at once.  A replica costs from creation until it leaves.

Per request the simulator records arrival, admission, first token and completion (TTFT, ITL,
end-to-end latency follow); per replica the gauges vLLM exports (``num_requests_running``,
``num_requests_waiting``, ``kv_cache_usage_perc``) are available to the controller at every cycle,
and :func:`engine.simulate.windows.window_aggregates` turns the request records into the histogram sums and counts
Prometheus would hold.

Pure and deterministic: no I/O and no clock; the only randomness is the optional prefill jitter,
drawn from a ``numpy`` generator seeded by ``SimConfig.seed``.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np

from engine.perf.prompt_split import ROUTERS
from engine.simulate.records import (
    SCRAPE_S,
    Controller,
    CycleRecord,
    Observation,
    ReplicaGauges,
    Routing,
    SimConfig,
    SimResult,
    Trace,
    VariantModel,
)
from engine.simulate.windows import ITL_BUCKETS_S, PROMPT_TOKEN_BUCKETS, TTFT_BUCKETS_S

__all__ = ["simulate"]

_EPS = 1e-9
_STARTING, _READY, _DRAINING, _GONE = 0, 1, 2, 3


class _Replica:
    """Mutable state of one replica (internal)."""

    __slots__ = (
        "id",
        "variant",
        "pod",
        "state",
        "created",
        "ready_at",
        "removed",
        "queue",
        "prefill",
        "decode",
        "n",
        "clock",
        "t",
        "version",
        "sum_in",
        "sum_start",
        "n_decoding",
        "alpha",
        "beta",
        "gamma",
        "delta",
        "batch",
        "kv_capacity",
        "outstanding",
        "max_n",
    )

    def __init__(self, rid: int, variant_index: int, variant: VariantModel, pod: str, created: float) -> None:
        p = variant.profile
        self.id, self.variant, self.pod = rid, variant_index, pod
        self.state = _STARTING
        self.created, self.ready_at, self.removed = created, math.nan, math.nan
        self.queue: deque[int] = deque()
        self.prefill: list[tuple[float, int]] = []  # (prefill end time, request)
        self.decode: list[tuple[float, int]] = []  # (decode clock value at completion, request)
        self.n = 0  # running requests (prefilling + decoding)
        self.n_decoding = 0
        self.clock = 0.0  # decode iterations elapsed for a request decoding since t=0
        self.t = created
        self.version = 0
        self.sum_in = 0.0  # prompt tokens of the running requests
        self.sum_start = 0.0  # sum of the decode clock at each decoding request's first token
        self.alpha, self.beta = p.alpha / 1000.0, p.beta / 1000.0  # seconds
        self.gamma, self.delta = p.gamma / 1000.0, p.delta / 1000.0
        self.batch = int(p.max_batch)
        self.kv_capacity = float(variant.kv_capacity_tokens)
        self.outstanding = 0
        self.max_n = 0

    def advance(self, t: float) -> None:
        """Move the decode clock to time ``t`` (the batch size has been constant since ``self.t``)."""
        if self.n > 0 and t > self.t:
            self.clock += (t - self.t) / (self.alpha + self.beta * self.n)
        self.t = max(t, self.t)

    def kv_tokens(self) -> float:
        """Prompt tokens of the running requests plus the tokens they have generated."""
        return self.sum_in + self.n_decoding * self.clock - self.sum_start + self.n_decoding

    def next_event(self) -> float:
        """Time of the next prefill end or completion (inf when idle)."""
        best = math.inf
        if self.prefill:
            best = self.prefill[0][0]
        if self.decode:
            left = max(self.decode[0][0] - self.clock, 0.0)
            best = min(best, self.t + left * (self.alpha + self.beta * self.n))
        return best


class _Run:
    """One simulation run (internal): the event loop and its bookkeeping."""

    def __init__(
        self,
        variants: Sequence[VariantModel],
        trace: Trace,
        config: SimConfig,
        initial: Mapping[str, int],
        routing: Routing,
        gateway_hook: Controller | None = None,
    ) -> None:
        self.variants = list(variants)
        self.gateway_hook = gateway_hook
        self.router = [ROUTERS.index(routing.router_of(m)) for m in trace.models]
        self.slo = [routing.slo_s.get(m, (0.0, 0.0)) for m in trace.models]
        self.trace = trace
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        n = len(trace)
        self.arr = trace.arrival_s.astype(float).tolist()
        self.inp = trace.in_tokens.astype(float).tolist()
        self.out = trace.out_tokens.astype(int).tolist()
        self.req_model = trace.model_index.astype(int).tolist()
        self.jitter = (
            np.exp(self.rng.normal(0.0, config.prefill_jitter, n) - config.prefill_jitter**2 / 2).tolist()
            if config.prefill_jitter > 0
            else None
        )
        self.admit = [math.nan] * n
        self.first = [math.nan] * n
        self.done = [math.nan] * n
        self.served_by = [-1] * n
        self.served_replica = [-1] * n
        self.dropped = [False] * n
        self.model_of_variant = [trace.models.index(v.model) if v.model in trace.models else -1 for v in self.variants]
        self.replicas: list[_Replica] = []
        self.routable: list[list[_Replica]] = [[] for _ in trace.models]
        self.pending: list[deque[int]] = [deque() for _ in trace.models]
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.horizon = config.horizon_s if config.horizon_s is not None else trace.duration_s
        self.window_completed = [0] * len(trace.models)
        self.window_arrived = [0] * len(trace.models)
        self.window_start = 0.0
        self.scrape_bins = max(int(math.ceil(config.interval_s / SCRAPE_S - 1e-9)), 1)
        self.window_scrape = [[0] * self.scrape_bins for _ in trace.models]
        self.window_prompt = [0.0] * len(trace.models)
        self.window_generated = [0.0] * len(trace.models)
        self.window_buckets = [[0] * (len(PROMPT_TOKEN_BUCKETS) + 1) for _ in trace.models]
        self.window_ttft, self.window_itl = _latency_counts(len(trace.models))
        self.window_ttft_sum, self.window_itl_sum = [0.0] * len(trace.models), [0.0] * len(trace.models)
        self.prompt_bucket = np.searchsorted(
            np.asarray(PROMPT_TOKEN_BUCKETS, dtype=float), trace.in_tokens, side="left"
        ).tolist()
        self.cycles: list[CycleRecord] = []
        self.wakes: list[CycleRecord] = []
        self.alive = [0] * len(self.variants)  # replicas starting or ready, per variant
        self.variants_of_model = [
            [i for i, m in enumerate(self.model_of_variant) if m == model] for model in range(len(trace.models))
        ]
        self.poll_armed = [False] * len(trace.models)
        self.counters = [0] * len(self.variants)
        for index, variant in enumerate(self.variants):
            for _ in range(int(initial.get(variant.key, 0))):
                self._add_replica(index, 0.0, ready_now=True)

    # -- events ---------------------------------------------------------------------------------

    def _push(self, time: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, kind, a, b))

    def _schedule(self, replica: _Replica) -> None:
        replica.version += 1
        when = replica.next_event()
        if when < math.inf:
            self._push(when, 1, replica.id, replica.version)

    # -- replicas ---------------------------------------------------------------------------------

    def _add_replica(self, variant_index: int, t: float, ready_now: bool = False) -> _Replica:
        variant = self.variants[variant_index]
        pod = f"{variant.target}-{self.counters[variant_index]}"
        self.counters[variant_index] += 1
        replica = _Replica(len(self.replicas), variant_index, variant, pod, t)
        self.replicas.append(replica)
        self.alive[variant_index] += 1
        if ready_now:
            self._make_ready(replica, t)
        else:
            self._push(t + self.config.startup_delay_s, 2, replica.id)
        return replica

    def _make_ready(self, replica: _Replica, t: float) -> None:
        if replica.state != _STARTING:
            return
        replica.state, replica.ready_at, replica.t = _READY, t, t
        model = self.model_of_variant[replica.variant]
        if model < 0:
            return
        self.routable[model].append(replica)
        pending = self.pending[model]
        while pending:
            request = pending.popleft()
            if t - self.arr[request] > self.config.gateway_timeout_s:
                self.dropped[request] = True
                continue
            self._route(request, t)

    def _remove_replica(self, replica: _Replica, t: float) -> None:
        model = self.model_of_variant[replica.variant]
        if replica.state in (_STARTING, _READY):
            self.alive[replica.variant] -= 1
        if replica.state == _STARTING:
            replica.state, replica.removed = _GONE, t
            return
        if replica.state == _READY:
            replica.state = _DRAINING
            if model >= 0:
                self.routable[model].remove(replica)
        self._maybe_gone(replica, t)

    def _maybe_gone(self, replica: _Replica, t: float) -> None:
        if replica.state == _DRAINING and replica.n == 0 and not replica.queue:
            replica.state, replica.removed = _GONE, t

    def _scale(self, desired: Mapping[str, int], t: float) -> None:
        for index, variant in enumerate(self.variants):
            if variant.key not in desired:
                continue
            want = max(int(desired[variant.key]), 0)
            members = [r for r in self.replicas if r.variant == index and r.state in (_STARTING, _READY)]
            if want > len(members):
                for _ in range(want - len(members)):
                    self._add_replica(index, t)
            elif want < len(members):
                # Like a ReplicaSet: pods not yet ready go first (newest first), then the least busy.
                order = sorted(members, key=lambda r: (r.state == _READY, r.outstanding, -r.id))
                for replica in order[: len(members) - want]:
                    self._remove_replica(replica, t)

    # -- requests ---------------------------------------------------------------------------------

    def _route(self, request: int, t: float) -> None:
        model = self.req_model[request]
        pool = self.routable[model]
        if not pool:
            self.pending[model].append(request)
            self._arm_gateway_poll(model, t)
            return
        replica = pool[0] if len(pool) == 1 else self._pick(model, pool, request, t)
        replica.advance(t)
        replica.queue.append(request)
        replica.outstanding += 1
        self.served_by[request] = replica.variant
        self.served_replica[request] = replica.id
        self._admit(replica, t)
        self._schedule(replica)

    def _pick(self, model: int, pool: list[_Replica], request: int, t: float) -> _Replica:
        """The replica the model's router picks for ``request`` at ``t`` (see :class:`Routing`)."""
        router = self.router[model]
        if router == 0:
            return min(pool, key=_outstanding)
        for replica in pool:
            replica.advance(t)
        if router == 1:
            most = max(len(r.queue) for r in pool)

            def load_key(r: _Replica) -> tuple[float, int]:
                queue = 1.0 - len(r.queue) / most if most else 1.0
                kv = 1.0 - min(r.kv_tokens() / r.kv_capacity, 1.0) if r.n else 1.0
                return (-(queue + kv), r.outstanding)

            return min(pool, key=load_key)
        prompt = self.inp[request]
        ttft_target, itl_target = self.slo[model]

        def latency_key(r: _Replica) -> tuple[float, int]:
            ttft, itl = _predicted_latency(r, prompt, t)
            if ttft_target > 0 or itl_target > 0:
                score = max(ttft / ttft_target if ttft_target > 0 else 0.0, itl / itl_target if itl_target > 0 else 0.0)
            else:
                score = ttft
            return (score, r.outstanding)

        return min(pool, key=latency_key)

    def _admit(self, replica: _Replica, t: float) -> None:
        queue = replica.queue
        while queue and replica.n < replica.batch:
            request = queue[0]
            prompt = self.inp[request]
            if replica.n > 0 and replica.kv_tokens() + prompt > replica.kv_capacity:
                break
            queue.popleft()
            replica.n += 1
            replica.max_n = max(replica.max_n, replica.n)
            replica.sum_in += prompt
            self.admit[request] = t
            duration = replica.gamma + replica.delta * prompt * replica.n if prompt > 0 else 0.0
            if self.jitter is not None:
                duration *= self.jitter[request]
            heapq.heappush(replica.prefill, (t + duration, request))

    def _complete(self, replica: _Replica, request: int, t: float) -> None:
        self.done[request] = t
        replica.n -= 1
        replica.sum_in -= self.inp[request]
        replica.outstanding -= 1
        model = self.req_model[request]
        self.window_completed[model] += 1
        self.window_prompt[model] += self.inp[request]
        self.window_generated[model] += self.out[request]
        self.window_buckets[model][self.prompt_bucket[request]] += 1
        gaps = self.out[request] - 1
        itl = (t - self.first[request]) / gaps if gaps > 0 else 0.0
        self.window_itl[model][bisect.bisect_left(ITL_BUCKETS_S, itl)] += 1
        self.window_itl_sum[model] += itl

    def _replica_event(self, replica: _Replica, t: float) -> None:
        replica.advance(t)
        decode = replica.decode
        while decode and decode[0][0] - replica.clock <= _EPS * max(1.0, decode[0][0]):
            target, request = heapq.heappop(decode)
            replica.n_decoding -= 1
            replica.sum_start -= target - (self.out[request] - 1)
            self._complete(replica, request, t)
        prefill = replica.prefill
        while prefill and prefill[0][0] <= t + _EPS:
            _, request = heapq.heappop(prefill)
            self.first[request] = t
            ttft_bucket = bisect.bisect_left(TTFT_BUCKETS_S, t - self.arr[request])
            self.window_ttft[self.req_model[request]][ttft_bucket] += 1
            self.window_ttft_sum[self.req_model[request]] += t - self.arr[request]
            if self.out[request] <= 1:
                self._complete(replica, request, t)
                continue
            start = replica.clock
            heapq.heappush(decode, (start + self.out[request] - 1, request))
            replica.n_decoding += 1
            replica.sum_start += start
        self._admit(replica, t)
        self._maybe_gone(replica, t)
        self._schedule(replica)

    # -- cycles -----------------------------------------------------------------------------------

    def _observe(self, t: float) -> Observation:
        replicas: dict[str, int] = {}
        ready: dict[str, int] = {}
        pods: dict[str, list[ReplicaGauges]] = {}
        for index, variant in enumerate(self.variants):
            members = [r for r in self.replicas if r.variant == index and r.state in (_STARTING, _READY)]
            replicas[variant.key] = len(members)
            ready[variant.key] = sum(1 for r in members if r.state == _READY)
            gauges = []
            for r in members:
                if r.state != _READY:
                    continue
                r.advance(t)
                usage = min(max(r.kv_tokens() / r.kv_capacity, 0.0), 1.0) if r.n else 0.0
                gauges.append(ReplicaGauges(r.pod, r.n, len(r.queue), usage, True))
            pods[variant.key] = gauges
        models = self.trace.models
        return Observation(
            time_s=t,
            interval_s=self.config.interval_s,
            replicas=replicas,
            ready=ready,
            pods=pods,
            completed=dict(zip(models, self.window_completed)),
            arrived=dict(zip(models, self.window_arrived)),
            arrival_peak={m: max(bins) for m, bins in zip(models, self.window_scrape)},
            prompt_tokens=dict(zip(models, self.window_prompt)),
            generated_tokens=dict(zip(models, self.window_generated)),
            prompt_buckets={m: tuple(int(c) for c in np.cumsum(b)) for m, b in zip(models, self.window_buckets)},
            ttft_buckets={m: tuple(int(c) for c in np.cumsum(b)) for m, b in zip(models, self.window_ttft)},
            itl_buckets={m: tuple(int(c) for c in np.cumsum(b)) for m, b in zip(models, self.window_itl)},
            ttft_sum=dict(zip(models, self.window_ttft_sum)),
            itl_sum=dict(zip(models, self.window_itl_sum)),
            gateway_waiting={m: self._waiting_at_gateway(i, t) for i, m in enumerate(models)},
        )

    def _waiting_at_gateway(self, model: int, t: float) -> int:
        """Requests of ``model`` held at the gateway at ``t``; those past the gateway timeout are dropped first."""
        pending = self.pending[model]
        while pending and t - self.arr[pending[0]] > self.config.gateway_timeout_s:
            self.dropped[pending.popleft()] = True
        return len(pending)

    def _arm_gateway_poll(self, model: int, t: float) -> None:
        """With a gateway hook: poll it ``gateway_poll_s`` after a request starts waiting for a model one of whose
        variants has no replica (WVA's scale-from-zero engine polls the gateway's queue every 100 ms)."""
        if self.gateway_hook is None or self.poll_armed[model]:
            return
        if any(self.alive[v] == 0 for v in self.variants_of_model[model]):
            self.poll_armed[model] = True
            self._push(t + self.config.gateway_poll_s, 4, model)

    def _poll_gateway(self, model: int, t: float) -> None:
        """The gateway hook sees the cluster now and may scale (recorded in ``wakes``, not as a cycle)."""
        self.poll_armed[model] = False
        assert self.gateway_hook is not None
        observation = self._observe(t)
        desired = dict(self.gateway_hook(observation))
        if not desired:
            return
        self.wakes.append(
            CycleRecord(
                t,
                dict(observation.replicas),
                {k: int(desired.get(k, v)) for k, v in observation.replicas.items()},
                dict(observation.ready),
                {},
            )
        )
        self._scale(desired, t)

    def _cycle(self, t: float, controller: Controller | None) -> None:
        observation = self._observe(t)
        desired = dict(controller(observation)) if controller is not None else {}
        self.cycles.append(
            CycleRecord(
                t,
                dict(observation.replicas),
                {k: int(desired.get(k, v)) for k, v in observation.replicas.items()},
                dict(observation.ready),
                dict(observation.arrived),
            )
        )
        self._scale(desired, t)
        zero = [0] * len(self.trace.models)
        self.window_completed, self.window_arrived = list(zero), list(zero)
        self.window_start = t
        self.window_scrape = [[0] * self.scrape_bins for _ in zero]
        self.window_prompt, self.window_generated = [0.0] * len(zero), [0.0] * len(zero)
        self.window_buckets = [[0] * (len(PROMPT_TOKEN_BUCKETS) + 1) for _ in zero]
        self.window_ttft, self.window_itl = _latency_counts(len(zero))
        self.window_ttft_sum, self.window_itl_sum = [0.0] * len(zero), [0.0] * len(zero)
        if t + self.config.interval_s <= self.horizon + _EPS:
            self._push(t + self.config.interval_s, 3, 0)

    # -- main loop --------------------------------------------------------------------------------

    def run(self, controller: Controller | None) -> SimResult:
        if self.config.interval_s <= self.horizon:
            self._push(self.config.interval_s, 3, 0)
        arrivals, total = self.arr, len(self.arr)
        heap = self.heap
        nxt = 0
        while nxt < total or heap:
            if nxt < total and (not heap or arrivals[nxt] <= heap[0][0]):
                t = arrivals[nxt]
                self.window_arrived[self.req_model[nxt]] += 1
                scrape = min(int((t - self.window_start) / SCRAPE_S), self.scrape_bins - 1)
                self.window_scrape[self.req_model[nxt]][max(scrape, 0)] += 1
                self._route(nxt, t)
                nxt += 1
                continue
            t, _, kind, a, b = heapq.heappop(heap)
            if kind == 1:
                replica = self.replicas[a]
                if replica.version == b:
                    self._replica_event(replica, t)
            elif kind == 2:
                self._make_ready(self.replicas[a], t)
            elif kind == 4:
                self._poll_gateway(a, t)
            elif kind == 3:
                if nxt < total or any(r.outstanding for r in self.replicas) or t <= self.horizon + _EPS:
                    self._cycle(t, controller)
        for pending in self.pending:
            for request in pending:
                self.dropped[request] = True
        return self._result()

    def _result(self) -> SimResult:
        rs = self.replicas
        return SimResult(
            variants=self.variants,
            trace=self.trace,
            horizon_s=self.horizon,
            arrival_s=np.asarray(self.arr, dtype=float),
            admit_s=np.asarray(self.admit, dtype=float),
            first_s=np.asarray(self.first, dtype=float),
            done_s=np.asarray(self.done, dtype=float),
            variant_index=np.asarray(self.served_by, dtype=np.int64),
            replica_index=np.asarray(self.served_replica, dtype=np.int64),
            dropped=np.asarray(self.dropped, dtype=bool),
            replica_variant=np.asarray([r.variant for r in rs], dtype=np.int64),
            replica_created_s=np.asarray([r.created for r in rs], dtype=float),
            replica_ready_s=np.asarray([r.ready_at for r in rs], dtype=float),
            replica_removed_s=np.asarray([r.removed for r in rs], dtype=float),
            replica_pod=[r.pod for r in rs],
            cycles=self.cycles,
            wakes=self.wakes,
            max_running_seen={r.id: r.max_n for r in rs},
        )


def _latency_counts(models: int) -> tuple[list[list[int]], list[list[int]]]:
    """Empty per-model TTFT and request-ITL bucket counts (one per bound, then +Inf) for a new interval."""
    return (
        [[0] * (len(TTFT_BUCKETS_S) + 1) for _ in range(models)],
        [[0] * (len(ITL_BUCKETS_S) + 1) for _ in range(models)],
    )


def _outstanding(replica: _Replica) -> int:
    return replica.outstanding


def _predicted_latency(replica: _Replica, prompt: float, t: float) -> tuple[float, float]:
    """TTFT and ITL (s) the replica's profile predicts for a request of ``prompt`` tokens joining it at ``t``.

    Admitted at once when a slot is free, nobody queues before it and its prompt fits the KV cache;
    otherwise it waits for the requests ahead of it to leave, each estimated at the time to the
    replica's next event (the batch's next completion or first token).
    """
    n = replica.n
    fits = n < replica.batch and not replica.queue and (n == 0 or replica.kv_tokens() + prompt <= replica.kv_capacity)
    wait = 0.0 if fits else (len(replica.queue) + 1) * max(replica.next_event() - t, 0.0)
    joined = min(n + 1, replica.batch)
    ttft = wait + (replica.gamma + replica.delta * prompt * joined if prompt > 0 else 0.0)
    return ttft, replica.alpha + replica.beta * joined


def simulate(
    variants: Sequence[VariantModel],
    trace: Trace,
    config: SimConfig,
    initial: Mapping[str, int],
    controller: Controller | None = None,
    routing: Routing | None = None,
    gateway_hook: Controller | None = None,
) -> SimResult:
    """Replay ``trace`` against replicas of ``variants``, starting from ``initial`` ready replicas per variant.

    Every ``config.interval_s`` the ``controller`` (if any) sees an :class:`Observation` and returns the
    desired replicas per variant key; variants it leaves out keep their replicas.  Controller cycles run
    until the horizon; afterwards the simulation only drains the requests still in flight.  ``routing``
    chooses the gateway's endpoint picker per model (default: least outstanding requests).  ``gateway_hook``
    (if any) also sees an observation ``config.gateway_poll_s`` after a request starts waiting at the gateway for
    a model one of whose variants has no replica, and may scale at once (a scale-from-zero engine).
    """
    keys = [v.key for v in variants]
    if len(set(keys)) != len(keys):
        raise ValueError("variant keys must be unique")
    return _Run(variants, trace, config, initial, routing or Routing(), gateway_hook).run(controller)
