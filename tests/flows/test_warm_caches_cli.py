"""`modelplane warm-caches`: the table, JSON output, and one clear line for a bad argument."""

from __future__ import annotations

import pathlib

import yaml
from typer.testing import CliRunner

from flows.cli import app


def test_cli_reports_each_cache_and_rejects_a_bad_duration(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    (cluster / "cache.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "aim.silogen.ai/v1alpha1",
                "kind": "ModelCache",
                "metadata": {"name": "bad", "namespace": "ns"},
                "spec": {"sourceUri": "pvc://models/llama", "size": "1Gi"},
            }
        )
    )

    # One flow run per process under CliRunner (Prefect's log handlers keep the first run's streams);
    # the JSON output is covered by the demo test, which runs the CLI as a subprocess.
    table = CliRunner().invoke(app, ["warm-caches", "--cluster", str(cluster)])
    assert table.exit_code == 3, table.output  # ran, degraded: a cache Failed
    assert "InvalidSource" in table.output and "1 Failed" in table.output
    assert "mounted directly" in table.output

    bad = CliRunner().invoke(app, ["warm-caches", "--cluster", str(cluster), "--gc-unused-after", "soon"])
    assert bad.exit_code == 2 and "--gc-unused-after" in bad.output and "Traceback" not in bad.output
    missing = CliRunner().invoke(app, ["warm-caches", "--cluster", str(tmp_path / "absent")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_garbage_collection_shorter_than_an_hour_is_refused_and_no_cache_is_deleted(
    prefect_harness: None, tmp_path: pathlib.Path
) -> None:
    """``gc_unused_after`` of 0 or below (``PT0S``, ``-P1D`` in the Prefect UI) collected every unmounted cache, those
    made seconds before included, and the run ended Completed. The flow's parameter, the command's option and the
    engine refuse anything under an hour; the cluster keeps its caches."""
    import shutil
    from datetime import UTC, datetime, timedelta

    import pytest

    from engine.api.aim import ModelCache
    from engine.caches.gc import MIN_UNUSED_AFTER, gc_verdict
    from flows.cli.caches import GC_MIN_UNUSED_AFTER_S
    from flows.warm_caches import warm_caches
    from tasks.clients.cluster import LocalCluster

    assert MIN_UNUSED_AFTER == timedelta(seconds=GC_MIN_UNUSED_AFTER_S)
    cluster = tmp_path / "cluster"
    shutil.copytree(pathlib.Path(__file__).resolve().parents[2] / "deployments" / "examples", cluster)
    before = [c["metadata"]["name"] for c in LocalCluster(cluster).list("aim.silogen.ai/v1alpha1", "ModelCache")]
    assert len(before) == 2
    for too_short in (timedelta(seconds=-1), timedelta(0), timedelta(minutes=59)):
        state = warm_caches(cluster=str(cluster), gc_unused_after=too_short, return_state=True)
        assert state.is_failed() and "gc_unused_after" in str(state.message), state.message
    after = [c["metadata"]["name"] for c in LocalCluster(cluster).list("aim.silogen.ai/v1alpha1", "ModelCache")]
    assert after == before
    refused = CliRunner().invoke(app, ["warm-caches", "--cluster", str(cluster), "--gc-unused-after", "59m"])
    assert refused.exit_code == 2 and "--gc-unused-after" in refused.output and "Traceback" not in refused.output
    cache = ModelCache.model_validate(
        {
            "metadata": {"name": "c", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"sourceUri": "hf://org/m"},
        }
    )
    with pytest.raises(ValueError, match="at least 1:00:00"):
        gc_verdict(cache, set(), timedelta(0), datetime.now(UTC))
