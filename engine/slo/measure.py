"""Measured SLO attainment from vLLM's latency histograms: the share of requests within the targets.

vLLM exports latency as Prometheus histograms; what Prometheus holds over a window is, per bucket bound
``le``, how many observations were at most ``le`` (``increase(..._bucket[W])``). The optimize cycle reads
those increases per model over the SLO's evaluation window and over the last :data:`RECENT_WINDOW_S`
seconds, and this module turns them into attainment:

* TTFT from ``vllm:time_to_first_token_seconds`` (one observation per request);
* ITL from ``vllm:request_time_per_output_token_seconds`` where vLLM exports it (one observation per finished
  request: its mean inter-token latency, what the SLO means); otherwise from the per-token histogram
  (``vllm:inter_token_latency_seconds``, before 0.11 ``vllm:time_per_output_token_seconds``), whose share is
  of tokens, not requests (said in the note).

**Inside a bucket.** The share within a threshold is exact when the threshold is a bucket bound; otherwise
it is interpolated linearly between the two bounds around it (as ``histogram_quantile`` does), and the note
says so ("ITL target 24 ms lies between buckets 10 ms and 25 ms: interpolated"): vLLM's ITL buckets are
coarse (10, 25, 50 ms), so a target inside one is an estimate of the shape of the bucket's mass.

**Joint attainment.** The SLO counts a request as met when its TTFT *and* its ITL are within their targets;
histograms give only the two marginal shares ``a`` and ``b``. Three estimates bound or approximate the joint
share: ``min(a, b)`` (exact when the requests missing one target are among those missing the other, the
upper bound), ``a x b`` (independence), and Fréchet's lower bound ``max(0, a + b - 1)`` (misses never
overlap). :data:`JOINT` is the one used: ``min``. Measured on replays of the conversation trace on the
simulation cluster (``tests/engine/test_slo_measure.py::test_joint_estimates_on_replays``, numbers in
docs/metrics.md): TTFT and ITL misses come from the same overload (a full batch queues new requests and
slows every running one), so they overlap, and ``min`` was closest; the product and the Fréchet bound
under-report when both marginals miss.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.slo.target import AttainmentTarget

RECENT_WINDOW_S = 120.0
"""The short recent range read beside the evaluation window (burn rate, and the attainment loop's fast signal).

Two minutes: the loop (:mod:`engine.slo.controller`) acts on what this range measured, so its length is the lag
between a change of attainment and the loop seeing all of it. Chosen on the tuning traces against 3 and 5 minutes
(docs/benchmarks.md, "Attainment tracking"): over 5 minutes the surplus of the minutes before a ramp kept the
loop lowering the percentile for minutes into the ramp, while the last minutes already missed."""

TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"
REQUEST_ITL_HISTOGRAM = "vllm:request_time_per_output_token_seconds"
"""Per finished request, its mean inter-token latency (vLLM >= 0.10)."""
TOKEN_ITL_HISTOGRAM = "vllm:inter_token_latency_seconds"
"""Per output token (vLLM >= 0.11); the same observations as the older name below."""
LEGACY_TOKEN_ITL_HISTOGRAM = "vllm:time_per_output_token_seconds"
"""Per output token (vLLM < 0.11; hidden from 0.12)."""
ITL_HISTOGRAMS = (REQUEST_ITL_HISTOGRAM, TOKEN_ITL_HISTOGRAM, LEGACY_TOKEN_ITL_HISTOGRAM)
"""In order of preference: the request-level one is what the SLO means."""

Buckets = Sequence[tuple[float, float]]
"""Cumulative histogram buckets ``[(le, count), ..., (inf, total)]`` by increasing ``le``."""


def joint_min(a: float, b: float) -> float:
    """Joint share when the misses overlap as much as they can (the upper bound)."""
    return min(a, b)


def joint_product(a: float, b: float) -> float:
    """Joint share when TTFT and ITL are independent."""
    return a * b


def joint_frechet(a: float, b: float) -> float:
    """Joint share when the misses never overlap (Fréchet's lower bound)."""
    return max(0.0, a + b - 1.0)


JOINT_ESTIMATES: dict[str, Callable[[float, float], float]] = {
    "min": joint_min,
    "product": joint_product,
    "frechet": joint_frechet,
}
JOINT = "min"
"""The estimate of the joint share used (see the module docstring for why)."""


@dataclass(frozen=True)
class Share:
    """The share of observations within a threshold (None: no observations) and how it was read."""

    share: float | None
    total: float
    note: str = ""


@dataclass(frozen=True)
class MeasuredAttainment:
    """Attainment measured over one range: ``attained`` (None when unknown), the marginal shares, the
    requests counted, and ``note`` (how it was read, or why it is unknown)."""

    attained: float | None
    ttft_share: float | None
    itl_share: float | None
    requests: float | None
    note: str


@dataclass(frozen=True)
class LatencyHistograms:
    """One model's latency bucket increases over the evaluation window and over the recent range.

    ``itl_metric`` is the ITL histogram they come from (:data:`ITL_HISTOGRAMS`); None fields: not exported.
    """

    ttft_window: Buckets | None
    ttft_recent: Buckets | None
    itl_window: Buckets | None
    itl_recent: Buckets | None
    itl_metric: str = REQUEST_ITL_HISTOGRAM
    ttft_window_sum: float | None = None
    """The histograms' ``_sum`` increases over the same ranges (seconds), when read: they shape the mass inside
    the bucket a target falls in (:func:`share_within`); None: linear interpolation."""
    ttft_recent_sum: float | None = None
    itl_window_sum: float | None = None
    itl_recent_sum: float | None = None

    @property
    def itl_per_token(self) -> bool:
        """Whether the ITL histogram counts tokens (not requests)."""
        return self.itl_metric != REQUEST_ITL_HISTOGRAM


def _ms(seconds: float) -> str:
    return f"{seconds * 1000.0:g} ms"


def cleaned(buckets: Buckets) -> list[tuple[float, float]]:
    """Buckets sorted by bound with counts made non-decreasing (``increase`` extrapolates each series on its
    own, so neighbouring buckets can cross by a fraction; ``histogram_quantile`` repairs them the same way).

    A count that is not a finite number >= 0 (NaN, infinite, negative: no increase of a counter) is left out, as a
    bucket not exported: an infinite total is no number of requests, and without its ``+Inf`` bucket the
    histogram reads as unknown."""
    result: list[tuple[float, float]] = []
    highest = 0.0
    for bound, count in sorted(buckets):
        if not (math.isfinite(count) and count >= 0):
            continue
        highest = max(highest, count, 0.0)
        result.append((bound, highest))
    return result


def share_within(buckets: Buckets, threshold_s: float, what: str, sum_s: float | None = None) -> Share:
    """The share of observations at most ``threshold_s``, interpolated inside its bucket.

    ``what`` names the target in the note (``"ITL target"``). Exact on a bucket bound; below the lowest bound
    interpolated from 0; above the highest finite bound, the share up to that bound (a lower bound: the +Inf
    bucket has no upper edge to interpolate to). Inside a bucket: linearly (as ``histogram_quantile``) unless
    the histogram's ``_sum`` over the same range is given, in which case the bucket's own mean is estimated from
    it and the mass inside the bucket is shaped to that mean (:func:`bucket_share`): vLLM's ITL buckets are
    25 ms wide around typical targets, and with every request's ITL at 30 ms in the 25-50 ms bucket a linear
    reading puts 40 % of them above a 40 ms target that none of them misses.
    """
    rows = cleaned(buckets)
    if not rows or not math.isinf(rows[-1][0]):
        return Share(None, 0.0, f"{what}: the histogram has no +Inf bucket")
    total = rows[-1][1]
    if total <= 0:
        return Share(None, 0.0)
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in rows:
        if math.isinf(bound):
            note = (
                f"{what} {_ms(threshold_s)} lies above the highest bucket {_ms(lower_bound)}: "
                f"the share within {_ms(lower_bound)} is used (a lower bound)"
            )
            return Share(lower_count / total, total, note)
        if threshold_s == bound:
            return Share(count / total, total)
        if threshold_s < bound:
            where = (
                f"between buckets {_ms(lower_bound)} and {_ms(bound)}"
                if lower_bound > 0
                else f"below the lowest bucket {_ms(bound)}"
            )
            mean = _bucket_mean(rows, lower_bound, bound, sum_s)
            fraction = (
                (threshold_s - lower_bound) / (bound - lower_bound)
                if mean is None
                else bucket_share(lower_bound, bound, mean, threshold_s)
            )
            how = "interpolated" if mean is None else f"shaped to the bucket's mean {_ms(mean)}"
            inside = lower_count + (count - lower_count) * fraction
            return Share(inside / total, total, f"{what} {_ms(threshold_s)} lies {where}: {how}")
        lower_bound, lower_count = bound, count
    return Share(None, total)  # not reached: the last bound is +Inf


def _bucket_mean(rows: list[tuple[float, float]], low: float, high: float, sum_s: float | None) -> float | None:
    """The mean of the observations inside ``(low, high]``, from the histogram's sum less the other buckets'
    (each at its midpoint); None when it cannot be told: no sum, an empty bucket, observations in +Inf (their
    values are unknown), or an estimate outside the bucket (the midpoints were too rough)."""
    if sum_s is None or not math.isfinite(sum_s):
        return None
    others, inside, previous_bound, previous_count = 0.0, 0.0, 0.0, 0.0
    for bound, count in rows:
        n = count - previous_count
        if math.isinf(bound):
            if n > 0:
                return None
        elif bound == high:
            inside = n
        else:
            others += n * (previous_bound + bound) / 2.0
        previous_bound, previous_count = bound, count
    if inside <= 0:
        return None
    mean = (sum_s - others) / inside
    return mean if low < mean < high else None


def bucket_share(low: float, high: float, mean: float, threshold: float) -> float:
    """The share of a bucket's mass at most ``threshold`` when that mass follows a truncated exponential on
    ``[low, high]`` with the given mean (uniform at the midpoint; skewed towards the edge the mean is near).

    Why this shape: it is the maximum-entropy density on an interval with a known mean, so it assumes nothing
    the two numbers do not say. Pure arithmetic; the rate is found by bisection on the mean.
    """
    width = high - low
    position = (min(max(threshold, low), high) - low) / width
    target = (mean - low) / width  # the mean as a fraction of the bucket, in (0, 1)
    if abs(target - 0.5) < 1e-9:
        return position

    def mean_of(rate: float) -> float:  # mean of exp(-rate x) on [0, 1]
        if abs(rate) < 1e-9:
            return 0.5
        return 1.0 / rate - 1.0 / math.expm1(rate)

    low_rate, high_rate = -700.0, 700.0  # mean_of falls from ~1 to ~0 over this range
    for _ in range(100):
        middle = (low_rate + high_rate) / 2.0
        if mean_of(middle) > target:
            low_rate = middle
        else:
            high_rate = middle
    rate = (low_rate + high_rate) / 2.0
    if abs(rate) < 1e-9:
        return position
    return -math.expm1(-rate * position) / -math.expm1(-rate)


def measure_attainment(
    ttft: Buckets | None,
    itl: Buckets | None,
    ttft_target_ms: float | None,
    itl_target_ms: float | None,
    itl_metric: str = REQUEST_ITL_HISTOGRAM,
    joint: str = JOINT,
    ttft_sum_s: float | None = None,
    itl_sum_s: float | None = None,
) -> MeasuredAttainment:
    """The share of requests within the TTFT and ITL targets, from the two histograms' bucket increases.

    A target that is None is not judged (as the simulator and the sizing treat a service class without it).
    Unknown (``attained`` None, the note says why) without any target, without the histogram a target needs,
    or without any request in the range.
    """
    if ttft_target_ms is None and itl_target_ms is None:
        return MeasuredAttainment(None, None, None, None, "no latency target (slo-ttft, slo-tpot) for this model")
    notes: list[str] = []
    missing: list[str] = []
    ttft_share = itl_share = None
    requests: float | None = None
    unread: list[str] = []  # why a share is unknown, where a histogram said
    if ttft is not None:
        ttft_read = share_within(ttft, ttft_target_ms / 1000.0, "TTFT target", ttft_sum_s) if ttft_target_ms else None
        rows = cleaned(ttft)
        requests = rows[-1][1] if rows and math.isinf(rows[-1][0]) else None  # the +Inf bucket counts them all
        if ttft_read is not None:
            ttft_share = ttft_read.share
            (notes if ttft_read.share is not None else unread).extend([ttft_read.note] if ttft_read.note else [])
    elif ttft_target_ms is not None:
        missing.append(f"{TTFT_HISTOGRAM}_bucket")
    per_token = itl_metric != REQUEST_ITL_HISTOGRAM
    if itl is not None and itl_target_ms is not None:
        itl_read = share_within(itl, itl_target_ms / 1000.0, "ITL target", itl_sum_s)
        itl_share = itl_read.share
        (notes if itl_read.share is not None else unread).extend([itl_read.note] if itl_read.note else [])
        if per_token:
            notes.append(f"ITL from {itl_metric}, per token: the share of tokens within the target, not of requests")
        if requests is None and not per_token and itl_read.total > 0:
            requests = itl_read.total
    elif itl_target_ms is not None:
        missing.append(f"{REQUEST_ITL_HISTOGRAM}_bucket (or {TOKEN_ITL_HISTOGRAM}_bucket)")
    if missing:
        return MeasuredAttainment(None, ttft_share, itl_share, requests, f"no {' or '.join(missing)} samples")
    if requests is not None and requests <= 0:
        return MeasuredAttainment(None, None, None, 0.0, "no requests in the range")
    shares = [s for s in (ttft_share, itl_share) if s is not None]
    judged = int(ttft_target_ms is not None) + int(itl_target_ms is not None)
    if len(shares) < judged:
        return MeasuredAttainment(
            None, ttft_share, itl_share, requests, "; ".join(unread) or "no requests in the range"
        )
    attained = shares[0] if len(shares) == 1 else JOINT_ESTIMATES[joint](shares[0], shares[1])
    return MeasuredAttainment(attained, ttft_share, itl_share, requests, "; ".join(notes))


def error_budget_remaining(attained: float, target: float) -> float:
    """``1 - (1 - attained) / (1 - target)``: 1 with no miss, 0 with exactly the misses the target allows,
    negative once the window holds more misses than that (-1: twice the allowance spent)."""
    return 1.0 - (1.0 - attained) / (1.0 - target)


def burn_rate(attained: float, target: float) -> float:
    """``(1 - attained) / (1 - target)``: how fast the error budget is spent (1 = exactly at the target's pace;
    measured over the recent range it is the usual fast-burn alert signal)."""
    return (1.0 - attained) / (1.0 - target)


@dataclass(frozen=True)
class ModelAttainment:
    """One model's SLO in a cycle: its target and the attainment measured over the window and recently."""

    target: AttainmentTarget
    window: MeasuredAttainment
    recent: MeasuredAttainment

    @property
    def error_budget_remaining(self) -> float | None:
        """Over the evaluation window; None while the attainment is unknown."""
        attained = self.window.attained
        return None if attained is None else error_budget_remaining(attained, self.target.attainment)

    @property
    def burn_rate(self) -> float | None:
        """Over the recent range; None while it is unknown."""
        attained = self.recent.attained
        return None if attained is None else burn_rate(attained, self.target.attainment)


def model_attainment(
    target: AttainmentTarget,
    histograms: LatencyHistograms | None,
    ttft_target_ms: float | None,
    itl_target_ms: float | None,
    missing: str | None = None,
) -> ModelAttainment:
    """A model's :class:`ModelAttainment`; without histograms both ranges are unknown and say why
    (``missing``: the metrics source's reason)."""
    if histograms is None:
        reason = missing or "no latency histograms for this model"
        unknown = MeasuredAttainment(None, None, None, None, reason)
        return ModelAttainment(target, unknown, unknown)

    def over(
        ttft: Buckets | None, itl: Buckets | None, ttft_sum: float | None, itl_sum: float | None
    ) -> MeasuredAttainment:
        return measure_attainment(
            ttft, itl, ttft_target_ms, itl_target_ms, histograms.itl_metric, ttft_sum_s=ttft_sum, itl_sum_s=itl_sum
        )

    h = histograms
    return ModelAttainment(
        target,
        over(h.ttft_window, h.itl_window, h.ttft_window_sum, h.itl_window_sum),
        over(h.ttft_recent, h.itl_recent, h.ttft_recent_sum, h.itl_recent_sum),
    )
