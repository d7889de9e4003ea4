"""Which ModelCaches garbage collection may delete, pure.

Decides, per cache, whether it is unused (no workload used it for a while: ``status.lastUsed``, else its
creation time) and unmounted (no Pod, workload template or KServe InferenceService mounts its PVC now);
a cache being filled is never collected. The verdict carries its reason for the flow's report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from engine.api.aim import ModelCache, ModelCacheStatus
from engine.api.meta import format_time
from engine.caches.plan import pvc_name


def claims_mounted_by(obj: Mapping[str, Any]) -> set[str]:
    """PVC names a Pod, a workload's pod template or a KServe InferenceService's components mount."""
    spec = obj.get("spec") or {}
    pod_specs: list[Mapping[str, Any]] = []
    kind = obj.get("kind")
    if kind == "Pod":
        pod_specs.append(spec)
    elif kind == "InferenceService":
        pod_specs.extend(spec.get(part) or {} for part in ("predictor", "transformer", "explainer"))
    else:
        pod_specs.append(((spec.get("template") or {}).get("spec")) or {})
    claims: set[str] = set()
    for pod_spec in pod_specs:
        for volume in pod_spec.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                claims.add(claim)
    return claims


MIN_UNUSED_AFTER = timedelta(hours=1)
"""The shortest unused time garbage collection accepts: a cache filled and not yet mounted by its first rollout (a
rollout runs every 5 min) must not be collected before it is; a bound of 0 or below collected every unmounted cache,
those created seconds before included."""


@dataclass(frozen=True)
class GcVerdict:
    """Whether a cache may be garbage-collected, and why (for the report)."""

    delete: bool
    reason: str


def gc_verdict(cache: ModelCache, mounted_claims: set[str], unused_after: timedelta, now: datetime) -> GcVerdict:
    """A cache is deleted when no workload used it for ``unused_after`` (``status.lastUsed``, else its
    creation time) and nothing mounts its PVC now; a fill in progress is never collected. ``unused_after`` below
    :data:`MIN_UNUSED_AFTER` is refused (``ValueError``): the flow's parameter and the command's option check it first."""
    if unused_after < MIN_UNUSED_AFTER:
        raise ValueError(f"unused_after must be at least {MIN_UNUSED_AFTER}, got {unused_after}")
    status = cache.status or ModelCacheStatus()
    claim = status.persistent_volume_claim or pvc_name(cache.metadata.name or "")
    if claim in mounted_claims:
        return GcVerdict(False, f"PVC {claim} is mounted")
    if status.status == "Progressing":
        return GcVerdict(False, "being filled")
    last = status.last_used or cache.metadata.creation_timestamp
    if last is None:
        return GcVerdict(False, "no lastUsed or creation time")
    if now - last < unused_after:
        return GcVerdict(False, f"used {format_time(last)}")
    what = "last used" if status.last_used else "never used; created"
    return GcVerdict(True, f"{what} {format_time(last)}, not mounted")
