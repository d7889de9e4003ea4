"""Queueing performance model of one inference-server replica, and SLO-driven sizing.

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
* Sizing: bisection on the arrival rate over ``[mu(1)*0.001, mu(B)*0.999]`` for the largest rate whose
  TTFT and ITL meet the SLO (relative tolerance 1e-6, at most 100 halvings, the answer is the last
  midpoint, exactly like WVA's ``BinarySearch``); a TPS target caps the rate at ``0.9 * mu(B)*0.999``;
  the sustainable rate reported is the throughput ``X`` at that arrival rate.

Units: profile times in milliseconds.  Internally the queue works in requests per millisecond
(as WVA does); every rate crossing this module's API is in requests per **second**.

Deliberate differences from the Go reference (all in corner cases where it misbehaves):

* float64 throughout (WVA uses float32): results agree to ~1e-6 relative, far inside 1e-3.
* TTFT and ITL are searched jointly: the rate found is the root of ``max(TTFT/ttft_slo,
  ITL/itl_slo) = 1``.  Both metrics increase with the arrival rate, so this is the minimum of WVA's two
  separate roots, at half the cost.
* A metric that does not vary with the rate (e.g. ITL when ``beta == 0``) and meets its target is
  treated as met over the whole range; WVA's search mistakes a flat curve for a decreasing one and
  reports such a target as unreachable.
* When WVA's effective-concurrency denominator ``delta*in + beta*(out-1)`` is zero (``out_tokens == 1``
  with ``in_tokens == 0`` or ``delta == 0``) Go divides by zero (NaN/Inf).  Here ``c`` solves the same
  service-time equation with the decode count actually used (``in=0, out=1`` -> ``c = (S-alpha)/beta``),
  and falls back to the mean number in service when neither phase depends on the batch size.
* ``analyze`` accepts any non-negative rate (a finite queue is always stable); rate 0 returns the
  idle limit.  WVA refuses rates above ``mu(B)*0.999``.

The module is pure and deterministic (numpy only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PerfProfile",
    "Workload",
    "SLO",
    "Analysis",
    "Infeasible",
    "SizingResult",
    "QUEUE_TO_BATCH_RATIO",
    "RATE_EPSILON",
    "TPS_SAFETY_FRACTION",
    "SEARCH_TOLERANCE",
    "analyze",
    "max_rate",
    "max_rates",
    "size_arrays",
    "replicas_needed",
]

QUEUE_TO_BATCH_RATIO = 10
"""Queue capacity per replica as a multiple of the max batch size (WVA ``MaxQueueToBatchRatio``)."""
RATE_EPSILON = 0.001
"""The searched arrival-rate range is ``[mu(1)*eps, mu(B)*(1-eps)]`` (WVA ``Epsilon``)."""
TPS_SAFETY_FRACTION = 0.1
"""A TPS target runs a replica this fraction below the range's upper bound (WVA ``StabilitySafetyFraction``)."""
SEARCH_TOLERANCE = 1e-6
"""Relative tolerance of the bisection on the SLO metric (WVA ``BinarySearch``)."""
MAX_ITERATIONS = 100
"""Bisection step limit (WVA ``maxIterations``)."""
REPLICA_EPSILON = 1e-9
"""Relative slack in :func:`replicas_needed` so float noise (2.0000000001) does not add a replica."""

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


class Infeasible(Exception):
    """Even a near-idle replica misses the SLO.

    ``slo`` names the violated objective (``"ttft"`` or ``"itl"``), ``target`` is its value and
    ``best`` the best value achievable (at the lowest searched rate), all in ms.
    """

    def __init__(self, slo: str, target: float, best: float) -> None:
        self.slo = slo
        self.target = target
        self.best = best
        super().__init__(
            f"{slo.upper()} SLO of {target:g} ms is unattainable: "
            f"best achievable {slo.upper()} is {best:.6g} ms (near-idle replica)"
        )


@dataclass(frozen=True)
class SizingResult:
    """Batched sizing output (arrays of one entry per (profile, workload, slo) triple).

    ``rate_rps``: sustainable throughput per replica (NaN where infeasible); ``arrival_rps``: the
    arrival rate found by the search; ``feasible``: bool mask; ``violated``: 0 none, 1 TTFT, 2 ITL;
    ``best_ms``: for infeasible entries, the violated metric at the lowest searched rate.
    """

    rate_rps: np.ndarray
    arrival_rps: np.ndarray
    feasible: np.ndarray
    violated: np.ndarray
    best_ms: np.ndarray
    ttft_ms: np.ndarray
    itl_ms: np.ndarray


# --------------------------------------------------------------------------------------------------
# shared helpers


def _n_decode(in_tokens: np.ndarray, out_tokens: np.ndarray) -> np.ndarray:
    """Decode steps per request: out-1, except WVA's decode-only single-token case which does one."""
    nd = out_tokens - 1.0
    return np.where((in_tokens == 0) & (out_tokens == 1), 1.0, nd)


def _service_rate(alpha, beta, gamma, delta, in_tokens, nd, n):
    """mu(n) in requests per millisecond (broadcasting arrays)."""
    prefill = np.where(in_tokens == 0, 0.0, gamma + delta * in_tokens * n)
    return n / (prefill + nd * (alpha + beta * n))


def _concurrency(s_ms, alpha, beta, gamma, delta, in_tokens, out_tokens, nd, batch, in_service):
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


def _latencies(c, alpha, beta, gamma, delta, in_tokens):
    """(prefill(c), ITL(c)) in ms."""
    prefill = np.where(in_tokens == 0, 0.0, gamma + delta * in_tokens * c)
    return prefill, alpha + beta * c


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
    nd = float(_n_decode(np.float64(i_t), np.float64(o_t)))
    n = np.arange(1, batch + 1, dtype=np.float64)
    mu = _service_rate(a, b, g, d, i_t, nd, n)  # req/ms, n = 1..B
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
        _concurrency(np.float64(s), a, b, g, d, np.float64(i_t), np.float64(o_t), np.float64(nd), float(batch), ns)
    )
    prefill, itl = (float(v) for v in _latencies(c, a, b, g, d, np.float64(i_t)))
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


# --------------------------------------------------------------------------------------------------
# batched sizing


class _Batch:
    """Per-pair constants and a ragged (flattened) layout of the first B+1 states of every chain.

    For ``n <= B`` the unnormalised log-probability is ``n*log(lam) - L[n]`` with
    ``L[n] = sum_{k<=n} log mu(k)`` independent of the rate, so it is computed once.  States above B
    form a geometric tail with ratio ``r = lam/mu(B) < 1`` and are summed in closed form, so one
    evaluation costs O(B) per pair instead of O(K).
    """

    def __init__(self, alpha, beta, gamma, delta, batch, in_tokens, out_tokens) -> None:
        self.alpha, self.beta, self.gamma, self.delta = alpha, beta, gamma, delta
        self.batch_i = batch.astype(np.int64)
        self.batch = batch.astype(np.float64)
        self.in_tokens, self.out_tokens = in_tokens, out_tokens
        self.nd = _n_decode(in_tokens, out_tokens)
        self.tail = QUEUE_TO_BATCH_RATIO * self.batch  # number of states above B
        size = self.batch_i + 1
        self.starts = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
        total = int(size.sum())
        self.seg = s = np.repeat(np.arange(len(size), dtype=np.int64), size)
        self.n = (np.arange(total, dtype=np.int64) - self.starts[s]).astype(np.float64)
        # mu(n) = n / (a + b*n): a = fixed prefill + decode time, b = per-request increments.
        a = np.where(in_tokens == 0, 0.0, gamma) + self.nd * alpha
        b = np.where(in_tokens == 0, 0.0, delta * in_tokens) + self.nd * beta
        with np.errstate(divide="ignore", invalid="ignore"):
            log_mu = np.log(self.n) - np.log(a[s] + self.n * b[s])
        log_mu[self.starts] = 0.0  # n = 0 has no service rate; placeholder
        # L[n] = sum_{k<=n} log mu(k), accumulated within each segment only (rows of equal B), so a
        # pair's numbers do not depend on the other pairs in the batch (scalar == batched, exactly).
        self.L = np.empty_like(log_mu)
        for size_b in np.unique(size):
            rows = np.flatnonzero(size == size_b)
            pos = self.starts[rows][:, None] + np.arange(size_b)
            self.L[pos] = np.cumsum(log_mu[pos], axis=1)
        self.last = self.starts + self.batch_i  # index of state n = B
        self.mu1 = np.exp(log_mu[self.starts + 1])
        self.log_muB = log_mu[self.last]
        self.muB = np.exp(self.log_muB)
        # Sorted keys for locating, per segment, the mode of the head (last n with mu(n) < lam):
        # log mu increases with n inside a segment; offset segments so the whole array is sorted.
        span = float(np.max(np.abs(log_mu))) * 2.0 + 10.0
        self.span = span
        self.keys = np.where(self.n == 0, -np.inf, log_mu) + self.seg * span
        self.keys[self.starts] = self.seg[self.starts] * span - span / 2.0  # n=0 sits below all mu

    def evaluate(self, lam: np.ndarray):
        """Queue statistics at arrival rates ``lam`` (req/ms, one per pair, each < mu(B))."""
        log_lam = np.log(lam)
        seg = self.seg
        pairs = np.arange(len(lam))
        # mode of the unimodal head: n* = #{n >= 1: mu(n) < lam}; its log-term is the shift.
        pos = np.searchsorted(self.keys, log_lam + pairs * self.span, side="left") - 1
        pos = np.clip(pos, self.starts, self.last)
        shift = self.n[pos] * log_lam - self.L[pos]
        w = np.exp(self.n * log_lam[seg] - self.L - shift[seg])
        z_head = np.add.reduceat(w, self.starts)
        n_head = np.add.reduceat(self.n * w, self.starts)
        p_b = w[self.last]
        r = np.exp(log_lam - self.log_muB)
        m = self.tail
        r_m = np.exp(m * (log_lam - self.log_muB))
        one_m_r = 1.0 - r
        g0 = r * (1.0 - r_m) / one_m_r
        g1 = r * (1.0 - (m + 1.0) * r_m + m * r_m * r) / (one_m_r * one_m_r)
        z = z_head + p_b * g0
        ns = (n_head + p_b * self.batch * g0) / z
        nsys = (n_head + p_b * (self.batch * g0 + g1)) / z
        x = lam * (1.0 - p_b * r_m / z)
        t = nsys / x
        s = ns / x
        wait = np.maximum(t - s, 0.0)
        c = _concurrency(
            s,
            self.alpha,
            self.beta,
            self.gamma,
            self.delta,
            self.in_tokens,
            self.out_tokens,
            self.nd,
            self.batch,
            ns,
        )
        prefill, itl = _latencies(c, self.alpha, self.beta, self.gamma, self.delta, self.in_tokens)
        return x, wait + prefill, itl


def _as_array(values, n: int, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected {n} values, got shape {arr.shape}")
    return arr


def size_arrays(
    alpha,
    beta,
    gamma,
    delta,
    max_batch,
    in_tokens,
    out_tokens,
    ttft_ms=None,
    itl_ms=None,
    tps=None,
) -> SizingResult:
    """Batched sizing on plain arrays (scalars broadcast); SLO entries that are None/NaN/0 are ignored.

    All pairs are bisected simultaneously; pairs that have converged are frozen.  See the module
    docstring for the search semantics.
    """
    lengths = [np.size(v) for v in (alpha, beta, gamma, delta, max_batch, in_tokens, out_tokens) if v is not None]
    n = max(lengths) if lengths else 0
    alpha, beta, gamma, delta = (
        _as_array(v, n, nm) for v, nm in ((alpha, "alpha"), (beta, "beta"), (gamma, "gamma"), (delta, "delta"))
    )
    batch = _as_array(max_batch, n, "max_batch")
    in_t = _as_array(in_tokens, n, "in_tokens")
    out_t = _as_array(out_tokens, n, "out_tokens")

    def slo_arr(v, name):
        """Targets as floats; None / NaN / <= 0 mean "not considered"."""
        if v is None:
            return np.full(n, np.nan)
        if np.ndim(v) == 0:
            arr = np.full(n, float(v))
        else:
            arr = np.array([np.nan if e is None else float(e) for e in v], dtype=np.float64)
        arr = _as_array(arr, n, name)
        with np.errstate(invalid="ignore"):
            return np.where(arr > 0, arr, np.nan)

    t_ttft, t_itl, t_tps = slo_arr(ttft_ms, "ttft_ms"), slo_arr(itl_ms, "itl_ms"), slo_arr(tps, "tps")
    if n == 0:
        empty = np.zeros(0)
        return SizingResult(empty, empty, np.zeros(0, bool), np.zeros(0, np.int8), empty, empty, empty)
    if np.any(batch < 1) or np.any(batch != np.round(batch)):
        raise ValueError("max_batch must be integers >= 1")
    if np.any(out_t < 1) or np.any(in_t < 0):
        raise ValueError("out_tokens must be >= 1 and in_tokens >= 0")
    if np.any((alpha < 0) | (beta < 0) | (gamma < 0) | (delta < 0)):
        raise ValueError("profile parameters must be >= 0")

    fixed = np.where(in_t == 0, 0.0, gamma) + _n_decode(in_t, out_t) * alpha
    slope = np.where(in_t == 0, 0.0, delta * in_t) + _n_decode(in_t, out_t) * beta
    if np.any(fixed + slope <= 0):
        raise ValueError("degenerate profile: a request would take zero time")
    model = _Batch(alpha, beta, gamma, delta, batch, in_t, out_t)
    lo = model.mu1 * RATE_EPSILON
    hi = model.muB * (1.0 - RATE_EPSILON)
    has_ttft = ~np.isnan(t_ttft)
    has_itl = ~np.isnan(t_itl)
    has_target = has_ttft | has_itl
    tol = SEARCH_TOLERANCE

    def ratio(ttft, itl, idx=slice(None)):
        """max over set targets of metric/target (the SLO is met when <= 1), and each ratio."""
        ht, hi_ = has_ttft[idx], has_itl[idx]
        r1 = np.where(ht, ttft / np.where(ht, t_ttft[idx], 1.0), -np.inf)
        r2 = np.where(hi_, itl / np.where(hi_, t_itl[idx], 1.0), -np.inf)
        return np.maximum(r1, r2), r1, r2

    # Boundaries (WVA: within tolerance at a bound -> that bound; missed at the lower bound ->
    # infeasible; met at the upper bound -> the upper bound).
    _, ttft_lo, itl_lo = model.evaluate(lo)
    h_lo, r1_lo, r2_lo = ratio(ttft_lo, itl_lo)
    _, ttft_hi, itl_hi = model.evaluate(hi)
    h_hi, _, _ = ratio(ttft_hi, itl_hi)
    bad_ttft = has_ttft & (r1_lo > 1.0 + tol)
    bad_itl = has_itl & (r2_lo > 1.0 + tol)
    infeasible = bad_ttft | bad_itl
    at_lo = has_target & ~infeasible & (np.abs(h_lo - 1.0) <= tol)
    at_hi = ~has_target | (~infeasible & ~at_lo & (h_hi <= 1.0 + tol))
    lam = np.where(at_lo, lo, hi)
    active = has_target & ~infeasible & ~at_lo & ~at_hi
    a_lo, a_hi = lo.copy(), hi.copy()
    # Bisection.  Converged pairs are frozen; the working set is re-flattened only when it has
    # shrunk by half (re-flattening costs more than evaluating a few finished pairs).
    cur = np.flatnonzero(active)
    sub = _subset(model, cur)
    for _ in range(MAX_ITERATIONS):
        live = active[cur]
        if not live.any():
            break
        if live.sum() < 0.5 * len(cur):
            cur = cur[live]
            sub = _subset(model, cur)
            live = np.ones(len(cur), dtype=bool)
        mid = 0.5 * (a_lo[cur] + a_hi[cur])
        _, ttft_m, itl_m = sub.evaluate(mid)
        h, _, _ = ratio(ttft_m, itl_m, cur)
        idx = cur[live]
        mid, h = mid[live], h[live]
        lam[idx] = mid
        done = np.abs(h - 1.0) <= tol
        over = ~done & (h > 1.0)
        a_hi[idx[over]] = mid[over]
        under = ~done & ~over
        a_lo[idx[under]] = mid[under]
        active[idx[done]] = False
    # TPS target: cap at a fraction below the upper bound.
    lam = np.where(~np.isnan(t_tps), np.minimum(lam, hi * (1.0 - TPS_SAFETY_FRACTION)), lam)
    x, ttft, itl = model.evaluate(np.where(infeasible, lo, lam))
    violated = np.where(bad_ttft, 1, np.where(bad_itl, 2, 0)).astype(np.int8)
    best = np.where(bad_ttft, ttft_lo, np.where(bad_itl, itl_lo, np.nan))
    rate = np.where(infeasible, np.nan, x * 1000.0)
    return SizingResult(
        rate_rps=rate,
        arrival_rps=np.where(infeasible, np.nan, lam * 1000.0),
        feasible=~infeasible,
        violated=violated,
        best_ms=best,
        ttft_ms=ttft,
        itl_ms=itl,
    )


def _subset(model: _Batch, idx: np.ndarray) -> _Batch:
    """A view of ``model`` restricted to pairs ``idx`` (re-flattened head arrays)."""
    if len(idx) == len(model.batch):
        return model
    sub = object.__new__(_Batch)
    for name in (
        "alpha",
        "beta",
        "gamma",
        "delta",
        "batch_i",
        "batch",
        "in_tokens",
        "out_tokens",
        "nd",
        "tail",
        "mu1",
        "muB",
        "log_muB",
    ):
        setattr(sub, name, getattr(model, name)[idx])
    size = sub.batch_i + 1
    starts = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    seg = np.repeat(np.arange(len(idx), dtype=np.int64), size)
    local = np.arange(int(size.sum()), dtype=np.int64) - starts[seg]
    src = model.starts[idx][seg] + local
    sub.starts, sub.seg = starts, seg
    sub.n = model.n[src]
    sub.L = model.L[src]
    sub.last = starts + sub.batch_i
    sub.span = model.span
    sub.keys = (model.keys[src] - model.seg[src] * model.span) + seg * model.span
    return sub


def max_rates(profiles, workloads, slos) -> np.ndarray:
    """Sustainable request rate (req/s) per replica for each (profile, workload, slo) triple.

    Each argument is either a sequence of :class:`PerfProfile` / :class:`Workload` / :class:`SLO`, a
    single instance (broadcast to the others' length), or a 2-D array with one row per entry:
    profiles ``(alpha, beta, gamma, delta, max_batch)``, workloads ``(in_tokens, out_tokens)``, slos
    ``(ttft_ms, itl_ms, tps)`` with NaN or 0 for "not set".  Infeasible entries are NaN (use
    :func:`size_arrays` for the reason, or :func:`max_rate` for an exception).
    """
    return _size_objects(profiles, workloads, slos).rate_rps


def _columns(arg, kind: type, fields: tuple[str, ...]) -> list[np.ndarray] | None:
    """Columns of a 2-D array argument, or None when ``arg`` holds dataclass instances."""
    if isinstance(arg, kind):
        return None
    if isinstance(arg, np.ndarray) or (isinstance(arg, (list, tuple)) and arg and not isinstance(arg[0], kind)):
        arr = np.atleast_2d(np.asarray(arg, dtype=np.float64))
        if arr.shape[1] != len(fields):
            raise ValueError(f"expected rows of {fields}, got shape {arr.shape}")
        return [arr[:, i] for i in range(len(fields))]
    return None


def _size_objects(profiles, workloads, slos) -> SizingResult:
    p_cols = _columns(profiles, PerfProfile, ("alpha", "beta", "gamma", "delta", "max_batch"))
    w_cols = _columns(workloads, Workload, ("in_tokens", "out_tokens"))
    s_cols = _columns(slos, SLO, ("ttft_ms", "itl_ms", "tps"))
    if p_cols is None:
        ps = [profiles] if isinstance(profiles, PerfProfile) else list(profiles)
        p_cols = [
            np.array([getattr(p, f) for p in ps], dtype=np.float64)
            for f in ("alpha", "beta", "gamma", "delta", "max_batch")
        ]
    if w_cols is None:
        ws = [workloads] if isinstance(workloads, Workload) else list(workloads)
        w_cols = [np.array([getattr(w, f) for w in ws], dtype=np.float64) for f in ("in_tokens", "out_tokens")]
    if s_cols is None:
        ss = [slos] if isinstance(slos, SLO) else list(slos)
        s_cols = [
            np.array([np.nan if getattr(s, f) is None else getattr(s, f) for s in ss], dtype=np.float64)
            for f in ("ttft_ms", "itl_ms", "tps")
        ]
    n = max(len(p_cols[0]), len(w_cols[0]), len(s_cols[0]))
    cols = []
    for group in (p_cols, w_cols, s_cols):
        for c in group:
            if len(c) == 1 and n != 1:
                c = np.repeat(c, n)
            elif len(c) != n:
                raise ValueError("profiles, workloads and slos must have the same length (or be single)")
            cols.append(c)
    alpha, beta, gamma, delta, batch, in_t, out_t, ttft, itl, tps = cols
    return size_arrays(
        alpha=alpha,
        beta=beta,
        gamma=gamma,
        delta=delta,
        max_batch=batch,
        in_tokens=in_t,
        out_tokens=out_t,
        ttft_ms=ttft,
        itl_ms=itl,
        tps=tps,
    )


def max_rate(profile: PerfProfile, workload: Workload, slo: SLO) -> float:
    """Requests per second one replica sustains within ``slo`` (the throughput at the max rate).

    Raises :class:`Infeasible` when even a near-idle replica misses the TTFT or ITL objective.
    Identical arithmetic to :func:`max_rates` (it is the batched path with one entry).
    """
    res = _size_objects([profile], [workload], [slo])
    if not res.feasible[0]:
        which = "ttft" if res.violated[0] == 1 else "itl"
        target = slo.ttft_ms if which == "ttft" else slo.itl_ms
        raise Infeasible(which, float(target), float(res.best_ms[0]))
    return float(res.rate_rps[0])


def replicas_needed(load_rps: float, max_rate: float, min_replicas: int = 0) -> int:
    """``max(ceil(load / max_rate), min_replicas)``, tolerant to float noise.

    The ratio is reduced by a relative 1e-9 before rounding up, so 2.0000000001 replicas' worth of
    load needs 2 replicas, not 3 (no real load is specified to 9 significant digits).  Zero or
    negative load needs ``min_replicas``.
    """
    if load_rps <= 0:
        return max(int(min_replicas), 0)
    if not (max_rate > 0) or not math.isfinite(max_rate):
        raise ValueError(f"max_rate must be a positive finite number, got {max_rate!r}")
    ratio = load_rps / max_rate
    return max(int(math.ceil(ratio - REPLICA_EPSILON * max(1.0, ratio))), int(min_replicas))
