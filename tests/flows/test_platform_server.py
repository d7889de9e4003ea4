"""The platform against the real thing (tests/flows/platform_deployed.py): every entry of
deployments/prefect.yaml is registered with its schedule, constraints and triggers; the server enforces the
parameter schema; Debian's chromium (headless, through selenium) finds every optimize parameter with its
description on the UI's run form; served deployments run beside the pool; `modelplane deploy` creates the
Kubernetes pool from the template. Runs of each flow, triggers and CANCEL_NEW are in test_platform_flow_runs.py
(each module has its own server, so they run in parallel).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from flows.deployments import PROCESS_POOL, kubernetes_pool_template, triggers_of
from flows.image import IMAGE
from tests.flows.platform_deployed import (
    ENTRIES,
    IDS,
    REPO,
    example_cluster,
    local_parameters,
    platform,  # noqa: F401  (the module's deployed platform)
    run_outcome,
)
from tests.flows.prefect_server import PrefectServer
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
    assert run_outcome(final["state"]) == "COMPLETED", platform.run_logs(run["id"])
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
