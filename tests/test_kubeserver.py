"""Tests for the test Kubernetes API server (tests/kubeserver), driven through the official client."""

from __future__ import annotations


def test_fixture_starts(kube_server):
    assert kube_server.stats()["total"] >= 0
