"""One writer per cluster: the lock a run holds while it reads, plans and writes (the optimize loop's).

Two runs that read the same objects at once and write different decisions leave a scale target and the status
describing it disagreeing (one run's scale, the other's status). Controllers avoid it with leader election;
a run does the same for the length of its cycle:

* on a Kubernetes cluster, a ``coordination.k8s.io/v1`` Lease (:mod:`tasks.leader`, client-go's protocol):
  created or taken over with the read ``resourceVersion`` so of two runs racing for it exactly one wins, renewed
  every :attr:`~tasks.leader.LeaseConfig.retry_s` by a thread while the run goes on, released (empty holder)
  when it ends; a run that crashed stops renewing, and its Lease is taken over ``leaseDurationSeconds`` later;
* on the local manifests backend, an exclusive ``flock`` on a hidden lock file beside the manifests
  (:meth:`~tasks.clients.cluster.local_store.LocalStore.lease_lock_path`), holding the holder's identity for the
  waiting run's messages; the kernel releases it when the process ends, however it ends.

A run that finds the lock held waits for it, bounded (:func:`hold_writer_lock`'s ``wait_s``), logging who holds
it; then it goes on once the holder released, or raises :class:`LockHeld` naming the holder.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from tasks.clients.cluster import Cluster, LocalCluster
from tasks.clients.cluster.errors import Unavailable
from tasks.clients.files import open_own
from tasks.leader import LeaderElector, LeaseConfig

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often a waiting run looks at the lock again (a released Lease or file lock is taken within this)."""


class LockHeld(Exception):
    """Another run held the lock for the whole wait; ``holder`` names it (identity, or ``unknown``)."""

    def __init__(self, where: str, holder: str, waited_s: float) -> None:
        super().__init__(f"{where} is held by {holder}: waited {waited_s:.0f} s for it to be released")
        self.where, self.holder, self.waited_s = where, holder, waited_s


def run_identity() -> str:
    """Who this run is, as client-go names a candidate: host, process and a per-run suffix (two runs of one
    process, as threads, are two holders).

    Returns:
        ``HOST_PID_SUFFIX``, the holder identity written to the Lease or lock file.
    """
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@dataclass
class WriterLock:
    """The lock as held: where, by whom, and whether it is still held (a Lease whose renewal failed for its
    renew deadline is lost; a run checks :attr:`held` before it writes)."""

    where: str
    identity: str
    _elector: LeaderElector | None = field(default=None, repr=False)

    @property
    def held(self) -> bool:
        """False once a Lease could not be renewed within its renew deadline (a file lock is never lost)."""
        return self._elector is None or self._elector.is_leader

    @property
    def holder_now(self) -> str:
        """Who holds the Lease as last seen (this run while it holds it)."""
        if self._elector is None:
            return self.identity
        return self._elector.holder or "nobody"


@contextmanager
def hold_writer_lock(cluster: Cluster, name: str, namespace: str, wait_s: float) -> Iterator[WriterLock]:
    """Hold the cluster's writer lock ``name`` for the block: a Lease ``namespace/name``, or a lock file
    beside a local cluster's manifests. Waits up to ``wait_s`` for another holder to release it, then raises
    :class:`LockHeld`; a Lease that cannot be read or written at all raises the :class:`ClusterError`.

    Args:
        cluster: The cluster whose writer lock is held (a Lease, or a lock file beside a local cluster's manifests).
        name: The lock's name (the Lease's name).
        namespace: The Lease's namespace.
        wait_s: How long to wait for another holder to release the lock, in seconds.

    Yields:
        The lock held, renewed while the block runs.

    Raises:
        LockHeld: Another holder kept the lock for ``wait_s`` seconds.
        ClusterError: The Lease cannot be read or written at all.
    """
    identity = run_identity()
    if isinstance(cluster, LocalCluster):
        with _file_lock(cluster.lease_lock_path(name), identity, wait_s) as lock:
            yield lock
        return
    with _lease(cluster, LeaseConfig(name, namespace, identity), wait_s) as lock:
        yield lock


@contextmanager
def _lease(cluster: Cluster, config: LeaseConfig, wait_s: float) -> Iterator[WriterLock]:
    where = f"Lease {config.namespace}/{config.name}"
    elector = LeaderElector(cluster, config)
    started = time.monotonic()
    logged = False
    while not elector.try_acquire_or_renew():  # a ClusterError (no such namespace, RBAC) propagates: cannot run
        waited = time.monotonic() - started
        if waited >= wait_s:
            raise LockHeld(where, elector.holder or "unknown", waited)
        if not logged:
            log.warning("%s is held by %s; waiting up to %.0f s for it", where, elector.holder, wait_s)
            logged = True
        time.sleep(min(POLL_S, wait_s - waited))
    stop = threading.Event()
    renewing = threading.Thread(target=elector.keep_renewing, args=(stop,), name=f"lease-{config.name}", daemon=True)
    renewing.start()
    try:
        yield WriterLock(where, config.identity, elector)
    finally:
        stop.set()
        renewing.join()
        elector.release()


@contextmanager
def _file_lock(path: Path, identity: str, wait_s: float) -> Iterator[WriterLock]:
    where = f"lock file {path}"
    if fcntl is None:  # pragma: no cover - not POSIX: nothing to lock with
        yield WriterLock(where, identity)
        return
    try:  # never through a link planted at the lock's name: the identity written below would land in its target
        handle = os.fdopen(open_own(path, os.O_RDWR | os.O_CREAT), "r+")
    except OSError as exc:
        raise Unavailable(f"cannot open {where}: {exc.strerror or exc}") from None
    try:
        _wait_for_flock(handle, where, wait_s)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{identity} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        handle.flush()
        yield WriterLock(where, identity)
    finally:
        handle.close()


def _wait_for_flock(handle: IO[str], where: str, wait_s: float) -> None:
    started = time.monotonic()
    logged = False
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            waited = time.monotonic() - started
            holder = _file_holder(handle)
            if waited >= wait_s:
                raise LockHeld(where, holder, waited) from None
            if not logged:
                log.warning("%s is held by %s; waiting up to %.0f s for it", where, holder, wait_s)
                logged = True
            time.sleep(min(POLL_S, wait_s - waited))


def _file_holder(handle: IO[str]) -> str:
    """The identity the holder wrote into the lock file (``unknown`` while it is still writing it)."""
    handle.seek(0)
    return handle.read().strip() or "unknown"
