"""The `modelplane` CLI: its command names and earlier aliases, the validation and CRD commands."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
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


@pytest.mark.usefixtures("yaml_reader")
def test_validate_accepts_the_example_cluster() -> None:
    result = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(REPO / "deployments" / "examples")])
    assert result.exit_code == 0, result.output
    assert "0 invalid" in result.stdout and "VariantAutoscaling" in result.stdout


@pytest.mark.usefixtures("yaml_reader")
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


@pytest.mark.usefixtures("yaml_reader")
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


@pytest.mark.usefixtures("yaml_reader")
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


@pytest.mark.usefixtures("yaml_reader")
def test_validate_json_names_each_refused_document_with_its_file_and_line(tmp_path: pathlib.Path) -> None:
    """Every way a document is refused while it is read comes out in the --json list word for word: a key written
    twice (no anchor in the document), a recursive alias, a document that is no mapping; the valid neighbours
    stay valid, and the list is what ``json.dumps(..., indent=2)`` writes."""
    (tmp_path / "a.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, namespace: default}\n"
        '---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: "twice"}\ndata:\n  k: "1"\n  k: "2"\n'
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: &m {name: loop, self: *m}\n"
        "---\n- a list\n---\njust a string\n"
    )
    result = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(tmp_path), "--json"])
    assert result.exit_code == 3
    expected = [
        {"source": "a.yaml#0", "kind": "ConfigMap", "namespace": "default", "name": "ok", "result": "valid"},
        {"source": "a.yaml#3", "kind": "", "namespace": "", "name": "", "result": ": a manifest must be a mapping"},
        {"source": "a.yaml#4", "kind": "", "namespace": "", "name": "", "result": ": a manifest must be a mapping"},
        {
            "source": "a.yaml",
            "kind": "",
            "namespace": "",
            "name": "",
            "result": "a.yaml: document at line 5: invalid YAML at line 10, column 3: duplicate key 'k' (the last "
            "value would silently win)",
        },
        {
            "source": "a.yaml",
            "kind": "",
            "namespace": "",
            "name": "",
            "result": "a.yaml: document at line 12: invalid YAML at line 14, column 11: recursive alias: a node "
            "refers to itself (not representable as JSON)",
        },
    ]
    assert result.stdout == json.dumps(expected, indent=2) + "\n"


def test_the_json_list_is_written_as_json_dumps_writes_it() -> None:
    from flows.cli.manifests import _json_list

    columns = ("source", "kind", "namespace", "name", "result")
    strings = ('a "quoted" \\ path', "é ü 😀 \u2028", "tab\tnew\nline\x00", "", "%s %d {}")
    rows = [(*strings, False), ("x", "y", "z", "w", "valid", True)]
    odd: list[Any] = [("a", 5, None, 1.5, "x", True)]  # no strings: json.dumps writes them
    for listed in (rows, odd, []):
        assert _json_list(listed) == json.dumps([dict(zip(columns, row)) for row in listed], indent=2) + "\n"


@pytest.mark.usefixtures("yaml_reader")
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


def visible_commands() -> dict[str, Any]:
    import typer.main

    return {name: c for name, c in typer.main.get_command(app).commands.items() if not c.hidden}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(visible_commands()))
def test_help_reads_as_text_for_a_person(name: str) -> None:
    """Every command's help names values as a person would (PATH, N, DURATION, choices), never a Python type
    (``<bool>``, ``<list[str]>``, ``<int range> [x>=1]``), no source file path, no line break inside a sentence."""
    result = CliRunner().invoke(app, [name, "--help"], terminal_width=250)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert not re.search(r"<(bool|str|int|float|list\[\w+\]|\w+ range|Path)>|\[x[<>]=", text), text
    assert not re.search(r"\((?:see )?(?:flows|tasks|engine)/\w+", text), text
    command = visible_commands()[name]
    for paragraph in (command.help or "").split("\n\n"):  # the terminal wraps a paragraph, not the docstring
        assert "\n" not in paragraph, f"a paragraph broken mid-sentence: {paragraph!r}"
    for param in command.params:
        assert "\n" not in (param.help or ""), param.opts


def test_one_duration_syntax_everywhere() -> None:
    """Every option that takes a duration takes ``90s``, ``5m``, ``7d`` (and the plain seconds it took before),
    and its help says DURATION."""
    from flows.cli.options import parse_duration_text

    assert [parse_duration_text(t) for t in ("90s", "5m", "7d", "1h30m", "1d12h", "600")] == [
        90.0,
        300.0,
        604800.0,
        5400.0,
        129600.0,
        600.0,
    ]
    for text in ("soon", "-5", "nan", "inf", "1e400"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration_text(text)
    assert parse_duration_text("3650d") == 3650 * 86400.0
    with pytest.raises(ValueError, match="longer than 3650d"):
        parse_duration_text("99999999999999999999d")  # 8.64e24 s: no float holds its whole minutes
    run = CliRunner().invoke(
        app, ["tune-sizing", "--cluster", str(REPO / "deployments" / "simulation"), "--window", "-5"]
    )
    assert run.exit_code == 2 and "'-5' is not a duration" in run.output, run.output
    run = CliRunner().invoke(
        app,
        [
            "optimize-allocation",
            "--cluster",
            str(REPO / "deployments" / "examples"),
            "--scale-down-stabilization",
            "2h",
        ],
    )
    assert run.exit_code == 2 and "at most 1h" in run.output, run.output  # the annotation's and the HPA's bound
    durations = {
        "optimize-allocation": ["--scale-down-stabilization"],
        "simulate-policies": ["--slice-start", "--duration", "--wave-period", "--interval", "--startup-delay"],
        "tune-sizing": ["--duration"],
        "warm-caches": ["--gc-unused-after", "--retry-backoff", "--timeout"],
        "discover-models": ["--resync-interval"],
        "reconcile-aim": ["--resync-interval"],
        "watch-models": ["--watch"],
        "fill-cache": ["--lock-timeout", "--deadline"],
    }
    commands = visible_commands()
    for name, flags in durations.items():
        options = {opt: p for p in commands[name].params for opt in p.opts}
        for flag in flags:
            assert options[flag].metavar == "DURATION", (name, flag)


def test_earlier_flag_spellings_still_work(tmp_path: pathlib.Path) -> None:
    """A script written for the earlier flags runs the same command: ``--metrics`` is ``--metrics-file``,
    ``--timeout-s 600`` is ``--timeout 10m``; the help shows only the current names."""
    cluster = tmp_path / "cluster"
    shutil.copytree(REPO / "deployments" / "examples", cluster)
    metrics = str(REPO / "deployments" / "example-metrics.yaml")
    runs = [
        CliRunner().invoke(app, [*args, "--cluster", str(cluster), "--dry-run", "--json"], terminal_width=250)
        for args in (["optimize", "--metrics", metrics], ["optimize-allocation", "--metrics-file", metrics])
    ]
    assert [r.exit_code for r in runs] == [0, 0], [r.output for r in runs]
    assert json.loads(runs[0].stdout) == json.loads(runs[1].stdout)
    help_text = CliRunner().invoke(app, ["optimize-allocation", "--help"], terminal_width=250).stdout
    assert "--metrics-file" in help_text and "--metrics " not in help_text


def test_the_cli_decides_with_the_deployments_defaults() -> None:
    """``modelplane optimize-allocation`` holds a scale-down as the scheduled deployment does: its default for
    each parameter the deployment sets is the deployment's value."""
    from flows.deployments import load_prefect_yaml

    entry = next(e for e in load_prefect_yaml()["deployments"] if e["name"] == "optimize")
    options = {p.name: p for p in visible_commands()["optimize-allocation"].params}
    cli_defaults = {"scale_down_stabilization_s": options["scale_down_stabilization"].default}
    assert set(entry["parameters"]) <= set(cli_defaults), "a deployment parameter the CLI does not set"
    assert {k: float(v) for k, v in entry["parameters"].items()} == {k: cli_defaults[k] for k in entry["parameters"]}


def test_a_held_scale_down_reads_as_a_reason_and_costs_add_up(tmp_path: pathlib.Path) -> None:
    """On the examples the deployment's 180 s window holds llama-3-1-8b-a100's scale-down: its row says so; every
    cost is a number per hour in JSON, the unpriced binding target is null, and the summary's total is the
    sum of the priced rows; a dry run ends by saying nothing was written."""
    cluster = tmp_path / "cluster"
    shutil.copytree(REPO / "deployments" / "examples", cluster)
    args = [
        "optimize-allocation",
        "--cluster",
        str(cluster),
        "--metrics-file",
        str(REPO / "deployments" / "example-metrics.yaml"),
        "--dry-run",
    ]
    table = CliRunner().invoke(app, args, terminal_width=300)
    assert table.exit_code == 0, table.output
    assert "OptimizationSucceeded: scale-down to 1 held" in table.stdout  # in the reason column (its cell wraps)
    assert "cost/h" in table.stdout and table.stdout.rstrip().endswith("dry run: nothing was written")
    rows = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    held = {r["name"]: r["held"] for r in rows if r["held"]}
    assert held == {"llama-3-1-8b-a100": "scale-down to 1 held by the 180s stabilization window (0s so far)"}
    priced = [r["cost"] for r in rows if r["cost"] is not None]
    assert all(isinstance(c, (int, float)) for c in priced) and [r["name"] for r in rows if r["cost"] is None]
    assert f"total cost {sum(priced):.2f} per hour" in table.stdout
    assert all(re.fullmatch(r"\d+x \S+", r["accelerator"]) for r in rows), [r["accelerator"] for r in rows]


def test_a_long_command_says_how_far_it_is_in_plain_lines_off_a_terminal(tmp_path: pathlib.Path) -> None:
    """Off a terminal (a CI log) simulate prints its progress as plain lines on stderr: the replays as they
    finish, the report's plots, each step's end with its time; its stdout stays the table."""
    command = [
        "simulate-policies",
        "--cluster",
        str(REPO / "deployments" / "examples"),
        "--trace",
        str(REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"),
        "--duration",
        "1m",
        "--policy",
        "modelplane",
        "--policy",
        "hpa",
        "--no-frontier",
        "--output-dir",
        str(tmp_path / "report"),
    ]
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", *command],
        env=laptop_environment(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert "simulate: 0/2 replays - started" in lines, lines
    assert any(re.fullmatch(r"simulate: 2/2 replays \(hpa\) - done in \d+ s", line) for line in lines), lines
    assert any(line.startswith(f"report {tmp_path / 'report'}: 4/4 plots") for line in lines), lines
    assert "Policies replayed" in result.stdout and "replays" not in result.stdout


@pytest.mark.usefixtures("yaml_reader")
def test_validate_checks_a_large_folder_in_worker_processes_with_the_same_report(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files checked in worker processes give the report of files checked one by one, in file order; a table
    past TABLE_ROWS lists the invalid resources only and says so, the JSON list every resource."""
    from flows.cli import manifests as cli_manifests
    from tasks import manifests

    examples = (REPO / "deployments" / "examples" / "10-llama-3.1-8b.yaml").read_text()
    for index in range(3):
        (tmp_path / f"{index}.yaml").write_text(examples.replace("name: llama", f"name: f{index}-llama"))
    (tmp_path / "9-bad.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n---\na: [\n")

    def run(*args: str) -> Any:
        return CliRunner().invoke(app, ["validate-manifests", "--cluster", str(tmp_path), *args], terminal_width=250)

    monkeypatch.setattr(manifests, "PARALLEL_BYTES", 10**12)
    serial = run("--json")
    pools: list[tuple[Any, ...]] = []

    class CountingPool(manifests.ProcessPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pools.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(manifests, "ProcessPoolExecutor", CountingPool)
    monkeypatch.setattr(manifests, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(manifests.os, "cpu_count", lambda: 2)
    parallel = run("--json")
    assert pools == [(2,)]  # two worker processes checked the four files
    assert parallel.exit_code == serial.exit_code == 3
    assert parallel.stdout == serial.stdout
    rows = json.loads(parallel.stdout)
    assert len(rows) == 14 and [r["name"] for r in rows if r["result"] != "valid"] == ["Bad_Name", ""]
    monkeypatch.setattr(cli_manifests, "TABLE_ROWS", 5)
    table = run()
    assert table.exit_code == 3 and "Bad_Name" in table.stdout and "f1-llama" not in table.stdout
    assert "The valid resources are not listed (more than 5 rows): --json lists every one." in table.stdout
    assert "12 valid, 2 invalid" in table.stdout
