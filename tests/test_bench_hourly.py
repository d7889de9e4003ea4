"""The hourly attainment benchmark (bench.hourly_attainment): later hours judged, the first left out; steady traffic
played end to end with no silent seam."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.attainment import against_static
from bench.hourly_attainment import HELD_OUT, MIXED, TUNING, economy_row, for_hours, later_hours, summary, table_row
from bench.simulate import _burst_shape, repeated
from engine.simulate.bursts import BURSTY_VARIANTS

GRANITE, LLAMA = "llm-serving/ibm/granite-13b", "llm-serving/meta/llama-3.1-8b"
CEILINGS = {GRANITE: 0.86, LLAMA: 0.99}


def hour(granite: float, llama: float, cost: float = 100.0, requests: int = 1000) -> dict[str, Any]:
    """One hour of one seed, both models with equal traffic."""
    return {
        "attained": (granite + llama) / 2,
        "requests": requests,
        "by_model": {GRANITE: granite, LLAMA: llama},
        "model_ceilings": CEILINGS,
        "cost": cost,
    }


def test_only_the_hours_after_the_first_are_judged_and_a_model_above_its_ceiling_is_not() -> None:
    seeds = [
        # The first hour misses by 10 points (the loop's first window); the later ones are judged.
        [hour(0.70, 0.70, 300.0), hour(0.80, 0.81), hour(0.78, 0.87)],
        [hour(0.70, 0.70, 300.0), hour(0.79, 0.80), hour(0.805, 0.80)],
    ]
    row = {"variant": "bursty tune-a", "rows": TUNING, "target": 0.80, "seeds": seeds}
    # Over all requests the later hours are 80.5, 82.5, 79.5 and 80.25 %: three within 1.5 points. Each model:
    # granite 0.0, -2.0, -1.0, +0.5 points (3 within); llama +1.0, +7.0, 0.0, 0.0 (3 within). Cost: 300, then 100.
    assert table_row(row, 3) == (
        "| bursty tune-a | tuning | 80 % | 70.0 % | 80.0 % | 81.4 % | 3/4 | granite-13b 3/4, -0.6; "
        "llama-3.1-8b 3/4, +2.0 | 300.0 | 100.0 |"
    )
    # At 90 % granite-13b's ceiling (86 %) does not allow the target: only llama-3.1-8b is judged per model.
    row = {**row, "target": 0.90}
    assert "| llama-3.1-8b 0/4, -8.0 |" in table_row(row, 3)
    held = {**row, "rows": HELD_OUT, "target": 0.80}
    assert summary([{**row, "target": 0.80}, held]) == (
        "After the first hour: bursty tuning variants: 3 of 4 later hours within 1.5 points over all requests (mean "
        "distance 0.9 points), 6 of 8 model-hours (mean distance 1.4); bursty held-out variants: 3 of 4 later hours "
        "within 1.5 points over all requests (mean distance 0.9 points), 6 of 8 model-hours (mean distance 1.4)."
    )
    steady = {**row, "variant": "conversation, 1x", "rows": MIXED, "target": 0.80}
    assert table_row(steady, 3).startswith("| conversation, 1x | tuning and held out | 80 % |")
    assert summary([steady]).startswith("After the first hour: steady traffic: 3 of 4 later hours within 1.5 points")


def test_a_variant_drawn_for_longer_keeps_every_parameter_but_its_length() -> None:
    longer = _burst_shape("held-long-silences", 180)
    assert longer is not None and longer.duration_min == 180
    assert {**longer.as_dict(), "duration_min": 57} == BURSTY_VARIANTS["held-long-silences"].as_dict()
    assert _burst_shape("tune-a", None) is BURSTY_VARIANTS["tune-a"]
    assert _burst_shape(None, 180) is None


def test_a_trace_played_end_to_end_has_no_silent_seam() -> None:
    """A copy starts one median gap after the last request of the one before: a seam is never a silent minute
    (which would mark the traffic intermittent and make the loop hold the hour's peak)."""
    arrival = np.array([10.0, 11.0, 13.0, 14.0, 100.0])  # gaps 1, 2, 1, 86: median 1.5
    prompts, outputs = np.array([1, 2, 3, 4, 5]), np.array([6, 7, 8, 9, 10])
    t, p, o = repeated(arrival, prompts, outputs, 273.0)  # a copy is 91.5 s: three cover 274.5 s
    assert t.tolist() == [0, 1, 3, 4, 90, 91.5, 92.5, 94.5, 95.5, 181.5, 183, 184, 186, 187, 273]
    assert p.tolist() == [1, 2, 3, 4, 5] * 3 and o.tolist() == [6, 7, 8, 9, 10] * 3
    assert repeated(arrival, prompts, outputs, 0.0)[0].tolist() == [0, 1, 3, 4, 90]  # once at least
    assert len(repeated(arrival, prompts, outputs, 275.0)[0]) == 20  # a fourth copy for the last half second
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite number of seconds >= 0"):
            repeated(arrival, prompts, outputs, bad)


def test_each_traffic_is_shaped_to_cover_the_hours() -> None:
    assert for_hours({"bursty": "tune-a"}, 3) == {"bursty": "tune-a", "bursty_minutes": 180}
    # Played until the copies cover the hours, cut at their end.
    assert for_hours({"rate_scale": 2.0}, 3) == {"rate_scale": 2.0, "repeat_for_s": 10800.0, "duration_s": 10800.0}


def test_later_hours_are_weighed_by_their_requests_and_compared_with_static_over_the_same_hours() -> None:
    seed = [hour(0.5, 0.5, 900.0), hour(0.80, 0.80, 100.0, requests=3000), hour(0.90, 0.90, 120.0, requests=1000)]
    later = later_hours(seed)
    # (0.80 x 3000 + 0.90 x 1000) / 4000 = 0.825; the first hour's cost is left out.
    assert later["attained"] == pytest.approx(0.825) and later["cost"] == pytest.approx(220.0)
    # Static's curve over the same hours: 80 % at 200, 85 % at 260 -> 230 at 82.5 %; the loop's 220 is 0.96x.
    curve = [(0.80, 200.0), (0.85, 260.0)]
    row = {"variant": "conversation, 1x", "target": 0.80, "cells": [against_static(later, curve)]}
    assert economy_row(row) == "| conversation, 1x | 80 % | 82.5 % | 220.0 | 230.0 | yes (0.96x) |"
    # Below static's cheapest point (it attains 80 % at 200): compared with that point, which attains more.
    lower = {"attained": 0.78, "cost": 210.0}
    row = {**row, "cells": [against_static(lower, curve)]}
    assert economy_row(row) == (
        "| conversation, 1x | 80 % | 78.0 % | 210.0 | below static (80.0 % at 200.0) | no (1.05x) |"
    )
