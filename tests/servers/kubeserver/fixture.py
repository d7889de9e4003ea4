"""pytest fixtures for the test Kubernetes API server.

Use with ``pytest_plugins = ["tests.servers.kubeserver.fixture"]`` (already registered in ``tests/conftest.py``).

* ``kube_server`` (session): a running :class:`KubeServer` subprocess.
* ``kube_namespace`` (function): a fresh namespace such as ``t-1a2b3c4d``, created on the server
  (like a cluster, the server answers 404 to a create in a namespace that does not exist; use
  :meth:`KubeServer.create_namespace` for more).
"""

from __future__ import annotations

import atexit
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers.kubeserver.jobs import kubeconfig
from tests.servers.kubeserver.server import USER_TOKEN_PREFIX
from tests.servers.processes import stop_process

REPO = pathlib.Path(__file__).resolve().parents[3]


class KubeServer:
    """Handle on a running test API server subprocess."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, workdir: pathlib.Path) -> None:
        self._proc = proc
        self.port = port
        self.pid = proc.pid
        self.url = f"http://127.0.0.1:{port}"
        self.workdir = workdir
        path = workdir / "kubeconfig"
        path.write_text(kubeconfig(self.url, "kubeserver-test-token"))
        self.kubeconfig = str(path)

    def kubeconfig_as(self, user: str, namespace: str = "default") -> str:
        """A kubeconfig whose requests the server logs as ``user`` (``requests()[i]["user"]``), e.g. a service
        account ``system:serviceaccount:<namespace>:<name>``; returns its path."""
        path = self.workdir / f"kubeconfig-{user.replace(':', '_')}"
        path.write_text(kubeconfig(self.url, USER_TOKEN_PREFIX + user, namespace))
        return str(path)

    # ------------------------------------------------------------------------------------ clients

    def api_client(self) -> Any:
        """A fresh ``kubernetes.client.ApiClient`` configured from the generated kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig, context="kubeserver")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(
                f"kubeserver {method} {path} -> {exc.code}: {exc.read().decode(errors='replace')}"
            ) from None
        return json.loads(raw) if raw else None

    # ----------------------------------------------------------------------------------- controls

    def stats(self) -> dict[str, Any]:
        """Request counts: ``total``, ``by_verb`` {verb: n}, ``by_resource`` [{verb, resource, subresource, count}]
        and ``by_key`` {"<verb> <resource>[/<subresource>]": n}. Verbs: get, list, watch, create, update,
        patch, delete, deletecollection, discovery."""
        return self._call("GET", "/_test/stats")

    def count(self, verb: str, resource: str | None = None, subresource: str | None = None) -> int:
        """Requests seen for ``verb`` (optionally only for ``resource``/``subresource``) since the last reset."""
        st = self.stats()
        if resource is None and subresource is None:
            return int(st["by_verb"].get(verb, 0))
        return sum(
            r["count"]
            for r in st["by_resource"]
            if r["verb"] == verb
            and (resource is None or r["resource"] == resource)
            and (subresource is None or r["subresource"] == subresource)
        )

    def requests(self, limit: int = 0) -> list[dict[str, Any]]:
        """The most recent API requests (up to 2,000; oldest first) as ``{method, path, verb, code}``,
        ``path`` including the query string. Cleared by :meth:`reset_stats`."""
        return self._call("GET", f"/_test/requests?limit={limit}")

    def reset_stats(self) -> None:
        """Zero the request counters (and the request log)."""
        self._call("POST", "/_test/reset-stats")

    def inject(self, method: str, path_regex: str, status: int, times: int = 1, **extra: Any) -> None:
        """Make the next ``times`` requests with ``method`` ("*" = any) whose path matches ``path_regex``
        (``re.search`` on the URL path, no query) fail with ``status`` and a proper ``Status`` body.
        ``extra`` may set ``message``, ``reason`` or ``retry_after``."""
        self._call(
            "POST",
            "/_test/inject",
            {"method": method, "path_regex": path_regex, "status": status, "times": times, **extra},
        )

    def clear_injections(self) -> None:
        """Drop all pending injections."""
        self._call("POST", "/_test/clear-injections")

    def reset(self) -> None:
        """Drop all objects except CustomResourceDefinitions."""
        self._call("POST", "/_test/reset")

    def create_namespace(self, name: str) -> None:
        """Create a Namespace unless it exists (idempotent)."""
        try:
            self._call(
                "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        except RuntimeError as exc:
            if "-> 409" not in str(exc):
                raise

    def install_crds(self, crds: list[dict[str, Any]]) -> None:
        """Create each CRD unless one with the same name exists (idempotent)."""
        for crd in crds:
            name = crd["metadata"]["name"]
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            req = urllib.request.Request(self.url + path, method="GET")
            try:
                with urllib.request.urlopen(req, timeout=30):
                    continue
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
            try:
                self._call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            except RuntimeError as exc:
                if "-> 409" not in str(exc):
                    raise

    # ---------------------------------------------------------------------------------- lifecycle

    def alive(self) -> bool:
        """Whether the subprocess is still running."""
        return self._proc.poll() is None

    def stop(self) -> None:
        """Terminate the subprocess (by PID) and wait for it."""
        stop_process(self._proc)


def start_kube_server(workdir: str | os.PathLike[str] | None = None, timeout: float = 15.0) -> KubeServer:
    """Start the server subprocess, wait until it listens, and return its handle."""
    wd = pathlib.Path(workdir) if workdir is not None else pathlib.Path(tempfile.mkdtemp(prefix="kubeserver-"))
    wd.mkdir(parents=True, exist_ok=True)
    ready = wd / f"ready-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    log = open(wd / "kubeserver.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.servers.kubeserver", "--port", "0", "--ready-file", str(ready)],
        cwd=str(REPO),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"kubeserver exited with {proc.returncode}; see {wd / 'kubeserver.log'}")
        if time.monotonic() > deadline:
            os.kill(proc.pid, signal.SIGKILL)
            raise RuntimeError(f"kubeserver did not become ready in {timeout}s; see {wd / 'kubeserver.log'}")
        time.sleep(0.02)
    server = KubeServer(proc, int(ready.read_text()), wd)
    atexit.register(server.stop)
    return server


@pytest.fixture(scope="session")
def kube_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """A Kubernetes-API-compatible server shared by the whole session."""
    server = start_kube_server(tmp_path_factory.mktemp("kubeserver"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube_namespace(kube_server: KubeServer) -> str:
    """A fresh namespace for one test, created on the session's server (as on a cluster, creating an
    object in a namespace that does not exist is 404)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube_server.create_namespace(name)
    return name
