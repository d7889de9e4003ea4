"""Tail-aware sizing: the per-replica rate at which a target share of requests meets the TTFT objective.

Why: WVA's queueing model (:mod:`engine.perf.queueing`, searched by :mod:`engine.perf.sizing`) sizes a replica
so that the *mean* request's TTFT meets the class target.  TTFT grows with the request's own prompt
(``gamma + delta * prompt * batch``), and real prompts are heavy-tailed (the Azure conversation trace:
median 1,020 tokens, mean 1,155, p90 2,700), so a replica sized for the mean leaves 30-40 % of requests
above the target.  Operators read "TTFT 500 ms" as "almost every request within 500 ms", and SLO
attainment counts requests.

The model stays WVA's: the same birth-death chain over the number of requests in a replica (service
rate ``mu(n) = n / (prefill(n) + (out - 1) * decode(n))`` at the mean request, ``K = B + 10 B``
states).  What changes is the question asked of it.  An arriving request sees ``n`` requests with the
chain's stationary probability ``pi(n)`` (Poisson arrivals see time averages) and, with a free slot,
joins a batch of ``n + 1``: its TTFT is ``gamma + delta * p * (n + 1)`` for its prompt ``p``.  When the
batch is full it first waits for ``n - B + 1`` completions at ``mu(B)``.  So the share of requests
within the target ``T`` is::

    share(rate) = sum_n pi(n) * F((T - gamma - wait(n)) / (delta * min(n + 1, B)))

with ``F`` the prompt-length distribution, read from vLLM's ``vllm:request_prompt_tokens`` histogram
(cumulative bucket counts; inside a bucket a density ``x ** -shape`` whose exponent is fitted to the
observed mean prompt, see :attr:`PromptDistribution.shape`; uniform, as ``histogram_quantile``, without
it).  The gateway balances a model's requests over its replicas, which evens out their batches: with
``pool`` replicas the chain is that of the pool (``N`` requests spread as evenly as they can, an arrival
joining the least loaded replica), see :func:`queue_distribution`.  The tail-aware rate is the largest rate with ``share >= target``, found by bisection; the rate a variant
is sized with is the smaller of that and WVA's (the mean TTFT and ITL targets still hold, so tail
sizing never provisions less than WVA).  The ITL objective stays a bound on the mean: a request's ITL
is its batch's average over its whole decode, which varies little from request to request.

Pure and deterministic (numpy only).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from engine.perf.queueing import QUEUE_TO_BATCH_RATIO, SLO, FloatArray, PerfProfile, Workload
from engine.perf.sizing import RATE_EPSILON, Infeasible, max_rate

__all__ = [
    "ANNOTATION_TTFT_PERCENTILE",
    "DEFAULT_TTFT_PERCENTILE",
    "PromptDistribution",
    "TailSizingError",
    "queue_distribution",
    "reaches_model_share",
    "refine_cap",
    "tail_max_rate",
    "ttft_attainment",
    "ttft_ceiling",
    "ttft_percentile",
]

ANNOTATION_TTFT_PERCENTILE = "modelplane.io/ttft-percentile"
"""VariantAutoscaling annotation: the share of requests (percent, e.g. ``"90"``) that must meet the TTFT
target, or ``"mean"`` for WVA's sizing of the mean request."""
DEFAULT_TTFT_PERCENTILE = 80.0
"""Used when the annotation is absent and the prompt-token histogram is available."""
SHORTAGE_PERCENTILES = (85.0, 80.0, 75.0, 70.0, 60.0, 0.0)
"""Percentile caps tried in turn when the inventory cannot hold the tail-sized plan (0: WVA's mean sizing)."""
_ITERATIONS = 40
_SHAPE_RANGE = (-2.0, 6.0)
_SHAPE_ITERATIONS = 50
_NEGLIGIBLE = 1e-15
"""States of the chain less likely than this at the highest rate considered are left out of the sums."""
MAX_POOL = 16
"""Largest pool of replicas the chain models (the balancing gain is flat beyond a few replicas)."""
_RATE_TOLERANCE = 1e-3
"""Relative precision of the tail-aware rate (0.1 % of a replica's capacity is far below the load's noise)."""
REACH = 0.95
"""The largest share of its own ceiling a variant is sized for when a faster-prefilling variant of its model sets a
higher target share (:func:`reaches_model_share`).  Why 0.95: the rate falls to nothing as the share nears the
ceiling, so sizing closer to it bought tens of thousands of replicas when the faster variant was capped; at 95 % the
rate is the one the default range of percentiles already asks of a variant against its own ceiling."""


class TailSizingError(ValueError):
    """The percentile annotation cannot be read (the message names the value)."""


@dataclass(frozen=True)
class PromptDistribution:
    """Prompt lengths as a cumulative histogram: bucket upper bounds (tokens) and counts (or rates) up to each.

    The last bound may be ``inf`` (Prometheus' ``+Inf`` bucket).  The first bucket starts at 0 and is
    taken as uniform.  Inside every other bucket the density is ``x ** -shape``: ``shape`` 0 is the
    uniform spread ``histogram_quantile`` assumes; when the observed mean prompt is known (``mean``:
    the histogram's ``_sum / _count``) ``shape`` is fitted so that the distribution has that mean
    (see :attr:`shape`).
    """

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    mean: float | None = None
    """Observed mean prompt length (``vllm:request_prompt_tokens_sum / _count``); None: uniform inside buckets."""

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.cumulative) or not self.bounds:
            raise ValueError("PromptDistribution: bounds and cumulative counts must be non-empty and of equal length")
        last = len(self.bounds) - 1
        if any(not b >= 0 or (math.isinf(b) and i != last) for i, b in enumerate(self.bounds)):
            raise ValueError(
                f"PromptDistribution: bounds must be finite token counts >= 0 (the last may be +Inf), got {self.bounds}"
            )
        if any(b2 <= b1 for b1, b2 in zip(self.bounds, self.bounds[1:])):
            raise ValueError("PromptDistribution: bounds must increase")
        if any(c < 0 or not math.isfinite(c) for c in self.cumulative):
            raise ValueError("PromptDistribution: counts must be finite and >= 0")

    @classmethod
    def from_buckets(
        cls, buckets: Mapping[float, float] | Sequence[tuple[float, float]], mean: float | None = None
    ) -> PromptDistribution:
        """From ``le -> cumulative count`` pairs in any order (counts made monotone, as Prometheus does).

        Raises:
            ValueError: a bound that is not a token count >= 0 (NaN, negative; ``+Inf`` only as the last), a bound
                given twice, or a count that is not finite and >= 0.
        """
        items = list(buckets.items()) if isinstance(buckets, Mapping) else list(buckets)
        pairs = sorted(dict(items).items(), key=lambda pair: pair[0])
        if len(pairs) != len(items):
            raise ValueError(f"PromptDistribution: a bucket bound given twice in {sorted(b for b, _ in items)}")
        running, cumulative = 0.0, []
        for bound, count in pairs:
            if not math.isfinite(count):
                raise ValueError(f"PromptDistribution: the count of bucket {bound:g} is {count:g}, not a number")
            running = max(running, float(count))
            cumulative.append(running)
        return cls(tuple(float(b) for b, _ in pairs), tuple(cumulative), mean)

    def with_mean(self, mean: float | None) -> PromptDistribution:
        """The same histogram with the observed mean prompt (a non-positive or non-finite mean is ignored)."""
        usable = mean if mean is not None and math.isfinite(mean) and mean > 0 else None
        return self if usable == self.mean else dataclasses.replace(self, mean=usable)

    @property
    def total(self) -> float:
        """Count of the whole distribution (the last bucket)."""
        return self.cumulative[-1]

    def _segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Finite bucket bounds from 0 and the cumulative shares at each."""
        bounds = np.asarray(self.bounds, dtype=float)
        shares = np.asarray(self.cumulative, dtype=float) / self.total
        finite = np.isfinite(bounds)
        return np.concatenate([[0.0], bounds[finite]]), np.concatenate([[0.0], shares[finite]])

    @functools.cached_property
    def shape(self) -> float:
        """The exponent of the density inside buckets: 0 (uniform) without a mean, else fitted to the mean.

        Why: vLLM's buckets are coarse (1,000-2,000, 2,000-5,000 tokens) and real prompts are not spread
        evenly inside them: the conversation trace has 42 % of its prompts in 1,000-2,000, most of them
        just above 1,000.  Read as uniform, the histogram puts a TTFT threshold of 1,300 tokens at the
        58th percentile where the prompts put it at the 78th, and tail sizing asks for up to twice the
        replicas it needs.  The histogram's ``_sum`` says where the mass sits: one exponent shared by all
        buckets (a falling density for ``shape > 0``, as heavy-tailed lengths have) is chosen by
        bisection so the distribution's mean equals the observed one; clamped to
        ``[-2, 6]`` when the mean is inconsistent with the buckets (e.g. read over another window).
        """
        if self.mean is None or self.total <= 0:
            return 0.0
        return _fitted_shape(self)

    def cdf(self, tokens: np.ndarray) -> np.ndarray:
        """Share of prompts of at most ``tokens`` (vectorised); 0 below 0, the finite buckets' share beyond them."""
        tokens = np.asarray(tokens, dtype=float)
        if self.total <= 0:
            return np.ones_like(tokens)
        # Mass in an infinite last bucket cannot be placed: prompts there count as beyond any threshold.
        xs, ys = self._segments()
        index = np.clip(np.searchsorted(xs, tokens, side="left"), 1, len(xs) - 1)
        lo, hi = xs[index - 1], xs[index]
        inside = _segment_share(np.clip(tokens, lo, hi), lo, hi, self.shape)
        value = ys[index - 1] + (ys[index] - ys[index - 1]) * inside
        return np.where(tokens < 0, 0.0, np.where(tokens >= xs[-1], ys[-1], value))

    def quantile(self, share: float) -> float:
        """The prompt length below which ``share`` of prompts fall (``histogram_quantile`` when uniform)."""
        if self.total <= 0:
            return 0.0
        xs, ys = self._segments()
        if share >= ys[-1]:
            return float(xs[-1])
        index = int(np.clip(np.searchsorted(ys, share, side="left"), 1, len(ys) - 1))
        lo, hi, mass = xs[index - 1], xs[index], ys[index] - ys[index - 1]
        if mass <= 0:
            return float(lo)
        return _segment_inverse((share - ys[index - 1]) / mass, lo, hi, self.shape)


@functools.lru_cache(maxsize=1024)
def _fitted_shape(prompts: PromptDistribution) -> float:
    """:attr:`PromptDistribution.shape` (a histogram with a mean), computed once per distinct histogram: every
    variant of a model reads the same one in a cycle."""
    xs, ys = prompts._segments()
    masses = np.diff(ys)
    beyond = 1.0 - ys[-1]  # the +Inf bucket, placed at the last finite bound (a lower bound)

    def implied(a: float) -> float:
        return float(masses @ _segment_means(xs[:-1], xs[1:], a) + beyond * xs[-1])

    mean = prompts.mean
    assert mean is not None  # PromptDistribution.shape fits only a histogram with a mean
    low, high = _SHAPE_RANGE
    if implied(low) <= mean:
        return low
    if implied(high) >= mean:
        return high
    for _ in range(_SHAPE_ITERATIONS):
        mid = 0.5 * (low + high)
        if implied(mid) > mean:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def _power_integral(lo: float, hi: float, exponent: float) -> float:
    """Integral of ``x ** exponent`` over ``[lo, hi]`` (``lo > 0``)."""
    power = exponent + 1.0
    return math.log(hi / lo) if abs(power) < 1e-9 else (hi**power - lo**power) / power


def _segment_mean(lo: float, hi: float, shape: float) -> float:
    """Mean of the density ``x ** -shape`` on ``[lo, hi]`` (uniform on a bucket starting at 0)."""
    if lo <= 0:
        return 0.5 * (lo + hi)
    return _power_integral(lo, hi, 1.0 - shape) / _power_integral(lo, hi, -shape)


def _power_integrals(lo: FloatArray, hi: FloatArray, exponent: float) -> FloatArray:
    """:func:`_power_integral` over arrays of bounds (``lo > 0``)."""
    power = exponent + 1.0
    if abs(power) < 1e-9:
        return np.log(hi / lo)
    return (hi**power - lo**power) / power


def _segment_means(lo: np.ndarray, hi: np.ndarray, shape: float) -> np.ndarray:
    """:func:`_segment_mean` of every bucket at once (the shape fit evaluates it ~50 times per histogram)."""
    positive = lo > 0
    safe_lo = np.where(positive, lo, 1.0)
    safe_hi = np.where(positive, hi, 2.0)
    tilted = _power_integrals(safe_lo, safe_hi, 1.0 - shape) / _power_integrals(safe_lo, safe_hi, -shape)
    return np.where(positive, tilted, 0.5 * (lo + hi))


def _segment_share(x: FloatArray, lo: FloatArray, hi: FloatArray, shape: float) -> FloatArray:
    """Share of a bucket's mass below ``x`` (``lo <= x <= hi``) for the density ``x ** -shape``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        uniform = (x - lo) / (hi - lo)
        if shape == 0.0:
            return uniform
        safe_lo = np.where(lo > 0, lo, 1.0)
        power = 1.0 - shape
        if abs(power) < 1e-9:
            tilted = np.log(x / safe_lo) / np.log(hi / safe_lo)
        else:
            tilted = (x**power - safe_lo**power) / (hi**power - safe_lo**power)
        return np.where(lo > 0, tilted, uniform)


def _segment_inverse(u: float, lo: float, hi: float, shape: float) -> float:
    """The length below which ``u`` of a bucket's mass falls (inverse of :func:`_segment_share`)."""
    if lo <= 0 or shape == 0.0:
        return float(lo + u * (hi - lo))
    power = 1.0 - shape
    if abs(power) < 1e-9:
        return float(lo * (hi / lo) ** u)
    return float((lo**power + u * (hi**power - lo**power)) ** (1.0 / power))


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


def refine_cap(fitting: float, too_high: float, fits: Callable[[float], bool], resolution: float = 1.0) -> float:
    """The highest cap between ``fitting`` (a plan at it fits the inventory) and ``too_high`` (one does not).

    Bisection to ``resolution`` percentile points over whole points; ``fits(cap)`` solves the plan at a
    cap.  Below 50 (the mean request) there is nothing to refine.
    """
    low, high = fitting, too_high
    if low < 50.0:
        return low
    while high - low > resolution:
        middle = math.floor((low + high) / 2.0 / resolution) * resolution
        if middle <= low:
            break
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def describe_cap(cap: float) -> str:
    """``p80`` or ``the mean request`` (for condition messages)."""
    return f"p{cap:g} TTFT" if cap >= 50.0 else "the mean request's TTFT"


def _service_rates(profile: PerfProfile, workload: Workload) -> np.ndarray:
    """mu(n) for n = 1..B in requests per ms (WVA's law at the mean request)."""
    n = np.arange(1, profile.max_batch + 1, dtype=float)
    prefill = 0.0 if workload.in_tokens == 0 else profile.gamma + profile.delta * workload.in_tokens * n
    decodes = workload.out_tokens - 1.0 if not (workload.in_tokens == 0 and workload.out_tokens == 1) else 1.0
    return n / (prefill + decodes * (profile.alpha + profile.beta * n))


def _pool_size(pool: int) -> int:
    """The pool the chain models: at least 1 replica, at most :data:`MAX_POOL`."""
    return max(1, min(int(pool), MAX_POOL))


def _log_rates(profile: PerfProfile, workload: Workload, replicas: int) -> np.ndarray:
    """``C[N] = sum_{m <= N} log(total completion rate of the pool holding m requests)`` for N = 0..pool*K.

    The chain is a birth-death process, so ``log pi(N) = N log(lambda) - C[N] + const``: the rate enters
    only through ``N log(lambda)``, and everything else is computed once for every rate asked about.
    """
    batch = int(profile.max_batch)
    mu = _service_rates(profile, workload)
    k = batch + QUEUE_TO_BATCH_RATIO * batch
    per_replica = np.concatenate([[0.0], mu, np.full(k - batch + 1, mu[-1])])  # mu(n) for n = 0..K+1
    n = np.arange(1, replicas * k + 1)
    low, extra = n // replicas, n % replicas
    total = extra * per_replica[low + 1] + (replicas - extra) * per_replica[low]
    return np.concatenate([[0.0], np.cumsum(np.log(total))])


def _stationary(log_rates: FloatArray, replicas: int, rate_rps: float) -> FloatArray:
    """The chain's stationary probabilities at ``rate_rps`` per replica, from :func:`_log_rates`."""
    if rate_rps <= 0:
        p = np.zeros(len(log_rates))
        p[0] = 1.0
        return p
    lam = replicas * rate_rps / 1000.0
    logp = np.arange(len(log_rates)) * math.log(lam) - log_rates
    logp -= logp.max()
    p = np.exp(logp)
    return p / float(p.sum())


def queue_distribution(profile: PerfProfile, workload: Workload, rate_rps: float, pool: int = 1) -> np.ndarray:
    """Stationary probabilities of 0..pool*K requests in a pool of replicas (WVA's chain, ``K = B + 10 B``).

    ``rate_rps`` is per replica.  With ``pool`` 1 this is WVA's chain of one replica.  With more, the
    gateway is taken to balance requests over the pool (each arrival joins the replica with the fewest
    requests, as llm-d's endpoint picker and the simulator's gateway do): ``N`` requests sit as evenly
    as they can, ``N mod pool`` replicas holding one more than the others, and the pool completes
    requests at the sum of their rates.
    """
    replicas = _pool_size(pool)
    return _stationary(_log_rates(profile, workload, replicas), replicas, rate_rps)


class _AttainmentCurve:
    """``share(rate)`` of one (profile, workload, prompts, target, pool): the rate-free parts computed once.

    Why: the tail-aware rate is found by bisection over ~15 rates, and every cycle sizes every variant;
    building the chain and reading the prompt distribution at every state for every rate was most of a
    simulated Modelplane run.  Per state the share of arrivals within the target does not depend on the
    rate (:func:`ttft_attainment`), nor does ``C`` (:func:`_log_rates`), so each rate costs one pass of
    ``exp`` over the states.
    """

    def __init__(
        self,
        profile: PerfProfile,
        workload: Workload,
        prompts: PromptDistribution,
        ttft_ms: float,
        pool: int,
        highest_rps: float,
    ) -> None:
        self.replicas = _pool_size(pool)
        log_rates = _log_rates(profile, workload, self.replicas)
        # The states that weigh anything at the highest rate asked about weigh even less at lower rates
        # (pi(N) / pi(M) grows with the rate for N > M): the rest of the chain is left out of every sum.
        weight = _stationary(log_rates, self.replicas, highest_rps)
        last = int(np.flatnonzero(weight > _NEGLIGIBLE)[-1]) if highest_rps > 0 else 0
        self.log_rates = log_rates[: last + 1]
        batch = int(profile.max_batch)
        mu_b = float(_service_rates(profile, workload)[-1])  # per ms
        n = np.arange(min(last + 1, len(log_rates) - 1)) // self.replicas  # not the last state: it blocks arrivals
        joins = np.minimum(n + 1.0, batch)
        budget = ttft_ms - profile.gamma - np.maximum(n - batch + 1.0, 0.0) / mu_b
        if profile.delta > 0:
            self.share = np.where(budget >= 0, prompts.cdf(np.maximum(budget, 0.0) / (profile.delta * joins)), 0.0)
        else:
            self.share = (budget >= 0).astype(float)

    def __call__(self, rate_rps: float) -> float:
        pi = _stationary(self.log_rates, self.replicas, rate_rps)
        return float(pi[: len(self.share)] @ self.share)


def ttft_attainment(
    profile: PerfProfile,
    workload: Workload,
    prompts: PromptDistribution,
    ttft_ms: float,
    rate_rps: float,
    pool: int = 1,
) -> float:
    """Share of requests whose TTFT is within ``ttft_ms`` at ``rate_rps`` per replica (see the module docstring).

    An arrival finding ``N`` requests in the pool joins a replica holding ``N // pool`` of them; when
    that replica's batch is full it waits for ``N // pool - B + 1`` of its completions at ``mu(B)``.
    Requests arriving to a full system are lost in the chain; they count as missing the target.
    """
    return _AttainmentCurve(profile, workload, prompts, ttft_ms, pool, rate_rps)(rate_rps)


def ttft_ceiling(profile: PerfProfile, prompts: PromptDistribution, ttft_ms: float) -> float:
    """Share of prompts whose TTFT is within ``ttft_ms`` alone on an idle replica (batch 1, no queue).

    The attainment ceiling of a variant: what no policy can exceed on it, whatever it provisions.
    """
    budget = ttft_ms - profile.gamma
    if budget < 0:
        return 0.0
    if profile.delta <= 0:
        return 1.0
    return float(prompts.cdf(np.asarray([budget / profile.delta]))[0])


@functools.lru_cache(maxsize=4096)
def _wva_rate(profile: PerfProfile, workload: Workload, slo: SLO) -> float | None:
    """WVA's rate for the mean request (None when infeasible), computed once per profile, shape and SLO."""
    try:
        return max_rate(profile, workload, slo)
    except Infeasible:
        return None


@functools.lru_cache(maxsize=4096)
def tail_max_rate(
    profile: PerfProfile,
    workload: Workload,
    slo: SLO,
    prompts: PromptDistribution,
    percentile: float,
    pool: int = 1,
    model_ceiling: float | None = None,
) -> float | None:
    """Requests per second one replica sustains with ``percentile`` % of the *achievable* requests within the TTFT target.

    Achievable: the requests whose prompt prefills within the target alone on an idle replica
    (:func:`ttft_ceiling`); no number of replicas serves the others in time.  The target share is
    ``percentile / 100 x ceiling``.  Why not the plain share: a percentile above the ceiling cannot be
    met at any rate, and one just below it only at a vanishing rate.  Sizing then fell back to WVA's
    mean request, or asked for more replicas than the inventory held and went down the shortage ladder,
    so on a long-prompt trace p95 provisioned *less* than p90 and attained less (issue 18).  Relative to
    the ceiling, the rate is non-increasing in the percentile everywhere and finite below 100, and on a
    trace whose prompts all fit (the conversation trace: ceilings 97.6-99.9 %) it is nearly the plain share.

    ``model_ceiling``: the highest ceiling among the model's variants, when the caller knows it; the target share
    is then ``percentile / 100 x`` the higher of the two.  Why: relative to its own ceiling, a variant that cannot
    prefill the long prompts in time (llama on an A100: 4,948 tokens at 500 ms, on an H100 8,281) "met p95" at a
    share its faster sibling beats by the prompts only that one serves, so the allocation bought the cheaper
    capacity and every long prompt missed however many replicas were added.  Callers size such a variant only while
    :func:`reaches_model_share` holds.

    ``pool``: how many replicas the gateway balances the model's requests over (see
    :func:`queue_distribution`); 1 is WVA's view of a replica fed its own Poisson stream.

    Capped by WVA's rate for the same SLO (mean TTFT and ITL), so it is never less strict than WVA.
    None when there is nothing to tighten (no TTFT target, no prompts observed), when no prompt fits the
    target even alone, or when WVA's mean sizing is itself infeasible (the caller keeps WVA's sizing,
    which reports that).
    """
    if not slo.ttft_ms or prompts.total <= 0:
        return None
    mean_rate = _wva_rate(profile, workload, slo)
    if mean_rate is None:
        return None
    ceiling = ttft_ceiling(profile, prompts, slo.ttft_ms)
    if ceiling <= 0:
        return None
    target = percentile / 100.0 * max(ceiling, model_ceiling or 0.0)
    mu = _service_rates(profile, workload)
    share = _AttainmentCurve(profile, workload, prompts, slo.ttft_ms, pool, mean_rate)
    low, high = float(mu[0]) * 1000.0 * RATE_EPSILON, mean_rate
    if share(low) < target:
        return low  # within a hair of the ceiling: the lowest rate considered (still monotone in the percentile)
    if share(high) >= target:
        return mean_rate
    for _ in range(_ITERATIONS):
        mid = 0.5 * (low + high)
        if share(mid) >= target:
            low = mid
        else:
            high = mid
        if high - low <= _RATE_TOLERANCE * high:
            break
    return low


def reaches_model_share(own_ceiling: float, model_ceiling: float, percentile: float) -> bool:
    """Whether a variant may be sized for ``percentile`` % of its model's ceiling: it is the model's best (its own
    ceiling is the model's), or that share is within :data:`REACH` of its own ceiling.

    A variant that does not reach it is no option for the load at that percentile: it keeps its minimum replicas,
    and when the variants that do reach it cannot hold the load (their ``max-replicas``, the inventory), the load
    goes down the shortage ladder, which lowers the percentile until the plan fits.
    """
    return own_ceiling >= model_ceiling or percentile / 100.0 * model_ceiling <= REACH * own_ceiling
