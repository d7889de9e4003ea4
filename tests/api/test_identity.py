"""An object's identity is checked as the API server checks it (engine/api/identity.py), in the one place
``validate-manifests`` and the flows' boundary reader share (engine/api/validate.py ``check_identity``)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.api.identity import TOTAL_ANNOTATION_SIZE, identity_errors
from engine.api.validate import ManifestInvalid, load_documents, parse_object


def obj(api_version: str = "v1", kind: str = "ConfigMap", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ns", **meta}}


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        (obj(name="zz/../../../tmp/escaped"), "metadata.name"),
        (obj(name="Upper"), "metadata.name"),
        (obj(name="a" * 254), "metadata.name"),
        (obj(name=5), "metadata.name"),
        (obj(name=None), "metadata.name"),
        (obj(namespace="../kube-system"), "metadata.namespace"),
        (obj(namespace="a.b"), "metadata.namespace"),  # a label: no dots
        (obj(namespace="a" * 64), "metadata.namespace"),
        (obj("v1", "Namespace", name="a.b", namespace=None), "metadata.name"),
        (obj("v1", "Service", name="1abc"), "metadata.name"),  # DNS-1035: starts with a letter
        (obj("rbac.authorization.k8s.io/v1", "Role", name="a/b"), "metadata.name"),
        (obj(labels={"bad key!": "v"}), 'metadata.labels["bad key!"]'),
        (obj(labels={"k": "v" * 64}), 'metadata.labels["k"]'),
        (obj(labels={"k": 1}), 'metadata.labels["k"]'),
        (obj(annotations={"big": "x" * TOTAL_ANNOTATION_SIZE}), "metadata.annotations"),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": "x"}, "metadata"),
        ({"apiVersion": 1, "kind": "ConfigMap", "metadata": {"name": "x"}}, "apiVersion"),
        ({"apiVersion": "v1", "metadata": {"name": "x"}}, "kind"),
        ({**obj("apps/v1", "Deployment"), "spec": True}, "spec"),  # decoding fails before validation
        ({**obj("batch/v1", "Job"), "spec": 1e-320}, "spec"),
        ({**obj(), "data": {"costs": {"cost": 1}}}, 'data["costs"]'),  # map[string]string
        ({**obj(), "data": float("inf")}, "data"),
        ({**obj("v1", "Secret"), "stringData": ["a"]}, "stringData"),
    ],
)
def test_identity_the_api_server_refuses_names_the_field(manifest: dict[str, Any], field: str) -> None:
    assert identity_errors(manifest)[0][0] == field


@pytest.mark.parametrize(
    "manifest",
    [
        obj(name="llama-3.1-8b"),
        obj("v1", "Namespace", name="llm-serving", namespace=None),
        obj("rbac.authorization.k8s.io/v1", "ClusterRole", name="system:modelplane", namespace=None),
        obj(labels={"app.kubernetes.io/name": "vllm", "empty": ""}, annotations={"Example.com/Key": "v"}),
        obj(name=None, generateName="job-"),
        {**obj(), "data": {"a": "1"}, "binaryData": {"b": "AA=="}},
        # A custom resource's body is its schema's: the boundary gives it its own condition.
        {**obj("llmd.ai/v1alpha1", "VariantAutoscaling"), "spec": 5},
    ],
)
def test_sound_identities_pass(manifest: dict[str, Any]) -> None:
    assert identity_errors(manifest) == []


def test_validate_manifests_and_the_boundary_report_the_same_field() -> None:
    hostile = {
        "apiVersion": "registry.volcano.sh/v1alpha1",
        "kind": "Model",
        "metadata": {"name": "zz/../../../tmp/escaped", "namespace": "llm-serving"},
        "spec": {"backends": []},
    }
    config_map = obj(name="zz/../x")
    report = load_documents([("a.yaml#0", hostile), ("a.yaml#1", config_map), ("a.yaml#2", obj(name="fine"))])
    assert [(source, err.field_path) for source, err in report.invalid] == [
        ("a.yaml#0", "metadata.name"),
        ("a.yaml#1", "metadata.name"),  # other kinds too: their names become paths as well
    ]
    assert [source for source, _ in report.valid] == ["a.yaml#2"]
    with pytest.raises(ManifestInvalid) as caught:
        parse_object(hostile)
    assert (caught.value.field_path, caught.value.message) == (
        report.invalid[0][1].field_path,
        report.invalid[0][1].message,
    )
