"""Pytest plugin: a real Prometheus scraping the fake vLLM exporter, shared by the whole session.

Enable with ``pytest_plugins = ["tests.servers.promtest.fixture"]``. Fixtures (session scope):

- ``vllm_exporter`` -> :class:`~tests.servers.promtest.exporter.FakeVllmExporter` on 127.0.0.1.
- ``prometheus`` -> :class:`PrometheusProcess`: ``/usr/bin/prometheus`` (or ``$PROMETHEUS_BIN``, or
  ``prometheus`` on ``PATH``) on 127.0.0.1:<free port>, a temporary TSDB, ``scrape_interval`` and
  ``evaluation_interval`` of 1 s, one job ``vllm`` scraping the exporter with ``honor_labels: true``.
  It has ``.url``, ``.pid``, ``.stop()``, ``.start()`` (same port and data directory; a no-op when
  running), ``.query(promql)``, ``.wait_for(query, predicate, timeout)`` and
  ``.wait_for_history(selector, seconds)``. A test that stops it must restart it (``try/finally``).

Timing and tolerance: ``rate(x[W])`` divides the (extrapolated) increase by ``W``, so it under-reports
until the series has samples spanning the whole window; it is accurate from about ``W + 2`` scrapes
after the load was set. With 1 s scrapes and a counter that grows linearly in real time the error is
then the scrape jitter (the sample is stamped at scrape start, the exporter computes the value a few
milliseconds later): well under 5 %. Ratios of two rates over the same samples (average tokens) are
exact up to floating point. Tests therefore use a short window (``PrometheusMetrics(rate_window="5s")``
or ``PROMETHEUS_RATE_WINDOW=5s`` with ``PrometheusMetrics.from_env``) rather than the production ``1m``,
call ``wait_for_history(selector, 6)`` after setting a load, and accept +-15 %. Starting (or
restarting) takes about 6 s: Prometheus applies scrape targets on a 5 s tick.

The process is torn down by PID at the end of the session, and at interpreter exit as a fallback.
A missing binary is a test error, not a skip: CI installs it (``apt-get install prometheus``).
"""

from __future__ import annotations

import atexit
import ctypes
import math
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import yaml

from tests.servers.processes import stop_process
from tests.servers.promtest.exporter import FakeVllmExporter

JOB = "vllm"
DEFAULT_BINARY = "/usr/bin/prometheus"

Result = list[dict[str, Any]]


class PrometheusError(RuntimeError):
    """The Prometheus test process could not be started or queried."""


def find_binary() -> str:
    """The Prometheus binary: ``$PROMETHEUS_BIN``, ``/usr/bin/prometheus`` or ``prometheus`` on PATH."""
    candidates = [os.environ.get("PROMETHEUS_BIN"), DEFAULT_BINARY, shutil.which("prometheus")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise PrometheusError(
        "Prometheus binary not found (looked at $PROMETHEUS_BIN, /usr/bin/prometheus and PATH); "
        "install it with `apt-get install prometheus` (CI does this in .ci/run)"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def write_config(
    path: pathlib.Path, targets: list[str], interval: str = "1s", extra_jobs: dict[str, str] | None = None
) -> None:
    """Write a Prometheus config with one job scraping ``targets`` every ``interval``, plus one job per
    ``extra_jobs`` entry (job name -> target, ``honor_labels: true`` as a Pushgateway needs)."""
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {"job_name": JOB, "honor_labels": True, "static_configs": [{"targets": targets}]},
            *(
                {"job_name": name, "honor_labels": True, "static_configs": [{"targets": [target]}]}
                for name, target in (extra_jobs or {}).items()
            ),
        ],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


class PrometheusProcess:
    """One Prometheus server process on 127.0.0.1 that can be stopped and restarted in place."""

    def __init__(
        self,
        binary: str,
        workdir: pathlib.Path,
        targets: list[str],
        host: str = "127.0.0.1",
        extra_jobs: dict[str, str] | None = None,
    ) -> None:
        self.binary = binary
        self.workdir = workdir
        self.host = host
        self.port = free_port(host)
        self.data_dir = workdir / "data"
        self.config_path = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"
        self.targets = list(targets)
        self.extra_jobs = dict(extra_jobs or {})
        self._process: subprocess.Popen[bytes] | None = None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_config(self.config_path, self.targets, extra_jobs=self.extra_jobs)

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the running process, or None when stopped."""
        return self._process.pid if self.running else None

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        """The command line used to start Prometheus."""
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            "--storage.tsdb.retention.time=2h",
            f"--web.listen-address={self.host}:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]

    def start(self, timeout: float = 20.0) -> None:
        """Start (or restart) on the same port and data directory; wait for ``/-/ready`` and a fresh scrape.

        A no-op when already running.
        """
        if self.running:
            return
        started = time.time()
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        _live_processes[self._process.pid] = self._process
        self._wait_ready(timeout)
        # After a restart the old ``up`` samples are still queryable: wait for a scrape of this process.
        # The scrape manager applies its targets up to 5 s after start, so this takes ~5-6 s.
        expected = len(self.targets)
        self.wait_for(f'timestamp(up{{job="{JOB}"}})', lambda result: _all_after(result, started, expected), timeout)
        self.wait_for(f'up{{job="{JOB}"}} == 1', lambda result: len(result) == expected, timeout)
        for job in self.extra_jobs:
            self.wait_for(f'up{{job="{job}"}} == 1', lambda result: len(result) == 1, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process by PID (SIGTERM, then SIGKILL after ``timeout``)."""
        if self._process is None:
            return
        stop_process(self._process, timeout)
        _live_processes.pop(self._process.pid, None)
        self._process = None

    def query(self, promql: str) -> Result:
        """Run an instant query and return ``data.result``."""
        response = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        body = response.json()
        if body.get("status") != "success":
            raise PrometheusError(f"query {promql!r} failed: {body.get('errorType')}: {body.get('error')}")
        return list(body["data"]["result"])

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[Result], bool],
        timeout: float = 20.0,
        interval: float = 0.25,
    ) -> Result:
        """Poll ``promql`` until ``predicate(result)`` holds; return that result or raise AssertionError."""
        deadline = time.monotonic() + timeout
        last: Result | str = "no answer yet"
        while True:
            try:
                result = self.query(promql)
                if predicate(result):
                    return result
                last = result
            except (requests.RequestException, ValueError, PrometheusError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise AssertionError(f"after {timeout}s, {promql!r} still gives {last!r}")
            self._check_alive()
            time.sleep(interval)

    def wait_for_history(self, selector: str, seconds: float, timeout: float = 30.0) -> None:
        """Wait until every series matching ``selector`` has samples spanning ``seconds`` (1 s scrapes).

        Call it after setting a load and before reading ``rate(x[W])`` with ``seconds >= W``: from then
        on the rate is no longer ramping up. Example: ``wait_for_history('vllm:request_success_total{
        namespace="ns"}', 6)``.
        """
        needed = math.ceil(seconds) + 1
        window = 2 * math.ceil(seconds) + 5
        self.wait_for(
            f"min(count_over_time({selector}[{window}s]))",
            lambda result: bool(result) and float(result[0]["value"][1]) >= needed,
            timeout,
        )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise PrometheusError(f"Prometheus at {self.url} not ready after {timeout}s\n{self.log_tail()}")

    def _check_alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            code = self._process.returncode
            raise PrometheusError(f"Prometheus exited with code {code}\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the Prometheus log, for error messages."""
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _all_after(result: Result, epoch: float, expected: int) -> bool:
    """Whether ``result`` has ``expected`` samples whose values (timestamps) are all after ``epoch``."""
    return len(result) == expected and all(float(row["value"][1]) >= epoch for row in result)


_live_processes: dict[int, subprocess.Popen[bytes]] = {}


def _die_with_parent() -> None:
    """In the child before exec: have Linux send SIGTERM if pytest dies without cleaning up."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the session finalizer and atexit still stop it


@atexit.register
def _kill_leftovers() -> None:
    """Interpreter-exit fallback: stop every Prometheus this module started, by PID."""
    for process in list(_live_processes.values()):
        stop_process(process, 5)
    _live_processes.clear()


@pytest.fixture(scope="session")
def vllm_exporter() -> Iterator[FakeVllmExporter]:
    """The fake vLLM exporter shared by the session (use distinct model names per test)."""
    exporter = FakeVllmExporter().start()
    try:
        yield exporter
    finally:
        exporter.stop()


@pytest.fixture(scope="session")
def prometheus(
    vllm_exporter: FakeVllmExporter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusProcess]:
    """A real Prometheus scraping ``vllm_exporter`` every second; a test that stops it must restart it."""
    try:
        binary = find_binary()
    except PrometheusError as exc:
        pytest.fail(str(exc), pytrace=False)
    server = PrometheusProcess(binary, tmp_path_factory.mktemp("prometheus"), [vllm_exporter.address])
    try:
        server.start()
        yield server
    finally:
        server.stop()
