"""CustomResourceDefinitions generated from the pydantic models.

The validation rules are written once, on the models; this module turns each model's JSON schema into
a structural ``apiextensions.k8s.io/v1`` ``openAPIV3Schema``: ``$ref`` inlined, optional fields
unwrapped from ``anyOf [X, null]``, titles dropped, ``additionalProperties: false`` removed (a CRD
prunes unknown fields instead), ``const`` turned into a one-value ``enum``, ``metadata`` left as a
plain object. Scope, names, short names, categories and subresources come from the kind registry.

:func:`build_crd` and :func:`render_crds` are pure; writing files is left to the caller (the CLI, or
``tests/api/write_crds.py`` which refreshes ``deployments/crds/``).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from engine.api.registry import KINDS, KindInfo

__all__ = ["PRINTER_COLUMNS", "build_crd", "crd_file_name", "openapi_schema", "render_crds"]

_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _col(name: str, json_path: str, type_: str = "string", priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": type_, "jsonPath": json_path}
    if priority:
        column["priority"] = priority
    return column


def _condition(type_: str) -> str:
    return f'.status.conditions[?(@.type=="{type_}")].status'


PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "VariantAutoscaling": [
        _col("Model", ".spec.modelID"),
        _col("Accelerator", ".status.currentAlloc.accelerator"),
        _col("CurrentReplicas", ".status.currentAlloc.numReplicas", "integer"),
        _col("Optimized", ".status.desiredOptimizedAlloc.numReplicas", "integer"),
        _col("MetricsReady", _condition("MetricsAvailable")),
        _AGE,
        _col("Variant", ".spec.variantID", priority=1),
        _col("Target", ".spec.scaleTargetRef.name", priority=1),
        _col("OptimizationReady", _condition("OptimizationReady"), priority=1),
    ],
    "OpenModel": [
        _col("Family", ".spec.familyName"),
        _col("ModelID", ".spec.source.modelHub.modelID"),
        _col("URI", ".spec.source.uri", priority=1),
        _AGE,
    ],
    "Model": [
        _col("ModelName", ".spec.name"),
        _col("Backends", ".spec.backends[*].name"),
        _col("Owner", ".spec.owner", priority=1),
        _AGE,
    ],
    "AutoscalingPolicy": [
        _col("Tolerance", ".spec.tolerancePercent", "integer"),
        _col("Metrics", ".spec.metrics[*].metricName"),
        _AGE,
    ],
    "AutoscalingPolicyBinding": [
        _col("Policy", ".spec.policyRef.name"),
        _col("Target", ".spec.scalingConfiguration.target.targetRef.name"),
        _col("Current", ".status.currentReplicas", "integer"),
        _col("Desired", ".status.desiredReplicas", "integer"),
        _col("LastScale", ".status.lastScaleTime", "date", priority=1),
        _AGE,
    ],
    "AIMClusterModel": [
        _col("Name", ".spec.name"),
        _col("Image", ".spec.image"),
        _col("Ready", _condition("Ready")),
        _AGE,
    ],
    "AIMNamespaceConfig": [
        _col("Gateway", ".spec.routing.gateway.name"),
        _col("StorageClass", ".spec.cacheStorageClassName"),
        _AGE,
    ],
    "AIMServiceTemplate": [
        _col("Model", ".spec.model"),
        _col("GPU", ".spec.gpuModel"),
        _col("GPUs", ".spec.gpusPerReplica", "integer"),
        _col("Metric", ".spec.metric"),
        _col("Precision", ".spec.precision"),
        _col("Status", ".status.status"),
        _AGE,
    ],
    "AIMService": [
        _col("Model", ".spec.model"),
        _col("Template", ".spec.templateRef"),
        _col("Replicas", ".spec.replicas", "integer", priority=1),
        _col("Status", ".status.status"),
        _AGE,
    ],
    "ModelCache": [
        _col("Source", ".spec.sourceUri"),
        _col("Size", ".spec.size", priority=1),
        _col("Status", ".status.status"),
        _col("PVC", ".status.persistentVolumeClaim"),
        _AGE,
    ],
}

_DROP = {"title"}


def _convert(node: Any, defs: dict[str, Any]) -> Any:
    """One pydantic JSON-schema node as a structural OpenAPI v3 node."""
    if isinstance(node, list):
        return [_convert(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = _convert(defs[node.pop("$ref").rsplit("/", 1)[-1]], defs)
        node = {**target, **{k: v for k, v in node.items() if k not in _DROP}}
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b != {"type": "null"}]
        if len(branches) < len(node["anyOf"]):
            outer = {k: v for k, v in node.items() if k != "anyOf"}
            inner = branches[0] if len(branches) == 1 else {"anyOf": branches}
            node = {**_convert(inner, defs), **outer}
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and value is None:
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "description" and isinstance(value, str):
            result[key] = value.replace("``", "")
            continue
        if key == "const":
            result["enum"] = [value]
            continue
        if key == "properties":
            result[key] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            result[key] = _convert(value, defs)
        elif key in ("anyOf", "oneOf", "allOf"):
            result[key] = [_convert(sub, defs) for sub in value]
        else:
            result[key] = copy.deepcopy(value)
    if "properties" in result:
        result.setdefault("type", "object")
    return result


def openapi_schema(info: KindInfo) -> dict[str, Any]:
    """The structural ``openAPIV3Schema`` of a kind, derived from its pydantic model."""
    model = info.model()
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    properties = schema["properties"]
    result: dict[str, Any] = {
        "description": (model.__doc__ or info.kind).strip(),
        "type": "object",
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object.",
                "type": "string",
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents.",
                "type": "string",
            },
            "metadata": {"type": "object"},
        },
        "required": ["spec"] if "spec" in schema.get("required", []) else [],
    }
    for name in ("spec", "status"):
        if name in properties:
            result["properties"][name] = _convert(properties[name], defs)
    if not result["required"]:
        del result["required"]
    return result


def build_crd(info: KindInfo) -> dict[str, Any]:
    """The CustomResourceDefinition of one registry kind."""
    version: dict[str, Any] = {
        "name": info.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(info)},
    }
    subresources: dict[str, Any] = {}
    if info.has_status:
        subresources["status"] = {}
    if info.has_scale:
        scale = {
            "specReplicasPath": info.extra.get("spec_replicas_path", ".spec.replicas"),
            "statusReplicasPath": info.extra.get("status_replicas_path", ".status.replicas"),
        }
        if "label_selector_path" in info.extra:
            scale["labelSelectorPath"] = info.extra["label_selector_path"]
        subresources["scale"] = scale
    if subresources:
        version["subresources"] = subresources
    columns = PRINTER_COLUMNS.get(info.kind)
    if columns:
        version["additionalPrinterColumns"] = copy.deepcopy(columns)
    names: dict[str, Any] = {
        "kind": info.kind,
        "listKind": info.list_kind,
        "plural": info.plural,
        "singular": info.singular,
    }
    if info.short_names:
        names["shortNames"] = list(info.short_names)
    if info.categories:
        names["categories"] = list(info.categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": info.crd_name,
            "labels": {"app.kubernetes.io/part-of": "modelplane"},
        },
        "spec": {
            "group": info.group,
            "names": names,
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "versions": [version],
        },
    }


def crd_file_name(info: KindInfo) -> str:
    """``<group>_<plural>.yaml``, e.g. ``llmd.ai_variantautoscalings.yaml``."""
    return f"{info.group}_{info.plural}.yaml"


def render_crds() -> dict[str, str]:
    """Every CRD as one YAML document by file name, in registry order; byte-for-byte deterministic.

    The texts carry no ``---`` separator, so callers printing them all join them with ``---\n``.
    """
    return {
        crd_file_name(info): yaml.safe_dump(
            build_crd(info), sort_keys=True, default_flow_style=False, allow_unicode=True, width=100
        )
        for info in KINDS
    }
