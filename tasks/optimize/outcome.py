"""When an optimize cycle ran degraded: the rules behind its summary, its exit code 3 and its ``Degraded`` run state.

A cycle is degraded when it could not see or do everything it should: metrics unavailable, configuration errors,
resources not ready, failed writes, manifests the cluster could not read, or desired replicas that did not reach
the Pushgateway of a target that is actuated through it. It still did everything else (never a harmful action).
"""

from __future__ import annotations

from engine.optimize.actuation import publishes
from engine.optimize.bindings import BindingDecision
from engine.optimize.plan import CyclePlan
from engine.perf.saturation import SaturationConfigSet
from tasks.clients.cluster import Cluster
from tasks.clients.pushgateway import Pushgateway
from tasks.optimize.read import ClusterState
from tasks.optimize.write import WriteOutcome


def actuation_problems(
    writes: list[WriteOutcome],
    bindings: list[BindingDecision],
    gateway: Pushgateway | None,
    push_error: str | None,
    dry_run: bool,
) -> list[str]:
    """Degraded reasons of the publication: the Pushgateway failed, or targets whose mode publishes have none.

    Args:
        writes: The variants' write outcomes (their actuation modes).
        bindings: The bindings' decisions (their targets' modes).
        gateway: The Pushgateway, None when none is configured.
        push_error: Why the push failed, None when it did not.
        dry_run: A dry run publishes nothing and is never degraded by it.

    Returns:
        The reasons, empty when the publication is as it should be.
    """
    if dry_run:
        return []
    if push_error:
        return [f"metrics not published ({push_error})"]
    if gateway is None:
        waiting = sum(1 for w in writes if publishes(w.mode)) + sum(
            1 for b in bindings for t in b.targets if publishes(t.mode)
        )
        if waiting:
            return [
                f"{waiting} targets in metrics/both actuation mode but no Pushgateway configured "
                "(--pushgateway-url, parameter pushgateway_url, or $MODELPLANE_PUSHGATEWAY_URL)"
            ]
    return []


def degraded_reasons(
    cluster: Cluster,
    state: ClusterState,
    plan: CyclePlan,
    writes: list[WriteOutcome],
    binding_errors: list[str],
    metrics_error: str | None,
) -> list[str]:
    """Why this cycle ran degraded (empty when it ran clean): what the summary and the exit code report.

    Args:
        cluster: The cluster read (what it could not read makes the cycle degraded).
        state: What the cycle read (configuration errors, saturation settings).
        plan: What it decided (resources not ready).
        writes: The variants' write outcomes.
        binding_errors: The bindings' API failures.
        metrics_error: Why the metrics were unavailable, or None.

    Returns:
        The reasons, in the order the summary lists them.
    """
    reasons: list[str] = []
    if metrics_error:
        reasons.append(f"metrics unavailable ({metrics_error})")
    if state.config_errors:
        reasons.append(f"{len(state.config_errors)} configuration errors")
    reasons += SaturationConfigSet.from_configmap(state.saturation_data).problems()
    not_ready = sum(1 for d in plan.variants if not d.ready) + sum(1 for b in plan.bindings if not b.ready)
    if not_ready:
        reasons.append(f"{not_ready} resources not ready")
    failed_writes = sum(1 for w in writes if w.error) + len(binding_errors)
    if failed_writes:
        reasons.append(f"{failed_writes} write errors (see the log)")
    if cluster.unreadable:
        reasons.append(f"{len(cluster.unreadable)} manifest files or documents could not be read")
    return reasons
