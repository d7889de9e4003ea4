"""Parameter values a Prefect UI user can type that passed validation and then took all memory, ended a run in a
traceback or deleted every cache: each is refused before the flow's body acts on it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from prefect.exceptions import ParameterTypeError

from flows.calibrate import calibrate
from flows.discover_models import discover_models
from flows.simulate import simulate
from flows.warm_caches import warm_caches

REQUIRED: dict[Any, dict[str, str]] = {simulate: {"cluster": "c", "trace": "t.csv"}}
"""The parameters a flow has no default for, so that only the one under test can be refused."""


@pytest.mark.parametrize(
    ("flow", "name", "value"),
    [
        (simulate, "interval_s", 1e10),  # all memory
        (simulate, "interval_s", 1e308),  # OverflowError
        (simulate, "interval_s", 1e-6),  # 9 GiB
        (discover_models, "resync_interval_s", 10**30),  # OverflowError
        (discover_models, "registry_timeout_s", float("inf")),
        (discover_models, "registry_timeout_s", 1e308),
        (warm_caches, "headroom_percent", float("inf")),
        (warm_caches, "headroom_percent", 1e308),
    ],
)
def test_a_value_out_of_range_is_refused_by_the_signature(flow: Any, name: str, value: object) -> None:
    flow.validate_parameters(REQUIRED.get(flow, {}))
    with pytest.raises(ParameterTypeError, match=name):
        flow.validate_parameters({**REQUIRED.get(flow, {}), name: value})


def test_values_in_range_pass() -> None:
    assert simulate.validate_parameters({**REQUIRED[simulate], "interval_s": 3600})["interval_s"] == 3600
    assert discover_models.validate_parameters({"resync_interval_s": 86400})["resync_interval_s"] == 86400
    assert warm_caches.validate_parameters({"gc_unused_after": "P7D"})["gc_unused_after"] == timedelta(days=7)


@pytest.mark.parametrize("too_short", [timedelta(seconds=-1), timedelta(0), timedelta(minutes=59)])
def test_garbage_collection_under_an_hour_is_refused_before_anything_is_read(too_short: timedelta) -> None:
    """0 or below (``PT0S``, ``-P1D`` in the UI) deleted every unmounted cache, and the run ended Completed. A
    duration's JSON schema has no minimum, so the flow refuses it first thing."""
    with pytest.raises(ValueError, match="gc_unused_after must be at least 1h"):
        warm_caches.fn(cluster="/nonexistent", gc_unused_after=too_short)


def test_a_calibrate_lookback_past_31_days_is_refused_before_anything_is_read() -> None:
    """100,000 years took all memory planning the range queries, before Prometheus was asked."""
    with pytest.raises(ValueError, match="lookback 100000y is longer than 31d"):
        calibrate.fn(cluster="/nonexistent", lookback="100000y")
