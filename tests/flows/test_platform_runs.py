"""Run states, `cluster`, parameter rules and chained work against the real thing: `prefect server start`,
`modelplane register-deployments --pool-type process` and a process worker (issue 19).

- a degraded run (what exits 3 on the CLI) ends `Failed` named `Degraded` with the reasons as its message,
  emits `prefect.flow-run.Degraded`, and an automation matching that event fires;
- `cluster=""` on a deployment run never writes under the worker's working directory (the checkout): with
  nothing configured the run fails with one line, with `MODELPLANE_CLUSTER` as a job variable it runs there;
- the server refuses every bad value of tests/flows/test_deployments.py's BAD_VALUES, naming the field, and
  so does `prefect deployment run -p`;
- N = 4 chained events across M = 2 namespaces: every AIMService and Model of those namespaces is reconciled and no
  run is cancelled (the triggered deployments ENQUEUE). The time it takes is printed (docs/platform.md).
"""

from __future__ import annotations

import copy
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from flows.deployments import deployment_entries
from flows.exitcodes import DEGRADED_STATE
from tasks.clients.cluster import LocalCluster, ObjectRef
from tests.flows.platform_deployed import (
    deploy_on_process_pool,
    example_cluster,
    run_outcome,
    run_when_idle,
    switch_automations,
)
from tests.flows.platform_support import LOCAL_RUN_PARAMETERS
from tests.flows.prefect_server import PrefectServer
from tests.flows.test_deployments import BAD_VALUES, REQUIRED_SAMPLES
from tests.waiting import wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
ENTRIES = {entry["name"]: entry for entry in deployment_entries()}
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
AIM = "aim.silogen.ai/v1alpha1"
KTHENA = "registry.volcano.sh/v1alpha1"
# How long a queued (ENQUEUE) run waits before asking for the slot again; Prefect's default is 30 s.
SLOT_WAIT_S = 5

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """A server (queued runs retry for the slot every SLOT_WAIT_S), the deployments on a process pool, a worker."""
    server = PrefectServer(tmp_path_factory.mktemp("prefect-home"))
    server.env["PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS"] = str(SLOT_WAIT_S)
    server.env.pop("MODELPLANE_CLUSTER", None)
    try:
        server.start()
        deploy_on_process_pool(server)
        yield server
    finally:
        server.stop()


def run_deployment(
    platform: PrefectServer, name: str, parameters: dict[str, Any], job_variables: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Create a run of deployment ``name`` and wait for its final state."""
    stored = platform.deployment(ENTRIES[name])
    run = platform.post(
        f"/deployments/{stored['id']}/create_flow_run", {"parameters": parameters, "job_variables": job_variables or {}}
    )
    return platform.wait_for_run(run["id"])


# ------------------------------------------------------------------------------------------ run states


@pytest.mark.parametrize("name", ["calibrate", "serve-openmodel"])
def test_a_degraded_run_is_failed_named_degraded_with_its_reasons(
    platform: PrefectServer, name: str, tmp_path: pathlib.Path
) -> None:
    """calibrate with no metrics (every variant MetricsUnavailable) and serve-openmodel waiting for its cache:
    the CLI exits 3 on both; the run's state says Degraded and why, of type Failed (the UI colours by type: red,
    not the green of a clean run), and an automation can match it."""
    automation = platform.post(
        "/automations/",
        {
            "name": f"degraded-{name}",
            "trigger": {
                "type": "event",
                "posture": "Reactive",
                "threshold": 1,
                "within": 0,
                "match": {"prefect.resource.id": "prefect.flow-run.*"},
                "expect": [f"prefect.flow-run.{DEGRADED_STATE}"],
            },
            "actions": [{"type": "do-nothing"}],
        },
    )
    parameters = {"cluster": str(example_cluster(tmp_path)), **LOCAL_RUN_PARAMETERS.get(name, {})}
    final = run_deployment(platform, name, parameters)
    state = final["state"]
    assert state["type"] == "FAILED" and state["name"] == DEGRADED_STATE, (state, platform.run_logs(final["id"]))
    assert state["message"].startswith("DEGRADED (")
    expected = "MetricsUnavailable" if name == "calibrate" else "WaitingForCache"
    assert expected in state["message"], state["message"]

    def degraded_event() -> list[dict[str, Any]]:
        return platform.post(
            "/events/filter",
            {
                "filter": {
                    "event": {"name": [f"prefect.flow-run.{DEGRADED_STATE}"]},
                    "resource": {"id": [f"prefect.flow-run.{final['id']}"]},
                },
                "limit": 5,
            },
        )["events"]

    wait_for(degraded_event, 60, "the prefect.flow-run.Degraded event")

    def automation_fired() -> list[dict[str, Any]]:
        return platform.post(
            "/events/filter",
            {
                "filter": {
                    "event": {"name": ["prefect.automation.triggered"]},
                    "resource": {"id": [f"prefect.automation.{automation['id']}"]},
                },
                "limit": 5,
            },
        )["events"]

    wait_for(automation_fired, 60, "the automation matching prefect.flow-run.Degraded")
    platform.request("DELETE", f"/automations/{automation['id']}")


def test_a_clean_run_is_plainly_completed(platform: PrefectServer, tmp_path: pathlib.Path) -> None:
    parameters = {"cluster": str(example_cluster(tmp_path)), **LOCAL_RUN_PARAMETERS["optimize"], "dry_run": True}
    state = run_deployment(platform, "optimize", parameters)["state"]
    assert (state["type"], state["name"]) == ("COMPLETED", "Completed"), state


# ------------------------------------------------------------------------------------------ cluster


def checkout_changes() -> str:
    """What differs in the checkout the process worker runs flows in (tracked changes and new files)."""
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", "deployments", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_empty_cluster_never_writes_under_the_working_directory(
    platform: PrefectServer, tmp_path: pathlib.Path
) -> None:
    """The process worker's working directory is this checkout (deployments/examples is a cluster a local
    run would rewrite). `cluster=""` with nothing configured fails saying what to set; with MODELPLANE_CLUSTER
    as a job variable the same run works on that directory. The checkout is untouched either way."""
    before = checkout_changes()
    parameters = {"cluster": "", **LOCAL_RUN_PARAMETERS["optimize"]}
    nothing = {"env": {"HOME": str(tmp_path / "home"), "KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""}}
    failed = run_deployment(platform, "optimize", parameters, nothing)
    assert failed["state"]["type"] == "FAILED", failed["state"]
    logs = platform.run_logs(failed["id"])
    assert "no cluster configured" in logs and "MODELPLANE_CLUSTER" in logs, logs[-3000:]
    cluster = example_cluster(tmp_path)
    configured = run_deployment(platform, "optimize", parameters, {"env": {"MODELPLANE_CLUSTER": str(cluster)}})
    assert run_outcome(configured["state"]) == "COMPLETED", platform.run_logs(configured["id"])
    assert (cluster / ".modelplane-state.json").exists(), "the run wrote its status into MODELPLANE_CLUSTER"
    assert checkout_changes() == before, "a run wrote under the worker's working directory"
    assert not (REPO / ".modelplane-state.json").exists() and not (REPO / ".modelplane-events.yaml").exists()


# ------------------------------------------------------------------------------------------ parameters


def test_the_server_refuses_every_bad_value_naming_the_field(platform: PrefectServer) -> None:
    for name, bad_values in BAD_VALUES.items():
        stored = platform.deployment(ENTRIES[name])
        for bad in bad_values:
            response = platform.request(
                "POST",
                f"/deployments/{stored['id']}/create_flow_run",
                {"parameters": {**REQUIRED_SAMPLES.get(name, {}), **bad}},
            )
            assert response.status_code in (409, 422), (name, bad, response.status_code, response.text)
            assert list(bad)[0] in response.text, (name, bad, response.text)


def test_prefect_deployment_run_refuses_a_bad_value_naming_the_field(platform: PrefectServer) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefect",
            "deployment",
            "run",
            "discover-models/discover-models",
            "-p",
            "resync_interval_s=30",
        ],
        cwd=REPO,
        env=platform.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0, result.stdout
    assert "resync_interval_s" in result.stdout + result.stderr, result.stdout + result.stderr


# ------------------------------------------------------------------------------------------ chained work


def add_namespace_copy(cluster: pathlib.Path, namespace: str) -> None:
    """Copy the example's AIM objects (config, template, service, cache) and its Kthena Model into ``namespace``."""
    documents = [
        doc
        for path in ("40-aim.yaml", "20-kthena.yaml")
        for doc in yaml.safe_load_all((cluster / path).read_text())
        if doc
    ]
    wanted = {"AIMNamespaceConfig", "AIMServiceTemplate", "AIMService", "ModelCache", "Model"}
    copies: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    for doc in documents:
        if doc["kind"] in wanted and doc["metadata"].get("namespace") == "llm-serving":
            doc = copy.deepcopy(doc)
            doc["metadata"]["namespace"] = namespace
            copies.append(doc)
    (cluster / f"90-{namespace}.yaml").write_text(yaml.safe_dump_all(copies, sort_keys=False))


def failed_actions(platform: PrefectServer, ids: dict[str, str]) -> dict[str, int]:
    """How many run-deployment actions of each deployment's automations failed (``prefect.automation.action.failed``)."""
    owner = {
        a["id"]: name
        for a in platform.post("/automations/filter", {})
        for name, deployment_id in ids.items()
        if any(action.get("deployment_id") == deployment_id for action in a["actions"])
    }
    events = platform.post(
        "/events/filter", {"filter": {"event": {"name": ["prefect.automation.action.failed"]}}, "limit": 50}
    )["events"]
    counts: dict[str, int] = {}
    for event in events:
        name = owner.get(event["resource"]["prefect.resource.id"].removeprefix("prefect.automation."))
        if name:
            counts[name] = counts.get(name, 0) + 1
    return counts


def not_submitted(run: dict[str, Any]) -> bool:
    """A run the worker reported CRASHED because the server's SQLite answered 503 while it submitted the run
    (Prefect's "Failed to submit flow run to infrastructure"): the flow never started, like a lost action."""
    state = run.get("state") or {}
    message = state.get("message") or ""
    return (
        state.get("type") == "CRASHED" and "Failed to submit flow run to infrastructure" in message and "503" in message
    )


def reconciled(cluster: pathlib.Path, namespaces: list[str]) -> dict[str, bool]:
    """For every AIMService and Model in ``namespaces``: whether its status observed its generation."""
    view = LocalCluster(str(cluster))
    result = {}
    for api_version, kind in ((AIM, "AIMService"), (KTHENA, "Model")):
        for obj in view.list(api_version, kind):
            meta = obj["metadata"]
            if meta.get("namespace") in namespaces:
                observed = (obj.get("status") or {}).get("observedGeneration")
                result[f"{kind} {meta['namespace']}/{meta['name']}"] = observed is not None and observed == meta.get(
                    "generation"
                )
    return result


def test_chained_events_across_namespaces_reconcile_everything_and_cancel_nothing(
    platform: PrefectServer, tmp_path: pathlib.Path
) -> None:
    """N = 4 events across M = 2 namespaces, emitted back to back as resolve-templates and warm-caches would:
    a template.available per namespace (rollout-services) and a cache.available per namespace (rollout-services
    and rollout-models). Every AIMService and Model of both namespaces ends reconciled; no run is cancelled."""
    cluster = example_cluster(tmp_path)
    namespaces = ["llm-serving", "team-a"]
    for namespace in namespaces[1:]:
        add_namespace_copy(cluster, namespace)
    initial = reconciled(cluster, namespaces)  # llm-serving: 2 AIMServices and a Model; each copy: 1 and 1
    assert len(initial) == 3 + 2 and not any(initial.values()), initial
    chained = {"rollout-services", "rollout-models"}
    ids = {name: platform.deployment(ENTRIES[name])["id"] for name in chained}
    for name in chained:
        platform.patch(
            f"/deployments/{ids[name]}",
            {"parameters": {**(ENTRIES[name].get("parameters") or {}), "cluster": str(cluster)}},
        )
    # Only the automations under test: the chained runs' own events must not start other deployments here.
    automations = platform.post("/automations/filter", {})
    others = [
        a for a in automations if a["enabled"] and not any(x.get("deployment_id") in ids.values() for x in a["actions"])
    ]
    switch_automations(platform, others, enabled=False)
    before = {run["id"] for name in chained for run in platform.runs(ids[name])}
    started = time.monotonic()
    try:
        platform.emit_all(
            [
                (ObjectRef(AIM, kind, f"chained-{kind.lower()}", namespace), "available")
                for namespace in namespaces
                for kind in ("AIMServiceTemplate", "ModelCache")
            ],
        )
        expected_runs = {"rollout-services": 2 * len(namespaces), "rollout-models": len(namespaces)}

        def all_runs_final() -> dict[str, list[dict[str, Any]]] | None:
            runs = {name: [r for r in platform.runs(ids[name]) if r["id"] not in before] for name in chained}
            # On a loaded machine the server's SQLite may answer its own automation's run-deployment 503 and
            # the run is never created (prefect.automation.action.failed; nothing retries it, the schedule
            # catches up): count those, they are not runs our concurrency settings dropped.
            lost = failed_actions(platform, ids)
            if any(len(runs[name]) + lost.get(name, 0) < expected_runs[name] for name in chained):
                return None
            if any((r.get("state") or {}).get("type") not in TERMINAL for rs in runs.values() for r in rs):
                return None
            return runs

        try:
            runs = wait_for(all_runs_final, 1200, f"{expected_runs} chained runs to finish")
        except AssertionError:
            seen = {
                name: [
                    (r["state"]["name"], r["parameters"].get("namespaces"))
                    for r in platform.runs(ids[name])
                    if r["id"] not in before
                ]
                for name in chained
            }
            raise AssertionError(f"runs so far {seen}; failed actions {failed_actions(platform, ids)}") from None
        elapsed = time.monotonic() - started
        lost = failed_actions(platform, ids)
        unsubmitted = {name: [r for r in rs if not_submitted(r)] for name, rs in runs.items()}
        for name in chained:  # what the deployment's schedule does next (this server's scheduler is off)
            runs[name] = [r for r in runs[name] if r not in unsubmitted[name]]
            if lost.get(name) or unsubmitted[name]:
                # One run over the namespaces once the chained runs have ended, as the schedule would start.
                catch_up = run_when_idle(platform, ids[name], {"namespaces": namespaces}, 3, 300, 600)
                runs[name].append(catch_up)
    finally:
        switch_automations(platform, others, enabled=True)
        for name in chained:
            platform.patch(f"/deployments/{ids[name]}", {"parameters": ENTRIES[name].get("parameters") or {}})
    states = {name: sorted(run_outcome(r["state"]) for r in rs) for name, rs in runs.items()}
    assert all(state == "COMPLETED" for s in states.values() for state in s), states
    covered = {
        name: sorted({ns for r in rs for ns in r["parameters"].get("namespaces") or []}) for name, rs in runs.items()
    }
    outcome = reconciled(cluster, namespaces)
    print(
        f"\nchained: {sum(len(rs) for rs in runs.values())} runs from {2 * len(namespaces)} events over {len(namespaces)} namespaces "
        f"({states}), 0 cancelled, in {elapsed:.0f} s (slot wait {SLOT_WAIT_S} s); server 503 on run-deployment: {lost}, "
        f"on submission: { {name: len(rs) for name, rs in unsubmitted.items()} }"
    )
    assert all(outcome.values()), outcome
    if not lost:
        assert covered == {name: namespaces for name in chained}, covered
