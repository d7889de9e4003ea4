"""A fill inside a Prefect flow run keeps one progress artifact up to date, ending at 100 %."""

from __future__ import annotations

import asyncio
import os
import pathlib

from prefect import flow

from tasks.downloader import fill_cache, prefect_progress


def test_fill_in_a_flow_reports_a_progress_artifact(prefect_harness, s3_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    bucket = s3_server.new_bucket()
    s3_server.client().put_object(Bucket=bucket, Key="m/model.bin", Body=os.urandom(3 * 1024 * 1024))

    @flow(name="fill-one-cache")
    def fill() -> str:
        manifest = fill_cache(
            f"s3://{bucket}/m", tmp_path, s3_server.credentials(), prefect_progress(f"s3://{bucket}/m")
        )
        return manifest.source

    state = fill(return_state=True)
    assert state.is_completed()
    flow_run_id = state.state_details.flow_run_id

    async def artifacts() -> list:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
            )

    found = asyncio.run(artifacts())
    progress = [a for a in found if a.type == "progress"]
    assert len(progress) == 1
    assert float(progress[0].data) == 100.0
    assert f"s3://{bucket}/m" in (progress[0].description or "")
