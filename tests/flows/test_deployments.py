"""deployments/prefect.yaml deploys: every entrypoint loads, and registering it on a Prefect server keeps
the schedule slug, the concurrency limit with CANCEL_NEW, the typed parameter schema and the timeout."""

from __future__ import annotations

import asyncio
import pathlib

import yaml

from flows.deployments import runner_deployments

REPO = pathlib.Path(__file__).resolve().parents[2]
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"


def test_prefect_yaml_declares_scheduled_single_concurrency_deployments() -> None:
    config = yaml.safe_load(PREFECT_YAML.read_text())
    names = [d["name"] for d in config["deployments"]]
    assert "optimize" in names
    for deployment in config["deployments"]:
        for schedule in deployment.get("schedules") or []:
            assert schedule.get("slug"), f"{deployment['name']}: every schedule needs a slug"
        if deployment.get("schedules"):
            assert deployment["concurrency_limit"] == {"limit": 1, "collision_strategy": "CANCEL_NEW"}


def test_flow_timeout_is_below_the_schedule_interval() -> None:
    config = yaml.safe_load(PREFECT_YAML.read_text())
    by_name = {d.name: d for d in runner_deployments(PREFECT_YAML)}
    for entry in config["deployments"]:
        flow_file, _, function = entry["entrypoint"].partition(":")
        from prefect.flows import load_flow_from_entrypoint

        flow = load_flow_from_entrypoint(f"{REPO / flow_file}:{function}", use_placeholder_flow=False)
        for schedule in entry.get("schedules") or []:
            assert flow.timeout_seconds is not None and flow.timeout_seconds < float(schedule["interval"])
        assert entry["name"] in by_name


def test_deployments_register_on_a_prefect_server(prefect_harness: None) -> None:
    from prefect.client.orchestration import get_client

    deployments = runner_deployments(PREFECT_YAML)

    async def register_and_read() -> list:
        ids = [await deployment.apply() for deployment in deployments]
        async with get_client() as client:
            return [await client.read_deployment(i) for i in ids]

    stored = {d.name: d for d in asyncio.run(register_and_read())}
    optimize = stored["optimize"]
    assert [s.slug for s in optimize.schedules] == ["optimize-every-60s"]
    assert optimize.schedules[0].schedule.interval.total_seconds() == 60
    assert optimize.global_concurrency_limit is not None and optimize.global_concurrency_limit.limit == 1
    assert optimize.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    schema = optimize.parameter_openapi_schema
    properties = schema["properties"]
    for name in ("namespaces", "config_namespace", "prometheus_url", "dry_run", "cluster", "metrics_file"):
        assert name in properties, name
    assert properties["dry_run"]["type"] == "boolean"
    assert properties["config_namespace"]["default"] == "modelplane-system"
    assert "description" in properties["prometheus_url"]
    assert optimize.parameters == {"config_namespace": "modelplane-system", "dry_run": False}
    # the constraints the UI form and the API enforce are in the schema Prefect stores
    window = properties["rate_window"]
    patterns = [window.get("pattern")] + [alt.get("pattern") for alt in window.get("anyOf", [])]
    assert r"^[0-9]+(ms|s|m|h)$" in patterns
    assert properties["solver_time_limit_s"].get("exclusiveMinimum") == 0
    assert properties["status_heartbeat_s"].get("minimum") == 0
