"""Stopping the test components' subprocesses (Prometheus, moto, the registry, the API test server, Prefect)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_process(process: subprocess.Popen, timeout: float = 5.0, group: bool = False) -> None:
    """SIGTERM ``process`` (its whole process group with ``group``), SIGKILL it after ``timeout`` s, and reap it.

    Signals go by PID (never by name), and a process that already exited is left alone.
    """
    if process.poll() is not None:
        return
    kill = os.killpg if group else os.kill
    try:
        kill(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=5)
