"""Fixtures for the cache tests: a cluster of each backend with Modelplane's CRDs."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tasks.clients.cluster import Cluster, LocalCluster


@pytest.fixture(scope="session")
def crds_on_server(kube_server: Any) -> Any:
    """The session's test API server with Modelplane's CRDs installed."""
    from engine.api.crds import render_crds

    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])
    return kube_server


@pytest.fixture(params=["local", "kube"])
def any_cluster(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Cluster]:
    """A :class:`LocalCluster` on an empty directory, or a ``KubeCluster`` on the test API server."""
    if request.param == "local":
        yield LocalCluster(tmp_path / "cluster")
        return
    from tasks.clients.cluster.kube import KubeCluster

    server = request.getfixturevalue("crds_on_server")
    yield KubeCluster(api_client=server.api_client())
