"""A run of each flow of deployments/prefect.yaml, created on the deployed platform
(tests/flows/platform_deployed.py) and picked up by the process worker, completes against a copy of the
example cluster; optimize's and watch-models' events reach the server related to their run.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.flows.platform_deployed import (
    ENTRIES,
    IDS,
    example_cluster,
    local_parameters,
    platform,  # noqa: F401  (the module's deployed platform)
    wait_until_idle,
)
from tests.flows.prefect_server import PrefectServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_a_run_of_each_flow_completes_on_a_local_cluster(
    platform: PrefectServer, entry: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    stored = platform.deployment(entry)
    assert "cluster" in stored["parameter_openapi_schema"]["properties"], "every flow takes a `cluster` parameter"
    parameters = local_parameters(entry, example_cluster(tmp_path))
    # An earlier flow's event may chain into this deployment (discover-models -> resolve-templates, ...): with
    # CANCEL_NEW such a run, if its trigger fires just after we looked, cancels ours; then run again once idle.
    for _attempt in range(2):
        wait_until_idle(platform, stored, entry)
        run = platform.create_run(stored["id"], parameters)
        final = platform.wait_for_run(run["id"])
        if final["state"]["type"] != "CANCELLED":
            break
    assert final["state"]["type"] == "COMPLETED", platform.run_logs(run["id"])
    if entry["name"] == "optimize":
        # The example cycle scales two variants and a binding target: one event each, related to this run.
        # Events reach the server asynchronously: wait until all three are there (or fail with what came).
        expected_resources = {
            f"modelplane.llmd.variantautoscaling.llm-serving.{name}"
            for name in ("llama-3-1-8b-h100", "granite-13b-a100")
        }
        expected_events = {"modelplane.llmd.variantautoscaling.scaled", "modelplane.kthena.binding.scaled"}

        def all_events() -> list[dict[str, Any]]:
            events = platform.events(prefix="modelplane.", related=f"prefect.flow-run.{run['id']}")
            resources = {e["resource"]["prefect.resource.id"] for e in events}
            return events if resources >= expected_resources and {e["event"] for e in events} >= expected_events else []

        wait_for(all_events, 30, f"optimize's events for {sorted(expected_resources)} and {sorted(expected_events)}")
    if entry["name"] == "watch-models":
        # The example's Kthena Model was never rolled out: the watch announces it (the event that triggers rollout-models).
        events = wait_for(
            lambda: platform.events(prefix="modelplane.kthena.model.changed", related=f"prefect.flow-run.{run['id']}"),
            30,
            "watch-models' events",
        )
        assert {e["resource"]["prefect.resource.id"] for e in events} == {
            "modelplane.kthena.model.llm-serving.deepseek-r1-distill-qwen-7b"
        }
        assert events[0]["resource"]["modelplane.name"] == "deepseek-r1-distill-qwen-7b"
