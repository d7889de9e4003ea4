"""The hourly attainment benchmark (bench.hourly_attainment): later hours judged, the first left out."""

from __future__ import annotations

from typing import Any

from bench.hourly_attainment import summary, table_row
from bench.simulate import _burst_shape
from engine.simulate.bursts import BURSTY_VARIANTS

GRANITE, LLAMA = "llm-serving/ibm/granite-13b", "llm-serving/meta/llama-3.1-8b"
CEILINGS = {GRANITE: 0.86, LLAMA: 0.99}


def hour(granite: float, llama: float, cost: float = 100.0) -> dict[str, Any]:
    """One hour of one seed, both models with equal traffic."""
    return {
        "attained": (granite + llama) / 2,
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
    row = {"variant": "tune-a", "tuning": True, "target": 0.80, "seeds": seeds}
    # Over all requests the later hours are 80.5, 82.5, 79.5 and 80.25 %: three within 1.5 points. Each model:
    # granite 0.0, -2.0, -1.0, +0.5 points (3 within); llama +1.0, +7.0, 0.0, 0.0 (3 within). Cost: 300, then 100.
    assert table_row(row, 3) == (
        "| bursty tune-a | tuning | 80 % | 70.0 % | 80.0 % | 81.4 % | 3/4 | granite-13b 3/4, -0.6; "
        "llama-3.1-8b 3/4, +2.0 | 300.0 | 100.0 |"
    )
    # At 90 % granite-13b's ceiling (86 %) does not allow the target: only llama-3.1-8b is judged per model.
    row = {**row, "target": 0.90}
    assert "| llama-3.1-8b 0/4, -8.0 |" in table_row(row, 3)
    held = {**row, "tuning": False, "target": 0.80}
    assert summary([{**row, "target": 0.80}, held]) == (
        "After the first hour: tuning variants: 3 of 4 later hours within 1.5 points over all requests (mean "
        "distance 0.9 points), 6 of 8 model-hours (mean distance 1.4); held-out variants: 3 of 4 later hours within "
        "1.5 points over all requests (mean distance 0.9 points), 6 of 8 model-hours (mean distance 1.4)."
    )


def test_a_variant_drawn_for_longer_keeps_every_parameter_but_its_length() -> None:
    longer = _burst_shape("held-long-silences", 180)
    assert longer is not None and longer.duration_min == 180
    assert {**longer.as_dict(), "duration_min": 57} == BURSTY_VARIANTS["held-long-silences"].as_dict()
    assert _burst_shape("tune-a", None) is BURSTY_VARIANTS["tune-a"]
    assert _burst_shape(None, 180) is None
