"""Flow runs on the deployed platform (tests/flows/platform_deployed.py), all on one platform:

- every trigger starts its deployment from an event emitted with the flows' own helper (in another process),
  passes the event's object as parameters, and the triggered run completes against a copy of the example
  cluster; optimize's events reach the server related to its run;
- a run of each flow that no trigger test completes, created directly, completes on the process worker;
- CANCEL_NEW cancels an overlapping run of an untriggered deployment (watch-models), and the run that completes
  announces the example's Kthena Model (the event that triggers rollout-models).

Every automation is switched off for the module and each trigger test switches on only the one it tests, so one
emitted event makes one run: with all of them on, each run's events started runs of other deployments, a chain
that cost a flow-run process each and made every test wait for the previous chain to end. That a flow emits
the event a trigger matches is each flow's own test (and optimize's and watch-models' here); chained runs
across deployments under load are tests/flows/test_platform_runs.py's.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from engine.api.registry import KINDS
from flows.deployments import triggers_of
from tasks.clients import events
from tasks.clients.cluster import ObjectRef
from tests.flows.platform_deployed import (
    ENTRIES,
    automations_of,
    example_cluster,
    local_parameters,
    platform,  # noqa: F401  (the module's deployed platform)
    run_outcome,
    run_when_idle,
    switch_automations,
    wait_until_idle,
)
from tests.flows.prefect_server import PrefectServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


TRIGGERS = [(entry, trigger) for entry in ENTRIES for trigger in triggers_of(entry)]
# A triggered run of each of these completes below, and watch-models' run completes in the CANCEL_NEW test.
COMPLETED_ELSEWHERE = {entry["name"] for entry, _ in TRIGGERS} | {"watch-models"}
DIRECT = [entry for entry in ENTRIES if entry["name"] not in COMPLETED_ELSEWHERE]


@pytest.fixture(scope="module")
def quiet_platform(platform: PrefectServer) -> PrefectServer:  # noqa: F811  (the imported fixture)
    """The module's platform with every automation switched off: a test switches on the one it needs."""
    switch_automations(platform, platform.post("/automations/filter", {}), enabled=False)
    return platform


def test_every_flow_takes_a_cluster_parameter(quiet_platform: PrefectServer) -> None:
    for entry in ENTRIES:
        stored = quiet_platform.deployment(entry)
        assert "cluster" in stored["parameter_openapi_schema"]["properties"], entry["name"]


@pytest.mark.parametrize("entry,trigger", TRIGGERS, ids=[t.name for _, t in TRIGGERS])
def test_an_emitted_event_triggers_the_next_flow(
    quiet_platform: PrefectServer, entry: dict[str, Any], trigger: Any, tmp_path: pathlib.Path
) -> None:
    """The event the upstream flow emits (through tasks.clients.events, in another process) starts this deployment
    with the event's object as parameters, and the chained run completes."""
    platform = quiet_platform
    stored = platform.deployment(entry)
    platform.patch(
        f"/deployments/{stored['id']}",
        {"parameters": {**(entry.get("parameters") or {}), **local_parameters(entry, example_cluster(tmp_path))}},
    )
    automation = next(a for a in automations_of(platform, stored["id"]) if a["name"] == trigger.name)
    wait_until_idle(platform, stored["id"])
    before = {r["id"] for r in platform.runs(stored["id"])}
    event_name = sorted(trigger.expect)[0]
    subject = subject_for(trigger.match.root["prefect.resource.id"], event_name)

    def started_by_this_trigger(
        run: dict[str, Any],
    ) -> bool:  # the automation's runs carry its id in their idempotency key
        return run["id"] not in before and (run.get("idempotency_key") or "").startswith(
            f"automation {automation['id']}"
        )

    switch_automations(platform, [automation], enabled=True)
    try:
        platform.emit(subject, event_name.rsplit(".", 1)[1])
        run = wait_for(
            lambda: next((r for r in platform.runs(stored["id"]) if started_by_this_trigger(r)), None),
            180,  # the automation fires after the event is persisted: minutes on a loaded CI runner
            f"a run of {entry['name']} triggered by {event_name}",
        )
        final = platform.wait_for_run(run["id"])
    finally:
        switch_automations(platform, [automation], enabled=False)
    rendered = json.dumps(run["parameters"])
    for name, template in trigger.parameters.items():
        assert name in run["parameters"], (name, run["parameters"])
        if "'modelplane.namespace'" in json.dumps(template):
            assert subject.namespace in json.dumps(run["parameters"][name]), rendered
        if "'modelplane.name'" in json.dumps(template):
            assert subject.name in json.dumps(run["parameters"][name]), rendered
    assert run_outcome(final["state"]) == "COMPLETED", platform.run_logs(run["id"])
    if entry["name"] == "optimize":
        assert_optimize_events(platform, run["id"])


def subject_for(resource_pattern: str, event_name: str) -> ObjectRef:
    """The object of the kind the trigger matches (``modelplane.<family>.<kind>.*``), in the example namespace."""
    prefix = event_name.rsplit(".", 1)[0]
    for info in KINDS:
        subject = ObjectRef(info.api_version, info.kind, "triggered-object", "llm-serving" if info.namespaced else None)
        if events.event_name(subject, "x").rsplit(".", 1)[0] == prefix:
            assert resource_pattern.rstrip("*").rstrip(".") == prefix
            return subject
    raise AssertionError(f"no Modelplane kind emits {event_name}")


def assert_optimize_events(platform: PrefectServer, run_id: str) -> None:
    """The example cycle (namespace llm-serving) scales two variants and a binding target: one event each, related
    to the run. Events reach the server asynchronously: wait until all three are there (or fail with what came)."""
    expected_resources = {
        f"modelplane.llmd.variantautoscaling.llm-serving.{name}" for name in ("llama-3-1-8b-h100", "granite-13b-a100")
    }
    expected_events = {"modelplane.llmd.variantautoscaling.scaled", "modelplane.kthena.binding.scaled"}

    def all_events() -> list[dict[str, Any]]:
        events = platform.events(prefix="modelplane.", related=f"prefect.flow-run.{run_id}")
        resources = {e["resource"]["prefect.resource.id"] for e in events}
        return events if resources >= expected_resources and {e["event"] for e in events} >= expected_events else []

    wait_for(all_events, 30, f"optimize's events for {sorted(expected_resources)} and {sorted(expected_events)}")


@pytest.mark.parametrize("entry", DIRECT, ids=[e["name"] for e in DIRECT])
def test_a_run_of_each_untriggered_flow_completes_on_a_local_cluster(
    quiet_platform: PrefectServer, entry: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """A run created on the deployment, picked up by the process worker, completes against a copy of the
    example cluster (the triggered flows' runs complete in the trigger tests above)."""
    stored = quiet_platform.deployment(entry)
    final = run_when_idle(quiet_platform, stored["id"], local_parameters(entry, example_cluster(tmp_path)))
    assert run_outcome(final["state"]) == "COMPLETED", quiet_platform.run_logs(final["id"])


def test_cancel_new_cancels_an_overlapping_run(quiet_platform: PrefectServer, tmp_path: pathlib.Path) -> None:
    """watch-models (no triggers: CANCEL_NEW) holds its slot from submission to its end; a second run is
    cancelled. The run that completes announces the example's Kthena Model, which was never rolled out (the
    event that triggers rollout-models), related to the run.

    The watch is 3 s: the slot is held while the run's process starts too (seconds), far longer than the 1 s
    between the worker's polls, and the flow's 55 s timeout keeps its margin on a loaded CI machine (a 10 s
    watch once ended FlowRunTimeoutError there)."""
    platform = quiet_platform
    entry = next(e for e in ENTRIES if e["name"] == "watch-models")
    assert entry["concurrency_limit"]["collision_strategy"] == "CANCEL_NEW"
    stored = platform.deployment(entry)
    parameters = {**local_parameters(entry, example_cluster(tmp_path)), "watch_seconds": 3}
    wait_until_idle(platform, stored["id"])
    wait_for(lambda: active_slots(platform, entry) == 0, 120, f"{entry['name']}'s concurrency slot released")
    first = platform.create_run(stored["id"], parameters)
    second = platform.create_run(stored["id"], parameters)
    states = {run["id"]: run_outcome(platform.wait_for_run(run["id"])["state"]) for run in (first, second)}
    # Whichever the worker submits first takes the one slot; the other is cancelled, not queued.
    logs = {
        run_id: platform.run_logs(run_id) for run_id, state in states.items() if state not in ("CANCELLED", "COMPLETED")
    }
    assert sorted(states.values()) == ["CANCELLED", "COMPLETED"], (states, logs)
    completed = next(run_id for run_id, state in states.items() if state == "COMPLETED")
    events = wait_for(
        lambda: platform.events(prefix="modelplane.kthena.model.changed", related=f"prefect.flow-run.{completed}"),
        30,
        "watch-models' events",
    )
    assert {e["resource"]["prefect.resource.id"] for e in events} == {
        "modelplane.kthena.model.llm-serving.deepseek-r1-distill-qwen-7b"
    }
    assert events[0]["resource"]["modelplane.name"] == "deepseek-r1-distill-qwen-7b"


def active_slots(platform: PrefectServer, entry: dict[str, Any]) -> int:
    """Slots held on the deployment's concurrency limit (``concurrency_limit: 1`` in prefect.yaml)."""
    limit = platform.deployment(entry).get("global_concurrency_limit")
    assert limit is not None, f"the {entry['name']} deployment has no concurrency limit"
    return int(limit["active_slots"])
