"""Modelplane's container image: one reference for every place that names it.

The image (``deployments/Dockerfile``) runs every flow run of the Kubernetes work pool, the cache-fill Jobs of
warm-caches, the downloader init containers of rollout-models, the worker itself and the install's
registration Job. Its reference is ``$MODELPLANE_IMAGE`` when that is set (a full reference such as
``registry.example.org/team/modelplane:1.2``: your registry, your tag), else :data:`DEFAULT_REPOSITORY` tagged
with the ``version`` of ``pyproject.toml``. Everything reads it from here: the flows' defaults import
:data:`IMAGE`, ``deployments/prefect.yaml`` takes it from the build step :func:`image_reference`
(``{{ modelplane_image.image }}``, also passed on to every flow run as ``MODELPLANE_IMAGE``), the work pool's
``image`` default is filled in when ``modelplane register-deployments`` creates the pool, and the worker
manifests, Helm values and the install (deployments/install) are generated from it
(``modelplane render-worker-manifests``); in a cluster the install's ConfigMap ``modelplane`` carries it,
kept equal to the containers' image by kustomize's image transformer.

``modelplane build-image`` prints the reference; ``--repository``/``--tag`` name another one, ``--build``/``--push``
run the docker commands of :func:`build_commands` from the repository root.
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re
import tomllib

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCKERFILE = "deployments/Dockerfile"
DEFAULT_REPOSITORY = "ghcr.io/modelplane/modelplane"
ENV = "MODELPLANE_IMAGE"

# [registry[:port]/]path[:tag][@digest], as docker's reference grammar (lower-case path components).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"^(?P<repository>(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+:[a-f0-9]{32,}))?$"
)


def version() -> str:
    """The package version: pyproject.toml's when this is a checkout (an editable install's metadata may lag
    an edit), else the installed distribution's (the image has no pyproject.toml beside its packages).

    Returns:
        The version, e.g. ``0.1.0``.
    """
    pyproject = REPO / "pyproject.toml"
    if pyproject.is_file():
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    return importlib.metadata.version("modelplane")


def split_reference(reference: str) -> tuple[str, str]:
    """``(repository, tag)`` of an image reference ``REPOSITORY:TAG[@DIGEST]`` (a digest stays with neither: it pins
    the tag's content); ValueError naming the reference when it is not one or has no tag.

    Args:
        reference: An image reference.

    Returns:
        Its repository and tag.

    Raises:
        ValueError: The reference is malformed or has no tag.
    """
    match = _REFERENCE.match(reference)
    if match is None or not match["tag"]:
        raise ValueError(
            f"{reference!r} is not an image reference with a tag (REPOSITORY:TAG, e.g. {DEFAULT_REPOSITORY}:1.2)"
        )
    return match["repository"], match["tag"]


def configured() -> str | None:
    """``$MODELPLANE_IMAGE`` when set (checked: ValueError naming the variable when it is no image reference).

    Returns:
        The reference, or None when the variable is unset or empty.

    Raises:
        ValueError: The variable is set to no image reference with a tag.
    """
    reference = os.environ.get(ENV, "").strip()
    if not reference:
        return None
    try:
        split_reference(reference)
    except ValueError as exc:
        raise ValueError(f"{ENV}: {exc}") from None
    return reference


def image(tag: str | None = None, repository: str | None = None) -> str:
    """The image reference: ``$MODELPLANE_IMAGE`` when set and neither argument is given; otherwise
    ``repository:tag``, each defaulting to ``$MODELPLANE_IMAGE``'s part when set, else to
    :data:`DEFAULT_REPOSITORY` and the package version.

    Args:
        tag: The tag, or None for the default.
        repository: The repository, or None for the default.

    Returns:
        The image reference, ``REPOSITORY:TAG``.

    Raises:
        ValueError: ``$MODELPLANE_IMAGE`` or the reference made is malformed (raised by :func:`split_reference`).
    """
    current = configured()
    if current is not None and tag is None and repository is None:
        return current
    current_repository, _ = split_reference(current) if current else (DEFAULT_REPOSITORY, "")
    reference = f"{repository or current_repository}:{tag or version()}"
    split_reference(reference)
    return reference


def _at_import() -> str:
    """:data:`IMAGE`: :func:`image`, except that a malformed ``$MODELPLANE_IMAGE`` is kept as written (importing a
    flow must not fail; the commands that name the image check it with :func:`image` and say so in one line)."""
    try:
        return image()
    except ValueError:
        return os.environ[ENV].strip()


IMAGE = _at_import()


def image_reference(tag: str | None = None) -> dict[str, str]:
    """A ``prefect deploy`` build step: ``{"image": ..., "tag": ...}`` for ``{{ modelplane_image.image }}`` in prefect.yaml.

    It builds nothing (a deploy must not need docker); build and push with ``modelplane build-image --push``.

    Args:
        tag: The tag, or None for the default.

    Returns:
        The image reference and its tag.
    """
    reference = image(tag)
    return {"image": reference, "tag": split_reference(reference)[1]}


def build_commands(reference: str = IMAGE, push: bool = False) -> list[list[str]]:
    """The docker commands that build (and push) ``reference`` from the repository root.

    Args:
        reference: The image reference to build.
        push: Whether to push it after building.

    Returns:
        The commands' arguments, in order.
    """
    commands = [["docker", "build", "-f", DOCKERFILE, "-t", reference, "."]]
    if push:
        commands.append(["docker", "push", reference])
    return commands
