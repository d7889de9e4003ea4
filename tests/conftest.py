"""Shared pytest configuration: fixtures for the real components live in their own packages."""

from __future__ import annotations

import os
import pathlib

import pytest

# Test Prefect servers report no telemetry (and so never contend on its database write).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

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
