"""Hostile input at the boundary, fuzzed (strategies: tests/hostile.py): identity, numeric extremes, YAML structure
and a status left behind, through the functions every flow and ``validate-manifests`` read objects with.

Properties: nothing raises but the typed refusal; an identity the API server would refuse is refused naming a
metadata field, and only then; an out-of-range number is refused naming its field or accepted as a finite value;
every document of a file is either read or reported with its line, and the others still load; a status of any
shape never makes a valid object invalid, and the failure status written over it is well formed. Bounded and
derandomized: a few seconds each.
"""

from __future__ import annotations

import copy
import math
import pathlib
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.api.identity import identity_errors
from engine.api.llmd import VariantAutoscaling
from engine.api.registry import KINDS, VARIANT_AUTOSCALING
from engine.optimize.spec import (
    MAX_VARIANT_COST,
    PROFILE_PARAMETER_MAX,
    PROFILE_PARAMETER_MIN,
    SpecError,
    parse_variant,
)
from engine.status import ConditionUpdate, status_with_conditions
from tasks.boundary import failure_status, parse_resource
from tasks.clients.cluster.yamlfile import read_file, split_documents
from tests.fuzzing import _example_documents, example_object
from tests.hostile import EXTREMES, bounded, extreme_numbers, metadata, status_garbage, yaml_streams

BOUNDED = bounded(80)
_NOW = datetime(2026, 1, 1, tzinfo=UTC)


@BOUNDED
@given(metadata())
def test_hostile_metadata_is_refused_naming_a_metadata_field_and_only_then(meta: Any) -> None:
    obj = example_object(VARIANT_AUTOSCALING)
    obj["metadata"] = meta
    parsed = parse_resource(obj)
    if identity_errors(obj):
        assert isinstance(parsed, tuple) and parsed[0].startswith("metadata"), parsed
    else:
        assert not isinstance(parsed, tuple), parsed


_SYSTEM_METADATA = (
    "generation",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "finalizers",
    "ownerReferences",
)


@BOUNDED
@given(
    st.sampled_from(_SYSTEM_METADATA),
    st.one_of(st.sampled_from(EXTREMES), st.just("two"), st.lists(st.integers(), max_size=2), st.just({"a": 1})),
)
def test_hostile_system_metadata_is_refused_naming_it_or_written_back_as_a_whole_generation(
    field: str, value: Any
) -> None:
    """What an API server sets (generation, uid, timestamps, ...) written by hand as anything: the object is refused
    naming that field, or read; its failure status and its conditions are written either way, observedGeneration a
    whole number >= 0 or absent. Before, ``generation: -3`` passed the reader and failed the Condition built from
    it: the optimize cycle of every model ended ``optimize could not run``."""
    obj = example_object(VARIANT_AUTOSCALING)
    obj["metadata"][field] = value
    parsed = parse_resource(obj)
    assert not isinstance(parsed, tuple) or parsed[0].startswith(f"metadata.{field}"), parsed
    written = [
        failure_status(obj, "spec.x: broken"),
        status_with_conditions(obj, [ConditionUpdate("Ready", "True", "Ready", "ok")], _NOW),
    ]
    for status in written:
        assert status is not None
        generations = [status.get("observedGeneration"), *(c.get("observedGeneration") for c in status["conditions"])]
        assert all(g is None or (type(g) is int and g >= 0) for g in generations), generations


_NUMERIC_PATHS = (
    ("spec", "acceleratorCount"),
    ("spec", "variantProfile", "maxBatchSize"),
    ("spec", "variantProfile", "perfParms", "decodeParms", "alpha"),
    ("spec", "variantProfile", "perfParms", "decodeParms", "beta"),
    ("spec", "variantProfile", "perfParms", "prefillParms", "gamma"),
    ("spec", "variantProfile", "perfParms", "prefillParms", "delta"),
    ("spec", "variantCost"),
)


def _set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        obj = obj[part]
    obj[path[-1]] = value


@BOUNDED
@given(st.sampled_from(_NUMERIC_PATHS), extreme_numbers(), st.booleans())
def test_numeric_extremes_are_refused_naming_the_field_or_read_in_range(
    path: tuple[str, ...], value: Any, with_its_pair: bool
) -> None:
    """Through both gates a VariantAutoscaling passes: the boundary (CRD schema: types, integer ranges) and the
    optimizer's reading of its quantities (:func:`engine.optimize.spec.parse_variant`: profile parameters and cost,
    written as strings). Either names the field, or every number the optimizer uses is finite and in its range."""
    obj = example_object(VARIANT_AUTOSCALING)
    quantity = path[-1] not in ("acceleratorCount", "maxBatchSize")  # written as a decimal string
    _set(obj, path, str(value) if quantity and not isinstance(value, str) else value)
    if with_its_pair and path[-2] in ("decodeParms", "prefillParms"):  # alpha = beta = 1e308: only combined
        pair = {"alpha": "beta", "beta": "alpha", "gamma": "delta", "delta": "gamma"}[path[-1]]
        _set(obj, (*path[:-1], pair), obj["spec"]["variantProfile"]["perfParms"][path[-2]][path[-1]])
    parsed = parse_resource(obj)
    if isinstance(parsed, tuple):
        assert parsed[0] == ".".join(path), parsed
        return
    try:
        spec = parse_variant(cast(VariantAutoscaling, parsed))
    except SpecError as exc:
        pair = {"alpha": "beta", "beta": "alpha", "gamma": "delta", "delta": "gamma"}.get(path[-1], path[-1])
        named = {".".join(path), ".".join(path[:-1]), ".".join((*path[:-1], pair))}
        assert exc.field in named, (exc.field, path, value)
        return
    assert spec.profile is not None and spec.variant_cost is not None
    numbers = [spec.profile.alpha, spec.profile.beta, spec.profile.gamma, spec.profile.delta]
    assert all(n == 0 or PROFILE_PARAMETER_MIN <= n <= PROFILE_PARAMETER_MAX for n in numbers), (path, value)
    assert 1 <= spec.accelerator_count <= 1024 and spec.max_batch is not None and 1 <= spec.max_batch <= 65536
    assert math.isfinite(spec.variant_cost) and 0 <= spec.variant_cost <= MAX_VARIANT_COST, (path, value)


def test_the_extremes_include_what_overflows_only_in_combination() -> None:
    assert "1e308" in EXTREMES and 1e308 * 2 == math.inf


@BOUNDED
@given(yaml_streams())
def test_every_document_of_a_hostile_file_is_read_or_reported_with_its_line(
    tmp_path_factory: pytest.TempPathFactory, stream: tuple[str, list[str]]
) -> None:
    text, shapes = stream
    path = tmp_path_factory.mktemp("yaml") / "hostile.yaml"
    path.write_text(text)
    loaded = read_file(path)
    assert loaded.error is None
    chunks = split_documents(text)
    assert len(loaded.docs) == len(chunks) and "".join(d.render() for d in loaded.docs) == text
    reported = " ".join(loaded.doc_errors)
    refused = {"duplicate key", "recursive alias", "unclosed"}
    for doc, shape in zip(loaded.docs, shapes):
        if shape == "valid" and not loaded.doc_errors:
            assert doc.data["kind"] == "ConfigMap"
        if shape in refused:
            assert doc.data is None and f"document at line {doc.line + (1 if doc.has_marker else 0)}" in reported
    if not refused & set(shapes):
        assert loaded.doc_errors == []
    for doc, shape in zip(loaded.docs, shapes):
        if shape == "valid":
            assert doc.data is not None and doc.data["metadata"]["name"].startswith("c")


_STATUS_FIELDS = {
    info.kind: sorted(
        (field.alias or name)
        for arg in (
            info.model().model_fields["status"].annotation,
            *getattr(info.model().model_fields["status"].annotation, "__args__", ()),
        )
        if isinstance(arg, type) and hasattr(arg, "model_fields")
        for name, field in arg.model_fields.items()
    )
    for info in KINDS
    if "status" in info.model().model_fields
}
_WITH_EXAMPLES = sorted(kind for kind in _STATUS_FIELDS if any(doc.get("kind") == kind for doc in _example_documents()))


@pytest.mark.parametrize("kind", _WITH_EXAMPLES)
def test_a_status_of_any_shape_never_invalidates_a_valid_object(kind: str) -> None:
    base = example_object(kind)
    assert not isinstance(parse_resource(base), tuple)

    @bounded(25)
    @given(status_garbage(_STATUS_FIELDS[kind]))
    def tolerated(status: Any) -> None:
        obj = copy.deepcopy(base)
        obj["status"] = status
        parsed = parse_resource(obj)
        assert not isinstance(parsed, tuple), parsed
        written = failure_status(obj, "spec.x: broken")
        assert written is not None and all(isinstance(c, dict) for c in written["conditions"])
        assert [c["reason"] for c in written["conditions"] if c.get("type") == "Ready"] == ["InvalidSpec"]
        rewritten = status_with_conditions(obj, [ConditionUpdate("Ready", "True", "Ready", "ok")], _NOW, {"x": 1})
        assert all(isinstance(c, dict) for c in rewritten["conditions"]) and rewritten["x"] == 1
        assert [c["reason"] for c in rewritten["conditions"] if c.get("type") == "Ready"] == ["Ready"]

    tolerated()


def test_the_status_fields_fuzzed_are_every_kinds() -> None:
    assert {"currentAlloc", "desiredOptimizedAlloc", "conditions"} <= set(_STATUS_FIELDS[VARIANT_AUTOSCALING])
    assert len(_WITH_EXAMPLES) >= 6


def test_a_hostile_folder_degrades_validate_manifests_naming_each_file(tmp_path: pathlib.Path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app
    from tests.hostile import _DOCUMENTS

    for i, template in enumerate(_DOCUMENTS[shape] for shape in sorted(_DOCUMENTS)):
        (tmp_path / f"{i:02d}.yaml").write_text(template.format(i=i))
    result = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(tmp_path), "--json"])
    assert result.exit_code == 3 and "Traceback" not in result.output
    assert "Traceback" not in (result.stderr or "")
