"""Manifests the tests and benchmarks build: VariantAutoscalings carrying both seed generations' fields,
and the Deployments they scale, with published performance profiles."""

from __future__ import annotations

from typing import Any, cast

from engine.api.llmd import VariantAutoscaling
from engine.api.validate import parse_object

# Decode (alpha + beta x batch) and prefill (gamma + delta x tokens x batch) parameters in ms.
PROFILES: dict[str, dict[str, str]] = {
    "A100": {"alpha": "20.58", "beta": "0.41", "gamma": "5.2", "delta": "0.1"},
    "H100": {"alpha": "12.4", "beta": "0.22", "gamma": "3.1", "delta": "0.06"},
}


def parsed_variant(obj: dict[str, Any]) -> VariantAutoscaling:
    """A VariantAutoscaling manifest as the boundary reader (``tasks/boundary.py``) hands it to the engine:
    parsed against its API model and CRD schema, the status left out; raises ManifestInvalid like the boundary."""
    return cast(VariantAutoscaling, parse_object({k: v for k, v in obj.items() if k != "status"}))


def variant_autoscaling(
    name: str,
    namespace: str,
    model: str,
    accelerator: str,
    parms: dict[str, str] | None = None,
    *,
    target: str | None = None,
    annotations: dict[str, str] | None = None,
    slo_key: str = "premium.yaml",
    max_batch: int = 256,
    **spec: Any,
) -> dict[str, Any]:
    """A VariantAutoscaling scaling the Deployment ``target`` (default: ``name``); ``spec`` overrides fields."""
    parms = parms or PROFILES[accelerator]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "generation": 1}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": metadata,
        "spec": {
            "modelID": model,
            "variantID": f"{model}-{accelerator}-1",
            "accelerator": accelerator,
            "acceleratorCount": 1,
            "sloClassRef": {"name": "service-classes-config", "key": slo_key},
            "variantProfile": {
                "maxBatchSize": max_batch,
                "perfParms": {
                    "decodeParms": {"alpha": parms["alpha"], "beta": parms["beta"]},
                    "prefillParms": {"gamma": parms["gamma"], "delta": parms["delta"]},
                },
            },
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target or name},
            **spec,
        },
    }


def deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    """A vLLM Deployment whose pods carry ``app: <name>``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.1"}]},
            },
        },
    }
