"""CustomResourceDefinitions generated from the pydantic models.

The validation rules are written once, on the models; this module turns each model's JSON schema into
a structural ``apiextensions.k8s.io/v1`` ``openAPIV3Schema``: ``$ref`` inlined, optional fields
unwrapped from ``anyOf [X, null]``, titles dropped, ``additionalProperties: false`` removed (a CRD
prunes unknown fields instead), ``const`` turned into a one-value ``enum``, ``metadata`` left as a
plain object. Scope, names, short names, categories, subresources and printer columns come from the kind
registry.

:func:`build_crd` and :func:`render_crds` are pure; writing files is left to the caller (the CLI, or
``tests/api/write_crds.py`` which refreshes ``deployments/crds/``).
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import yaml

from engine.api.meta import schema_without_descriptions
from engine.api.registry import KindInfo, kinds

__all__ = ["build_crd", "crd_file_name", "openapi_schema", "render_crds", "structural_schema"]

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


@cache
def structural_schema(info: KindInfo) -> dict[str, Any]:
    """The kind's ``openAPIV3Schema`` without descriptions, built once per kind: what validation, pruning and
    defaulting need. It never reads attribute docstrings from source, so building it inside a flow run (where
    task threads may build ASTs at the same time) is safe; :mod:`engine.api.meta` explains gh-106905."""
    with schema_without_descriptions():
        return openapi_schema(info)


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
        scale = {"specReplicasPath": info.spec_replicas_path, "statusReplicasPath": info.status_replicas_path}
        if info.label_selector_path:
            scale["labelSelectorPath"] = info.label_selector_path
        subresources["scale"] = scale
    if subresources:
        version["subresources"] = subresources
    if info.printer_columns:
        version["additionalPrinterColumns"] = [column.to_dict() for column in info.printer_columns]
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
    """Every registry kind's CRD as one YAML document by file name, in registry order; byte-for-byte deterministic.

    The texts carry no ``---`` separator, so callers printing them all join them with ``---\n``.
    """
    return {
        crd_file_name(info): yaml.safe_dump(
            build_crd(info), sort_keys=True, default_flow_style=False, allow_unicode=True, width=100
        )
        for info in kinds()
    }
