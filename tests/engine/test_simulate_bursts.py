"""Bursty replays (engine.simulate.bursts): the statistics of a trace, the generator hitting the held-out
code-assistant trace's statistics within stated tolerances, the named variants, seeding, and TraceShape's use."""

from __future__ import annotations

import csv
import pathlib

import numpy as np
import pytest

from engine.simulate.bursts import (
    BURSTY_HELD_OUT,
    BURSTY_TUNING,
    BURSTY_VARIANTS,
    BurstShape,
    BurstStatistics,
    burst_statistics,
    bursty_requests,
)
from engine.simulate.trace import TraceError, TraceShape, parse_trace_rows, shape_trace

TRACE = pathlib.Path(__file__).resolve().parents[2] / "deployments" / "traces" / "azure-conv-2023-20min.csv"
SEEDS = range(8)


@pytest.fixture(scope="module")
def conversation() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with TRACE.open(newline="") as handle:
        return parse_trace_rows(csv.reader(handle))


def statistics(shape: BurstShape, conversation: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[BurstStatistics]:
    _, prompts, outputs = conversation
    out = []
    for seed in SEEDS:
        t, p, _ = bursty_requests(prompts, outputs, shape, np.random.default_rng(seed))
        out.append(burst_statistics(t, p, 60.0 * shape.duration_min))
    return out


def mean_of(stats: list[BurstStatistics], name: str) -> float:
    return float(np.mean([getattr(s, name) for s in stats]))


def test_statistics_of_a_small_trace_by_hand() -> None:
    # Minute 0: 3 requests in second 1 and one in second 30; minute 1 silent; minute 2: 2 requests.
    t = np.array([1.1, 1.2, 1.9, 30.0, 125.0, 150.0])
    stats = burst_statistics(t, np.array([10, 20, 30, 40, 50, 60]))
    per_minute = np.array([4, 0, 2])
    per_second = np.zeros(180)
    per_second[[1, 30, 125, 150]] = [3, 1, 1, 1]
    assert stats.minutes == 3 and stats.requests == 6 and stats.silent_minutes == 1
    assert stats.minute_cv == pytest.approx(per_minute.std() / per_minute.mean())
    assert stats.peak_to_mean == pytest.approx(2.0)
    assert stats.second_dispersion == pytest.approx(per_second.var() / per_second.mean())
    assert stats.max_per_second == 3 and stats.prompt_median == 35.0 and stats.prompt_mean == 35.0


def test_the_conversation_trace_is_steady_on_this_scale(conversation: tuple[np.ndarray, ...]) -> None:
    t, prompts, _ = conversation
    stats = burst_statistics(t, prompts)
    assert stats.minute_cv < 0.35 and stats.second_dispersion < 2.0 and stats.silent_minutes == 0
    assert stats.prompt_median < 1100


def test_the_reference_shape_hits_the_held_out_traces_statistics(conversation: tuple[np.ndarray, ...]) -> None:
    """Targets (the held-out code-assistant trace) and tolerances: 57 minutes and ~8,800 requests exactly;
    over 8 seeds, per-minute CV 1.0 +- 0.2, peak minute 4x the mean +- 1.2, per-second variance/mean 13 +- 3,
    busiest second ~67 (45-95), silent minutes between bursts (at least 5 on average, in every seed at least 1),
    prompt median 1,470 and mean 2,050 within 5 %."""
    stats = statistics(BurstShape(), conversation)
    assert all(s.minutes == 57 and abs(s.requests - 8800) <= 10 for s in stats)
    assert 0.8 <= mean_of(stats, "minute_cv") <= 1.2
    assert 2.8 <= mean_of(stats, "peak_to_mean") <= 5.2
    assert 10.0 <= mean_of(stats, "second_dispersion") <= 16.0
    assert 45 <= mean_of(stats, "max_per_second") <= 95
    assert mean_of(stats, "silent_minutes") >= 5 and all(s.silent_minutes >= 1 for s in stats)
    assert mean_of(stats, "prompt_median") == pytest.approx(1470, rel=0.05)
    assert mean_of(stats, "prompt_mean") == pytest.approx(2050, rel=0.05)


def test_each_held_out_variant_changes_what_its_name_says(conversation: tuple[np.ndarray, ...]) -> None:
    reference = statistics(BURSTY_VARIANTS["tune-a"], conversation)
    silences = statistics(BURSTY_VARIANTS["held-long-silences"], conversation)
    sharp = statistics(BURSTY_VARIANTS["held-sharp-clusters"], conversation)
    double = statistics(BURSTY_VARIANTS["held-2x-rate"], conversation)
    assert mean_of(silences, "silent_minutes") > 1.6 * mean_of(reference, "silent_minutes")
    assert mean_of(sharp, "second_dispersion") > 2 * mean_of(reference, "second_dispersion")
    assert mean_of(sharp, "max_per_second") > 1.5 * mean_of(reference, "max_per_second")
    assert mean_of(double, "requests") == pytest.approx(2 * mean_of(reference, "requests"), abs=2)
    assert set(BURSTY_TUNING).isdisjoint(BURSTY_HELD_OUT) and len(BURSTY_TUNING) == len(BURSTY_HELD_OUT) == 3
    assert set(BURSTY_TUNING) | set(BURSTY_HELD_OUT) == set(BURSTY_VARIANTS)


def test_resampling_keeps_recorded_pairs_and_favours_long_prompts(conversation: tuple[np.ndarray, ...]) -> None:
    _, prompts, outputs = conversation
    recorded = set(zip(prompts.tolist(), outputs.tolist()))
    shape = BurstShape(prompt_scale=1.0, duration_min=10)
    _, p, o = bursty_requests(prompts, outputs, shape, np.random.default_rng(0))
    assert set(zip(p.tolist(), o.tolist())) <= recorded
    assert np.median(p) > np.median(prompts)
    _, flat, _ = bursty_requests(
        prompts, outputs, BurstShape(prompt_tilt=0.0, prompt_scale=2.0, duration_min=10), np.random.default_rng(0)
    )
    assert np.median(flat) == pytest.approx(2 * np.median(prompts), rel=0.1)


def test_a_burst_shape_in_trace_shape_is_seeded_and_split_over_the_models(conversation: tuple[np.ndarray, ...]) -> None:
    t, prompts, outputs = conversation
    shape = TraceShape({"ns/a": 1.0, "ns/b": 1.0}, seed=4, burst=BURSTY_VARIANTS["tune-b"])
    one, again = shape_trace(t, prompts, outputs, shape), shape_trace(t, prompts, outputs, shape)
    other = shape_trace(t, prompts, outputs, TraceShape({"ns/a": 1.0, "ns/b": 1.0}, seed=5, burst=shape.burst))
    assert np.array_equal(one.arrival_s, again.arrival_s) and np.array_equal(one.in_tokens, again.in_tokens)
    assert not np.array_equal(one.arrival_s, other.arrival_s)
    assert one.models == ("ns/a", "ns/b") and 0.4 < one.model_index.mean() < 0.6
    assert len(one) == round(BURSTY_VARIANTS["tune-b"].requests_per_min * 57)
    assert one.arrival_s[-1] < 57 * 60


@pytest.mark.parametrize("field", [{"compression": 2.0}, {"rate_scale": 2.0}, {"wave_floor": 0.5}, {"start_s": 60.0}])
def test_a_burst_does_not_combine_with_the_recorded_times_settings(field: dict[str, float]) -> None:
    with pytest.raises(TraceError, match=f"{next(iter(field))} cannot be combined with burst"):
        TraceShape({"ns/m": 1.0}, burst=BurstShape(), **field)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad", [{"decay": 0.0}, {"silence_mean_min": 0.5}, {"cluster_share": 1.5}, {"requests_per_min": 0.0}]
)
def test_a_burst_shape_out_of_range_names_the_parameter(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        BurstShape(**bad)  # type: ignore[arg-type]
