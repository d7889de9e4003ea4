"""A Kubernetes-API-compatible HTTP server for tests.

The official ``kubernetes`` client talks to it unmodified through a generated kubeconfig. It enforces
the semantics controllers depend on: resourceVersion conflicts, status subresource isolation,
generation, label/field selectors, 201 on create, finalizers, watch, scale subresources, and CRD
registration with structural-schema pruning, defaulting and validation. ``/_test/`` offers request
statistics and failure injection. See ``fixture.py`` for the pytest fixtures.
"""
