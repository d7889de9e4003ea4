"""SLO-driven sizing of one inference-server replica: the largest load it carries within its objectives.

Decides, per (profile, workload, SLO) triple, the sustainable request rate of one replica under the queueing
model of :mod:`engine.perf.queueing`, and the replicas a load needs at that rate, as WVA does:
bisection on the arrival rate over ``[mu(1)*0.001, mu(B)*0.999]`` for the largest rate whose
TTFT and ITL meet the SLO (relative tolerance 1e-6, at most 100 halvings, the answer is the last
midpoint, exactly like WVA's ``BinarySearch``); a TPS target caps the rate at ``0.9 * mu(B)*0.999``;
the sustainable rate reported is the throughput ``X`` at that arrival rate.

Every pair of a batch is searched at once (one vectorised bisection, converged pairs frozen), so the
optimizer sizes thousands of variants in one call; the scalar :func:`max_rate` is the same arithmetic with
one entry.

Deliberate differences from the Go reference:

* TTFT and ITL are searched jointly: the rate found is the root of ``max(TTFT/ttft_slo,
  ITL/itl_slo) = 1``.  Both metrics increase with the arrival rate, so this is the minimum of WVA's two
  separate roots, at half the cost.
* A metric that does not vary with the rate (e.g. ITL when ``beta == 0``) and meets its target is
  treated as met over the whole range; WVA's search mistakes a flat curve for a decreasing one and
  reports such a target as unreachable.

Rates are in requests per **second**; profile times in milliseconds. Pure and deterministic (numpy only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.perf.queueing import (
    QUEUE_TO_BATCH_RATIO,
    SLO,
    FloatArray,
    PerfProfile,
    Workload,
    decode_steps,
    phase_latencies,
    solve_concurrency,
)

__all__ = [
    "Infeasible",
    "SizingResult",
    "RATE_EPSILON",
    "TPS_SAFETY_FRACTION",
    "SEARCH_TOLERANCE",
    "max_rate",
    "max_rates",
    "size_arrays",
    "replicas_needed",
]

Indices = npt.NDArray[np.intp]
"""Positions of pairs in a batch."""
Targets = float | Sequence[float | None] | FloatArray
"""SLO targets: one for every pair, or one per pair (``None``, NaN or 0: not considered)."""
Rows = FloatArray | Sequence[Sequence[float]]
"""A 2-D array argument: one row of fields per entry."""
Profiles = PerfProfile | Sequence[PerfProfile] | Rows
Workloads = Workload | Sequence[Workload] | Rows
Slos = SLO | Sequence[SLO] | Rows

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
# batched sizing


class _Batch:
    """Per-pair constants and a ragged (flattened) layout of the first B+1 states of every chain.

    For ``n <= B`` the unnormalised log-probability is ``n*log(lam) - L[n]`` with
    ``L[n] = sum_{k<=n} log mu(k)`` independent of the rate, so it is computed once.  States above B
    form a geometric tail with ratio ``r = lam/mu(B) < 1`` and are summed in closed form, so one
    evaluation costs O(B) per pair instead of O(K).
    """

    def __init__(
        self,
        alpha: FloatArray,
        beta: FloatArray,
        gamma: FloatArray,
        delta: FloatArray,
        batch: FloatArray,
        in_tokens: FloatArray,
        out_tokens: FloatArray,
    ) -> None:
        self.alpha, self.beta, self.gamma, self.delta = alpha, beta, gamma, delta
        self.batch_i = batch.astype(np.int64)
        self.batch = batch.astype(np.float64)
        self.in_tokens, self.out_tokens = in_tokens, out_tokens
        self.nd = decode_steps(in_tokens, out_tokens)
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

    def evaluate(self, lam: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
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
        c = solve_concurrency(
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
        prefill, itl = phase_latencies(c, self.alpha, self.beta, self.gamma, self.delta, self.in_tokens)
        return x, wait + prefill, itl


def _as_array(values: npt.ArrayLike, n: int, name: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected {n} values, got shape {arr.shape}")
    return arr


def size_arrays(
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    delta: npt.ArrayLike,
    max_batch: npt.ArrayLike,
    in_tokens: npt.ArrayLike,
    out_tokens: npt.ArrayLike,
    ttft_ms: Targets | None = None,
    itl_ms: Targets | None = None,
    tps: Targets | None = None,
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

    def slo_arr(v: Targets | None, name: str) -> FloatArray:
        """Targets as floats; None / NaN / <= 0 mean "not considered"."""
        if v is None:
            return np.full(n, np.nan)
        if isinstance(v, Sequence) or (isinstance(v, np.ndarray) and v.ndim > 0):
            arr = np.array([np.nan if e is None else float(e) for e in v], dtype=np.float64)
        else:
            arr = np.full(n, float(v))
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

    fixed = np.where(in_t == 0, 0.0, gamma) + decode_steps(in_t, out_t) * alpha
    slope = np.where(in_t == 0, 0.0, delta * in_t) + decode_steps(in_t, out_t) * beta
    if np.any(fixed + slope <= 0):
        raise ValueError("degenerate profile: a request would take zero time")
    model = _Batch(alpha, beta, gamma, delta, batch, in_t, out_t)
    lo = model.mu1 * RATE_EPSILON
    hi = model.muB * (1.0 - RATE_EPSILON)
    has_ttft = ~np.isnan(t_ttft)
    has_itl = ~np.isnan(t_itl)
    has_target = has_ttft | has_itl
    tol = SEARCH_TOLERANCE

    def ratio(
        ttft: FloatArray, itl: FloatArray, idx: slice | Indices = slice(None)
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
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


def _subset(model: _Batch, idx: Indices) -> _Batch:
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


def max_rates(profiles: Profiles, workloads: Workloads, slos: Slos) -> FloatArray:
    """Sustainable request rate (req/s) per replica for each (profile, workload, slo) triple.

    Each argument is either a sequence of :class:`PerfProfile` / :class:`Workload` / :class:`SLO`, a
    single instance (broadcast to the others' length), or a 2-D array with one row per entry:
    profiles ``(alpha, beta, gamma, delta, max_batch)``, workloads ``(in_tokens, out_tokens)``, slos
    ``(ttft_ms, itl_ms, tps)`` with NaN or 0 for "not set".  Infeasible entries are NaN (use
    :func:`size_arrays` for the reason, or :func:`max_rate` for an exception).
    """
    return _size_objects(profiles, workloads, slos).rate_rps


def _columns(arg: object, kind: type, fields: tuple[str, ...]) -> list[FloatArray] | None:
    """Columns of a 2-D array argument, or None when ``arg`` holds dataclass instances."""
    if isinstance(arg, kind):
        return None
    if isinstance(arg, np.ndarray) or (isinstance(arg, (list, tuple)) and arg and not isinstance(arg[0], kind)):
        arr = np.atleast_2d(np.asarray(arg, dtype=np.float64))
        if arr.shape[1] != len(fields):
            raise ValueError(f"expected rows of {fields}, got shape {arr.shape}")
        return [arr[:, i] for i in range(len(fields))]
    return None


def _size_objects(profiles: Profiles, workloads: Workloads, slos: Slos) -> SizingResult:
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
        assert target is not None  # only an objective that is set can be violated
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
