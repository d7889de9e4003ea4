"""Run work in one replica at a time: Lease election (:mod:`tasks.leader`), health endpoints, graceful shutdown.

``modelplane serve-deployments --leader-elect`` runs the periodic lifecycles (optimize, watch-models, the
resyncs) in one long-lived process; with two replicas only the Lease holder serves them. The process:

1. serves ``/healthz`` (200 while its election loop is alive) and ``/readyz`` (200 while it leads; 503 as a
   standby) on ``--health-port``, for the Pod's liveness and readiness probes;
2. waits as a standby until it holds the Lease (a standby takes over within the lease duration, 15 s, plus one
   retry period, 2 s, of the leader's loss);
3. runs the work while a thread renews the Lease; if a renewal fails for the renew deadline the process exits
   at once with :data:`LOST_LEASE_EXIT` (as client-go's controllers do: the Pod restarts as a standby, and two
   replicas never both act);
4. on SIGTERM (the Pod's deletion) stops, and releases the Lease so a standby takes over at its next try.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from tasks.clients.cluster import Cluster
from tasks.leader import LeaderElector, LeaseConfig

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment

    from tasks.served_runs import ServedDeployment

log = logging.getLogger(__name__)

LOST_LEASE_EXIT = 70
"""Exit code of a process that lost its Lease while leading (EX_SOFTWARE): the Pod restarts as a standby."""


def health_server(elector: LeaderElector, alive: Callable[[], bool], port: int) -> ThreadingHTTPServer:
    """``/healthz`` and ``/readyz`` on 0.0.0.0:``port`` (0: any free port), served from a daemon thread.

    Args:
        elector: The leader elector (``/readyz`` is 200 while it leads).
        alive: Whether the election loop is alive (``/healthz``).
        port: The port to listen on; 0 for any free one.

    Returns:
        The running server (``server_address`` says its port).
    """

    class Probe(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            checks: dict[str, Callable[[], bool]] = {"/healthz": alive, "/readyz": lambda: elector.is_leader}
            check = checks.get(self.path.split("?")[0])
            ok = check is not None and check()
            body = (f"{'ok' if ok else 'not ready'}; holder {elector.holder or '-'}\n").encode()
            self.send_response(404 if check is None else 200 if ok else 503)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: not worth a log line
            return

    server = ThreadingHTTPServer(("0.0.0.0", port), Probe)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def run_elected(
    work: Callable[[], None],
    cluster: Cluster,
    config: LeaseConfig,
    health_port: int | None,
    on_leading: Callable[[str | None], None] | None = None,
) -> None:
    """Run ``work`` (blocking) once this replica holds the Lease ``config`` names; see the module docs.
    ``on_leading`` is called first, with the identity the Lease was taken over from (None when it was free), to
    clean up after a replica that died leading.

    Args:
        work: What to run while leading; it blocks until the process ends.
        cluster: The cluster the Lease lives in.
        config: The Lease's name, namespace and this replica's identity.
        health_port: The port of ``/healthz`` and ``/readyz``, or None for no probes.
        on_leading: Called before ``work`` with the previous holder's identity, or None.
    """
    elector = LeaderElector(cluster, config)
    stop = threading.Event()
    loop_alive = threading.Event()
    loop_alive.set()

    def terminate(signum: int, frame: Any) -> None:
        stop.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, terminate)
    server = health_server(elector, loop_alive.is_set, health_port) if health_port is not None else None
    try:
        if not elector.acquire(stop):
            return
        threading.Thread(target=_renew_or_exit, args=(elector, stop, loop_alive), name="lease", daemon=True).start()
        if on_leading is not None:
            on_leading(elector.taken_from)
        work()
    finally:
        stop.set()
        elector.release()
        if server is not None:
            server.shutdown()


def serve_while_leading(
    served: Sequence[RunnerDeployment], cluster: Cluster, config: LeaseConfig, health_port: int | None
) -> None:
    """Serve ``served`` with Prefect's ``serve`` while this replica holds the Lease, after handing back the runs a
    replica that died leading left behind (:mod:`tasks.served_runs`).

    Args:
        served: The runner deployments to serve.
        cluster: The cluster the Lease lives in.
        config: The Lease's name, namespace and this replica's identity.
        health_port: The port of ``/healthz`` and ``/readyz``, or None for no probes.
    """
    from prefect import serve

    from flows.deployments import SERVE_PREFETCH_S, SERVE_QUERY_S
    from tasks.served_runs import ServedDeployment

    deployments = [ServedDeployment(str(deployment.flow_name), deployment.name) for deployment in served]
    run_elected(
        lambda: serve(*served, query_seconds=SERVE_QUERY_S, prefetch_seconds=SERVE_PREFETCH_S),
        cluster,
        config,
        health_port,
        on_leading=lambda previous: hand_back_runs(deployments, previous),
    )


def hand_back_runs(deployments: list[ServedDeployment], previous: str | None) -> None:
    """Hand back what the previous leader left (logged); when Prefect's API cannot be asked, say so and serve
    anyway: the runs it left then wait for their concurrency slots' leases to expire, as without this step.

    Args:
        deployments: The served deployments whose runs are handed back.
        previous: The identity of the replica that led before, or None when the Lease was free.
    """
    import httpx

    from tasks.served_runs import recover_orphaned_runs

    try:
        moved = recover_orphaned_runs(deployments, previous)
    except httpx.HTTPError as exc:
        log.error("could not hand back the previous leader's runs (%s): they hold their slots until they expire", exc)
        return
    if moved:
        log.warning("handed back %d runs of the previous leader: %s", len(moved), "; ".join(moved))


def _renew_or_exit(elector: LeaderElector, stop: threading.Event, loop_alive: threading.Event) -> None:
    elector.keep_renewing(stop)
    if not stop.is_set():  # lost, not stopping: leave at once, before this replica acts again
        loop_alive.clear()
        log.error("exiting: this replica no longer holds the Lease %s", elector.config.name)
        logging.shutdown()
        os._exit(LOST_LEASE_EXIT)
