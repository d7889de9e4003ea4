"""tasks.caches: one ModelCache per identity per namespace, adopted by every consumer (both backends)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from engine.caches.identity import CACHE_IDENTITY_LABEL, cache_identity, cache_name
from engine.caches.lookup import find_model_cache, model_cache_pvc, model_cache_status
from engine.caches.sources import parse_source
from tasks.caches import ensure_cache, mark_used, read_caches
from tasks.clients.cluster import Cluster, ObjectRef

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
    meta = cache.obj["metadata"]
    assert meta["name"] == cache_name(LLAMA) == cache.name
    assert meta["labels"][CACHE_IDENTITY_LABEL] == cache_identity(LLAMA)
    assert meta["annotations"]["modelplane.io/requested-by"] == "AIMService/x/chat"
    assert cache.obj["spec"] == {"sourceUri": LLAMA.uri}
    assert model_cache_status(cache.model) is None and model_cache_pvc(cache.model) is None


def test_a_second_consumer_adopts_the_existing_cache(any_cluster: Cluster, ns: str) -> None:
    first = ensure_cache(any_cluster, ns, LLAMA, requested_by="AIMService/x/chat")
    # Same weights, spelled differently (explicit default revision).
    second = ensure_cache(
        any_cluster, ns, parse_source("hf://meta-llama/Llama-3.1-8B-Instruct@main"), requested_by="Model/x/llama"
    )
    assert second.name == first.name
    assert len(any_cluster.list(*MC, namespace=ns)) == 1
    assert second.obj["metadata"]["annotations"]["modelplane.io/requested-by"] == "AIMService/x/chat,Model/x/llama"
    # Asking again records nothing new and writes nothing.
    again = ensure_cache(any_cluster, ns, LLAMA, requested_by="Model/x/llama")
    assert again.obj["metadata"]["resourceVersion"] == second.obj["metadata"]["resourceVersion"]


def test_a_persons_cache_of_the_same_source_is_adopted_not_duplicated(any_cluster: Cluster, ns: str) -> None:
    any_cluster.create(person_cache(ns, "my-llama", "hf://meta-llama/Llama-3.1-8B-Instruct", "fast"))
    cache = ensure_cache(any_cluster, ns, LLAMA, requested_by="AIMService/x/chat")
    assert cache.name == "my-llama"
    assert cache.obj["metadata"]["labels"][CACHE_IDENTITY_LABEL] == cache_identity(LLAMA, "fast")
    assert [c["metadata"]["name"] for c in any_cluster.list(*MC, namespace=ns)] == ["my-llama"]


def test_another_storage_class_or_another_revision_gets_its_own_cache(any_cluster: Cluster, ns: str) -> None:
    any_cluster.create(person_cache(ns, "my-llama", "hf://meta-llama/Llama-3.1-8B-Instruct", "fast"))
    other_class = ensure_cache(any_cluster, ns, LLAMA, storage_class="slow", requested_by="a/b/c")
    other_rev = ensure_cache(
        any_cluster, ns, parse_source("hf://meta-llama/Llama-3.1-8B-Instruct@v2"), requested_by="a/b/c"
    )
    names = {c["metadata"]["name"] for c in any_cluster.list(*MC, namespace=ns)}
    assert names == {"my-llama", other_class.name, other_rev.name}
    assert other_class.model.spec.storage_class_name == "slow"


def test_find_cache_prefers_the_exact_identity_then_the_best_status() -> None:
    def cache(name: str, sc: str | None, status: str | None) -> dict:
        obj = person_cache("n", name, LLAMA.uri, sc)
        if status:
            obj["status"] = {"status": status}
        return obj

    caches = [
        m.model
        for m in read_caches(
            [
                cache("failed", None, "Failed"),
                cache("ready", None, "Available"),
                cache("other", "fast", "Available"),
                person_cache("n", "broken", "ftp://nope"),
            ]
        )
    ]

    def found(*args: object) -> str | None:
        chosen = find_model_cache(caches, *args)  # type: ignore[arg-type]
        return chosen.metadata.name if chosen else None

    assert found(LLAMA) == "ready"
    assert found(LLAMA, "fast") == "other"
    assert found(LLAMA, "slow") == "ready"  # a class-less cache is shared
    assert found(parse_source("s3://bucket/model")) is None


def test_a_cache_that_does_not_parse_is_skipped_and_a_malformed_status_is_read_as_none() -> None:
    """Every consumer looks caches up as their API model: a ModelCache whose spec does not parse is skipped
    (never adopted, never a crash; warm-caches marks it), one whose status does not parse is read without
    it: not mountable, and a status that is not a mapping never preferred to a good one."""
    unparsed = person_cache("n", "a-unparsed", LLAMA.uri)
    unparsed["spec"]["size"] = {"huge": True}
    odd_status = dict(person_cache("n", "b-odd-status", LLAMA.uri), status="Available")
    odd_pvc = dict(
        person_cache("n", "c-odd-pvc", LLAMA.uri), status={"status": "Available", "persistentVolumeClaim": 7}
    )
    good = dict(person_cache("n", "d-good", LLAMA.uri), status={"status": "Available", "persistentVolumeClaim": "p"})
    no_kind = {"kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "n"}}
    read = read_caches([unparsed, odd_status, odd_pvc, good, no_kind])
    assert [c.name for c in read] == ["b-odd-status", "c-odd-pvc", "d-good"]
    models = [c.model for c in read]
    chosen = find_model_cache([models[0], models[2]], LLAMA)
    assert chosen is not None and chosen.metadata.name == "d-good" and model_cache_pvc(chosen) == "p"
    assert [model_cache_pvc(m) for m in models] == [None, None, "p"]  # a PVC name that is no string is not mounted
    alone = find_model_cache(models[:1], LLAMA)
    assert alone is not None and alone.metadata.name == "b-odd-status" and model_cache_pvc(alone) is None
    assert find_model_cache([], LLAMA) is None and read_caches([unparsed]) == []


def test_sources_mounted_directly_are_not_cached(any_cluster: Cluster, ns: str) -> None:
    with pytest.raises(ValueError, match="mounted directly"):
        ensure_cache(any_cluster, ns, parse_source("pvc://models/llama"), requested_by="a/b/c")


def test_mark_used_writes_last_used_through_status(any_cluster: Cluster, ns: str) -> None:
    cache = ensure_cache(any_cluster, ns, LLAMA, requested_by="a/b/c")
    now = datetime(2026, 11, 23, 10, 0, 5, 123, tzinfo=UTC)
    updated = mark_used(any_cluster, cache, now)
    assert updated.obj["status"]["lastUsed"] == "2026-11-23T10:00:05Z"
    again = mark_used(any_cluster, updated, now)
    assert again.obj["metadata"]["resourceVersion"] == updated.obj["metadata"]["resourceVersion"]
    stored = any_cluster.get(*MC, cache.name, ns)
    assert stored["status"]["lastUsed"] == "2026-11-23T10:00:05Z"
    assert stored["metadata"]["generation"] == cache.obj["metadata"]["generation"]
    assert ObjectRef.of(stored).name == cache.name
