"""Cluster access for flows: the :class:`Cluster` interface, its two backends and :func:`connect`.

``connect(target)`` picks the backend from one string, so every flow takes a single ``cluster``
parameter: ``None``/``"kube"``/``"kubeconfig"`` for the real cluster (in-cluster config inside a pod,
else the default kubeconfig), ``"kubeconfig:PATH[#CONTEXT]"`` for a specific kubeconfig, and anything
else is a directory or YAML file for the local backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasks.cluster.base import Cluster, Manifest, Mutation, ObjectRef, Scale, WatchEvent
from tasks.cluster.errors import ClusterError, Conflict, Forbidden, Invalid, NotFound, Unavailable
from tasks.cluster.local import LocalCluster, LoadError
from tasks.cluster.resources import ResourceInfo, register, resource_for
from tasks.cluster.retry import retry_on_conflict, retry_unavailable

if TYPE_CHECKING:
    from tasks.cluster.kube import KubeCluster

_KUBE_TARGETS = ("kube", "kubeconfig")
_KUBECONFIG_PREFIX = "kubeconfig:"


def connect(target: str | None = None) -> Cluster:
    """The cluster named by ``target`` (see the module docs for the accepted forms)."""
    if target is None or target.strip() in _KUBE_TARGETS:
        return _kube()
    if target.startswith(_KUBECONFIG_PREFIX):
        path, _, context = target[len(_KUBECONFIG_PREFIX):].partition("#")
        return _kube(path or None, context or None)
    return LocalCluster(target)


def _kube(kubeconfig: str | None = None, context: str | None = None) -> "KubeCluster":
    """A :class:`KubeCluster` (imported lazily: the local backend must not need the client loaded)."""
    from tasks.cluster.kube import KubeCluster

    return KubeCluster(kubeconfig=kubeconfig, context=context)


def __getattr__(name: str) -> object:
    """Lazy export of :class:`~tasks.cluster.kube.KubeCluster`."""
    if name == "KubeCluster":
        from tasks.cluster.kube import KubeCluster

        return KubeCluster
    raise AttributeError(name)


__all__ = [
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
    "register",
    "resource_for",
    "retry_on_conflict",
    "retry_unavailable",
]
