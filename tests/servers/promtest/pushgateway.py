"""Pytest plugin: a real Prometheus Pushgateway, and a real Prometheus that scrapes it.

Fixtures (session scope, started only when a test asks):

- ``pushgateway`` -> :class:`PushgatewayProcess`: Debian's ``prometheus-pushgateway`` (or
  ``$PUSHGATEWAY_BIN``) on 127.0.0.1:<free port>, no persistence. ``.url``, ``.pid``, ``.stop()``,
  ``.start()`` (same port), ``.metrics()`` (the exposition text), ``.groups()`` (``/api/v1/metrics``),
  ``.wipe()`` (delete every group, between tests).
- ``prometheus_pushgateway`` -> :class:`~tests.servers.promtest.fixture.PrometheusProcess` scraping the fake vLLM
  exporter (job ``vllm``) and the Pushgateway (job ``pushgateway``, ``honor_labels: true`` as a cluster's
  Prometheus is configured for a Pushgateway) every second.

A missing binary is a test error, not a skip: CI installs it (``dev.sh`` ``setup_services``).
Processes are stopped by PID at the end of the session.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.servers.processes import stop_process
from tests.servers.promtest.exporter import FakeVllmExporter
from tests.servers.promtest.fixture import PrometheusProcess, _die_with_parent, _live_processes, find_binary, free_port

DEFAULT_BINARY = "/usr/bin/prometheus-pushgateway"


def find_pushgateway() -> str:
    """The Pushgateway binary: ``$PUSHGATEWAY_BIN``, Debian's path, or ``prometheus-pushgateway``/``pushgateway`` on PATH."""
    for candidate in (
        os.environ.get("PUSHGATEWAY_BIN"),
        DEFAULT_BINARY,
        shutil.which("prometheus-pushgateway"),
        shutil.which("pushgateway"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(
        "Pushgateway binary not found; install it with `apt-get install prometheus-pushgateway` (dev.sh does)"
    )


class PushgatewayProcess:
    """One Pushgateway on 127.0.0.1 that can be stopped and restarted on the same port (state is lost)."""

    def __init__(self, binary: str, workdir: pathlib.Path, host: str = "127.0.0.1") -> None:
        self.binary = binary
        self.host = host
        self.port = free_port(host)
        self.log_path = workdir / "pushgateway.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``."""
        return f"http://{self.host}:{self.port}"

    @property
    def address(self) -> str:
        """``host:port``, the scrape target."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the running process, or None."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def start(self, timeout: float = 15.0) -> None:
        """Start (a no-op when running) and wait until ``/-/ready`` answers."""
        if self.pid is not None:
            return
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                # Debian's default persists to /var/lib/prometheus: an empty file name keeps it in memory.
                [
                    self.binary,
                    f"--web.listen-address={self.address}",
                    "--web.enable-admin-api",
                    "--persistence.file=",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        _live_processes[self._process.pid] = self._process  # type: ignore[assignment]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"pushgateway exited with {self._process.returncode}: {self.log_path.read_text()[-2000:]}"
                )
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"pushgateway at {self.url} not ready after {timeout}s")

    def stop(self) -> None:
        """Stop the process by PID."""
        if self._process is None:
            return
        stop_process(self._process, 5)
        _live_processes.pop(self._process.pid, None)
        self._process = None

    def metrics(self) -> str:
        """The exposition text Prometheus scrapes."""
        return requests.get(f"{self.url}/metrics", timeout=5).text

    def groups(self) -> list[dict[str, Any]]:
        """Every group the gateway holds (``/api/v1/metrics``)."""
        return list(requests.get(f"{self.url}/api/v1/metrics", timeout=5).json()["data"])

    def wipe(self) -> None:
        """Delete every group (admin API)."""
        requests.put(f"{self.url}/api/v1/admin/wipe", timeout=5).raise_for_status()


@pytest.fixture(scope="session")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PushgatewayProcess]:
    """A real Pushgateway for the session (tests wipe it or use their own namespaces)."""
    try:
        binary = find_pushgateway()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    gateway = PushgatewayProcess(binary, tmp_path_factory.mktemp("pushgateway"))
    try:
        gateway.start()
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture(scope="session")
def prometheus_pushgateway(
    vllm_exporter: FakeVllmExporter,
    pushgateway: PushgatewayProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PrometheusProcess]:
    """A real Prometheus scraping the fake vLLM exporter and the Pushgateway every second."""
    server = PrometheusProcess(
        find_binary(),
        tmp_path_factory.mktemp("prometheus-pgw"),
        [vllm_exporter.address],
        extra_jobs={"pushgateway": pushgateway.address},
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()
