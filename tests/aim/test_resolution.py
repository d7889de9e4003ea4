"""engine.aim_templates and engine.aim_services: GPUs from node labels, profile matching, template
status, references, names and the rendered InferenceService/HTTPRoute."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from engine.aim import DiscoveryRecord, parse_image_labels
from engine.aim_services import (
    CacheMount,
    blocked_status,
    contains,
    render_http_route,
    render_inference_service,
    resolve_references,
    route_path,
    service_status,
    update_patch,
    workload_name,
)
from engine.aim_templates import (
    cluster_gpus,
    gpu_unavailable,
    match_profile,
    node_affinity,
    normalize_gpu_model,
    resolve_profile,
    template_status,
)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
DEPLOYMENTS = "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency'}, {'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'bf16', 'metric': 'latency'}, {'gpuModel': 'MI300X', 'gpuCount': 2, 'precision': 'fp16', 'metric': 'throughput'}"


def node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def model(image: str = "r.io/llama:1", source: str = "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct") -> dict:
    labels = {"com.amd.aim.model.recommendedDeployments": DEPLOYMENTS, "com.amd.aim.model.source": source}
    record = DiscoveryRecord(image=image, read_at=NOW, digest="sha256:1", metadata=parse_image_labels(labels))
    return {"apiVersion": "aim.silogen.ai/v1alpha1", "kind": "AIMClusterModel",
            "metadata": {"name": "llama", "uid": "m-1", "annotations": {"aim.silogen.ai/image-metadata": record.to_json()}},
            "spec": {"name": "meta/llama:1", "image": image}}


def template(**spec: object) -> dict:
    return {"metadata": {"name": "t", "namespace": "ns"}, "spec": {"model": "meta/llama:1", **spec}}


@pytest.mark.parametrize("text, expected", [("MI300X (rev 2)", "MI300X"), ("Instinct-MI325X", "MI325X"), ("AMD Instinct MI300X", "MI300X"),
                                            ("RX7900-XTX", "RX7900"), ("NVIDIA-H100-80GB-HBM3", "H100"), ("Tesla-T4", "T4"),
                                            ("NVIDIA-A100-SXM4-80GB", "A100"), ("mi300x", "MI300X")])
def test_gpu_names_normalise(text: str, expected: str) -> None:
    assert normalize_gpu_model(text) == expected


def test_amd_and_nvidia_nodes() -> None:
    inventory = cluster_gpus([
        node("a", **{"amd.com/gpu.device-id": "0x74A1", "amd.com/gpu.count": "8"}),
        node("b", **{"beta.amd.com/gpu.device-id.74b5": "4"}),
        node("c", **{"amd.com/gpu.family": "AMD Instinct MI325X"}),
        node("d", **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"}),
        node("e", **{"amd.com/gpu.device-id": "ffff"}),
        node("cpu"),
    ])
    assert inventory.models() == ["AMD-FFFF", "H100", "MI300X", "MI325X"]
    assert gpu_unavailable("MI300X", 8, inventory) is None
    assert gpu_unavailable("H100", 2, inventory) is None
    assert "largest node has 2" in (gpu_unavailable("H100", 4, inventory) or "")
    assert "not available in cluster" in (gpu_unavailable("MI355X", 1, inventory) or "")
    terms = node_affinity("MI300X", inventory)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "amd.com/gpu.device-id", "operator": "In", "values": ["74a1", "74a9", "74b5", "74bd"]}]},
        {"matchExpressions": [{"key": "beta.amd.com/gpu.device-id.74b5", "operator": "In", "values": ["4"]}]},
    ]


def test_profile_matching() -> None:
    deployments = parse_image_labels({"com.amd.aim.model.recommendedDeployments": DEPLOYMENTS}).recommended_deployments
    assert match_profile({"gpuModel": "mi300x", "gpusPerReplica": 1, "metric": "latency", "precision": "auto"}, deployments)["precision"] == "fp8"
    assert match_profile({"gpuModel": "MI300X", "gpusPerReplica": 1, "metric": "latency", "precision": "bf16"}, deployments)["precision"] == "bf16"
    assert match_profile({"gpuModel": "MI300X", "gpusPerReplica": 2, "metric": "latency"}, deployments) is None
    assert match_profile({"gpuModel": "MI300X", "gpusPerReplica": 2, "metric": "throughput"}, deployments)["precision"] == "fp16"


def test_template_resolution_states() -> None:
    gpus = cluster_gpus([node("a", **{"amd.com/gpu.device-id": "74a1"})])
    ok = resolve_profile(template(gpuModel="MI300X", gpusPerReplica=1, metric="latency"), [model()], gpus)
    assert ok.discovered and ok.model_sources == ("hf://meta-llama/Llama-3.1-8B-Instruct",)
    assert template_status(ok, False, {}).status == "Available"
    assert template_status(ok, True, {"hf://meta-llama/Llama-3.1-8B-Instruct": None}).status == "Progressing"
    warming = template_status(ok, True, {"hf://meta-llama/Llama-3.1-8B-Instruct": "Progressing"})
    assert (warming.status, warming.conditions[1].reason) == ("Progressing", "Warming")
    failed = template_status(ok, True, {"hf://meta-llama/Llama-3.1-8B-Instruct": "Failed"})
    assert (failed.status, failed.conditions[1].reason) == ("Failed", "WarmFailed")
    assert template_status(ok, True, {"hf://meta-llama/Llama-3.1-8B-Instruct": "Available"}).status == "Available"
    no_gpu = resolve_profile(template(gpuModel="MI300X", gpusPerReplica=1), [model()], cluster_gpus([]))
    assert (no_gpu.status, no_gpu.reason) == ("Pending", "GpuNotAvailable")
    tp = resolve_profile(template(gpuModel="MI300X", gpusPerReplica=1, tensorParallelism=2), [model()], gpus)
    assert tp.status == "Failed" and "spec.tensorParallelism" in tp.message
    missing = resolve_profile(template(gpuModel="MI300X", gpusPerReplica=1, model="x/y"), [model()], gpus)
    assert (missing.status, missing.reason) == ("Pending", "AwaitingDiscovery")
    dupes = resolve_profile(template(gpuModel="MI300X", gpusPerReplica=1), [model(), model()], gpus)
    assert dupes.status == "Failed" and "several" in dupes.message


def test_workload_names_fit_the_kserve_host_label() -> None:
    assert workload_name("llama-chat", "team-a") == "llama-chat-e204f50a"
    long_ns = "n" * 40
    name = workload_name("a-very-long-service-name-for-chat", long_ns)
    assert len(f"{name}-predictor-{long_ns}") <= 63
    with pytest.raises(ValueError):
        workload_name("x", "n" * 45)
    assert route_path("Team-A", "1234-ABCD") == "/team-a/1234-abcd"


def test_rendered_workload_and_references() -> None:
    service = {"apiVersion": "aim.silogen.ai/v1alpha1", "kind": "AIMService",
               "metadata": {"name": "chat", "namespace": "ns", "uid": "s-1"}, "spec": {"model": "meta/llama:1", "templateRef": "t", "replicas": 2}}
    tmpl = {**template(gpuModel="MI300X", gpusPerReplica=1, metric="latency"), "status": {"status": "Available", "modelSources": ["hf://meta-llama/Llama-3.1-8B-Instruct"]}}
    config = {"metadata": {"name": "default"}, "spec": {"images": {"imagePullSecrets": ["reg"]}}}
    resolution = resolve_references(service, [model()], {"t": tmpl}, {"default": config})
    assert not resolution.blocked and resolution.deployment["precision"] == "fp8"
    gpus = cluster_gpus([node("a", **{"amd.com/gpu.device-id": "74a1"})])
    isvc = render_inference_service(service, resolution, gpus, [CacheMount("hf://meta-llama/Llama-3.1-8B-Instruct", "c1", "c1-pvc")])
    predictor = isvc["spec"]["predictor"]
    assert predictor["imagePullSecrets"] == [{"name": "reg"}] and predictor["minReplicas"] == 2
    env = [e["name"] for e in predictor["containers"][0]["env"]]
    assert env == sorted(env) and "AIM_PRECISION" in env
    assert predictor["containers"][0]["resources"] == {"requests": {"cpu": "4", "memory": "32Gi", "amd.com/gpu": "1"}, "limits": {"memory": "48Gi", "amd.com/gpu": "1"}}
    assert contains({**isvc, "status": {"x": 1}}, isvc) and update_patch(isvc, isvc) is None
    changed = {**isvc, "spec": {"predictor": {**predictor, "minReplicas": 3, "maxReplicas": 3}}}
    assert update_patch(isvc, changed)["spec"]["predictor"]["minReplicas"] == 3
    route = render_http_route(service, {"name": "gw", "namespace": "gw-ns"}, isvc["metadata"]["name"])
    assert route["spec"]["rules"][0]["matches"][0]["path"]["value"] == "/ns/s-1"
    # Missing or mismatched references.
    assert resolve_references(service, [], {"t": tmpl}, {"default": config}).reason == "ModelNotFound"
    assert resolve_references(service, [model()], {}, {"default": config}).reason == "TemplateNotFound"
    assert resolve_references(service, [model()], {"t": tmpl}, {}).reason == "RuntimeConfigMissing"
    pending = {**tmpl, "status": {"status": "Progressing"}}
    assert (resolve_references(service, [model()], {"t": pending}, {"default": config}).status) == "Pending"
    blocked = blocked_status(resolve_references(service, [model()], {}, {"default": config}), False)
    assert blocked.status == "Failed" and {c.type: c.reason for c in blocked.conditions}["Failure"] == "TemplateNotFound"


def test_service_status_from_what_the_cluster_reports() -> None:
    ready_isvc = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    accepted = {"status": {"parents": [{"conditions": [{"type": "Accepted", "status": "True"}]}]}}
    assert service_status(True, "CacheWarm", "", ready_isvc, accepted, True, None).status == "Running"
    assert service_status(True, "CacheWarm", "", ready_isvc, {"status": {}}, True, None).status == "Starting"
    assert service_status(True, "CacheWarm", "", {"status": {}}, accepted, True, None).status == "Starting"
    assert service_status(False, "WaitingForCache", "", None, None, True, None).status == "Starting"
    assert service_status(False, "CacheFailed", "", None, None, True, None).status == "Degraded"
    refused = {"status": {"parents": [{"conditions": [{"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners"}]}]}}
    degraded = service_status(True, "CacheWarm", "", ready_isvc, refused, True, None)
    assert degraded.status == "Degraded" and {c.type: c.reason for c in degraded.conditions}["RoutingReady"] == "NotAllowedByListeners"
    assert service_status(True, "CacheWarm", "", ready_isvc, None, False, None).status == "Running"
