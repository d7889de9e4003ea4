"""Shared helpers of the API tests: example and corpus loading, CRD schemas as JSON Schema."""

from __future__ import annotations

import copy
import pathlib
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema
import yaml

from engine.api.crds import build_crd
from engine.api.registry import KINDS, KindInfo, kind_info
from engine.api.validate import format_path

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "examples"
CRD_DIR = REPO / "deployments" / "crds"
BAD_INPUTS = pathlib.Path(__file__).resolve().parent / "bad_inputs"

_HEADER = re.compile(r"^#\s*(expect-path|rule):\s*(.+?)\s*$", re.MULTILINE)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: these files are read at every collection


@cache
def _documents(path: pathlib.Path) -> tuple[Any, ...]:
    """The documents of one YAML file, parsed once per process (callers get copies)."""
    return tuple(yaml.load_all(path.read_text(), Loader=_LOADER))  # noqa: S506 - a safe loader


def _is_manifest(doc: Any) -> bool:
    return isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc


def manifest_files() -> list[pathlib.Path]:
    """The example files holding Kubernetes manifests (not data files such as ``metrics.yaml``)."""
    files = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs = [doc for doc in _documents(path) if doc is not None]
        if docs and all(_is_manifest(doc) for doc in docs):
            files.append(path)
    return files


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    """Every document of every example manifest file as ``(file#index, manifest)``."""
    docs = []
    for path in manifest_files():
        for index, doc in enumerate(_documents(path)):
            if doc is not None:
                docs.append((f"{path.name}#{index}", copy.deepcopy(doc)))
    return docs


def custom_resource_examples() -> list[tuple[str, dict[str, Any]]]:
    """The example documents that are Modelplane custom resources."""
    return [(src, doc) for src, doc in example_documents() if kind_info(doc["apiVersion"], doc["kind"])]


def bad_inputs() -> list[tuple[pathlib.Path, str, str, dict[str, Any]]]:
    """The corpus as ``(file, rule, expected field path, manifest)``; headers name rule and path."""
    entries = []
    for path in sorted(BAD_INPUTS.glob("*.yaml")):
        text = path.read_text()
        header = dict(_HEADER.findall(text))
        entries.append((path, header["rule"], header["expect-path"], yaml.load(text, Loader=_LOADER)))  # noqa: S506
    return entries


def _strict(node: Any) -> Any:
    """The schema with ``additionalProperties: false`` on typed objects, as a strict API server behaves."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


@cache
def _json_schema(kind: str, strict: bool) -> dict[str, Any]:
    info = next(k for k in KINDS if k.kind == kind)
    schema = copy.deepcopy(build_crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    if strict:
        schema = _strict(schema)
        # metadata is validated by the API server itself, not by the CRD schema
        schema["properties"]["metadata"] = {"type": "object"}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def crd_validator(info: KindInfo, strict: bool = True) -> jsonschema.Draft202012Validator:
    """A JSON Schema validator for the kind's CRD schema (OpenAPI v3 subset = JSON Schema here)."""
    schema = _json_schema(info.kind, strict)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def schema_error_paths(info: KindInfo, manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """``(field path, message)`` of every CRD schema violation, paths formatted like ManifestInvalid."""
    out = []
    for error in crd_validator(info).iter_errors(manifest):
        parts: list[str | int] = list(error.absolute_path)
        if error.validator == "required":
            missing = [name for name in error.validator_value if name not in error.instance]
            parts.append(missing[0])
        elif error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            parts.append(extra[0])
        out.append((format_path(parts), error.message))
    return out


def walk_schema(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node that describes a value: properties, items, additionalProperties."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk_schema(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk_schema(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk_schema(node["additionalProperties"], f"{path}{{}}")
