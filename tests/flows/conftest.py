"""Flow tests run against a temporary Prefect server (``prefect_test_harness``), shared by the session."""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Iterator

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "examples"


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """A temporary Prefect API for every flow run of the session (the first start takes ~10 s; under
    pytest-xdist each worker starts its own, at the same time, so the wait allows for a loaded machine as
    tests/flows/prefect_server.py does)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.fixture()
def example_cluster(tmp_path: pathlib.Path) -> pathlib.Path:
    """A private copy of the bundled example cluster (the optimize flow writes status into it)."""
    target = tmp_path / "cluster"
    shutil.copytree(EXAMPLES, target)
    return target


@pytest.fixture()
def example_metrics() -> pathlib.Path:
    """The bundled metrics file of the example cluster."""
    return REPO / "deployments" / "example-metrics.yaml"


from tests.flows.prefect_server import prefect_server  # noqa: E402,F401  (the real server of the platform tests)
