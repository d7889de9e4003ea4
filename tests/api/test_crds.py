"""The generated CRDs: checked in, valid, structural, complete, and agreeing with the examples."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from engine.api.crds import build_crd, crd_file_name, render_crds
from engine.api.registry import KINDS, KindInfo, kind_info
from tests.api.helpers import (
    CRD_DIR,
    crd_validator,
    custom_resource_examples,
    example_documents,
    schema_error_paths,
    walk_schema,
)
from tests.api.write_crds import write_crds

EXAMPLES = custom_resource_examples()


def _schema(info: KindInfo) -> dict[str, Any]:
    return build_crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_checked_in_crds_match_the_generator() -> None:
    rendered = render_crds()
    on_disk = {path.name: path.read_text(encoding="utf-8") for path in CRD_DIR.glob("*.yaml")}
    assert set(on_disk) == set(rendered), "run: python -m tests.api.write_crds"
    for name, text in rendered.items():
        assert on_disk[name] == text, f"{name} drifted; run: python -m tests.api.write_crds"


def test_render_is_deterministic_and_write_crds_writes_every_file(tmp_path) -> None:
    assert render_crds() == render_crds()
    written = write_crds(tmp_path)
    assert sorted(p.name for p in written) == sorted(render_crds())
    assert (tmp_path / "llmd.ai_variantautoscalings.yaml").exists()


def test_all_ten_kinds_present() -> None:
    kinds = {yaml.safe_load(text)["spec"]["names"]["kind"] for text in render_crds().values()}
    assert kinds == {
        "VariantAutoscaling",
        "OpenModel",
        "Model",
        "AutoscalingPolicy",
        "AutoscalingPolicyBinding",
        "AIMClusterModel",
        "AIMNamespaceConfig",
        "AIMServiceTemplate",
        "AIMService",
        "ModelCache",
    }


@pytest.mark.parametrize("info", KINDS, ids=lambda k: k.kind)
def test_crd_metadata_follows_registry(info: KindInfo) -> None:
    crd = build_crd(info)
    assert crd["metadata"]["name"] == info.crd_name
    assert crd_file_name(info) == f"{info.group}_{info.plural}.yaml"
    spec = crd["spec"]
    assert spec["group"] == info.group
    assert spec["scope"] == ("Namespaced" if info.namespaced else "Cluster")
    names = spec["names"]
    assert (names["kind"], names["listKind"], names["plural"], names["singular"]) == (
        info.kind,
        info.list_kind,
        info.plural,
        info.singular,
    )
    assert names["shortNames"] == list(info.short_names)
    assert names["categories"] == list(info.categories)
    version = spec["versions"][0]
    assert (version["name"], version["served"], version["storage"]) == (info.version, True, True)
    subresources = version.get("subresources", {})
    assert ("status" in subresources) == info.has_status
    assert ("scale" in subresources) == info.has_scale
    assert ("status" in version["schema"]["openAPIV3Schema"]["properties"]) == info.has_status
    assert version["additionalPrinterColumns"] == [c.to_dict() for c in info.printer_columns]
    assert any(c["name"] == "Age" for c in version["additionalPrinterColumns"])


@pytest.mark.parametrize("info", KINDS, ids=lambda k: k.kind)
def test_crd_validates_against_apiextensions_v1(info: KindInfo) -> None:
    kubernetes_validate.validate(build_crd(info), "1.30", strict=True)


@pytest.mark.parametrize("info", KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(info: KindInfo) -> None:
    schema = _schema(info)
    assert schema["properties"]["metadata"] == {"type": "object"}
    for path, node in walk_schema(schema):
        assert "$ref" not in node and "title" not in node and "nullable" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "type" in node, f"{info.kind}{path} has no type"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            continue
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties") is not False, path
        if node["type"] == "object":
            assert "properties" in node or "additionalProperties" in node or path == ".metadata", path
        for key in ("anyOf", "oneOf", "allOf"):
            for branch in node.get(key, []):
                assert set(branch) <= {"required"}, f"{path}: {key} branch {branch} is not structural"


def test_variant_autoscaling_schema_rules() -> None:
    spec = _schema(kind_info("llmd.ai/v1alpha1", "VariantAutoscaling"))["properties"]["spec"]
    status = _schema(kind_info("llmd.ai/v1alpha1", "VariantAutoscaling"))["properties"]["status"]
    assert spec["required"] == ["modelID"]
    props = spec["properties"]
    assert props["variantCost"] == {
        "default": "10.0",
        "pattern": r"^\d+(\.\d+)?$",
        "type": "string",
        "description": props["variantCost"]["description"],
    }
    assert props["variantID"]["pattern"] == "^.+-[A-Za-z0-9]+-[1-9][0-9]*$"
    assert props["scaleTargetRef"]["required"] == ["kind", "name"]
    perf = props["variantProfile"]["properties"]["perfParms"]["properties"]
    assert perf["decodeParms"]["minProperties"] == 1 and perf["prefillParms"]["minProperties"] == 1
    assert status["properties"]["currentAlloc"]["properties"]["numReplicas"]["minimum"] == 0
    optimized = status["properties"]["desiredOptimizedAlloc"]["properties"]
    assert optimized["numReplicas"]["minimum"] == 0
    assert optimized["accelerator"]["minLength"] == 2
    assert optimized["lastRunTime"]["format"] == "date-time"


def test_binding_status_is_typed() -> None:
    status = _schema(kind_info("registry.volcano.sh/v1alpha1", "AutoscalingPolicyBinding"))["properties"]["status"]
    props = status["properties"]
    for name in ("lastScaleTime", "panicModeEnd", "zeroSince"):
        assert props[name]["format"] == "date-time"
    assert props["history"]["items"]["required"] == ["time", "recommended", "corrected"]
    assert props["targets"]["items"]["properties"]["replicas"]["type"] == "integer"
    assert props["conditions"]["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


def test_enums_and_defaults_reach_the_crd() -> None:
    template = _schema(kind_info("aim.silogen.ai/v1alpha1", "AIMServiceTemplate"))["properties"]["spec"]["properties"]
    assert template["precision"]["enum"] == ["auto", "fp4", "fp8", "fp16", "fp32", "bf16", "int4", "int8"]
    assert template["precision"]["default"] == "auto"
    assert template["metric"]["enum"] == ["latency", "throughput"]
    model = _schema(kind_info("registry.volcano.sh/v1alpha1", "Model"))["properties"]["spec"]["properties"]
    backend = model["backends"]["items"]["properties"]
    assert backend["type"]["enum"] == ["vLLM", "vLLMDisaggregated", "SGLang", "MindIE", "MindIEDisaggregated"]
    assert (backend["workers"]["minItems"], backend["workers"]["maxItems"]) == (1, 1000)
    assert backend["workers"]["items"]["properties"]["type"]["default"] == "server"
    assert backend["workers"]["items"]["properties"]["config"]["x-kubernetes-preserve-unknown-fields"] is True
    assert model["name"]["maxLength"] == 64


@pytest.mark.parametrize(("source", "manifest"), EXAMPLES, ids=[s for s, _ in EXAMPLES])
def test_examples_validate_against_their_crd(source: str, manifest: dict[str, Any]) -> None:
    info = kind_info(manifest["apiVersion"], manifest["kind"])
    assert schema_error_paths(info, manifest) == []
    crd_validator(info, strict=False).validate(manifest)


BUILTIN_EXAMPLES = [(s, d) for s, d in example_documents() if not kind_info(d["apiVersion"], d["kind"])]


@pytest.mark.parametrize(("source", "manifest"), BUILTIN_EXAMPLES, ids=[s for s, _ in BUILTIN_EXAMPLES])
def test_builtin_examples_validate_against_kubernetes_schemas(source: str, manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, "1.30", strict=True)
