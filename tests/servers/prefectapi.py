"""A test process's own Prefect API: Prefect's ephemeral server app under uvicorn on 127.0.0.1, in a subprocess.

It is what ``prefect.server.api.server.SubprocessASGIServer`` starts (the same app factory and the same
ephemeral-server settings), started here without importing ``prefect.server`` into the test process: that
import costs about 3 s of CPU, paid by every pytest-xdist worker for a class whose work is one ``Popen``. The
app is wrapped in a watch that reports a request held for 20 s (tests/servers/prefectapi_app.py). The server's
output goes to ``api.log`` in the Prefect home, shown under a failed test that used the API.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import urllib.error
import urllib.request

from tests.prefect_db import SERVER_ENV
from tests.servers.processes import stop_process
from tests.waiting import wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
# What SubprocessASGIServer sets: no UI, the ephemeral server's set of services.
EPHEMERAL_SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
NO_TASK_RUN_RECORDS = {"PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED": "false"}
"""Less that set's task-run recorder, which writes every task run's states from its events into the database: no
test reads a task run from this API (the platform tests' servers record them, as a production server does), and
it was the API's busiest SQLite writer: over three local-flow modules the API took 31 s of CPU with it and 22 s
without (9.5 s of its about 22 s of serving; the rest is its start). Flow runs, their states, logs, artifacts and
events are stored as before."""


class PrefectApi:
    """A running ephemeral Prefect API on a free port of 127.0.0.1, its database in ``home`` (seeded by
    tests/prefect_db.py, so it starts without registering block types)."""

    def __init__(self, home: pathlib.Path) -> None:
        self.home = home
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.log_path = home / "api.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 300) -> None:
        """Start the server and wait until ``/health`` answers (minutes when four workers start theirs at once
        on a 2-core machine)."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--app-dir",
                    str(REPO),
                    "--factory",
                    "tests.servers.prefectapi_app:create_app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "error",
                    "--lifespan",
                    "on",
                ],
                env={
                    **os.environ,
                    "PREFECT_HOME": str(self.home),
                    **EPHEMERAL_SERVER_ENV,
                    **NO_TASK_RUN_RECORDS,
                    **SERVER_ENV,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            wait_for(self._answers, timeout, "the Prefect API to answer", interval=0.25)
        except AssertionError:
            self.stop()
            raise RuntimeError(f"the Prefect API did not answer in {timeout} s: {self.log()[-3000:]}") from None

    def _answers(self) -> bool:
        """Whether ``/health`` answers; a RuntimeError with the log's tail if the server has exited."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the Prefect API exited {self.process.returncode}: {self.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
