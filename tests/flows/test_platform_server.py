"""The platform against the real thing: `prefect server start` on 127.0.0.1 (random port, temporary home),
`modelplane register-deployments --pool-type process` (work pool + the documented `prefect deploy`), and a process worker.

One server, pool and worker for the module. Every entry of deployments/prefect.yaml is checked: registered
with its schedule, constraints and triggers; a run of each flow against a copy of the example cluster
completes; every trigger fires its deployment from an event emitted with the flows' own helper and passes
the event's object as parameters; CANCEL_NEW cancels an overlapping run of an untriggered deployment. Last, Debian's chromium
(headless, through selenium) finds every optimize parameter with its description on the UI's run form.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from engine.api.registry import KINDS
from flows.deployments import PROCESS_POOL, deployment_entries, kubernetes_pool_template, triggers_of
from flows.image import IMAGE
from tasks.events import Subject
from tests.flows.platform_support import LOCAL_RUN_PARAMETERS
from tests.flows.prefect_server import PrefectServer

REPO = pathlib.Path(__file__).resolve().parents[2]
ENTRIES = deployment_entries()
IDS = [e["name"] for e in ENTRIES]
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def platform(prefect_server: PrefectServer, tmp_path_factory: pytest.TempPathFactory) -> PrefectServer:
    """The server with every deployment registered by `modelplane register-deployments --pool-type process` and a worker."""
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "register-deployments", "--pool-type", "process"],
        cwd=REPO,
        env=prefect_server.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"work pool '{PROCESS_POOL}' (process): created" in result.stderr
    prefect_server.start_worker(PROCESS_POOL)
    return prefect_server


def local_parameters(entry: dict[str, Any], cluster: pathlib.Path) -> dict[str, Any]:
    """Parameters that point a flow at a private copy of the example cluster."""
    return {"cluster": str(cluster), **LOCAL_RUN_PARAMETERS.get(entry["name"], {})}


def example_cluster(tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / "cluster"
    shutil.copytree(REPO / "deployments" / "examples", target)
    return target


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_deployment_is_registered_as_prefect_yaml_says(platform: PrefectServer, entry: dict[str, Any]) -> None:
    stored = platform.deployment(entry)
    assert stored["work_pool_name"] == PROCESS_POOL
    assert stored["description"] and set(entry["tags"]) <= set(stored["tags"])
    assert stored["enforce_parameter_schema"] is True
    assert stored["pull_steps"] in (None, [])
    assert [s["slug"] for s in stored["schedules"]] == [s["slug"] for s in entry.get("schedules") or []]
    for stored_schedule, declared in zip(stored["schedules"], entry.get("schedules") or []):
        assert stored_schedule["schedule"]["interval"] == float(declared["interval"])
    if entry.get("schedules"):
        assert stored["global_concurrency_limit"]["limit"] == 1
        strategy = "ENQUEUE" if entry.get("triggers") else "CANCEL_NEW"  # chained work waits (test_platform_runs.py)
        assert stored["concurrency_options"]["collision_strategy"] == strategy
    automations = platform.post("/automations/filter", {})
    owned = {a["name"] for a in automations if a["actions"] and a["actions"][0].get("deployment_id") == stored["id"]}
    assert owned == {t.name for t in triggers_of(entry)}


def test_server_rejects_parameters_outside_the_schema(platform: PrefectServer) -> None:
    """What the UI form relies on: the stored schema has the constraints and the server enforces them."""
    stored = platform.deployment(next(e for e in ENTRIES if e["name"] == "optimize"))
    properties = stored["parameter_openapi_schema"]["properties"]
    patterns = [
        branch.get("pattern") for branch in [properties["rate_window"], *properties["rate_window"].get("anyOf", [])]
    ]
    assert any(patterns) and properties["solver_time_limit_s"]["exclusiveMinimum"] == 0
    for bad in ({"rate_window": "abc"}, {"solver_time_limit_s": -5}):
        response = platform.request("POST", f"/deployments/{stored['id']}/create_flow_run", {"parameters": bad})
        assert response.status_code in (409, 422), (bad, response.status_code, response.text)
        assert list(bad)[0] in response.text


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


def wait_until_idle(platform: PrefectServer, stored: dict[str, Any], entry: dict[str, Any]) -> None:
    """Let a run an earlier test's event chained into this deployment end first: with CANCEL_NEW it would
    otherwise cancel the run the test starts."""
    wait_for(
        lambda: all((r.get("state") or {}).get("type") in TERMINAL for r in platform.runs(stored["id"])),
        120,
        f"{entry['name']} idle",
    )


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
        60,
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
    """watch-models (no triggers: CANCEL_NEW) holds its slot for its 10 s watch; a second run is cancelled."""
    entry = next(e for e in ENTRIES if e["name"] == "watch-models")
    assert entry["concurrency_limit"]["collision_strategy"] == "CANCEL_NEW"
    stored = platform.deployment(entry)
    parameters = {**local_parameters(entry, example_cluster(tmp_path)), "watch_seconds": 10}
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
    assert sorted(states.values()) == ["CANCELLED", "COMPLETED"], states


def active_slots(platform: PrefectServer, entry: dict[str, Any]) -> int:
    """Slots held on the deployment's concurrency limit (``concurrency_limit: 1`` in prefect.yaml)."""
    limit = platform.deployment(entry).get("global_concurrency_limit")
    assert limit is not None, f"the {entry['name']} deployment has no concurrency limit"
    return int(limit["active_slots"])


def test_ui_run_form_shows_every_parameter_with_its_description(
    platform: PrefectServer, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian's chromium, headless, opens the optimize deployment's run form in the Prefect UI of this server
    (screenshot: <tmp_path>/optimize-run-form.png)."""
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must not look for a driver online: Debian's chromedriver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    stored = platform.deployment(next(e for e in ENTRIES if e["name"] == "optimize"))
    properties = stored["parameter_openapi_schema"]["properties"]
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--window-size=1400,4000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    try:
        driver.set_page_load_timeout(60)
        driver.get(f"{platform.url}/deployments/deployment/{stored['id']}/run")

        def page_text() -> str:
            return driver.find_element(By.TAG_NAME, "body").text

        def form_complete() -> bool:
            text = page_text()
            return all(
                name in text and " ".join(prop["description"].split()[:6]) in " ".join(text.split())
                for name, prop in properties.items()
            )

        try:
            wait_for(form_complete, 60, "every parameter and its description on the run form")
        finally:
            driver.save_screenshot(str(tmp_path / "optimize-run-form.png"))
        text = " ".join(page_text().split())
        for name, prop in properties.items():
            assert name in text
            assert " ".join(prop["description"].split()) in text, name
    finally:
        driver.quit()


def test_served_deployments_run_beside_the_pool_without_colliding(
    platform: PrefectServer, tmp_path: pathlib.Path
) -> None:
    """`modelplane serve-deployments` on the same server registers '<name>-local' deployments and runs their runs itself;
    the work-pool deployments keep their pool."""
    platform.spawn("serve", [sys.executable, "-m", "flows.cli", "serve-deployments"])
    entry = next(e for e in ENTRIES if e["name"] == "optimize")
    served = wait_for(
        lambda: platform.find_deployment(entry, "optimize-local"), 120, "the served optimize-local deployment"
    )
    assert served["work_pool_name"] is None and served["id"] != platform.deployment(entry)["id"]
    assert platform.deployment(entry)["work_pool_name"] == PROCESS_POOL
    run = platform.create_run(served["id"], local_parameters(entry, example_cluster(tmp_path)))
    final = platform.wait_for_run(run["id"])
    assert final["state"]["type"] == "COMPLETED", platform.run_logs(run["id"])
    assert run["id"] in platform.log("serve") or final["work_pool_name"] is None


def test_modelplane_deploy_creates_the_kubernetes_pool_from_the_template(platform: PrefectServer) -> None:
    """The default `modelplane register-deployments`: the Kubernetes pool from deployments/work-pool-template.json, then
    every deployment registered on it with its job variables (runs last: it moves the deployments)."""
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "register-deployments"],
        cwd=REPO,
        env=platform.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "work pool 'modelplane-kubernetes' (kubernetes): created" in result.stderr
    pool = platform.get("/work_pools/modelplane-kubernetes")
    assert pool["type"] == "kubernetes"
    # deployments/work-pool-template.json with the image default filled in (flows/image.py names the tag)
    assert pool["base_job_template"] == kubernetes_pool_template()
    assert pool["base_job_template"]["variables"]["properties"]["image"]["default"] == IMAGE
    for entry in ENTRIES:
        stored = platform.deployment(entry)
        assert stored["work_pool_name"] == "modelplane-kubernetes"
        assert stored["job_variables"] == entry["work_pool"]["job_variables"]
    again = subprocess.run(
        [sys.executable, "-m", "flows.cli", "register-deployments"],
        cwd=REPO,
        env=platform.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0 and "(kubernetes): exists" in again.stderr, again.stderr
