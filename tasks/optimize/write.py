"""What the optimize cycle writes back: scale, status and Events for each VariantAutoscaling and binding.

Each object is written independently (:func:`tasks.tracking.map_in_threads`: they are I/O bound), so one failure is that
object's error and the others proceed. Writes go through the scale subresource and the ``/status``
subresource; a status write that hits a stale resourceVersion re-reads the object and re-applies the change
(:func:`tasks.clients.cluster.retry.write_status`, also used by the rollout flows). Whether a target is scaled at all is its actuation
mode (engine.optimize.actuation); an Event is posted when the desired replicas change.

A VariantAutoscaling's status is written last, conditioned on the resourceVersion its decision was made from.
When that write conflicts (the object changed since: a spec edit, another writer's status), the decision is
stale: the object is re-read and re-planned (the flow's :data:`Replan`), and the new decision's scale and status
are written in turn, never the stale status over the newer object. So each object ends with a status that
describes the replicas its target was given.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.api.kthena import AutoscalingPolicyBinding
from engine.optimize.actuation import RECOMMEND, SCALE, Actuation, ActuationModeError, resource_mode, scales
from engine.optimize.bindings import REASON_NO_METRICS, BindingDecision, binding_status
from engine.optimize.plan import VariantDecision
from engine.optimize.stabilization import ANNOTATION_SCALE_DOWN_PENDING
from engine.optimize.status import status_patch, variant_status
from engine.status import REASON_INVALID, changed_fields, generation_of, mapping_at
from tasks.boundary import Accepted
from tasks.clients.cluster import Cluster, ObjectRef
from tasks.clients.cluster.errors import ClusterError, Conflict
from tasks.clients.cluster.recorder import record_event
from tasks.clients.cluster.retry import write_status
from tasks.optimize.bindings import binding_modes
from tasks.optimize.read import ClusterState
from tasks.tracking import map_in_threads, run_logger, task

log = logging.getLogger("modelplane.optimize")

WRITE_WORKERS = 8
REPLAN_ATTEMPTS = 4
"""How many decisions one VariantAutoscaling's write may go through (the first and three re-plans) before
its status conflict is reported as that object's write error."""

Replan = Callable[[dict[str, Any]], "VariantDecision | None"]
"""The decision for a VariantAutoscaling as just re-read (None: it no longer passes the boundary, which
reported it): the flow plans it again from that object and its target's replicas now."""


@dataclass
class WriteOutcome:
    """What happened when one object's decision was written back."""

    namespace: str
    name: str
    scaled: bool = False
    applied: bool = False
    status_written: bool = False
    event: bool = False
    error: str | None = None
    mode: str = SCALE
    """The actuation mode this object was applied in (engine.optimize.actuation)."""
    published: bool = False
    """Its desired replicas reached the Pushgateway this cycle."""


def write_status_once(
    cluster: Cluster,
    listed: Mapping[str, Any],
    build_patch: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> bool:
    """Patch the status computed from the object, conditioned on its resourceVersion; ``Conflict`` when the
    object changed since (the caller decides again). Returns whether a write happened.

    Args:
        cluster: The cluster the object lives in.
        listed: The object as the cycle read it (its resourceVersion is the write's precondition).
        build_patch: Computes the status patch from the object, or None when nothing changes.

    Returns:
        Whether a write happened.

    Raises:
        Conflict: The object changed since it was read (raised by the cluster client).
    """
    patch = build_patch(dict(listed))
    if patch is None:
        return False
    version = (listed.get("metadata") or {}).get("resourceVersion")
    cluster.patch_status(ObjectRef.of(dict(listed)), patch, resource_version=version)
    return True


def _version_of(written: Mapping[str, Any]) -> dict[str, Any]:
    """The resourceVersion (and generation) of an object as a write returned it."""
    meta = written.get("metadata") or {}
    return {key: meta[key] for key in ("resourceVersion", "generation") if key in meta}


def replan_variant(
    cluster: Cluster,
    stale: VariantDecision,
    obj: dict[str, Any],
    replan: Replan,
    attempts: int,
    outcome: WriteOutcome,
    now: datetime,
    heartbeat_s: float,
    default_mode: str,
) -> WriteOutcome:
    """After a status conflict: re-read the object, decide again from it, and apply that decision (its scale,
    then its status conditioned on the re-read resourceVersion). What the stale decision already scaled is
    corrected by the new decision's scale, so the status written last describes the target's replicas.

    Args:
        cluster: The cluster the VariantAutoscaling lives in.
        stale: The decision made from the object before the conflict; updated to the decision applied.
        obj: The object as it was read before the conflict.
        replan: Decides again from a re-read object (None when it is no longer valid).
        attempts: How many more decisions may be made.
        outcome: The outcome of the stale decision's writes so far.
        now: The cycle's time.
        heartbeat_s: How old a status may grow before it is rewritten unchanged, in seconds.
        default_mode: The cluster's default actuation mode.

    Returns:
        The outcome of the new decision's writes, or ``outcome`` with the error that stopped the re-plan.
    """
    ref = ObjectRef.of(obj)
    log.info("conflict writing status of %s/%s; re-reading and re-planning it", ref.namespace, ref.name)
    try:
        fresh = cluster.get(ref.api_version, ref.kind, ref.name, ref.namespace)
        decision = replan(fresh)
    except ClusterError as exc:
        outcome.error = (outcome.error + "; " if outcome.error else "") + f"status: re-reading: {exc.message}"
        return outcome
    if decision is None:  # no longer valid: the boundary marked it with a condition naming the field
        outcome.error = (outcome.error + "; " if outcome.error else "") + "status: changed into an invalid object"
        return outcome
    again = apply_variant(cluster, decision, fresh, now, heartbeat_s, default_mode, outcome.published, replan, attempts)
    again.scaled = again.scaled or outcome.scaled
    for item in dataclasses.fields(decision):  # the cycle's report shows the decision that was applied
        setattr(stale, item.name, getattr(decision, item.name))
    return again


def scale_down_held(decision: VariantDecision) -> str:
    """What a held scale-down waits for: the replicas now, the highest recommended since the window started.

    Args:
        decision: A VariantAutoscaling's decision whose scale-down the stabilization window holds.

    Returns:
        The Event's message.
    """
    pending = json.loads(decision.stabilization or "{}")
    return (
        f"Scale-down from {decision.current} to {pending.get('max')} replicas held by the stabilization window "
        f"(recommended since {pending.get('since')}); {decision.reason}"
    )


def variant_mode(obj: Mapping[str, Any], default: str) -> str:
    """The actuation mode of a VariantAutoscaling; ``recommend`` when its annotation is malformed (the
    planner has already made it invalid, with a condition naming the annotation).

    Args:
        obj: The VariantAutoscaling as read.
        default: The cluster's default actuation mode.

    Returns:
        ``scale``, ``recommend`` or another actuation mode.
    """
    try:
        return resource_mode((obj.get("metadata") or {}).get("annotations"), default)
    except ActuationModeError:
        return RECOMMEND


def apply_variant(
    cluster: Cluster,
    decision: VariantDecision,
    obj: dict[str, Any],
    now: datetime,
    heartbeat_s: float,
    default_mode: str = SCALE,
    published: bool = False,
    replan: Replan | None = None,
    attempts: int = REPLAN_ATTEMPTS,
) -> WriteOutcome:
    """Scale the target when its actuation mode scales, then write status (``actuation.applied`` as WVA
    means it for that mode, engine.optimize.actuation) and an Event when desired changed.

    ``published``: the decision's desired replicas reached the Pushgateway this cycle. ``replan``: how to
    decide again when the status write conflicts (see the module docs; without it the same decision is
    re-applied to the re-read object, as :func:`tasks.clients.cluster.retry.write_status` does), at most ``attempts`` decisions in all.

    Args:
        cluster: The cluster the VariantAutoscaling and its target live in.
        decision: The engine's decision for it.
        obj: The VariantAutoscaling as read.
        now: The cycle's time.
        heartbeat_s: How old a status may grow before it is rewritten unchanged, in seconds.
        default_mode: The cluster's default actuation mode.
        published: Whether the desired replicas reached the Pushgateway this cycle.
        replan: How to decide again when the status write conflicts, or None to re-apply the same decision.
        attempts: How many decisions may be made in all.

    Returns:
        What was written: scaled, status written, Event, mode, applied, and the error of a failed write.
    """
    mode = variant_mode(obj, default_mode) if decision.actuate else RECOMMEND
    outcome = WriteOutcome(
        decision.namespace, decision.name, mode=mode, published=published and decision.desired is not None
    )
    scale_ok = False
    if decision.desired is not None and decision.target is not None:
        if not scales(mode) or not decision.ready:
            pass  # metrics/recommend mode never writes the scale; a hold on bad input or missing data applies nothing
        elif decision.changes_replicas:
            api_version, kind, name = decision.target
            try:
                cluster.set_scale(ObjectRef(api_version, kind, name, decision.namespace), decision.desired)
                outcome.scaled = scale_ok = True
            except ClusterError as exc:
                outcome.error = f"scale {kind}/{name}: {exc.message}"
                decision.ready = False
                decision.message += f"; scaling failed: {exc.message}"
        else:
            scale_ok = True
    outcome.applied = Actuation(mode, scale_ok, outcome.published).applied
    if decision.stabilization_changed:
        try:  # the scale-down window's state: an annotation (the seed's status has no field for it)
            written = cluster.patch_spec(
                ObjectRef.of(obj),
                {"metadata": {"annotations": {ANNOTATION_SCALE_DOWN_PENDING: decision.stabilization}}},
            )
            # Our own write moved the resourceVersion: the status write's precondition is the object as written.
            obj = {**obj, "metadata": {**(obj.get("metadata") or {}), **_version_of(written)}}
            if decision.stabilization is not None:
                record_event(cluster, obj, "ScaleDownHeld", scale_down_held(decision))
        except ClusterError as exc:
            outcome.error = (outcome.error + "; " if outcome.error else "") + f"scale-down window state: {exc.message}"
    generation = generation_of(obj)

    def build(current: dict[str, Any]) -> dict[str, Any] | None:
        old = mapping_at(current, "status")
        new = variant_status(decision, old, now, outcome.applied, generation)
        return status_patch(old, new, now, heartbeat_s)

    try:
        if replan is None:
            outcome.status_written = write_status(cluster, obj, build)
        else:
            outcome.status_written = write_status_once(cluster, obj, build)
    except Conflict as exc:  # with replan: the decision was made from an object that has changed since
        if replan is not None and attempts > 1:
            return replan_variant(cluster, decision, obj, replan, attempts - 1, outcome, now, heartbeat_s, default_mode)
        still = f" (still conflicting after {REPLAN_ATTEMPTS - 1} re-plans)" if replan is not None else ""
        outcome.error = (outcome.error + "; " if outcome.error else "") + f"status: {exc.message}{still}"
        return outcome
    except ClusterError as exc:
        outcome.error = (outcome.error + "; " if outcome.error else "") + f"status: {exc.message}"
    previous = mapping_at(mapping_at(obj, "status"), "desiredOptimizedAlloc").get("numReplicas")
    if decision.desired is not None and previous != decision.desired:
        outcome.event = record_event(
            cluster,
            obj,
            "DesiredReplicasChanged",
            f"Desired replicas {previous if previous is not None else 'unset'} -> {decision.desired} "
            f"({decision.reason}): {decision.message}",
        )
    return outcome


@task(name="apply-decisions")
def apply_decisions(
    cluster: Cluster,
    state: ClusterState,
    decisions: list[VariantDecision],
    now: datetime,
    heartbeat_s: float,
    published: frozenset[tuple[str, str]] = frozenset(),
    replan: Replan | None = None,
) -> list[WriteOutcome]:
    """Write every variant's decision back (concurrently; each object independently).

    ``published``: (namespace, name) of the variants whose desired replicas reached the Pushgateway.
    ``replan``: how to decide an object again when its status write conflicts (see the module docs).

    Args:
        cluster: The cluster the VariantAutoscalings live in.
        state: The cycle's read of the cluster (the objects as read, the default actuation mode).
        decisions: The engine's decision for every VariantAutoscaling.
        now: The cycle's time.
        heartbeat_s: How old a status may grow before it is rewritten unchanged, in seconds.
        published: The (namespace, name) of the variants whose desired replicas reached the Pushgateway.
        replan: How to decide an object again when its status write conflicts, or None.

    Returns:
        Every variant's write outcome, in the order of ``decisions``; errors are logged as well.
    """
    objects = {(va.namespace, va.name): va.obj for va in state.variants}
    outcomes = map_in_threads(
        lambda d: apply_variant(
            cluster,
            d,
            objects[(d.namespace, d.name)],
            now,
            heartbeat_s,
            state.actuation_mode,
            (d.namespace, d.name) in published,
            replan,
        ),
        decisions,
        WRITE_WORKERS,
    )
    logger = run_logger()
    for outcome in outcomes:
        if outcome.error:
            logger.error("VariantAutoscaling %s/%s: %s", outcome.namespace, outcome.name, outcome.error)
    return outcomes


def apply_binding(
    cluster: Cluster,
    binding: Accepted[AutoscalingPolicyBinding],
    decision: BindingDecision,
    now: datetime,
    default_mode: str = SCALE,
    published: frozenset[tuple[str, str]] = frozenset(),
) -> None:
    """Scale each changed target whose mode scales, persist window state in status, post an Event.

    ``published``: (namespace, target name) of the targets whose desired replicas reached the Pushgateway.

    Args:
        cluster: The cluster the binding and its targets live in.
        binding: The AutoscalingPolicyBinding as read, with its parsed model.
        decision: The engine's decision for it; its targets' modes and results are filled in.
        now: The cycle's time.
        default_mode: The cluster's default actuation mode.
        published: The (namespace, target name) of the targets whose desired replicas reached the Pushgateway.
    """
    modes, binding_mode, mode_error = binding_modes(binding.model, default_mode)
    if mode_error:
        decision.ready, decision.reason, decision.message = False, REASON_INVALID, mode_error
    for target in decision.targets:
        target.mode = modes.get(target.name, binding_mode)
        scale_ok = False
        if scales(target.mode) and target.changes_replicas and target.desired is not None:
            try:
                cluster.set_scale(
                    ObjectRef(target.api_version, target.kind, target.name, target.namespace), target.desired
                )
                target.scaled = scale_ok = True
            except ClusterError as exc:
                decision.ready = False
                decision.message += f"; scaling {target.kind}/{target.name} failed: {exc.message}"
        elif scales(target.mode) and decision.ready:
            scale_ok = True
        target.applied = Actuation(target.mode, scale_ok, (target.namespace, target.name) in published).applied
    metrics_ok = decision.reason != REASON_NO_METRICS
    metrics_message = "Policy metrics are available" if metrics_ok else decision.message
    generation = binding.model.metadata.generation

    def build(current: dict[str, Any]) -> dict[str, Any] | None:
        old = mapping_at(current, "status")
        return changed_fields(old, binding_status(decision, old, now, generation, metrics_ok, metrics_message))

    write_status(cluster, binding.obj, build)
    if any(t.changes_replicas for t in decision.targets):
        record_event(cluster, binding.obj, "DesiredReplicasChanged", decision.message)


BindingPlan = tuple[Accepted[AutoscalingPolicyBinding], BindingDecision]


@task(name="apply-bindings")
def apply_bindings(
    cluster: Cluster,
    plans: list[BindingPlan],
    now: datetime,
    default_mode: str,
    published: frozenset[tuple[str, str]],
) -> list[str]:
    """Scale the targets whose mode scales and persist each binding's state.

    Args:
        cluster: The cluster written to.
        plans: Each binding as read with what the plan decided for it.
        now: The cycle's time.
        default_mode: The cluster's default actuation mode.
        published: (namespace, name) of the targets whose desired replicas reached the Pushgateway.

    Returns:
        The API failures of single bindings (the others proceed).
    """
    logger = run_logger()
    errors: list[str] = []
    for binding, decision in plans:
        try:
            apply_binding(cluster, binding, decision, now, default_mode, published)
        except ClusterError as exc:
            name = f"{decision.namespace}/{decision.name}"
            logger.error("AutoscalingPolicyBinding %s: %s", name, exc.message)
            errors.append(f"{name}: {exc.message}")
    return errors
