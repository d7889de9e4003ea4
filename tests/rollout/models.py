"""Manifests the rollout tests build: Kthena Models and the objects a controller would report."""

from __future__ import annotations

from typing import Any

VLLM_IMAGE = "vllm/vllm-openai:v0.10.1"


def server_worker(**extra: Any) -> dict[str, Any]:
    """One vLLM ``server`` worker with a GPU."""
    worker: dict[str, Any] = {
        "type": "server",
        "image": VLLM_IMAGE,
        "replicas": 1,
        "pods": 1,
        "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "48Gi"}, "requests": {"cpu": "4"}},
        "config": {"max-model-len": 8192, "gpu-memory-utilization": 0.9},
    }
    worker.update(extra)
    return worker


def backend(name: str, **extra: Any) -> dict[str, Any]:
    """A vLLM backend serving a pre-staged PVC (mounted directly), fixed at one replica."""
    spec: dict[str, Any] = {
        "name": name,
        "type": "vLLM",
        "modelURI": "pvc://models/qwen2.5-7b",
        "minReplicas": 1,
        "maxReplicas": 1,
        "workers": [server_worker()],
    }
    spec.update(extra)
    return spec


def model(name: str, namespace: str, backends: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """A ``registry.volcano.sh/v1alpha1`` Model."""
    return {
        "apiVersion": "registry.volcano.sh/v1alpha1",
        "kind": "Model",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backends": backends, **spec},
    }


QUEUE_POLICY: dict[str, Any] = {
    "tolerancePercent": 10,
    "metrics": [{"metricName": "vllm:num_requests_waiting", "targetValue": 5}],
    "behavior": {"scaleUp": {"stablePolicy": {"instances": 10, "percent": 1000, "period": "15s"}}},
}
