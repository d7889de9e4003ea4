"""Reading what a flow run published, from the Prefect API the test runs against."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.objects import Artifact
from prefect.client.schemas.sorting import ArtifactSort

from tests.waiting import poll_intervals


def newest_artifact(key: str) -> Artifact:
    """The artifact most recently created under `key`.

    Every flow test of a pytest worker shares one API, so earlier tests' versions of the key are there too;
    the API's default order is by id (random UUIDs), so only an explicit newest-first sort finds this run's.
    """

    async def read() -> list[Artifact]:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                sort=ArtifactSort.CREATED_DESC,
                limit=1,
            )

    found = asyncio.run(read())
    assert found, f"no {key} artifact"
    return found[0]


def table_rows(artifact: Artifact) -> list[dict[str, Any]]:
    """A table artifact's rows (the API returns them as JSON text or already decoded)."""
    return json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data


def prefect_events(prefix: str, resource_id: str) -> list[str]:
    """Names of the Prefect events about ``resource_id`` the test server stored (waits for delivery: up to 20 s
    for the first one, then ``[]``)."""
    import time

    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all()
    event_filter = EventFilter(event=EventNameFilter(prefix=[prefix]), resource=EventResourceFilter(id=[resource_id]))
    deadline = time.monotonic() + 20
    names: list[str] = []
    pauses = poll_intervals(0.5)  # less often as the wait goes on: a poll costs the API CPU
    while time.monotonic() < deadline:
        with get_client(sync_client=True) as client:
            names = [e.event for e in client.read_events(event_filter, limit=50).events]
        if names:
            break
        time.sleep(min(next(pauses), max(deadline - time.monotonic(), 0)))
    return names
