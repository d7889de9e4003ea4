"""The `modelplane` CLI: its command names and earlier aliases, the validation and CRD commands."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.prefect_db import trust_env

REPO = pathlib.Path(__file__).resolve().parents[1]


def laptop_environment() -> dict[str, str]:
    """This process's environment without a Prefect API or logging configuration: what a command sees on a
    laptop where nobody configured Prefect (the tests' trust store of one certificate kept: tests/prefect_db.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "PREFECT_LOGGING"))}
    return {**env, **trust_env()}


def test_validate_accepts_the_example_cluster() -> None:
    result = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(REPO / "deployments" / "examples")])
    assert result.exit_code == 0, result.output
    assert "0 invalid" in result.stdout and "VariantAutoscaling" in result.stdout


def test_validate_reports_each_bad_document_and_keeps_the_good(tmp_path: pathlib.Path) -> None:
    shutil.copy(REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml", tmp_path)
    bad = sorted((REPO / "tests" / "api" / "bad_inputs").glob("*.yaml"))[0]
    expected_path = next(
        line.split(":", 1)[1].strip() for line in bad.read_text().splitlines() if line.startswith("# expect-path:")
    )
    shutil.copy(bad, tmp_path / "bad.yaml")
    (tmp_path / "broken.yaml").write_text("a: [\n")
    result = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(tmp_path)], terminal_width=250)
    assert result.exit_code == 3  # ran, degraded: some resources are invalid (flows/exitcodes.py)
    assert "4 valid, 2 invalid" in result.stdout
    assert expected_path in result.stdout and "broken.yaml" in result.stdout


def test_validate_json_lists_every_resource_and_says_what_is_invalid(tmp_path: pathlib.Path) -> None:
    import json

    shutil.copy(REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml", tmp_path)
    (tmp_path / "broken.yaml").write_text("a: [\n")
    result = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(tmp_path), "--json"])
    assert result.exit_code == 3
    rows = json.loads(result.stdout)
    assert [r["result"] for r in rows].count("valid") == 4 and len(rows) == 5
    broken = next(r for r in rows if r["result"] != "valid")
    assert broken["source"] == "broken.yaml"
    assert [line for line in result.stderr.splitlines() if line.startswith("degraded: ")] == [
        f"degraded: broken.yaml: {broken['result']}"
    ]


def test_crds_prints_every_checked_in_crd() -> None:
    result = CliRunner().invoke(app, ["render-crds"])
    assert result.exit_code == 0
    printed = [d for d in yaml.safe_load_all(result.stdout) if d]
    on_disk = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "deployments" / "crds").glob("*.yaml"))]
    assert sorted(d["metadata"]["name"] for d in printed) == sorted(d["metadata"]["name"] for d in on_disk)
    assert {d["metadata"]["name"]: d for d in printed} == {d["metadata"]["name"]: d for d in on_disk}


def test_validate_checks_the_items_of_a_list(tmp_path: pathlib.Path) -> None:
    """A `kubectl get -o yaml` List is validated item by item, as the local backend loads it."""
    documents = [
        d for d in yaml.safe_load_all((REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml").read_text()) if d
    ]
    variant = next(d for d in documents if d["kind"] == "VariantAutoscaling")
    variant["spec"]["variantProfile"]["maxBatchSize"] = 0
    (tmp_path / "dump.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": documents, "metadata": {}})
    )
    result = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(tmp_path)], terminal_width=250)
    assert result.exit_code == 3, result.output
    assert "3 valid, 1 invalid" in result.stdout and "spec.variantProfile.maxBatchSize" in result.stdout
    assert "items[1]" in result.stdout


def test_unquoted_number_for_a_string_is_invalid_for_validate_and_optimize(tmp_path: pathlib.Path) -> None:
    from tasks.boundary import invalid_field

    documents = [
        d for d in yaml.safe_load_all((REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml").read_text()) if d
    ]
    variant = next(d for d in documents if d["kind"] == "VariantAutoscaling")
    variant["spec"]["variantCost"] = 40  # unquoted: the CRD wants a string
    (tmp_path / "va.yaml").write_text(yaml.safe_dump(variant))
    result = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(tmp_path)], terminal_width=250)
    assert result.exit_code == 3 and "spec.variantCost" in result.stdout
    # The optimizer reads VariantAutoscalings through the same boundary reader, which rejects it naming the field.
    rejected = invalid_field(variant)
    assert rejected is not None and rejected[0] == "spec.variantCost", "the optimizer accepted what validate rejects"


# Earlier command names -> the verb-noun command that replaced them (flows/cli/__init__.py).
ALIASES = {
    "crds": "render-crds",
    "validate": "validate-manifests",
    "image": "build-image",
    "worker-manifests": "render-worker-manifests",
    "deploy": "register-deployments",
    "serve": "serve-deployments",
    "aim": "reconcile-aim",
    "optimize": "optimize-allocation",
    "simulate": "simulate-policies",
    "tune": "tune-sizing",
    "calibrate": "calibrate-profiles",
}


def test_every_visible_command_is_verb_noun_and_flow_commands_carry_the_flow_name() -> None:
    import typer.main

    from flows.deployments import load_prefect_yaml

    commands = typer.main.get_command(app).commands
    visible = {name for name, command in commands.items() if not command.hidden}
    assert all("-" in name for name in visible), visible
    for flow in (entry["name"] for entry in load_prefect_yaml()["deployments"]):  # its name, or its name as a verb-noun
        assert flow in visible or ALIASES.get(flow, "").startswith(f"{flow}-"), flow
    assert not visible & set(ALIASES) and "cache" not in visible


def test_earlier_names_run_the_same_command_hidden_from_help() -> None:
    import typer.main

    def same(a: Any, b: Any) -> bool:
        """The same function: its docstring and parameters (typer wraps each registration's callback)."""
        return a.help == b.help and [p.opts for p in a.params] == [p.opts for p in b.params]

    commands = typer.main.get_command(app).commands
    for old, new in ALIASES.items():
        assert commands[old].hidden and not commands[new].hidden and same(commands[old], commands[new]), old
    fill = commands["cache"].commands["fill"]  # type: ignore[attr-defined]
    assert commands["cache"].hidden and same(fill, commands["fill-cache"])
    help_text = CliRunner().invoke(app, ["--help"], terminal_width=250).stdout
    listed = {line.split()[1] for line in help_text.splitlines() if line.startswith("│ ") and len(line.split()) > 1}
    assert "reconcile-aim" in listed and "fill-cache" in listed and not listed & {*ALIASES, "cache"}


def test_an_earlier_name_prints_what_the_new_one_prints() -> None:
    old, new = CliRunner().invoke(app, ["crds"]), CliRunner().invoke(app, ["render-crds"])
    assert old.exit_code == new.exit_code == 0 and old.stdout == new.stdout and "CustomResourceDefinition" in old.stdout
    image = CliRunner().invoke(app, ["image"])
    assert image.exit_code == 0 and image.stdout == CliRunner().invoke(app, ["build-image"]).stdout


def test_the_ephemeral_apis_database_logs_are_quieted_only_for_a_run_without_a_configured_api() -> None:
    """A local run points Prefect at its own logging configuration plus ``sqlalchemy: CRITICAL`` (the ephemeral
    API's pool traceback at exit reached stderr in CI), set when a run starts, not when the CLI is imported,
    and never over an API or a logging file the person configured."""
    probe = """
import json, os, yaml
from flows.cli.common import quiet_ephemeral_database_logs
imported = os.environ.get("PREFECT_LOGGING_SETTINGS_PATH")
quiet_ephemeral_database_logs()
path = os.environ.get("PREFECT_LOGGING_SETTINGS_PATH")
loggers = yaml.safe_load(open(path))["loggers"] if path and path.startswith("/") else {}
print(json.dumps({"imported": imported, "path": path, "loggers": loggers}))
"""
    base = laptop_environment()

    def run(**env: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-c", probe], env={**base, **env}, cwd=REPO, capture_output=True, text=True, check=True
        )
        return json.loads(done.stdout)

    local = run()
    assert local["imported"] is None and local["path"].endswith(".yml")
    assert local["loggers"]["sqlalchemy"] == {"level": "CRITICAL"} and "prefect" in local["loggers"]
    assert run(PREFECT_API_URL="http://127.0.0.1:1/api")["path"] is None
    assert run(PREFECT_LOGGING_SETTINGS_PATH="mine.yml")["path"] == "mine.yml"


def test_queued_events_reach_the_api_before_the_verdict(prefect_api: str) -> None:
    """`run_flow` sends what Prefect's background workers hold before the command prints its outcome: the
    workers holding an event emitted just before are stopped with empty queues when the call returns (nothing
    is left for the interpreter's exit, whose "Still processing items" warning came after the verdict), and the
    API stored the event."""
    import uuid

    from prefect.events import emit_event
    from prefect.events.worker import EventsWorker

    from flows.cli.common import send_queued_events_and_logs
    from tests.flows.artifacts import prefect_events

    resource = f"modelplane.test.{uuid.uuid4()}"
    assert emit_event("modelplane.test.verdict", resource={"prefect.resource.id": resource}) is not None
    running = list(EventsWorker._instances.values())  # noqa: SLF001  (the workers holding the event)
    assert running
    send_queued_events_and_logs()
    assert all(worker._stopped and worker._queue.empty() for worker in running)  # noqa: SLF001
    assert prefect_events("modelplane.test.verdict", resource) == ["modelplane.test.verdict"]


@pytest.mark.long_wall  # the ephemeral API's start: half a minute under load (tests/grouping.py)
def test_a_tracked_command_with_no_api_configured_runs_on_an_ephemeral_api_of_its_own(tmp_path: pathlib.Path) -> None:
    """``--track`` with no ``PREFECT_API_URL``: the flow command starts Prefect's ephemeral API for its run
    (on the Prefect home's database) and says nothing of it: the allocation, none of Prefect's temporary-server
    lines, and the command's own last line. (``./dev.sh demo`` starts one API for its commands instead.)"""
    from tests.prefect_db import seed_prefect_home

    cluster = tmp_path / "cluster"
    shutil.copytree(REPO / "deployments" / "examples", cluster)
    env = laptop_environment()
    env["PREFECT_HOME"] = str(seed_prefect_home(tmp_path / "prefect-home"))
    metrics = str(REPO / "deployments" / "example-metrics.yaml")
    command = ["optimize", "--cluster", str(cluster), "--metrics", metrics, "--dry-run", "--track"]
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", *command],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Modelplane allocation" in result.stdout
    output = result.stdout + result.stderr
    assert "docs.prefect.io" not in output and "temporary server" not in output.lower(), output
    assert "Traceback" not in output, output
    with contextlib.closing(sqlite3.connect(tmp_path / "prefect-home" / "prefect.db")) as db:
        runs = db.execute("SELECT flow.name FROM flow_run JOIN flow ON flow.id = flow_run.flow_id").fetchall()
    assert runs == [("optimize",)]  # the run's API was the ephemeral one, on this home's database


def test_a_local_dry_run_needs_no_prefect_api_and_does_not_import_prefect(tmp_path: pathlib.Path) -> None:
    """The laptop path: a dry run on a manifests directory with no ``PREFECT_API_URL`` runs the flow untracked
    (tasks/tracking.py): Prefect is never imported (``-X importtime`` lists every module the process loaded), no
    Prefect database is created, and the command prints the same allocation as a tracked run, with its
    first line saying the run is not recorded."""
    cluster = tmp_path / "cluster"
    shutil.copytree(REPO / "deployments" / "examples", cluster)
    env = {**laptop_environment(), "PREFECT_HOME": str(tmp_path / "prefect-home")}
    metrics = str(REPO / "deployments" / "example-metrics.yaml")
    command = ["optimize", "--cluster", str(cluster), "--metrics", metrics, "--dry-run"]
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "flows.cli", *command],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Modelplane allocation" in result.stdout
    imported = [line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]
    assert "engine.optimize.plan" in imported and not [m for m in imported if m.split(".")[0] == "prefect"]
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()
    said = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert said[0].startswith(f"optimize on {cluster}") and "not recorded in Prefect" in said[0], said
