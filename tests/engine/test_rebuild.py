"""A window's traffic rebuilt from Prometheus' counters and histograms (engine.simulate.rebuild)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from engine.perf.tail_sizing import PromptDistribution
from engine.simulate.rebuild import ModelTraffic, TrafficError, rebuild_trace, whole_counts, window_span
from engine.simulate.trace import MAX_REPLAY_REQUESTS

PROMPTS = PromptDistribution.from_buckets([(100, 10), (1000, 60), (5000, 95), (float("inf"), 100)])
OUTPUTS = PromptDistribution.from_buckets([(10, 5), (100, 50), (1000, 100), (float("inf"), 100)])


def traffic(counts: list[float], prompts: PromptDistribution | None = PROMPTS) -> ModelTraffic:
    return ModelTraffic(tuple(counts), 60.0, prompts, OUTPUTS)


def test_fractional_increases_keep_the_running_total() -> None:
    # Prometheus extrapolates increase(): 2.4 + 2.4 + 2.4 requests are 7 whole requests, not 6.
    assert whole_counts([2.4, 2.4, 2.4]).tolist() == [2, 3, 2]
    assert whole_counts([0.0, float("nan"), -1.0, 3.0]).tolist() == [0, 0, 0, 3]
    assert int(whole_counts([0.3] * 100).sum()) == 30


def test_every_request_lands_in_its_minute_and_its_model() -> None:
    counts_a, counts_b = [3.0, 0.0, 5.0, 1.0], [0.0, 2.0, 0.0, 4.0]
    trace = rebuild_trace({"ns/b": traffic(counts_b), "ns/a": traffic(counts_a)}, seed=1)
    assert trace.models == ("ns/a", "ns/b")
    assert len(trace) == 15 and np.all(np.diff(trace.arrival_s) >= 0)
    for index, counts in enumerate((counts_a, counts_b)):
        minutes = np.floor(trace.arrival_s[trace.model_index == index] / 60.0).astype(int)
        assert np.bincount(minutes, minlength=4).tolist() == [int(c) for c in counts]


def test_token_lengths_follow_the_histograms() -> None:
    trace = rebuild_trace({"ns/a": traffic([2000.0] * 5)}, seed=0)
    prompts, outputs = trace.in_tokens, trace.out_tokens
    for bound, share in ((100, 0.10), (1000, 0.60), (5000, 0.95)):
        assert abs(np.mean(prompts < bound) - share) < 0.01
    # The +Inf bucket's 5 % sit at the last finite bound; no output is shorter than one token.
    assert prompts.max() == 5000 and abs(np.mean(prompts == 5000) - 0.05) < 0.01 and outputs.min() >= 1
    assert abs(np.mean(outputs <= 100) - 0.5) < 0.01


def test_the_histograms_mean_shapes_the_inside_of_a_bucket() -> None:
    # The same buckets with a small mean put the prompts low inside each bucket (a fitted falling density).
    plain = rebuild_trace({"ns/a": traffic([5000.0])}, seed=0).in_tokens.mean()
    low = rebuild_trace({"ns/a": traffic([5000.0], PROMPTS.with_mean(700.0))}, seed=0).in_tokens.mean()
    assert low < plain - 100


def test_a_seed_gives_one_trace() -> None:
    first = rebuild_trace({"ns/a": traffic([10.0, 20.0])}, seed=3)
    again = rebuild_trace({"ns/a": traffic([10.0, 20.0])}, seed=3)
    other = rebuild_trace({"ns/a": traffic([10.0, 20.0])}, seed=4)
    assert np.array_equal(first.arrival_s, again.arrival_s) and np.array_equal(first.in_tokens, again.in_tokens)
    assert not np.array_equal(first.arrival_s, other.arrival_s)


def test_a_quiet_model_has_no_request_and_a_quiet_window_is_an_error() -> None:
    trace = rebuild_trace({"ns/a": traffic([1.0]), "ns/quiet": traffic([0.0], prompts=None)})
    assert trace.models == ("ns/a", "ns/quiet") and set(trace.model_index) == {0}
    with pytest.raises(TrafficError, match="no request in the window"):
        rebuild_trace({"ns/quiet": traffic([0.0, 0.2])})


def test_requests_without_a_histogram_name_the_model() -> None:
    with pytest.raises(TrafficError, match="ns/a: 4 requests in the window but no prompt-token histogram"):
        rebuild_trace({"ns/a": traffic([4.0], prompts=None)})
    with pytest.raises(TrafficError, match="different steps"):
        rebuild_trace({"ns/a": traffic([1.0]), "ns/b": ModelTraffic((1.0,), 30.0, PROMPTS, OUTPUTS)})


def test_a_histogram_refused_for_its_bounds_is_named_in_the_error() -> None:
    refused = 'bucket bound le="NaN" is not a number >= 0'
    record = ModelTraffic((4.0,), 60.0, None, OUTPUTS, prompt_refused=refused)
    with pytest.raises(
        TrafficError, match=f"ns/a: 4 requests in the window but no prompt-token histogram \\({refused}\\)$"
    ):
        rebuild_trace({"ns/a": record})


def test_a_window_of_more_requests_than_a_replay_holds_is_refused_before_any_is_built() -> None:
    """3 million requests a minute for ten minutes on two models is 60 million, past the trace-file path's cap:
    refused with one line, before an array of that size exists (1e300 a minute would not even be a count)."""
    busy = [3e6] * 10
    with pytest.raises(TrafficError, match=f"holds 60,000,000 requests .*at most {MAX_REPLAY_REQUESTS:,}"):
        rebuild_trace({"ns/a": traffic(busy), "ns/b": traffic(busy)})
    with pytest.raises(TrafficError, match=r"holds 1e\+301 requests \(ns/a: 1e\+301\)"):
        rebuild_trace({"ns/a": traffic([1e300] * 10), "ns/b": traffic([1.0])})
    assert traffic([1e300, math.inf, -1.0]).requests == int(1e300)
    assert len(rebuild_trace({"ns/a": traffic([2.5, 2.5])})) == traffic([2.5, 2.5]).requests == 5


def test_a_window_ends_at_a_whole_minute_now_or_where_it_was_asked_to() -> None:
    now = datetime(2026, 11, 30, 19, 41, 7, 500, tzinfo=UTC)
    current = window_span("1d", None, now)
    assert current.end == datetime(2026, 11, 30, 19, 41, tzinfo=UTC) and str(current) == "1d to 2026-11-30T19:41Z"
    # A time without an offset is UTC; one with an offset is converted; the seconds are dropped either way.
    asked = window_span("20m", datetime(2026, 11, 30, 6, 0, 59), now)
    assert asked.end == datetime(2026, 11, 30, 6, 0, tzinfo=UTC) and str(asked) == "20m to 2026-11-30T06:00Z"
    shifted = window_span("20m", datetime(2026, 11, 30, 8, 0, tzinfo=timezone(timedelta(hours=2))), now)
    assert shifted.end == asked.end
    with pytest.raises(ValueError, match="later than now: Prometheus holds no traffic there yet"):
        window_span("1d", now + timedelta(minutes=1), now)
