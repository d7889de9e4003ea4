"""Chaining and concurrency on the deployed platform (tests/flows/platform_deployed.py): every trigger fires
its deployment from an event emitted with the flows' own helper and passes the event's object as
parameters, and CANCEL_NEW cancels an overlapping run of an untriggered deployment.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from engine.api.registry import KINDS
from flows.deployments import triggers_of
from tasks.events import Subject
from tests.flows.platform_deployed import (
    ENTRIES,
    example_cluster,
    local_parameters,
    platform,  # noqa: F401  (the module's deployed platform)
    wait_until_idle,
)
from tests.flows.prefect_server import PrefectServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


TRIGGERS = [(entry, trigger) for entry in ENTRIES for trigger in triggers_of(entry)]


@pytest.mark.parametrize("entry,trigger", TRIGGERS, ids=[t.name for _, t in TRIGGERS])
def test_an_emitted_event_triggers_the_next_flow(
    platform: PrefectServer, entry: dict[str, Any], trigger: Any, tmp_path: pathlib.Path
) -> None:
    """The event the upstream flow emits (through tasks.events, in another process) starts this deployment
    with the event's object as parameters, and the chained run completes."""
    stored = platform.deployment(entry)
    platform.patch(
        f"/deployments/{stored['id']}",
        {"parameters": {**(entry.get("parameters") or {}), **local_parameters(entry, example_cluster(tmp_path))}},
    )
    automation = next(
        a
        for a in platform.post("/automations/filter", {})
        if a["name"] == trigger.name and a["actions"][0].get("deployment_id") == stored["id"]
    )
    # Another test's event may have started this deployment too (one event can trigger several deployments).
    wait_until_idle(platform, stored, entry)
    before = {r["id"] for r in platform.runs(stored["id"])}
    event_name = sorted(trigger.expect)[0]
    subject = subject_for(trigger.match.root["prefect.resource.id"], event_name)
    platform.emit(subject, event_name.rsplit(".", 1)[1])

    def started_by_this_trigger(
        run: dict[str, Any],
    ) -> bool:  # the automation's runs carry its id in their idempotency key
        return run["id"] not in before and (run.get("idempotency_key") or "").startswith(
            f"automation {automation['id']}"
        )

    run = wait_for(
        lambda: next((r for r in platform.runs(stored["id"]) if started_by_this_trigger(r)), None),
        180,  # the automation fires after the event is persisted: minutes on a loaded CI runner
        f"a run of {entry['name']} triggered by {event_name}",
    )
    rendered = json.dumps(run["parameters"])
    for name, template in trigger.parameters.items():
        assert name in run["parameters"], (name, run["parameters"])
        if "'modelplane.namespace'" in json.dumps(template):
            assert subject.namespace in json.dumps(run["parameters"][name]), rendered
        if "'modelplane.name'" in json.dumps(template):
            assert subject.name in json.dumps(run["parameters"][name]), rendered
    final = platform.wait_for_run(run["id"])
    assert final["state"]["type"] == "COMPLETED", platform.run_logs(run["id"])


def subject_for(resource_pattern: str, event_name: str) -> Subject:
    """A Subject of the kind the trigger matches (``modelplane.<family>.<kind>.*``), in the example namespace."""
    prefix = event_name.rsplit(".", 1)[0]
    for info in KINDS:
        subject = Subject(info.api_version, info.kind, "triggered-object", "llm-serving" if info.namespaced else None)
        if subject.event_name("x").rsplit(".", 1)[0] == prefix:
            assert resource_pattern.rstrip("*").rstrip(".") == prefix
            return subject
    raise AssertionError(f"no Modelplane kind emits {event_name}")


def test_cancel_new_cancels_an_overlapping_run(platform: PrefectServer, tmp_path: pathlib.Path) -> None:
    """watch-models (no triggers: CANCEL_NEW) holds its slot from submission to its end; a second run is cancelled.

    The watch is 3 s: the slot is held while the run's process starts too (seconds), far longer than the 1 s
    between the worker's polls, and the flow's 55 s timeout keeps its margin on a loaded CI machine (a 10 s
    watch once ended FlowRunTimeoutError there)."""
    entry = next(e for e in ENTRIES if e["name"] == "watch-models")
    assert entry["concurrency_limit"]["collision_strategy"] == "CANCEL_NEW"
    stored = platform.deployment(entry)
    parameters = {**local_parameters(entry, example_cluster(tmp_path)), "watch_seconds": 3}
    # A run chained by an earlier test's event would hold the one slot and cancel both runs below: switch
    # this deployment's automations (if any) off and let the slot free first.
    chained = [
        a
        for a in platform.post("/automations/filter", {})
        if a["enabled"] and any(action.get("deployment_id") == stored["id"] for action in a["actions"])
    ]
    for automation in chained:
        platform.patch(f"/automations/{automation['id']}", {"enabled": False})
    try:
        wait_until_idle(platform, stored, entry)
        wait_for(lambda: active_slots(platform, entry) == 0, 120, f"{entry['name']}'s concurrency slot released")
        first = platform.create_run(stored["id"], parameters)
        second = platform.create_run(stored["id"], parameters)
        states = {run["id"]: platform.wait_for_run(run["id"])["state"]["type"] for run in (first, second)}
    finally:
        for automation in chained:
            platform.patch(f"/automations/{automation['id']}", {"enabled": True})
    # Whichever the worker submits first takes the one slot; the other is cancelled, not queued.
    logs = {
        run_id: platform.run_logs(run_id) for run_id, state in states.items() if state not in ("CANCELLED", "COMPLETED")
    }
    assert sorted(states.values()) == ["CANCELLED", "COMPLETED"], (states, logs)


def active_slots(platform: PrefectServer, entry: dict[str, Any]) -> int:
    """Slots held on the deployment's concurrency limit (``concurrency_limit: 1`` in prefect.yaml)."""
    limit = platform.deployment(entry).get("global_concurrency_limit")
    assert limit is not None, f"the {entry['name']} deployment has no concurrency limit"
    return int(limit["active_slots"])
