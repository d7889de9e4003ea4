"""Optimistic-concurrency helpers: read-modify-write with ``resourceVersion``, and transient retries.

Controllers on Kubernetes never blindly overwrite: they read an object, compute the change from what
they read, and write with the read ``resourceVersion`` so a concurrent writer's update is not lost
(the server answers 409 and the whole read-compute-write is repeated). :func:`retry_on_conflict` is
that loop; :func:`retry_unavailable` retries calls that failed because the API server was briefly
unreachable or overloaded.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from tasks.clients.cluster.base import Cluster, Manifest, Mutation, ObjectRef
from tasks.clients.cluster.errors import Conflict, Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")
Backoff = Callable[[int], float]
_MAX_RETRY_AFTER = 30.0  # never let a server's Retry-After stall a flow longer than this per attempt
# The jitter's own generator: a retry in a watch or worker thread leaves the process's global random state (which a
# caller may have seeded, and which Hypothesis watches while it draws examples) as it was.
_JITTER = random.Random()


def exponential_backoff(base: float = 0.05, cap: float = 1.0, jitter: float = 0.5) -> Backoff:
    """The delay before each retry: ``base * 2**(attempt-1)`` capped, with +/- jitter.

    Args:
        base: Seconds before the first retry.
        cap: The longest delay, in seconds.
        jitter: The relative spread around the delay (0.5: between half and one and a half times it).

    Returns:
        Attempt number (1-based) -> seconds to wait.
    """

    def delay(attempt: int) -> float:
        raw = min(cap, base * 2.0 ** (attempt - 1))
        return max(0.0, raw * (1 + _JITTER.uniform(-jitter, jitter)))

    return delay


def retry_on_conflict(
    cluster: Cluster,
    ref: ObjectRef,
    mutate: Mutation,
    *,
    attempts: int = 5,
    write: Literal["status", "spec"] = "status",
    backoff: Backoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
    read: Manifest | None = None,
) -> Manifest:
    """Read ``ref``, apply ``mutate`` and write the result with the read resourceVersion.

    On ``Conflict`` the object is re-read and ``mutate`` re-applied, up to ``attempts`` times in all.

    Args:
        cluster: The cluster the object lives in.
        ref: The object.
        mutate: Gets a private copy of the object and returns the status to merge (``write="status"``) or the
            merge-patch of the main resource (``write="spec"``), or ``None`` when nothing needs writing.
        attempts: Writes tried at most.
        write: Which part is written.
        backoff: The delay before each retry (default :func:`exponential_backoff`).
        sleep: How to wait (tests pass a recorder).
        read: The object as this run already read it: the first attempt computes from it without a GET (a run
            reads once), and only a conflict goes back to the cluster for a fresh copy.

    Returns:
        The object as written (or as read when nothing was written).

    Raises:
        Conflict: The object still changed under the last attempt.
        ValueError: ``attempts`` below 1 or an unknown ``write``.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    if write not in ("status", "spec"):
        raise ValueError(f"write must be 'status' or 'spec', not {write!r}")
    backoff = backoff or exponential_backoff()
    for attempt in range(1, attempts + 1):
        current = (
            read
            if attempt == 1 and read is not None
            else cluster.get(ref.api_version, ref.kind, ref.name, ref.namespace)
        )
        change = mutate(copy.deepcopy(current))
        if change is None:
            return current
        version = (current.get("metadata") or {}).get("resourceVersion")
        try:
            if write == "status":
                return cluster.patch_status(ref, change, resource_version=version)
            return cluster.patch_spec(ref, change, resource_version=version)
        except Conflict:
            if attempt == attempts:
                raise
            log.debug("conflict writing %s %s (attempt %d/%d), retrying", ref.kind, ref.name, attempt, attempts)
            sleep(backoff(attempt))
    raise AssertionError("unreachable: attempts must be >= 1")  # pragma: no cover


def write_status(cluster: Cluster, read: Manifest, build_patch: Mutation) -> bool:
    """Patch the status computed from the object as read; on a conflict re-read, recompute and retry.

    The first attempt uses the object as the run read it (its resourceVersion is the precondition), so an
    uncontended write costs one PATCH and no GET (:func:`retry_on_conflict` with ``read``).

    Args:
        cluster: The cluster the object lives in.
        read: The object as this run read it.
        build_patch: The status merge-patch for a copy of the object, or ``None`` when nothing needs writing.

    Returns:
        Whether a write happened.

    Raises:
        Conflict: The object kept changing under every attempt.
    """
    written = False

    def mutate(current: Manifest) -> Manifest | None:
        nonlocal written
        patch = build_patch(current)
        written = patch is not None
        return patch

    retry_on_conflict(cluster, ObjectRef.of(dict(read)), mutate, write="status", read=dict(read))
    return written


def retry_unavailable(
    fn: Callable[[], T],
    attempts: int = 4,
    base_delay: float = 0.2,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``, retrying with exponential backoff while it raises ``Unavailable``.

    Only transient failures (unreachable server, 429, 5xx) are retried; every other error propagates
    at once. A server-sent ``Retry-After`` (kept by the kube backend as ``retry_after`` on the error)
    lengthens the wait.

    Args:
        fn: The call.
        attempts: Calls tried at most.
        base_delay: Seconds before the first retry.
        sleep: How to wait (tests pass a recorder).

    Returns:
        What ``fn`` returned.

    Raises:
        Unavailable: The last attempt's, after ``attempts`` calls.
        ValueError: ``attempts`` below 1.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    delay = exponential_backoff(base=base_delay, cap=max(base_delay, 30.0), jitter=0.2)
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Unavailable as exc:
            if attempt == attempts:
                raise
            asked = min(getattr(exc, "retry_after", None) or 0.0, _MAX_RETRY_AFTER)
            sleep(max(delay(attempt), asked))
    raise AssertionError("unreachable")  # pragma: no cover
