"""pytest fixtures: Debian's docker-registry on 127.0.0.1, one per mode, shared by the session.

* ``oci_registry``: anonymous pulls and pushes.
* ``private_registry``: htpasswd (HTTP Basic; 401 without credentials).
* ``token_registry``: the distribution token protocol (401 ``Bearer realm=...``, a token service).

Each is killed by PID at the end of the session. When ``docker-registry`` is missing the fixtures
fail (``./dev.sh`` installs it); they never skip silently.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers.registry.server import Registry, start_registry


def _start(tmp_path_factory: pytest.TempPathFactory, mode: str) -> Iterator[Registry]:
    registry = start_registry(tmp_path_factory.mktemp(f"registry-{mode}"), mode=mode)
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A plain registry (no auth)."""
    yield from _start(tmp_path_factory, "plain")


@pytest.fixture(scope="session")
def private_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry with htpasswd (Basic) auth."""
    yield from _start(tmp_path_factory, "htpasswd")


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry with bearer-token auth and its token service."""
    yield from _start(tmp_path_factory, "token")
