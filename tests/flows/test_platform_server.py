"""The platform against the real thing (tests/flows/platform_deployed.py), one deployed platform for the module:

- every entry of deployments/prefect.yaml is registered with its schedule, constraints and triggers; the server
  enforces the parameter schema; Debian's chromium (headless, through selenium) finds every optimize parameter with
  its description on the UI's run form, and the simulate report and the optimize tables whole;
- every trigger starts its deployment from an event emitted with the flows' own helper (in another process),
  passes the event's object as parameters, and the triggered run completes against a copy of the example
  cluster; optimize's events reach the server related to its run;
- a run of each flow that no trigger test completes, created directly, completes on the process worker;
- CANCEL_NEW cancels an overlapping run of an untriggered deployment (watch-models), and the run that completes
  announces the example's Kthena Model (the event that triggers rollout-models);
- served deployments run beside the pool; `modelplane register-deployments` creates the Kubernetes pool from the
  template (last: it moves every deployment to that pool).

The flow-run tests switch every automation off (``quiet_platform``) and each trigger test switches on only the one
it tests, so one emitted event makes one run: with all of them on, each run's events started runs of other
deployments, a chain that cost a flow-run process each and made every test wait for the previous chain to end. That
a flow emits the event a trigger matches is each flow's own test (and optimize's and watch-models' here); chained
runs across deployments under load are tests/flows/test_platform_runs.py's (a server of its own, in parallel).

The registration, UI and flow-run tests were two modules with a server each: one server, one registration and one
process worker for both save about 30 s of CPU (a server start, `register-deployments` and a worker start) and the
tests run in file order, so the test that moves the deployments to the Kubernetes pool stays last.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from engine.api.registry import KINDS
from flows.deployments import PROCESS_POOL, kubernetes_pool_template, triggers_of
from flows.image import IMAGE
from tasks.clients import events
from tasks.clients.cluster import ObjectRef
from tests.flows.platform_deployed import (
    ENTRIES,
    IDS,
    REPO,
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
from tests.servers.processes import stop_process
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_deployment_is_registered_as_prefect_yaml_says(platform: PrefectServer, entry: dict[str, Any]) -> None:
    stored = platform.deployment(entry)
    assert stored["work_pool_name"] == PROCESS_POOL
    assert stored["description"] and set(entry["tags"]) <= set(stored["tags"])
    assert stored["enforce_parameter_schema"] is True
    assert stored["pull_steps"] in (None, [])
    assert "PROMETHEUS_URL" not in stored["job_variables"]["env"], "a process pool's runs inherit the worker's"
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


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Debian's chromium, headless, through Debian's chromedriver (selenium), at a laptop's window width."""
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must not look for a driver online: Debian's chromedriver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        f"--window-size={WINDOW_WIDTH},4000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


WINDOW_WIDTH = 1400
"""The browser window's width in the UI tests (a laptop's screen)."""


def page_text(driver: Any) -> str:
    """The visible text of the page, whitespace folded."""
    from selenium.webdriver.common.by import By

    return " ".join(driver.find_element(By.TAG_NAME, "body").text.split())


def open_page(driver: Any, url: str, ready: Callable[[], bool], what: str, screenshot: pathlib.Path) -> None:
    """Open ``url`` and wait until ``ready``; the page is saved as ``screenshot`` whatever happens."""
    driver.get(url)
    try:
        wait_for(ready, 60, what)
    finally:
        driver.save_screenshot(str(screenshot))


def test_ui_run_form_shows_every_parameter_with_its_description(
    platform: PrefectServer, tmp_path: pathlib.Path, browser: Any
) -> None:
    """The optimize deployment's run form in the Prefect UI of this server (screenshot:
    <tmp_path>/optimize-run-form.png): every parameter with its description, and a parameter with a default is a
    plain field holding it, not a str/None toggle ('Property is type "None"')."""
    stored = platform.deployment(next(e for e in ENTRIES if e["name"] == "optimize"))
    properties = stored["parameter_openapi_schema"]["properties"]

    def form_complete() -> bool:
        text = page_text(browser)
        return all(
            name in text and " ".join(prop["description"].split()[:6]) in text for name, prop in properties.items()
        )

    url = f"{platform.url}/deployments/deployment/{stored['id']}/run"
    open_page(browser, url, form_complete, "every parameter on the run form", tmp_path / "optimize-run-form.png")
    text = page_text(browser)
    for name, prop in properties.items():
        assert name in text
        assert " ".join(prop["description"].split()) in text, name
    fields = browser.execute_script(
        "return Array.from(document.querySelectorAll('.schema-form-property'))"
        ".map(e => [e.querySelector('.schema-form-property__header')?.innerText ?? '', e.innerText])"
    )
    assert len(fields) >= len(properties), fields
    toggles = [header for header, body in fields if 'Property is type "None"' in body or "\nNone\n" in f"\n{body}\n"]
    assert not toggles, f"parameters with a default shown as a str/None toggle: {toggles}"
    assert 'Property is type "None"' not in text


def test_ui_shows_the_simulate_report_and_the_allocation_tables_whole(
    platform: PrefectServer, tmp_path: pathlib.Path, browser: Any
) -> None:
    """The artifacts a tracked simulate and optimize publish, in the UI (screenshots: <tmp_path>/simulate-report.png,
    <tmp_path>/optimize-allocation.png, <tmp_path>/optimize-reasons.png): the simulate report shows its settings
    as a table of readable values and its plots inline (nothing only on the run's pod); each optimize table fits the
    pane without a horizontal scroll."""
    cluster = example_cluster(tmp_path)
    trace = REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"
    for command in (
        ["simulate-policies", "--cluster", str(cluster), "--trace", str(trace), "--duration", "120"]
        + ["-p", "modelplane", "-p", "static-peak", "--no-frontier", "--output", str(tmp_path / "report")],
        ["optimize-allocation", "--cluster", str(cluster), "--dry-run"]
        + ["--metrics-file", str(REPO / "deployments" / "example-metrics.yaml")],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "flows.cli", *command], cwd=REPO, env=platform.env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr
    shutil.rmtree(tmp_path / "report")  # the run's pod is gone: the artifact must not need its files

    def artifact_url(key: str) -> str:
        (artifact,) = platform.post("/artifacts/filter", {"artifacts": {"key": {"any_": [key]}}, "limit": 1})
        return f"{platform.url}/artifacts/artifact/{artifact['id']}"

    def settings_table() -> list[list[str]]:
        return browser.execute_script(
            "const t = Array.from(document.querySelectorAll('table')).find("
            "  t => t.querySelector('th')?.innerText.trim() === 'setting');"
            "return t ? Array.from(t.querySelectorAll('tr')).map("
            "  r => Array.from(r.querySelectorAll('th,td')).map(c => c.innerText.trim())) : [];"
        )

    open_page(
        browser,
        artifact_url("simulate-report"),
        lambda: bool(settings_table()),
        "the simulate report's settings table",
        tmp_path / "simulate-report.png",
    )
    rows = dict(row for row in settings_table() if len(row) == 2)
    assert rows.get("setting") == "value" and "None" not in rows.values(), rows
    assert rows.get("trace") == trace.name and rows.get("wave_floor") == "1.0" and rows.get("start") == "static", rows
    plots = browser.execute_script(
        "return Array.from(document.images).filter(i => i.src.startsWith('data:image/png') && i.naturalWidth > 0).length"
    )
    assert plots >= 3, "the report's plots are in the artifact itself"

    overflowing = (  # the widest of the page's tables, and what scrolls sideways around any of them
        "const tables = Array.from(document.querySelectorAll('table')); if (!tables.length) return null;"
        "const wide = []; for (const table of tables) for (let e = table; e && e !== document.body; e = e.parentElement)"
        "  if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible') wide.push(e.className);"
        "const right = Math.max(...tables.map(t => t.getBoundingClientRect().right));"
        "return {tables: tables.length, right: right, width: window.innerWidth, scrolled: wide};"
    )
    fit = browser.execute_script(overflowing)  # the settings, the comparison and the per-model attainment
    assert fit and fit["tables"] >= 3 and fit["right"] <= fit["width"] and not fit["scrolled"], ("simulate", fit)
    for key in ("optimize-allocation", "optimize-reasons"):
        open_page(
            browser,
            artifact_url(key),
            lambda: "granite-13b-a100" in page_text(browser),
            f"the {key} table",
            tmp_path / f"{key}.png",
        )
        fit = browser.execute_script(overflowing)
        assert fit and fit["right"] <= fit["width"] and not fit["scrolled"], (key, fit)


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


def test_served_deployments_run_beside_the_pool_without_colliding(
    platform: PrefectServer, tmp_path: pathlib.Path
) -> None:
    """`modelplane serve-deployments` on the same server registers '<name>-local' deployments and runs their runs itself;
    the work-pool deployments keep their pool. After the flow-run tests: the served deployments' triggers would
    start '-local' runs on their events. The serving process is stopped at the end (it polled the server for the
    rest of the module)."""
    serve = platform.spawn("serve", [sys.executable, "-m", "flows.cli", "serve-deployments"])
    try:
        entry = next(e for e in ENTRIES if e["name"] == "optimize")
        served = wait_for(
            lambda: platform.find_deployment(entry, "optimize-local"), 120, "the served optimize-local deployment"
        )
        assert served["work_pool_name"] is None and served["id"] != platform.deployment(entry)["id"]
        assert platform.deployment(entry)["work_pool_name"] == PROCESS_POOL
        run = platform.create_run(served["id"], local_parameters(entry, example_cluster(tmp_path)))
        final = platform.wait_for_run(run["id"])
        assert run_outcome(final["state"]) == "COMPLETED", platform.run_logs(run["id"])
        assert run["id"] in platform.log("serve") or final["work_pool_name"] is None
    finally:
        stop_process(serve, timeout=15)


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
