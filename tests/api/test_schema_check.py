"""The compiled validity check (engine/api/schema_check.py) answers exactly as the full validator does.

``compile_check(schema)(value)`` must be True exactly when ``engine.api.schema.validate(value, schema)`` finds no
error: for every kind's spec schema, on the example objects and on hypothesis' variants of them (wrong types,
out-of-range numbers, missing required fields, huge strings: tests/fuzzing.py), and on hand-written schemas
using the keywords the generated CRDs do not (combinators, list types, exclusive bounds, multipleOf).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.api import schema as schema_mod
from engine.api.registry import KINDS
from engine.api.schema_check import compile_check
from tests.fuzzing import _example_documents, crd_schema, mutations
from tests.hostile import bounded

_KINDS_WITH_EXAMPLES = sorted(
    {(doc["apiVersion"], doc["kind"]) for doc in _example_documents()}
    & {(info.api_version, info.kind) for info in KINDS}
)


def _agrees(value: Any, schema: dict[str, Any]) -> None:
    assert compile_check(schema)(value) == (schema_mod.validate(value, schema) == []), (value, schema)


@pytest.mark.parametrize(("api_version", "kind"), _KINDS_WITH_EXAMPLES)
def test_the_check_agrees_with_the_validator_on_variants_of_every_kind(api_version: str, kind: str) -> None:
    base = next(doc for doc in _example_documents() if doc["kind"] == kind and doc["apiVersion"] == api_version)
    schema = crd_schema(api_version, kind)
    spec_schema = schema["properties"]["spec"]
    _agrees(base["spec"], spec_schema)
    _agrees(base, schema)
    invalid = [0]

    @bounded(20)
    @given(mutations(base, schema))
    def agree(candidate: tuple[dict[str, Any], str]) -> None:
        obj, _ = candidate
        _agrees(obj.get("spec"), spec_schema)
        _agrees(obj, schema)
        invalid[0] += bool(schema_mod.validate(obj.get("spec"), spec_schema))

    agree()
    assert invalid[0] > 0  # the variants reached the failing branches


_KEYWORDS: list[dict[str, Any]] = [
    {"type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 10, "exclusiveMaximum": True},
    {"type": "number", "multipleOf": 0.5},
    {"type": "string", "format": "date-time"},
    {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 4},
    {"enum": ["a", 1, None]},
    {"nullable": True, "type": "object"},
    {"x-kubernetes-int-or-string": True},
    {"type": "array", "x-kubernetes-list-type": "set", "maxItems": 3, "minItems": 1},
    {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    },
    {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "integer"}}, "maxProperties": 1},
    {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1},
    {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]},
    {"oneOf": [{"type": "number"}, {"type": "integer"}]},
    {"not": {"type": "string"}},
    {"allOf": [{"type": "integer"}, {"minimum": 3}]},
]
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-20, 20)
    | st.floats(allow_nan=False, width=32)
    | st.sampled_from(["", "a", "ab", "abcde", "A1", "2024-01-01T00:00:00Z", "2024-01-01", "x"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["a", "b", "name"]), inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.parametrize("schema", _KEYWORDS, ids=lambda s: ",".join(sorted(s)))
def test_the_check_agrees_with_the_validator_on_every_keyword(schema: dict[str, Any]) -> None:
    @bounded(60)
    @given(_VALUES)
    def agree(value: Any) -> None:
        _agrees(value, schema)

    agree()
