"""The resolve-templates lifecycle's writes: the caches a template's profile needs, then its status."""

from __future__ import annotations

from datetime import datetime

from engine.aim.template_plan import ResolvePlan
from engine.status import status_with_conditions
from tasks.aim.caches import SharedCaches
from tasks.aim.writes import WriteCounts, post_status_event, write_changed_status
from tasks.clients.cluster import Cluster, Manifest


def write_template_plan(
    cluster: Cluster, template: Manifest, plan: ResolvePlan, caches: SharedCaches, now: datetime, counts: WriteCounts
) -> None:
    """Write what :func:`engine.aim.template_plan.plan_template` decided: the requested caches (each
    one requested from the cluster counts as created), then the status where it changed.

    Args:
        cluster: The cluster the AIMServiceTemplate lives in.
        template: The AIMServiceTemplate as read.
        plan: The engine's decision: caches to request and the template's status and conditions.
        caches: The ModelCaches shared by this run, through which caches are requested (each created once per run).
        now: The time the conditions' ``lastTransitionTime`` takes when they change.
        counts: Where the caches created and the status writes of this template are counted.
    """
    if plan.cache_requests:
        counts.created += caches.request(cluster, plan.namespace, plan.cache_requests)
    if write_changed_status(
        cluster, template, status_with_conditions(template, plan.outcome.conditions, now, plan.status_fields)
    ):
        counts.statuses += 1
        requested = ", ".join(r.source for r in plan.cache_requests)
        sources = ", ".join(plan.outcome.model_sources)
        post_status_event(
            cluster,
            template,
            plan.outcome.status,
            plan.outcome.conditions,
            f"model sources {sources}" if sources else "",
            f"caches requested for {requested}" if requested else "",
        )
