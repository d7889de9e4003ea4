"""Queueing performance model of one inference-server replica: its latencies and throughput at a given load.

This is the WVA (llm-d workload-variant-autoscaler / llm-inferno) analyzer, re-derived for Python:

* One replica is a state-dependent M/M/1 queue with finite capacity ``K = B + 10*B`` where
  ``B = max_batch``.  With ``n`` requests in service the server completes requests at
  ``mu(n) = n / (prefill(n) + n_decode * decode(n))`` (``n <= B``; ``mu(B)`` above, the extra requests
  wait), where ``prefill(n) = gamma + delta*in_tokens*n`` (``0`` when ``in_tokens == 0``),
  ``decode(n) = alpha + beta*n`` and ``n_decode = out_tokens - 1`` (every output token but the first
  is a decode step; WVA's special case: a decode-only request of one token still does one decode).
* From the stationary distribution: throughput ``X``, mean number in system ``N`` and in service
  ``Ns``; response time ``T = N/X``, service time ``S = Ns/X``, wait ``W = max(T - S, 0)``.
* The *effective concurrency* ``c`` solves ``prefill(c) + (out-1)*decode(c) = S`` (WVA's closed form,
  clamped to ``[0, B]``); then ``TTFT = W + prefill(c)`` and ``ITL = decode(c)``.

Units: profile times in milliseconds.  Internally the queue works in requests per millisecond
(as WVA does); every rate crossing this module's API is in requests per **second**.

Deliberate differences from the Go reference (all in corner cases where it misbehaves):

* float64 throughout (WVA uses float32): results agree to ~1e-6 relative, far inside 1e-3.
* When WVA's effective-concurrency denominator ``delta*in + beta*(out-1)`` is zero (``out_tokens == 1``
  with ``in_tokens == 0`` or ``delta == 0``) Go divides by zero (NaN/Inf).  Here ``c`` solves the same
  service-time equation with the decode count actually used (``in=0, out=1`` -> ``c = (S-alpha)/beta``),
  and falls back to the mean number in service when neither phase depends on the batch size.
* ``analyze`` accepts any non-negative rate (a finite queue is always stable); rate 0 returns the
  idle limit.  WVA refuses rates above ``mu(B)*0.999``.

How much load a replica carries within its SLO (the search over this model) is :mod:`engine.perf.sizing`.
The module is pure and deterministic (numpy only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "PerfProfile",
    "Workload",
    "SLO",
    "Analysis",
    "QUEUE_TO_BATCH_RATIO",
    "analyze",
    "decode_steps",
    "solve_concurrency",
    "phase_latencies",
    "service_rate",
]

FloatArray = npt.NDArray[np.float64]
"""One float per (profile, workload) pair."""
Floats = float | FloatArray
"""A float or an array of them: the helpers below broadcast, so one scalar serves every pair."""

QUEUE_TO_BATCH_RATIO = 10
"""Queue capacity per replica as a multiple of the max batch size (WVA ``MaxQueueToBatchRatio``)."""

# Effective-concurrency modes (how c is derived from the service time S).
_C_WVA, _C_DECODE_ONLY, _C_PREFILL_ONLY, _C_FLAT = 0, 1, 2, 3


@dataclass(frozen=True)
class PerfProfile:
    """Latency profile of one variant (model on an accelerator configuration), in milliseconds.

    ``ITL = alpha + beta*batch`` and ``prefill = gamma + delta*in_tokens*batch`` (the ``decodeParms`` /
    ``prefillParms`` of a VariantAutoscaling ``perfParms``); ``max_batch`` is the server's max batch
    size (``maxBatchSize``).
    """

    alpha: float
    beta: float
    gamma: float
    delta: float
    max_batch: int

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma", "delta"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"PerfProfile.{name} must be a finite number >= 0, got {value!r}")
        if int(self.max_batch) != self.max_batch or self.max_batch < 1:
            raise ValueError(f"PerfProfile.max_batch must be an integer >= 1, got {self.max_batch!r}")


@dataclass(frozen=True)
class Workload:
    """Average request shape: input (prompt) and output (generated) tokens per request."""

    in_tokens: float
    out_tokens: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.in_tokens) or self.in_tokens < 0:
            raise ValueError(f"Workload.in_tokens must be >= 0, got {self.in_tokens!r}")
        if not math.isfinite(self.out_tokens) or self.out_tokens < 1:
            raise ValueError(f"Workload.out_tokens must be >= 1, got {self.out_tokens!r}")


@dataclass(frozen=True)
class SLO:
    """Service-level objectives; ``None`` (or 0, as in WVA) means "not considered".

    ``ttft_ms``: max mean time to first token (queueing + prefill); ``itl_ms``: max mean inter-token
    latency; ``tps``: a token-throughput target, which (as in WVA) only caps the per-replica rate at
    90% of the stable maximum.
    """

    ttft_ms: float | None = None
    itl_ms: float | None = None
    tps: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "itl_ms", "tps"):
            value = getattr(self, name)
            if value is not None and (math.isnan(value) or value < 0):
                raise ValueError(f"SLO.{name} must be None or >= 0, got {value!r}")


@dataclass(frozen=True)
class Analysis:
    """Steady-state metrics of one replica at a given arrival rate.

    Names against WVA's ``AnalysisMetrics`` (whose ``String()`` prints ``AvgNumInServ`` as ``conc``,
    and whose simulator feeds it on as the replica's concurrency), so no field here is called plain
    "concurrency":

    * ``in_service``: mean number of requests in service, ``Ns`` -- WVA's ``AvgNumInServ`` ("conc");
    * ``in_system``: mean number in the system (in service plus waiting), ``N``; WVA does not report it;
    * ``effective_concurrency``: the batch size ``c`` solving ``prefill(c) + (out-1)*decode(c) = S``
      that drives TTFT and ITL (WVA computes it inside its analyzer and does not report it);
    * ``utilization``: ``in_service / max_batch`` clamped to [0, 1] -- WVA's ``Rho``;
    * ``throughput_rps`` (``Throughput``), ``response_ms`` (``AvgRespTime``), ``wait_ms``
      (``AvgWaitTime``), ``prefill_ms`` (``AvgPrefillTime``), ``itl_ms`` (``AvgTokenTime``),
      ``ttft_ms`` (wait + prefill, WVA's ``AvgTTFT``).
    """

    throughput_rps: float
    ttft_ms: float
    itl_ms: float
    wait_ms: float
    effective_concurrency: float
    utilization: float
    prefill_ms: float = 0.0
    service_ms: float = 0.0
    response_ms: float = 0.0
    in_service: float = 0.0
    in_system: float = 0.0
    arrival_rps: float = 0.0


# --------------------------------------------------------------------------------------------------
# shared helpers (the analysis below and the batched search of engine.perf.sizing)


def decode_steps(in_tokens: Floats, out_tokens: Floats) -> FloatArray:
    """Decode steps per request: out-1, except WVA's decode-only single-token case which does one."""
    nd = out_tokens - 1.0
    return np.where((in_tokens == 0) & (out_tokens == 1), 1.0, nd)


def service_rate(
    alpha: Floats, beta: Floats, gamma: Floats, delta: Floats, in_tokens: Floats, nd: Floats, n: Floats
) -> FloatArray:
    """mu(n) in requests per millisecond (broadcasting arrays)."""
    prefill = np.where(in_tokens == 0, 0.0, gamma + delta * in_tokens * n)
    return n / (prefill + nd * (alpha + beta * n))


def solve_concurrency(
    s_ms: Floats,
    alpha: Floats,
    beta: Floats,
    gamma: Floats,
    delta: Floats,
    in_tokens: Floats,
    out_tokens: Floats,
    nd: Floats,
    batch: Floats,
    in_service: Floats,
) -> FloatArray:
    """Effective concurrency c from the mean service time (see module docstring)."""
    tokens = out_tokens - 1.0
    den = delta * in_tokens + beta * tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        c_wva = (s_ms - (gamma + alpha * tokens)) / den
        # Fallbacks where WVA divides by zero.
        c_dec = (s_ms - alpha * nd) / (beta * nd)  # in = 0, out = 1: one decode step is the service
        c_pre = (s_ms - gamma) / (delta * in_tokens)  # in > 0, out = 1, beta irrelevant
    c = np.where(den > 0, c_wva, np.nan)
    decode_only = (den <= 0) & (in_tokens == 0) & (beta > 0)
    c = np.where(decode_only, c_dec, c)
    prefill_only = (den <= 0) & (in_tokens > 0) & (delta > 0)
    c = np.where(prefill_only, c_pre, c)
    c = np.where(np.isnan(c), in_service, c)
    return np.clip(c, 0.0, batch)


def phase_latencies(
    c: Floats, alpha: Floats, beta: Floats, gamma: Floats, delta: Floats, in_tokens: Floats
) -> tuple[FloatArray, FloatArray]:
    """(prefill(c), ITL(c)) in ms."""
    prefill = np.where(in_tokens == 0, 0.0, gamma + delta * in_tokens * c)
    return prefill, np.asarray(alpha + beta * c)


# --------------------------------------------------------------------------------------------------
# single-rate analysis (explicit distribution, any rate)


def analyze(profile: PerfProfile, workload: Workload, rate_rps: float) -> Analysis:
    """Steady-state metrics of one replica receiving ``rate_rps`` requests per second.

    Solves the full birth-death chain over ``K + 1`` states in log space (no overflow for large
    batches or rates beyond the service capacity).
    """
    if not math.isfinite(rate_rps) or rate_rps < 0:
        raise ValueError(f"rate_rps must be a finite number >= 0, got {rate_rps!r}")
    a, b, g, d = (float(profile.alpha), float(profile.beta), float(profile.gamma), float(profile.delta))
    batch = int(profile.max_batch)
    i_t, o_t = float(workload.in_tokens), float(workload.out_tokens)
    nd = float(decode_steps(np.float64(i_t), np.float64(o_t)))
    n = np.arange(1, batch + 1, dtype=np.float64)
    mu = service_rate(a, b, g, d, i_t, nd, n)  # req/ms, n = 1..B
    if rate_rps == 0:
        # Idle limit: a lone request is served at rate mu(1), nothing waits.
        lam = 0.0
        x = 0.0
        s = 1.0 / float(mu[0])
        wait = 0.0
        ns = 0.0
        nsys = 0.0
        t = s
    else:
        lam = rate_rps / 1000.0
        k = batch + QUEUE_TO_BATCH_RATIO * batch
        states = np.arange(0, k + 1, dtype=np.float64)
        log_mu = np.log(np.concatenate([mu, np.full(k - batch, mu[-1])]))
        logp = np.concatenate([[0.0], np.cumsum(math.log(lam) - log_mu)])
        logp -= logp.max()
        p = np.exp(logp)
        p /= p.sum()
        nsys = float(states @ p)
        ns = float(np.minimum(states, batch) @ p)
        x = lam * (1.0 - float(p[-1]))
        t = nsys / x
        s = ns / x
        wait = max(t - s, 0.0)
    c = float(
        solve_concurrency(np.float64(s), a, b, g, d, np.float64(i_t), np.float64(o_t), np.float64(nd), float(batch), ns)
    )
    prefill, itl = (float(v) for v in phase_latencies(c, a, b, g, d, np.float64(i_t)))
    return Analysis(
        throughput_rps=float(x * 1000.0),
        ttft_ms=float(wait + prefill),
        itl_ms=float(itl),
        wait_ms=float(wait),
        effective_concurrency=c,
        utilization=float(min(max(ns / batch, 0.0), 1.0)),
        prefill_ms=float(prefill),
        service_ms=float(s),
        response_ms=float(t),
        in_service=float(ns),
        in_system=float(nsys),
        arrival_rps=float(rate_rps),
    )
