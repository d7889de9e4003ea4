"""Fit a variant's performance profile (``alpha, beta`` decode; ``gamma, delta`` prefill) from vLLM metrics.

Why: the whole model-based optimizer rests on ``perfParms``, and operators have no way to obtain them
but benchmarking.  vLLM already exports what is needed; this module turns windows of those metrics
into a proposed profile with confidence intervals, and refuses when the data cannot determine it.

Input: one :class:`Window` per scrape window (say one minute) and variant, holding increases of
vLLM's counters and histogram sums over the window:

* ``vllm:time_to_first_token_seconds`` sum and count, ``vllm:request_queue_time_seconds`` sum:
  the prefill time of the finished requests is ``TTFT - queue time``;
* ``vllm:time_per_output_token_seconds`` (inter-token latency) sum and count;
* ``vllm:request_prompt_tokens`` sum (mean prompt length of the window);
* ``vllm:request_inference_time_seconds`` sum: by Little's law its increase over the window divided by
  the window length is the mean number of running requests, measured exactly by counters rather than
  by sampling the ``vllm:num_requests_running`` gauge every scrape (that gauge is the fallback);
* ``avg_over_time(vllm:num_requests_running)`` of the window and of the one before it: the batch a
  request joined at admission (prefill fit).

The model (WVA's): one decode iteration of a batch of ``n`` takes ``alpha + beta*n`` ms and the prefill
of a request joining a batch of ``n`` takes ``gamma + delta*in*n`` ms.  Two linear regressions follow:

* decode: mean ITL of the window against ``n_bar + 1`` -- a request sees the batch it is in, itself
  included, and under Poisson-like fluctuations the batch a token sees averages ``n_bar + 1``.  The
  window's ``n_bar`` is only a proxy of the batch the tokens saw, and ordinary least squares on a
  noisy regressor flattens the slope (regression dilution), so the slope is estimated with the
  window's request rate as an instrument (two-stage least squares): the rate drives the batch size
  but not the proxy's error.
* prefill: mean prefill time against ``mean_in * joined``, ``joined`` being the mean batch the window's
  finished requests joined, themselves included (:attr:`Window.joined_batch`): an arrival sees the
  time-average batch (PASTA), so ``joined`` is the gauge's average plus one, except for the requests
  still running when the window began: they finish in it but joined the previous window's batch.
  Weighted toward windows with little load, where the proxy is nearly exact.  Without that correction
  the windows just after a drop in load (whose first requests joined the busier batch before it) pull
  ``gamma`` up by ~5 % and out of its interval in a third of the runs.

Each parameter comes with a 95% confidence interval (normal approximation of the estimator's
standard error, heteroscedasticity-robust) and the fit's relative RMS error.  The data is refused
(:class:`Unidentifiable`, saying why) when it has too few usable windows, when the batch size does not
vary enough to separate ``alpha`` from ``beta`` or the prefill work to separate ``gamma`` from
``delta``, when a parameter comes out negative beyond its interval or not a finite number, or when an
interval is wider than the parameter itself.  ``gamma`` is the usual casualty: with prompts of ~1,000 tokens the fixed part
of a prefill is a few percent of the smallest prefill observed, so the intercept is an extrapolation
far outside the data.  When ``gamma`` alone is undetermined and the caller knows a current value, the
fit keeps it (and says so) rather than refusing the whole profile.

Pure: numpy only, no I/O.  :func:`ramp_windows` is the known-answer scenario (the simulator under a load
ramp) that the tests and the benchmark check the fit against.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.api.llmd import VariantAutoscaling
from engine.perf.queueing import SLO, PerfProfile, Workload
from engine.perf.sizing import max_rate
from engine.simulate.records import SimConfig, SimResult, Trace, VariantModel
from engine.simulate.replay import simulate
from engine.simulate.windows import window_aggregates

__all__ = [
    "Window",
    "Estimate",
    "ProfileFit",
    "Unidentifiable",
    "fit_profile",
    "identify_profile",
    "windows_from_aggregates",
    "VALIDATION_RAMP",
    "simulated_ramp",
    "ramp_windows",
    "MIN_WINDOWS",
    "MIN_REQUESTS_PER_WINDOW",
    "ANNOTATION_CALIBRATION",
    "CONDITION_CALIBRATED",
    "CalibrationOutcome",
    "calibration_outcome",
    "opted_in",
]

MIN_WINDOWS = 8
"""Fewest usable windows a fit accepts."""
MIN_REQUESTS_PER_WINDOW = 5
"""Windows with fewer finished requests are dropped (their means are mostly noise)."""
MIN_BATCH_SPREAD = 1.0
"""The usable windows' mean batch sizes must span at least this many requests (decode identifiability)."""
MAX_RELATIVE_CI = 0.5
"""A parameter whose 95% interval half-width exceeds this fraction of its value is undetermined."""
Z95 = 1.959963984540054


class Unidentifiable(ValueError):
    """The metrics cannot determine the profile; the message says which parameter and why."""


@dataclass(frozen=True)
class Window:
    """Increases of a variant's vLLM counters over one window (seconds, tokens, request counts)."""

    seconds: float
    requests: float
    ttft_sum_s: float
    queue_sum_s: float | None
    itl_sum_s: float
    itl_count: float
    prompt_tokens_sum: float
    inference_sum_s: float | None = None
    running_avg: float | None = None
    previous_running_avg: float | None = None

    @property
    def batch(self) -> float:
        """Mean number of running requests: Little's law on the inference-time counter, else the gauge."""
        if self.inference_sum_s is not None:
            return self.inference_sum_s / self.seconds
        if self.running_avg is not None:
            return self.running_avg
        raise Unidentifiable("a window has neither vllm:request_inference_time_seconds nor vllm:num_requests_running")

    @property
    def joined_batch(self) -> float:
        """Mean batch size the requests finishing in this window joined at admission, themselves included.

        Poisson arrivals see the time-average batch, so it is the gauge's window average plus one.  The
        requests running when the window began (about the previous window's average batch of them) finish
        in this window but joined the previous window's batch; their share carries that batch instead.
        Without the gauge, Little's law on the inference-time counter stands in (it spreads those requests'
        time over both windows, which corrects part of the same effect).
        """
        if self.running_avg is None:
            return self.batch + 1.0
        joined = self.running_avg + 1.0
        if self.previous_running_avg is not None and self.requests > 0:
            carried = min(self.previous_running_avg, self.requests) / self.requests
            joined += carried * (self.previous_running_avg - self.running_avg)
        return joined


@dataclass(frozen=True)
class Estimate:
    """A fitted parameter (ms or ms per token) with its 95% confidence interval; ``fixed`` when kept from the spec."""

    value: float
    low: float
    high: float
    fixed: bool = False

    @property
    def relative_half_width(self) -> float:
        """Half the interval over the value (inf for a zero value)."""
        return (self.high - self.low) / 2.0 / abs(self.value) if self.value else math.inf

    def as_dict(self) -> dict[str, float | bool]:
        """For the artifact and the condition message."""
        return {"value": round(self.value, 6), "ci95": [round(self.low, 6), round(self.high, 6)], "fixed": self.fixed}  # type: ignore[dict-item]


@dataclass
class ProfileFit:
    """The proposed profile: four estimates, the fit errors, how many windows were used, and notes."""

    alpha: Estimate
    beta: Estimate
    gamma: Estimate
    delta: Estimate
    decode_rel_rmse: float
    prefill_rel_rmse: float
    windows: int
    notes: list[str] = field(default_factory=list)
    undetermined: dict[str, str] = field(default_factory=dict)
    """Parameters the data did not determine (name -> why); empty for a :func:`fit_profile` result."""

    def __post_init__(self) -> None:
        """Refuse a parameter or interval that is not a finite number: a fit with one is no fit.

        Why: ``max(nan, 0.0)`` is ``nan``, so such a value went into :meth:`perf_parms` as the text ``"nan"`` and
        into a VariantAutoscaling's spec, where the optimizer sized with it.

        Raises:
            Unidentifiable: A parameter's value or interval is not finite (names the parameter).
        """
        for name in ("alpha", "beta", "gamma", "delta"):
            _require_finite(name, getattr(self, name))

    def profile(self, max_batch: int) -> PerfProfile:
        """The proposed :class:`PerfProfile` (negative values clipped to 0)."""
        return PerfProfile(
            alpha=max(self.alpha.value, 0.0),
            beta=max(self.beta.value, 0.0),
            gamma=max(self.gamma.value, 0.0),
            delta=max(self.delta.value, 0.0),
            max_batch=max_batch,
        )

    def perf_parms(self) -> dict[str, dict[str, str]]:
        """The ``spec.variantProfile.perfParms`` block (decimal strings, as the CRD stores them)."""

        def fmt(e: Estimate) -> str:
            return f"{max(e.value, 0.0):.4g}"

        return {
            "decodeParms": {"alpha": fmt(self.alpha), "beta": fmt(self.beta)},
            "prefillParms": {"gamma": fmt(self.gamma), "delta": fmt(self.delta)},
        }

    def summary(self) -> str:
        """One line: each parameter with its interval, and the fit errors."""

        def part(name: str, e: Estimate) -> str:
            kept = " (kept from spec)" if e.fixed else f" [{e.low:.4g}, {e.high:.4g}]"
            return f"{name}={e.value:.4g}{kept}" + (" undetermined" if name in self.undetermined else "")

        return (
            ", ".join(part(n, getattr(self, n)) for n in ("alpha", "beta", "gamma", "delta"))
            + f"; decode fit error {self.decode_rel_rmse:.1%}, prefill fit error {self.prefill_rel_rmse:.1%}, {self.windows} windows"
        )

    def max_rate(self, max_batch: int, workload: Workload, slo: SLO) -> float:
        """Per-replica max rate (req/s) the proposed profile implies."""
        return max_rate(self.profile(max_batch), workload, slo)


def windows_from_aggregates(aggregates: Mapping[str, np.ndarray], window_s: float) -> list[Window]:
    """Windows from :func:`engine.simulate.windows.window_aggregates` (one variant; consecutive windows)."""
    running = [float(r) for r in aggregates["running_avg"]]
    return [
        Window(
            seconds=window_s,
            requests=float(aggregates["count"][i]),
            ttft_sum_s=float(aggregates["ttft_sum"][i]),
            queue_sum_s=float(aggregates["queue_sum"][i]),
            itl_sum_s=float(aggregates["itl_sum"][i]),
            itl_count=float(aggregates["itl_count"][i]),
            prompt_tokens_sum=float(aggregates["prompt_sum"][i]),
            inference_sum_s=float(aggregates["inference_sum"][i]),
            running_avg=running[i],
            previous_running_avg=running[i - 1] if i > 0 else None,
        )
        for i in range(len(aggregates["count"]))
    ]


VALIDATION_RAMP = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.75, 0.25)
"""The load levels calibration is validated on (fractions of the replica's SLO max rate, ten minutes each)."""


def simulated_ramp(
    profile: PerfProfile,
    slo: SLO,
    prompts: np.ndarray,
    outputs: np.ndarray,
    seed: int = 0,
    levels: Sequence[float] = VALIDATION_RAMP,
    level_s: float = 600.0,
) -> tuple[SimResult, Workload, float]:
    """One replica of ``profile`` (variant ``ns/v``) under Poisson traffic at each of ``levels`` for ``level_s``.

    Prompt and output lengths are drawn from ``prompts``/``outputs``, prefill times carry 5 % per-request
    jitter; a level is a fraction of the replica's SLO max rate for those lengths.  Returns the simulation,
    the workload and that true max rate: the known answer a calibration is checked against.
    """
    rng = np.random.default_rng(seed)
    workload = Workload(float(prompts.mean()), float(outputs.mean()))
    capacity = max_rate(profile, workload, slo)
    times = np.concatenate(
        [
            np.sort(rng.uniform(level_s * i, level_s * (i + 1), rng.poisson(level * capacity * level_s)))
            for i, level in enumerate(levels)
        ]
    )
    pick = rng.integers(0, len(prompts), len(times))
    trace = Trace(times, prompts[pick], outputs[pick], np.zeros(len(times), dtype=np.int64), ("m",))
    variant = VariantModel("ns/v", "m", "v", "A100", 1, 40.0, profile, profile.max_batch * 2048)
    config = SimConfig(horizon_s=level_s * len(levels), prefill_jitter=0.05, seed=seed)
    return simulate([variant], trace, config, {"ns/v": 1}), workload, capacity


def ramp_windows(
    profile: PerfProfile,
    slo: SLO,
    prompts: np.ndarray,
    outputs: np.ndarray,
    seed: int = 0,
    repeats: int = 1,
    window_s: float = 300.0,
) -> tuple[list[Window], Workload, float]:
    """The windows of :func:`simulated_ramp` over :data:`VALIDATION_RAMP` ``repeats`` times (two hours each)."""
    result, workload, capacity = simulated_ramp(profile, slo, prompts, outputs, seed, VALIDATION_RAMP * repeats)
    return windows_from_aggregates(window_aggregates(result, window_s)["ns/v"], window_s), workload, capacity


# --------------------------------------------------------------------------------------------
# Regression helpers
# --------------------------------------------------------------------------------------------


def _wls(x: np.ndarray, y: np.ndarray, w: np.ndarray, z: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted (instrumental-variable when ``z`` is given) regression y = a + b x: coefficients and robust covariance."""
    X = np.stack([np.ones_like(x), x], axis=1)
    Z = X if z is None else np.stack([np.ones_like(z), z], axis=1)
    W = w / w.sum()
    zx = Z.T @ (W[:, None] * X)
    coef = np.linalg.solve(zx, Z.T @ (W * y))
    resid = y - X @ coef
    inv = np.linalg.inv(zx)
    meat = (Z * (W * resid)[:, None]).T @ (Z * (W * resid)[:, None])
    n = len(y)
    cov = inv @ meat @ inv.T * n / max(n - 2, 1)
    return coef, cov


def _estimate(value: float, variance: float) -> Estimate:
    half = Z95 * math.sqrt(max(variance, 0.0))
    return Estimate(float(value), float(value - half), float(value + half))


def _rel_rmse(y: np.ndarray, fitted: np.ndarray, w: np.ndarray) -> float:
    return float(np.sqrt(np.sum(w * (y - fitted) ** 2) / np.sum(w)) / np.mean(y)) if y.size else math.nan


def _require_finite(name: str, estimate: Estimate) -> None:
    """:class:`Unidentifiable` when ``estimate``'s value or interval is not a finite number (every comparison with
    ``NaN`` is false, so the checks below would pass it)."""
    if not all(math.isfinite(x) for x in (estimate.value, estimate.low, estimate.high)):
        raise Unidentifiable(
            f"{name} is not a finite number ({estimate.value:.4g}, 95% CI [{estimate.low:.4g}, {estimate.high:.4g}]): "
            "the metrics hold values that are not finite numbers"
        )


def _check(name: str, estimate: Estimate, why: str) -> None:
    _require_finite(name, estimate)
    if estimate.high < 0:
        raise Unidentifiable(
            f"{name} comes out negative ({estimate.value:.4g}, 95% CI [{estimate.low:.4g}, {estimate.high:.4g}]): {why}"
        )
    if estimate.relative_half_width > MAX_RELATIVE_CI:
        raise Unidentifiable(
            f"{name} is undetermined ({estimate.value:.4g}, 95% CI [{estimate.low:.4g}, {estimate.high:.4g}]): {why}"
        )


# --------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------


def _usable(windows: Sequence[Window]) -> list[Window]:
    return [w for w in windows if w.requests >= MIN_REQUESTS_PER_WINDOW and w.itl_count > 0 and w.seconds > 0]


def fit_decode(windows: Sequence[Window], instrument: bool = True) -> tuple[Estimate, Estimate, float]:
    """(alpha, beta, relative RMS error) from mean ITL against the mean batch, the request rate as instrument.

    ``instrument=False``: ordinary (weighted) least squares, for batches measured without the proxy's error
    (a benchmark's mean concurrency), where the rate would be a poor instrument across prompt lengths.
    """
    y = np.array([w.itl_sum_s / w.itl_count * 1000.0 for w in windows])
    x = np.array([w.batch + 1.0 for w in windows])
    rate = np.array([w.requests / w.seconds for w in windows])
    # The proxy's error grows with the batch (Poisson-like fluctuations): weigh each window's tokens by 1/(n_bar+1).
    weight = np.array([w.itl_count for w in windows]) / x
    if np.ptp(x) < MIN_BATCH_SPREAD:
        raise Unidentifiable(
            f"the mean batch size only spans {np.ptp(x):.2f} requests over the windows (need >= {MIN_BATCH_SPREAD}): "
            "alpha and beta cannot be told apart; collect metrics at more varied load"
        )
    weak = not instrument or (abs(np.corrcoef(rate, x)[0, 1]) < 0.5 if np.ptp(rate) > 0 else True)
    coef, cov = _wls(x, y, weight, None if weak else rate)
    alpha, beta = _estimate(coef[0], cov[0, 0]), _estimate(coef[1], cov[1, 1])
    error = _rel_rmse(y, coef[0] + coef[1] * x, weight)
    return alpha, beta, error


def _prefill_points(windows: Sequence[Window]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean prefill ms, prefill work in token-requests, weight) per window; refuses work that does not vary."""
    y = np.array([(w.ttft_sum_s - (w.queue_sum_s or 0.0)) / w.requests * 1000.0 for w in windows])
    work = np.array([w.prompt_tokens_sum / w.requests * w.joined_batch for w in windows])
    batch = np.array([w.batch for w in windows])
    weight = np.array([w.requests for w in windows]) / (1.0 + batch)
    if np.ptp(work) <= 0:
        raise Unidentifiable(
            "the prefill work (prompt tokens x batch) does not vary over the windows: gamma and delta cannot be told apart"
        )
    return y, work, weight


def _why_gamma(work: np.ndarray) -> str:
    return (
        f"the smallest mean prefill work observed is {work.min():.0f} token-requests, so the fixed prefill time is "
        "extrapolated far outside the data (shorter prompts or idler windows would determine it)"
    )


WHY_ALPHA = "the inter-token latency does not settle to a fixed part at small batches"
WHY_BETA = "the inter-token latency does not grow measurably with the batch size"
WHY_DELTA = "the prefill time does not grow measurably with prompt tokens x batch size"


def fit_prefill(windows: Sequence[Window], gamma_prior: float | None) -> tuple[Estimate, Estimate, float, list[str]]:
    """(gamma, delta, relative RMS error, notes) from mean prefill time against prompt x batch work."""
    notes: list[str] = []
    if any(w.queue_sum_s is None for w in windows):
        # Without the queue-time histogram TTFT includes queueing: only windows without a queue are usable.
        windows = [w for w in windows if w.queue_sum_s is not None]
        notes.append("windows without vllm:request_queue_time_seconds were left out of the prefill fit")
    if len(windows) < MIN_WINDOWS:
        raise Unidentifiable(f"only {len(windows)} windows carry queue times (need {MIN_WINDOWS}) for the prefill fit")
    y, work, weight = _prefill_points(windows)
    coef, cov = _wls(work, y, weight)
    gamma, delta = _estimate(coef[0], cov[0, 0]), _estimate(coef[1], cov[1, 1])
    why_gamma = _why_gamma(work)
    try:
        _check("gamma", gamma, why_gamma)
    except Unidentifiable as exc:
        if gamma_prior is None:
            raise
        # Keep the spec's gamma and fit delta through it: y - gamma = delta * work.
        slope = float(np.sum(weight * work * (y - gamma_prior)) / np.sum(weight * work * work))
        resid = y - gamma_prior - slope * work
        var = (
            float(np.sum((weight * work * resid) ** 2) / np.sum(weight * work * work) ** 2)
            * len(y)
            / max(len(y) - 1, 1)
        )
        gamma = Estimate(gamma_prior, gamma_prior, gamma_prior, fixed=True)
        delta = _estimate(slope, var)
        notes.append(f"gamma kept at the spec's {gamma_prior:g} ms: {exc}")
        coef = np.array([gamma_prior, slope])
    _check("delta", delta, WHY_DELTA)
    error = _rel_rmse(y, coef[0] + coef[1] * work, weight)
    return gamma, delta, error, notes


def fit_profile(windows: Sequence[Window], gamma_prior: float | None = None) -> ProfileFit:
    """Fit all four parameters from the windows, or raise :class:`Unidentifiable` saying why not.

    ``gamma_prior``: the variant's current ``gamma`` (ms); used only when the data cannot determine gamma.
    """
    usable = _usable(windows)
    if len(usable) < MIN_WINDOWS:
        raise Unidentifiable(
            f"only {len(usable)} of {len(windows)} windows have at least {MIN_REQUESTS_PER_WINDOW} finished requests "
            f"(need {MIN_WINDOWS}): too little load to fit a profile"
        )
    alpha, beta, decode_error = fit_decode(usable)
    _check("alpha", alpha, WHY_ALPHA)
    _check("beta", beta, WHY_BETA)
    gamma, delta, prefill_error, notes = fit_prefill(usable, gamma_prior)
    return ProfileFit(alpha, beta, gamma, delta, decode_error, prefill_error, len(usable), notes)


def identify_profile(windows: Sequence[Window], min_windows: int = MIN_WINDOWS, instrument: bool = True) -> ProfileFit:
    """Fit all four parameters and say which the data determine, rather than refusing the whole profile.

    The same regressions and checks as :func:`fit_profile`; a parameter failing its check keeps its
    estimate and is listed in :attr:`ProfileFit.undetermined` with the reason.  Used where the points
    are few and deliberate (benchmark results) and the caller reports per parameter.  When the prefill
    work does not vary at all, ``gamma`` is the mean prefill time and ``delta`` is 0, both undetermined.
    Raises :class:`Unidentifiable` only when fewer than ``min_windows`` points are usable, the batch
    size does not vary (then no decode parameter can be had) or a parameter is not a finite number.  ``instrument``: as :func:`fit_decode`.
    """
    usable = _usable(windows)
    if len(usable) < min_windows:
        raise Unidentifiable(
            f"only {len(usable)} of {len(windows)} points have at least {MIN_REQUESTS_PER_WINDOW} finished requests "
            f"(need {min_windows})"
        )
    undetermined: dict[str, str] = {}

    def check(name: str, estimate: Estimate, why: str) -> None:
        try:
            _check(name, estimate, why)
        except Unidentifiable as exc:
            undetermined[name] = str(exc)

    alpha, beta, decode_error = fit_decode(usable, instrument)
    check("alpha", alpha, WHY_ALPHA)
    check("beta", beta, WHY_BETA)
    try:
        y, work, weight = _prefill_points(usable)
    except Unidentifiable as exc:
        y = np.array([w.ttft_sum_s / w.requests * 1000.0 for w in usable])
        weight = np.array([w.requests for w in usable])
        mean = float(np.sum(weight * y) / np.sum(weight))
        gamma, delta = Estimate(mean, mean, mean), Estimate(0.0, 0.0, 0.0)
        undetermined["gamma"] = undetermined["delta"] = str(exc)
        return ProfileFit(
            alpha, beta, gamma, delta, decode_error, _rel_rmse(y, y * 0 + mean, weight), len(usable), [], undetermined
        )
    coef, cov = _wls(work, y, weight)
    gamma, delta = _estimate(coef[0], cov[0, 0]), _estimate(coef[1], cov[1, 1])
    check("gamma", gamma, _why_gamma(work))
    check("delta", delta, WHY_DELTA)
    prefill_error = _rel_rmse(y, coef[0] + coef[1] * work, weight)
    return ProfileFit(alpha, beta, gamma, delta, decode_error, prefill_error, len(usable), [], undetermined)


# --------------------------------------------------------------------------------------------
# What a calibration does to a VariantAutoscaling
# --------------------------------------------------------------------------------------------

ANNOTATION_CALIBRATION = "modelplane.io/calibration"
"""``apply``: the calibrate flow writes a determined profile into ``spec.variantProfile.perfParms``.
Anything else (or absent): the profile is only proposed (condition + artifact)."""
CONDITION_CALIBRATED = "ProfileCalibrated"
REASON_PROPOSED = "ProfileProposed"
REASON_APPLIED = "ProfileApplied"
REASON_UNIDENTIFIABLE = "ProfileUnidentifiable"
REASON_NO_METRICS = "MetricsUnavailable"


@dataclass(frozen=True)
class CalibrationOutcome:
    """The condition to set and, only when the resource opted in, the spec patch to write."""

    status: str
    reason: str
    message: str
    spec_patch: dict[str, object] | None = None


def opted_in(annotations: Mapping[str, object]) -> bool:
    """Whether a VariantAutoscaling's ``annotations`` ask for calibrated profiles to be written into its spec."""
    return str(annotations.get(ANNOTATION_CALIBRATION, "")).strip().lower() == "apply"


def _why_not_opted_in(va: VariantAutoscaling) -> str:
    """Why a proposal is not written, for a resource that did not opt in: a value other than ``apply`` (a typo such
    as ``aply``) is named, so it does not read as an absent annotation."""
    value = va.metadata.annotations.get(ANNOTATION_CALIBRATION)
    if value is None:
        return f"annotate {ANNOTATION_CALIBRATION}=apply to let the calibrate flow write it"
    return f"{ANNOTATION_CALIBRATION} is {str(value)!r}; only 'apply' lets the calibrate flow write it"


def calibration_outcome(va: VariantAutoscaling, fit: ProfileFit | None, error: str | None) -> CalibrationOutcome:
    """Turn a fit (or the reason there is none) into the resource's condition and, if opted in, a spec patch.

    A profile is written only when the resource carries ``modelplane.io/calibration: apply`` and every
    parameter was determined by the data (a gamma kept from the spec counts: it is the spec's own
    value); otherwise the message holds the proposed values for a person to apply.
    """
    if fit is None:
        reason = REASON_NO_METRICS if error and error.startswith("no metrics") else REASON_UNIDENTIFIABLE
        return CalibrationOutcome("False", reason, f"No profile proposed: {error}")
    proposal = fit.perf_parms()
    text = (
        f"alpha={proposal['decodeParms']['alpha']} beta={proposal['decodeParms']['beta']} "
        f"gamma={proposal['prefillParms']['gamma']} delta={proposal['prefillParms']['delta']} ({fit.summary()})"
    )
    if fit.notes:
        text += "; " + "; ".join(fit.notes)
    if fit.undetermined:
        return CalibrationOutcome(
            "True",
            REASON_PROPOSED,
            f"Proposed profile {text}; not written: {', '.join(sorted(fit.undetermined))} undetermined by the data",
        )
    if not opted_in(va.metadata.annotations):
        return CalibrationOutcome(
            "True", REASON_PROPOSED, f"Proposed profile {text}; not written: {_why_not_opted_in(va)}"
        )
    if va.spec.variant_profile is None:  # maxBatchSize is required in a profile
        return CalibrationOutcome(
            "True",
            REASON_PROPOSED,
            f"Proposed profile {text}; not written: spec.variantProfile.maxBatchSize is not set (the server's --max-num-seqs)",
        )
    profile = {"maxBatchSize": va.spec.variant_profile.max_batch_size, "perfParms": proposal}
    return CalibrationOutcome("True", REASON_APPLIED, f"Applied profile {text}", {"variantProfile": profile})
