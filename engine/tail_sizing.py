"""Tail-aware sizing: the per-replica rate at which a target share of requests meets the TTFT objective.

Why: WVA's queueing model (:mod:`engine.perf`) sizes a replica so that the *mean* request's TTFT meets
the class target.  TTFT grows with the request's own prompt (``gamma + delta * prompt * batch``), and
real prompts are heavy-tailed (the Azure conversation trace: median 1,020 tokens, mean 1,155, p90
2,700), so a replica sized for the mean leaves 30-40 % of requests above the target.  Operators read
"TTFT 500 ms" as "almost every request within 500 ms", and SLO attainment counts requests.

The model stays WVA's: the same birth-death chain over the number of requests in a replica (service
rate ``mu(n) = n / (prefill(n) + (out - 1) * decode(n))`` at the mean request, ``K = B + 10 B``
states).  What changes is the question asked of it.  An arriving request sees ``n`` requests with the
chain's stationary probability ``pi(n)`` (Poisson arrivals see time averages) and, with a free slot,
joins a batch of ``n + 1``: its TTFT is ``gamma + delta * p * (n + 1)`` for its prompt ``p``.  When the
batch is full it first waits for ``n - B + 1`` completions at ``mu(B)``.  So the share of requests
within the target ``T`` is::

    share(rate) = sum_n pi(n) * F((T - gamma - wait(n)) / (delta * min(n + 1, B)))

with ``F`` the prompt-length distribution, read from vLLM's ``vllm:request_prompt_tokens`` histogram
(cumulative bucket counts, interpolated linearly inside a bucket as ``histogram_quantile`` does).  The
tail-aware rate is the largest rate with ``share >= target``, found by bisection; the rate a variant
is sized with is the smaller of that and WVA's (the mean TTFT and ITL targets still hold, so tail
sizing never provisions less than WVA).  The ITL objective stays a bound on the mean: a request's ITL
is its batch's average over its whole decode, which varies little from request to request.

Pure and deterministic (numpy only).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine.perf import QUEUE_TO_BATCH_RATIO, RATE_EPSILON, SLO, Infeasible, PerfProfile, Workload, max_rate

__all__ = [
    "ANNOTATION_TTFT_PERCENTILE",
    "DEFAULT_TTFT_PERCENTILE",
    "PromptDistribution",
    "TailSizingError",
    "queue_distribution",
    "tail_max_rate",
    "ttft_attainment",
    "ttft_percentile",
]

ANNOTATION_TTFT_PERCENTILE = "modelplane.io/ttft-percentile"
"""VariantAutoscaling annotation: the share of requests (percent, e.g. ``"90"``) that must meet the TTFT
target, or ``"mean"`` for WVA's sizing of the mean request."""
DEFAULT_TTFT_PERCENTILE = 90.0
"""Used when the annotation is absent and the prompt-token histogram is available."""
SHORTAGE_PERCENTILES = (85.0, 80.0, 75.0, 70.0, 60.0, 0.0)
"""Percentile caps tried in turn when the inventory cannot hold the tail-sized plan (0: WVA's mean sizing)."""
_ITERATIONS = 40
_RATE_TOLERANCE = 1e-3
"""Relative precision of the tail-aware rate (0.1 % of a replica's capacity is far below the load's noise)."""


class TailSizingError(ValueError):
    """The percentile annotation cannot be read (the message names the value)."""


@dataclass(frozen=True)
class PromptDistribution:
    """Prompt lengths as a cumulative histogram: bucket upper bounds (tokens) and counts (or rates) up to each.

    The last bound may be ``inf`` (Prometheus' ``+Inf`` bucket).  Inside a bucket the distribution is
    taken as uniform, like ``histogram_quantile``; the first bucket starts at 0.
    """

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.cumulative) or not self.bounds:
            raise ValueError("PromptDistribution: bounds and cumulative counts must be non-empty and of equal length")
        if any(b2 <= b1 for b1, b2 in zip(self.bounds, self.bounds[1:])):
            raise ValueError("PromptDistribution: bounds must increase")
        if any(c < 0 or not math.isfinite(c) for c in self.cumulative):
            raise ValueError("PromptDistribution: counts must be finite and >= 0")

    @classmethod
    def from_buckets(cls, buckets: Mapping[float, float] | Sequence[tuple[float, float]]) -> "PromptDistribution":
        """From ``le -> cumulative count`` pairs in any order (counts made monotone, as Prometheus does)."""
        pairs = sorted(dict(buckets).items())
        running, cumulative = 0.0, []
        for _, count in pairs:
            running = max(running, float(count))
            cumulative.append(running)
        return cls(tuple(float(b) for b, _ in pairs), tuple(cumulative))

    @property
    def total(self) -> float:
        """Count of the whole distribution (the last bucket)."""
        return self.cumulative[-1]

    def cdf(self, tokens: np.ndarray) -> np.ndarray:
        """Share of prompts of at most ``tokens`` (vectorised); 0 below 0, 1 beyond the last finite bound."""
        tokens = np.asarray(tokens, dtype=float)
        if self.total <= 0:
            return np.ones_like(tokens)
        bounds = np.asarray(self.bounds, dtype=float)
        shares = np.asarray(self.cumulative, dtype=float) / self.total
        finite = np.isfinite(bounds)
        # Mass in an infinite last bucket cannot be placed: prompts there count as beyond any threshold.
        xs = np.concatenate([[0.0], bounds[finite]])
        ys = np.concatenate([[0.0], shares[finite]])
        inside = np.interp(tokens, xs, ys)
        return np.where(tokens < 0, 0.0, inside)

    def quantile(self, share: float) -> float:
        """The prompt length below which ``share`` of prompts fall (``histogram_quantile``)."""
        if self.total <= 0:
            return 0.0
        bounds = np.asarray(self.bounds, dtype=float)
        shares = np.asarray(self.cumulative, dtype=float) / self.total
        finite = np.isfinite(bounds)
        xs = np.concatenate([[0.0], bounds[finite]])
        ys = np.concatenate([[0.0], shares[finite]])
        if share >= ys[-1]:
            return float(xs[-1])
        return float(np.interp(share, ys, xs))


def ttft_percentile(annotations: Mapping[str, str]) -> float | None:
    """The TTFT percentile a variant is sized for: the annotation, else the default; None for ``mean``."""
    raw = annotations.get(ANNOTATION_TTFT_PERCENTILE)
    if raw is None:
        return DEFAULT_TTFT_PERCENTILE
    text = str(raw).strip().lower().removeprefix("p")
    if text == "mean":
        return None
    try:
        value = float(text)
    except ValueError:
        raise TailSizingError(f"must be a percentile between 50 and 99.9 or 'mean', got {raw!r}") from None
    if not 50.0 <= value <= 99.9:
        raise TailSizingError(f"must be a percentile between 50 and 99.9 or 'mean', got {raw!r}")
    return value


def capped_percentile(percentile: float | None, cap: float | None) -> float | None:
    """The percentile a variant is sized for under a shortage cap; None (the mean) below 50."""
    if percentile is None or cap is None:
        return percentile
    value = min(percentile, cap)
    return value if value >= 50.0 else None


def shortage_caps(unserved_rps: float, percentiles: Sequence[float | None]) -> list[float]:
    """The caps to try, highest first, when the tail-sized allocation leaves ``unserved_rps`` unserved.

    Why: sizing for a percentile asks for more replicas than the mean; when the accelerators run out,
    the allocation would leave whole models short (its first goal is the least unserved load, which
    favours the models cheapest to serve), so every model is sized for a lower percentile instead, down
    to the mean, until the plan fits.  Nothing to try when everything is served.
    """
    if unserved_rps <= 1e-9:
        return []
    highest = max((p for p in percentiles if p is not None), default=None)
    if highest is None:
        return []
    return [cap for cap in SHORTAGE_PERCENTILES if cap < highest]


def describe_cap(cap: float) -> str:
    """``p80`` or ``the mean request`` (for condition messages)."""
    return f"p{cap:g} TTFT" if cap >= 50.0 else "the mean request's TTFT"


def _service_rates(profile: PerfProfile, workload: Workload) -> np.ndarray:
    """mu(n) for n = 1..B in requests per ms (WVA's law at the mean request)."""
    n = np.arange(1, profile.max_batch + 1, dtype=float)
    prefill = 0.0 if workload.in_tokens == 0 else profile.gamma + profile.delta * workload.in_tokens * n
    decodes = workload.out_tokens - 1.0 if not (workload.in_tokens == 0 and workload.out_tokens == 1) else 1.0
    return n / (prefill + decodes * (profile.alpha + profile.beta * n))


def queue_distribution(profile: PerfProfile, workload: Workload, rate_rps: float) -> np.ndarray:
    """Stationary probabilities of 0..K requests in one replica (WVA's chain, ``K = B + 10 B``)."""
    batch = int(profile.max_batch)
    mu = _service_rates(profile, workload)
    k = batch + QUEUE_TO_BATCH_RATIO * batch
    if rate_rps <= 0:
        p = np.zeros(k + 1)
        p[0] = 1.0
        return p
    lam = rate_rps / 1000.0
    log_mu = np.log(np.concatenate([mu, np.full(k - batch, mu[-1])]))
    logp = np.concatenate([[0.0], np.cumsum(math.log(lam) - log_mu)])
    logp -= logp.max()
    p = np.exp(logp)
    return p / p.sum()


def ttft_attainment(
    profile: PerfProfile, workload: Workload, prompts: PromptDistribution, ttft_ms: float, rate_rps: float
) -> float:
    """Share of requests whose TTFT is within ``ttft_ms`` at ``rate_rps`` per replica (see the module docstring).

    Requests arriving to a full K-state system are lost in the chain; they count as missing the target.
    """
    pi = queue_distribution(profile, workload, rate_rps)
    batch = int(profile.max_batch)
    mu_b = float(_service_rates(profile, workload)[-1])  # per ms
    n = np.arange(len(pi), dtype=float)
    joins = np.minimum(n + 1.0, batch)
    wait = np.maximum(n - batch + 1.0, 0.0) / mu_b
    budget = ttft_ms - profile.gamma - wait
    if profile.delta > 0:
        share = np.where(budget >= 0, prompts.cdf(budget / (profile.delta * joins)), 0.0)
    else:
        share = (budget >= 0).astype(float)
    share[-1] = 0.0  # the last state blocks arrivals
    return float(pi @ share)


@functools.lru_cache(maxsize=4096)
def _wva_rate(profile: PerfProfile, workload: Workload, slo: SLO) -> float | None:
    """WVA's rate for the mean request (None when infeasible), computed once per profile, shape and SLO."""
    try:
        return max_rate(profile, workload, slo)
    except Infeasible:
        return None


@functools.lru_cache(maxsize=4096)
def tail_max_rate(
    profile: PerfProfile, workload: Workload, slo: SLO, prompts: PromptDistribution, percentile: float
) -> float | None:
    """Requests per second one replica sustains with ``percentile`` % of requests within the TTFT target.

    Capped by WVA's rate for the same SLO (mean TTFT and ITL), so it is never less strict than WVA.
    None when there is nothing to tighten (no TTFT target, no prompts observed) or when even a nearly
    idle replica cannot reach the percentile (the caller keeps WVA's sizing, which reports an
    infeasible mean SLO itself).
    """
    if not slo.ttft_ms or prompts.total <= 0:
        return None
    mean_rate = _wva_rate(profile, workload, slo)
    if mean_rate is None:
        return None
    target = percentile / 100.0
    mu = _service_rates(profile, workload)
    low, high = float(mu[0]) * 1000.0 * RATE_EPSILON, mean_rate
    if ttft_attainment(profile, workload, prompts, slo.ttft_ms, low) < target:
        return None
    if ttft_attainment(profile, workload, prompts, slo.ttft_ms, high) >= target:
        return mean_rate
    for _ in range(_ITERATIONS):
        mid = 0.5 * (low + high)
        if ttft_attainment(profile, workload, prompts, slo.ttft_ms, mid) >= target:
            low = mid
        else:
            high = mid
        if high - low <= _RATE_TOLERANCE * high:
            break
    return low
