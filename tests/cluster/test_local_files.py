"""What the local backend does to the files people wrote: only the written fields change.

Format-preserving writes (every example file through a status write diffs only in its status
lines), ``kind: List`` snapshots (only the written item changes), malformed documents (reported with
file and line, their valid neighbours load, their file is never written), symlinked manifests
(written through the link), resourceVersions that stay monotonic across processes and deletes, and entries that
cannot be read (a symbolic link loop, a named pipe, a device: reported, never opened; a directory reached twice is
read once).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tasks.clients.cluster import Conflict, Forbidden, Invalid, LocalCluster, ObjectRef
from tasks.clients.cluster.resources import lookup

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "examples"
VA = ("llmd.ai/v1alpha1", "VariantAutoscaling")

_STATUS = re.compile(r"^status:")


def without_status_blocks(text: str) -> list[str]:
    """The lines of a manifest file with every top-level ``status:`` block left out."""
    kept, inside = [], False
    for line in text.splitlines():
        if _STATUS.match(line):
            inside = True
            continue
        if inside and (line.startswith((" ", "- ")) or not line.strip()):
            continue
        inside = False
        kept.append(line)
    return kept


def status_for(obj: dict) -> dict:
    """A valid status write for any kind of the examples."""
    info = lookup(obj["apiVersion"], obj["kind"])
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "RoundTrip",
        "message": "written by the test",
        "lastTransitionTime": "2025-01-02T03:04:05Z",
    }
    if info is not None and info.group in ("llmd.ai", "registry.volcano.sh", "aim.silogen.ai", "llmaz.io"):
        return {"conditions": [condition]}
    return {"observedGeneration": 1}


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_example_file_round_trips_a_status_write(tmp_path: Path, name: str) -> None:
    source = EXAMPLES / name
    path = tmp_path / name
    shutil.copy(source, path)
    cluster = LocalCluster(path)
    written = 0
    for doc in yaml.safe_load_all(source.read_text()):
        if not isinstance(doc, dict) or "kind" not in doc:
            continue
        info = lookup(doc["apiVersion"], doc["kind"])
        if info is None or not info.has_status:
            continue
        ref = ObjectRef(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace"))
        cluster.patch_status(ref, status_for(doc))
        written += 1
    before, after = source.read_text(), path.read_text()
    if written:
        assert after != before
    diff = "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm=""))
    assert without_status_blocks(after) == without_status_blocks(before), diff
    reread = LocalCluster(path)
    assert not reread.load_errors


LIST_SNAPSHOT = """\
apiVersion: v1
kind: List
items:
# the secret keeps stringData as written
- apiVersion: v1
  kind: Secret
  metadata:
    name: hf-token
    namespace: llm-serving
  stringData:
    token: "placeholder"   # not a real token
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: llama
    namespace: llm-serving
  spec:
    selector:
      matchLabels: {app: llama}
    template:
      metadata:
        labels: {app: llama}
      spec:
        containers:
        - name: vllm
          image: vllm/vllm-openai:v0.10.1
- apiVersion: llmd.ai/v1alpha1
  kind: VariantAutoscaling
  metadata:
    name: llama-a100
    namespace: llm-serving
  spec:
    modelID: meta/llama-3.1-8b   # the model served
metadata:
  resourceVersion: ""
"""


def test_list_snapshot_write_changes_only_the_written_item(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    path.write_text(LIST_SNAPSHOT)
    cluster = LocalCluster(path)
    assert cluster.get("v1", "Secret", "hf-token", "llm-serving")["data"]  # folded in memory
    cluster.patch_status(ObjectRef(*VA, "llama-a100", "llm-serving"), {"actuation": {"applied": True}})
    after = path.read_text()
    assert after == LIST_SNAPSHOT.replace(
        "    modelID: meta/llama-3.1-8b   # the model served\n",
        "    modelID: meta/llama-3.1-8b   # the model served\n  status:\n    actuation:\n      applied: true\n",
    ), after
    cluster.set_scale(ObjectRef("apps/v1", "Deployment", "llama", "llm-serving"), 3)
    assert "replicas: 3" in path.read_text() and "stringData" in path.read_text()
    assert LocalCluster(path).get_scale(ObjectRef("apps/v1", "Deployment", "llama", "llm-serving")).replicas == 3


MALFORMED = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: good-before, namespace: ns}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: [unclosed
---
apiVersion: v1
kind: ConfigMap
metadata: {name: good-after, namespace: ns}
"""


def test_malformed_document_hides_no_neighbour_and_blocks_writes(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(MALFORMED)
    (tmp_path / "other.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: elsewhere, namespace: ns}\n"
    )
    cluster = LocalCluster(tmp_path)
    names = [c["metadata"]["name"] for c in cluster.list("v1", "ConfigMap", "ns")]
    assert names == ["elsewhere", "good-after", "good-before"]
    assert len(cluster.load_errors) == 1
    assert "mixed.yaml: document at line 5" in cluster.load_errors[0].message
    with pytest.raises(Conflict):  # not a duplicate file
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good-after", "namespace": "ns"}})
    with pytest.raises(Invalid, match=r"mixed\.yaml: document at line 5"):
        cluster.patch_spec(ObjectRef("v1", "ConfigMap", "good-before", "ns"), {"data": {"k": "v"}})
    with pytest.raises(Invalid, match="mixed.yaml"):
        cluster.delete(ObjectRef("v1", "ConfigMap", "good-after", "ns"))
    assert path.read_text() == MALFORMED
    assert sorted(p.name for p in tmp_path.rglob("*.yaml")) == ["mixed.yaml", "other.yaml"]
    cluster.patch_spec(ObjectRef("v1", "ConfigMap", "elsewhere", "ns"), {"data": {"k": "v"}})  # other files fine


def test_symlinked_manifest_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "shared" / "va.yaml"
    real.parent.mkdir()
    real.write_text(
        "apiVersion: llmd.ai/v1alpha1\nkind: VariantAutoscaling\nmetadata:\n  name: v\n  namespace: ns\nspec:\n  modelID: m\n"
    )
    state = tmp_path / "state"
    state.mkdir()
    link = state / "va.yaml"
    link.symlink_to(real)
    LocalCluster(state).patch_status(ObjectRef(*VA, "v", "ns"), {"actuation": {"applied": True}})
    assert link.is_symlink()
    assert "applied: true" in real.read_text()


def test_resource_versions_stay_monotonic_across_processes_and_deletes(tmp_path: Path) -> None:
    first = LocalCluster(tmp_path)
    created = first.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone", "namespace": "ns"}})
    first.delete(ObjectRef("v1", "ConfigMap", "gone", "ns"))
    second = LocalCluster(tmp_path)  # a new process: nothing on disk carries the old version
    again = second.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone", "namespace": "ns"}})
    assert int(again["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    with pytest.raises(Conflict):
        second.patch_spec(
            ObjectRef("v1", "ConfigMap", "gone", "ns"),
            {"data": {"a": "b"}},
            resource_version=created["metadata"]["resourceVersion"],
        )


def test_loaded_custom_resources_are_defaulted_and_pruned_in_memory_only(tmp_path: Path) -> None:
    text = (
        "apiVersion: aim.silogen.ai/v1alpha1\nkind: AIMServiceTemplate\nmetadata: {name: t, namespace: ns}\n"
        "spec:\n  model: m\n  junk: 1   # not in the schema\n"
    )
    (tmp_path / "t.yaml").write_text(text)
    cluster = LocalCluster(tmp_path)
    spec = cluster.get("aim.silogen.ai/v1alpha1", "AIMServiceTemplate", "t", "ns")["spec"]
    assert spec["precision"] == "auto" and spec["warmCache"] is False and "junk" not in spec
    assert (tmp_path / "t.yaml").read_text() == text


def test_written_strings_read_back_as_strings_in_yaml_1_1(tmp_path: Path) -> None:
    """ruamel writes YAML 1.2; values such as '3:1', 'yes' or '0755' must stay strings for YAML 1.1 readers."""
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: ns\ndata:\n  a: b\n")
    cluster = LocalCluster(path)
    tricky = {"ratio": "3:1", "flag": "yes", "mode": "0755", "plain": "hello", "on": "on"}
    cluster.patch_spec(
        ObjectRef("v1", "ConfigMap", "c", "ns"), {"metadata": {"annotations": tricky}, "data": {"a": "off"}}
    )
    loaded = yaml.safe_load(path.read_text())
    assert loaded["metadata"]["annotations"] == tricky and loaded["data"] == {"a": "off"}
    assert "plain: hello" in path.read_text()
    assert LocalCluster(path).get("v1", "ConfigMap", "c", "ns")["metadata"]["annotations"] == tricky


def tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (links followed) with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_new_object_is_never_written_outside_the_folder_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    (state / "ns").symlink_to(outside, target_is_directory=True)  # the namespace's folder points elsewhere
    cluster = LocalCluster(state)
    before = tree(tmp_path)
    with pytest.raises(Forbidden, match="outside"):
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}})
    assert list(outside.iterdir()) == []
    assert {k: v for k, v in tree(tmp_path).items() if not k.startswith("state/.")} == before
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "other"}})
    assert (state / "other" / "configmap-cm.yaml").is_file()  # inside the folder: written as always


def test_the_backends_own_files_are_never_written_through_a_planted_link(tmp_path: Path) -> None:
    from tasks.writer_lock import hold_writer_lock

    outside = tmp_path / "outside"
    outside.mkdir()
    state = tmp_path / "state"
    shutil.copytree(EXAMPLES, state)
    own = [".modelplane-state.json", ".modelplane-state.journal", ".modelplane.lock", ".modelplane-events.yaml"]
    own.append(".modelplane-optimize.lock")
    for name in own:  # half of them point at a file that exists, half at one that does not yet
        victim = outside / f"victim-{name.strip('.')}"
        if len(name) % 2:
            victim.write_text("precious\n")
        (state / name).symlink_to(victim)
    before = tree(outside)

    cluster = LocalCluster(state)
    with hold_writer_lock(cluster, "modelplane-optimize", "default", wait_s=1):
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "other"}})
        cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "e1", "namespace": "other"},
                "involvedObject": {"kind": "ConfigMap", "name": "cm", "namespace": "other"},
                "reason": "Tested",
                "message": "an Event goes to the sink",
            }
        )
    for _ in range(3):  # journal appends, then a whole sidecar
        cluster.patch_spec(ObjectRef("v1", "ConfigMap", "cm", "other"), {"data": {"k": str(_)}})

    assert tree(outside) == before, "nothing outside the folder was written or created"
    for name in own:
        assert not (state / name).is_symlink(), name
    assert "an Event goes to the sink" in (state / ".modelplane-events.yaml").read_text()
    assert LocalCluster(state).get("v1", "ConfigMap", "cm", "other")["data"] == {"k": "2"}


@pytest.mark.parametrize(
    ("meta", "field"),
    [
        ({"name": "zz/../../../escaped", "namespace": "ns"}, "metadata.name"),
        ({"name": "cm", "namespace": "../../escaped"}, "metadata.namespace"),
        ({"name": "..", "namespace": "ns"}, "metadata.name"),
    ],
)
def test_create_refuses_a_name_the_api_server_would_refuse(tmp_path: Path, meta: dict[str, str], field: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with pytest.raises(Invalid) as caught:
        LocalCluster(state).create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    assert caught.value.field == field
    assert sorted(p.name for p in tmp_path.rglob("*") if not p.name.startswith(".")) == ["state"]


def test_a_folder_beyond_the_total_size_limit_is_refused_with_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.clients.cluster import local_store

    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    (tmp_path / "b.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n")
    monkeypatch.setattr(local_store, "MAX_TOTAL_BYTES", (tmp_path / "a.yaml").stat().st_size + 1)
    with pytest.raises(Invalid, match="bytes a local cluster folder may hold"):
        LocalCluster(tmp_path).list("v1", "Namespace")


def config_map(name: str) -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: ns}}\n"


def test_symbolic_link_loops_are_reported_and_every_other_file_loads(tmp_path: Path) -> None:
    """A link loop stops nothing: an entry that cannot be followed is an unreadable file, a directory reached again
    through a link is read once."""
    from tasks.clients.cluster.local_paths import manifest_paths

    (tmp_path / "a.yaml").write_text(config_map("a"))
    (tmp_path / "ext" / "sub").mkdir(parents=True)
    (tmp_path / "ext" / "sub" / "b.yaml").write_text(config_map("b"))
    (tmp_path / "self").symlink_to(".")  # the folder again
    (tmp_path / "ext" / "sub" / "up").symlink_to("..")  # ext again, below itself
    (tmp_path / "a-link").symlink_to("ext")  # ext again, by a name walked before its own
    (tmp_path / "loop-1.yaml").symlink_to("loop-2.yaml")  # two links naming each other
    (tmp_path / "loop-2.yaml").symlink_to("loop-1.yaml")
    (tmp_path / "dir-1").symlink_to("dir-2")  # the same, with names no manifest has: a directory, perhaps
    (tmp_path / "dir-2").symlink_to("dir-1")
    (tmp_path / ".modelplane-events.yaml").symlink_to(".modelplane-events.yaml")  # the Event sink: no Events
    cluster = LocalCluster(tmp_path)
    assert sorted(c["metadata"]["name"] for c in cluster.list("v1", "ConfigMap", "ns")) == ["a", "b"]
    reported = {error.path.name: error.message for error in cluster.load_errors}
    assert sorted(reported) == ["dir-1", "dir-2", "loop-1.yaml", "loop-2.yaml"]  # no duplicates through the links
    assert reported["loop-1.yaml"] == f"{tmp_path / 'loop-1.yaml'}: cannot read: Too many levels of symbolic links"
    assert manifest_paths(tmp_path) == [tmp_path / "a.yaml", tmp_path / "ext" / "sub" / "b.yaml"]


@pytest.mark.timeout(60)  # a named pipe opened for reading would wait for a writer forever
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (os.mkfifo, "a named pipe (FIFO), not a regular file"),
        (lambda path: path.symlink_to("/dev/zero"), "a character device, not a regular file"),
        (lambda path: path.symlink_to("/dev/urandom"), "a character device, not a regular file"),
        (lambda path: path.symlink_to("missing.yaml"), "a symbolic link whose target does not exist"),
    ],
    ids=["fifo", "dev-zero", "dev-urandom", "dangling-link"],
)
def test_a_manifest_name_on_what_is_no_regular_file_is_reported_unread(
    tmp_path: Path, make: Callable[[Path], object], problem: str
) -> None:
    """Such an entry is reported as an unreadable file (with what it is, as ``--metrics-file`` words it) and never
    opened, when it is there from the start and when it appears (and goes) under a watched folder."""
    from tasks.clients.cluster.local_paths import manifest_paths

    (tmp_path / "a.yaml").write_text(config_map("a"))
    entry = tmp_path / "90-x.yaml"
    make(entry)
    cluster = LocalCluster(tmp_path)
    assert [c["metadata"]["name"] for c in cluster.list("v1", "ConfigMap", "ns")] == ["a"]
    assert [error.message for error in cluster.load_errors] == [f"{entry}: {problem}"]
    assert manifest_paths(tmp_path) == [tmp_path / "a.yaml"]
    entry.unlink()
    assert [c["metadata"]["name"] for c in cluster.list("v1", "ConfigMap", "ns")] == ["a"]
    assert cluster.load_errors == []
    make(entry)  # while the folder is watched: only the changed entry is looked at
    assert [c["metadata"]["name"] for c in cluster.list("v1", "ConfigMap", "ns")] == ["a"]
    assert [error.message for error in cluster.load_errors] == [f"{entry}: {problem}"]
    from tasks.manifests import check_manifests

    checked = check_manifests(tmp_path)  # validate-manifests says it too (it said "1 valid, 0 invalid")
    assert len(checked.verdicts) == 1 and checked.read_errors == [(str(entry), f"{entry}: {problem}")]


def test_a_directory_named_like_a_manifest_is_walked_like_any_directory(tmp_path: Path) -> None:
    (tmp_path / "90-x.yaml").mkdir()
    (tmp_path / "90-x.yaml" / "inner.yaml").write_text(config_map("inner"))
    cluster = LocalCluster(tmp_path)
    assert [c["metadata"]["name"] for c in cluster.list("v1", "ConfigMap", "ns")] == ["inner"]
    assert cluster.load_errors == []
