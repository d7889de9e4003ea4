"""The serve-openmodel flow against the Kubernetes API test server: the shared cache, flavor placement
with fallback, the rendered vLLM Deployment + Service, and conditions on the OpenModel."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from engine.api.crds import render_crds
from engine.api.identity import name_error
from flows.serve_openmodel import ServeError, serve_openmodel
from tests.flows.test_rollout_models import assert_valid_k8s

AIM = ("aim.silogen.ai", "v1alpha1")


class Env:
    def __init__(self, server: Any, namespace: str) -> None:
        api = server.api_client()
        self.server = server
        self.ns = namespace
        self.core = k8s.CoreV1Api(api)
        self.apps = k8s.AppsV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.cluster = f"kubeconfig:{server.kubeconfig}"
        self.nodes: list[str] = []

    def node(self, name: str, labels: dict[str, str]) -> None:
        self.core.create_node({"metadata": {"name": name, "labels": labels}})
        self.nodes.append(name)

    def openmodel(self, name: str, source: dict[str, Any], flavors: list[dict[str, Any]]) -> None:
        body = {
            "apiVersion": "llmaz.io/v1alpha1",
            "kind": "OpenModel",
            "metadata": {"name": name},
            "spec": {
                "familyName": "qwen2",
                "ownedBy": "platform-team",
                "source": source,
                "inferenceConfig": {"flavors": flavors},
            },
        }
        self.custom.create_cluster_custom_object("llmaz.io", "v1alpha1", "openmodels", body)

    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        obj = self.custom.get_cluster_custom_object("llmaz.io", "v1alpha1", "openmodels", name)
        return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}

    def caches(self) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(*AIM, self.ns, "modelcaches")["items"]

    def serve(self, name: str, **params: Any) -> Any:
        return serve_openmodel(model=name, namespace=self.ns, cluster=self.cluster, **params)

    def deployment(self, name: str) -> dict[str, Any]:
        return self.apps.api_client.sanitize_for_serialization(self.apps.read_namespaced_deployment(name, self.ns))

    def described(self, name: str) -> list[dict[str, Any]]:
        """The Events of ``kubectl describe openmodel NAME`` (cluster-scoped: in ``default``), oldest first."""
        items = self.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.kind=OpenModel,involvedObject.name={name}"
        ).items
        ordered = sorted(items, key=lambda e: int(e.metadata.resource_version))
        return [{"type": e.type, "reason": e.reason, "message": e.message, "count": e.count} for e in ordered]


@pytest.fixture(scope="module")
def installed_crds(kube_server: Any) -> None:
    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])


@pytest.fixture()
def env(kube_server: Any, kube_namespace: str, installed_crds: None, prefect_harness: None) -> Iterator[Env]:
    environment = Env(kube_server, kube_namespace)
    yield environment
    for node in environment.nodes:
        try:
            environment.core.delete_node(node)
        except k8s.ApiException:
            pass


HUB = {
    "modelHub": {
        "name": "Huggingface",
        "modelID": "Qwen/Qwen2.5-0.5B-Instruct",
        "allowPatterns": ["*.json", "*.safetensors"],
    }
}


def test_served_from_its_cache_on_the_first_flavor_then_the_next_when_no_node_matches(env: Env) -> None:
    name = f"qwen-{env.ns}"
    l40s, a100 = f"l40s-{env.ns}", f"a100-{env.ns}"
    env.node(f"{env.ns}-n1", {"gpu.product": l40s})
    env.node(f"{env.ns}-n2", {"gpu.product": a100})
    env.openmodel(
        name,
        HUB,
        [
            {"name": "l40s", "limits": {"nvidia.com/gpu": 1}, "nodeSelector": {"gpu.product": l40s}},
            {"name": "a100", "limits": {"nvidia.com/gpu": 2, "memory": "80Gi"}, "nodeSelector": {"gpu.product": a100}},
        ],
    )

    # First: the shared cache is created and nothing is served until it holds the weights.
    report = env.serve(name)
    assert report.state == "WaitingForCache"
    caches = env.caches()
    assert len(caches) == 1 and caches[0]["spec"]["sourceUri"].startswith("hf://Qwen/Qwen2.5-0.5B-Instruct")
    conditions = env.conditions(name)
    assert conditions["Validated"]["status"] == "True" and conditions["Validated"]["reason"] == "SourceValid"
    assert conditions["Cached"]["status"] == "False" and conditions["Cached"]["reason"] == "CachePending"
    cache = caches[0]["metadata"]["name"]
    env.custom.patch_namespaced_custom_object_status(
        *AIM, env.ns, "modelcaches", cache, {"status": {"status": "Available", "persistentVolumeClaim": f"{cache}-pvc"}}
    )

    report = env.serve(name, replicas=2)
    assert report.state == "Serving" and report.flavor == "l40s" and "a Node matches" in report.message
    deployment = env.deployment(name)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert pod["nodeSelector"] == {"gpu.product": l40s}
    # llmaz's vLLM defaults (4 cpu, 8Gi) under the flavor's limits, in both; /dev/shm bounded (2Gi).
    one_gpu = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert container["resources"] == {"limits": one_gpu, "requests": one_gpu}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
    assert container["args"][:4] == ["--model", "/workspace/models", "--served-model-name", name]
    assert "--tensor-parallel-size" not in container["args"]  # one GPU
    assert {"name": "model-volume", "persistentVolumeClaim": {"claimName": f"{cache}-pvc", "readOnly": True}} in pod[
        "volumes"
    ]
    labels = deployment["metadata"]["labels"]
    assert labels["llmaz.io/model-family-name"] == "qwen2" and labels["llmaz.io/owned-by"] == "platform-team"
    assert deployment["metadata"]["ownerReferences"][0]["kind"] == "OpenModel"
    service = env.core.api_client.sanitize_for_serialization(env.core.read_namespaced_service(name, env.ns))
    assert_valid_k8s(deployment)
    assert_valid_k8s(service)
    assert env.conditions(name)["Cached"]["status"] == "True"
    assert env.custom.get_namespaced_custom_object(*AIM, env.ns, "modelcaches", cache)["status"].get("lastUsed")

    # No Node offers the first flavor any more: the next one is chosen, and the reason says why.
    env.core.delete_node(f"{env.ns}-n1")
    env.server.reset_stats()
    report = env.serve(name, replicas=2)
    assert report.flavor == "a100"
    assert f"skipped: l40s: no Node matches gpu.product={l40s}" in report.message
    pod = env.deployment(name)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu.product": a100}
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "4", "memory": "80Gi", "nvidia.com/gpu": "2"}
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "4", "memory": "80Gi", "nvidia.com/gpu": "2"}
    args = pod["containers"][0]["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == "2"  # the flavor's two GPUs, both used
    # The second rollout reused the cache: no ModelCache was created.
    assert env.server.count("create", "modelcaches") == 0 and len(env.caches()) == 1

    # Unchanged: a third run writes no workload.
    env.server.reset_stats()
    env.serve(name, replicas=2)
    assert env.server.count("patch", "deployments") == 0 and env.server.count("create", "deployments") == 0


def test_invalid_source_and_unknown_flavor_are_clear_errors(env: Env) -> None:
    bad = f"bad-{env.ns}"
    env.openmodel(
        bad,
        {"modelHub": {"modelID": "Qwen/Qwen2.5-0.5B-Instruct", "filename": "q.gguf", "allowPatterns": ["*.gguf"]}},
        [{"name": "any"}],
    )
    with pytest.raises(ServeError, match="spec.source.modelHub"):
        env.serve(bad)
    validated = env.conditions(bad)["Validated"]
    assert (
        validated["status"] == "False"
        and validated["reason"] == "InvalidSource"
        and "spec.source.modelHub" in validated["message"]
    )

    good = f"good-{env.ns}"
    env.openmodel(good, {"uri": "host:///mnt/models/qwen"}, [{"name": "cpu"}])
    for _ in range(2):
        with pytest.raises(ServeError, match="flavor 'gpu' is not one of the OpenModel's flavors"):
            env.serve(good, flavor="gpu")
    env.node(f"cpu-node-{env.ns}", {})  # the flavor asks for no labels: any Node fits (with none, nothing fits)
    report = env.serve(good)
    assert report.state == "Serving" and env.caches() == []  # a host path is mounted, not cached
    # kubectl describe openmodel: why a run stopped (the same failure twice: one Event, count 2), what was served.
    [refused] = env.described(bad)
    assert (refused["type"], refused["reason"]) == ("Warning", "ServeFailed")
    assert "spec.source.modelHub" in refused["message"]
    events = env.described(good)
    assert [(e["type"], e["reason"], e["count"]) for e in events] == [
        ("Warning", "ServeFailed", 2),
        ("Normal", "Served", 1),
    ]
    assert "flavor 'gpu'" in events[0]["message"] and f"in {env.ns}: created Deployment/{good}" in events[1]["message"]
    pod = env.deployment(good)["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "model-volume", "hostPath": {"path": "/mnt/models/qwen", "type": "Directory"}}


def test_a_namespace_that_does_not_exist_is_one_clear_error(env: Env) -> None:
    name = f"nowhere-{env.ns}"
    env.openmodel(name, HUB, [{"name": "any"}])
    with pytest.raises(ServeError, match="cannot keep its cache in namespace 'no-such-namespace'.*not found"):
        serve_openmodel(model=name, namespace="no-such-namespace", cluster=env.cluster)


def test_a_flavor_that_cannot_be_rendered_writes_nothing_and_a_dotted_name_gets_a_valid_service(env: Env) -> None:
    name = f"qwen2.5-{env.ns}"  # a DNS-1123 subdomain (llmaz accepts it), no DNS-1035 label (a Service's name)
    host = {"uri": "host:///mnt/models/qwen"}
    env.openmodel(name, host, [{"name": "gpu", "limits": {"nvidia.com/gpu": "500m"}, "params": {"TP": "abc"}}])
    env.node(f"node-{env.ns}", {})
    with pytest.raises(ServeError, match=r"flavors\[0\]\.limits\[\"nvidia.com/gpu\"\].*flavors\[0\]\.params\.TP"):
        env.serve(name)
    validated = env.conditions(name)["Validated"]
    assert (validated["status"], validated["reason"]) == ("False", "InvalidFlavor")
    assert "spec.inferenceConfig.flavors[0].params.TP: 'abc' is not an integer" in validated["message"]
    assert env.apps.list_namespaced_deployment(env.ns).items == []

    flavors = [{"name": "gpu", "limits": {"nvidia.com/gpu": "2000m"}, "params": {"PP": "2"}}]
    env.custom.patch_cluster_custom_object(
        "llmaz.io", "v1alpha1", "openmodels", name, {"spec": {"inferenceConfig": {"flavors": flavors}}}
    )
    report = env.serve(name)
    assert report.state == "Serving" and env.conditions(name)["Validated"]["reason"] == "SourceValid"
    deployment = env.deployment(name)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (
        args[args.index("--tensor-parallel-size") + 1] == "2"
        and args[args.index("--pipeline-parallel-size") + 1] == "2"
    )
    [service] = [
        env.core.api_client.sanitize_for_serialization(s) for s in env.core.list_namespaced_service(env.ns).items
    ]
    assert service["metadata"]["name"] == f"qwen2-5-{env.ns}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    assert name_error("v1", "Service", service["metadata"]["name"]) is None
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert_valid_k8s(service)
