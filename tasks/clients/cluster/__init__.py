"""Cluster access for flows: the :class:`Cluster` interface, its two backends and :func:`connect`.

``connect(target)`` picks the backend from one string, so every flow and command takes a single
``cluster`` parameter meaning the same everywhere:

- absent (``None``) or empty/blank: ``$MODELPLANE_CLUSTER`` when set (the laptop default, any of the forms
  below), else the real cluster: in-cluster config inside a pod, else the default kubeconfig
  (``$KUBECONFIG`` or ``~/.kube/config``); when none of those exists, :class:`ClusterError` with one line
  saying what to set. An empty string is never the working directory;
- ``"kube"``/``"kubeconfig"``: the real cluster as above, ignoring ``$MODELPLANE_CLUSTER``;
- ``"kubeconfig:PATH[#CONTEXT]"``: that kubeconfig (and context);
- anything else: a manifests directory or YAML file for the local backend.
"""

from __future__ import annotations

import os
import pathlib
from typing import TYPE_CHECKING

from tasks.clients.cluster.base import Cluster, Manifest, Mutation, ObjectRef, Scale, WatchEvent
from tasks.clients.cluster.errors import ClusterError, Conflict, Forbidden, Invalid, NotFound, Unavailable
from tasks.clients.cluster.local import LocalCluster
from tasks.clients.cluster.local_store import LoadError
from tasks.clients.cluster.resources import ResourceInfo, register, resource_for
from tasks.clients.cluster.retry import retry_on_conflict, retry_unavailable

if TYPE_CHECKING:
    from tasks.clients.cluster.kube import KubeCluster

_KUBE_TARGETS = ("kube", "kubeconfig")
_KUBECONFIG_PREFIX = "kubeconfig:"
CLUSTER_ENV = "MODELPLANE_CLUSTER"
"""The environment variable naming the cluster when a run or command names none (e.g. on a laptop)."""

NO_CLUSTER_MESSAGE = (
    "no cluster configured: pass --cluster (the flow parameter 'cluster') a manifests directory or "
    f"'kubeconfig:PATH[#CONTEXT]', or set {CLUSTER_ENV}, or provide a kubeconfig ($KUBECONFIG or ~/.kube/config); "
    "inside a pod the in-cluster config is used"
)


def resolve_target(target: str | None) -> str | None:
    """The cluster ``target`` names after the defaults.

    Args:
        target: A flow's ``cluster`` parameter; absent or blank falls back to ``$MODELPLANE_CLUSTER``, never to the
            working directory.

    Returns:
        The target, stripped, or None for the real cluster (kubeconfig or in-cluster).
    """
    if target is None or not target.strip():
        return os.environ.get(CLUSTER_ENV, "").strip() or None
    return target.strip()


def is_manifests_target(target: str | None) -> bool:
    """Whether ``target`` names a manifests directory or file (the local backend) rather than a Kubernetes cluster.

    Args:
        target: A flow's ``cluster`` parameter, before the defaults of :func:`resolve_target`.

    Returns:
        True for a manifests directory or file.
    """
    resolved = resolve_target(target)
    return resolved is not None and resolved not in _KUBE_TARGETS and not resolved.startswith(_KUBECONFIG_PREFIX)


def local_path_problem(cluster: Cluster) -> str | None:
    """Why a local-manifests cluster cannot be used.

    Args:
        cluster: A connected cluster (a Kubernetes one is never refused here).

    Returns:
        The reason (its path does not exist or is unreadable), or None.
    """
    if not isinstance(cluster, LocalCluster):
        return None
    if not cluster.path.exists():
        return f"cluster path {cluster.path} does not exist"
    if not os.access(cluster.path, os.R_OK):
        return f"cluster path {cluster.path} is not readable"
    return None


def default_kube_configured() -> bool:
    """Whether the default Kubernetes configuration exists.

    Returns:
        True in a pod (in-cluster), with ``$KUBECONFIG`` set, or with a ``~/.kube/config`` file.
    """
    if os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("KUBECONFIG"):
        return True
    return pathlib.Path("~/.kube/config").expanduser().is_file()


def connect(target: str | None = None, *, dry_run: bool = False) -> Cluster:
    """The cluster named by ``target``.

    Args:
        target: A flow's ``cluster`` parameter (see the module docs for the accepted forms).
        dry_run: A cluster whose writes change nothing (a flow's ``--dry-run``): the local backend keeps them in
            memory (not one byte of its folder changes: manifests, bookkeeping, lock), the real cluster receives
            them with ``dryRun=All``. A flow reads its own writes back as it would in a real run.

    Returns:
        The connected cluster: :class:`LocalCluster` for a manifests directory or file, else the Kubernetes one.

    Raises:
        ClusterError: One line, reason ``NoCluster``: nothing names a cluster and no default Kubernetes
            configuration exists.
    """
    resolved = resolve_target(target)
    if resolved is None:
        if not default_kube_configured():
            raise ClusterError(NO_CLUSTER_MESSAGE, reason="NoCluster")
        return _kube(dry_run=dry_run)
    if resolved in _KUBE_TARGETS:
        return _kube(dry_run=dry_run)
    if resolved.startswith(_KUBECONFIG_PREFIX):
        path, _, context = resolved[len(_KUBECONFIG_PREFIX) :].partition("#")
        return _kube(path or None, context or None, dry_run=dry_run)
    return LocalCluster(resolved, write_back=not dry_run)


def _kube(kubeconfig: str | None = None, context: str | None = None, *, dry_run: bool = False) -> KubeCluster:
    """A :class:`KubeCluster` (imported lazily: the local backend must not need the client loaded)."""
    from tasks.clients.cluster.kube import KubeCluster

    return KubeCluster(kubeconfig=kubeconfig, context=context, dry_run=dry_run)


def __getattr__(name: str) -> object:
    """Lazy export of :class:`~tasks.clients.cluster.kube.KubeCluster`."""
    if name == "KubeCluster":
        from tasks.clients.cluster.kube import KubeCluster

        return KubeCluster
    raise AttributeError(name)


__all__ = [
    "CLUSTER_ENV",
    "Cluster",
    "ClusterError",
    "Conflict",
    "Forbidden",
    "Invalid",
    "KubeCluster",
    "LoadError",
    "LocalCluster",
    "Manifest",
    "Mutation",
    "NotFound",
    "ObjectRef",
    "ResourceInfo",
    "Scale",
    "Unavailable",
    "WatchEvent",
    "connect",
    "is_manifests_target",
    "local_path_problem",
    "resolve_target",
    "register",
    "resource_for",
    "retry_on_conflict",
    "retry_unavailable",
]
