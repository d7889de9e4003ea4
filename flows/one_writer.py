"""One writer per cluster for the optimize cycle: the lock it holds from its first read to its last write, and how
an object whose status write conflicted is decided again.

Two cycles that read the same objects at once and write different decisions would leave a scale target with one
cycle's replicas and its VariantAutoscaling's status with the other's. :func:`writer_lock` holds the cluster's
Lease (a lock file on the local backend, :mod:`tasks.writer_lock`) for the cycle; :func:`replanner` is what the
writes (:mod:`tasks.optimize.write`) call when a status write's resourceVersion precondition fails.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from engine.api.llmd import VariantAutoscaling
from engine.optimize.plan import VariantDecision, plan_cycle
from engine.optimize.spec import CycleInputs
from flows.exitcodes import CannotRun
from tasks.boundary import accept_as, not_being_deleted
from tasks.clients.cluster import Cluster
from tasks.clients.cluster.errors import ClusterError, NotFound
from tasks.optimize.read import ClusterState, read_current_replicas, scale_targets_of
from tasks.optimize.write import Replan
from tasks.writer_lock import LockHeld, WriterLock, hold_writer_lock

log = logging.getLogger("modelplane.optimize")

LOCK_NAME = "modelplane-optimize"
"""The Lease (in the configuration namespace) a writing cycle holds; on the local backend, its lock file."""
LOCK_WAIT_S = 30.0
"""How long a cycle waits for another one holding the Lease: half the interval, so a cycle that waited still
finishes within the flow's timeout; a crashed holder's Lease (15 s) expires well within it."""


@contextmanager
def writer_lock(cluster: Cluster, namespace: str, dry_run: bool) -> Iterator[WriterLock | None]:
    """Hold the cluster's optimize Lease (a lock file on the local backend) for the block; a dry run takes none.

    A run that finds it held waits up to :data:`LOCK_WAIT_S` for the holder to finish, then stops with
    :class:`CannotRun` naming the holder (it has read and written nothing). Waiting rather than failing at
    once: a run chained by an event (a rolled-out Model's namespace) is not lost to a scheduled one. Where the
    configuration namespace does not exist (a cluster with Kthena bindings only) there is nowhere to keep the
    Lease: the cycle runs without it and logs a warning saying so.

    Args:
        cluster: The cluster the cycle writes to.
        namespace: The configuration namespace, where the Lease lives.
        dry_run: Whether the cycle writes nothing (no lock is taken).

    Yields:
        The lock held, or None for a dry run or a cluster without the namespace.

    Raises:
        CannotRun: Another run holds the lock after the wait, or the Lease cannot be taken.
    """
    if dry_run:
        yield None
        return
    with ExitStack() as stack:
        try:
            lock = stack.enter_context(hold_writer_lock(cluster, LOCK_NAME, namespace, LOCK_WAIT_S))
        except LockHeld as exc:
            raise CannotRun(
                f"another optimize run is writing to this cluster: {exc}; this run changed nothing"
            ) from None
        except NotFound as exc:  # no such namespace: a cluster without Modelplane's configuration (bindings only)
            log.warning("running without the Lease %s/%s: %s", namespace, LOCK_NAME, exc.message)
            lock = None
        except ClusterError as exc:
            raise CannotRun(f"cannot take the Lease {namespace}/{LOCK_NAME}: {exc.message}") from None
        yield lock


def replanner(cluster: Cluster, state: ClusterState, inputs: CycleInputs) -> Replan:
    """How a VariantAutoscaling whose status write conflicted is decided again: the cycle's inputs (metrics, time,
    configuration) with that object as re-read and every target's replicas read again; its decision from the
    whole plan, so the allocation it gets is the one it would have got in the cycle.

    Args:
        cluster: The cluster the cycle writes to.
        state: The cycle's read of the cluster.
        inputs: The cycle's engine inputs.

    Returns:
        The re-plan function: from the re-read object, its new decision, or None when it is no longer valid or is
        being deleted.
    """

    def replan(fresh: dict[str, Any]) -> VariantDecision | None:
        accepted = not_being_deleted(accept_as(cluster, [fresh], VariantAutoscaling))
        if not accepted:  # invalid now, or being deleted since the cycle read it: nothing is written
            return None
        va = accepted[0]
        key = (va.namespace, va.name)
        fresh_state = dataclasses.replace(
            state, variants=[va if (v.namespace, v.name) == key else v for v in state.variants]
        )
        replicas = read_current_replicas.fn(cluster, scale_targets_of(fresh_state))
        again = dataclasses.replace(
            inputs,
            variants=fresh_state.variant_models(),
            current_replicas=replicas.current,
            ready_replicas=replicas.ready,
            invalid_targets=replicas.invalid,
        )
        return next((d for d in plan_cycle(again).variants if (d.namespace, d.name) == key), None)

    return replan
