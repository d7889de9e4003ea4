"""The server's OpenAPI documents, built from the types it serves (CRDs as registered, built-in kinds).

``/openapi/v3`` is the index of one document per group/version (``serverRelativeURL`` with a content hash, as the
real server gives), ``/openapi/v3/api/v1`` and ``/openapi/v3/apis/<group>/<version>`` the documents, and
``/openapi/v2`` one Swagger 2.0 document of every type (JSON only: a client asking for the protobuf form gets 406).

What clients read from them is what the real server's documents carry: each type's schema under
``components.schemas`` (v3) or ``definitions`` (v2) tagged ``x-kubernetes-group-version-kind`` (``kubectl explain``
finds a kind by it), and each resource's paths whose operations carry the same tag and the ``fieldValidation`` and
``dryRun`` query parameters (``kubectl apply`` checks the PATCH operation of a kind for ``fieldValidation`` and,
when it is there, leaves the validation to the server, which this one does for custom resources). A CRD's schema
is its ``openAPIV3Schema`` for that version; a built-in kind's is its envelope (``apiVersion``, ``kind``,
``metadata`` as ObjectMeta, ``spec`` and ``status`` kept as given): the server stores built-in objects as written.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from .resources import ResourceType

Obj = dict[str, Any]

_OBJECT_META: Obj = {
    "description": "Standard object's metadata.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Name must be unique within a namespace."},
        "generateName": {"type": "string"},
        "namespace": {
            "type": "string",
            "description": "Namespace defines the space within which each name must be unique.",
        },
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    },
}
_META_NAME = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def schema_name(rt: ResourceType) -> str:
    """The component name of a type's schema, reversed-domain as the real server names them."""
    group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{group}.{rt.version}.{rt.kind}"


def _gvk(rt: ResourceType) -> Obj:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def type_schema(rt: ResourceType, meta_ref: str) -> Obj:
    """The schema of one type, tagged with its group/version/kind; ``metadata`` refers to ObjectMeta."""
    if rt.custom and rt.schema is not None:
        schema = copy.deepcopy(rt.schema)
    else:
        schema = {
            "type": "object",
            "description": f"{rt.kind} ({rt.api_version}), as the server stores it.",
            "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    properties = schema.setdefault("properties", {})
    properties.setdefault("apiVersion", {"type": "string", "description": "APIVersion of this representation."})
    properties.setdefault("kind", {"type": "string", "description": "Kind of the object this represents."})
    properties["metadata"] = {"allOf": [{"$ref": meta_ref}], "description": "Standard object's metadata."}
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return schema


def _paths(rt: ResourceType, ref: str, v3: bool) -> Obj:
    """The collection and item paths of a type, each operation tagged with its kind and the query parameters."""
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else "/api/v1"
    scope = f"{prefix}/namespaces/{{namespace}}" if rt.namespaced else prefix
    typed: Obj = {"schema": {"type": "string"}} if v3 else {"type": "string"}
    queries = [{"name": name, "in": "query", **typed} for name in ("dryRun", "fieldValidation")]
    body = {"content": {"application/json": {"schema": {"$ref": ref}}}} if v3 else {"schema": {"$ref": ref}}
    response = {"200": {"description": "OK", **body}}

    def operation(action: str) -> Obj:
        return {
            "operationId": f"{action}{rt.kind}",
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": _gvk(rt),
            "parameters": queries if action in ("post", "put", "patch") else [],
            "responses": response,
        }

    return {
        f"{scope}/{rt.plural}": {"get": operation("list"), "post": operation("post")},
        f"{scope}/{rt.plural}/{{name}}": {
            "get": operation("get"),
            "put": operation("put"),
            "patch": operation("patch"),
            "delete": operation("delete"),
        },
    }


def v3_document(types: list[ResourceType]) -> Obj:
    """The OpenAPI 3 document of one group/version."""
    schemas, paths = _schemas_and_paths(types, "#/components/schemas/", v3=True)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def v2_document(types: list[ResourceType]) -> Obj:
    """The Swagger 2.0 document of every type the server serves."""
    definitions, paths = _schemas_and_paths(types, "#/definitions/", v3=False)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "definitions": definitions,
    }


def _schemas_and_paths(types: list[ResourceType], prefix: str, v3: bool) -> tuple[Obj, Obj]:
    """Every type's schema (ObjectMeta's too) by component name, and every type's paths."""
    schemas: Obj = {_META_NAME: copy.deepcopy(_OBJECT_META)}
    paths: Obj = {}
    for rt in sorted(types, key=lambda r: (r.group, r.version, r.plural)):
        name = schema_name(rt)
        schemas[name] = type_schema(rt, prefix + _META_NAME)
        paths.update(_paths(rt, prefix + name, v3=v3))
    return schemas, paths


def gv_path(group: str, version: str) -> str:
    """``api/v1`` or ``apis/<group>/<version>``: a document's key in the v3 index."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def v3_index(documents: dict[str, Obj]) -> Obj:
    """The v3 index: each group/version's document URL with the hash of its content."""
    return {
        "paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={content_hash(doc)}"}
            for path, doc in sorted(documents.items())
        }
    }


def content_hash(document: Obj) -> str:
    """The upper-case hex SHA-512 of a document's JSON, as the real server's ``hash`` parameter."""
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()
