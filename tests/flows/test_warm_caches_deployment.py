"""The warm-caches deployment: schedule slug, ENQUEUE (a requested cache is never dropped), a timeout below the interval, a typed UI form."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from flows.deployments import runner_deployments

PREFECT_YAML = pathlib.Path(__file__).resolve().parents[2] / "deployments" / "prefect.yaml"


def test_warm_caches_deployment_registers_with_a_typed_form(
    apply_deployments: Callable[[list[Any]], list[Any]],
) -> None:
    from flows.deployments import served_name

    [deployment] = [d for d in runner_deployments(PREFECT_YAML) if d.name == served_name("warm-caches")]
    [stored] = apply_deployments([deployment])
    assert [s.slug for s in stored.schedules] == ["warm-caches-every-10m"]
    assert stored.schedules[0].schedule.interval.total_seconds() == 600
    assert stored.global_concurrency_limit is not None and stored.global_concurrency_limit.limit == 1
    assert stored.concurrency_options.collision_strategy.value == "ENQUEUE"
    properties = stored.parameter_openapi_schema["properties"]
    assert properties["max_fill_attempts"]["type"] == "integer"
    assert properties["include_consumers"]["type"] == "boolean"
    assert "description" in properties["gc_unused_after"]
    from flows.image import IMAGE

    assert properties["image"]["default"] == IMAGE, "the fill Jobs run Modelplane's image of this version"
    from flows.warm_caches import warm_caches

    assert warm_caches.timeout_seconds is not None and warm_caches.timeout_seconds < 600
