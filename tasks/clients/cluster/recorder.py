"""Kubernetes Events recorded as client-go's event recorder records them (``tools/record``).

Three rules keep a reconcile loop from flooding the API server with Events:

- **correlation**: an Event identical to one already recorded (same source, involved object, type, reason
  and message) bumps that Event — ``count`` and ``lastTimestamp`` (core/v1), ``series.count`` and
  ``series.lastObservedTime`` (what events.k8s.io/v1 and ``kubectl describe`` read) — with one merge patch
  instead of creating another object;
- **aggregation**: once :data:`AGGREGATE_MAX_EVENTS` different messages with the same source, object, type
  and reason have been seen within :data:`AGGREGATE_INTERVAL_S`, the next ones go to one Event whose message
  is ``(combined from similar events): <the latest message>``, which counts on;
- **spam filter**: a token bucket per source and involved object (:data:`SPAM_BURST` Events, refilled at
  :data:`SPAM_QPS`, one every five minutes); an Event beyond it is dropped (and logged).

client-go keeps that state in the process. A scheduled flow run is a fresh process, so the recorder also
seeds its correlation and aggregation from the Events the cluster already holds: the first Event posted in
a namespace lists that namespace's Events from this source once. An unchanged decision repeated every run
therefore bumps one Event instead of creating one per run. The token buckets live in the process (a restarted
client-go controller starts with full buckets too); a long-lived process keeps them across cycles.

The keys leave out ``reportingInstance`` (the host name): each run may be a different pod, and the same
decision of the same controller is still the same Event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from tasks.clients.cluster.base import Cluster, Manifest, ObjectRef
from tasks.clients.cluster.errors import ClusterError, NotFound
from tasks.clients.cluster.objects import EVENT_SOURCE, build_event, now_rfc3339

log = logging.getLogger(__name__)

CACHE_ENTRIES = 4096
"""Entries each cache keeps (least recently used first out), as client-go's ``maxLruCacheEntries``."""
AGGREGATE_MAX_EVENTS = 10
"""Different messages of one source/object/type/reason within the interval before they are combined."""
AGGREGATE_INTERVAL_S = 600.0
"""How long a similar message counts towards :data:`AGGREGATE_MAX_EVENTS`."""
SPAM_BURST = 25
"""Events a source may record about one object at once."""
SPAM_QPS = 1.0 / 300.0
"""The refill rate of that budget: one Event every five minutes."""
COMBINED_PREFIX = "(combined from similar events): "

EventKey = tuple[str, ...]
K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A bounded mapping that forgets its least recently used entry first."""

    def __init__(self, size: int = CACHE_ENTRIES) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value, marked as recently used; None when absent."""
        if key not in self._items:
            return None
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: K, value: V) -> None:
        """Store ``value``, forgetting the oldest entry beyond the size."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def _object_key(event: Manifest) -> EventKey:
    """Source and involved object: the spam filter's key and the start of the others."""
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    return (
        source.get("component", ""),
        source.get("host", ""),
        *(str(involved.get(f, "")) for f in ("kind", "namespace", "name", "uid", "apiVersion")),
    )


def aggregate_key(event: Manifest) -> EventKey:
    """What similar Events share (every message of one source/object/type/reason).

    Args:
        event: An Event manifest.

    Returns:
        Its source, involved object, type and reason.
    """
    return (*_object_key(event), event.get("type", ""), event.get("reason", ""))


def event_key(event: Manifest) -> EventKey:
    """What identical Events share: the aggregate key, the field path and the message.

    Args:
        event: An Event manifest.

    Returns:
        Its aggregate key, field path and message.
    """
    return (*aggregate_key(event), (event.get("involvedObject") or {}).get("fieldPath", ""), event.get("message", ""))


@dataclass
class TokenBucket:
    """client-go's token bucket rate limiter: ``burst`` tokens, refilled at ``qps`` per second."""

    burst: int
    qps: float
    tokens: float
    last: float

    @classmethod
    def full(cls, burst: int, qps: float, now: float) -> TokenBucket:
        return cls(burst, qps, float(burst), now)

    def try_accept(self, now: float) -> bool:
        """Take one token if there is one."""
        self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.last) * self.qps)
        self.last = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class _Similar:
    """The different messages of one aggregate key seen lately."""

    messages: set[str] = field(default_factory=set)
    last: float = 0.0
    combined: bool = False


@dataclass(frozen=True)
class _Observed:
    """The Event on the server for one event key."""

    name: str
    namespace: str
    count: int
    first_timestamp: str


def _epoch(stamp: Any) -> float:
    """Seconds since the epoch of an RFC 3339 time, 0 when absent or malformed."""
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class EventRecorder:
    """Records core/v1 Events through ``cluster`` with client-go's correlation, aggregation and spam filter."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        clock: Callable[[], float] = time.time,
        burst: int = SPAM_BURST,
        qps: float = SPAM_QPS,
        aggregate_max: int = AGGREGATE_MAX_EVENTS,
        aggregate_interval_s: float = AGGREGATE_INTERVAL_S,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.burst, self.qps = burst, qps
        self.aggregate_max, self.aggregate_interval_s = aggregate_max, aggregate_interval_s
        self.dropped = 0
        self._lock = threading.Lock()
        self._seeding = threading.Lock()
        self._seeded: set[str] = set()
        self._similar: LruCache[EventKey, _Similar] = LruCache()
        self._observed: LruCache[EventKey, _Observed] = LruCache()
        self._buckets: LruCache[EventKey, TokenBucket] = LruCache()

    def record(self, obj: Manifest, reason: str, message: str, event_type: str = "Normal") -> Manifest | None:
        """Record an Event about ``obj``: a new Event, a bump of the identical one, or nothing when the
        object's budget is spent (None). Raises the cluster's errors."""
        event = build_event(obj, reason, message, event_type)
        namespace = event["metadata"]["namespace"]
        if namespace not in self._seeded:
            with self._seeding:  # one LIST per namespace even when the run's writers record at once
                if namespace not in self._seeded:
                    self._seed(namespace)
        now = self.clock()
        with self._lock:
            event, key = self._aggregate(event, now)
            bucket = self._buckets.get(_object_key(event)) or TokenBucket.full(self.burst, self.qps, now)
            self._buckets.put(_object_key(event), bucket)
            if not bucket.try_accept(now):
                self.dropped += 1
                log.info("event %s on %s dropped: its rate limit is spent", reason, event["involvedObject"]["name"])
                return None
            previous = self._observed.get(key)
        stored = self._bump(previous, event) if previous is not None else None
        if stored is None:
            stored = self.cluster.create(event)
        with self._lock:
            self._remember(key, stored)
        return stored

    # ------------------------------------------------------------------ the rules

    def _aggregate(self, event: Manifest, now: float) -> tuple[Manifest, EventKey]:
        """The Event to record and its correlation key: itself, or the combined Event of its aggregate key."""
        group = aggregate_key(event)
        similar = self._similar.get(group)
        if similar is None or now - similar.last > self.aggregate_interval_s:
            similar = _Similar()
        similar.messages.add(event["message"])
        similar.last = now
        self._similar.put(group, similar)
        if not similar.combined and len(similar.messages) < self.aggregate_max:
            return event, event_key(event)
        similar.combined = True
        similar.messages.discard(event["message"])  # the set never grows beyond the threshold
        return {**event, "message": COMBINED_PREFIX + event["message"]}, group

    def _bump(self, previous: _Observed, event: Manifest) -> Manifest | None:
        """Count one more occurrence on the stored Event; None when it is gone (expired or deleted)."""
        count = previous.count + 1
        patch = {
            "count": count,
            "lastTimestamp": event["lastTimestamp"],
            "message": event["message"],
            "series": {"count": count, "lastObservedTime": now_rfc3339(micro=True)},
        }
        try:
            return self.cluster.patch_spec(ObjectRef("v1", "Event", previous.name, previous.namespace), patch)
        except NotFound:
            return None

    def _remember(self, key: EventKey, stored: Manifest) -> None:
        meta = stored.get("metadata") or {}
        self._observed.put(
            key,
            _Observed(meta["name"], meta["namespace"], int(stored.get("count") or 1), stored.get("firstTimestamp", "")),
        )

    def _seed(self, namespace: str) -> None:
        """Learn this source's Events in ``namespace`` from the cluster (once per namespace). Where they cannot be
        listed (e.g. a role without ``list`` on events) the Events are still recorded, only not correlated with
        the earlier runs' ones."""
        try:
            listed = self.cluster.list("v1", "Event", namespace)
        except ClusterError as exc:
            log.warning("cannot list the Events of %s to aggregate with them: %s", namespace, exc.message)
            listed = []
        stored = [e for e in listed if (e.get("source") or {}).get("component") == EVENT_SOURCE]
        now = self.clock()
        with self._lock:
            if namespace in self._seeded:
                return
            self._seeded.add(namespace)
            for event in sorted(stored, key=lambda e: _epoch(e.get("lastTimestamp"))):
                combined = str(event.get("message", "")).startswith(COMBINED_PREFIX)
                self._remember(aggregate_key(event) if combined else event_key(event), event)
                last = _epoch(event.get("lastTimestamp"))
                if now - last > self.aggregate_interval_s:
                    continue
                similar = self._similar.get(aggregate_key(event)) or _Similar()
                similar.last = max(similar.last, last)
                if combined:
                    similar.combined = True
                else:
                    similar.messages.add(event.get("message", ""))
                self._similar.put(aggregate_key(event), similar)


def record_event(cluster: Cluster, obj: Manifest, reason: str, message: str, event_type: str = "Normal") -> bool:
    """Post an Event about ``obj``; a failure to record one is logged, never fatal to the run (an Event reports
    a decision, nothing waits on it). False when it could not be recorded.

    Args:
        cluster: The cluster the Event is posted to.
        obj: The object the Event is about.
        reason: The Event's reason.
        message: The Event's message.
        event_type: ``Normal`` or ``Warning``.

    Returns:
        True when the Event was recorded.
    """
    try:
        cluster.post_event(obj, reason, message, event_type)
        return True
    except ClusterError as exc:
        name = (obj.get("metadata") or {}).get("name")
        log.warning("could not record Event %s on %s %s: %s", reason, obj.get("kind"), name, exc.message)
        return False
