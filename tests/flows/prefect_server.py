"""A real Prefect server for platform tests: `prefect server start` on 127.0.0.1 with a random port and a
temporary PREFECT_HOME, a process worker, and small REST helpers. Processes are stopped by PID."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from flows.deployments import load_entry_flow
from tasks.clients.cluster import ObjectRef
from tests.prefect_db import SERVER_ENV, seed_prefect_home, trust_env
from tests.servers.processes import stop_process
from tests.waiting import wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrefectServer:
    """A running `prefect server start` and the processes the tests start against it."""

    def __init__(self, home: pathlib.Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/api"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self.env = {
            **env,
            "PREFECT_HOME": str(home),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            # Runs are created by the tests; the scheduler would add default-parameter runs of the 60 s schedule.
            "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_WORKER_PREFETCH_SECONDS": "2",
            # The worker and the runs retry a 503 (this server's SQLite busy on a loaded 2-core machine) 10
            # times, not Prefect's 5: CI saw a worker give up submitting a run after 5 (reported CRASHED).
            "PREFECT_CLIENT_MAX_RETRIES": "10",
            "PYTHONPATH": str(REPO),
            **SERVER_ENV,  # the seeded home holds the block types (tests/prefect_db.py)
            **trust_env(),  # its clients trust one certificate (plain HTTP throughout)
        }
        self.processes: list[subprocess.Popen[bytes]] = []
        # A write waits behind the SQLite lock on a loaded machine (CI: a create_flow_run took over 30 s).
        self.client = httpx.Client(base_url=self.api_url, timeout=120)

    # ------------------------------------------------------------------------------ processes

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a process against this server (its output in <home>/<name>.log, ``env`` over the server's
        environment); stopped with the server."""
        log = open(self.home / f"{name}.log", "ab")
        proc = subprocess.Popen(
            args,
            cwd=REPO,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.processes.append(proc)
        return proc

    def start(self, timeout: float = 300) -> None:
        """Start the server and wait until /health answers (minutes on a machine shared by several test runs)."""
        seed_prefect_home(self.home)
        proc = self.spawn(
            "server",
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"prefect server exited {proc.returncode}: {self.log('server')[-3000:]}")
            try:
                if self.client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"prefect server not healthy in {timeout}s: {self.log('server')[-3000:]}")

    def start_worker(
        self, pool: str, timeout: float = 60, worker_type: str = "process", env: dict[str, str] | None = None
    ) -> None:
        """Start `prefect worker start --pool POOL --type TYPE` and wait until the pool is READY."""
        proc = self.spawn(
            "worker", [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", worker_type], env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited {proc.returncode}: {self.log('worker')[-3000:]}")
            if self.get(f"/work_pools/{pool}").get("status") == "READY":
                return
            time.sleep(0.5)
        raise RuntimeError(f"worker not ready in {timeout}s: {self.log('worker')[-3000:]}")

    def stop(self) -> None:
        self.client.close()
        for proc in reversed(self.processes):
            stop_process(proc, timeout=15)

    def log(self, name: str) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # ------------------------------------------------------------------------------ REST helpers

    def request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        """One API call; 503 (SQLite busy under load) is retried, as Prefect's own client does, and so is a
        read (GET, ``*/filter``) that timed out while the server's SQLite was busy on a loaded machine, and a
        call that changes nothing when repeated (a read, PATCH, PUT, DELETE) whose kept-alive connection the
        server reset (a full run: a PATCH of an automation failed with "Connection reset by peer")."""
        is_read = method == "GET" or path.endswith("/filter")
        repeatable = is_read or method in ("PATCH", "PUT", "DELETE")
        attempts = 10  # 503s span up to ~30 s of SQLite contention when four test workers share two cores
        for attempt in range(attempts):
            try:
                response = self.client.request(method, path, json=body)
            except httpx.TimeoutException:
                if not is_read or attempt == attempts - 1:
                    raise
                continue
            except (httpx.ReadError, httpx.RemoteProtocolError):
                if not repeatable or attempt == attempts - 1:
                    raise
                continue
            if response.status_code != 503:
                break
            time.sleep(min(0.5 * (attempt + 1), 5.0))
        return response

    def get(self, path: str) -> Any:
        response = self.request("GET", path)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: Any) -> Any:
        response = self.request("POST", path, body)
        response.raise_for_status()
        return response.json() if response.content else None

    def patch(self, path: str, body: Any) -> None:
        self.request("PATCH", path, body).raise_for_status()

    def deployment(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The stored deployment of one prefect.yaml entry."""
        return self.get(f"/deployments/name/{load_entry_flow(entry).name}/{entry['name']}")

    def find_deployment(self, entry: dict[str, Any], name: str) -> dict[str, Any] | None:
        """The deployment ``name`` of the entry's flow, or None."""
        response = self.request("GET", f"/deployments/name/{load_entry_flow(entry).name}/{name}")
        return response.json() if response.status_code == 200 else None

    def create_run(self, deployment_id: str, parameters: dict[str, Any]) -> dict[str, Any]:
        return self.post(f"/deployments/{deployment_id}/create_flow_run", {"parameters": parameters})

    def runs(self, deployment_id: str) -> list[dict[str, Any]]:
        return self.post(
            "/flow_runs/filter", {"deployments": {"id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_DESC"}
        )

    def wait_for_run(self, run_id: str, timeout: float = 240) -> dict[str, Any]:
        """The run once its state is final, polled less often as the wait goes on (tests/waiting.py)."""
        seen: dict[str, Any] = {}

        def final() -> dict[str, Any] | None:
            seen.update(self.get(f"/flow_runs/{run_id}"))
            return dict(seen) if seen["state"] and seen["state"]["type"] in TERMINAL else None

        try:
            return wait_for(final, timeout, f"flow run {run_id}", interval=0.5)
        except AssertionError:
            raise AssertionError(
                f"flow run {run_id} not finished in {timeout}s: {seen.get('state')}\n{self.log('worker')[-3000:]}"
            ) from None

    def run_logs(self, run_id: str) -> str:
        logs = self.post("/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}, "limit": 200})
        return "\n".join(entry["message"] for entry in logs) + "\n--- worker ---\n" + self.log("worker")[-3000:]

    def events(self, prefix: str, related: str | None = None) -> list[dict[str, Any]]:
        event_filter: dict[str, Any] = {"event": {"prefix": [prefix]}}
        if related:
            event_filter["related"] = {"id": [related]}
        return self.post("/events/filter", {"filter": event_filter, "limit": 50})["events"]

    def emit(self, subject: ObjectRef, transition: str) -> None:
        """Emit ``transition`` about ``subject`` with tasks.clients.events from another process, as a flow would."""
        self.emit_all([(subject, transition)])

    def emit_all(self, events: list[tuple[ObjectRef, str]], timeout: float = 180) -> None:
        """Emit every event from one process, back to back, with tasks.clients.events (as one flow run would), and
        wait until Prefect's events worker has sent them all.

        The worker's websocket waits for the server's pong without a bound of its own; a server busy with other
        runs' writes on a loaded CI runner has taken over a minute to answer. On a timeout the child's output so
        far is in the failure."""
        code = (
            "import json, sys; from prefect.events.worker import EventsWorker; from engine.api.refs import ObjectRef; "
            "from tasks.clients.events import emit_change; "
            "sent = [emit_change(ObjectRef(*s), t) for s, t in json.loads(sys.argv[1])]; EventsWorker.drain_all(); "
            "sys.exit(0 if all(sent) else 1)"
        )
        payload = json.dumps([[[s.api_version, s.kind, s.name, s.namespace], t] for s, t in events])
        try:
            result = subprocess.run(
                [sys.executable, "-c", code, payload],
                cwd=REPO,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as expired:
            raise AssertionError(
                f"emitting {len(events)} event(s) took over {timeout:.0f}s: {expired.stderr!r}"
            ) from None
        assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """One real Prefect server for the module (started ~10 s; stopped by PID with its worker)."""
    server = PrefectServer(tmp_path_factory.mktemp("prefect-home"))
    try:
        server.start()
        yield server
    finally:
        server.stop()
