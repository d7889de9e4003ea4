"""An object's identity is checked as the API server checks it (engine/api/identity.py), in the one place
``validate-manifests`` and the flows' boundary reader share (engine/api/validate.py ``check_identity``)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from engine.api.identity import (
    SECRET_KEY_PATTERN,
    TOTAL_ANNOTATION_SIZE,
    annotation_size_error,
    identity_errors,
    secret_key_error,
    secret_name_error,
)
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
        (obj(name="abc\n"), "metadata.name"),  # Go's `$` is the end: a last newline is no part of a name
        (obj(labels={"k": "v\n"}), 'metadata.labels["k"]'),
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


SECRET_KEYS = [
    ("token", None),
    (".dockerconfigjson", None),
    ("AWS_SECRET_ACCESS_KEY", None),
    ("a..b", None),
    ("a" * 253, None),
    ("a" * 254, "must be no more than 253 characters"),
    (".", "must not be '.'"),
    ("..", "must not be '..'"),
    ("..token", "must not start with '..'"),
    ("../token", "a valid config key must consist of alphanumeric characters"),
    ("to ken", "a valid config key must consist of alphanumeric characters"),
    ("token\n", "a valid config key must consist of alphanumeric characters"),
    ("", "a valid config key must consist of alphanumeric characters"),
]


@pytest.mark.parametrize(("key", "problem"), SECRET_KEYS)
def test_a_secret_key_is_checked_as_apimachinery_is_config_map_key_and_the_crd_pattern_agrees(
    key: str, problem: str | None
) -> None:
    found = secret_key_error(key)
    assert (found is None) if problem is None else (found is not None and problem in found), found
    # The CRD's pattern (RE2, no look-ahead) says the same, the length aside (the schema's maxLength).
    assert (re.search(SECRET_KEY_PATTERN, key) is not None and "\n" not in key) == (found is None or len(key) > 253)


@pytest.mark.parametrize(
    ("name", "valid"),
    [("registry-creds", True), ("a.b-c", True), ("a" * 253, True), ("a" * 254, False), ("Registry", False)]
    + [("a_b", False), ("-a", False), ("a.", False), ("abc\n", False), ("", False)],
)
def test_a_secret_name_is_a_dns_1123_subdomain(name: str, valid: bool) -> None:
    assert (secret_name_error(name) is None) == valid


def test_annotations_are_counted_as_the_api_server_counts_them_and_the_largest_is_named() -> None:
    # Keys and values together, in bytes of UTF-8 ("é" is two): 262144 is allowed, one byte more is not.
    fits = {"a": "x" * (TOTAL_ANNOTATION_SIZE - 5), "b": "éx"}
    assert annotation_size_error(fits) is None
    over = {**fits, "a": "x" * (TOTAL_ANNOTATION_SIZE - 4)}
    problem = annotation_size_error(over)
    assert problem is not None and problem.startswith(f"Too long: must have at most {TOTAL_ANNOTATION_SIZE} bytes")
    assert f"they hold {TOTAL_ANNOTATION_SIZE + 1} bytes, the largest a {TOTAL_ANNOTATION_SIZE - 3} bytes" in problem
    assert identity_errors(obj(annotations=over)) == [("metadata.annotations", problem)]
