"""The status of a Kthena ``Model``, as Kthena's model controller writes it, with its gap closed.

Decides the ``Initialized`` (set once), ``Active`` (every backend available) and ``Failed`` conditions (and
Modelplane's ``ScalingLimited``, :data:`CONDITION_SCALING_LIMITED`), the
``backendStatuses`` and ``observedGeneration``. ``Failed`` is set back to False once its cause is fixed
(upstream never clears it), so a Model's status always says whether it serves now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.rollout.workloads import FieldError
from engine.status import ConditionUpdate, condition_is_true, previous_conditions, set_conditions

CONDITION_INITIALIZED = "Initialized"
CONDITION_ACTIVE = "Active"
CONDITION_FAILED = "Failed"
CONDITION_SCALING_LIMITED = "ScalingLimited"
"""Modelplane's: a backend runs fewer serving groups than its bounds allow, and why (absent until it first does)."""
REASON_CREATING = "ModelCreating"
REASON_PROCESSING = "ModelProcessing"
REASON_AVAILABLE = "ModelAvailable"
REASON_ABNORMAL = "ModelAbnormal"
REASON_INVALID = "InvalidModel"
REASON_NOT_SUPPORTED = "BackendNotSupported"
REASON_CACHE_FAILED = "CacheFailed"
REASON_HEALTHY = "ModelHealthy"
REASON_MULTI_NODE_HELD = "MultiNodeGroupHeld"
REASON_NOT_LIMITED = "NotLimited"


@dataclass
class BackendState:
    """What the rollout observed for one backend."""

    name: str
    replicas: int = 0
    available: bool = False
    waiting: str | None = None
    held: str | None = None  # why it runs fewer groups than its bounds allow


@dataclass
class Failure:
    reason: str
    message: str


def deployment_available(deployment: Mapping[str, Any]) -> bool:
    """A Deployment serves: its ``Available`` condition is True (the Deployment controller's verdict)."""
    return condition_is_true(deployment, "Available")


def model_status(
    old: Mapping[str, Any] | object,
    generation: int | None,
    now: datetime,
    backends: list[BackendState],
    failure: Failure | None,
) -> dict[str, Any]:
    """The Model's status: ``Initialized`` once, ``Active`` when every backend is available, ``Failed``
    with its reason (set back to False once the cause is fixed), ``ScalingLimited`` while a backend is held
    below its bounds (then False), ``backendStatuses`` and ``observedGeneration``."""
    old = old if isinstance(old, Mapping) else {}  # a hand-written ``status: 5`` is replaced
    conditions = [c for c in previous_conditions(old.get("conditions")) if isinstance(c, dict)]  # malformed: replaced
    updates = [ConditionUpdate(CONDITION_INITIALIZED, "True", REASON_CREATING, "Model initialized")]
    if failure is not None:
        updates.append(ConditionUpdate(CONDITION_FAILED, "True", failure.reason, failure.message))
        updates.append(ConditionUpdate(CONDITION_ACTIVE, "False", failure.reason, failure.message))
    else:
        if any(c.get("type") == CONDITION_FAILED for c in conditions):
            updates.append(ConditionUpdate(CONDITION_FAILED, "False", REASON_HEALTHY, "The model has no failure"))
        waiting = [f"{b.name}: {b.waiting or 'not available yet'}" for b in backends if not b.available]
        if backends and not waiting:
            updates.append(ConditionUpdate(CONDITION_ACTIVE, "True", REASON_AVAILABLE, "Model is ready"))
        else:
            updates.append(
                ConditionUpdate(
                    CONDITION_ACTIVE, "False", REASON_PROCESSING, "Model not ready yet: " + "; ".join(waiting)
                )
            )
    held = [b.held for b in backends if b.held]
    if held:
        updates.append(ConditionUpdate(CONDITION_SCALING_LIMITED, "True", REASON_MULTI_NODE_HELD, "; ".join(held)))
    elif any(c.get("type") == CONDITION_SCALING_LIMITED for c in conditions):
        updates.append(
            ConditionUpdate(
                CONDITION_SCALING_LIMITED, "False", REASON_NOT_LIMITED, "Every backend scales in its bounds"
            )
        )
    initialized = next((c for c in conditions if c.get("type") == CONDITION_INITIALIZED), None)
    if initialized is not None:
        updates = updates[1:]  # Initialized is set once and then left alone
    status: dict[str, Any] = dict(old)
    status["conditions"] = set_conditions(conditions, updates, now, generation)
    status["backendStatuses"] = [{"name": b.name, "replicas": b.replicas} for b in backends]
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def failure_of(errors: list[FieldError], reason: str) -> Failure:
    return Failure(reason, "; ".join(str(e) for e in errors))
