"""How a long range query is cut for Prometheus (engine.promql.range_pieces) and how histogram answers are read back
(engine.promql.read_buckets); the client against a real Prometheus is in tests/test_metrics.py."""

from __future__ import annotations

import math
from typing import Any

from engine.promql import (
    MAX_RANGE_POINTS,
    latency_histograms,
    latency_tag,
    range_pieces,
    read_buckets,
    tagged_buckets,
)
from engine.slo.measure import TTFT_HISTOGRAM


def evaluations(pieces: list[tuple[float, float]], step: float) -> list[float]:
    """Every evaluation time the pieces ask for, in order."""
    return [start + step * i for start, end in pieces for i in range(round((end - start) / step) + 1)]


def test_a_range_prometheus_computes_whole_is_one_piece() -> None:
    assert range_pieces(0.0, (MAX_RANGE_POINTS - 1) * 60.0, 60.0) == [(0.0, (MAX_RANGE_POINTS - 1) * 60.0)]


def test_a_longer_range_is_cut_on_its_grid_without_gaps_or_overlap() -> None:
    step = 300.0
    end = 1_700_000_000.0 + 60 * 86400
    pieces = range_pieces(1_700_000_000.0, end, step)

    assert len(pieces) == 2
    assert all(round((b - a) / step) + 1 <= MAX_RANGE_POINTS for a, b in pieces)
    assert evaluations(pieces, step) == [1_700_000_000.0 + step * i for i in range(17_281)]
    assert range_pieces(0.0, MAX_RANGE_POINTS * step, step)[-1] == (MAX_RANGE_POINTS * step,) * 2  # one point left


def test_a_step_that_is_not_a_positive_number_is_left_for_prometheus_to_refuse() -> None:
    for step in (0.0, -60.0, float("nan"), float("inf")):
        assert range_pieces(0.0, 3600.0, step) == [(0.0, 3600.0)]


def bucket_rows(tag: str, buckets: list[tuple[str, str]], model: str = "m") -> list[dict[str, Any]]:
    """The rows of one histogram in a union query's answer: ``(le, value)`` as Prometheus writes them."""
    return [
        {"metric": {"model_name": model, "namespace": "ns", "mp_field": tag, "le": le}, "value": [1.0, value]}
        for le, value in buckets
    ]


def test_a_histogram_with_bounds_that_are_no_numbers_is_refused_naming_the_bound() -> None:
    """Bounds NaN, -5 or 1e999 (beside +Inf) put every prompt in the first bucket when read as bounds: such
    buckets are no histogram, and why is kept for the message; the model's other histograms stand."""
    sane = [("128", "100"), ("512", "500"), ("2048", "900"), ("+Inf", "1000")]
    answers = {
        "NaN": [("NaN", "100"), ("512", "500"), ("+Inf", "1000")],
        "-5": [("-5", "100"), ("512", "500"), ("+Inf", "1000")],
        "-Inf": [("-Inf", "0"), ("512", "500"), ("+Inf", "1000")],
        "abc": [("abc", "100"), ("512", "500"), ("+Inf", "1000")],
        "1e999": [("128", "100"), ("1e999", "900"), ("+Inf", "1000")],
        "128.0": [("128", "100"), ("128.0", "900"), ("+Inf", "1000")],
    }
    for bad, buckets in answers.items():
        accepted, refused = read_buckets(bucket_rows("prompt", buckets) + bucket_rows("output", sane))
        assert accepted == {("m", "ns"): {"output": tuple((float(le), float(v)) for le, v in sane)}}, bad
        assert f'le="{bad}"' in refused[("m", "ns")]["prompt"], refused
    hostile = [("NaN", "100"), ("-5", "500"), ("1e999", "900"), ("+Inf", "1000")]
    assert tagged_buckets(bucket_rows("bucket", hostile)) == {}
    assert read_buckets(bucket_rows("bucket", hostile))[1] == {
        ("m", "ns"): {"bucket": 'bucket bound le="NaN" is not a number >= 0'}
    }
    # The label is the server's: quoted on one line, and not at any length.
    injected = "x\nINJECTED LINE" + "y" * 10_000
    problem = read_buckets(bucket_rows("bucket", [(injected, "1"), ("+Inf", "2")]))[1][("m", "ns")]["bucket"]
    assert "\n" not in problem and len(problem) < 100 and '"x\\nINJECTED LINE' in problem


def test_a_bucket_whose_count_is_no_number_is_left_out_and_without_inf_there_is_no_histogram() -> None:
    """A count NaN, infinite or negative is no increase of a counter: the bucket is dropped as one never exported
    (the others stand); when that is the +Inf bucket, no histogram is left."""
    for bad in ("NaN", "+Inf", "1e999", "-3"):
        middle = read_buckets(bucket_rows("t", [("1", "10"), ("2", bad), ("+Inf", "30")]))[0]
        assert middle == {("m", "ns"): {"t": ((1.0, 10.0), (math.inf, 30.0))}}, bad
        accepted, refused = read_buckets(bucket_rows("t", [("1", "10"), ("2", "20"), ("+Inf", bad)]))
        assert accepted == {} and refused == {("m", "ns"): {"t": "no +Inf bucket with a count"}}, bad


def test_infinite_latency_counts_leave_the_model_without_that_histogram() -> None:
    """TTFT bucket increases of +Inf (a hostile or broken exporter) give no histogram to measure, as a missing
    one: the model's attainment is unknown, where it used to be a request count of infinity."""
    window, recent = latency_tag(TTFT_HISTOGRAM, "window"), latency_tag(TTFT_HISTOGRAM, "recent")
    rows = bucket_rows(window, [("0.5", "+Inf"), ("+Inf", "+Inf")]) + bucket_rows(
        recent, [("0.5", "9"), ("+Inf", "1e999")]
    )
    assert latency_histograms(tagged_buckets(rows).get(("m", "ns"), {})) is None
