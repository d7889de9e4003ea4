"""Leader election on a coordination.k8s.io/v1 Lease (tasks/leader.py, flows/leading.py) against the Kubernetes
API test server: two replica processes, the leader killed, the standby takes over; SIGTERM releases the Lease."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from tasks.clients.cluster.kube import KubeCluster
from tasks.leader import LeaderElector, LeaseConfig
from tests.servers.s3test.fixture import free_port

# Shorter than client-go's 15 s / 10 s / 2 s (LeaseConfig's defaults, which the racing test below relies on) so
# the takeover waits 8 s of expiry, not 15; the renew deadline still spans several retries on a loaded machine.
LEASE_S, RENEW_DEADLINE_S, RETRY_S = 8, 6.0, 1.0
REPLICA = (
    "import sys, time; from flows.leading import run_elected; from tasks.clients.cluster import connect; "
    "from tasks.leader import LeaseConfig; "
    "run_elected(lambda: time.sleep(3600), connect(sys.argv[1]), LeaseConfig('serve', sys.argv[2], sys.argv[3], "
    f"{LEASE_S}, {RENEW_DEADLINE_S}, {RETRY_S}), int(sys.argv[4]))"
)


class Replica:
    """One replica process: its identity, health port and process."""

    def __init__(self, server: Any, namespace: str, identity: str) -> None:
        self.identity, self.port = identity, free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", REPLICA, f"kubeconfig:{server.kubeconfig}", namespace, identity, str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def probe(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0


@pytest.fixture()
def replicas(kube_server: Any, kube_namespace: str) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        if replica.proc.poll() is None:
            replica.proc.kill()
        replica.proc.wait(10)


def lease(server: Any, namespace: str) -> dict[str, Any]:
    api = k8s.CoordinationV1Api(server.api_client())
    obj = api.read_namespaced_lease("serve", namespace)
    return dict(api.api_client.sanitize_for_serialization(obj)["spec"])


def wait_for(check: Any, timeout: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def holder(server: Any, namespace: str) -> str | None:
    try:
        return lease(server, namespace).get("holderIdentity")
    except k8s.ApiException:
        return None


def test_a_standby_takes_over_within_30s_of_the_leaders_loss(
    kube_server: Any, kube_namespace: str, replicas: list[Replica]
) -> None:
    first = Replica(kube_server, kube_namespace, "replica-a")
    replicas.append(first)
    wait_for(lambda: holder(kube_server, kube_namespace) == "replica-a", 30, "replica-a leads")
    wait_for(lambda: first.probe("/readyz") == 200, 10, "the leader is ready")
    second = Replica(kube_server, kube_namespace, "replica-b")
    replicas.append(second)
    wait_for(lambda: second.probe("/healthz") == 200, 30, "the standby is alive")
    time.sleep(3 * RETRY_S)  # a few retry periods: the standby keeps away from a renewed Lease
    assert holder(kube_server, kube_namespace) == "replica-a" and second.probe("/readyz") == 503

    first.proc.send_signal(signal.SIGKILL)  # no release: the standby must wait for the Lease to expire
    took = wait_for(lambda: holder(kube_server, kube_namespace) == "replica-b", 30, "replica-b takes over")
    assert took < 30
    spec = lease(kube_server, kube_namespace)
    assert spec["leaseTransitions"] == 1 and spec["leaseDurationSeconds"] == LEASE_S
    assert spec["acquireTime"] and spec["renewTime"]
    wait_for(lambda: second.probe("/readyz") == 200, 10, "the new leader is ready")

    second.proc.send_signal(signal.SIGTERM)  # graceful: the Lease is released
    assert second.proc.wait(15) == 0, second.proc.stderr.read().decode() if second.proc.stderr else ""
    assert holder(kube_server, kube_namespace) in (None, "")


def test_of_two_standbys_racing_for_an_expired_lease_one_wins(kube_server: Any, kube_namespace: str) -> None:
    defaults = LeaseConfig("serve", kube_namespace, "x")
    assert (defaults.lease_s, defaults.renew_deadline_s, defaults.retry_s) == (15, 10.0, 2.0)  # client-go's
    now = [0.0]
    cluster = KubeCluster(api_client=kube_server.api_client())
    gone = LeaderElector(cluster, LeaseConfig("serve", kube_namespace, "gone"), clock=lambda: now[0])
    assert gone.try_acquire_or_renew()
    a, b = (LeaderElector(cluster, LeaseConfig("serve", kube_namespace, n), clock=lambda: now[0]) for n in "ab")
    assert not a.try_acquire_or_renew() and not b.try_acquire_or_renew()  # held and fresh
    now[0] += 16  # no renewal seen for longer than the lease duration
    record = cluster.get("coordination.k8s.io/v1", "Lease", "serve", kube_namespace)
    original_get = cluster.get
    cluster.get = lambda *args, **kwargs: record  # type: ignore[method-assign]  # both read the same version
    won = [a.try_acquire_or_renew(), b.try_acquire_or_renew()]
    cluster.get = original_get  # type: ignore[method-assign]
    assert won == [True, False]
    assert lease(kube_server, kube_namespace)["holderIdentity"] == "a" and a.is_leader and not b.is_leader


def test_a_holder_whose_renewal_hangs_stops_leading_at_the_renew_deadline(
    kube_server: Any, kube_namespace: str
) -> None:
    """The API server stops answering the holder (its calls hang for the client's 30 s request timeout). Before,
    the renewal loop waited for the call, so the holder kept acting for 36 s while a standby took the Lease over
    after the 15 s lease duration; now it stops at the 10 s renew deadline, before any standby may take over."""
    import threading

    cluster = KubeCluster(api_client=kube_server.api_client())
    config = LeaseConfig("hang", kube_namespace, "holder", lease_s=3, renew_deadline_s=1.0, retry_s=0.2)
    elector = LeaderElector(cluster, config)
    assert elector.try_acquire_or_renew()
    hang, release = threading.Event(), threading.Event()
    original_get = cluster.get

    def get(*args: Any, **kwargs: Any) -> Any:
        if hang.is_set():
            release.wait(10)  # a call the API server never answers (until the test ends)
        return original_get(*args, **kwargs)

    cluster.get = get  # type: ignore[method-assign]
    stop = threading.Event()
    renewing = threading.Thread(target=elector.keep_renewing, args=(stop,), daemon=True)
    renewing.start()
    time.sleep(0.6)
    assert renewing.is_alive() and elector.is_leader  # renewing normally
    hang.set()
    started = time.monotonic()
    renewing.join(5)
    stopped_after = time.monotonic() - started
    release.set()
    stop.set()
    assert not renewing.is_alive() and not elector.is_leader
    assert stopped_after < config.lease_s, stopped_after  # gone before a standby could take the Lease over
