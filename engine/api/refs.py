"""One Kubernetes object named: ``apiVersion`` + ``kind`` + ``name`` (+ ``namespace`` if namespaced).

The cluster backends address an object by its :class:`ObjectRef` (``tasks.clients.cluster``), and a Prefect event
names the object it is about by the same reference (``tasks.clients.events``): one type for both, below both. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ObjectRef"]


@dataclass(frozen=True)
class ObjectRef:
    """Identifies one object: ``apiVersion`` + ``kind`` + ``name`` (+ ``namespace`` if namespaced)."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        """The reference of a manifest."""
        meta = obj.get("metadata") or {}
        return cls(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
