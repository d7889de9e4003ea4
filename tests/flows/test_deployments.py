"""Every entry of deployments/prefect.yaml has the platform shape (checked per entry, so a new flow's entry
is checked as soon as it is appended): description, tags, a typed parameter schema with a description per
parameter and its constraints, enforce_parameter_schema, a slugged schedule with concurrency 1 (ENQUEUE when
triggered, else CANCEL_NEW) and a timeout (retries included) below the interval, triggers that parse and name real parameters, and the
Kubernetes work pool with job variables its template defines. Served deployments register under '-local'."""

from __future__ import annotations

import asyncio
import collections.abc
import inspect
import json
import pathlib
import re
import types
import typing
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from prefect.utilities.callables import parameter_schema

from engine.simulate.policies import POLICIES
from flows.deployments import (
    KUBERNETES_POOL,
    PREFECT_YAML,
    REPO,
    SERVE_SUFFIX,
    deployment_entries,
    kubernetes_pool_template,
    load_entry_flow,
    load_prefect_yaml,
    runner_deployments,
    triggers_of,
)
from flows.parameters import PROMETHEUS_DURATION_PATTERN, SYSTEM_NAMESPACE

ENTRIES = deployment_entries()
IDS = [entry["name"] for entry in ENTRIES]


def schema_of(entry: dict[str, Any]) -> dict[str, Any]:
    """The parameter schema Prefect stores for the entry's flow (built from its signature, as `prefect deploy` does)."""
    return parameter_schema(load_entry_flow(entry)).model_dump_for_openapi()


def test_every_lifecycle_flow_is_a_deployment() -> None:
    assert "optimize" in IDS
    assert len(IDS) == len(set(IDS)), "deployment names must be unique"


def test_the_pull_step_only_changes_into_the_images_workdir() -> None:
    """The code is baked into the image: a flow run changes into its WORKDIR ($MODELPLANE_HOME, read in the
    container at run time) and clones or downloads nothing; a process pool gets no pull step at all."""
    from tests.servers.kubeserver.jobs import modelplane_image

    config = load_prefect_yaml()
    assert config["pull"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": "{{ $MODELPLANE_HOME }}"}}
    ]
    image = modelplane_image()
    assert image.env["MODELPLANE_HOME"] == image.workdir == "/opt/modelplane"
    assert all("pull" not in entry for entry in config["deployments"]), "one pull step for every deployment"


def test_a_process_pool_copy_has_no_pull_step(tmp_path: pathlib.Path) -> None:
    import yaml

    from flows.deployments import prefect_yaml_for_pool

    process = yaml.safe_load(prefect_yaml_for_pool("laptop", tmp_path / "p.yaml", pool_type="process").read_text())
    assert process["pull"] == [] and {e["work_pool"]["name"] for e in process["deployments"]} == {"laptop"}
    other = yaml.safe_load(prefect_yaml_for_pool("k8s-2", tmp_path / "k.yaml").read_text())
    assert other["pull"] == load_prefect_yaml()["pull"]


def test_a_process_pool_runs_flows_with_the_installed_python_in_this_checkout() -> None:
    """The process pool's template renders the engine command under this interpreter and this checkout as the
    working directory: Prefect's process worker then starts the run directly, not through its workspace
    supervisor (one more process importing Prefect per run; flows.deployments.process_pool_template)."""
    import asyncio
    import shlex
    import sys

    from prefect.workers.process import ProcessJobConfiguration

    from flows.deployments import REPO, process_pool_template

    rendered = asyncio.run(ProcessJobConfiguration.from_template_and_values(process_pool_template(), {}))
    assert shlex.split(rendered.command or "") == [sys.executable, "-m", "prefect.engine"]
    assert rendered.working_dir == REPO
    overridden = asyncio.run(
        ProcessJobConfiguration.from_template_and_values(process_pool_template(), {"command": "python -m x"})
    )
    assert overridden.command == "python -m x"


def test_one_image_reference_from_the_package_version() -> None:
    """The image is named once (flows/image.py, tag = pyproject's version): prefect.yaml's job variable comes from
    its build step, the flows' defaults import it, and no other file names a tag of it (generated ones aside)."""
    import re
    import subprocess
    import tomllib

    from flows.image import IMAGE

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert IMAGE == f"ghcr.io/modelplane/modelplane:{version}"
    assert all(entry["work_pool"]["job_variables"]["image"] == IMAGE for entry in ENTRIES)
    assert kubernetes_pool_template()["variables"]["properties"]["image"]["default"] == IMAGE
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tagged = [
        name
        for name in files
        if not name.startswith(("tests/", "deployments/worker/", "deployments/install/base/"))
        and (REPO / name).is_file()
        and re.search(r"ghcr\.io/modelplane/modelplane:[0-9]", (REPO / name).read_text(errors="ignore"))
    ]
    assert not tagged, f"name the image through flows/image.py (or `modelplane build-image`), not with a tag: {tagged}"


def test_prometheus_comes_from_the_registering_environment_or_the_process_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """The Kubernetes pool's runs get $PROMETHEUS_URL as registered (empty: none; unset: the in-cluster one); a
    process pool's get none from the deployment, so they inherit the worker's environment (a laptop with no
    Prometheus runs as the CLI does, instead of every run failing to reach a cluster address)."""
    from flows.deployments import load_prefect_yaml, prefect_yaml_for_pool
    from flows.parameters import IN_CLUSTER_PROMETHEUS_URL

    def prometheus(entries: list[dict[str, Any]]) -> set[str | None]:
        return {entry["work_pool"]["job_variables"]["env"].get("PROMETHEUS_URL") for entry in entries}

    monkeypatch.delenv("PROMETHEUS_URL", raising=False)
    assert prometheus(deployment_entries()) == {IN_CLUSTER_PROMETHEUS_URL}
    monkeypatch.setenv("PROMETHEUS_URL", "http://prometheus.example.org:9090")
    assert prometheus(deployment_entries()) == {"http://prometheus.example.org:9090"}
    monkeypatch.setenv("PROMETHEUS_URL", "")
    assert prometheus(deployment_entries()) == {""}
    process = prefect_yaml_for_pool("modelplane-process", tmp_path / "prefect.yaml", pool_type="process")
    assert prometheus(deployment_entries(process)) == {None}
    entries = load_prefect_yaml(process)["deployments"]
    assert {entry["work_pool"]["job_variables"]["env"]["MODELPLANE_IMAGE"] for entry in entries} == {
        "{{ modelplane_image.image }}"
    }


def test_modelplane_image_is_what_the_deployments_and_the_pool_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``MODELPLANE_IMAGE`` set, ``register-deployments`` registers that image: the build step's output in every
    entry's job variables (and passed on to the run, whose own image defaults follow it) and the pool's default."""
    own = "registry.example.org/team/modelplane:1.2"
    monkeypatch.setenv("MODELPLANE_IMAGE", own)
    for entry in deployment_entries():
        job_variables = entry["work_pool"]["job_variables"]
        assert job_variables["image"] == job_variables["env"]["MODELPLANE_IMAGE"] == own, entry["name"]
    assert kubernetes_pool_template()["variables"]["properties"]["image"]["default"] == own


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_is_described_tagged_and_enforces_its_schema(entry: dict[str, Any]) -> None:
    assert entry.get("description", "").strip(), "a description the UI shows"
    assert "modelplane" in (entry.get("tags") or []), "tag 'modelplane' so a person can filter every flow"
    assert entry.get("enforce_parameter_schema") is True
    assert entry["entrypoint"].startswith("flows/") and entry["entrypoint"].split(":")[0].endswith(".py")


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_parameter_is_typed_and_described(entry: dict[str, Any]) -> None:
    schema = schema_of(entry)
    for name, prop in schema["properties"].items():
        assert prop.get("description"), f"{entry['name']}.{name}: document it in the flow's docstring (Args:)"
        assert any(key in prop for key in ("type", "anyOf", "allOf", "$ref", "enum")), (
            f"{entry['name']}.{name}: give it a type"
        )
    # The entry's own parameters and every default satisfy the schema the server enforces.
    defaults = {name: prop["default"] for name, prop in schema["properties"].items() if "default" in prop}
    # (A parameter without default, e.g. serve-openmodel's model, is given by each run: not required here.)
    jsonschema.validate({**defaults, **(entry.get("parameters") or {})}, {**schema, "required": []})
    unknown = set(entry.get("parameters") or {}) - set(schema["properties"])
    assert not unknown, f"{entry['name']}: parameters the flow does not take: {unknown}"
    # A default is written once (the signature, flows/parameters.py): the entry names only what differs from it.
    repeated = {n for n, v in (entry.get("parameters") or {}).items() if n in defaults and defaults[n] == v}
    assert not repeated, f"{entry['name']}: parameters equal to the flow's default, drop them: {sorted(repeated)}"


NO_DEFAULT = {
    "simulate": {"duration_s", "wave_period_s", "bursty", "hpa_metric", "hpa_target", "slo_attainment"},
    "tune": {"trace", "slo_attainment", "duration_s", "end"},
    "warm-caches": {"gc_unused_after"},
}
"""Parameters whose absence has no value of their type to stand for it (to the end of the trace, what each
VariantAutoscaling says, never, now): they stay optional (``X | None``), the only ones the run form shows with a
None choice."""


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_a_parameter_with_a_default_is_a_plain_field_holding_it(entry: dict[str, Any]) -> None:
    """The UI's run form shows a parameter whose schema allows null as a str/None toggle ('Property is type
    "None"'); a parameter whose absence means something (all namespaces, the environment's URL, every policy)
    has that meaning's value as its default instead, one type, no null."""
    for name, prop in schema_of(entry)["properties"].items():
        nullable = any(branch.get("type") == "null" for branch in prop.get("anyOf", []))
        if name in NO_DEFAULT.get(entry["name"], ()):
            assert nullable and prop["default"] is None, f"{entry['name']}.{name}"
            continue
        assert not nullable, f"{entry['name']}.{name}: give it its real default, not None: {prop}"
        assert prop.get("default", "required") is not None, f"{entry['name']}.{name}"


def test_a_default_reads_none_as_itself() -> None:
    """A caller passing None (a CLI option left out) gets the parameter's default: the same run as before."""
    from flows.optimize import optimize
    from flows.runs import validate_parameters
    from flows.simulate import simulate

    got = validate_parameters(optimize, {"namespaces": None, "cluster": None, "rate_window": None})
    assert got["namespaces"] == () and got["cluster"] == "" and got["rate_window"] == ""
    assert got["prometheus_url"] == "" and got["pushgateway_url"] == ""
    got = validate_parameters(simulate, {"cluster": "c", "trace": "t", "policies": None, "model_shares": None})
    assert list(got["policies"]) == [*POLICIES] and got["model_shares"] == {}


@pytest.mark.parametrize(
    "entry", [e for e in ENTRIES if e.get("schedules")], ids=[e["name"] for e in ENTRIES if e.get("schedules")]
)
def test_scheduled_entry_runs_one_at_a_time_and_ends_before_the_next(entry: dict[str, Any]) -> None:
    flow = load_entry_flow(entry)
    # Triggered work waits for the running pass (a chained run names work it may not cover); the rest cancel.
    strategy = "ENQUEUE" if entry.get("triggers") else "CANCEL_NEW"
    assert entry["concurrency_limit"] == {"limit": 1, "collision_strategy": strategy}
    for schedule in entry["schedules"]:
        assert schedule.get("slug"), f"{entry['name']}: every schedule needs a slug"
        assert "interval" in schedule, "interval schedules (a cron needs its own timeout check here)"
        interval = float(schedule["interval"])
        assert flow.timeout_seconds is not None, f"{entry['name']}: set timeout_seconds on the flow"
        # A scheduled run, with every retry, must end before the next one is due.
        attempts = (flow.retries or 0) + 1
        delays = sum(_retry_delays(flow.retry_delay_seconds, flow.retries or 0))
        assert attempts * flow.timeout_seconds + delays < interval, (
            f"{entry['name']}: {attempts} attempt(s) x {flow.timeout_seconds}s + {delays}s of delays >= the {interval}s interval"
        )


def _retry_delays(delay: Any, retries: int) -> list[float]:
    if isinstance(delay, (list, tuple)):
        return [float(d) for d in delay][:retries]
    return [float(delay or 0)] * retries


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_triggers_parse_and_pass_parameters_the_flow_takes(entry: dict[str, Any]) -> None:
    properties = schema_of(entry)["properties"]
    for trigger in triggers_of(entry):
        assert trigger.name and trigger.description, f"{entry['name']}: name and describe every trigger"
        assert trigger.expect and all(name.startswith("modelplane.") for name in trigger.expect)
        resource_id = trigger.match.root.get("prefect.resource.id")
        assert isinstance(resource_id, str) and resource_id.startswith("modelplane."), (
            "match on a modelplane resource id"
        )
        assert trigger.parameters, f"{entry['name']}: a chained run names its work through parameters"
        assert set(trigger.parameters) <= set(properties), (
            f"unknown parameters {set(trigger.parameters) - set(properties)}"
        )


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_runs_on_the_kubernetes_pool_with_known_job_variables(entry: dict[str, Any]) -> None:
    pool = entry["work_pool"]
    assert pool["name"] == KUBERNETES_POOL
    variables = kubernetes_pool_template()["variables"]["properties"]
    unknown = set(pool.get("job_variables") or {}) - set(variables)
    assert not unknown, f"{entry['name']}: job variables the work-pool template does not define: {unknown}"
    assert pool["job_variables"]["service_account_name"] == "modelplane"


def test_optimize_schema_rejects_bad_values_before_a_run() -> None:
    schema = schema_of(next(e for e in ENTRIES if e["name"] == "optimize"))
    jsonschema.validate({"rate_window": "90s", "solver_time_limit_s": 0.5}, schema)
    for bad in (
        {"rate_window": "abc"},
        {"solver_time_limit_s": -5},
        {"solver_time_limit_s": 0},
        {"status_heartbeat_s": -1},
        {"config_namespace": "Not_A_Namespace"},
        {"namespaces": ["UPPER"]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_served_deployments_register_under_their_own_names(
    apply_deployments: Callable[[list[Any]], list[Any]],
) -> None:
    deployments = runner_deployments(PREFECT_YAML)
    assert {d.name for d in deployments} == {f"{name}{SERVE_SUFFIX}" for name in IDS}

    stored = {d.name: d for d in apply_deployments(deployments)}
    optimize = stored["optimize-local"]
    assert [s.slug for s in optimize.schedules] == ["optimize-every-60s"]
    assert optimize.schedules[0].schedule.interval.total_seconds() == 60
    assert optimize.global_concurrency_limit is not None and optimize.global_concurrency_limit.limit == 1
    assert optimize.concurrency_options.collision_strategy.value == "ENQUEUE"
    assert optimize.enforce_parameter_schema is True
    properties = optimize.parameter_openapi_schema["properties"]
    assert optimize.parameters == {"scale_down_stabilization_s": 180}  # prefect.yaml names what differs only
    # the defaults come from the signature (flows/parameters.py), into the schema the UI form pre-fills
    assert properties["config_namespace"]["default"] == SYSTEM_NAMESPACE == "modelplane-system"
    assert properties["dry_run"]["default"] is False
    # the constraints the UI form and the API enforce are in the schema Prefect stores
    window = properties["rate_window"]
    assert window["type"] == "string" and window["default"] == ""  # empty: $PROMETHEUS_RATE_WINDOW, else 1m
    assert re.fullmatch(window["pattern"], "30s") and re.fullmatch(window["pattern"], "")
    assert PROMETHEUS_DURATION_PATTERN in window["pattern"] and not re.fullmatch(window["pattern"], "abc")
    assert properties["solver_time_limit_s"].get("exclusiveMinimum") == 0
    assert properties["status_heartbeat_s"].get("minimum") == 0


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_the_kubernetes_worker_accepts_the_pool_template_and_renders_a_valid_job(
    entry: dict[str, Any], prefect_harness: None
) -> None:
    """prefect-kubernetes itself (the job configuration the worker builds from the pool's template and the entry's
    job variables, prepared for a flow run) accepts the template, and the Job it would create is a valid batch/v1
    Job running Modelplane's image as the modelplane service account."""
    import uuid

    import kubernetes_validate
    from prefect.client.schemas.objects import FlowRun
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    configuration = asyncio.run(
        KubernetesWorkerJobConfiguration.from_template_and_values(
            kubernetes_pool_template(), entry["work_pool"]["job_variables"]
        )
    )
    configuration.prepare_for_flow_run(FlowRun(id=uuid.uuid4(), name="calm-otter", flow_id=uuid.uuid4()))
    job = json.loads(json.dumps(configuration.job_manifest))
    pod = job["spec"]["template"]["spec"]
    # prefect-kubernetes insists on these two in the pod spec; the API server drops them (unknown fields, a warning).
    assert (pod.pop("parallelism"), pod.pop("completions")) == (1, 1)
    assert (job["spec"]["parallelism"], job["spec"]["completions"], job["spec"]["backoffLimit"]) == (1, 1, 0)
    kubernetes_validate.validate(job, "1.30", strict=True)
    assert pod["serviceAccountName"] == "modelplane"
    container = pod["containers"][0]
    assert container["image"] == entry["work_pool"]["job_variables"]["image"]
    assert container["args"] == ["prefect", "flow-run", "execute"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["PREFECT__FLOW_RUN_ID"] and env["PROMETHEUS_URL"].startswith("http://")


def test_the_image_holds_every_entrypoint_and_runs_as_the_pool_user() -> None:
    """deployments/Dockerfile copies every package pyproject installs and every entrypoint's file into its
    WORKDIR (where the pull step changes to), and runs as the user the work-pool template expects."""
    import re
    import tomllib

    from tests.servers.kubeserver.jobs import modelplane_image

    dockerfile = (REPO / "deployments" / "Dockerfile").read_text()
    assert modelplane_image().workdir == "/opt/modelplane"
    copied = {src for line in re.findall(r"^COPY\s+(.+)$", dockerfile, re.M) for src in line.split()[:-1]}
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in packages:
        assert package.rstrip("*") in copied, f"the image must COPY {package.rstrip('*')}/"
    assert {"pyproject.toml", "README.md", "constraints.txt"} <= copied
    for entry in ENTRIES:
        assert entry["entrypoint"].split("/")[0] in copied, entry["entrypoint"]
    assert re.search(r'^RUN pip install -c constraints\.txt "\.\[kubernetes\]"', dockerfile, re.M), (
        "the image installs the package, its dependencies (the versions CI tested) and prefect-kubernetes (it runs"
        " the worker too)"
    )
    uid = re.search(r"^USER\s+(\d+)", dockerfile, re.M).group(1)
    pod = kubernetes_pool_template()["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    assert str(pod["securityContext"]["runAsUser"]) == uid


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_flow_has_a_cli_command_with_json_output(entry: dict[str, Any]) -> None:
    """Each deployment's flow is also a `modelplane <name>` command for CI, with `--json` (exit codes:
    flows/exitcodes.py)."""
    import typer.main

    from flows.cli import app

    command = typer.main.get_command(app).commands.get(entry["name"])
    assert command is not None, f"add `modelplane {entry['name']}` to flows/cli/"
    options = {opt for param in command.params for opt in getattr(param, "opts", [])}
    assert "--json" in options, f"`modelplane {entry['name']}` needs --json"


def test_the_scheduled_optimize_loop_holds_scale_downs_as_the_simulated_policy_does() -> None:
    """The simulator judges Modelplane with the scale-down window the shipped loop runs with (docs/simulate.md)."""
    from engine.optimize.stabilization import DEFAULT_SCALE_DOWN_WINDOW_S
    from engine.simulate.scenario import Scenario

    entry = next(e for e in load_prefect_yaml()["deployments"] if e["name"] == "optimize")
    assert entry["parameters"]["scale_down_stabilization_s"] == DEFAULT_SCALE_DOWN_WINDOW_S
    assert Scenario.__dataclass_fields__["scale_down_window_s"].default == DEFAULT_SCALE_DOWN_WINDOW_S


# ----------------------------------------------------------------------------- constraints: the signature is the source

# Valid values for the parameters a run must give (no default), so one bad value at a time can be tried.
REQUIRED_SAMPLES: dict[str, dict[str, Any]] = {
    "serve-openmodel": {"model": "qwen2-5-0-5b-instruct", "namespace": "llm-serving"},
    "simulate": {"cluster": "deployments/examples", "trace": "deployments/traces/azure-conv-2023-20min.csv"},
    "tune": {"cluster": "deployments/simulation", "trace": "deployments/traces/azure-conv-2023-20min.csv"},
}
# The values issue 19 found the server accepting and the run then dying on (point 5), plus one per kind of rule.
BAD_VALUES: dict[str, list[dict[str, Any]]] = {
    "discover-models": [{"resync_interval_s": 30}, {"registry_timeout_s": 0}, {"namespaces": ["Team_A"]}],
    "serve-openmodel": [{"replicas": -1}, {"replicas": 1001}, {"namespace": "Bad_NS"}, {"model": ""}, {"image": ""}],
    "calibrate": [{"lookback": "1.5h"}, {"lookback": "24"}, {"window": "5 minutes"}, {"config_namespace": ""}],
    "tune": [{"slo_attainment": 0.3}, {"slo_attainment": 1.0}, {"cluster": ""}, {"trace": ""}],
    "simulate": [
        {"rate_scale": 0},
        {"wave_floor": 0},
        {"wave_floor": 1.5},
        {"wave_period_s": 0},
        {"bursty": "no-such-variant"},
        {"start": "warm"},
        {"compression": -1},
        {"start_s": -1},
        {"duration_s": 0},
        {"interval_s": 0},
        {"kv_tokens_per_slot": 0},
        {"hpa_target": 0},
        {"policies": ["no-such-policy"]},
        {"output_dir": ""},
    ],
    "warm-caches": [
        {"max_fill_attempts": 0},
        {"retry_backoff_s": -1},
        {"job_backoff_limit": -1},
        {"job_ttl_s": -1},
        {"headroom_percent": -5},
        {"image": ""},
        {"openmodel_namespace": "Not Valid"},
    ],
    "rollout-models": [
        {"downloader_image": ""},
        {"downloader_image": "bad\nimage"},
        {"runtime_image": "UPPER/Case:1"},
        {"names": ["Bad Name"]},
    ],
    "rollout-services": [{"namespaces": ["UPPER"]}],
    "resolve-templates": [{"namespaces": ["UPPER"]}],
    "watch-models": [{"watch_seconds": 0}, {"watch_seconds": 51}],
    "optimize": [
        {"rate_window": "abc"},
        {"solver_time_limit_s": -5},
        {"scale_down_stabilization_s": -1},
        {"scale_down_stabilization_s": 7200},
    ],
}


def signature_rules(annotation: Any, wrap: Callable[[Any], Any] = lambda v: v) -> list[tuple[str, Any]]:
    """Every rule pydantic enforces on a parameter of this annotation, each as (rule, a value breaking it)."""
    import annotated_types
    from pydantic.fields import FieldInfo

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        rules = signature_rules(args[0], wrap)
        for meta in args[1:]:
            for item in meta.metadata if isinstance(meta, FieldInfo) else [meta]:
                rules += _breaking(item, args[0], wrap, annotated_types)
        return rules
    if origin in (typing.Union, types.UnionType):
        return [rule for arg in args if arg is not type(None) for rule in signature_rules(arg, wrap)]
    if origin in (list, collections.abc.Sequence):
        return signature_rules(args[0], lambda v: wrap([v]))
    if origin is typing.Literal:
        return [(f"one of {args}", wrap("not-one-of-the-choices"))]
    return []


def _breaking(item: Any, base: Any, wrap: Callable[[Any], Any], at: Any) -> list[tuple[str, Any]]:
    """(rule, breaking value) for one piece of constraint metadata (annotated_types or pydantic's pattern)."""
    step = 1 if base is int else 0.5
    if isinstance(item, at.Ge):
        return [(f">= {item.ge}", wrap(item.ge - step))]
    if isinstance(item, at.Gt):
        return [(f"> {item.gt}", wrap(item.gt))]
    if isinstance(item, at.Le):
        return [(f"<= {item.le}", wrap(item.le + step))]
    if isinstance(item, at.Lt):
        return [(f"< {item.lt}", wrap(item.lt))]
    if isinstance(item, at.MinLen):
        return [(f"min length {item.min_length}", wrap(""))] if item.min_length == 1 else []
    if isinstance(item, at.MaxLen):
        return [(f"max length {item.max_length}", wrap("a" * (item.max_length + 1)))]
    if getattr(item, "pattern", None):
        bad = "Not A Valid Value!"
        assert not re.match(item.pattern, bad)
        return [(f"pattern {item.pattern}", wrap(bad))]
    return []


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_rule_the_flow_enforces_is_in_the_deployment_schema(entry: dict[str, Any]) -> None:
    """Walk the flow's signature: each rule pydantic enforces on a run (the flow's only checks) must be in the
    schema the server stores, so a value breaking it is refused by the server, naming the field, before a run
    exists, and the same value is refused by a local call before the body runs."""
    from prefect.exceptions import ParameterTypeError

    flow = load_entry_flow(entry)
    schema = schema_of(entry)
    hints = typing.get_type_hints(flow.fn, include_extras=True)
    base = REQUIRED_SAMPLES.get(entry["name"], {})
    jsonschema.validate(base, schema)
    checked = 0
    for name in inspect.signature(flow.fn).parameters:
        for rule, bad in signature_rules(hints[name]):
            checked += 1
            with pytest.raises(ParameterTypeError, match=name):
                flow.validate_parameters({**base, name: bad})
            errors = list(jsonschema.Draft202012Validator(schema).iter_errors({**base, name: bad}))
            assert errors, (
                f"{entry['name']}.{name}: the flow enforces {rule} ({bad!r} refused) but the deployment schema has no such rule"
            )
            assert all(error.path and error.path[0] == name for error in errors), [e.message for e in errors]
    assert checked, f"{entry['name']}: no parameter rules found (walker broken?)"
    for bad in BAD_VALUES.get(entry["name"], []):  # the documented bad values, whatever the walker finds
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**base, **bad}, schema)


def test_every_deployment_has_bad_values_listed_and_no_flow_repeats_its_signature_in_a_model() -> None:
    """BAD_VALUES (also sent to the real server in test_platform_runs.py) covers every deployment, and no flow
    module keeps a pydantic model of its parameters beside the signature (two places for one rule drift)."""
    import importlib

    from pydantic import BaseModel

    assert set(BAD_VALUES) <= set(IDS) and set(IDS) - set(BAD_VALUES) == set()
    for entry in ENTRIES:
        module = importlib.import_module(entry["entrypoint"].split(":")[0].removesuffix(".py").replace("/", "."))
        models = [
            n
            for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__
        ]
        assert not models, f"{module.__name__}: parameters model(s) {models}: put the rules in the flow's signature"


def test_the_control_loop_is_served_and_the_rest_goes_to_the_pool(tmp_path: pathlib.Path) -> None:
    """serve-deployments --control-loop serves the periodic lifecycles; register-deployments --without-control-loop
    registers every other entry, so no lifecycle runs on two schedules."""
    import yaml

    from flows.deployments import CONTROL_LOOP, prefect_yaml_for_pool

    assert set(CONTROL_LOOP) <= set(IDS) and {"optimize", "watch-models"} <= set(CONTROL_LOOP)
    served = {d.name for d in runner_deployments(PREFECT_YAML, only=CONTROL_LOOP)}
    assert served == {f"{name}{SERVE_SUFFIX}" for name in CONTROL_LOOP}
    pool = yaml.safe_load(prefect_yaml_for_pool("k8s", tmp_path / "p.yaml", without=CONTROL_LOOP).read_text())
    registered = {entry["name"] for entry in pool["deployments"]}
    assert registered == set(IDS) - set(CONTROL_LOOP) and {"warm-caches", "simulate", "tune"} <= registered
