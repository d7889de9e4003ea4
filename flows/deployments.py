"""Modelplane's Prefect deployments, from ``deployments/prefect.yaml``: served locally or registered on a work pool.

``modelplane serve-deployments`` and ``prefect deploy`` read the same file, so the served schedules, concurrency
limits, triggers and default parameters cannot drift from the registered deployments. Served deployments
are named ``<name>-local`` (:data:`SERVE_SUFFIX`): a deployment is identified by flow and name, so a served
process and a work pool never share one and never pick up each other's runs.

``modelplane register-deployments`` is the one-line install: it creates the work pool when it is missing (Kubernetes
from ``deployments/work-pool-template.json``, or a local process pool whose working directory is this
checkout) and then runs the documented ``prefect --no-prompt deploy --all --prefect-file ...`` command
(for another pool than prefect.yaml's, on a generated copy naming that pool).
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Collection
from typing import Any

import yaml
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import RunnerDeployment
from prefect.events import DeploymentTriggerTypes
from prefect.exceptions import ObjectNotFound
from prefect.flows import load_flow_from_entrypoint
from prefect.schedules import Cron, Interval, Schedule
from prefect.utilities.templating import apply_values
from pydantic import TypeAdapter

from flows.image import image as modelplane_image
from flows.parameters import IN_CLUSTER_PROMETHEUS_URL

REPO = pathlib.Path(__file__).resolve().parents[1]
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"
WORK_POOL_TEMPLATE = REPO / "deployments" / "work-pool-template.json"
SERVE_SUFFIX = "-local"
KUBERNETES_POOL = "modelplane-kubernetes"
PROCESS_POOL = "modelplane-process"
# What a process pool's runs take from the worker's environment instead of the deployment (prefect_yaml_for_pool).
INHERITED = ("PROMETHEUS_URL",)

_TRIGGERS = TypeAdapter[DeploymentTriggerTypes](DeploymentTriggerTypes)


def load_prefect_yaml(path: pathlib.Path = PREFECT_YAML) -> dict[str, Any]:
    """The parsed prefect.yaml (YAML anchors resolved).

    Args:
        path: The prefect.yaml to read.

    Returns:
        The document.
    """
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def build_outputs(config: dict[str, Any]) -> dict[str, Any]:
    """The outputs of prefect.yaml's ``build`` steps by step ``id``, computed as ``prefect deploy`` does.

    Only Modelplane's own steps (``flows.*``: pure functions such as :func:`flows.image.image_reference`)
    are run here; a deploy runs every step itself.

    Args:
        config: The parsed prefect.yaml.

    Returns:
        Each step's output by its ``id``, and the outputs' keys on their own.

    Raises:
        ValueError: A build step is not one of Modelplane's own (``flows.*``).
    """
    import importlib

    outputs: dict[str, Any] = {}
    for step in config.get("build") or []:
        ((fqn, inputs),) = step.items()
        if not fqn.startswith("flows."):
            raise ValueError(
                f"prefect.yaml build step {fqn!r}: only Modelplane's own steps (flows.*) run outside a deploy"
            )
        module, _, function = fqn.rpartition(".")
        arguments = {k: v for k, v in (inputs or {}).items() if k not in ("id", "requires")}
        result = getattr(importlib.import_module(module), function)(**arguments)
        if (inputs or {}).get("id"):
            outputs[inputs["id"]] = result
        outputs.update(result)  # as Prefect's run_steps: the output's keys also on their own (they may shadow an id)
    return outputs


def run_settings() -> dict[str, str]:
    """A ``prefect deploy`` build step: the settings the Kubernetes pool's runs get as environment, read from the
    registering environment (``{{ modelplane_settings.prometheus_url }}`` in prefect.yaml).

    ``PROMETHEUS_URL`` as set there (empty: the runs have no Prometheus), else the in-cluster default. A process
    pool's deployments do not carry it: their runs inherit the worker's environment (:func:`prefect_yaml_for_pool`).

    Returns:
        ``{"prometheus_url": ...}``.
    """
    return {"prometheus_url": os.environ.get("PROMETHEUS_URL", IN_CLUSTER_PROMETHEUS_URL)}


def deployment_entries(path: pathlib.Path = PREFECT_YAML) -> list[dict[str, Any]]:
    """Every ``deployments:`` entry of prefect.yaml, its parameters and work pool with the build steps'
    outputs filled in (``{{ modelplane_image.image }}`` becomes the image reference), as ``prefect deploy`` registers them.

    Args:
        path: The prefect.yaml to read.

    Returns:
        The entries, in the file's order, each a copy with its templates filled in.
    """
    config = load_prefect_yaml(path)
    outputs = build_outputs(config)
    entries = []
    for entry in config["deployments"]:
        entry = dict(entry)
        for key in ("parameters", "work_pool"):
            if entry.get(key):
                entry[key] = apply_values(entry[key], outputs, remove_notset=False)
        entries.append(entry)
    return entries


def schedules_of(config: dict[str, Any]) -> list[Schedule]:
    """The schedules of one deployment entry (interval or cron), each with its slug.

    Args:
        config: One ``deployments:`` entry of prefect.yaml.

    Returns:
        Its schedules; empty when it has none.

    Raises:
        ValueError: A schedule has neither ``interval`` nor ``cron``.
    """
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
    """The deployment's concurrency limit and collision strategy.

    Args:
        config: One ``deployments:`` entry of prefect.yaml.

    Returns:
        The limit (collision strategy ``ENQUEUE`` unless the entry names one), or None when the entry sets none.
    """
    limit = config.get("concurrency_limit")
    if limit is None:
        return None
    if isinstance(limit, int):
        return ConcurrencyLimitConfig(limit=limit)
    return ConcurrencyLimitConfig(
        limit=limit["limit"],
        collision_strategy=ConcurrencyLimitStrategy(limit.get("collision_strategy", "ENQUEUE")),
    )


def triggers_of(config: dict[str, Any], deployment_name: str | None = None) -> list[DeploymentTriggerTypes]:
    """The entry's deployment triggers, parsed exactly as ``prefect deploy`` parses them.

    Args:
        config: One ``deployments:`` entry of prefect.yaml.
        deployment_name: The name the deployment is registered under (a served ``-local`` one), or None for the
            entry's own; the automations are named after it.

    Returns:
        The triggers.
    """
    name = deployment_name or config["name"]
    triggers = []
    for index, spec in enumerate(config.get("triggers") or [], start=1):
        spec = copy.deepcopy(spec)
        spec["name"] = (
            f"{spec.get('name') or f'{name}__automation_{index}'}{'' if name == config['name'] else SERVE_SUFFIX}"
        )
        triggers.append(_TRIGGERS.validate_python(spec))
    return triggers


def load_entry_flow(config: dict[str, Any]) -> Any:
    """The flow object an entry's entrypoint names (paths relative to the repository root).

    Args:
        config: One ``deployments:`` entry of prefect.yaml.

    Returns:
        The flow.
    """
    file, _, function = config["entrypoint"].partition(":")
    return load_flow_from_entrypoint(f"{REPO / file}:{function}", use_placeholder_flow=False)


def served_name(name: str) -> str:
    """The name ``modelplane serve-deployments`` gives the deployment called ``name`` in prefect.yaml.

    Args:
        name: A deployment's name in prefect.yaml.

    Returns:
        ``NAME-local``.
    """
    return f"{name}{SERVE_SUFFIX}"


CONTROL_LOOP = (
    "optimize",
    "watch-models",
    "discover-models",
    "resolve-templates",
    "rollout-services",
    "rollout-models",
)
"""The lifecycles the serving loop in the cluster runs (``serve-deployments --control-loop``, the install's
``modelplane-serving`` Deployment): the periodic ones on a short interval and the resyncs they chain, each a few
seconds of API calls that a Job per run (a pod start, seconds of imports) would make late. The others -- cache
fills, simulate, tune, calibrate, serve-openmodel -- are heavy or bursty and stay on the Kubernetes work pool
(``register-deployments --without-control-loop``)."""


SERVE_QUERY_S, SERVE_PREFETCH_S = 5, 40
"""How the serving loop's runner polls (``prefect.serve``'s Runner): every 5 s, for runs due in the next 40 s.
Each run starts in a subprocess that pays Prefect's and Modelplane's imports (2-3 s of CPU idle, tens of seconds
on a loaded node) before it can propose Running; fetched 35-40 s ahead, that start-up happens before the run is
due, and Prefect's server holds the run's Running transition until its scheduled time, so a 60 s schedule starts
on time. Prefect's defaults (10 s, 10 s) start a run after its imports, late by their duration."""


def runner_deployments(
    path: pathlib.Path = PREFECT_YAML, only: Collection[str] | None = None
) -> list[RunnerDeployment]:
    """One runner deployment per entry of prefect.yaml (``only``: per entry of those names), named
    ``<name>-local``, with its schedules and triggers.

    Args:
        path: The prefect.yaml to read.
        only: The names of the entries to serve, or None for all.

    Returns:
        The runner deployments, in the file's order.
    """
    deployments = []
    for config in deployment_entries(path):
        if only is not None and config["name"] not in only:
            continue
        name = served_name(config["name"])
        deployments.append(
            load_entry_flow(config).to_deployment(
                name=name,
                description=config.get("description"),
                tags=[*(config.get("tags") or []), "served"],
                schedules=schedules_of(config),
                concurrency_limit=concurrency_of(config),
                parameters=config.get("parameters") or {},
                triggers=triggers_of(config, name),
                enforce_parameter_schema=config.get("enforce_parameter_schema", True),
            )
        )
    return deployments


# ------------------------------------------------------------------------------------------ work pools


def kubernetes_pool_template(path: pathlib.Path = WORK_POOL_TEMPLATE, image: str | None = None) -> dict[str, Any]:
    """The Kubernetes work pool's base job template (service account, cache volumes, resources), its ``image``
    variable defaulting to ``image``, else Modelplane's (the file names no tag: flows/image.py is the one place
    for it, ``$MODELPLANE_IMAGE`` included).

    The Job manifest sets ``parallelism``/``completions`` twice: in the Job spec, where Kubernetes reads them,
    and in the pod template's spec, because prefect-kubernetes (0.8) rejects a template without
    ``/spec/template/spec/completions`` and ``/spec/template/spec/parallelism`` (the API server drops those
    two unknown pod fields with a warning).

    Args:
        path: The base job template file (deployments/work-pool-template.json).
        image: The image runs default to, or None for Modelplane's.

    Returns:
        The template.
    """
    template: dict[str, Any] = json.loads(path.read_text())
    template["variables"]["properties"]["image"]["default"] = image or modelplane_image()
    return template


def process_pool_template(working_dir: pathlib.Path = REPO, python: str = sys.executable) -> dict[str, Any]:
    """Prefect's process-worker template with ``working_dir`` defaulting to this checkout, where the
    prefect.yaml entrypoints resolve (the process pool's copy of prefect.yaml has no pull step), and the
    flow-run command defaulting to Prefect's engine under ``python``, the interpreter Modelplane is installed in.

    With no command, Prefect 3.8's process worker starts each run through its workspace supervisor, which
    prepares a workspace (a ``uv run`` of the project when ``PREFECT_RUNNER_AUTO_INSTALL_DEPENDENCIES`` is on)
    and then execs the same ``-m prefect.engine``: one more import of Prefect per run, about 2 s of CPU, for a
    preparation this pool never uses (its runs are runs of this installation, in this checkout). A job
    variable ``command`` still overrides it per deployment or run.

    Args:
        working_dir: The directory runs start in.
        python: The interpreter runs start with.

    Returns:
        The template.
    """
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    template["variables"]["properties"]["working_dir"]["default"] = str(working_dir)
    template["variables"]["properties"]["command"]["default"] = f"{shlex.quote(python)} -m prefect.engine"
    return template


async def ensure_work_pool(client: PrefectClient, name: str, pool_type: str) -> bool:
    """Create the work pool ``name`` of ``pool_type`` (``kubernetes`` or ``process``) unless it exists.

    An existing pool is left as it is (a person may have tuned it).

    Args:
        client: The Prefect API client.
        name: The work pool's name.
        pool_type: ``kubernetes`` or ``process``.

    Returns:
        True when the pool was created, False when it existed.

    Raises:
        ValueError: A pool of that name exists with another type.
    """
    try:
        existing = await client.read_work_pool(name)
    except ObjectNotFound:
        existing = None
    if existing is not None:
        if existing.type != pool_type:
            raise ValueError(f"work pool {name!r} exists with type {existing.type!r}, not {pool_type!r}")
        return False
    template = kubernetes_pool_template() if pool_type == "kubernetes" else process_pool_template()
    await client.create_work_pool(
        WorkPoolCreate(
            name=name,
            type=pool_type,
            base_job_template=template,
            description=f"Modelplane flow runs ({pool_type}); see deployments/prefect.yaml",
        )
    )
    return True


def deploy_command(prefect_file: pathlib.Path = PREFECT_YAML) -> list[str]:
    """The documented registration command, run from the repository root (entrypoints resolve there).

    Args:
        prefect_file: The prefect.yaml to deploy (shown relative to the repository when inside it).

    Returns:
        The command's arguments.
    """
    shown = prefect_file.relative_to(REPO) if prefect_file.is_relative_to(REPO) else prefect_file
    return [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all", "--prefect-file", str(shown)]


def prefect_yaml_for_pool(
    pool: str,
    target: pathlib.Path,
    source: pathlib.Path = PREFECT_YAML,
    pool_type: str = "kubernetes",
    without: Collection[str] = (),
) -> pathlib.Path:
    """A copy of prefect.yaml whose entries all use work pool ``pool`` (keeping their job variables), without the
    entries named in ``without``.

    ``prefect deploy --all --pool NAME`` ignores ``--pool`` as soon as there are several deployments, so
    another pool (e.g. a local process pool) is named in a generated file instead. A process pool has no
    pull step: its runs start in the pool's ``working_dir``, this checkout (the image's WORKDIR is not there),
    and no ``PROMETHEUS_URL``: its runs inherit the worker's (:func:`inherited_environment`).

    Args:
        pool: The work pool every entry uses.
        target: The file to write.
        source: The prefect.yaml to copy.
        pool_type: ``kubernetes`` or ``process``.
        without: The names of the entries to leave out.

    Returns:
        ``target``, written.
    """
    config = load_prefect_yaml(source)
    config["deployments"] = [entry for entry in config["deployments"] if entry["name"] not in without]
    if pool_type != "kubernetes":
        config["pull"] = []
    for entry in config["deployments"]:
        work_pool = {**(entry.get("work_pool") or {}), "name": pool}
        if pool_type != "kubernetes":
            work_pool["job_variables"] = inherited_environment(work_pool.get("job_variables") or {})
        entry["work_pool"] = work_pool
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    return target


def inherited_environment(job_variables: dict[str, Any]) -> dict[str, Any]:
    """A process pool's job variables: without the settings a process worker passes on from its own environment
    (``PROMETHEUS_URL``), so its runs use the worker's Prometheus, or none (as the CLI), never a cluster address
    baked in at registration.

    Args:
        job_variables: An entry's job variables.

    Returns:
        A copy without the inherited variables in ``env``.
    """
    env = {key: value for key, value in (job_variables.get("env") or {}).items() if key not in INHERITED}
    return {**job_variables, "env": env}


def run_deploy(
    pool: str | None = None,
    env: dict[str, str] | None = None,
    pool_type: str = "kubernetes",
    on_line: Callable[[str], None] | None = None,
    without: Collection[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run :func:`deploy_command` from the repository root, capturing its output (each stdout line also given to
    ``on_line`` as it comes, for progress); ``pool`` other than the Kubernetes pool of prefect.yaml, or deployments
    left out (``without``: e.g. :data:`CONTROL_LOOP`, which a serving loop runs), deploys a generated copy.

    Args:
        pool: The work pool to deploy to, or None for prefect.yaml's Kubernetes pool.
        env: The command's environment, or None for this process's.
        pool_type: ``kubernetes`` or ``process``.
        on_line: Called with each stdout line as it is printed, or None.
        without: The names of the deployments to leave out.

    Returns:
        The finished command, with its output.
    """
    if (pool is None or pool == KUBERNETES_POOL) and pool_type == "kubernetes" and not without:
        return run_streaming(deploy_command(), env, on_line)
    with tempfile.TemporaryDirectory(prefix="modelplane-deploy-") as tmp:
        generated = prefect_yaml_for_pool(
            pool or KUBERNETES_POOL, pathlib.Path(tmp) / "prefect.yaml", pool_type=pool_type, without=without
        )
        return run_streaming(deploy_command(generated), env, on_line)


REGISTERED = re.compile(r"Deployment '([^'/]+/[^']+)'")
"""What ``prefect deploy`` prints once per deployment it registered (in a panel: ``Deployment 'flow/name'
successfully created with id ...``)."""


def run_streaming(
    command: list[str], env: dict[str, str] | None, on_line: Callable[[str], None] | None
) -> subprocess.CompletedProcess[str]:
    """``command`` from the repository root, its output captured as ``subprocess.run`` does, and each stdout line
    handed to ``on_line`` as it is printed (stderr read beside it, so neither pipe fills). Its console is wide,
    so a panel's line is not wrapped.

    Args:
        command: The command's arguments.
        env: Its environment, or None for this process's.
        on_line: Called with each stdout line as it is printed, or None.

    Returns:
        The finished command, with its exit code, stdout and stderr.
    """
    environment = {**(env if env is not None else os.environ), "COLUMNS": "200"}
    process = subprocess.Popen(
        command, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stderr is not None
    stderr = process.stderr
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(stderr), daemon=True)
    reader.start()
    lines = []
    for line in process.stdout:
        lines.append(line)
        if on_line is not None:
            on_line(line)
    code = process.wait()
    reader.join()
    return subprocess.CompletedProcess(command, code, "".join(lines), "".join(errors))
