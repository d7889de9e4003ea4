"""Modelplane's container image: one reference, derived from the package version, for every place that names it.

The image (``deployments/Dockerfile``) runs every flow run of the Kubernetes work pool, the cache-fill Jobs of
warm-caches, the downloader init containers of rollout-models, and the worker itself. Its tag is the
``version`` of ``pyproject.toml`` and nothing else: the flows' defaults import :data:`IMAGE`,
``deployments/prefect.yaml`` takes it from the build step :func:`image_reference` (``{{ modelplane_image.image }}``),
the work pool's ``image`` default is filled in when ``modelplane register-deployments`` creates the pool, and the worker
manifests and Helm values are generated from it (``modelplane render-worker-manifests``).

``modelplane build-image`` prints the reference; ``--build``/``--push`` run the docker commands of
:func:`build_commands` from the repository root.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import tomllib

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCKERFILE = "deployments/Dockerfile"
REPOSITORY = "ghcr.io/modelplane/modelplane"


def version() -> str:
    """The package version: pyproject.toml's when this is a checkout (an editable install's metadata may lag
    an edit), else the installed distribution's (the image has no pyproject.toml beside its packages)."""
    pyproject = REPO / "pyproject.toml"
    if pyproject.is_file():
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    return importlib.metadata.version("modelplane")


def image(tag: str | None = None) -> str:
    """``REPOSITORY:tag``, the tag defaulting to the package version."""
    return f"{REPOSITORY}:{tag or version()}"


IMAGE = image()


def image_reference(tag: str | None = None) -> dict[str, str]:
    """A ``prefect deploy`` build step: ``{"image": ..., "tag": ...}`` for ``{{ modelplane_image.image }}`` in prefect.yaml.

    It builds nothing (a deploy must not need docker); build and push with ``modelplane build-image --push``.
    """
    reference = image(tag)
    return {"image": reference, "tag": reference.rsplit(":", 1)[1]}


def build_commands(reference: str = IMAGE, push: bool = False) -> list[list[str]]:
    """The docker commands that build (and push) ``reference`` from the repository root."""
    commands = [["docker", "build", "-f", DOCKERFILE, "-t", reference, "."]]
    if push:
        commands.append(["docker", "push", reference])
    return commands
