"""The ``modelplane`` command line (console script ``modelplane = "flows.cli:main"``), one module per command group.

| module | commands |
|---|---|
| ``manifests`` | ``render-crds``, ``validate-manifests`` |
| ``platform`` | ``build-image``, ``render-worker-manifests``, ``register-deployments``, ``serve-deployments`` |
| ``optimize`` | ``optimize-allocation``, ``calibrate-profiles`` |
| ``replay`` | ``simulate-policies``, ``tune-sizing`` |
| ``aim`` | ``discover-models``, ``resolve-templates``, ``rollout-services``, ``reconcile-aim`` |
| ``rollout`` | ``rollout-models``, ``watch-models``, ``serve-openmodel`` |
| ``caches`` | ``warm-caches`` |
| ``cache_fill`` | ``fill-cache`` (the command a cache-fill Job runs) |

Every command is named verb-noun: a flow's command is its flow's (= its deployment's) name, made verb-noun where
the name is a bare verb (``optimize`` -> ``optimize-allocation``, ``simulate`` -> ``simulate-policies``, ``tune`` ->
``tune-sizing``, ``calibrate`` -> ``calibrate-profiles``). Earlier names (those four, ``crds``, ``validate``,
``image``, ``worker-manifests``, ``deploy``, ``serve``, ``aim``, ``cache fill``) still run, hidden from the help.
A flag is its flow parameter's name in kebab case (``metrics_file`` -> ``--metrics-file``); a duration parameter
``x_s`` or ``x_seconds`` is ``--x DURATION`` (``90s``, ``5m``, ``7d``: flows/cli/options.py); a list parameter is
a repeatable singular flag (``namespaces`` -> ``--namespace``, ``model_shares`` -> ``--model-share``). One
exception: simulate's ``start_s`` is ``--slice-start``, since ``--start`` is its ``start`` parameter. Earlier flag
spellings still work, hidden. Every flow command runs its flow through :func:`flows.cli.common.run_flow`: one pre-check, then the flow,
untracked (no Prefect API) on a manifests directory or in a dry run unless ``--track`` or ``PREFECT_API_URL``;
exit codes per flows/exitcodes.py.
"""

from __future__ import annotations

from flows.cli import aim, cache_fill, caches, manifests, optimize, platform, replay, rollout  # noqa: F401  (registers the commands)
from flows.cli.common import app


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main"]
