"""Reading manifest files fast without reading them differently (tasks/clients/cluster/yamlfile.py, yamlload.py).

A file is cut at its ``---`` lines by one search of the whole text, and a document without anchors is built by
one recursion (``construct_tree``): both must give what the line-by-line split and PyYAML's own constructor give,
and every document either of them refuses (a key written twice, a recursive alias) must still be refused with
its file and line. A document with anchors is built with each shared node built once, and one whose aliases
expand it far beyond the nodes written (an alias bomb) is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tasks.clients.cluster import yamlfile
from tasks.clients.cluster.yamlfile import read_file
from tasks.clients.cluster.yamlload import Loader, construct_tree, load_text

pytestmark = pytest.mark.usefixtures("yaml_reader")  # every file read by each reader

_TEXTS = [
    "",
    "a: 1\n",
    "---\n",
    "---",
    "a: 1\n---\nb: 2\n--- # trailing comment\nc: 3\n---\n",
    "---\ta: 1\n--- x\n---x\n----\n ---\n-- -\n---",
    "# lead\n\n---\n\n---\n",
    "a: 1\r\n---\r\nb: 2\r\n",
    "a: 1\r---\rb: 2\r",
    "a: 1\n---\x85b: 2\n---\u2028c: 3\n",
    "a: é\n---\nb: ü\n",
]


@pytest.mark.parametrize("text", _TEXTS)
def test_the_split_by_one_search_is_the_split_line_by_line(text: str) -> None:
    assert yamlfile._split(text) == yamlfile._split_lines(text)
    assert "".join(chunk for chunk, _ in yamlfile.split_documents(text)) == text


_PLAIN_DOCUMENTS = [
    "a: yes\nb: no\nc: on\nd: off\ne: true\nf: False\n",
    "octal: 0755\nhex: 0x1F\nbinary: 0b101\nsexagesimal: 1:30\nunderscored: 1_000\nsigned: -12\n",
    "f: 1.5\ng: .inf\nh: -.Inf\ni: 6.8523015e+5\nj: 190:20:30.15\n",
    "n: ~\no: null\np:\nq: ''\nr: 'yes'\ns: \"0755\"\n",
    "when: 2024-01-01T00:00:00Z\nday: 2024-01-01\n",
    "1: int key\n2.5: float key\nfalse: bool key\n~: null key\n",
    "list: [1, two, 3.0, null, [nested, {deep: true}]]\nblock: |\n  text\n  more\nfolded: >\n  a\n  b\n",
    "!!str 5: !!int '7'\nexplicit: !!float '1'\n",
]


@pytest.mark.parametrize("text", _PLAIN_DOCUMENTS)
def test_a_document_without_anchors_is_built_as_pyyamls_constructor_builds_it(text: str) -> None:
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        expected = yaml.constructor.SafeConstructor.construct_document(loader, node)
        assert construct_tree(node) == expected
        assert loader.construct_document(node) == expected
    finally:
        loader.dispose()
    assert load_text(text) == expected


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("a: 1\nb:\n  yes: x\n  true: y\n", 4, "duplicate key 'true'"),  # two spellings of one key
        ("a: 1\nb:\n  1: x\n  1.0: y\n", 4, "duplicate key '1.0'"),
        ("a:\n- {x: 1, x: 2}\n", 2, "duplicate key 'x'"),
    ],
)
def test_keys_equal_once_built_are_refused_at_the_second_one(text: str, line: int, problem: str) -> None:
    with pytest.raises(yaml.constructor.ConstructorError) as info:
        load_text(text)
    assert info.value.problem_mark is not None and info.value.problem_mark.line + 1 == line
    assert info.value.problem == f"{problem} (the last value would silently win)"


def test_an_alias_bomb_is_refused_and_modest_sharing_is_built_with_each_shared_node_once(tmp_path: Path) -> None:
    """Nine levels of nine aliases: 387 million leaves once expanded. Loading shares each level, but every
    comparison, copy or JSON encoding of the value walks them all (a write to the folder hung on a 749-byte file):
    the document is refused, naming the expansion. Three levels (729 leaves) are read, each level built once."""

    def aliased(depth: int) -> str:
        levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
        levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, depth)]
        return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\n" + "\n".join(levels) + "\n"

    bomb, shared = tmp_path / "bomb.yaml", tmp_path / "shared.yaml"
    bomb.write_text(aliased(9))
    shared.write_text(aliased(3))
    refused = read_file(bomb)
    assert [doc.data for doc in refused.docs] == [None]
    (problem,) = refused.doc_errors
    assert "line 1" in problem and "excessive aliasing" in problem and "expand to 490329072" in problem
    (doc,) = read_file(shared).docs
    top: list[Any] = doc.data["l2"]
    assert len(top) == 9 and all(item is doc.data["l1"] for item in top)
    assert doc.data["l1"][0] is doc.data["l0"]


def test_flow_collections_nested_past_the_limit_are_refused_before_parsing(tmp_path: Path) -> None:
    """100 KB of ``[`` took 12 s to be refused by the YAML readers (scanning grows with the square of the
    brackets); the file is now refused whole, naming the depth, before any parse. Below that, a document nested
    deeper than 100 levels (which copy.deepcopy and == could not walk at 450 and 990) is refused at its line; the
    other documents of the file and a document 100 deep are read."""
    head = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata:\n  x: "
    deep, fine = tmp_path / "deep.yaml", tmp_path / "fine.yaml"
    deep.write_text(head + "[" * 50_000 + "]" * 50_000 + "\n")
    refused = read_file(deep)
    assert refused.error is not None and "nested 50000 deep, more than the 1000 levels" in refused.error
    assert refused.docs == []
    ok = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {}\nspec: {}\n"
    for depth in (99, 100, 900):  # the root mapping is one level
        fine.write_text(ok.format("first", 1) + "---\n" + ok.format("nested", "[" * depth + "]" * depth))
        read = read_file(fine)
        assert read.error is None and read.docs[0].data["metadata"]["name"] == "first"
        if depth < 100:
            assert read.doc_errors == [] and read.docs[1].data["metadata"]["name"] == "nested"
        else:
            (problem,) = read.doc_errors
            assert "document at line 7" in problem and "nested more than 100 levels deep" in problem, problem
    assert yamlfile.flow_depth("a: '[[['\nb: [1, {c: [2]}]") == 6  # quoted brackets count: never less than YAML's


def test_a_key_written_twice_and_a_recursive_alias_are_refused_with_their_lines_among_valid_documents(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata:\n  k: '1'\n  k: '2'\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: &m {name: c, self: *m}\n"
        "---\n- a list\n---\njust a string\n"
    )
    loaded = read_file(path)
    assert [doc.data for doc in loaded.docs][3:] == [["a list"], "just a string"]
    assert loaded.docs[0].data["metadata"]["name"] == "a" and loaded.docs[1].data is None
    assert loaded.doc_errors == [
        f"{path}: document at line 5: invalid YAML at line 10, column 3: duplicate key 'k' (the last value would "
        "silently win)",
        f"{path}: document at line 12: invalid YAML at line 14, column 11: recursive alias: a node refers to itself "
        "(not representable as JSON)",
    ]


def test_a_tagged_value_its_constructor_refuses_and_aliased_long_text_are_refused_at_their_lines(
    tmp_path: Path,
) -> None:
    """``!!bool maybe`` raised KeyError out of PyYAML (every command ended in a traceback, exit 1), and 20,000
    aliases of one 64 KiB string passed the node count, to take 3-6 GB in the first JSON encoding of the object.
    Each is refused at its line; the other documents are read."""
    path = tmp_path / "tags.yaml"
    config = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {}}}\ndata: {}\n"
    shared = "{s: &s " + "x" * 65_536 + ", l: [" + ", ".join(["*s"] * 600) + "]}"
    path.write_text("".join(config.format(n, d) for n, d in [("a", "{}"), ("b", "{x: !!bool maybe}"), ("c", shared)]))
    loaded = read_file(path)
    assert loaded.docs[0].data["metadata"]["name"] == "a" and [d.data for d in loaded.docs[1:]] == [None, None]
    assert loaded.doc_errors == [
        f"{path}: document at line 7: invalid YAML at line 10, column 11: cannot read 'maybe' as "
        "tag:yaml.org,2002:bool (KeyError)",
        f"{path}: document at line 12: invalid YAML at line 12, column 1: excessive aliasing: 65580 bytes of text "
        "written expand to 39387180 (a document may expand to 33,554,432 bytes, or to ten times the text written "
        "when that is more)",
    ]


def test_a_number_pattern_that_is_no_number_is_read_as_a_string(tmp_path: Path) -> None:
    """``0b_`` and ``0x_`` match PyYAML's int pattern, and its constructor raised ValueError on them (a traceback
    out of validate-manifests); the Kubernetes reader reads them as strings, plain or anchored; numbers stay
    numbers."""
    path = tmp_path / "numbers.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
        "data: {b: 0b_, x: -0x_, n: 0b101, h: 0x1F, o: 0755, s: 1:30, u: 1_000, f: .5}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata: {b: &v +0b_, again: *v}\n"
    )
    loaded = read_file(path)
    assert loaded.doc_errors == []
    assert loaded.docs[0].data["data"] == {
        "b": "0b_",
        "x": "-0x_",
        "n": 5,
        "h": 31,
        "o": 493,
        "s": 90,
        "u": 1000,
        "f": 0.5,
    }
    assert loaded.docs[1].data["data"] == {"b": "+0b_", "again": "+0b_"}
