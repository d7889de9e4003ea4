"""Leader election on a ``coordination.k8s.io/v1`` Lease, the protocol of client-go's ``leaderelection``.

Replicas of one long-lived process (``modelplane serve-deployments --leader-elect``) compete for one Lease; only
its holder acts. The holder renews ``spec.renewTime`` every :attr:`LeaseConfig.retry_s`; a standby takes the Lease
over once it has seen no renewal for ``spec.leaseDurationSeconds`` (measured on its own clock from when it last
saw the record change, as client-go does, so clock skew between nodes does not matter). Every write carries the
``resourceVersion`` it read, so of two standbys racing for an expired Lease exactly one wins (the other gets a
Conflict). A holder that cannot renew within :attr:`LeaseConfig.renew_deadline_s` stops leading; on shutdown it
releases the Lease (empty holder), so a standby takes over at its next try instead of after the lease duration.
Fields: ``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime``, ``leaseTransitions``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.api.views import Lease
from tasks.clients.cluster import Cluster, ClusterError, Conflict, NotFound, ObjectRef
from tasks.clients.cluster.objects import now_rfc3339

log = logging.getLogger(__name__)

LEASE_API_VERSION = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class LeaseConfig:
    """Which Lease, who this replica is, and client-go's default timings (15 s, 10 s, 2 s)."""

    name: str
    namespace: str
    identity: str
    lease_s: int = 15
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(LEASE_API_VERSION, "Lease", self.name, self.namespace)


class LeaderElector:
    """One replica's side of the election (thread-safe: a renewal thread and the health endpoints read it)."""

    def __init__(self, cluster: Cluster, config: LeaseConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self.holder: str | None = None
        self.taken_from: str | None = None
        """Who held the Lease when this replica took it over (None: created, released, or already ours)."""

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds the Lease and renewed it within the renew deadline."""
        with self._lock:
            return self._renewed_at is not None and self.clock() - self._renewed_at <= self.config.renew_deadline_s

    def try_acquire_or_renew(self) -> bool:
        """One attempt: create the Lease, renew ours, or take over an expired or released one. True when held."""
        me = self.config.identity
        stamp = now_rfc3339(micro=True)
        try:
            lease = self.cluster.get(LEASE_API_VERSION, "Lease", self.config.name, self.config.namespace)
        except NotFound:
            return self._write(None, {"holderIdentity": me, "acquireTime": stamp, "leaseTransitions": 0}, stamp)
        spec = Lease.model_validate(lease).record
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        with self._lock:
            expired = self.clock() - self._observed_at > float(spec.get("leaseDurationSeconds") or self.config.lease_s)
        if holder and holder != me and not expired:
            with self._lock:
                self._renewed_at = None
            return False
        change: dict[str, Any] = {"holderIdentity": me}
        if holder != me:
            change |= {"acquireTime": stamp, "leaseTransitions": int(spec.get("leaseTransitions") or 0) + 1}
        taken = self._write(lease, change, stamp)
        if taken and holder != me:
            self.taken_from = holder or None
        return taken

    def release(self) -> None:
        """Give the Lease up (empty holder, as client-go's ReleaseOnCancel) when this replica holds it."""
        with self._lock:
            held, self._renewed_at = self._renewed_at is not None, None
        if not held:
            return
        try:
            lease = self.cluster.get(LEASE_API_VERSION, "Lease", self.config.name, self.config.namespace)
            if Lease.model_validate(lease).spec.holder_identity == self.config.identity:
                spec = {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now_rfc3339(micro=True)}
                self.cluster.patch_spec(self.config.ref, {"spec": spec}, lease["metadata"]["resourceVersion"])
                log.info("released Lease %s/%s", self.config.namespace, self.config.name)
        except ClusterError as exc:  # it expires by itself after leaseDurationSeconds
            log.warning("could not release Lease %s: %s", self.config.name, exc.message)

    def acquire(self, stop: threading.Event) -> bool:
        """Try every ``retry_s`` until the Lease is held (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self._attempt():
                log.info("leading: Lease %s/%s held by %s", self.config.namespace, self.config.name, self.holder)
                return True
            stop.wait(self.config.retry_s)
        return False

    def keep_renewing(self, stop: threading.Event) -> None:
        """Renew every ``retry_s`` until ``stop`` is set or a renewal has failed for ``renew_deadline_s``; then
        return (the caller stops acting).

        Each renewal runs on a daemon thread and is waited for only until the renew deadline: a call to an API
        server that hangs (the client's request timeout is 30 s) must not hold this replica leading past it, or
        a standby takes the Lease over after the lease duration while this one still acts (two leaders for about
        16 s before). The deadline is what client-go's elector enforces too, with a context on each call."""
        while not stop.wait(self.config.retry_s):
            attempt = threading.Thread(target=self._attempt, name="lease-renewal", daemon=True)
            attempt.start()
            attempt.join(self._until_deadline() + 0.01)
            if not self.is_leader:
                log.error("lost the Lease %s (holder now %s)", self.config.name, self.holder)
                return

    def _until_deadline(self) -> float:
        """Seconds left before the last renewal is older than the renew deadline (0 when it already is)."""
        with self._lock:
            renewed = self._renewed_at
        if renewed is None:
            return 0.0
        return max(renewed + self.config.renew_deadline_s - self.clock(), 0.0)

    # ------------------------------------------------------------------ internals

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except ClusterError as exc:  # the API server is unreachable: keep leading until the deadline passes
            log.warning("Lease %s: %s", self.config.name, exc.message)
            return False

    def _observe(self, spec: dict[str, Any]) -> None:
        """Remember the record and when it was last seen to change (the local clock, never the record's times)."""
        with self._lock:
            self.holder = spec.get("holderIdentity") or None
            if spec != self._observed:
                self._observed, self._observed_at = dict(spec), self.clock()

    def _write(self, lease: dict[str, Any] | None, change: dict[str, Any], stamp: str) -> bool:
        spec = {**(Lease.model_validate(lease).record if lease is not None else {}), **change}
        spec |= {"renewTime": stamp, "leaseDurationSeconds": self.config.lease_s}
        try:
            if lease is None:
                meta = {"name": self.config.name, "namespace": self.config.namespace}
                self.cluster.create({"apiVersion": LEASE_API_VERSION, "kind": "Lease", "metadata": meta, "spec": spec})
            else:
                self.cluster.patch_spec(self.config.ref, {"spec": spec}, lease["metadata"]["resourceVersion"])
        except Conflict:  # another replica wrote first: it holds the Lease
            return False
        self._observe(spec)
        with self._lock:
            self._renewed_at = self.clock()
        return True
