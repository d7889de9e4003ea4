"""The bad-input corpus: every seed validation rule has invalid manifests, rejected with the field path.

Each file under ``bad_inputs/`` names the rule it breaks and the expected field path in its header.
Both the pydantic models (through ``parse_object``) and the CRD's JSON schema must reject it at that
path; ``load_documents`` over a mix of valid and invalid files keeps every valid one.
"""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import pytest
import yaml

from engine.api.registry import kind_info
from engine.api.validate import ManifestInvalid, load_documents, parse_object
from tests.api.helpers import bad_inputs, example_documents, manifest_files, schema_error_paths

CORPUS = bad_inputs()
SEED_RULES = {
    "MinLength",
    "MaxLength",
    "Minimum",
    "Maximum",
    "Pattern",
    "Enum",
    "MinItems",
    "MaxItems",
    "MinProperties",
    "Required",
    "Type",
}


def test_corpus_covers_every_rule_kind() -> None:
    rules = {rule for _, rule, _, _ in CORPUS}
    assert SEED_RULES <= rules, SEED_RULES - rules


def test_corpus_covers_every_api_group() -> None:
    groups = {manifest["apiVersion"].split("/")[0] for _, _, _, manifest in CORPUS}
    assert groups == {"llmd.ai", "llmaz.io", "registry.volcano.sh", "aim.silogen.ai"}


@pytest.mark.parametrize(("path", "rule", "expected", "manifest"), CORPUS, ids=[p.stem for p, *_ in CORPUS])
def test_rejected_by_model_with_field_path(
    path: pathlib.Path, rule: str, expected: str, manifest: dict[str, Any]
) -> None:
    with pytest.raises(ManifestInvalid) as info:
        parse_object(manifest)
    error = info.value
    assert error.field_path == expected, error.errors
    assert error.kind == manifest["kind"]
    assert error.name == manifest["metadata"]["name"]
    assert expected in str(error)


@pytest.mark.parametrize(("path", "rule", "expected", "manifest"), CORPUS, ids=[p.stem for p, *_ in CORPUS])
def test_rejected_by_crd_schema_with_field_path(
    path: pathlib.Path, rule: str, expected: str, manifest: dict[str, Any]
) -> None:
    info = kind_info(manifest["apiVersion"], manifest["kind"])
    errors = schema_error_paths(info, manifest)
    assert errors, "the CRD schema accepted an invalid manifest"
    assert expected in [p for p, _ in errors], errors


def test_load_documents_keeps_valid_neighbours(tmp_path: pathlib.Path) -> None:
    for source in manifest_files():
        shutil.copy(source, tmp_path / source.name)
    picked = [
        entry
        for entry in CORPUS
        if entry[0].stem
        in {
            "va-minimum-maxbatchsize",
            "kthena-model-minitems-workers",
            "aim-modelcache-pattern-size",
            "kthena-binding-oneof-configuration",
            "llmaz-openmodel-required-source",
        }
    ]
    # one file holding a valid and an invalid document, the invalid one in the middle
    valid_va = next(doc for _, doc in example_documents() if doc["kind"] == "VariantAutoscaling")
    bad_va = next(m for p, _, _, m in CORPUS if p.stem == "va-pattern-variantid")
    (tmp_path / "mixed.yaml").write_text(
        yaml.safe_dump_all([valid_va, bad_va, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}])
    )
    for corpus_path, *_ in picked:
        shutil.copy(corpus_path, tmp_path / corpus_path.name)
    (tmp_path / "no-kind.yaml").write_text("apiVersion: v1\nmetadata:\n  name: x\n")

    docs = []
    for file in sorted(tmp_path.glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(file.read_text())):
            docs.append((f"{file.name}#{index}", doc))
    report = load_documents(docs)

    expected_valid = [s for s, d in example_documents()]
    assert len(report.valid) == len(expected_valid) + 2  # + the valid VA and the ConfigMap of mixed.yaml
    assert (
        len(report.resources) == len([d for _, d in example_documents() if kind_info(d["apiVersion"], d["kind"])]) + 1
    )
    assert all(isinstance(obj, dict) for _, obj in report.passthrough)
    assert {obj["kind"] for _, obj in report.passthrough} >= {"ConfigMap", "Deployment", "Namespace", "Secret"}
    assert not report.ok

    invalid = {source: error for source, error in report.invalid}
    assert len(invalid) == len(picked) + 2
    assert invalid["mixed.yaml#1"].field_path == "spec.variantID"
    assert invalid["no-kind.yaml#0"].field_path == "kind"
    for corpus_path, _, expected, _ in picked:
        error = invalid[f"{corpus_path.name}#0"]
        assert error.field_path == expected
        assert error.message
