"""The local backend's in-memory index stays valid across operations, and re-reads only what changed.

A directory is watched (tasks/clients/cluster/dirwatch.py): an operation re-reads the files another process or a person
changed, added or removed, and nothing else (no directory scan, no other file read). Asserted here: every such
change is seen by the next read, a concurrent writer's change still makes a stale write conflict, what cannot be
followed (a new directory, a symbolic link) falls back to rescanning everything, the bookkeeping sidecar is
appended to (one journal line per write) and compacted, and reads back the same after a torn write, and a reload that
fails partway leaves no half-built index: the next operation reads again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tasks.clients.cluster.local_paths as local_paths
import tasks.clients.cluster.local_store as local_store
from tasks.clients.cluster import Conflict, LocalCluster, ObjectRef
from tasks.clients.cluster.bookkeeping import COMPACT_AFTER

REPO = Path(__file__).resolve().parents[2]


def config_map(name: str, value: str = "v1", namespace: str = "n") -> str:
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata:\n  k: {value}\n"
    )


def cm_ref(name: str, namespace: str = "n") -> ObjectRef:
    return ObjectRef("v1", "ConfigMap", name, namespace)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    for i in range(20):
        (tmp_path / f"cm-{i:02d}.yaml").write_text(config_map(f"cm-{i:02d}"))
    (tmp_path / "README.md").write_text("not a manifest\n")
    return tmp_path


class Reads:
    """Counts the files the backend reads and the directory scans it makes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.files: list[str] = []
        self.scans = 0
        read_file, scan = local_store.read_file, local_paths.scan_manifests

        def counted_read(path: Path) -> Any:
            self.files.append(path.name)
            return read_file(path)

        def counted_scan(root: str) -> Any:
            self.scans += 1
            return scan(root)

        monkeypatch.setattr(local_store, "read_file", counted_read)
        monkeypatch.setattr(local_paths, "scan_manifests", counted_scan)


def in_other_process(script: str, *args: str) -> None:
    """Run ``script`` in another Python process (as another Prefect run or ``kubectl`` would be)."""
    subprocess.run([sys.executable, "-c", script, *args], cwd=REPO, check=True, timeout=120)


PATCH = """
import sys
from tasks.clients.cluster import LocalCluster, ObjectRef
LocalCluster(sys.argv[1]).patch_spec(ObjectRef("v1", "ConfigMap", sys.argv[2], "n"), {"data": {"k": sys.argv[3]}})
"""


def test_operations_read_nothing_they_did_not_change(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalCluster(state)
    assert cluster._watch is not None, "a directory on Linux is watched"
    reads = Reads(monkeypatch)
    for i in range(20):
        cluster.patch_spec(cm_ref(f"cm-{i:02d}"), {"data": {"k": "mine"}})
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"new-{i}", "namespace": "n"}})
        cluster.post_event(cluster.get("v1", "ConfigMap", f"cm-{i:02d}", "n"), "Tick", "tick")
    assert len(cluster.list("v1", "ConfigMap")) == 40
    assert reads.files == [] and reads.scans == 0
    fresh = LocalCluster(state)
    assert [fresh.get("v1", "ConfigMap", f"cm-{i:02d}", "n")["data"] for i in range(20)] == [{"k": "mine"}] * 20


def test_hand_edit_between_two_reads_is_seen_and_only_that_file_read(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = LocalCluster(state)
    before = cluster.get("v1", "ConfigMap", "cm-03", "n")["metadata"]
    other = cluster.get("v1", "ConfigMap", "cm-04", "n")["metadata"]["resourceVersion"]
    reads = Reads(monkeypatch)
    (state / "cm-03.yaml").write_text(config_map("cm-03", "edited"))  # in place: same inode
    after = cluster.get("v1", "ConfigMap", "cm-03", "n")
    assert after["data"] == {"k": "edited"}
    assert int(after["metadata"]["resourceVersion"]) > int(before["resourceVersion"])
    assert after["metadata"]["uid"] == before["uid"]
    assert cluster.get("v1", "ConfigMap", "cm-04", "n")["metadata"]["resourceVersion"] == other
    assert reads.files == ["cm-03.yaml"] and reads.scans == 0


def test_files_added_and_removed_by_hand_are_seen(state: Path) -> None:
    cluster = LocalCluster(state)
    (state / "added.yaml").write_text(config_map("added"))
    (state / "cm-00.yaml").unlink()
    names = {o["metadata"]["name"] for o in cluster.list("v1", "ConfigMap", "n")}
    assert "added" in names and "cm-00" not in names
    (state / "moved.yml").write_bytes((state / "added.yaml").read_bytes())
    (state / "added.yaml").unlink()
    assert cluster.get("v1", "ConfigMap", "added", "n")["data"] == {"k": "v1"}


def test_a_new_directory_and_a_duplicate_fall_back_to_a_full_reload(state: Path) -> None:
    cluster = LocalCluster(state)
    (state / "other").mkdir()
    (state / "other" / "x.yaml").write_text(config_map("x", namespace="other"))
    assert cluster.get("v1", "ConfigMap", "x", "other")["data"] == {"k": "v1"}
    (state / "other" / "y.yaml").write_text(config_map("y", namespace="other"))  # the new directory is watched
    assert cluster.get("v1", "ConfigMap", "y", "other")["data"] == {"k": "v1"}
    (state / "zz-copy.yaml").write_text(config_map("cm-01", "copy"))
    assert cluster.get("v1", "ConfigMap", "cm-01", "n")["data"] == {"k": "v1"}  # the first file by name wins
    assert any("duplicate object" in e.message for e in cluster.load_errors)
    (state / "cm-01.yaml").unlink()
    assert cluster.get("v1", "ConfigMap", "cm-01", "n")["data"] == {"k": "copy"}
    assert not cluster.load_errors


def test_another_process_write_is_seen_and_a_stale_write_conflicts(state: Path) -> None:
    cluster = LocalCluster(state)
    stale = cluster.get("v1", "ConfigMap", "cm-05", "n")["metadata"]["resourceVersion"]
    in_other_process(PATCH, str(state), "cm-05", "theirs")
    theirs = cluster.get("v1", "ConfigMap", "cm-05", "n")
    assert theirs["data"] == {"k": "theirs"} and theirs["metadata"]["resourceVersion"] != stale
    with pytest.raises(Conflict):
        cluster.patch_spec(cm_ref("cm-05"), {"data": {"k": "mine"}}, resource_version=stale)
    mine = cluster.patch_spec(cm_ref("cm-06"), {"data": {"k": "mine"}})
    assert int(mine["metadata"]["resourceVersion"]) > int(theirs["metadata"]["resourceVersion"])  # counter shared


def test_another_process_write_between_a_read_and_a_write_conflicts(state: Path) -> None:
    """The write path re-checks under the inter-process lock, not only the read path."""
    cluster = LocalCluster(state)
    stale = cluster.get("v1", "ConfigMap", "cm-07", "n")["metadata"]["resourceVersion"]
    in_other_process(PATCH, str(state), "cm-07", "theirs")
    with pytest.raises(Conflict):
        cluster.patch_spec(cm_ref("cm-07"), {"data": {"k": "mine"}}, resource_version=stale)
    assert LocalCluster(state).get("v1", "ConfigMap", "cm-07", "n")["data"] == {"k": "theirs"}


def test_a_symlinked_directory_is_not_watched_but_still_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.yaml").write_text(config_map("a"))
    state = tmp_path / "state"
    state.mkdir()
    (state / "linked").symlink_to(real, target_is_directory=True)
    cluster = LocalCluster(state)
    assert cluster._watch is None
    (real / "a.yaml").write_text(config_map("a", "edited"))
    assert cluster.get("v1", "ConfigMap", "a", "n")["data"] == {"k": "edited"}


def test_bookkeeping_is_journalled_compacted_and_survives_a_torn_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(config_map("c"))  # no resourceVersion: the sidecar keeps it
    cluster = LocalCluster(tmp_path)
    obj = cluster.patch_spec(cm_ref("c"), {"data": {"k": "first"}})
    sidecar, journal = tmp_path / ".modelplane-state.json", tmp_path / ".modelplane-state.journal"
    assert sidecar.is_file() and not journal.exists()  # the first save writes the sidecar whole
    assert "resourceVersion" not in (tmp_path / "c.yaml").read_text()
    for i in range(5):
        obj = cluster.patch_spec(cm_ref("c"), {"data": {"i": str(i)}})
    assert len(journal.read_text().splitlines()) == 5 and '"i": "4"' not in sidecar.read_text()
    with journal.open("a") as handle:
        handle.write('{"k": "v1/ConfigMap/n/c", "r": {"resou')  # a write cut short
    reopened = LocalCluster(tmp_path)
    assert reopened.get("v1", "ConfigMap", "c", "n")["metadata"] == obj["metadata"]
    for i in range(COMPACT_AFTER + 5):
        last = reopened.patch_spec(cm_ref("c"), {"data": {"i": f"again-{i}"}})
    assert len(journal.read_text().splitlines()) < COMPACT_AFTER
    assert json.loads(sidecar.read_text())["resourceVersion"] >= COMPACT_AFTER
    assert LocalCluster(tmp_path).get("v1", "ConfigMap", "c", "n")["metadata"] == last["metadata"]


def test_a_selector_list_follows_label_changes(state: Path) -> None:
    cluster = LocalCluster(state)
    for name in ("cm-01", "cm-02"):
        cluster.patch_spec(cm_ref(name), {"metadata": {"labels": {"owner": "a"}}})
    assert [o["metadata"]["name"] for o in cluster.list("v1", "ConfigMap", "n", "owner=a")] == ["cm-01", "cm-02"]
    cluster.patch_spec(cm_ref("cm-01"), {"metadata": {"labels": {"owner": "b"}}})
    (state / "cm-03.yaml").write_text(
        config_map("cm-03").replace("  namespace: n\n", "  namespace: n\n  labels: {owner: a}\n")
    )
    assert [o["metadata"]["name"] for o in cluster.list("v1", "ConfigMap", "n", "owner in (a),owner!=c")] == [
        "cm-02",
        "cm-03",
    ]
    assert [o["metadata"]["name"] for o in cluster.list("v1", "ConfigMap", None, "owner=b")] == ["cm-01"]
    cluster.delete(cm_ref("cm-02"))
    assert len(cluster.list("v1", "ConfigMap", label_selector="owner")) == 2
    assert cluster.list("v1", "ConfigMap", "other", "owner=a") == []


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "rescanned"])
def test_a_load_that_fails_partway_replaces_nothing_and_the_next_operation_reads_again(
    state: Path, monkeypatch: pytest.MonkeyPatch, watched: bool
) -> None:
    """A reload that raises (here the comparison of an edited object with its previous copy, as a deeply nested
    document made it) leaves no half-built index behind for the next operation to trust: that one reads again."""
    if not watched:
        monkeypatch.setattr(local_store, "open_watch", lambda *args: None)
    cluster = LocalCluster(state)
    assert (cluster._watch is not None) is watched
    (state / "cm-05.yaml").write_text(config_map("cm-05", "edited"))
    carry_over, failures = local_store.LocalStore._carry_over, [RecursionError("maximum recursion depth exceeded")]

    def failing_once(self: local_store.LocalStore, before: Any, after: Any) -> None:
        if failures:
            raise failures.pop()
        carry_over(self, before, after)

    monkeypatch.setattr(local_store.LocalStore, "_carry_over", failing_once)
    with pytest.raises(RecursionError):
        cluster.list("v1", "ConfigMap", "n")
    names = [o["metadata"]["name"] for o in cluster.list("v1", "ConfigMap", "n")]
    assert names == [f"cm-{i:02d}" for i in range(20)]
    assert cluster.get("v1", "ConfigMap", "cm-05", "n")["data"] == {"k": "edited"}
