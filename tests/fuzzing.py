"""Invalid variants of every Modelplane kind, generated with hypothesis from the kind's CRD schema.

A variant starts from a valid example object (deployments/examples) and breaks one field the CRD schema
describes: a wrong type, a required field removed, a number out of range, a string outside its enum,
pattern or length, a wrong shape (``spec`` itself a string or a list), a huge string or odd unicode.
Unknown fields are not generated: the API server prunes them (so does the local backend), they make no
object invalid. Only variants that the boundary reader (:func:`engine.api.validate.parse_object`) or the
CRD schema rejects are kept, each with the field path the rejection names. Generation is deterministic
(``derandomize``), so a CI failure reproduces.
"""

from __future__ import annotations

import copy
import functools
import json
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engine.api import schema as schema_mod
from engine.api.registry import kind_info
from engine.api.validate import ManifestInvalid, parse_object

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "deployments" / "examples"
CRDS = REPO / "deployments" / "crds"

Obj = dict[str, Any]
Path = tuple[str | int, ...]

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Variant:
    """One invalid object and the field its rejection names."""

    obj: Obj
    field: str
    mutation: str


def crd_schema(api_version: str, kind: str) -> Obj:
    """The openAPIV3Schema of ``kind`` from the generated CRD in deployments/crds."""
    info = kind_info(api_version, kind)
    assert info is not None, kind
    crd = yaml.load((CRDS / f"{info.group}_{info.plural}.yaml").read_text(), Loader=_Loader)  # noqa: S506
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


@functools.cache
def _example_documents() -> tuple[Obj, ...]:
    """Every document of the example cluster, read once (the C loader: the files are read per kind)."""
    return tuple(
        doc
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for doc in yaml.load_all(path.read_text(), Loader=_Loader)  # noqa: S506 - a safe loader
        if isinstance(doc, dict)
    )


def example_object(kind: str, index: int = 0) -> Obj:
    """The ``index``-th object of ``kind`` in the example cluster."""
    found = [doc for doc in _example_documents() if doc.get("kind") == kind]
    return copy.deepcopy(found[index])


def schema_paths(schema: Obj, obj: Any, path: Path = ()) -> Iterator[tuple[Path, Obj, Any]]:
    """Every (path, sub-schema, current value) below ``schema`` that the object holds or the schema requires."""
    if not isinstance(schema, dict):
        return
    yield path, schema, obj
    props = schema.get("properties") or {}
    if isinstance(obj, dict):
        for key, sub in props.items():
            if key in obj or key in (schema.get("required") or ()):
                yield from schema_paths(sub, obj.get(key), path + (key,))
    items = schema.get("items")
    if isinstance(obj, list) and isinstance(items, dict):
        for i, value in enumerate(obj[:2]):
            yield from schema_paths(items, value, path + (i,))


def _wrong_type_values(schema: Obj) -> st.SearchStrategy[Any]:
    typ = schema.get("type")
    options: list[st.SearchStrategy[Any]] = []
    if typ != "string" and not schema.get("x-kubernetes-int-or-string"):
        options.append(st.text(max_size=12))
    if typ not in ("integer", "number") and not schema.get("x-kubernetes-int-or-string"):
        options.append(st.integers(-(10**6), 10**6))
    if typ != "boolean":
        options.append(st.booleans())
    if typ != "array":
        options.append(st.lists(st.integers(), max_size=3))
    if typ != "object":
        options.append(st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
    if typ == "integer":
        options.append(st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)))
    return st.one_of(options) if options else st.nothing()


def _out_of_range_values(schema: Obj) -> st.SearchStrategy[Any] | None:
    typ = schema.get("type")
    if typ in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        bounds = []
        if low is not None:
            bounds.append(
                st.integers(-(10**9), int(low) - 1)
                if typ == "integer"
                else st.floats(max_value=low, exclude_max=True, allow_nan=False, allow_infinity=False)
            )
        if high is not None:
            bounds.append(
                st.integers(int(high) + 1, 10**12)
                if typ == "integer"
                else st.floats(min_value=high, exclude_min=True, allow_nan=False, allow_infinity=False)
            )
        return st.one_of(bounds) if bounds else None
    if typ == "string":
        choices = []
        if schema.get("enum"):
            choices.append(st.text(min_size=1, max_size=10).filter(lambda s: s not in schema["enum"]))
        if schema.get("maxLength") is not None:
            choices.append(st.just("x" * (int(schema["maxLength"]) + 1)))
        if schema.get("minLength"):
            choices.append(st.just(""))
        if schema.get("pattern"):
            choices.append(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20))
        return st.one_of(choices) if choices else None
    if typ == "array" and schema.get("minItems"):
        return st.just([])
    return None


def _set(obj: Obj, path: Path, value: Any) -> Obj:
    out = copy.deepcopy(obj)
    cur: Any = out
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value
    return out


def _delete(obj: Obj, path: Path) -> Obj:
    out = copy.deepcopy(obj)
    cur: Any = out
    for part in path[:-1]:
        cur = cur[part]
    del cur[path[-1]]
    return out


def mutations(base: Obj, schema: Obj) -> st.SearchStrategy[tuple[Obj, str]]:
    """Candidate variants of ``base`` (object, mutation name); not all are invalid."""
    spec_schema = (schema.get("properties") or {}).get("spec") or {}
    targets = [(("spec",) + p, s, v) for p, s, v in schema_paths(spec_schema, base.get("spec"))]
    present = [t for t in targets if _holds(base, t[0])]
    strategies: list[st.SearchStrategy[tuple[Obj, str]]] = [
        st.sampled_from(["a string", 42, [1, 2], None, True]).map(
            lambda v: (_set(base, ("spec",), v), "wrong shape: spec")
        ),
    ]  # no unknown fields: the API server (and the local backend) prune them, the object stays valid
    for path, sub, _ in targets:
        strategies.append(_wrong_type_values(sub).map(lambda v, p=path: (_set(base, p, v), f"wrong type: {_fmt(p)}")))
        rng = _out_of_range_values(sub)
        if rng is not None:
            strategies.append(rng.map(lambda v, p=path: (_set(base, p, v), f"out of range: {_fmt(p)}")))
        if sub.get("type") == "string":
            strategies.append(
                st.text(st.characters(blacklist_categories=("Cs",)), max_size=4).map(
                    lambda s, p=path: (_set(base, p, "\u202e" + "x" * 100_000 + s), f"huge string: {_fmt(p)}")
                )
            )
    for path, sub, _ in present:
        for key in sub.get("required") or ():
            if isinstance(_get(base, path), dict) and key in _get(base, path):
                strategies.append(st.just((_delete(base, path + (key,)), f"missing required: {_fmt(path + (key,))}")))
    return st.one_of(strategies)


def _holds(obj: Any, path: Path) -> bool:
    try:
        _get(obj, path)
        return True
    except (KeyError, IndexError, TypeError):
        return False


def _get(obj: Any, path: Path) -> Any:
    for part in path:
        obj = obj[part]
    return obj


def _fmt(path: Path) -> str:
    return ".".join(str(p) for p in path)


def rejection(obj: Obj, schema: Obj) -> str | None:
    """The field path the boundary reader or the CRD schema names when ``obj`` is invalid, else None."""
    try:
        parse_object(obj)
    except ManifestInvalid as exc:
        return exc.field_path or "spec"
    checked = copy.deepcopy(obj)
    errors = schema_mod.process(checked, schema)
    return errors[0].field if errors else None


def invalid_variants(
    kind: str, count: int, budget: int | None = None, seed_index: int = 0
) -> tuple[list[Variant], int]:
    """Up to ``count`` distinct invalid variants of the example ``kind`` (tried: at most ``budget``
    candidates, default 4 x count); returns (variants, candidates tried)."""
    base = example_object(kind, seed_index)
    schema = crd_schema(base["apiVersion"], kind)
    found: list[Variant] = []
    seen: set[str] = set()
    tried = [0]

    @settings(
        max_examples=budget or 4 * count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(mutations(base, schema))
    def collect(candidate: tuple[Obj, str]) -> None:
        tried[0] += 1
        if len(found) >= count:
            return
        obj, mutation = candidate
        key = json.dumps(obj, sort_keys=True, default=repr)  # C-fast; 100 000-character strings are common
        if key in seen:
            return
        field = rejection(obj, schema)
        if field is not None:
            seen.add(key)
            obj = copy.deepcopy(obj)
            obj["metadata"] = dict(obj.get("metadata") or {}, name=f"fuzz-{kind.lower()}-{len(found):04d}")
            obj.pop("status", None)
            found.append(Variant(obj, field, mutation))

    collect()
    return found, tried[0]
