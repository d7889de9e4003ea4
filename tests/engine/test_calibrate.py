"""Calibration recovers known profiles from the metrics the simulator exports, and refuses what it cannot determine.

The data: one replica of each example-cluster profile (A100/H100 for llama-3.1-8b, A100/2xL40S for
granite-13b) serving Poisson traffic whose prompt and output lengths are drawn from the Azure
conversation trace, at load levels from 10 % to 100 % of the replica's SLO max rate and back (two hours,
ten minutes per level; a day of metrics is that ramp twelve times), with 5 % per-request jitter on prefill
times; metrics in five-minute windows.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import pathlib

import numpy as np
import pytest

from engine.api.llmd import VariantAutoscaling
from engine.perf.queueing import SLO, PerfProfile, Workload
from engine.perf.sizing import max_rate
from engine.simulate.calibrate import (
    ANNOTATION_CALIBRATION,
    MIN_WINDOWS,
    REASON_APPLIED,
    REASON_PROPOSED,
    REASON_UNIDENTIFIABLE,
    Estimate,
    ProfileFit,
    Unidentifiable,
    calibration_outcome,
    fit_profile,
    identify_profile,
    ramp_windows,
    windows_from_aggregates,
)
from engine.simulate.records import SimConfig, Trace, VariantModel
from engine.simulate.replay import simulate
from engine.simulate.trace import parse_trace_rows
from engine.simulate.windows import window_aggregates
from tests.factories import parsed_variant

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACE = REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"
WINDOW_S = 300.0

EXAMPLE_PROFILES = {
    "llama-3.1-8b A100": (PerfProfile(20.58, 0.41, 5.2, 0.1, 256), SLO(500, 24)),
    "llama-3.1-8b H100": (PerfProfile(12.4, 0.22, 3.1, 0.06, 256), SLO(500, 24)),
    "granite-13b A100": (PerfProfile(27.9, 0.53, 8.4, 0.15, 128), SLO(800, 40)),
    "granite-13b 2xL40S": (PerfProfile(31.2, 0.68, 9.7, 0.19, 128), SLO(800, 40)),
}


@pytest.fixture(scope="module")
def tokens() -> tuple[np.ndarray, np.ndarray]:
    with TRACE.open(newline="") as handle:
        _, prompts, outputs = parse_trace_rows(csv.reader(handle))
    return prompts, outputs


@pytest.mark.parametrize("name", sorted(EXAMPLE_PROFILES))
def test_example_profiles_are_recovered_from_conversation_traffic(name: str, tokens) -> None:
    profile, slo = EXAMPLE_PROFILES[name]
    windows, workload, capacity = ramp_windows(profile, slo, *tokens)
    # With ~1,000-token prompts the fixed prefill time is a few percent of the smallest prefill: undetermined.
    with pytest.raises(Unidentifiable, match="gamma"):
        fit_profile(windows)
    fit = fit_profile(windows, gamma_prior=profile.gamma)
    assert fit.gamma.fixed and fit.gamma.value == profile.gamma and any("gamma kept" in n for n in fit.notes)
    for parameter in ("alpha", "beta", "delta"):
        estimate = getattr(fit, parameter)
        assert estimate.value == pytest.approx(getattr(profile, parameter), rel=0.10), parameter
        assert estimate.low < estimate.value < estimate.high
    assert fit.max_rate(profile.max_batch, workload, slo) == pytest.approx(capacity, rel=0.05)
    # What the data cannot see barely matters at these prompts: a spec gamma off by 100 % either way
    # (delta is then fitted through it) still gives the max rate within 5 %.
    for wrong in (0.0, 2 * profile.gamma):
        assert fit_profile(windows, gamma_prior=wrong).max_rate(profile.max_batch, workload, slo) == pytest.approx(
            capacity, rel=0.05
        )


@pytest.mark.parametrize("name", sorted(EXAMPLE_PROFILES))
def test_short_prompts_determine_all_four_parameters(name: str, tokens) -> None:
    """~60-token prompts make the fixed prefill time a visible share of the prefill: gamma is determined.

    gamma's interval is still wide (+-20-40 %): it is checked to cover the truth and to be within 25 %;
    the other parameters within 10 %, the max rate within 5 %.
    """
    profile, slo = EXAMPLE_PROFILES[name]
    prompts, outputs = tokens
    short = np.maximum(prompts // 20, 1)
    windows, workload, capacity = ramp_windows(profile, slo, short, outputs)
    fit = fit_profile(windows)
    assert not fit.gamma.fixed and not fit.notes
    for parameter in ("alpha", "beta", "gamma", "delta"):
        estimate = getattr(fit, parameter)
        assert estimate.low <= getattr(profile, parameter) <= estimate.high, parameter
    assert fit.gamma.value == pytest.approx(profile.gamma, rel=0.25)
    for parameter in ("alpha", "beta", "delta"):
        assert getattr(fit, parameter).value == pytest.approx(getattr(profile, parameter), rel=0.10), parameter
    assert fit.max_rate(profile.max_batch, workload, slo) == pytest.approx(capacity, rel=0.05)


@pytest.mark.parametrize("name", sorted(EXAMPLE_PROFILES))
def test_a_day_of_short_prompt_metrics_recovers_every_parameter_within_10_percent(name: str, tokens) -> None:
    """Two hours leave gamma's interval at +-20-40 %; a day (the calibrate flow's default lookback) at +-5-8 %.

    Every parameter is then within 10 % of the truth, the max rate within 5 %.
    """
    profile, slo = EXAMPLE_PROFILES[name]
    prompts, outputs = tokens
    windows, workload, capacity = ramp_windows(profile, slo, np.maximum(prompts // 20, 1), outputs, repeats=12)
    fit = fit_profile(windows)
    assert not fit.gamma.fixed and fit.windows >= 280
    assert fit.gamma.relative_half_width < 0.10
    for parameter in ("alpha", "beta", "gamma", "delta"):
        assert getattr(fit, parameter).value == pytest.approx(getattr(profile, parameter), rel=0.10), parameter
    assert fit.max_rate(profile.max_batch, workload, slo) == pytest.approx(capacity, rel=0.05)


def test_steady_load_cannot_separate_alpha_from_beta(tokens) -> None:
    profile, slo = EXAMPLE_PROFILES["llama-3.1-8b H100"]
    prompts, outputs = tokens
    rng = np.random.default_rng(3)
    rate = 0.5 * max_rate(profile, Workload(float(prompts.mean()), float(outputs.mean())), slo)
    times = np.sort(rng.uniform(0, 7200, rng.poisson(rate * 7200)))
    pick = rng.integers(0, len(prompts), len(times))
    trace = Trace(times, prompts[pick], outputs[pick], np.zeros(len(times), dtype=np.int64), ("m",))
    v = VariantModel("ns/v", "m", "v", "H100", 1, 75.0, profile, 10**9)
    result = simulate([v], trace, SimConfig(horizon_s=7200), {"ns/v": 1})
    windows = windows_from_aggregates(window_aggregates(result, WINDOW_S)["ns/v"], WINDOW_S)
    with pytest.raises(Unidentifiable, match="batch size only spans"):
        fit_profile(windows)


def test_idle_windows_are_not_enough(tokens) -> None:
    profile, slo = EXAMPLE_PROFILES["llama-3.1-8b A100"]
    windows, _, _ = ramp_windows(profile, slo, *tokens)
    with pytest.raises(Unidentifiable, match="too little load"):
        fit_profile(windows[:5])


def va(annotations: dict[str, str] | None = None, profile: bool = True) -> VariantAutoscaling:
    spec: dict = {"modelID": "m", "scaleTargetRef": {"kind": "Deployment", "name": "d"}}
    if profile:
        spec["variantProfile"] = {
            "maxBatchSize": 256,
            "perfParms": {"decodeParms": {"alpha": "1", "beta": "1"}, "prefillParms": {"gamma": "1", "delta": "1"}},
        }
    metadata = {"name": "v", "namespace": "ns", "annotations": annotations or {}}
    return parsed_variant(
        {"apiVersion": "llmd.ai/v1alpha1", "kind": "VariantAutoscaling", "metadata": metadata, "spec": spec}
    )


def test_profile_is_written_only_when_the_resource_opts_in(tokens) -> None:
    profile, slo = EXAMPLE_PROFILES["granite-13b A100"]
    windows, _, _ = ramp_windows(profile, slo, *tokens)
    fit = fit_profile(windows, gamma_prior=profile.gamma)

    proposed = calibration_outcome(va(), fit, None)
    assert (proposed.status, proposed.reason, proposed.spec_patch) == ("True", REASON_PROPOSED, None)
    assert f"{ANNOTATION_CALIBRATION}=apply" in proposed.message and "alpha=" in proposed.message
    misspelt = calibration_outcome(va({ANNOTATION_CALIBRATION: "aply"}), fit, None)
    assert misspelt.spec_patch is None and f"{ANNOTATION_CALIBRATION} is 'aply'; only 'apply'" in misspelt.message

    applied = calibration_outcome(va({ANNOTATION_CALIBRATION: "apply"}), fit, None)
    assert applied.reason == REASON_APPLIED
    written = applied.spec_patch["variantProfile"]
    assert written["maxBatchSize"] == 256
    assert float(written["perfParms"]["decodeParms"]["alpha"]) == pytest.approx(profile.alpha, rel=0.1)
    assert float(written["perfParms"]["prefillParms"]["gamma"]) == profile.gamma

    no_batch = calibration_outcome(va({ANNOTATION_CALIBRATION: "apply"}, profile=False), fit, None)
    assert no_batch.spec_patch is None and "maxBatchSize" in no_batch.message

    refused = calibration_outcome(va({ANNOTATION_CALIBRATION: "apply"}), None, "gamma is undetermined (...)")
    assert (refused.status, refused.reason, refused.spec_patch) == ("False", REASON_UNIDENTIFIABLE, None)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_sample_gives_no_profile_never_a_nan_one(bad: float, tokens) -> None:
    """Windows carrying a ``NaN`` or infinite sum (a Prometheus sample of ``NaN`` or ``+Inf`` that reached the
    engine) are no fit: every comparison with ``NaN`` is false, so the checks passed it, and ``perf_parms`` wrote
    ``max(nan, 0.0)`` as ``"nan"`` into an opted-in VariantAutoscaling's spec. Now the fit is refused, saying
    why, and the variant gets the 'no profile' outcome."""
    profile, slo = EXAMPLE_PROFILES["llama-3.1-8b A100"]
    windows, _, _ = ramp_windows(profile, slo, *tokens)
    spoiled = [
        dataclasses.replace(w, ttft_sum_s=bad, itl_sum_s=bad) if i % 7 == 3 else w for i, w in enumerate(windows)
    ]
    assert len(spoiled) >= MIN_WINDOWS
    with pytest.raises(Unidentifiable, match="not a finite number"):
        fit_profile(spoiled, gamma_prior=profile.gamma)
    with pytest.raises(Unidentifiable, match="not a finite number"):
        identify_profile(spoiled)
    outcome = calibration_outcome(va({ANNOTATION_CALIBRATION: "apply"}), None, "alpha is not a finite number")
    assert (outcome.status, outcome.reason, outcome.spec_patch) == ("False", REASON_UNIDENTIFIABLE, None)


def test_a_profile_fit_never_holds_a_non_finite_parameter() -> None:
    """Whatever builds it, a :class:`ProfileFit` with a ``NaN`` or infinite value or interval is refused, so
    ``perf_parms`` can never render one as ``"nan"`` or ``"inf"``."""
    good = Estimate(1.0, 0.9, 1.1)
    for bad in (Estimate(math.nan, 0.9, 1.1), Estimate(1.0, -math.inf, 1.1), Estimate(1.0, 0.9, math.nan)):
        with pytest.raises(Unidentifiable, match="delta is not a finite number"):
            ProfileFit(good, good, good, bad, 0.1, 0.1, 10)
    assert ProfileFit(good, good, good, good, 0.1, 0.1, 10).perf_parms()["decodeParms"]["alpha"] == "1"
