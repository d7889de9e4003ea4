"""The attainment benchmark's verdicts (bench.attainment): each model judged against its own target."""

from __future__ import annotations

from typing import Any

from bench.attainment import per_model_verdict, table_row

GRANITE, LLAMA = "llm-serving/ibm/granite-13b", "llm-serving/meta/llama-3.1-8b"


def cell(attained: dict[str, float], ceilings: dict[str, float], target: float = 0.85) -> dict[str, Any]:
    """One seed's cell with two models of equal traffic, each with ``target``."""
    return {
        "attained": sum(attained.values()) / len(attained),
        "cost": 100.0,
        "ceiling": sum(ceilings.values()) / len(ceilings),
        "allowed": sum(min(target, c) for c in ceilings.values()) / len(ceilings),
        "by_model": attained,
        "model_ceilings": ceilings,
        "static_cost": 110.0,
        "static_cheapest": None,
    }


def test_models_that_miss_in_opposite_directions_do_not_track_though_their_mix_does() -> None:
    row = {
        "trace": "t",
        "tuning": True,
        "target": 0.85,
        "cells": [cell({GRANITE: 0.82, LLAMA: 0.88}, {GRANITE: 0.99, LLAMA: 0.99})],
    }
    assert per_model_verdict(row) == "no (3.0)"
    assert "| yes (0.0) | no (3.0) |" in table_row(row)


def test_a_model_whose_ceiling_does_not_allow_the_target_is_named_and_not_judged() -> None:
    cells = [
        cell({GRANITE: 0.80, LLAMA: 0.895}, {GRANITE: 0.864, LLAMA: 0.997}, 0.90),
        cell({GRANITE: 0.79, LLAMA: 0.91}, {GRANITE: 0.861, LLAMA: 0.997}, 0.90),
    ]
    row = {"trace": "t", "tuning": False, "target": 0.90, "cells": cells}
    assert per_model_verdict(row) == "yes (1.0; granite-13b's ceiling 86.1 %)"
    # The mix is judged against the target where the trace's ceiling (93 %) allows it, and says what the models'
    # own ceilings allow over all requests with each at its target or ceiling (88.2 % and 88.05 % by seed).
    assert "| no (5.2; the models' ceilings allow 88.1-88.2 %) |" in table_row(row)
    row["cells"] = [cell({GRANITE: 0.80}, {GRANITE: 0.864})]
    assert per_model_verdict(row) == "ceiling below target (granite-13b's ceiling 86.4 %)"
