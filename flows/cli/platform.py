"""Commands that put Modelplane on a Prefect platform: ``build-image`` (the one image), ``render-worker-manifests``
(the Kubernetes worker's install), ``register-deployments`` (work pool + deployments/prefect.yaml on a server)
and ``serve-deployments`` (the same deployments served from this process)."""

from __future__ import annotations

import os
import pathlib
import sys

import typer

from flows.cli.common import command, err, write_or_print
from flows.exitcodes import ExitCode, one_line

REPO = pathlib.Path(__file__).resolve().parents[2]
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"


@command("build-image", "image")
def build_image(
    build: bool = typer.Option(
        False, "--build", help="Build it: docker build -f deployments/Dockerfile -t REFERENCE ."
    ),
    push: bool = typer.Option(False, "--push", help="Build and push it (docker push REFERENCE)."),
    tag: str | None = typer.Option(None, "--tag", help="Another tag than the package version (a test build)."),
    repository: str | None = typer.Option(
        None, "--repository", help="Your registry's repository, e.g. registry.example.org/team/modelplane."
    ),
) -> None:
    """Print Modelplane's image reference ($MODELPLANE_IMAGE when set, else ghcr.io/modelplane/modelplane tagged
    with the package version: flows/image.py); --repository and --tag replace its parts; with --build or
    --push, run the docker commands from the repository root, each printed first.\f

    Args:
        build: ``--build``: Build it: docker build -f deployments/Dockerfile -t REFERENCE .
        push: ``--push``: Build and push it (docker push REFERENCE).
        tag: ``--tag``: Another tag than the package version (a test build).
        repository: ``--repository``: Your registry's repository, e.g. registry.example.org/team/modelplane.
    """
    import subprocess

    from flows.image import build_commands

    reference = checked_image(tag, repository)
    if not (build or push):
        sys.stdout.write(reference + "\n")
        return
    for step in build_commands(reference, push=push):
        err.print("$ " + " ".join(step))
        try:
            done = subprocess.run(step, cwd=REPO, check=False)
        except FileNotFoundError:
            sys.stderr.write(
                f"error: {step[0]} is not installed: build the image with it, or run the command above elsewhere\n"
            )
            raise typer.Exit(ExitCode.CANNOT_RUN) from None
        if done.returncode != 0:
            sys.stderr.write(f"error: {' '.join(step[:2])} failed with exit code {done.returncode}\n")
            raise typer.Exit(ExitCode.CANNOT_RUN)
    sys.stdout.write(reference + "\n")


@command("render-worker-manifests", "worker-manifests")
def render_worker_manifests(
    write: pathlib.Path | None = typer.Option(None, help="Write the files into this directory (deployments/worker)."),
) -> None:
    """Print the Prefect Kubernetes worker's install: worker.yaml (ServiceAccount, Role, Deployment) and values for
    Prefect's prefect-worker Helm chart, both with Modelplane's image ($MODELPLANE_IMAGE, else this version's).\f

    Args:
        write: ``--write``: Write the files into this directory (deployments/worker).
    """
    from flows.worker_manifests import render_worker_manifests as render

    checked_image()
    write_or_print(render(), write, "\n", lambda rendered: ", ".join(sorted(rendered)))


@command("serve-deployments", "serve")
def serve_deployments(
    leader_elect: bool = typer.Option(
        False, "--leader-elect", help="Serve only while this replica holds the Lease (replicas in a cluster)."
    ),
    lease_name: str = typer.Option("modelplane-serve", "--lease-name", help="The coordination.k8s.io/v1 Lease."),
    lease_namespace: str | None = typer.Option(
        None, "--lease-namespace", help="Its namespace (default: $POD_NAMESPACE, else 'default')."
    ),
    identity: str | None = typer.Option(
        None, "--identity", help="This replica's holder identity (default: $POD_NAME, else the host name)."
    ),
    health_port: int | None = typer.Option(
        None, "--health-port", help="Serve /healthz and /readyz (200 while leading) on this port."
    ),
    control_loop: bool = typer.Option(
        False,
        "--control-loop",
        help="Serve only the control loop (optimize, watch-models, the AIM and Kthena resyncs); the work pool runs "
        "the rest (register-deployments --without-control-loop).",
    ),
    cluster: str | None = typer.Option(
        None, "--cluster", help="Where the Lease lives (see the cluster parameter); default: in-cluster or kubeconfig."
    ),
) -> None:
    """Serve every deployment of deployments/prefect.yaml from this process, named '<name>-local', with its
    schedules and triggers (on the Prefect server of PREFECT_API_URL, else an ephemeral one). With --leader-elect,
    only the replica holding the Lease serves; a standby takes over within 17 s of the leader's loss (and hands
    back the runs the lost leader left), SIGTERM releases the Lease.\f

    Args:
        leader_elect: ``--leader-elect``: Serve only while this replica holds the Lease (replicas in a cluster).
        lease_name: ``--lease-name``: The coordination.k8s.io/v1 Lease.
        lease_namespace: ``--lease-namespace``: Its namespace (default: $POD_NAMESPACE, else 'default').
        identity: ``--identity``: This replica's holder identity (default: $POD_NAME, else the host name).
        health_port: ``--health-port``: Serve /healthz and /readyz (200 while leading) on this port.
        control_loop: ``--control-loop``: Serve only the control loop (optimize, watch-models, the AIM and Kthena
            resyncs); the work pool runs the rest (register-deployments --without-control-loop).
        cluster: ``--cluster``: Where the Lease lives (see the cluster parameter); default: in-cluster or kubeconfig.
    """
    from prefect import serve

    from flows.deployments import CONTROL_LOOP, SERVE_PREFETCH_S, SERVE_QUERY_S, runner_deployments

    served = runner_deployments(PREFECT_YAML, only=CONTROL_LOOP if control_loop else None)
    if not os.environ.get("PREFECT_API_URL"):
        err.print("PREFECT_API_URL is not set: serving against an ephemeral Prefect API")
    if not leader_elect:
        serve(*served, query_seconds=SERVE_QUERY_S, prefetch_seconds=SERVE_PREFETCH_S)
        return
    import socket

    from flows.leading import serve_while_leading
    from tasks.clients.cluster import ClusterError, connect
    from tasks.leader import LeaseConfig

    config = LeaseConfig(
        lease_name,
        lease_namespace or os.environ.get("POD_NAMESPACE") or "default",
        identity or os.environ.get("POD_NAME") or socket.gethostname(),
    )
    try:
        serve_while_leading(served, connect(cluster), config, health_port)
    except ClusterError as exc:
        sys.stderr.write(f"error: leader election on Lease {config.namespace}/{config.name}: {exc.message}\n")
        raise typer.Exit(ExitCode.CANNOT_RUN) from None


@command("register-deployments", "deploy")
def register_deployments(
    pool_type: str = typer.Option(
        "kubernetes",
        "--pool-type",
        help="'kubernetes' (deployments/work-pool-template.json) or 'process' (a local worker).",
    ),
    pool: str | None = typer.Option(
        None, "--pool", help="Work pool name (default modelplane-kubernetes / modelplane-process)."
    ),
    without_control_loop: bool = typer.Option(
        False,
        "--without-control-loop",
        help="Leave out the control loop's deployments: a serving loop runs them (serve-deployments --control-loop).",
    ),
) -> None:
    """Create the work pool if missing, then register every deployment of deployments/prefect.yaml on the
    Prefect server of PREFECT_API_URL (runs 'prefect --no-prompt deploy --all --prefect-file deployments/prefect.yaml').\f

    Args:
        pool_type: ``--pool-type``: 'kubernetes' (deployments/work-pool-template.json) or 'process' (a local worker).
        pool: ``--pool``: Work pool name (default modelplane-kubernetes / modelplane-process).
        without_control_loop: ``--without-control-loop``: Leave out the control loop's deployments: a serving loop runs
            them (serve-deployments --control-loop).
    """
    from flows.cli.progress import shown_progress
    from flows.deployments import CONTROL_LOOP, KUBERNETES_POOL, PROCESS_POOL, REGISTERED, load_prefect_yaml, run_deploy
    from tasks.progress import step

    if pool_type not in ("kubernetes", "process"):
        sys.stderr.write(f"error: --pool-type must be 'kubernetes' or 'process', not {pool_type!r}\n")
        raise typer.Exit(ExitCode.CANNOT_RUN)
    if not os.environ.get("PREFECT_API_URL"):
        sys.stderr.write(
            "error: PREFECT_API_URL is not set: point it at the Prefect server to deploy to (e.g. http://127.0.0.1:4200/api)\n"
        )
        raise typer.Exit(ExitCode.CANNOT_RUN)
    checked_image()
    name = pool or (KUBERNETES_POOL if pool_type == "kubernetes" else PROCESS_POOL)
    created = _ensure_pool(name, pool_type)
    left_out = CONTROL_LOOP if without_control_loop else ()
    err.print(f"work pool {name!r} ({pool_type}): {'created' if created else 'exists'}")
    with (
        shown_progress(),
        step(
            "register-deployments", total=len(load_prefect_yaml()["deployments"]) - len(left_out), unit="deployments"
        ) as done,
    ):
        registered: set[str] = set()

        def count(line: str) -> None:
            match = REGISTERED.search(line)
            if match and match.group(1) not in registered:
                registered.add(match.group(1))
                done.advance(note=match.group(1))

        result = run_deploy(
            pool=None if name == KUBERNETES_POOL else name, pool_type=pool_type, on_line=count, without=left_out
        )
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        sys.stderr.write(f"error: prefect deploy failed with exit code {result.returncode} (its output above)\n")
        raise typer.Exit(ExitCode.CANNOT_RUN)
    err.print(
        f"registered the deployments of deployments/prefect.yaml on {name!r}; start a worker: prefect worker start --pool {name}"
        + (" --type kubernetes" if pool_type == "kubernetes" else "")
    )


def checked_image(tag: str | None = None, repository: str | None = None) -> str:
    """Modelplane's image reference (flows/image.py); a malformed ``$MODELPLANE_IMAGE``, ``--repository`` or
    ``--tag`` is one ``error:`` line and exit 2.

    Args:
        tag: The ``--tag`` value, or None for the package version.
        repository: The ``--repository`` value, or None for Modelplane's.

    Returns:
        The image reference.

    Raises:
        typer.Exit: Code 2 after the ``error:`` line, when the reference is malformed.
    """
    from flows.image import image

    try:
        return image(tag, repository)
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(ExitCode.CANNOT_RUN) from None


def _ensure_pool(name: str, pool_type: str) -> bool:
    """Create the work pool ``name`` unless the server has it (True when created); one ``error:`` line and
    exit 2 when the server is unreachable or refuses it."""
    import asyncio

    from prefect.client.orchestration import get_client

    from flows.deployments import ensure_work_pool

    async def create_pool() -> bool:
        async with get_client() as client:
            return await ensure_work_pool(client, name, pool_type)

    try:
        return asyncio.run(create_pool())
    except Exception as exc:  # the server is unreachable or refuses the pool: one line, no traceback
        sys.stderr.write(f"error: work pool {name!r}: {type(exc).__name__}: {one_line(exc)}\n")
        raise typer.Exit(ExitCode.CANNOT_RUN) from None
