"""tasks.caches: one ModelCache per identity per namespace, adopted by every consumer (both backends)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from engine.caches.identity import CACHE_IDENTITY_LABEL, cache_identity, cache_name
from engine.caches.lookup import cache_available, cache_pvc, find_cache, find_model_cache
from engine.caches.sources import parse_source
from tasks.boundary import parse_resource
from tasks.caches import ensure_cache, mark_used
from tasks.cluster import Cluster, ObjectRef

MC = ("aim.silogen.ai/v1alpha1", "ModelCache")
LLAMA = parse_source("hf://meta-llama/Llama-3.1-8B-Instruct")


@pytest.fixture()
def ns(any_cluster: Cluster) -> str:
    name = f"c-{uuid.uuid4().hex[:8]}"
    any_cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})  # a cluster needs it
    return name


def person_cache(ns: str, name: str, uri: str, storage_class: str | None = None) -> dict:
    spec = {"sourceUri": uri, "size": "20Gi"}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": MC[0], "kind": MC[1], "metadata": {"name": name, "namespace": ns}, "spec": spec}


def test_first_consumer_creates_the_cache_named_and_labelled_by_identity(any_cluster: Cluster, ns: str) -> None:
    cache = ensure_cache(any_cluster, ns, LLAMA, requested_by="AIMService/x/chat")
    meta = cache["metadata"]
    assert meta["name"] == cache_name(LLAMA)
    assert meta["labels"][CACHE_IDENTITY_LABEL] == cache_identity(LLAMA)
    assert meta["annotations"]["modelplane.io/requested-by"] == "AIMService/x/chat"
    assert cache["spec"] == {"sourceUri": LLAMA.uri}
    assert not cache_available(cache) and cache_pvc(cache) is None


def test_a_second_consumer_adopts_the_existing_cache(any_cluster: Cluster, ns: str) -> None:
    first = ensure_cache(any_cluster, ns, LLAMA, requested_by="AIMService/x/chat")
    # Same weights, spelled differently (explicit default revision).
    second = ensure_cache(
        any_cluster, ns, parse_source("hf://meta-llama/Llama-3.1-8B-Instruct@main"), requested_by="Model/x/llama"
    )
    assert second["metadata"]["name"] == first["metadata"]["name"]
    assert len(any_cluster.list(*MC, namespace=ns)) == 1
    assert second["metadata"]["annotations"]["modelplane.io/requested-by"] == "AIMService/x/chat,Model/x/llama"
    # Asking again records nothing new and writes nothing.
    again = ensure_cache(any_cluster, ns, LLAMA, requested_by="Model/x/llama")
    assert again["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]


def test_a_persons_cache_of_the_same_source_is_adopted_not_duplicated(any_cluster: Cluster, ns: str) -> None:
    any_cluster.create(person_cache(ns, "my-llama", "hf://meta-llama/Llama-3.1-8B-Instruct", "fast"))
    cache = ensure_cache(any_cluster, ns, LLAMA, requested_by="AIMService/x/chat")
    assert cache["metadata"]["name"] == "my-llama"
    assert cache["metadata"]["labels"][CACHE_IDENTITY_LABEL] == cache_identity(LLAMA, "fast")
    assert [c["metadata"]["name"] for c in any_cluster.list(*MC, namespace=ns)] == ["my-llama"]


def test_another_storage_class_or_another_revision_gets_its_own_cache(any_cluster: Cluster, ns: str) -> None:
    any_cluster.create(person_cache(ns, "my-llama", "hf://meta-llama/Llama-3.1-8B-Instruct", "fast"))
    other_class = ensure_cache(any_cluster, ns, LLAMA, storage_class="slow", requested_by="a/b/c")
    other_rev = ensure_cache(
        any_cluster, ns, parse_source("hf://meta-llama/Llama-3.1-8B-Instruct@v2"), requested_by="a/b/c"
    )
    names = {c["metadata"]["name"] for c in any_cluster.list(*MC, namespace=ns)}
    assert names == {"my-llama", other_class["metadata"]["name"], other_rev["metadata"]["name"]}
    assert other_class["spec"]["storageClassName"] == "slow"


def test_find_cache_prefers_the_exact_identity_then_the_best_status() -> None:
    def cache(name: str, sc: str | None, status: str | None) -> dict:
        obj = person_cache("n", name, LLAMA.uri, sc)
        if status:
            obj["status"] = {"status": status}
        return obj

    caches = [
        cache("failed", None, "Failed"),
        cache("ready", None, "Available"),
        cache("other", "fast", "Available"),
        person_cache("n", "broken", "ftp://nope"),
    ]
    assert find_cache(caches, LLAMA)["metadata"]["name"] == "ready"
    assert find_cache(caches, LLAMA, "fast")["metadata"]["name"] == "other"
    assert find_cache(caches, LLAMA, "slow")["metadata"]["name"] == "ready"  # a class-less cache is shared
    assert find_cache(caches, parse_source("s3://bucket/model")) is None
    # The AIM engine looks the same caches up as their API models (the boundary reader's): the same choice.
    models = [parse_resource(c) for c in caches]
    for args in ((LLAMA,), (LLAMA, "fast"), (LLAMA, "slow"), (parse_source("s3://bucket/model"),)):
        raw, typed = find_cache(caches, *args), find_model_cache(models, *args)
        assert (typed.metadata.name if typed else None) == (raw["metadata"]["name"] if raw else None)


def test_sources_mounted_directly_are_not_cached(any_cluster: Cluster, ns: str) -> None:
    with pytest.raises(ValueError, match="mounted directly"):
        ensure_cache(any_cluster, ns, parse_source("pvc://models/llama"), requested_by="a/b/c")


def test_mark_used_writes_last_used_through_status(any_cluster: Cluster, ns: str) -> None:
    cache = ensure_cache(any_cluster, ns, LLAMA, requested_by="a/b/c")
    now = datetime(2026, 11, 23, 10, 0, 5, 123, tzinfo=UTC)
    updated = mark_used(any_cluster, cache, now)
    assert updated["status"]["lastUsed"] == "2026-11-23T10:00:05Z"
    assert mark_used(any_cluster, updated, now)["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    stored = any_cluster.get(*MC, cache["metadata"]["name"], ns)
    assert stored["status"]["lastUsed"] == "2026-11-23T10:00:05Z"
    assert stored["metadata"]["generation"] == cache["metadata"]["generation"]
    assert ObjectRef.of(stored).name == cache["metadata"]["name"]
