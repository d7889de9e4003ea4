"""Hypothesis strategies for what a schema-derived fuzzer cannot reach (tests/fuzzing.py derives its variants from
the CRD schemas): object identity, numeric extremes, YAML structure and a status left behind by someone else.

* :func:`metadata` — names (valid, 254+ characters, upper case, Unicode, ``/``, ``..``, empty, not a string),
  namespaces, label keys and values (valid, too long, bad characters, not strings), annotations (valid, over the
  256 KiB total, not strings), and ``metadata`` that is no mapping at all;
* :func:`extreme_numbers` — huge, negative, zero, denormal, infinities and NaN, as numbers and as the strings a
  quantity field takes; used for one field or for two at once (``alpha = beta = 1e308`` overflows only combined);
* :func:`yaml_streams` — multi-document files mixing valid objects with duplicate keys, recursive and shared
  aliases, merge keys, scalar, list and null documents and unclosed flow collections;
* :func:`status_garbage` — a status whose every field (and ``conditions``) is a scalar, a list of non-mappings or
  a mapping of the wrong shape, for any kind's status fields.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

Obj = dict[str, Any]


def bounded(max_examples: int) -> settings:
    """Hypothesis settings of a bounded, reproducible property: ``max_examples`` generated examples, derandomized,
    no example database, no deadline (a loaded machine), every health check off (large generated objects)."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


_LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")
NOT_A_STRING = st.sampled_from([0, -1, 1.5, True, None, [], ["a"], {"a": "b"}])


def names() -> st.SearchStrategy[Any]:
    """Object names, valid and not."""
    return st.one_of(
        _LABEL,
        st.builds(lambda a, b: f"{a}.{b}", _LABEL, _LABEL),
        st.sampled_from(["", ".", "..", "a/b", "zz/../../../../tmp/escaped", "Upper", "under_score", "a" * 254]),
        st.text(st.characters(min_codepoint=0x80, max_codepoint=0x2FFF), min_size=1, max_size=8),
        st.text(min_size=1, max_size=12),
        NOT_A_STRING,
    )


def label_maps() -> st.SearchStrategy[Any]:
    """``labels``: qualified keys and short values, or keys and values the API server refuses, or no map."""
    keys = st.one_of(
        _LABEL,
        st.builds(lambda p, n: f"{p}.io/{n}", _LABEL, _LABEL),
        st.sampled_from(["", "/x", "a/", "a" * 64, "bad key", "-x", "example.com/" + "n" * 64, "UPPER.io/x"]),
    )
    values = st.one_of(_LABEL, st.just(""), st.sampled_from(["v" * 64, "has space", "-x", "ü"]), NOT_A_STRING)
    return st.one_of(st.dictionaries(keys, values, max_size=3), st.sampled_from(["oops", ["a=b"], 5]))


def annotation_maps() -> st.SearchStrategy[Any]:
    """``annotations``: small valid maps, maps over the 256 KiB total, values that are no strings, or no map."""
    keys = st.one_of(_LABEL, st.builds(lambda p, n: f"{p}.io/{n}", _LABEL, _LABEL), st.sampled_from(["", "a b"]))
    values = st.one_of(st.text(max_size=20), st.just("x" * (256 * 1024 + 1)), NOT_A_STRING)
    return st.one_of(st.dictionaries(keys, values, max_size=3), st.sampled_from(["oops", [1], 7]))


def metadata(namespace: str = "llm-serving") -> st.SearchStrategy[Any]:
    """A ``metadata`` value: a mapping with any of name, namespace, labels and annotations hostile, or no mapping."""
    mapping = st.fixed_dictionaries(
        {"name": names()},
        optional={
            "namespace": st.one_of(st.just(namespace), names()),
            "labels": label_maps(),
            "annotations": annotation_maps(),
        },
    )
    return st.one_of(mapping, st.sampled_from(["oops", None, [], 5]))


EXTREMES: tuple[Any, ...] = (
    1e308,
    -1e308,
    1e-320,
    5e-324,
    -0.0,
    0,
    -1,
    2**63,
    10**30,
    float("inf"),
    float("-inf"),
    float("nan"),
    "1e308",
    "1e-320",
    "-1",
    "nan",
    "inf",
    "1e400",
)


def extreme_numbers() -> st.SearchStrategy[Any]:
    """One numeric extreme, as a number or a quantity string."""
    return st.one_of(st.sampled_from(EXTREMES), st.floats(allow_nan=True, allow_infinity=True))


_DOCUMENTS = {
    "valid": "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}, namespace: default}}\ndata: {{a: '1'}}\n",
    "duplicate key": "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: d{i}}}\nmetadata: {{name: e{i}}}\n",
    "recursive alias": "apiVersion: v1\nkind: ConfigMap\nmetadata: &m {{name: r{i}, self: *m}}\n",
    "shared alias": "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: s{i}, labels: &l {{a: b}}, annotations: *l}}\n",
    "merge key": "apiVersion: v1\nkind: ConfigMap\nmetadata: {{<<: {{namespace: default}}, name: m{i}}}\n",
    "scalar": "just a string {i}\n",
    "list": "- apiVersion: v1\n- kind: ConfigMap {i}\n",
    "null": "null\n",
    "empty": "# nothing but a comment {i}\n",
    "unclosed": "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: u{i}\ndata: [\n",
    "no metadata": "apiVersion: v1\nkind: ConfigMap\n",
    "bad apiVersion": "apiVersion: 123\nkind: ConfigMap\nmetadata: {{name: b{i}}}\n",
}


def yaml_streams() -> st.SearchStrategy[tuple[str, list[str]]]:
    """A multi-document file's text and the shape of each document, in order."""
    shapes = st.lists(st.sampled_from(sorted(_DOCUMENTS)), min_size=1, max_size=8)
    return shapes.map(
        lambda chosen: ("---\n".join(_DOCUMENTS[shape].format(i=i) for i, shape in enumerate(chosen)), chosen)
    )


GARBAGE: tuple[Any, ...] = (5, "x", True, None, [1, 2], [None], ["x"], [{"type": 5}], [{}], {"a": [1]}, {"type": []})


def status_garbage(fields: list[str]) -> st.SearchStrategy[Any]:
    """A status left by someone else: each of ``fields`` (and ``conditions``) garbage or absent, or no mapping."""
    keys = sorted({*fields, "conditions"})
    mapping = st.fixed_dictionaries({}, optional={key: st.sampled_from(GARBAGE) for key in keys})
    return st.one_of(mapping, st.sampled_from([5, "broken", [1, 2], [{"type": "Ready"}]]))
