"""Which objects changed since their controller last reconciled them (pure: manifests in, decisions out).

Kubernetes bumps ``metadata.generation`` on every spec change; a controller writes the generation it
acted on into ``status.observedGeneration``. An object whose two numbers differ (or that has no
``observedGeneration`` yet: never reconciled) has a change its controller has not rolled out. The
``watch-models`` flow announces such Kthena Models as ``modelplane.kthena.model.changed`` events, so the
rollout starts within seconds instead of at its next scheduled pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api.identity import is_integer
from engine.status import generation_of, mapping_at


@dataclass(frozen=True)
class UnobservedChange:
    """An object's spec generation that its controller has not observed yet."""

    namespace: str
    name: str
    uid: str
    generation: int
    observed_generation: int | None

    @property
    def key(self) -> tuple[str, int]:
        """One change: the object (by uid, so a re-created object is another one) at one generation."""
        return self.uid, self.generation


def being_deleted(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is being deleted (``metadata.deletionTimestamp`` set: a finalizer, or a foreground deletion
    waiting for its dependents, still holds it). Its controller no longer acts on it: what it owns is the garbage
    collector's to remove, and a dependent created now would be one more for the collector to wait for."""
    return bool(mapping_at(obj, "metadata").get("deletionTimestamp"))


def unobserved_change(obj: Mapping[str, Any]) -> UnobservedChange | None:
    """The change ``obj`` carries that its controller has not acted on, or None when there is none: the
    object is up to date, is being deleted (its owner references clean up), or keeps no generation (none, or one
    written by hand that is no whole number)."""
    meta = mapping_at(obj, "metadata")
    generation = generation_of(obj)
    if generation is None or being_deleted(obj):
        return None
    observed = mapping_at(obj, "status").get("observedGeneration")
    if not is_integer(observed):
        observed = None  # a hand-written ``observedGeneration: abc`` is no observation: the change is acted on
    if observed is not None and observed == generation:
        return None
    return UnobservedChange(
        namespace=meta.get("namespace") or "",
        name=meta["name"],
        uid=meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}",
        generation=generation,
        observed_generation=observed,
    )


def new_changes(objects: list[Mapping[str, Any]], announced: set[tuple[str, int]]) -> list[UnobservedChange]:
    """The unobserved changes among ``objects`` not in ``announced`` yet (each announced once per run)."""
    found: list[UnobservedChange] = []
    for obj in objects:
        change = unobserved_change(obj)
        if change is not None and change.key not in announced and change.key not in {c.key for c in found}:
            found.append(change)
    return found
