"""Flow tests run against this worker's Prefect API (``prefect_api``), shared by the session."""

from __future__ import annotations

import asyncio
import pathlib
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prefect.events.clients import AssertingEventsClient
from prefect.events.worker import EventsWorker

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "examples"


@pytest.fixture(scope="session")
def prefect_harness(prefect_api: str) -> None:
    """A Prefect API for every flow run of the session: this worker's (``prefect_api`` in tests/conftest.py,
    Prefect's ephemeral server on the worker's already migrated database; ``prefect_test_harness`` migrated a
    new database of its own beside the one every command of the worker uses)."""


@pytest.fixture()
def asserting_events_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[EventsWorker]:
    """An events worker whose client keeps every event the test's flows emit (``worker._client.events``), as
    Prefect's fixture of the same name does; defined here because importing ``prefect.testing.fixtures`` imports
    the whole Prefect server (3 s of CPU in every pytest-xdist worker that collects the module)."""
    worker = EventsWorker.instance(AssertingEventsClient)
    monkeypatch.setattr(EventsWorker, "instance", lambda *_args, **_kwargs: worker)
    try:
        yield worker
    finally:
        worker.drain()


@pytest.fixture()
def apply_deployments(prefect_harness: None) -> Iterator[Callable[[list[Any]], list[Any]]]:
    """Apply runner deployments to this worker's API and return them as stored; removed at the end of the test,
    with the automations their triggers made.

    Left on the API, those automations fired on the events of every later test of the worker: Prefect's actions
    service created runs of '-local' deployments that nothing serves (seen under a 24 s request in a full run)."""
    from prefect.client.orchestration import get_client

    applied: list[Any] = []

    async def apply(deployments: list[Any]) -> list[Any]:
        async with get_client() as client:
            stored = []
            for deployment in deployments:
                deployment_id = await deployment.apply()
                applied.append(deployment_id)
                stored.append(await client.read_deployment(deployment_id))
            return stored

    async def remove() -> list[Any]:
        async with get_client() as client:
            for deployment_id in applied:
                await client.delete_resource_owned_automations(f"prefect.deployment.{deployment_id}")
                await client.delete_deployment(deployment_id)
            return await client.read_automations()

    yield lambda deployments: asyncio.run(apply(deployments))
    left = {automation.name for automation in asyncio.run(remove())}
    assert not left, f"automations left on the worker's API: {sorted(left)}"


@pytest.fixture()
def example_cluster(tmp_path: pathlib.Path) -> pathlib.Path:
    """A private copy of the bundled example cluster (the optimize flow writes status into it)."""
    target = tmp_path / "cluster"
    shutil.copytree(EXAMPLES, target)
    return target


@pytest.fixture()
def example_metrics() -> pathlib.Path:
    """The bundled metrics file of the example cluster."""
    return REPO / "deployments" / "example-metrics.yaml"


from tests.flows.prefect_server import prefect_server  # noqa: E402,F401  (the real server of the platform tests)
