"""Shared pytest configuration: fixtures for the real components live in their own packages."""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import tempfile

import pytest

# Test Prefect servers report no telemetry (and so never contend on its database write).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _private_prefect_home() -> str:
    """A Prefect home of this test process's own (removed at exit), set before Prefect is imported.

    Commands run without ``PREFECT_API_URL`` start an ephemeral API on ``$PREFECT_HOME/prefect.db``; with the
    default ``~/.prefect`` every pytest-xdist worker (and every other test run of the machine) migrated and
    wrote the same SQLite file, and a server starting while another held it failed ("database is locked").
    The subprocesses the tests start inherit it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    home = tempfile.mkdtemp(prefix=f"modelplane-tests-prefect-{worker}-")
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


os.environ["PREFECT_HOME"] = _private_prefect_home()

# The Kubernetes API test server and the Prometheus + fake vLLM exporter fixtures,
pytest_plugins = [
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


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    """The repository root."""
    return REPO


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (./dev.sh test), keep every test of a module that uses a
    module- or class-scoped fixture (a Prefect server, a private API server, a deployed pool) on one
    worker, so the fixture starts once, as in a serial run; the other tests spread one by one.

    Runs before pytest-xdist's own hook, which reads the ``xdist_group`` marks."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        fixture_info = getattr(item, "_fixtureinfo", None)
        if fixture_info is None:
            continue
        shares = any(
            definition.scope in ("module", "class", "package")
            for definitions in fixture_info.name2fixturedefs.values()
            for definition in definitions
        )
        if shares:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
