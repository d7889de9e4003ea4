"""Build Prefect runner deployments from ``deployments/prefect.yaml``.

``modelplane serve`` and ``prefect deploy`` read the same file, so the served schedules, concurrency
limits and default parameters cannot drift from the registered deployments.
"""

from __future__ import annotations

import datetime
import pathlib
from typing import Any

import yaml
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import RunnerDeployment
from prefect.events import DeploymentEventTrigger
from prefect.flows import load_flow_from_entrypoint
from prefect.schedules import Cron, Interval, Schedule


def load_prefect_yaml(path: pathlib.Path) -> dict[str, Any]:
    """The parsed prefect.yaml."""
    return yaml.safe_load(path.read_text())


def schedules_of(config: dict[str, Any]) -> list[Schedule]:
    """The schedules of one deployment entry (interval or cron), each with its slug."""
    schedules: list[Schedule] = []
    for entry in config.get("schedules") or []:
        common = {"slug": entry.get("slug"), "active": entry.get("active", True), "timezone": entry.get("timezone")}
        if "interval" in entry:
            schedules.append(Interval(datetime.timedelta(seconds=float(entry["interval"])), **common))
        elif "cron" in entry:
            schedules.append(Cron(entry["cron"], **common))
        else:
            raise ValueError(f"deployment {config.get('name')!r}: a schedule needs 'interval' or 'cron': {entry}")
    return schedules


def concurrency_of(config: dict[str, Any]) -> ConcurrencyLimitConfig | None:
    """The deployment's concurrency limit and collision strategy."""
    limit = config.get("concurrency_limit")
    if limit is None:
        return None
    if isinstance(limit, int):
        return ConcurrencyLimitConfig(limit=limit)
    return ConcurrencyLimitConfig(
        limit=limit["limit"],
        collision_strategy=ConcurrencyLimitStrategy(limit.get("collision_strategy", "ENQUEUE")),
    )


def triggers_of(config: dict[str, Any]) -> list[DeploymentEventTrigger]:
    """The deployment's event triggers (prefect.yaml ``triggers``: ``type: event``, ``match``, ``expect``):
    a flow's events start the next lifecycle; the schedules still reconcile everything."""
    triggers = []
    for entry in config.get("triggers") or []:
        fields = {k: v for k, v in entry.items() if k != "type"}
        if entry.get("type", "event") != "event":
            raise ValueError(f"deployment {config.get('name')!r}: only event triggers are supported: {entry}")
        triggers.append(DeploymentEventTrigger(**fields))
    return triggers


def runner_deployments(path: pathlib.Path) -> list[RunnerDeployment]:
    """One runner deployment per entry of prefect.yaml, with the flow loaded from its entrypoint."""
    root = path.resolve().parents[1]
    deployments = []
    for config in load_prefect_yaml(path)["deployments"]:
        file, _, function = config["entrypoint"].partition(":")
        flow = load_flow_from_entrypoint(f"{root / file}:{function}", use_placeholder_flow=False)
        deployments.append(
            flow.to_deployment(
                name=config["name"],
                description=config.get("description"),
                tags=config.get("tags"),
                schedules=schedules_of(config),
                concurrency_limit=concurrency_of(config),
                parameters=config.get("parameters") or {},
                enforce_parameter_schema=config.get("enforce_parameter_schema", True),
                triggers=triggers_of(config) or None,
            )
        )
    return deployments
