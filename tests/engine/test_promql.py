"""How a long range query is cut for Prometheus (engine.promql.range_pieces); the client against a real Prometheus
is in tests/test_metrics.py."""

from __future__ import annotations

from engine.promql import MAX_RANGE_POINTS, range_pieces


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
