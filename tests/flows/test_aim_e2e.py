"""The AIM lifecycles end to end: images pushed to a real registry (Debian docker-registry), the
Kubernetes API test server with Modelplane's CRDs and the upstream KServe and Gateway API CRDs (so
what rollout-services renders is validated against the real schemas), Nodes with GPU labels, and the
discover-models, resolve-templates and rollout-services flows run as Prefect flows.

The test stands in for the controllers Modelplane does not replace: it marks ModelCaches Available
(the warm-caches flow's job), the InferenceService Ready (KServe) and the HTTPRoute Accepted (the
Gateway). Each test has its own namespace, image repository and model names.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from prefect.events.worker import EventsWorker

from engine.aim.discovery import METADATA_ANNOTATION, template_name
from engine.api.crds import render_crds
from flows.discover_models import discover_models
from flows.resolve_templates import resolve_templates
from flows.rollout_services import rollout_services
from tasks.clients.events import SERVICE_ROLLED_OUT
from tests.upstream_crds import SKIP_REASON, upstream_crds, upstream_crds_dir

GROUP, VERSION = "aim.silogen.ai", "v1alpha1"
TEST_LABEL = "modelplane.io/test-namespace"
GATEWAY = {
    "group": "gateway.networking.k8s.io",
    "kind": "Gateway",
    "name": "inference-gateway",
    "namespace": "gateway-system",
    "sectionName": "http",
}

pytestmark = pytest.mark.skipif(upstream_crds_dir() is None, reason=SKIP_REASON)


def aim_labels(
    canonical: str, deployments: str, source: str = "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"
) -> dict[str, str]:
    return {
        "com.amd.aim.model.canonicalName": canonical,
        "com.amd.aim.model.source": source,
        "com.amd.aim.model.recommendedDeployments": deployments,
        "com.amd.aim.hfToken.required": "True",
        "org.opencontainers.image.version": "0.8.4",
    }


MI300X_PROFILES = (
    "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency', 'description': 'low latency'}, "
    "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'throughput', 'description': 'high throughput'}"
)


class AimEnv:
    """One test's slice of the cluster and registry."""

    def __init__(self, server: Any, namespace: str, registry: Any) -> None:
        self.server = server
        self.ns = namespace
        self.registry = registry
        api = server.api_client()
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.cluster = f"kubeconfig:{server.kubeconfig}"
        self.nodes: list[str] = []
        self.models: list[str] = []

    # ---------------------------------------------------------------------------- setup helpers

    def node(self, name: str, labels: dict[str, str]) -> None:
        self.core.create_node({"metadata": {"name": f"{self.ns}-{name}", "labels": labels}})
        self.nodes.append(f"{self.ns}-{name}")

    def config(self, name: str = "default", pull_secrets: list[str] | None = None, gateway: bool = True) -> None:
        spec: dict[str, Any] = {
            "routing": {"autoCreateRoute": True, **({"gateway": GATEWAY} if gateway else {})},
            "credentials": {"huggingFaceToken": {"name": "hf-token", "key": "token"}},
        }
        if pull_secrets:
            spec["images"] = {"imagePullSecrets": pull_secrets}
        self.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            self.ns,
            "aimnamespaceconfigs",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "AIMNamespaceConfig",
                "metadata": {"name": name},
                "spec": spec,
            },
        )

    def pull_secret(self, name: str, registry: Any) -> None:
        data = base64.b64encode(registry.dockerconfigjson().encode()).decode()
        self.core.create_namespaced_secret(
            self.ns,
            {"metadata": {"name": name}, "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": data}},
        )

    def model(self, suffix: str, image: str) -> str:
        name = f"{self.ns}-{suffix}"
        self.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "aimclustermodels",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "AIMClusterModel",
                "metadata": {"name": name, "labels": {TEST_LABEL: self.ns}},
                "spec": {"name": f"{self.ns}/{suffix}:1.0", "image": image},
            },
        )
        self.models.append(name)
        return name

    def template(self, name: str, model: str, **spec: Any) -> None:
        self.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            self.ns,
            "aimservicetemplates",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "AIMServiceTemplate",
                "metadata": {"name": name},
                "spec": {"model": model, **spec},
            },
        )

    def service(self, name: str, model: str, template: str | None, **spec: Any) -> None:
        self.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            self.ns,
            "aimservices",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "AIMService",
                "metadata": {"name": name},
                "spec": {"model": model, **({"templateRef": template} if template else {}), **spec},
            },
        )

    # ---------------------------------------------------------------------------- flows

    def discover(self, **params: Any) -> Any:
        """discover-models over this test's models only (other tests leave models, e.g. with docker.io
        images, on the shared server: discovery must not try to reach them)."""
        return discover_models(
            **{"namespaces": [self.ns], "cluster": self.cluster, "model_selector": f"{TEST_LABEL}={self.ns}", **params}
        )

    def resolve(self) -> Any:
        return resolve_templates(namespaces=[self.ns], cluster=self.cluster)

    def rollout(self) -> Any:
        return rollout_services(namespaces=[self.ns], cluster=self.cluster)

    # ---------------------------------------------------------------------------- reads

    def get(self, plural: str, name: str) -> dict[str, Any]:
        if plural == "aimclustermodels":
            return self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, plural, name)

    def list(self, plural: str, group: str = GROUP, version: str = VERSION) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(group, version, self.ns, plural)["items"]

    def condition(self, obj: dict[str, Any], type_: str) -> dict[str, Any]:
        return next(c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_)

    # ---------------------------------------------------------------------------- stand-ins for controllers

    def caches_available(self) -> None:
        """What the warm-caches flow reports once a cache is filled."""
        for cache in self.list("modelcaches"):
            name = cache["metadata"]["name"]
            self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                self.ns,
                "modelcaches",
                name,
                {"status": {"status": "Available", "persistentVolumeClaim": f"{name}-pvc"}},
            )

    def isvc_ready(self, name: str) -> None:
        self.custom.patch_namespaced_custom_object_status(
            "serving.kserve.io",
            "v1beta1",
            self.ns,
            "inferenceservices",
            name,
            {
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
                }
            },
        )

    def route_accepted(self, name: str) -> None:
        self.custom.patch_namespaced_custom_object_status(
            "gateway.networking.k8s.io",
            "v1",
            self.ns,
            "httproutes",
            name,
            {
                "status": {
                    "parents": [
                        {
                            "parentRef": GATEWAY,
                            "controllerName": "example.com/gateway-controller",
                            "conditions": [
                                {
                                    "type": "Accepted",
                                    "status": "True",
                                    "reason": "Accepted",
                                    "message": "",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                                    "observedGeneration": 1,
                                },
                                {
                                    "type": "ResolvedRefs",
                                    "status": "True",
                                    "reason": "ResolvedRefs",
                                    "message": "",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                                    "observedGeneration": 1,
                                },
                            ],
                        }
                    ]
                }
            },
        )

    def cleanup(self) -> None:
        for name in self.nodes:
            self.core.delete_node(name)
        for name in self.models:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, "aimclustermodels", name)


@pytest.fixture(scope="module")
def aim_crds(kube_server: Any) -> None:
    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])
    kube_server.install_crds(list(upstream_crds()))


@pytest.fixture()
def env(
    kube_server: Any, kube_namespace: str, oci_registry: Any, aim_crds: None, prefect_harness: None
) -> Iterator[AimEnv]:
    environment = AimEnv(kube_server, kube_namespace, oci_registry)
    yield environment
    environment.cleanup()


def rolled_out(worker: EventsWorker) -> list[tuple[str, str]]:
    """The ``modelplane.aim.service.rolled-out`` events emitted so far: (resource id, action)."""
    worker.drain()
    return [(e.resource.id, e.payload["action"]) for e in worker._client.events if e.event == SERVICE_ROLLED_OUT]


def test_image_to_running_service(env: AimEnv, asserting_events_worker: EventsWorker) -> None:
    image = env.registry.image(f"{env.ns}/llama", "0.8.4")
    env.registry.push_image(f"{env.ns}/llama", "0.8.4", aim_labels("meta/llama-3.1-8b", MI300X_PROFILES))
    env.node("mi300x", {"amd.com/gpu.device-id": "74a1", "amd.com/gpu.count": "8"})
    env.config()
    model = env.model("llama", image)
    canonical = f"{env.ns}/llama:1.0"

    report = env.discover()
    stored = env.get("aimclustermodels", model)
    record = json.loads(stored["metadata"]["annotations"][METADATA_ANNOTATION])
    assert record["image"] == image and record["digest"].startswith("sha256:")
    assert record["metadata"]["canonicalName"] == "meta/llama-3.1-8b"
    assert len(record["metadata"]["recommendedDeployments"]) == 2
    assert env.condition(stored, "MetadataExtracted")["reason"] == "MetadataExtracted"
    auto = {t["metadata"]["name"]: t for t in env.list("aimservicetemplates")}
    latency = template_name(
        model, image, {"gpuModel": "MI300X", "gpuCount": 1, "metric": "latency", "precision": "fp8"}
    )
    assert set(auto) == {
        latency,
        template_name(model, image, {"gpuModel": "MI300X", "gpuCount": 1, "metric": "throughput", "precision": "fp8"}),
    }
    assert auto[latency]["spec"] == {
        "model": canonical,
        "metric": "latency",
        "precision": "fp8",
        "gpusPerReplica": 1,
        "gpuModel": "MI300X",
        "warmCache": False,
    }
    assert auto[latency]["metadata"]["labels"]["aim.silogen.ai/origin"] == "auto-generated"
    assert auto[latency]["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
    assert report.registry_requests == {"manifest": 1, "config": 1}

    # A person's template with warmCache: its caches are requested, it is Available only when they are.
    env.template(
        "llama-warm",
        canonical,
        metric="latency",
        precision="auto",
        gpuModel="MI300X",
        gpusPerReplica=1,
        tensorParallelism=1,
        warmCache=True,
    )
    env.resolve()
    warm = env.get("aimservicetemplates", "llama-warm")
    assert warm["status"]["status"] == "Progressing"
    assert warm["status"]["modelSources"] == ["hf://meta-llama/Llama-3.1-8B-Instruct"]
    assert env.condition(warm, "Discovered")["reason"] == "ProfilesDiscovered"
    assert env.condition(warm, "CacheWarm")["reason"] == "WarmRequested"
    caches = env.list("modelcaches")
    assert [c["spec"]["sourceUri"] for c in caches] == ["hf://meta-llama/Llama-3.1-8B-Instruct"]
    assert env.get("aimservicetemplates", latency)["status"]["status"] == "Available"

    env.caches_available()
    env.resolve()
    warm = env.get("aimservicetemplates", "llama-warm")
    assert warm["status"]["status"] == "Available"
    assert env.condition(warm, "CacheWarm")["reason"] == "Warm"

    env.service("chat", canonical, "llama-warm", replicas=2)
    env.rollout()
    service = env.get("aimservices", "chat")
    assert service["status"]["status"] == "Starting"
    assert rolled_out(asserting_events_worker) == [(f"modelplane.aim.service.{env.ns}.chat", "created")]
    isvcs = env.list("inferenceservices", "serving.kserve.io", "v1beta1")
    routes = env.list("httproutes", "gateway.networking.k8s.io", "v1")
    assert len(isvcs) == 1 and len(routes) == 1
    isvc, route = isvcs[0], routes[0]
    name = isvc["metadata"]["name"]
    assert len(f"{name}-predictor-{env.ns}") <= 63
    predictor = isvc["spec"]["predictor"]
    assert predictor["minReplicas"] == predictor["maxReplicas"] == 2
    container = predictor["containers"][0]
    assert container["name"] == "kserve-container" and container["image"] == image
    assert container["resources"]["limits"]["amd.com/gpu"] == "1"
    assert {"name": "AIM_PRECISION", "value": "fp8"} in container["env"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/workspace/cache/meta-llama/Llama-3.1-8B-Instruct"]["readOnly"] is True and "/dev/shm" in mounts
    terms = predictor["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "amd.com/gpu.device-id", "operator": "In", "values": ["74a1", "74a9", "74b5", "74bd"]} in [
        t["matchExpressions"][0] for t in terms
    ]
    assert isvc["metadata"]["ownerReferences"][0]["uid"] == service["metadata"]["uid"]
    rule = route["spec"]["rules"][0]
    assert rule["matches"][0]["path"] == {"type": "PathPrefix", "value": f"/{env.ns}/{service['metadata']['uid']}"}
    assert rule["backendRefs"][0]["name"] == f"{name}-predictor" and rule["backendRefs"][0]["port"] == 80
    assert route["spec"]["parentRefs"][0]["name"] == "inference-gateway"
    assert env.list("modelcaches")[0]["status"].get("lastUsed")

    env.isvc_ready(name)
    env.rollout()
    assert env.get("aimservices", "chat")["status"]["status"] == "Starting"  # the route is not accepted yet
    env.route_accepted(route["metadata"]["name"])
    env.rollout()
    service = env.get("aimservices", "chat")
    assert service["status"]["status"] == "Running"
    assert env.condition(service, "Ready")["reason"] == "RuntimeReady"

    # Nothing changed: no write at all.
    env.server.reset_stats()
    before = len(rolled_out(asserting_events_worker))
    report = env.rollout()
    stats = env.server.stats()["by_verb"]
    assert not any(stats.get(verb) for verb in ("create", "update", "patch", "delete")), stats
    assert report.writes.statuses == 0
    assert len(rolled_out(asserting_events_worker)) == before, "no change, no event"

    # An update propagates: replicas.
    env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.ns, "aimservices", "chat", {"spec": {"replicas": 3}})
    env.rollout()
    predictor = env.list("inferenceservices", "serving.kserve.io", "v1beta1")[0]["spec"]["predictor"]
    assert predictor["minReplicas"] == predictor["maxReplicas"] == 3

    # Unchanged image: discovery does not ask the registry again.
    assert env.discover().registry_requests == {}

    # The service owns what it rendered: deleting it deletes both (the API server's garbage collection).
    env.custom.delete_namespaced_custom_object(GROUP, VERSION, env.ns, "aimservices", "chat")
    assert env.list("inferenceservices", "serving.kserve.io", "v1beta1") == []
    assert env.list("httproutes", "gateway.networking.k8s.io", "v1") == []


@pytest.mark.parametrize("registry_fixture", ["private_registry", "token_registry"])
def test_private_registry_needs_the_namespace_pull_secret(
    env: AimEnv, request: pytest.FixtureRequest, registry_fixture: str
) -> None:
    registry = request.getfixturevalue(registry_fixture)
    repo = f"{env.ns}/private"
    registry.push_image(repo, "1", aim_labels("private/model", MI300X_PROFILES))
    image = registry.image(repo, "1")
    env.config(pull_secrets=["regcred"])
    model = env.model("private", image)

    env.discover()  # the secret does not exist yet: 401, reported, retried on the next run
    stored = env.get("aimclustermodels", model)
    cond = env.condition(stored, "MetadataExtracted")
    assert cond["status"] == "False" and cond["reason"] == "SecretNotFound"
    assert "regcred" in cond["message"] and "s3cret" not in json.dumps(stored)
    assert env.list("aimservicetemplates") == []

    env.pull_secret("regcred", registry)
    report = env.discover()
    stored = env.get("aimclustermodels", model)
    assert env.condition(stored, "MetadataExtracted")["reason"] == "MetadataExtracted"
    assert len(env.list("aimservicetemplates")) == 2
    # One manifest and one config fetch; the first request of the run is answered with the challenge.
    assert report.registry_requests == {
        "challenge": 1,
        "manifest": 1,
        "config": 1,
        **({"token": 1} if registry.mode == "token" else {}),
    }
    assert "s3cret" not in json.dumps(stored)


def test_missing_image_is_terminal_until_resync(env: AimEnv) -> None:
    image = env.registry.image(f"{env.ns}/absent", "1")
    model = env.model("absent", image)
    report = env.discover()
    stored = env.get("aimclustermodels", model)
    cond = env.condition(stored, "MetadataExtracted")
    assert cond["status"] == "False" and cond["reason"] == "ImageNotFound"
    assert report.registry_requests == {"manifest": 1}
    # A template of that model fails with the reason; a service using it is Degraded ImageNotFound.
    env.config()
    env.template("absent-t", f"{env.ns}/absent:1.0", metric="latency", gpuModel="MI300X", gpusPerReplica=1)
    env.service("absent-s", f"{env.ns}/absent:1.0", "absent-t")
    env.resolve()
    template = env.get("aimservicetemplates", "absent-t")
    assert template["status"]["status"] == "Failed"
    assert env.condition(template, "Failure")["reason"] == "ImageNotFound"
    env.rollout()
    service = env.get("aimservices", "absent-s")
    assert service["status"]["status"] == "Degraded"
    assert env.condition(service, "Failure")["reason"] == "ImageNotFound"
    # Terminal: the next run does not ask the registry (only a new spec.image or the resync does).
    assert env.discover().registry_requests == {}
    env.registry.push_image(f"{env.ns}/absent", "1", aim_labels("absent/model", MI300X_PROFILES))
    report = env.discover(resync_interval_s=60)
    assert report.registry_requests == {}  # the resync interval has not passed yet


def test_gpu_absent_then_added(env: AimEnv) -> None:
    repo = f"{env.ns}/big"
    env.registry.push_image(
        repo,
        "1",
        aim_labels("big/model", '[{"gpuModel": "MI355X", "gpuCount": 8, "precision": "fp4", "metric": "throughput"}]'),
    )
    env.config()
    env.model("big", env.registry.image(repo, "1"))
    env.discover()
    env.template("big-nv", f"{env.ns}/big:1.0", metric="throughput", gpuModel="H100", gpusPerReplica=8)
    env.resolve()
    (auto,) = [t for t in env.list("aimservicetemplates") if t["metadata"]["name"] != "big-nv"]
    auto = env.get("aimservicetemplates", auto["metadata"]["name"])
    assert auto["status"]["status"] == "Pending"
    cond = env.condition(auto, "Discovered")
    assert cond["reason"] == "GpuNotAvailable" and "MI355X" in cond["message"]
    assert env.get("aimservicetemplates", "big-nv")["status"]["status"] == "Pending"

    env.node("mi355x", {"amd.com/gpu.device-id": "75a3", "amd.com/gpu.count": "8"})
    env.node("h100", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"})
    env.resolve()
    auto = env.get("aimservicetemplates", auto["metadata"]["name"])
    assert auto["status"]["status"] == "Available"
    # The NVIDIA GPU is there, but the image recommends no H100 profile.
    nv = env.get("aimservicetemplates", "big-nv")
    assert nv["status"]["status"] == "Failed"
    assert env.condition(nv, "Discovered")["reason"] == "DiscoveryFailed"
    assert "no recommended deployment" in env.condition(nv, "Discovered")["message"]


def test_nvidia_profile_and_template_of_another_model(env: AimEnv) -> None:
    repo = f"{env.ns}/nv"
    env.registry.push_image(
        repo,
        "1",
        aim_labels(
            "nv/model",
            "{'gpuModel': 'H100', 'gpuCount': 2, 'precision': 'bf16', 'metric': 'latency'}",
            source="hf://org/nv-model",
        ),
    )
    env.node("h100", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"})
    env.config()
    env.model("nv", env.registry.image(repo, "1"))
    env.discover()
    env.template("nv-t", f"{env.ns}/nv:1.0", metric="latency", gpuModel="H100", gpusPerReplica=2)
    env.template("other-t", f"{env.ns}/other:1.0", metric="latency", gpuModel="H100", gpusPerReplica=2)
    env.resolve()
    assert env.get("aimservicetemplates", "nv-t")["status"]["status"] == "Available"
    other = env.get("aimservicetemplates", "other-t")
    assert (
        other["status"]["status"] == "Pending" and env.condition(other, "Discovered")["reason"] == "AwaitingDiscovery"
    )

    env.service("wrong-template", f"{env.ns}/nv:1.0", "other-t", cacheModel=False)
    env.service("no-template", f"{env.ns}/nv:1.0", "missing-t", cacheModel=False)
    env.service("no-model", f"{env.ns}/gone:1.0", "nv-t", cacheModel=False)
    env.service("nv", f"{env.ns}/nv:1.0", "nv-t", cacheModel=False)
    env.rollout()
    reasons = {
        name: (
            env.get("aimservices", name)["status"]["status"],
            env.condition(env.get("aimservices", name), "Failure")["reason"],
        )
        for name in ("wrong-template", "no-template", "no-model")
    }
    assert reasons == {
        "wrong-template": ("Failed", "ValidationFailed"),
        "no-template": ("Failed", "TemplateNotFound"),
        "no-model": ("Failed", "ModelNotFound"),
    }
    (isvc,) = env.list("inferenceservices", "serving.kserve.io", "v1beta1")
    container = isvc["spec"]["predictor"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert [v["name"] for v in isvc["spec"]["predictor"]["volumes"]] == ["dshm"]  # cacheModel false, no cache exists
    assert env.list("modelcaches") == []
    terms = isvc["spec"]["predictor"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]}
    ]


def test_missing_namespace_config_fails_the_service(env: AimEnv) -> None:
    repo = f"{env.ns}/cfg"
    env.registry.push_image(repo, "1", aim_labels("cfg/model", MI300X_PROFILES))
    env.node("mi300x", {"amd.com/gpu.device-id": "0x74A1"})
    env.model("cfg", env.registry.image(repo, "1"))
    env.discover(namespaces=None)
    # No AIMNamespaceConfig in the namespace: discovery (over every configured namespace) creates no templates here.
    assert env.list("aimservicetemplates") == []
    env.template("cfg-t", f"{env.ns}/cfg:1.0", metric="throughput", gpuModel="MI300X", gpusPerReplica=1)
    env.service("cfg-s", f"{env.ns}/cfg:1.0", "cfg-t", configRef="tenant", cacheModel=False)
    env.resolve()
    env.rollout()
    service = env.get("aimservices", "cfg-s")
    assert service["status"]["status"] == "Failed"  # aim-engine: a missing reference is Failed
    assert env.condition(service, "Failure")["reason"] == "RuntimeConfigMissing"
    assert "tenant" in env.condition(service, "Failure")["message"]
    assert env.list("inferenceservices", "serving.kserve.io", "v1beta1") == []
    env.config("tenant", gateway=False)
    env.rollout()
    service = env.get("aimservices", "cfg-s")
    # The config has routing on but no gateway: the workload rolls out, the service is Degraded.
    assert len(env.list("inferenceservices", "serving.kserve.io", "v1beta1")) == 1
    assert env.list("httproutes", "gateway.networking.k8s.io", "v1") == []
    assert service["status"]["status"] == "Degraded"
    assert env.condition(service, "RoutingReady")["reason"] == "GatewayNotConfigured"


def test_index_unlabelled_and_malformed_images(env: AimEnv) -> None:
    env.registry.push_index(
        f"{env.ns}/multi",
        "1",
        {
            "arm64": aim_labels("multi/arm", "{'gpuModel': 'MI300X', 'gpuCount': 4}"),
            "amd64": aim_labels("multi/amd", MI300X_PROFILES),
        },
    )
    env.registry.push_image(f"{env.ns}/plain", "1", None)
    env.registry.push_image(f"{env.ns}/broken", "1", aim_labels("broken/model", "{'gpuModel': 'MI300X', 'gpuCount': 1"))
    env.config()
    multi = env.model("multi", env.registry.image(f"{env.ns}/multi", "1"))
    plain = env.model("plain", env.registry.image(f"{env.ns}/plain", "1"))
    broken = env.model("broken", env.registry.image(f"{env.ns}/broken", "1"))
    report = env.discover()
    assert report.registry_requests == {"manifest": 4, "config": 3}  # the index costs one more manifest

    record = json.loads(env.get("aimclustermodels", multi)["metadata"]["annotations"][METADATA_ANNOTATION])
    assert record["metadata"]["canonicalName"] == "multi/amd"  # linux/amd64 was chosen
    plain_model = env.get("aimclustermodels", plain)
    assert env.condition(plain_model, "MetadataExtracted")["reason"] == "ImageFound"
    assert env.condition(plain_model, "Ready")["reason"] == "NoTemplatesExpected"
    cond = env.condition(env.get("aimclustermodels", broken), "MetadataExtracted")
    assert (cond["status"], cond["reason"]) == ("False", "MetadataExtractionFailed")
    assert "com.amd.aim.model.recommendedDeployments" in cond["message"]
    names = {t["metadata"]["labels"]["aim.silogen.ai/model"] for t in env.list("aimservicetemplates")}
    assert names == {multi}
    assert env.discover().registry_requests == {}  # the malformed label is terminal: not read again


def test_a_persons_template_with_the_auto_name_is_never_touched(env: AimEnv) -> None:
    image = env.registry.image(f"{env.ns}/mine", "1")
    env.registry.push_image(f"{env.ns}/mine", "1", aim_labels("mine/model", MI300X_PROFILES))
    env.config()
    model = env.model("mine", image)
    taken = template_name(model, image, {"gpuModel": "MI300X", "gpuCount": 1, "metric": "latency", "precision": "fp8"})
    env.template(
        taken,
        f"{env.ns}/mine:1.0",
        metric="latency",
        precision="bf16",
        gpuModel="MI300X",
        gpusPerReplica=1,
        warmCache=True,
    )
    report = env.discover()
    mine = env.get("aimservicetemplates", taken)
    assert mine["spec"]["precision"] == "bf16" and "labels" not in mine["metadata"]
    assert report.writes.created == 1 and any(taken in line for line in report.writes.skipped)


def test_two_services_in_a_long_namespace_own_one_workload_each(
    kube_server: Any, oci_registry: Any, aim_crds: None, prefect_harness: None
) -> None:
    """Issue 22: in a 31-character namespace, llama-3-1-8b-chat and llama-3-1-8b-batch were cut to one
    InferenceService name and took turns owning it. Each now has its own workload and route, within
    the 63-character host label, and a second run writes nothing."""
    namespace = f"ml-inference-production-{uuid.uuid4().hex[:7]}"
    assert len(namespace) == 31
    kube_server.create_namespace(namespace)
    env = AimEnv(kube_server, namespace, oci_registry)
    try:
        repo = f"{namespace}/llama"
        env.registry.push_image(repo, "1", aim_labels("meta/llama-3.1-8b", MI300X_PROFILES))
        env.node("mi300x", {"amd.com/gpu.device-id": "74a1", "amd.com/gpu.count": "8"})
        env.config()
        env.model("llama", env.registry.image(repo, "1"))
        env.discover()
        env.resolve()
        canonical = f"{namespace}/llama:1.0"
        env.template("lat", canonical, metric="latency", gpuModel="MI300X", gpusPerReplica=1)
        env.resolve()
        env.service("llama-3-1-8b-chat", canonical, "lat", replicas=1, cacheModel=False)
        env.service("llama-3-1-8b-batch", canonical, "lat", replicas=4, cacheModel=False)
        report = env.rollout()
        assert report.writes.errors == []
        isvcs = {
            i["metadata"]["labels"]["aim.silogen.ai/service"]: i
            for i in env.list("inferenceservices", "serving.kserve.io", "v1beta1")
        }
        assert set(isvcs) == {"llama-3-1-8b-chat", "llama-3-1-8b-batch"}
        assert isvcs["llama-3-1-8b-chat"]["spec"]["predictor"]["minReplicas"] == 1
        assert isvcs["llama-3-1-8b-batch"]["spec"]["predictor"]["minReplicas"] == 4
        for isvc in isvcs.values():
            assert len(f"{isvc['metadata']['name']}-predictor-{namespace}") <= 63
        routes = env.list("httproutes", "gateway.networking.k8s.io", "v1")
        assert len({r["metadata"]["name"] for r in routes}) == 2
        env.server.reset_stats()
        again = env.rollout()
        stats = env.server.stats()["by_verb"]
        assert not any(stats.get(verb) for verb in ("create", "update", "patch", "delete")), stats
        assert again.writes.statuses == 0
        # The shared name an earlier version gave both (llama-3-1-8b-7b83b555), last owned by the chat
        # service: retired once the chat service's own workload exists.
        old = json.loads(json.dumps(isvcs["llama-3-1-8b-chat"]))
        old["metadata"] = {
            "name": "llama-3-1-8b-7b83b555",
            "namespace": namespace,
            "labels": old["metadata"]["labels"],
            "ownerReferences": old["metadata"]["ownerReferences"],
        }
        old.pop("status", None)
        env.custom.create_namespaced_custom_object("serving.kserve.io", "v1beta1", namespace, "inferenceservices", old)
        assert env.rollout().writes.deleted == 1
        names = {i["metadata"]["name"] for i in env.list("inferenceservices", "serving.kserve.io", "v1beta1")}
        assert names == {i["metadata"]["name"] for i in isvcs.values()}
    finally:
        env.cleanup()


def test_a_service_without_template_ref_gets_the_best_template_and_a_failed_cache_fails_it(env: AimEnv) -> None:
    repo = f"{env.ns}/auto"
    env.registry.push_image(repo, "1", aim_labels("auto/model", MI300X_PROFILES))
    env.node("mi300x", {"amd.com/gpu.device-id": "74a1", "amd.com/gpu.count": "8"})
    env.config()
    model = env.model("auto", env.registry.image(repo, "1"))
    canonical = f"{env.ns}/auto:1.0"
    env.service("picky", canonical, None)
    env.discover()
    env.rollout()  # templates exist, none resolved yet: the service waits
    service = env.get("aimservices", "picky")
    assert service["status"]["status"] == "Pending" and env.condition(service, "Ready")["reason"] == "TemplateNotReady"
    env.resolve()
    env.rollout()
    service = env.get("aimservices", "picky")
    latency = template_name(
        model,
        env.registry.image(repo, "1"),
        {"gpuModel": "MI300X", "gpuCount": 1, "metric": "latency", "precision": "fp8"},
    )
    assert latency in env.condition(service, "Resolved")["message"]
    assert env.condition(service, "CacheReady")["reason"] == "WaitingForCache"
    (cache,) = env.list("modelcaches")
    env.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, env.ns, "modelcaches", cache["metadata"]["name"], {"status": {"status": "Failed"}}
    )
    env.rollout()
    service = env.get("aimservices", "picky")
    assert service["status"]["status"] == "Failed" and env.condition(service, "Failure")["reason"] == "CacheFailed"
    # A person's template ranking the same as discovery's chosen one is no tie: aim-engine prefers namespace
    # templates to its auto-created (cluster) ones (selection.go, preferNamespaceTemplates).
    env.template("copy", canonical, metric="latency", precision="fp8", gpuModel="MI300X", gpusPerReplica=1)
    env.resolve()
    env.rollout()
    service = env.get("aimservices", "picky")
    assert "template 'copy' selected" in env.condition(service, "Resolved")["message"]
    # A second one ranking the same makes the choice ambiguous: reported, not guessed.
    env.template("copy-2", canonical, metric="latency", precision="fp8", gpuModel="MI300X", gpusPerReplica=1)
    env.resolve()
    env.rollout()
    service = env.get("aimservices", "picky")
    assert service["status"]["status"] == "Failed"
    assert env.condition(service, "Resolved")["reason"] == "TemplateSelectionAmbiguous"
    assert "copy, copy-2" in env.condition(service, "Resolved")["message"]


def test_a_new_image_replaces_the_auto_templates_and_model_ready_follows_them(env: AimEnv) -> None:
    repo = f"{env.ns}/moving"
    env.registry.push_image(repo, "1", aim_labels("moving/model", MI300X_PROFILES))
    env.registry.push_image(
        repo,
        "2",
        aim_labels("moving/model", "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency'}"),
    )
    env.node("mi300x", {"amd.com/gpu.device-id": "74a1", "amd.com/gpu.count": "8"})
    env.config()
    model = env.model("moving", env.registry.image(repo, "1"))
    env.discover()
    assert env.condition(env.get("aimclustermodels", model), "Ready")["reason"] == "TemplatesProgressing"
    env.resolve()  # the templates turn Available: the model's Ready follows in the same run
    assert env.condition(env.get("aimclustermodels", model), "Ready")["reason"] == "AllTemplatesReady"
    first = {t["metadata"]["name"] for t in env.list("aimservicetemplates")}
    assert len(first) == 2

    image2 = env.registry.image(repo, "2")
    env.custom.patch_cluster_custom_object(GROUP, VERSION, "aimclustermodels", model, {"spec": {"image": image2}})
    report = env.discover()
    names = {t["metadata"]["name"] for t in env.list("aimservicetemplates")}
    assert names == {
        template_name(model, image2, {"gpuModel": "MI300X", "gpuCount": 1, "metric": "latency", "precision": "fp8"})
    }
    assert not names & first and report.writes.deleted == 2
    env.resolve()
    assert env.condition(env.get("aimclustermodels", model), "Ready")["reason"] == "AllTemplatesReady"


def test_a_tag_pushed_after_a_404_is_read_within_the_backoff(env: AimEnv) -> None:
    image = env.registry.image(f"{env.ns}/late", "1")
    model = env.model("late", image)
    env.discover()
    assert env.condition(env.get("aimclustermodels", model), "MetadataExtracted")["reason"] == "ImageNotFound"
    env.registry.push_image(f"{env.ns}/late", "1", aim_labels("late/model", MI300X_PROFILES))
    assert env.discover().registry_requests == {}  # within the first backoff step
    # Six minutes later (the record's read time moved back): past the 5-minute step, far before the daily resync.
    stored = env.get("aimclustermodels", model)
    record = json.loads(stored["metadata"]["annotations"][METADATA_ANNOTATION])
    record["readAt"] = (datetime.now(UTC) - timedelta(minutes=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    env.custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "aimclustermodels",
        model,
        {"metadata": {"annotations": {METADATA_ANNOTATION: json.dumps(record)}}},
    )
    report = env.discover()
    assert report.registry_requests.get("manifest") == 1
    assert env.condition(env.get("aimclustermodels", model), "MetadataExtracted")["reason"] == "MetadataExtracted"
