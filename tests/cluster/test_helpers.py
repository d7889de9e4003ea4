"""Unit tests of the shared helpers: merge-patch, label selectors, YAML chunking, retries, resources."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from tasks.clients.cluster import (
    Conflict,
    Invalid,
    NotFound,
    ObjectRef,
    Unavailable,
    retry_on_conflict,
    retry_unavailable,
)
from tasks.clients.cluster.objects import merge_patch, parse_selector, selector_matches
from tasks.clients.cluster.resources import ResourceInfo, lookup, register, resource_for
from tasks.clients.cluster.retry import exponential_backoff
from tasks.clients.cluster.yamlfile import read_file, split_documents


def test_merge_patch_follows_rfc7386() -> None:
    target = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}
    patch = {"a": None, "b": {"c": 5, "x": {"y": 1}}, "e": [3]}
    assert merge_patch(target, patch) == {"b": {"c": 5, "d": 3, "x": {"y": 1}}, "e": [3]}
    assert target == {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}  # inputs untouched
    assert merge_patch({"a": 1}, {"a": {"b": None}}) == {"a": {}}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {}, True),
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a!=1", {"a": "1"}, False),
        ("a in (1, 2),b", {"a": "2", "b": ""}, True),
        ("a notin (1,2)", {"a": "3"}, True),
        ("a notin (1,2)", {}, True),
        ("a in (1,2)", {}, False),
        ("!a", {"a": "x"}, False),
        ("app.kubernetes.io/name=vllm, !llm-d.ai/skip", {"app.kubernetes.io/name": "vllm"}, True),
        ("a=", {"a": ""}, True),
    ],
)
def test_label_selector_semantics(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(parse_selector(selector), labels) is expected


@pytest.mark.parametrize("bad", ["a in (1", "a = = b", "in (1)", "a notin", "(x)"])
def test_bad_label_selectors_are_invalid(bad: str) -> None:
    with pytest.raises(Invalid) as info:
        parse_selector(bad)
    assert info.value.field == "labelSelector"


def test_split_documents_keeps_every_byte() -> None:
    text = "# lead\na: 1\n---\nb: 2\n--- # trailing comment\nc: 3\n---\n"
    chunks = split_documents(text)
    assert "".join(c for c, _ in chunks) == text
    assert [m for _, m in chunks] == [False, True, True, True]


@pytest.mark.usefixtures("yaml_reader")
def test_yaml_errors_name_the_file_but_quote_no_content(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("kind: Secret\nstringData:\n  token: hunter2: [\n")
    loaded = read_file(path)
    assert loaded.error is None and len(loaded.doc_errors) == 1
    message = loaded.doc_errors[0]
    assert "secret.yaml" in message and "line 3" in message
    assert "hunter2" not in message and "hunter2" not in (loaded.writable_error or "")


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("kind: ConfigMap\ndata:\n  a: '1'\n  a: '2'\n", 4, "duplicate key 'a'"),
        ("kind: ConfigMap\nmetadata:\n  annotations: &r {x: *r}\n", 3, "recursive alias"),
        ("kind: ConfigMap\ndata: &l [1, [*l]]\n", 2, "recursive alias"),
    ],
)
@pytest.mark.usefixtures("yaml_reader")
def test_duplicate_keys_and_recursive_aliases_are_refused_with_file_and_line(
    tmp_path: Path, text: str, line: int, problem: str
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text("kind: Namespace\nmetadata: {name: ok}\n---\n" + text)
    loaded = read_file(path)
    assert [d.data["kind"] for d in loaded.docs if d.data] == ["Namespace"]  # the valid document still loads
    (message,) = loaded.doc_errors
    assert f"hostile.yaml: document at line 4: invalid YAML at line {line + 3}" in message and problem in message


@pytest.mark.usefixtures("yaml_reader")
def test_shared_aliases_and_merge_keys_still_load(tmp_path: Path) -> None:
    path = tmp_path / "aliases.yaml"
    path.write_text("a: &x {y: 1}\nb: *x\nc: {<<: *x, z: 2}\nd: [*x, *x]\n")
    (doc,) = read_file(path).docs
    assert doc.data == {"a": {"y": 1}, "b": {"y": 1}, "c": {"y": 1, "z": 2}, "d": [{"y": 1}, {"y": 1}]}


def test_a_file_beyond_the_size_limits_is_refused_whole_before_parsing(tmp_path: Path) -> None:
    from tasks.clients.cluster import yamlfile

    many = tmp_path / "many.yaml"
    many.write_text(
        "---\n".join(f"kind: ConfigMap\nmetadata: {{name: c{i}}}\n" for i in range(yamlfile.MAX_DOCUMENTS_PER_FILE + 1))
    )
    loaded = read_file(many)
    assert loaded.docs == [] and loaded.error is not None
    assert f"many.yaml: {yamlfile.MAX_DOCUMENTS_PER_FILE + 1} documents, more than the" in loaded.error
    assert loaded.writable_error == loaded.error  # never written either
    big = tmp_path / "big.yaml"
    with big.open("w") as handle:
        handle.truncate(yamlfile.MAX_FILE_BYTES + 1)
    loaded = read_file(big)
    assert loaded.error is not None and f"big.yaml: {yamlfile.MAX_FILE_BYTES + 1} bytes, more than the" in loaded.error


def test_resource_table() -> None:
    deploy = resource_for("apps/v1", "Deployment")
    assert (deploy.plural, deploy.has_status, deploy.has_scale) == ("deployments", True, True)
    assert deploy.path("ns", "d", "scale") == "/apis/apps/v1/namespaces/ns/deployments/d/scale"
    assert resource_for("v1", "Namespace").path(None, "x") == "/api/v1/namespaces/x"
    om = resource_for("llmaz.io/v1alpha1", "OpenModel")
    assert not om.namespaced and om.path("ignored", "m") == "/apis/llmaz.io/v1alpha1/openmodels/m"
    assert not resource_for("aim.silogen.ai/v1alpha1", "AIMNamespaceConfig").has_status
    with pytest.raises(NotFound, match="Gizmo"):
        resource_for("example.com/v1", "Gizmo")
    register(ResourceInfo("example.com", "v1", "Gizmo", "gizmos", has_scale=True))
    assert lookup("example.com/v1", "Gizmo").plural == "gizmos"


class FlakyCluster:
    """Just enough of a cluster for retry tests: every write conflicts ``conflicts`` times."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts = conflicts
        self.reads = 0
        self.writes: list[tuple[str, dict, str | None]] = []

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        self.reads += 1
        return {"metadata": {"name": name, "resourceVersion": str(self.reads)}, "spec": {"n": self.reads}}

    def _write(self, how: str, body: dict, rv: str | None) -> dict:
        self.writes.append((how, body, rv))
        if self.conflicts:
            self.conflicts -= 1
            raise Conflict("stale")
        return {"metadata": {"resourceVersion": "done"}, how: body}

    def patch_status(self, ref: ObjectRef, status: dict, resource_version: str | None = None) -> dict:
        return self._write("status", status, resource_version)

    def patch_spec(self, ref: ObjectRef, patch: dict, resource_version: str | None = None) -> dict:
        return self._write("spec", patch, resource_version)


REF = ObjectRef("v1", "ConfigMap", "c", "ns")


def test_retry_on_conflict_rereads_and_uses_fresh_versions() -> None:
    cluster = FlakyCluster(conflicts=2)
    delays: list[float] = []
    result = retry_on_conflict(cluster, REF, lambda o: {"seen": o["spec"]["n"]}, write="spec", sleep=delays.append)
    assert [(how, body["seen"], rv) for how, body, rv in cluster.writes] == [
        ("spec", 1, "1"),
        ("spec", 2, "2"),
        ("spec", 3, "3"),
    ]
    assert result["spec"] == {"seen": 3} and len(delays) == 2


def test_retry_on_conflict_validates_arguments() -> None:
    with pytest.raises(ValueError):
        retry_on_conflict(FlakyCluster(0), REF, lambda o: {}, attempts=0)
    with pytest.raises(ValueError):
        retry_on_conflict(FlakyCluster(0), REF, lambda o: {}, write="metadata")  # type: ignore[arg-type]


def test_retry_unavailable() -> None:
    failures = iter([Unavailable("down"), Unavailable("still down")])
    delays: list[float] = []

    def call() -> str:
        error = next(failures, None)
        if error:
            raise error
        return "up"

    assert retry_unavailable(call, attempts=3, base_delay=0.1, sleep=delays.append) == "up"
    assert len(delays) == 2 and delays[1] > delays[0] > 0

    def always() -> None:
        raise Unavailable("down")

    with pytest.raises(Unavailable):
        retry_unavailable(always, attempts=2, base_delay=0, sleep=lambda _: None)

    calls: list[int] = []

    def not_transient() -> None:
        calls.append(1)
        raise NotFound("gone")

    with pytest.raises(NotFound):
        retry_unavailable(not_transient, attempts=5, sleep=lambda _: None)
    assert calls == [1]


def test_retry_jitter_leaves_the_global_random_state_as_it_was() -> None:
    """A retry in a watch or worker thread must not draw from the process's global generator: a caller may have
    seeded it, and Hypothesis reports a strategy that uses it when another thread moves it mid-draw."""
    state = random.getstate()
    delay = exponential_backoff(base=0.1, cap=1.0, jitter=0.5)
    delays = [delay(attempt) for attempt in range(1, 8) for _ in range(20)]
    assert random.getstate() == state
    assert all(0.05 <= d <= 1.5 for d in delays) and len(set(delays)) > 100  # within +/- 50 %, and jittered


@pytest.mark.usefixtures("yaml_reader")
def test_streams_the_splitter_cannot_cut_still_load(tmp_path: Path) -> None:
    path = tmp_path / "directive.yaml"
    path.write_text("%YAML 1.1\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    loaded = read_file(path)
    assert loaded.error is None
    assert [d.data["metadata"]["name"] for d in loaded.docs if d.data] == ["a"]


def test_a_file_is_parsed_by_one_parser_and_each_chunk_gets_its_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, yaml_reader: str
) -> None:
    """One parser for the whole file (a parser per document cost more than the parsing; the compiled reader's own
    when it reads), every chunk still given its own document: comments before the first marker, empty documents
    and a trailing marker included."""
    from tasks.clients.cluster import yamlfile

    made: list[int] = []

    class Counting(yamlfile.Loader):  # type: ignore[misc, valid-type]
        def __init__(self, stream: str) -> None:
            made.append(1)
            super().__init__(stream)

    monkeypatch.setattr(yamlfile, "Loader", Counting)
    text = "# lead comment\n---\na: 1\n---\n# only a comment\n---\n---\nb: [x, {c: 2}]\n--- {d: 3}\n---\n"
    path = tmp_path / "many.yaml"
    path.write_text(text + "".join(f"---\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n" for i in range(200)))
    loaded = read_file(path)
    assert made == ([1] if yaml_reader == "python" else [])
    assert [d.data for d in loaded.docs[:7]] == [None, {"a": 1}, None, None, {"b": ["x", {"c": 2}]}, {"d": 3}, None]
    assert [d.line for d in loaded.docs[:7]] == [1, 2, 4, 6, 7, 9, 10]
    assert [d.data["metadata"]["name"] for d in loaded.docs[7:]] == [f"c{i}" for i in range(200)]
    assert "".join(d.render() for d in loaded.docs) == path.read_text()


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\n---\nnull\n---\nb: 2\n",  # an explicit null document: no node to place, chunk by chunk
        "a: 1\n...\n---\nb: 2\n",  # a document end marker
        "a: 1\n---\nb: [\n---\nc: 3\n",  # a malformed document between two valid ones
    ],
)
@pytest.mark.usefixtures("yaml_reader")
def test_streams_one_parser_cannot_place_are_read_chunk_by_chunk(tmp_path: Path, text: str) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    loaded = read_file(path)
    expected = []
    for chunk, _ in split_documents(text):
        try:
            expected.append(yaml.load(chunk, Loader=yaml.SafeLoader))  # noqa: S506 - the safe loader
        except yaml.YAMLError:
            expected.append(None)
    assert [d.data for d in loaded.docs] == expected
    assert len(loaded.doc_errors) == ("[\n" in text)
