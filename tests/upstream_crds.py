"""The upstream KServe, Gateway API and Kthena CRDs (``shared/upstream-crds/``, beside the repository) for
the Kubernetes API test server, so it validates what rollouts render against the real schemas."""

from __future__ import annotations

import os
import pathlib
from functools import lru_cache
from typing import Any

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
FILES = ("serving.kserve.io_inferenceservices.yaml", "gateway.networking.k8s.io_httproutes.yaml")


def upstream_crds_dir() -> pathlib.Path | None:
    """``$MODELPLANE_UPSTREAM_CRDS``, else the first ``shared/upstream-crds`` beside the repository or
    one of its parents (a worktree sits deeper than a clone), or ``None`` when there is none."""
    explicit = os.environ.get("MODELPLANE_UPSTREAM_CRDS")
    candidates = [pathlib.Path(explicit)] if explicit else []
    candidates += [parent / "shared" / "upstream-crds" for parent in REPO.parents]
    for candidate in candidates:
        if all((candidate / name).is_file() for name in FILES):
            return candidate
    return None


@lru_cache(maxsize=1)
def upstream_crds() -> tuple[dict[str, Any], ...]:
    """The CRD documents, or an empty tuple when the folder is absent."""
    folder = upstream_crds_dir()
    if folder is None:
        return ()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the KServe CRD is 2 MB
    docs: list[dict[str, Any]] = []
    for name in FILES:
        docs += [d for d in yaml.load_all((folder / name).read_text(), Loader=loader) if d]
    return tuple(docs)


KTHENA_FILES = (
    "kthena/networking.serving.volcano.sh_modelservers.yaml",
    "kthena/networking.serving.volcano.sh_modelroutes.yaml",
    "kthena/workload.serving.volcano.sh_modelservings.yaml",
)


def kthena_crds_present() -> bool:
    """Whether Kthena's CRD files are beside the repository: a module's skip mark asks this at collection, in
    every pytest-xdist worker, without parsing 1.4 MB of YAML that only the worker running it needs."""
    folder = upstream_crds_dir()
    return folder is not None and all((folder / name).is_file() for name in KTHENA_FILES)


@lru_cache(maxsize=1)
def kthena_crds() -> tuple[dict[str, Any], ...]:
    """Kthena's ModelServer, ModelRoute (networking.serving.volcano.sh) and ModelServing
    (workload.serving.volcano.sh) CRDs, or an empty tuple when they are absent. Kept apart from
    :func:`upstream_crds`: a cluster serving them switches rollout-models to Kthena-native rendering."""
    folder = upstream_crds_dir()
    if folder is None or not kthena_crds_present():
        return ()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the ModelServing CRD is 1.4 MB
    return tuple(d for name in KTHENA_FILES for d in yaml.load_all((folder / name).read_text(), Loader=loader) if d)


SKIP_REASON = "shared/upstream-crds/ (the upstream KServe and Gateway API CRDs) is not beside the repository"
