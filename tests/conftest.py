"""Shared pytest configuration: fixtures for the real components live in their own packages."""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.prefect_db import seed_prefect_home, trust_env

if TYPE_CHECKING:  # imported in the fixture: Prefect must not be imported before PREFECT_HOME is set below
    from tests.servers.prefectapi import PrefectApi

# Test Prefect servers report no telemetry (and so never contend on its database write).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# No test connects over TLS: the processes trust one certificate, not 140 loaded by every client (tests/prefect_db.py).
os.environ.update(trust_env())


def _private_prefect_home() -> str:
    """A Prefect home of this test process's own (removed at exit), set before Prefect is imported.

    Commands run without ``PREFECT_API_URL`` start an ephemeral API on ``$PREFECT_HOME/prefect.db``; with the
    default ``~/.prefect`` every pytest-xdist worker (and every other test run of the machine) migrated and
    wrote the same SQLite file, and a server starting while another held it failed ("database is locked").
    The subprocesses the tests start inherit it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    home = tempfile.mkdtemp(prefix=f"modelplane-tests-prefect-{worker}-", dir=memory_backed_directory())
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def memory_backed_directory() -> str | None:
    """``/dev/shm`` when the machine has it writable, else None (the default temporary directory).

    The worker's Prefect API keeps its SQLite database in the Prefect home: every commit and WAL checkpoint
    fsyncs, and on this machine /tmp is the disk the whole suite writes to; in memory a writer holds the lock
    for no fsync at all. It was tried against the in-process flow runs that waited out their 50 s timeout on
    one API write (three in about fifteen full runs): one such wait recurred with the database here, so fsync
    latency is not their cause, which is not established (the API's log is shown under a failed test)."""
    shm = pathlib.Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


os.environ["PREFECT_HOME"] = _private_prefect_home()

# The Kubernetes API test server and the Prometheus + fake vLLM exporter fixtures,
pytest_plugins = [
    # Under pytest-xdist, the tests of a module that shares a module-scoped fixture stay on one worker.
    "tests.grouping",
    "tests.servers.kubeserver.fixture",
    "tests.servers.promtest.fixture",
    # A real Prometheus Pushgateway (metrics actuation), and a Prometheus scraping it.
    "tests.servers.promtest.pushgateway",
    # Real S3 (moto[server]) and a Hugging Face protocol server (olah, offline) for the downloader.
    "tests.servers.s3test.fixture",
    "tests.servers.hftest.fixture",
    # Debian's docker-registry (plain, htpasswd, bearer token) for image discovery.
    "tests.servers.registry.fixture",
]

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"


@pytest.fixture(scope="session", autouse=True)
def migrated_prefect_home() -> pathlib.Path:
    """This worker's Prefect home holds the migrated database before any command starts an ephemeral API on it
    (tests/prefect_db.py: the migration is made once per machine, not once per home)."""
    return seed_prefect_home(pathlib.Path(os.environ["PREFECT_HOME"]))


_APIS: list[PrefectApi] = []
"""This process's Prefect API once a test asked for it (at most one)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used this worker's Prefect API shows what the API logged (uvicorn's errors, Prefect's
    warnings and errors: a database locked, a request it could not serve), so a run that waited on the API says
    why."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _APIS and "prefect_api" in getattr(item, "fixturenames", ()):
        logged = _APIS[0].log()
        if logged.strip():
            report.sections.append(("Prefect API log (last 5,000 characters)", logged[-5000:]))


@pytest.fixture(scope="session")
def prefect_api(migrated_prefect_home: pathlib.Path) -> Iterator[str]:
    """This worker's Prefect API, for its in-process flow runs and every command its tests start.

    Prefect's ephemeral server on this worker's migrated database (tests/servers/prefectapi.py; its log is
    ``api.log`` in the home), set as the API of this process and exported as ``PREFECT_API_URL`` to the commands
    started from now on. A command started with no API configured starts an ephemeral API of its own: about
    17 s of CPU each on this machine (importing the server, building the app, checking the migrations), where
    the same ``modelplane optimize --dry-run`` against a running API takes 5 s. The laptop path (no API
    configured) keeps its own test in tests/test_cli.py."""
    from prefect.context import refresh_global_settings_context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tests.servers.prefectapi import PrefectApi

    server = PrefectApi(migrated_prefect_home)
    server.start()
    _APIS.append(server)
    # Stopped at exit, after Prefect's own exit handlers (registered later, so run earlier) have sent the events
    # and logs its background workers still hold.
    atexit.register(server.stop)
    os.environ["PREFECT_API_URL"] = server.api_url
    # Threads that do not inherit the test's context (a watch, an executor's worker) read Prefect's process-wide
    # settings, made at import from an environment with no API: Prefect would start an ephemeral server of its
    # own for them, a second writer on this home's SQLite database.
    refresh_global_settings_context()
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield server.api_url


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    """The repository root."""
    return REPO


REQUIRE_COMPILED_YAML = "MODELPLANE_REQUIRE_COMPILED_YAML"
"""Set (by dev.sh, for every test run) when the compiled YAML reader must be built: a test of it fails then rather
than skipping, so CI never tests the Python reader alone by accident."""


def compiled_yaml_missing() -> str | None:
    """Why the compiled YAML reader (tasks/clients/cluster/yamlcompiled.py) is not there, or None when it is."""
    from tasks.clients.cluster import yamlcompiled

    reader = yamlcompiled.reader()
    return None if reader.startswith("compiled") else f"the compiled YAML reader is not used: {reader}"


def skip_unless_compiled_yaml() -> None:
    """Skip the calling test when the compiled YAML reader is not built, or fail it when it must be."""
    missing = compiled_yaml_missing()
    if missing and os.environ.get(REQUIRE_COMPILED_YAML):
        pytest.fail(f"{missing} ({REQUIRE_COMPILED_YAML} is set: it must be built)")
    if missing:
        pytest.skip(missing)


@pytest.fixture(params=["compiled", "python"])
def yaml_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs once with each YAML reader of manifest files: the compiled one (skipped when it is not built,
    see :func:`skip_unless_compiled_yaml`) and the Python one (``MODELPLANE_YAML_READER=python``, which worker
    processes and commands the test starts inherit)."""
    from tasks.clients.cluster.yamlcompiled import READER_VARIABLE

    monkeypatch.delenv(READER_VARIABLE, raising=False)
    if request.param == "python":
        monkeypatch.setenv(READER_VARIABLE, "python")
    else:
        skip_unless_compiled_yaml()
    return str(request.param)
