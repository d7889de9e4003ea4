"""The one small interface through which every flow reaches Kubernetes.

Objects are plain ``dict`` manifests (``apiVersion``, ``kind``, ``metadata``, ``spec``, ``status``),
exactly as the API server returns them, so the same code runs against a real cluster and against the
local-manifests backend. Backends: :mod:`tasks.clients.cluster.kube` (official ``kubernetes`` client) and
:mod:`tasks.clients.cluster.local` (a directory or file of YAML manifests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from engine.api.refs import ObjectRef

__all__ = ["Cluster", "Manifest", "Mutation", "ObjectRef", "Scale", "WatchEvent", "WatchEventType"]

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Scale:
    """The scale subresource of a target: desired ``replicas`` and observed ``status_replicas``."""

    replicas: int
    status_replicas: int | None = None
    selector: str | None = None
    resource_version: str | None = None


WatchEventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class WatchEvent:
    """One change seen by :meth:`Cluster.watch`: ``type`` and the object as it is after it (as it was
    last seen for ``DELETED``)."""

    type: WatchEventType
    object: Manifest


@runtime_checkable
class Cluster(Protocol):
    """Backend-neutral cluster operations. Every method raises :mod:`tasks.clients.cluster.errors` types."""

    runs_pods: bool
    """Whether Pods run on this cluster: a Job does its work and a provisioner binds a PVC. False for the local
    manifests backend, where Modelplane does that work in its own process."""

    validates_schemas: bool
    """Whether an API server validated the custom resources it serves against their CRDs' schemas (then a reader
    checks them with their API models only); False for the local backend, whose files nothing validated."""

    @property
    def unreadable(self) -> list[str]:
        """What the cluster holds that could not be read (with the local backend, each manifest file or
        document that does not parse, named; the rest is served); empty for an API server."""
        ...

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Manifest:
        """Read one object."""
        ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Manifest]:
        """List objects of a kind in one namespace (or all when ``None``), filtered by a label selector."""
        ...

    def watch(
        self, api_version: str, kind: str, namespace: str | None = None, timeout_s: float = 30.0
    ) -> Iterator[WatchEvent]:
        """The objects of a kind in one namespace (all when ``None``) as they are now, each an ``ADDED``
        event, then every change (``ADDED``, ``MODIFIED``, ``DELETED``) until ``timeout_s`` seconds pass.

        A bounded watch: the stream ends by itself, so a scheduled flow can watch for most of its interval
        and the next run starts again from the current objects (nothing is kept between runs)."""
        ...

    def create(self, obj: Manifest) -> Manifest:
        """Create an object; ``Conflict`` if it exists. Returns the stored object."""
        ...

    def apply(self, obj: Manifest) -> Manifest:
        """Create the object, or merge-patch its metadata labels/annotations and spec if it exists."""
        ...

    def patch_spec(self, ref: ObjectRef, patch: Manifest, resource_version: str | None = None) -> Manifest:
        """JSON merge-patch the main resource (status changes are ignored). ``Conflict`` if stale."""
        ...

    def patch_status(self, ref: ObjectRef, status: Manifest, resource_version: str | None = None) -> Manifest:
        """JSON merge-patch ``{"status": status}`` through the status subresource. ``Conflict`` if stale."""
        ...

    def get_scale(self, ref: ObjectRef) -> Scale:
        """Read the scale subresource of a scalable target (Deployment or any kind with scale)."""
        ...

    def set_scale(self, ref: ObjectRef, replicas: int) -> Scale:
        """Write ``spec.replicas`` through the scale subresource."""
        ...

    def delete(self, ref: ObjectRef) -> None:
        """Delete an object (honouring finalizers where the backend has them)."""
        ...

    def post_event(self, obj: Manifest, reason: str, message: str, event_type: str = "Normal") -> Manifest | None:
        """Record a core/v1 Event whose involvedObject is ``obj``: a new Event, a bump of the identical one
        already recorded, or None when the object's Event budget is spent (:mod:`tasks.clients.cluster.recorder`)."""
        ...


Mutation = Callable[[Manifest], Manifest | None]
