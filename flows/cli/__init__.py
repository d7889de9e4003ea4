"""The ``modelplane`` command line (console script ``modelplane = "flows.cli:main"``), one module per command group.

| module | commands |
|---|---|
| ``manifests`` | ``render-crds``, ``validate-manifests`` |
| ``platform`` | ``build-image``, ``render-worker-manifests``, ``register-deployments``, ``serve-deployments`` |
| ``optimize`` | ``optimize``, ``simulate``, ``tune``, ``calibrate`` |
| ``aim`` | ``discover-models``, ``resolve-templates``, ``rollout-services``, ``reconcile-aim`` |
| ``rollout`` | ``rollout-models``, ``watch-models``, ``serve-openmodel`` |
| ``caches`` | ``warm-caches`` |
| ``cache_fill`` | ``fill-cache`` (the command a cache-fill Job runs) |

Every command is named verb-noun, and a flow's command carries the flow's (= its deployment's) name. Earlier
names (``crds``, ``validate``, ``image``, ``worker-manifests``, ``deploy``, ``serve``, ``aim``, ``cache fill``)
still run, hidden from the help. Every flow command runs its flow through :func:`flows.cli.common.run_flow`:
one pre-check, then the flow; exit codes per flows/exitcodes.py.
"""

from __future__ import annotations

from flows.cli import aim, cache_fill, caches, manifests, optimize, platform, rollout  # noqa: F401  (registers the commands)
from flows.cli.common import app


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main"]
