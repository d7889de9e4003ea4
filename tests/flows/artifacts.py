"""Reading what a flow run published, from the Prefect API the test runs against."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.objects import Artifact
from prefect.client.schemas.sorting import ArtifactSort


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
