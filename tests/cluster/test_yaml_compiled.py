"""The compiled YAML reader reads every manifest file as the Python reader does (tasks/clients/cluster/yamlcompiled.py).

Differential: each text is read by ``read_file`` with the compiled reader and with ``MODELPLANE_YAML_READER=python``,
and the two results must be identical, types included (``1`` is no ``1.0`` is no ``True``), with the same refusals,
lines and errors: a corpus of YAML 1.1 edge scalars in every position and style, documents the compiled reader
must hand back (anchors, tags, merge keys, repeated keys, deep nesting, directives, libyaml's version difference),
hostile streams, and generated trees in random styles. The C module's own error paths are driven directly and must
leak no reference.
"""

from __future__ import annotations

import gc
import json
import math
import os
import pathlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasks.clients.cluster import yamlcompiled, yamlfile
from tasks.clients.cluster.yamlcompiled import READER_VARIABLE, compiled_documents
from tasks.clients.cluster.yamlfile import MAX_DOCUMENTS_PER_FILE as MOST
from tasks.clients.cluster.yamlfile import read_file
from tasks.clients.cluster.yamlload import NOT_PLAIN
from tests.conftest import REQUIRE_COMPILED_YAML, compiled_yaml_missing, skip_unless_compiled_yaml
from tests.hostile import bounded, yaml_streams

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def compiled_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(READER_VARIABLE, raising=False)
    skip_unless_compiled_yaml()


def test_the_compiled_reader_is_built_where_the_test_run_requires_it() -> None:
    """dev.sh sets the variable for every test run (CI included): the editable install of 3.11 and the
    ``pip install .`` of the other Pythons must have built the extension."""
    if not os.environ.get(REQUIRE_COMPILED_YAML):
        pytest.skip(f"{REQUIRE_COMPILED_YAML} is not set")
    assert compiled_yaml_missing() is None


@contextmanager
def python_reader() -> Iterator[None]:
    before = os.environ.get(READER_VARIABLE)
    os.environ[READER_VARIABLE] = "python"
    try:
        yield
    finally:
        if before is None:
            del os.environ[READER_VARIABLE]
        else:
            os.environ[READER_VARIABLE] = before


def assert_identical(compiled: Any, python: Any, where: str = "") -> None:
    """Equal values of the same types all the way down (dict keys and their order included; NaN matches NaN)."""
    assert type(compiled) is type(python), f"{where}: {compiled!r} ({type(compiled)}) != {python!r} ({type(python)})"
    if isinstance(python, dict):
        assert len(compiled) == len(python), where
        for (key, value), (other_key, other_value) in zip(compiled.items(), python.items()):
            assert_identical(key, other_key, f"{where}/key")
            assert_identical(value, other_value, f"{where}/{key!r}")
    elif isinstance(python, list):
        assert len(compiled) == len(python), where
        for index, (item, other) in enumerate(zip(compiled, python)):
            assert_identical(item, other, f"{where}[{index}]")
    elif isinstance(python, float) and math.isnan(python):
        assert math.isnan(compiled), where
    else:
        assert compiled == python, where


def read_both(path: pathlib.Path, text: str) -> tuple[Any, Any]:
    """``read_file`` of ``text`` with each reader, as ``(docs, lines, doc_errors, error)`` or the exception raised."""

    def read() -> Any:
        try:
            loaded = read_file(path)
        except Exception as exc:  # noqa: BLE001 - both readers must raise the same
            return repr(exc)
        return [d.data for d in loaded.docs], [(d.line, d.text) for d in loaded.docs], loaded.doc_errors, loaded.error

    path.write_text(text, encoding="utf-8", newline="")
    compiled = read()
    with python_reader():
        python = read()
    return compiled, python


def chunk_values_both(text: str) -> tuple[Any, Any]:
    """The values :func:`read_file` gives the chunks of ``text`` with each reader, on the text as it is (reading a
    file turns ``\r\n`` into ``\n``), or the exception raised."""

    def values() -> Any:
        try:
            return yamlfile._chunk_values(text, yamlfile._split_with_lines(text))
        except Exception as exc:  # noqa: BLE001 - both readers must raise the same
            return repr(exc)

    compiled = values()
    with python_reader():
        python = values()
    return compiled, python


def assert_read_alike(path: pathlib.Path, text: str) -> Any:
    """``text`` read alike by both readers, as a file and as it is; what the compiled reader read."""
    compiled_values, python_values = chunk_values_both(text)
    assert_identical(compiled_values, python_values, repr(text[:200]))
    compiled, python = read_both(path, text)
    if isinstance(python, str):
        assert compiled == python, text
        return None
    assert_identical(compiled[0], python[0], repr(text[:200]))
    assert compiled[1:] == python[1:], text
    return compiled


EDGE_SCALARS = (
    *("yes Yes YES no No NO on On ON off Off OFF y Y n N true True TRUE false False FALSE".split()),
    *("0755 0o17 0x1F 0X1f 0b101 0b_ 0x_ 1_000 1__0 _1 0_ +12 -12 0 -0 00 08 09 0.0 -0.0 1. -.5 +.5".split()),
    *("1:30 -1:30 190:20:30.15 12:30:00 1:60 1e3 1.0e+3 6.8523015e+5 1.0E-3 3.14.15 1,000".split()),
    *(".inf -.Inf +.INF .nan .NaN .NAN inf nan ~ null Null NULL nULL".split()),
    *("2024-01-01 2024-01-01T00:00:00Z 2001-12-14t21:59:43.10-05:00 2002-12-14".split()),
    *("<< = == . - + -- +- é 日本 😀 x\u0301 a#b a:b http://x?y=1&z=2 C:\\dir 10Gi 500m 1e400".split()),
    "",
    "two words",
)
"""Scalars the YAML 1.1 resolver reads as something else, nearly so, or refuses, and ordinary ones."""


def _styled(scalar: str) -> list[str]:
    return [scalar, "'" + scalar.replace("'", "''") + "'", json.dumps(scalar, ensure_ascii=False)]


@pytest.mark.parametrize("scalar", EDGE_SCALARS)
def test_every_edge_scalar_reads_alike_as_value_key_item_and_quoted(tmp_path: pathlib.Path, scalar: str) -> None:
    path = tmp_path / "scalars.yaml"
    for written in _styled(scalar):
        for text in (
            f"value: {written}\n",
            f"{written}: value\n",
            f"- {written}\n- [{written}, x]\n- {{k: {written}}}\n",
            f"{written}\n",
            f"a: 1\n---\n{written}\n---\nb: {written}\n",
            f"k: {written}\r\n",
        ):
            assert_read_alike(path, text)


def test_typical_manifests_are_read_by_the_compiled_reader_whole() -> None:
    """The examples (Deployments, ConfigMaps, custom resources...) have no document the compiled reader hands back:
    it is the reader that reads them, not a fallback."""
    for example in sorted((REPO / "deployments" / "examples").glob("*.yaml")):
        documents = compiled_documents(example.read_text(), MOST)
        assert documents is not None and documents, example
        assert not [line for line, value in documents if value is NOT_PLAIN], example


_MULTILINE = (
    "literal: |\n  line one\n   indented\n\n  after blank\nfolded: >\n  a\n  b\n\n  c\nkeep: |+\n  x\n\nstrip: >-\n  y\n",
    "plain: a\n  b\n  c\nquoted: 'a\n  b'\ndouble: \"a\\\n  b\\tc\\u00e9\\x41\\U0001F600\"\n",
    "a: 1\r\nb:\r\n  - x\r\n  - 'y'\r\n---\r\nc: |\r\n  t\r\n",
    "\ufeffa: 1\n",
    "a: 1\n---\x85b: 2\n",
    "a:\tb\nc: \td\n",
    "a: 1 # comment\n# full line\nb: [1, 2, # inside\n  3]\n",
    "? a\n: 1\n? [b]\n: 2\n",
    "{a: 1, b: [x, {c: d}], e: {}}\n",
    "a: ''\nb: \"\"\nc:\nd: []\ne: {}\n",
    'nul: "x\\0y"\nescapes: "\\e\\N\\_\\L\\P\\a"\n',
    "long: " + "x" * 100_000 + "\nquoted: '" + "y" * 70_000 + "'\n",
)


@pytest.mark.parametrize("text", _MULTILINE)
def test_multi_line_folded_unicode_and_line_endings_read_alike(tmp_path: pathlib.Path, text: str) -> None:
    assert assert_read_alike(tmp_path / "m.yaml", text) is not None


_HANDED_BACK = {
    "anchor": "a: &x 1\nb: c\n",
    "alias": "a: &x {y: 1}\nb: *x\n",
    "merge key": "base: {x: 1}\nc: {<<: {x: 2}, y: 3}\n",
    "explicit tag": "a: !!str 5\n",
    "local tag": "a: !thing 5\n",
    "non-specific tag": "a: ! 5\n",
    "tagged collection": "a: !!map {b: 1}\n",
    "key written twice": "a: 1\nb: 2\na: 3\n",
    "keys equal once built": "1: a\n1.0: b\n",
    "bool and int key": "yes: a\n1: b\n",
    "collection key": "? [a]\n: b\n",
    "mapping key": "? {a: 1}\n: b\n",
    "value tag": "a: =\n",
    "merge as value": "a: <<\n",
    "explicit key in a flow sequence": "a: [? b]\n",
    "pair in a flow sequence": "a: [b: c]\n",
    "nested deeper than the reader goes": "a: " + "[" * 120 + "]" * 120 + "\n",
    "recursive alias": "a: &m {self: *m}\n",
    "undefined alias": "a: *nowhere\n",
}


@pytest.mark.parametrize("text", _HANDED_BACK.values(), ids=_HANDED_BACK.keys())
def test_every_unusual_document_is_handed_back_and_reads_alike(tmp_path: pathlib.Path, text: str) -> None:
    plain = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"
    documents = compiled_documents(f"{plain}---\n{text}---\n{plain}", MOST)
    assert documents is not None
    assert [value is NOT_PLAIN for _, value in documents] == [False, True, False]
    assert [line for line, _ in documents] == [0, 4, 5 + text.count("\n")]
    assert_read_alike(tmp_path / "u.yaml", f"{plain}---\n{text}---\n{plain}")


_WHOLE_FILE_BACK = {
    "version directive": "%YAML 1.1\n---\na: 1\n",
    "tag directive": "%TAG !e! tag:example.com,2000:\n---\na: !e!x 1\n",
    "unclosed flow": "a: 1\n---\nb: [\n",
    "tab indentation": "a:\n\tb: 1\n",
    "control character": "a: \x07\n",
    "empty explicit key in a flow sequence": "a: [? ]\n",  # libyaml 0.2.5 refuses it, the newer one reads it
    "closing bracket after an explicit key": "a: [? ]]\n",  # and the other way round
    "nesting beyond libyaml's limit in PyYAML": "a: " + "[" * 1100 + "]" * 1100 + "\n",
    "two documents in one chunk": "a: 1\n...\nb: 2\n",
    "two documents in one chunk, the second refused": "a: 1\n...\nb: 2\nb: 3\n",
    "a handed-back document in a chunk taken": "a: 1\n...\nb: &x 2\n",
}


@pytest.mark.parametrize("text", _WHOLE_FILE_BACK.values(), ids=_WHOLE_FILE_BACK.keys())
def test_a_stream_with_a_directive_or_an_error_reads_alike(tmp_path: pathlib.Path, text: str) -> None:
    assert_read_alike(tmp_path / "w.yaml", text)


def test_nesting_up_to_the_limit_is_read_and_beyond_it_handed_back(tmp_path: pathlib.Path) -> None:
    """Up to engine.yaml11.MAX_NESTING the compiled reader builds the document; beyond, the Python reader refuses it
    (read alike: refused alike)."""
    for depth, plain in ((99, True), (100, True), (101, False)):
        text = "[" * depth + "x" + "]" * depth + "\n"
        documents = compiled_documents(text, MOST)
        assert documents is not None and (documents[0][1] is not NOT_PLAIN) == plain, depth
        assert_read_alike(tmp_path / "deep.yaml", text)
    block = "".join("  " * level + f"k{level}:\n" for level in range(300)) + "  " * 300 + "leaf\n"
    assert_read_alike(tmp_path / "deep.yaml", block)


def test_empty_and_null_documents_are_left_out_as_the_python_reader_skips_them(tmp_path: pathlib.Path) -> None:
    for text in ("", "---\n", "~\n", "null\n---\n", "# only\n", "a: 1\n...\n---\nb: 2\n", "---\n--- ~\n---\nc: 1\n"):
        documents = compiled_documents(text, MOST)
        assert documents is not None and all(value is not None for _, value in documents), text
        assert_read_alike(tmp_path / "e.yaml", text)


def test_more_documents_than_the_limit_leave_the_stream_to_the_python_reader(tmp_path: pathlib.Path) -> None:
    """The caller's limit is the number of chunks: one document more means two in one chunk, which the Python
    reader reads chunk by chunk, so the compiled reader stops there and holds no more documents than chunks."""
    assert compiled_documents("a\n---\nb\n---\nc\n", 3) == [(0, "a"), (2, "b"), (4, "c")]
    assert compiled_documents("a\n---\nb\n---\nc\n", 2) is None
    assert compiled_documents("~\n---\n~\n---\nc\n", 1) == [(4, "c")]  # null documents are not counted
    assert_read_alike(tmp_path / "many.yaml", "---\na: 1\n" * 5000)


@bounded(60)
@given(yaml_streams())
def test_hostile_streams_read_alike(tmp_path_factory: pytest.TempPathFactory, stream: tuple[str, list[str]]) -> None:
    assert_read_alike(tmp_path_factory.mktemp("yaml") / "hostile.yaml", stream[0])


_SCALARS = st.one_of(
    st.tuples(
        st.just("scalar"),
        st.one_of(st.sampled_from(EDGE_SCALARS), st.text(st.sampled_from("ab0123456789.:-+_eExyYnN~ é"), max_size=8)),
        st.sampled_from(["plain", "plain", "single", "double"]),
    ),
    # any printable text, quoted (YAML refuses control characters written as they are)
    st.tuples(
        st.just("scalar"),
        st.text(st.characters(exclude_categories=["Cc", "Cs"]), max_size=6),
        st.sampled_from(["single", "double"]),
    ),
)
_TREES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.tuples(st.just("seq"), st.lists(children, max_size=4), st.booleans()),
        st.tuples(st.just("map"), st.lists(st.tuples(_SCALARS, children), max_size=4), st.booleans()),
    ),
    max_leaves=25,
)


def _scalar(text: str, style: str) -> str:
    if style == "single":
        return "'" + text.replace("'", "''") + "'"
    if style == "double":
        return json.dumps(text, ensure_ascii=False)
    return text


def _flow(tree: Any) -> str:
    if tree[0] == "scalar":
        return _scalar(tree[1], tree[2])
    if tree[0] == "seq":
        return "[" + ", ".join(_flow(item) for item in tree[1]) + "]"
    return "{" + ", ".join(f"{_flow(key)}: {_flow(value)}" for key, value in tree[1]) + "}"


def _block(tree: Any, indent: int) -> str:
    """``tree`` in block style at ``indent`` (flow style where the tree asks for it), ending with a line break."""
    pad = " " * indent
    if tree[0] == "scalar" or tree[2] or not tree[1]:
        return " " + _flow(tree) + "\n"
    if tree[0] == "seq":
        return "\n" + "".join(f"{pad}-{_block(item, indent + 2)}" for item in tree[1])
    return "\n" + "".join(f"{pad}{_flow(key)}:{_block(value, indent + 2)}" for key, value in tree[1])


@bounded(300)
@given(st.lists(_TREES, min_size=1, max_size=4), st.sampled_from(["\n", "\r\n"]))
def test_generated_documents_in_random_styles_read_alike(
    tmp_path_factory: pytest.TempPathFactory, trees: list[Any], newline: str
) -> None:
    documents = [("root:" + _block(tree, 2)) for tree in trees]
    text = "---\n".join(documents).replace("\n", newline)
    assert_read_alike(tmp_path_factory.mktemp("yaml") / "generated.yaml", text)


def _extension() -> Any:
    import importlib

    return importlib.import_module("_modelplane_yaml")


def test_the_c_module_refuses_bad_arguments_and_passes_errors_on() -> None:
    read = _extension().read_documents
    table = bytes([1] * 256)
    with pytest.raises(TypeError):
        read(b"a: 1", str, table, NOT_PLAIN, 100)
    with pytest.raises(TypeError):
        read("a: 1", "not callable", table, NOT_PLAIN, 100)
    with pytest.raises(ValueError, match="256"):
        read("a: 1", str, b"short", NOT_PLAIN, 100)
    with pytest.raises(TypeError):
        read("a: 1", str, table, NOT_PLAIN)
    with pytest.raises(TypeError):
        read("a: 1", str, table, NOT_PLAIN, "many")

    def fails(value: str) -> Any:
        raise KeyboardInterrupt(value)

    with pytest.raises(KeyboardInterrupt):
        read("a: [1, {b: 2}]\n", fails, table, NOT_PLAIN, 100)
    assert read("[1, 2]\n", lambda value: [value], table, NOT_PLAIN, 100) == [(0, [["1"], ["2"]])]
    # an unhashable key from the resolver: handed back, not an error
    assert read("1: a\n", lambda value: [value], table, NOT_PLAIN, 100) == [(0, NOT_PLAIN)]
    assert read("a: 1\n", lambda value: [value], bytes(256), NOT_PLAIN, 100) == [(0, {"a": "1"})]
    assert read("a: \ud800\n", str, table, NOT_PLAIN, 100) is None  # no UTF-8: the Python reader reports it


def test_reading_again_and_again_leaks_nothing() -> None:
    """Every path (plain, handed back part way through a collection, a stream error, a resolver error) releases
    what it built: neither the marker's references nor the interpreter's allocated blocks grow with the calls."""
    read = _extension().read_documents
    table = bytes([1] * 256)
    texts = [
        "a: {b: [1, 2, {c: yes}]}\nd: x\n",
        *_HANDED_BACK.values(),
        *_WHOLE_FILE_BACK.values(),
        "a: [1, {b: 2, c: [x, y]}, z]\nb: !!str q\n",
        "x: 1\n---\ny: 2\n---\n",
    ]

    def fails(value: str) -> Any:
        raise KeyboardInterrupt(value)

    def once() -> None:
        for text in texts:
            read(text, yamlcompiled.plain_scalar, yamlcompiled._RESOLVABLE, NOT_PLAIN, 100)
        for text in [texts[0], *_HANDED_BACK.values()]:
            try:
                read(text + "---\nz: 5\n", fails, table, NOT_PLAIN, 100)
            except KeyboardInterrupt:  # at the scalar after it at the latest
                continue
            raise AssertionError(f"the resolver's error was not passed on: {text!r}")

    once()
    gc.collect()
    references, blocks = sys.getrefcount(NOT_PLAIN), sys.getallocatedblocks()
    for _ in range(200):
        once()
    gc.collect()
    assert sys.getrefcount(NOT_PLAIN) == references
    # One object leaked per call would be about 10,000 blocks (200 rounds of some 50 calls); the test process's other
    # threads (an xdist worker's) allocate a few dozen meanwhile (90 seen once in CI).
    assert sys.getallocatedblocks() - blocks < 1000


def test_the_python_reader_is_chosen_with_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert yamlcompiled.reader().startswith("compiled (libyaml ")
    assert compiled_documents("a: 1\n", MOST) == [(0, {"a": 1})]
    monkeypatch.setenv(READER_VARIABLE, "python")
    assert yamlcompiled.reader() == f"Python (PyYAML; {READER_VARIABLE}=python)"
    assert compiled_documents("a: 1\n", MOST) is None


def test_the_compiled_reader_is_not_used_with_a_pyyaml_without_libyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML's own parser (in Python) differs from libyaml's in odd documents: without libyaml in PyYAML the
    compiled reader could not read exactly as the Python reader does."""
    import yaml

    assert yamlcompiled._load_extension()[0] is not None
    monkeypatch.delattr(yaml, "CSafeLoader")
    assert yamlcompiled._load_extension() == (None, "PyYAML has no libyaml here")
