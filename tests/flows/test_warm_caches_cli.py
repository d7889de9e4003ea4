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
