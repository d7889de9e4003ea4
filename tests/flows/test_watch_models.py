"""watch-models: a Kthena Model change becomes `modelplane.kthena.model.changed` while the watch is open, and
the event's rollout does only that Model.

The flow runs against the Kubernetes API test server through the official client (kubernetes.watch.Watch);
the events it emits are captured by Prefect's asserting events client (the real server's trigger chain is
tests/flows/test_platform_flow_runs.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from prefect.events.worker import EventsWorker

from engine.api.crds import render_crds
from engine.changes import new_changes, unobserved_change
from flows.rollout_models import rollout_models
from flows.watch_models import watch_models
from tasks.clients.events import KTHENA_MODEL_CHANGED
from tests.rollout.models import backend, model

GROUP, VERSION = "registry.volcano.sh", "v1alpha1"


@pytest.fixture(scope="module")
def installed_crds(kube_server: Any) -> None:
    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])


@pytest.fixture()
def models(
    kube_server: Any, kube_namespace: str, installed_crds: None, prefect_harness: None
) -> Iterator[k8s.CustomObjectsApi]:
    yield k8s.CustomObjectsApi(kube_server.api_client())


def observed(api: k8s.CustomObjectsApi, ns: str, name: str, generation: int) -> None:
    """What rollout-models writes once it acted on ``generation``."""
    api.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, "models", name, {"status": {"observedGeneration": generation}}
    )


def test_unobserved_change_rules() -> None:
    def obj(generation: int | None, observed_generation: int | None = None, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": "m", "namespace": "ns", "uid": "u"}
        if generation is not None:
            meta["generation"] = generation
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return {
            "metadata": meta,
            "status": {} if observed_generation is None else {"observedGeneration": observed_generation},
        }

    assert unobserved_change(obj(1)).observed_generation is None  # never rolled out
    assert unobserved_change(obj(3, 2)).generation == 3  # edited since
    assert unobserved_change(obj(2, 2)) is None  # up to date
    assert unobserved_change(obj(2, 1, deleting=True)) is None  # going away: owner references clean up
    assert unobserved_change(obj(None)) is None
    assert [c.generation for c in new_changes([obj(3, 2), obj(3, 2)], set())] == [3]
    assert new_changes([obj(3, 2)], {("u", 3)}) == []
    for written in ("two", 2.5, True, None):  # a hand-written observation is none: the change is acted on
        change = unobserved_change({**obj(2), "status": {"observedGeneration": written}})
        assert change is not None and change.observed_generation is None
    assert unobserved_change({**obj(2), "status": "broken"}) is not None


def test_a_change_made_while_the_watch_is_open_is_announced_once(
    models: k8s.CustomObjectsApi,
    kube_server: Any,
    kube_namespace: str,
    asserting_events_worker: EventsWorker,
) -> None:
    ns = kube_namespace
    for name in ("fresh", "settled"):
        models.create_namespaced_custom_object(GROUP, VERSION, ns, "models", model(name, ns, [backend("a")]))
    observed(models, ns, "settled", 1)
    watches = kube_server.count("watch", "models")

    result: dict[str, Any] = {}
    runner = threading.Thread(
        target=lambda: result.update(
            report=watch_models(namespaces=[ns], watch_seconds=4, cluster=f"kubeconfig:{kube_server.kubeconfig}")
        )
    )
    runner.start()
    deadline = time.monotonic() + 60
    while kube_server.count("watch", "models") == watches and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # the watch's initial state is sent; what follows arrives as MODIFIED
    models.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "models", "settled", {"spec": {"backends": [backend("a", maxReplicas=3)]}}
    )
    observed(models, ns, "fresh", 1)  # a status write: no new generation, nothing to announce
    runner.join(60)
    report = result["report"]

    assert [(c.name, c.generation, c.observed_generation) for c in report.changes] == [
        ("fresh", 1, None),
        ("settled", 2, 1),
    ]
    assert report.changes[1].seen_as == "MODIFIED"
    asserting_events_worker.drain()
    events = [e for e in asserting_events_worker._client.events if e.event == KTHENA_MODEL_CHANGED]
    assert [e.resource.id for e in events] == [
        f"modelplane.kthena.model.{ns}.fresh",
        f"modelplane.kthena.model.{ns}.settled",
    ]
    assert events[1].resource["modelplane.namespace"] == ns and events[1].resource["modelplane.name"] == "settled"
    assert events[1].payload == {"generation": 2, "observedGeneration": 1, "seenAs": "MODIFIED"}


def test_the_triggered_rollout_does_only_the_model_the_event_names(
    models: k8s.CustomObjectsApi, kube_server: Any, kube_namespace: str
) -> None:
    ns = kube_namespace
    for name in ("one", "other"):
        models.create_namespaced_custom_object(GROUP, VERSION, ns, "models", model(name, ns, [backend("a")]))
    report = rollout_models(namespaces=[ns], names=["one"], cluster=f"kubeconfig:{kube_server.kubeconfig}")
    assert [m.name for m in report.models] == ["one"]
    statuses = {
        name: models.get_namespaced_custom_object(GROUP, VERSION, ns, "models", name).get("status") or {}
        for name in ("one", "other")
    }
    assert statuses["one"]["observedGeneration"] == 1 and "observedGeneration" not in statuses["other"]


def test_a_hand_edit_of_a_manifest_is_announced_on_a_laptop(example_cluster: Any, prefect_harness: None) -> None:
    """The manifests backend: once rollout-models has observed a Model, a person's edit of its spec in the
    YAML file is a new generation (the backend's bookkeeping), which the next watch announces."""
    rollout_models(cluster=str(example_cluster))
    assert watch_models(watch_seconds=0.5, cluster=str(example_cluster)).changes == []  # rolled out: nothing pending
    manifest = example_cluster / "20-kthena.yaml"
    manifest.write_text(manifest.read_text().replace("maxReplicas: 4", "maxReplicas: 5", 1))
    report = watch_models(watch_seconds=0.5, cluster=str(example_cluster))
    assert [(c.namespace, c.name, c.generation, c.observed_generation) for c in report.changes] == [
        ("llm-serving", "deepseek-r1-distill-qwen-7b", 2, 1)
    ]
