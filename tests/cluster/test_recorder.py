"""Events recorded as client-go's recorder does (tasks/clients/cluster/recorder.py), on both backends.

A repeated Event bumps the stored one (also from a new process: a new cluster object), different messages of
one reason are combined past the threshold, and a per-object token bucket drops a flood.
"""

from __future__ import annotations

from tasks.clients.cluster import Cluster, LocalCluster
from tasks.clients.cluster.base import Manifest, ObjectRef
from tasks.clients.cluster.recorder import AGGREGATE_MAX_EVENTS, COMBINED_PREFIX, EventRecorder
from tests.cluster.conftest import VA, Backend


def reopened(backend: Backend) -> Cluster:
    """A second cluster object on the same state: what the next scheduled run (a new process) connects to."""
    if backend.server is None:
        assert isinstance(backend.cluster, LocalCluster)
        return LocalCluster(backend.cluster.path)
    from tasks.clients.cluster.kube import KubeCluster

    return KubeCluster(api_client=backend.server.api_client())


def events_about(cluster: Cluster, namespace: str, name: str) -> list[Manifest]:
    return [e for e in cluster.list("v1", "Event", namespace) if e["involvedObject"]["name"] == name]


def test_a_repeated_event_bumps_count_on_one_event_across_runs(backend: Backend, ns: str) -> None:
    va = backend.cluster.get(*VA, "seed-va", ns)
    first = backend.cluster.post_event(va, "RolloutFailed", "InferenceService rejected", "Warning")
    backend.cluster.post_event(va, "RolloutFailed", "InferenceService rejected", "Warning")
    later_run = reopened(backend)
    bumped = later_run.post_event(
        later_run.get(*VA, "seed-va", ns), "RolloutFailed", "InferenceService rejected", "Warning"
    )
    assert first is not None and bumped is not None
    (event,) = events_about(reopened(backend), ns, "seed-va")
    assert event["metadata"]["name"] == first["metadata"]["name"] == bumped["metadata"]["name"]
    assert event["count"] == 3 and event["series"]["count"] == 3 and event["series"]["lastObservedTime"]
    assert event["firstTimestamp"] == first["firstTimestamp"] and event["lastTimestamp"] >= first["lastTimestamp"]


def test_a_different_message_or_type_is_a_new_event(cluster: Cluster, ns: str) -> None:
    va = cluster.get(*VA, "seed-va", ns)
    cluster.post_event(va, "Scaled", "to 2")
    cluster.post_event(va, "Scaled", "to 3")
    cluster.post_event(va, "Scaled", "to 3", "Warning")
    assert sorted((e["message"], e["type"], e["count"]) for e in events_about(cluster, ns, "seed-va")) == [
        ("to 2", "Normal", 1),
        ("to 3", "Normal", 1),
        ("to 3", "Warning", 1),
    ]


def test_similar_events_beyond_the_threshold_are_combined(backend: Backend, ns: str) -> None:
    va = backend.cluster.get(*VA, "seed-va", ns)
    for i in range(AGGREGATE_MAX_EVENTS - 1):
        backend.cluster.post_event(va, "Tick", f"tick {i}")
    later_run = reopened(backend)  # the aggregation state is learnt from the cluster's recent Events
    for i in range(AGGREGATE_MAX_EVENTS - 1, AGGREGATE_MAX_EVENTS + 4):
        later_run.post_event(va, "Tick", f"tick {i}")
    events = events_about(reopened(backend), ns, "seed-va")
    assert len(events) == AGGREGATE_MAX_EVENTS
    (combined,) = [e for e in events if e["message"].startswith(COMBINED_PREFIX)]
    assert combined["message"] == f"{COMBINED_PREFIX}tick {AGGREGATE_MAX_EVENTS + 3}" and combined["count"] == 5


def test_the_spam_filter_drops_a_flood_per_object_and_refills(backend: Backend, cluster: Cluster, ns: str) -> None:
    now = [1_000_000.0]
    recorder = EventRecorder(cluster, clock=lambda: now[0], burst=3, qps=1.0 / 300.0)
    va, other = cluster.get(*VA, "seed-va", ns), cluster.get(*VA, "seed-va", backend.other_namespace)
    posted = [recorder.record(va, "Flapping", f"state {i}") for i in range(5)]
    assert [p is not None for p in posted] == [True, True, True, False, False] and recorder.dropped == 2
    assert recorder.record(other, "Flapping", "state 0") is not None  # the budget is per object
    now[0] += 300.0
    assert recorder.record(va, "Flapping", "state 5") is not None
    assert recorder.record(va, "Flapping", "state 6") is None
    assert len(events_about(cluster, ns, "seed-va")) == 4


def test_a_bump_of_an_expired_event_creates_it_again(cluster: Cluster, ns: str) -> None:
    va = cluster.get(*VA, "seed-va", ns)
    first = cluster.post_event(va, "Held", "scale-down held")
    assert first is not None
    cluster.delete(ObjectRef.of(first))  # the API server expires Events (an hour by default)
    again = cluster.post_event(va, "Held", "scale-down held")
    assert again is not None and again["count"] == 1
    assert [e["count"] for e in events_about(cluster, ns, "seed-va")] == [1]
