"""The rollout-services lifecycle's writes: the requested caches, the InferenceService and HTTPRoute (and
``lastUsed`` on the caches mounted), the objects retired under an older name, then the service's status.
"""

from __future__ import annotations

from datetime import datetime

from engine.aim.service_plan import ServicePlan
from engine.status import status_with_conditions
from tasks.aim.caches import SharedCaches, mark_caches_used
from tasks.aim.writes import (
    ROLLED_OUT_REASON,
    WriteCounts,
    apply_object,
    as_read,
    count_action,
    delete_stale,
    describe_rendered,
    post_status_event,
    write_changed_status,
)
from tasks.clients.cluster import Cluster, Manifest, ObjectRef
from tasks.clients.cluster.recorder import record_event


def write_service_plan(
    cluster: Cluster, service: Manifest, plan: ServicePlan, caches: SharedCaches, now: datetime, counts: WriteCounts
) -> None:
    """Write what :func:`engine.aim.service_plan.plan_service` decided, in order: the requested caches,
    the InferenceService (and ``lastUsed`` on the caches it mounts), the HTTPRoute, the objects the
    service controls under an older name, then the status (not written when a write before it fails).

    Args:
        cluster: The cluster the AIMService and its workloads live in.
        service: The AIMService as read.
        plan: The engine's decision: caches to request, the InferenceService and HTTPRoute to apply, the objects to
            retire and the service's status and conditions.
        caches: The ModelCaches shared by this run (requests, and the caches as read to mark used).
        now: The time written as the mounted caches' ``lastUsed`` and the conditions' transition time.
        counts: Where the created, updated and deleted objects and the status writes of this service are counted.
    """
    if plan.cache_requests:
        caches.request(cluster, plan.namespace, plan.cache_requests)
    rendered: list[str] = []
    if plan.isvc is not None:
        action = apply_object(cluster, plan.isvc.desired, as_read(plan.isvc.existing), plan.isvc.patch)
        count_action(counts, action)
        rendered += (
            [f"InferenceService {describe_rendered(plan.isvc.desired)} {action}"] if action != "unchanged" else []
        )
        if plan.mounted:
            mark_caches_used(cluster, [c for c in map(caches.as_read, plan.mounted) if c is not None], now)
    if plan.route is not None:
        action = apply_object(cluster, plan.route.desired, as_read(plan.route.existing), plan.route.patch)
        count_action(counts, action)
        rendered += [f"HTTPRoute {plan.route.desired['metadata']['name']} {action}"] if action != "unchanged" else []
    if rendered:
        record_event(cluster, service, ROLLED_OUT_REASON, "; ".join(rendered))
    if plan.retire:
        delete_stale(cluster, [ObjectRef.of(obj.object) for obj in plan.retire], counts)
    status = status_with_conditions(service, plan.outcome.conditions, now, {"status": plan.outcome.status})
    if write_changed_status(cluster, service, status):
        counts.statuses += 1
        post_status_event(cluster, service, plan.outcome.status, plan.outcome.conditions)
