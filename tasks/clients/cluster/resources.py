"""Which REST resource serves each ``(apiVersion, kind)``: group, version, plural, scope, subresources.

Both backends need the same facts: the kube backend to build request paths, the local backend to
know the scope of a kind and whether it has ``/status`` and ``/scale`` subresources (which decide
status isolation and scale semantics). Built-in kinds (and the third-party kinds Modelplane renders
without owning a model for them) are listed here; Modelplane's custom kinds are looked up in the kind
registry (:func:`engine.api.registry.kind_info`) at call time, so the CRDs and the backends cannot
disagree and a kind added to the registry is served with no edit here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from engine.api.registry import KindInfo, kind_info, kinds
from tasks.clients.cluster.errors import NotFound

Fact = TypeVar("Fact")


class KindTable(Generic[Fact]):
    """One fact per ``(apiVersion, kind)`` (its REST resource, its schema): what is registered at run time wins,
    else the fact derived from the kind's entry in the kind registry; None for a kind neither knows. Thread-safe."""

    def __init__(
        self, derive: Callable[[KindInfo], Fact], registered: dict[tuple[str, str], Fact] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._registered = dict(registered or {})
        self._derive = derive

    def register(self, api_version: str, kind: str, fact: Fact) -> None:
        """Record the fact of ``apiVersion``/``kind``, over the kind registry's."""
        with self._lock:
            self._registered[(api_version, kind)] = fact

    def lookup(self, api_version: str, kind: str) -> Fact | None:
        """The fact of ``apiVersion``/``kind``: registered, else derived from the kind registry, else None."""
        with self._lock:
            found = self._registered.get((api_version, kind))
        if found is not None:
            return found
        info = kind_info(api_version, kind)
        return self._derive(info) if info is not None else None

    def registered(self) -> dict[tuple[str, str], Fact]:
        """A copy of what was registered (the kind registry's kinds are not in it)."""
        with self._lock:
            return dict(self._registered)


@dataclass(frozen=True)
class ResourceInfo:
    """Static facts about the REST resource serving one kind."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    has_status: bool = True
    has_scale: bool = False
    has_generation: bool = True
    """Whether the API server maintains ``metadata.generation`` (custom resources and workloads do;
    ConfigMaps, Secrets, Namespaces, Services, Events ... do not)."""

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def is_core(self) -> bool:
        """True for the legacy core group served under ``/api/v1``."""
        return not self.group

    @property
    def resource(self) -> str:
        """``<plural>.<group>`` (``core`` for the core group): how the API server names the resource in messages."""
        return f"{self.plural}.{self.group or 'core'}"

    def require(self, subresource: Literal["status", "scale"]) -> None:
        """``NotFound`` when the kind has no such subresource, as the API server answers a request to it."""
        if not (self.has_status if subresource == "status" else self.has_scale):
            raise NotFound(f"{self.resource} has no {subresource} subresource")

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path of the collection, an object or one of its subresources."""
        prefix = f"/api/{self.version}" if self.is_core else f"/apis/{self.group}/{self.version}"
        parts = [prefix]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


def _builtin(api_version: str, kind: str, plural: str, **facts: bool) -> ResourceInfo:
    group, _, version = api_version.rpartition("/")
    return ResourceInfo(group, version, kind, plural, **facts)


BUILTIN_KINDS: tuple[ResourceInfo, ...] = (
    _builtin("v1", "Namespace", "namespaces", namespaced=False, has_generation=False),
    _builtin("v1", "ConfigMap", "configmaps", has_status=False, has_generation=False),
    _builtin("v1", "Secret", "secrets", has_status=False, has_generation=False),
    _builtin("v1", "ServiceAccount", "serviceaccounts", has_status=False, has_generation=False),
    _builtin("v1", "PersistentVolumeClaim", "persistentvolumeclaims", has_generation=False),
    _builtin("v1", "Service", "services", has_generation=False),
    _builtin("v1", "Event", "events", has_status=False, has_generation=False),
    _builtin("v1", "Pod", "pods", has_generation=False),
    _builtin("v1", "Node", "nodes", namespaced=False, has_generation=False),
    _builtin("apps/v1", "Deployment", "deployments", has_scale=True),
    _builtin("apps/v1", "StatefulSet", "statefulsets", has_scale=True),
    _builtin("apps/v1", "ReplicaSet", "replicasets", has_scale=True),
    _builtin("apps/v1", "DaemonSet", "daemonsets"),
    _builtin("batch/v1", "Job", "jobs"),
    _builtin("batch/v1", "CronJob", "cronjobs"),
    _builtin("coordination.k8s.io/v1", "Lease", "leases", has_status=False, has_generation=False),
    _builtin("serving.kserve.io/v1beta1", "InferenceService", "inferenceservices"),
    _builtin("gateway.networking.k8s.io/v1", "HTTPRoute", "httproutes"),
)


def custom_resource(info: KindInfo) -> ResourceInfo:
    """The REST resource of a kind-registry kind.

    Args:
        info: A kind of :mod:`engine.api.registry`.

    Returns:
        Its group, version, kind, plural, scope and subresources.
    """
    return ResourceInfo(
        info.group, info.version, info.kind, info.plural, info.namespaced, info.has_status, info.has_scale
    )


_table: KindTable[ResourceInfo] = KindTable(custom_resource, {(r.api_version, r.kind): r for r in BUILTIN_KINDS})
"""Built-in kinds and those registered at run time (:func:`register`); they win over the kind registry."""


def register(info: ResourceInfo) -> ResourceInfo:
    """Make another kind known to both backends (e.g. a third-party CRD); returns ``info``.

    Args:
        info: The kind's REST resource.

    Returns:
        ``info``.
    """
    _table.register(info.api_version, info.kind, info)
    return info


def lookup(api_version: str, kind: str) -> ResourceInfo | None:
    """The resource serving ``apiVersion``/``kind``, or ``None`` if it is not known here.

    Args:
        api_version: The kind's ``apiVersion``.
        kind: The kind's name.

    Returns:
        The kind's REST resource, or None.
    """
    return _table.lookup(api_version, kind)


def resource_for(api_version: str, kind: str) -> ResourceInfo:
    """The resource serving ``apiVersion``/``kind``; ``NotFound`` for kinds this table does not know.

    Args:
        api_version: The kind's ``apiVersion``.
        kind: The kind's name.

    Returns:
        The kind's REST resource.

    Raises:
        NotFound: The kind is not known (reason ``UnknownKind``).
    """
    info = lookup(api_version, kind)
    if info is None:
        raise NotFound(
            f"unknown kind {kind!r} in {api_version!r}: not a built-in kind Modelplane uses nor one of "
            f"the kind registry engine.api.registry (register it with tasks.clients.cluster.resources.register)",
            reason="UnknownKind",
        )
    return info


def known_kinds() -> list[ResourceInfo]:
    """Every kind currently known: built-in, registered at run time and the kind registry's.

    Returns:
        Every known kind's REST resource.
    """
    table = _table.registered()
    for info in kinds():
        table.setdefault((info.api_version, info.kind), custom_resource(info))
    return list(table.values())
