"""Cache identity, names and PVC sizes."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from engine.caches.identity import CACHE_IDENTITY_LABEL, cache_identity, cache_name, pvc_size
from engine.caches.source_fields import from_openmodel_source
from engine.caches.sources import parse_source

GI = 1024**3
MI = 1024**2


def test_pvc_size_applies_headroom_and_rounds_up_to_whole_gi() -> None:
    assert pvc_size([10 * GI]) == "11Gi"
    assert pvc_size([10 * GI], headroom_percent=10) == "11Gi"
    assert pvc_size([100 * MI]) == "1Gi"
    assert pvc_size([10 * GI + 1]) == "12Gi"
    assert pvc_size([10 * GI], headroom_percent=0) == "10Gi"
    assert pvc_size([4 * GI, 6 * GI], headroom_percent=25) == "13Gi"
    assert pvc_size([0]) == "1Gi"
    assert pvc_size(10 * GI) == "11Gi"
    assert pvc_size(iter([5 * GI, 5 * GI])) == "11Gi"
    assert pvc_size([Decimal(10 * GI)]) == "11Gi"  # a parsed Kubernetes quantity
    assert pvc_size([float(100 * MI)]) == "1Gi"


@pytest.mark.parametrize(
    ("sizes", "headroom", "needle"),
    [
        ([], 10, "no sources"),
        ([None], 10, "unknown"),
        ([GI, None], 10, "source 1 is unknown"),
        ([-1], 10, "negative"),
        ([1.5], 10, "whole number"),
        ([True], 10, "whole number"),
        ([GI], -1, "headroom"),
        (None, 10, "unknown"),
        ([float("nan")], 10, "finite"),
    ],
)
def test_pvc_size_rejects_what_it_cannot_size(sizes: list, headroom: float, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        pvc_size(sizes, headroom_percent=headroom)


def test_identity_is_stable_and_shared_by_spellings() -> None:
    a = cache_identity(parse_source("hf://org/name"))
    assert a == cache_identity("hf://org/name@main")
    assert a == cache_identity(from_openmodel_source({"modelHub": {"modelID": "org/name"}}))
    assert a == cache_identity("https://huggingface.co/org/name")
    assert re.fullmatch(r"[0-9a-f]{32}", a)
    assert len(a) <= 63  # fits a label value
    assert CACHE_IDENTITY_LABEL == "modelplane.io/cache-identity"


@pytest.mark.parametrize(
    "other",
    [
        "hf://org/name@v2",
        "hf://org/name?allow=*.json",
        "hf://org/name?ignore=*.json",
        "hf://org/name?filename=x.gguf",
        "hf://org/other",
        "s3://org-name/x",
    ],
)
def test_identity_differs_by_what_the_cache_holds(other: str) -> None:
    assert cache_identity("hf://org/name") != cache_identity(other)


def test_identity_differs_by_storage_class() -> None:
    source = parse_source("s3://bucket/m")
    assert cache_identity(source) == cache_identity(source, None) == cache_identity(source, "")
    assert cache_identity(source, "fast") != cache_identity(source)


def test_cache_name_is_a_readable_dns_label() -> None:
    name = cache_name(parse_source("hf://meta-llama/Llama-3.1-8B-Instruct"))
    assert name.startswith("hf-meta-llama-llama-3-1-8b-instruct-")
    assert name == cache_name("hf://meta-llama/Llama-3.1-8B-Instruct@main")
    assert name != cache_name("hf://meta-llama/Llama-3.1-8B-Instruct", "fast")
    long = cache_name("s3://" + "b" * 63 + "/" + "/".join(["segment"] * 30))
    for candidate in (name, long, cache_name("pvc://c/p"), cache_name("ollama://llama3.3")):
        assert len(candidate) <= 63
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", candidate), candidate
