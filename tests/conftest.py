"""Shared pytest configuration: fixtures for the real components live in their own packages."""

from __future__ import annotations

import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    """The repository root."""
    return REPO
pytest_plugins = ["tests.kubeserver.fixture", "tests.promtest.fixture"]
