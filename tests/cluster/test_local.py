"""Local-backend behaviour the contract suite cannot see: files on disk.

Atomic, minimal write-back (other documents and files byte-for-byte), single-file mode, the Event
sink, broken files, resourceVersion persistence, ``kind: List`` snapshots, snapshot (no write-back)
mode, external edits, finalizers and thread safety.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tasks.clients.cluster import Conflict, Invalid, LocalCluster, NotFound, ObjectRef, Unavailable, retry_on_conflict
from tasks.clients.cluster.local_store import DIR_EVENTS_FILE
from tasks.clients.cluster.yamlfile import split_documents

VA = ("llmd.ai/v1alpha1", "VariantAutoscaling")

HAND_WRITTEN = """\
# Hand-written by an operator; comments and layout must survive.
apiVersion: v1
kind: ConfigMap
metadata:
  name: accelerator-unit-costs   # WVA cost table
  namespace: llm-serving
data:
  A100: '{"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}'
---
# the variant we will touch
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata:
  name: llama-a100
  namespace: llm-serving
  labels: {model: llama}
spec:
  modelID: meta/llama-3.1-8b
---
apiVersion:    llmd.ai/v1alpha1     # odd spacing kept
kind: VariantAutoscaling
metadata:
  name: llama-h100
  namespace: llm-serving
spec: {modelID: meta/llama-3.1-8b}
"""

OTHER_FILE = """\
apiVersion: v1
kind: Namespace
metadata:
  name: llm-serving   # keep me
"""


@pytest.fixture
def state(tmp_path: Path) -> Path:
    (tmp_path / "serving.yaml").write_text(HAND_WRITTEN)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ns.yml").write_text(OTHER_FILE)
    (tmp_path / "README.md").write_text("not yaml: ignored\n")
    return tmp_path


def chunks(path: Path) -> list[str]:
    return [text for text, _ in split_documents(path.read_text())]


def ref(name: str) -> ObjectRef:
    return ObjectRef(*VA, name, "llm-serving")


def test_loading_writes_nothing(state: Path) -> None:
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    cluster = LocalCluster(state)
    obj = cluster.get(*VA, "llama-a100", "llm-serving")
    assert obj["metadata"]["uid"] and obj["metadata"]["generation"] == 1
    assert cluster.get(*VA, "llama-a100", "llm-serving")["metadata"]["uid"] == obj["metadata"]["uid"]
    assert LocalCluster(state).get(*VA, "llama-a100", "llm-serving")["metadata"]["uid"] == obj["metadata"]["uid"]
    assert {p: p.read_bytes() for p in state.rglob("*") if p.is_file()} == before


def test_write_rewrites_only_the_changed_document(state: Path) -> None:
    other_before = (state / "sub" / "ns.yml").read_bytes()
    before = chunks(state / "serving.yaml")
    cluster = LocalCluster(state)
    cluster.patch_status(ref("llama-a100"), {"actuation": {"applied": True}})
    after = chunks(state / "serving.yaml")
    assert len(after) == 3
    assert after[0] == before[0] and after[2] == before[2]  # byte-identical neighbours, same order
    assert after[1] != before[1] and after[1].startswith("---\n")
    assert (state / "sub" / "ns.yml").read_bytes() == other_before
    reread = LocalCluster(state).get(*VA, "llama-a100", "llm-serving")
    assert reread["status"] == {"actuation": {"applied": True}}
    assert reread["metadata"]["labels"] == {"model": "llama"}
    assert not [p for p in state.rglob("*.tmp")]


def test_new_objects_get_their_own_file_and_delete_removes_it(state: Path) -> None:
    cluster = LocalCluster(state)
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh", "namespace": "llm-serving"}})
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    path = state / "llm-serving" / "configmap-fresh.yaml"
    assert path.is_file() and (state / "_cluster" / "namespace-other.yaml").is_file()
    assert LocalCluster(state).get("v1", "ConfigMap", "fresh", "llm-serving")["metadata"]["name"] == "fresh"
    cluster.delete(ObjectRef("v1", "ConfigMap", "fresh", "llm-serving"))
    assert not path.exists()


def test_delete_keeps_the_other_documents(state: Path) -> None:
    before = chunks(state / "serving.yaml")
    LocalCluster(state).delete(ref("llama-a100"))
    assert chunks(state / "serving.yaml") == [before[0], before[2]]


def test_events_go_to_the_sink_not_the_manifests(state: Path) -> None:
    manifests = (state / "serving.yaml").read_bytes()
    cluster = LocalCluster(state)
    event = cluster.post_event(cluster.get(*VA, "llama-a100", "llm-serving"), "Scaled", "to 3")
    assert (state / "serving.yaml").read_bytes() == manifests
    assert (state / DIR_EVENTS_FILE).is_file()
    assert [e["metadata"]["name"] for e in LocalCluster(state).list("v1", "Event", "llm-serving")] == [
        event["metadata"]["name"]
    ]


def test_single_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.yaml"
    path.write_text(HAND_WRITTEN)
    cluster = LocalCluster(path)
    assert cluster.single_file
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "added", "namespace": "x"}})
    cluster.patch_spec(ref("llama-h100"), {"spec": {"variantCost": "80.00"}})
    cluster.post_event(cluster.get(*VA, "llama-h100", "llm-serving"), "Costed", "80")
    after = chunks(path)
    before = chunks_of(HAND_WRITTEN)
    assert after[:2] == before[:2] and len(after) == 4
    assert 'variantCost: "80.00"' in after[2] and "name: added" in after[3]
    visible = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert visible == ["snapshot.events.yaml", "snapshot.yaml"]
    assert cluster.lock_path == tmp_path / ".snapshot.yaml.lock"
    again = LocalCluster(path)
    assert again.get("v1", "ConfigMap", "added", "x")["metadata"]["name"] == "added"
    assert len(again.list("v1", "Event")) == 1


def chunks_of(text: str) -> list[str]:
    return [t for t, _ in split_documents(text)]


def test_single_file_created_on_first_write(tmp_path: Path) -> None:
    path = tmp_path / "new.yaml"
    cluster = LocalCluster(path)
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}})
    assert path.read_text().startswith("apiVersion: v1\n") and path.read_text().count("\n---\n") == 1
    assert [c["metadata"]["name"] for c in LocalCluster(path).list("v1", "ConfigMap")] == ["a", "b"]


def test_a_built_in_object_the_api_server_cannot_decode_is_reported_not_loaded(tmp_path: Path) -> None:
    """A Deployment whose spec is a scalar, a ConfigMap whose data holds a mapping: an API server's decoding
    refuses both; loading them raised AttributeError out of the defaulting (every command ended in a traceback)."""
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\nspec: true\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: {costs: {cost: 1}}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, namespace: ns}\ndata: {a: '1'}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns2, labels: team}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns3, annotations: [a]}\n---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: g, namespace: ns, generation: two}\n"
    )
    cluster = LocalCluster(tmp_path)
    assert [e.message.split(": document ")[1] for e in cluster.load_errors] == [
        "at line 1: spec: must be an object",
        'at line 6: data["costs"]: keys and values must be strings',
        "at line 16: metadata.labels: must be a mapping of strings",  # before: AttributeError from the defaulting
        "at line 20: metadata.annotations: must be a mapping of strings",
        "at line 24: metadata.generation: must be an integer",  # before: every spec write raised ValueError
    ]
    assert [c["metadata"]["name"] for c in cluster.list("v1", "ConfigMap", "ns")] == ["ok"]
    assert cluster.list("apps/v1", "Deployment", "ns") == []
    assert cluster.list("v1", "Namespace") == []


def test_a_scale_of_a_workload_holding_no_counts_is_invalid_naming_the_field(tmp_path: Path) -> None:
    """A hand-written status an API server could never hold: reading or writing the Scale is ``Invalid`` naming
    the field (a lifecycle reports it for that workload), never a ``ValidationError`` that ends the whole run."""
    (tmp_path / "d.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\nspec: {replicas: 1}\nstatus: x\n"
    )
    cluster = LocalCluster(tmp_path)
    target = ObjectRef("apps/v1", "Deployment", "d", "ns")
    with pytest.raises(Invalid, match=r"^status: Invalid value: Input should be a valid dictionary"):
        cluster.get_scale(target)
    with pytest.raises(Invalid, match=r"^status: Invalid value"):
        cluster.set_scale(target, 2)
    assert cluster.get("apps/v1", "Deployment", "d", "ns")["spec"]["replicas"] == 1  # refused, not half-written


def test_invalid_yaml_is_reported_and_other_files_load(state: Path) -> None:
    broken = state / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [unclosed\n")
    cluster = LocalCluster(state)
    assert [e.path for e in cluster.load_errors] == [broken]
    assert "broken.yaml" in cluster.load_errors[0].message
    assert cluster.get(*VA, "llama-a100", "llm-serving")
    cluster.patch_status(ref("llama-a100"), {"actuation": {"applied": True}})
    assert broken.read_text().endswith("[unclosed\n")  # never rewritten
    with pytest.raises(Invalid, match="broken.yaml"):
        LocalCluster(state, strict=True)


def test_resource_version_persists_across_reopen(state: Path) -> None:
    written = LocalCluster(state).patch_status(ref("llama-a100"), {"actuation": {"applied": True}})
    reopened = LocalCluster(state)
    assert (
        reopened.get(*VA, "llama-a100", "llm-serving")["metadata"]["resourceVersion"]
        == written["metadata"]["resourceVersion"]
    )
    later = reopened.patch_spec(ref("llama-h100"), {"spec": {"variantCost": "1"}})
    assert int(later["metadata"]["resourceVersion"]) > int(written["metadata"]["resourceVersion"])
    with pytest.raises(Conflict):
        reopened.patch_spec(ref("llama-a100"), {"spec": {"variantCost": "2"}}, resource_version="1")


def test_counter_starts_above_highest_resource_version(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n, resourceVersion: 41, generation: 3}\n"
    )
    cluster = LocalCluster(tmp_path)
    created = cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "n"}})
    assert int(created["metadata"]["resourceVersion"]) > 41
    assert cluster.get("v1", "ConfigMap", "a", "n")["metadata"]["generation"] == 3
    assert cluster.patch_spec(ObjectRef("v1", "ConfigMap", "a", "n"), {"data": {"k": "v"}}, resource_version="41")


def test_kubectl_list_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    path.write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: llmd.ai/v1alpha1\n  kind: VariantAutoscaling\n"
        "  metadata: {name: a, namespace: ns, resourceVersion: '7', creationTimestamp: 2025-01-02T03:04:05Z}\n"
        "  spec: {modelID: m}\n"
        "- apiVersion: llmd.ai/v1alpha1\n  kind: VariantAutoscaling\n  metadata: {name: b, namespace: ns}\n  spec: {modelID: m}\n"
        "metadata: {resourceVersion: ''}\n"
    )
    cluster = LocalCluster(path)
    first = cluster.get(*VA, "a", "ns")
    assert first["metadata"]["creationTimestamp"] == "2025-01-02T03:04:05Z"  # a string, as from the API
    cluster.patch_status(ObjectRef(*VA, "b", "ns"), {"actuation": {"applied": True}})
    cluster.delete(ObjectRef(*VA, "a", "ns"))
    reread = LocalCluster(path)
    assert [o["metadata"]["name"] for o in reread.list(*VA)] == ["b"]
    assert reread.get(*VA, "b", "ns")["status"] == {"actuation": {"applied": True}}
    reread.patch_status(ObjectRef(*VA, "b", "ns"), {"actuation": {"applied": False}})
    assert "kind: List" in path.read_text()


def test_snapshot_mode_never_writes(state: Path) -> None:
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    cluster = LocalCluster(state, write_back=False)
    cluster.patch_status(ref("llama-a100"), {"actuation": {"applied": True}})
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "llm-serving"}})
    cluster.post_event(cluster.get(*VA, "llama-a100", "llm-serving"), "R", "m")
    cluster.delete(ref("llama-h100"))
    assert cluster.get(*VA, "llama-a100", "llm-serving")["status"]["actuation"]["applied"] is True
    assert len(cluster.list("v1", "Event")) == 1
    assert {p: p.read_bytes() for p in state.rglob("*") if p.is_file()} == before


def test_external_edits_are_picked_up(state: Path) -> None:
    cluster = LocalCluster(state)
    seen = cluster.get(*VA, "llama-h100", "llm-serving")["metadata"]["resourceVersion"]
    path = state / "serving.yaml"
    path.write_text(path.read_text().replace("spec: {modelID: meta/llama-3.1-8b}", "spec: {modelID: ibm/granite}"))
    os.utime(path, ns=(1, 1))
    fresh = cluster.get(*VA, "llama-h100", "llm-serving")
    assert fresh["spec"]["modelID"] == "ibm/granite"
    assert int(fresh["metadata"]["resourceVersion"]) > int(seen)


def test_failed_write_leaves_file_and_memory_unchanged(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalCluster(state)
    before = (state / "serving.yaml").read_bytes()

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(Unavailable, match="No space left"):
        cluster.patch_status(ref("llama-a100"), {"actuation": {"applied": True}})
    monkeypatch.undo()
    assert (state / "serving.yaml").read_bytes() == before
    assert "status" not in cluster.get(*VA, "llama-a100", "llm-serving")
    assert not [p for p in state.rglob("*.tmp")]


def test_finalizers_defer_deletion(state: Path) -> None:
    cluster = LocalCluster(state)
    cluster.patch_spec(ref("llama-a100"), {"metadata": {"finalizers": ["modelplane.io/cleanup"]}})
    cluster.delete(ref("llama-a100"))
    marked = cluster.get(*VA, "llama-a100", "llm-serving")
    assert marked["metadata"]["deletionTimestamp"]
    cluster.patch_spec(ref("llama-a100"), {"metadata": {"finalizers": None}})
    with pytest.raises(NotFound):
        cluster.get(*VA, "llama-a100", "llm-serving")


def test_system_metadata_cannot_be_patched(state: Path) -> None:
    cluster = LocalCluster(state)
    before = cluster.get(*VA, "llama-a100", "llm-serving")
    after = cluster.patch_spec(
        ref("llama-a100"), {"metadata": {"uid": "forged", "generation": 99, "labels": {"x": "1"}}}
    )
    assert after["metadata"]["uid"] == before["metadata"]["uid"] and after["metadata"]["generation"] == 1
    with pytest.raises(Invalid):
        cluster.patch_spec(ref("llama-a100"), {"metadata": {"name": "renamed"}})


def test_a_patch_to_annotations_the_api_server_would_refuse_is_refused_and_nothing_written(state: Path) -> None:
    """An update's metadata is validated as a create's: annotations over 256 KiB in all are a 422, never written to
    the file (before: only a create was checked, and a patch wrote what no cluster would have stored)."""
    cluster = LocalCluster(state)
    text = (state / "serving.yaml").read_text()
    fits = "x" * (256 * 1024 - 100)
    cluster.patch_spec(ref("llama-a100"), {"metadata": {"annotations": {"example.com/a": fits}}})
    written = (state / "serving.yaml").read_text()
    with pytest.raises(Invalid) as info:
        cluster.patch_spec(ref("llama-a100"), {"metadata": {"annotations": {"example.com/b": "y" * 200}}})
    assert info.value.field == "metadata.annotations" and "must have at most 262144 bytes" in str(info.value)
    assert "the largest example.com/a" in str(info.value)
    assert (state / "serving.yaml").read_text() == written != text
    assert "example.com/b" not in cluster.get(*VA, "llama-a100", "llm-serving")["metadata"]["annotations"]
    with pytest.raises(Invalid):
        cluster.patch_spec(ref("llama-a100"), {"metadata": {"annotations": {"bad key!": "v"}}})


def test_generate_name_and_missing_name(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    made = cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "job-"}})
    assert made["metadata"]["name"].startswith("job-") and len(made["metadata"]["name"]) > 4
    with pytest.raises(Invalid) as info:
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    assert info.value.field == "metadata.name"


def test_unknown_kind_and_bad_selector(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    with pytest.raises(NotFound, match="unknown kind"):
        cluster.create({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    with pytest.raises(Invalid):
        cluster.list("v1", "ConfigMap", label_selector="a in (b")


WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}, scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer, minimum: 0}
              size: {type: string, default: small}
"""


def test_crd_documents_in_the_folder_serve_their_kinds(tmp_path: Path) -> None:
    """As installing a CRD serves its kind on a cluster: a CRD document in the folder (also one added later)
    makes its kind listable and writable here, with its scope, subresources and schema; other folders do not
    see it, and removing the document stops serving it."""
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"replicas": 1}}
    cluster = LocalCluster(tmp_path)
    with pytest.raises(NotFound, match="unknown kind"):
        cluster.list("example.com/v1", "Widget", "default")
    (tmp_path / "crd.yaml").write_text(WIDGET_CRD)  # by hand, after the cluster was opened
    made = cluster.create({**widget, "spec": {"replicas": 1, "unknown": True}})
    assert made["metadata"]["namespace"] == "default" and made["spec"] == {"replicas": 1, "size": "small"}
    with pytest.raises(Invalid) as info:
        cluster.patch_spec(ObjectRef.of(made), {"spec": {"replicas": -1}})
    assert info.value.field == "spec.replicas"
    assert cluster.set_scale(ObjectRef.of(made), 3).replicas == 3  # the scale subresource
    assert [w["metadata"]["name"] for w in LocalCluster(tmp_path).list("example.com/v1", "Widget")] == ["w"]
    with pytest.raises(NotFound, match="unknown kind"):
        LocalCluster(tmp_path / "elsewhere").list("example.com/v1", "Widget")
    (tmp_path / "crd.yaml").unlink()
    with pytest.raises(NotFound, match="unknown kind"):
        cluster.list("example.com/v1", "Widget")


def test_concurrent_read_modify_write_loses_nothing(state: Path) -> None:
    cluster = LocalCluster(state)
    threads, per_thread = 6, 5

    def bump() -> None:
        for _ in range(per_thread):
            retry_on_conflict(
                cluster,
                ref("llama-a100"),
                lambda obj: {
                    "desiredOptimizedAlloc": {
                        "numReplicas": ((obj.get("status") or {}).get("desiredOptimizedAlloc") or {}).get(
                            "numReplicas", 0
                        )
                        + 1
                    }
                },
                attempts=100,
                backoff=lambda _: 0,
            )

    workers = [threading.Thread(target=bump) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    final = LocalCluster(state).get(*VA, "llama-a100", "llm-serving")
    assert final["status"]["desiredOptimizedAlloc"]["numReplicas"] == threads * per_thread


def test_hand_edit_under_same_resource_version_still_conflicts(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n, resourceVersion: '5'}\ndata: {k: v1}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: n}\ndata: {k: v1}\n"
    )
    cluster = LocalCluster(path)
    untouched = cluster.get("v1", "ConfigMap", "b", "n")["metadata"]["resourceVersion"]
    path.write_text(path.read_text().replace("data: {k: v1}\n---", "data: {k: edited}\n---"))
    edited = cluster.get("v1", "ConfigMap", "a", "n")
    assert edited["data"] == {"k": "edited"} and edited["metadata"]["resourceVersion"] != "5"
    with pytest.raises(Conflict):
        cluster.patch_spec(ObjectRef("v1", "ConfigMap", "a", "n"), {"data": {"k": "mine"}}, resource_version="5")
    assert cluster.get("v1", "ConfigMap", "b", "n")["metadata"]["resourceVersion"] == untouched


WORKER = """
import sys
from tasks.clients.cluster import LocalCluster, ObjectRef, retry_on_conflict

cluster = LocalCluster(sys.argv[1])
ref = ObjectRef("v1", "ConfigMap", "counter", "n")
for _ in range(int(sys.argv[2])):
    retry_on_conflict(
        cluster, ref, lambda obj: {"data": {"n": str(int(obj["data"]["n"]) + 1)}},
        write="spec", attempts=1000, backoff=lambda attempt: 0.001,
    )
"""


def test_concurrent_processes_lose_no_update(tmp_path: Path) -> None:
    """Separate processes (as separate Prefect runs are) share one state directory safely."""
    import subprocess
    import sys

    (tmp_path / "counter.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: counter, namespace: n}\ndata: {n: '0'}\n"
    )
    repo = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), "15"], cwd=repo) for _ in range(3)]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert LocalCluster(tmp_path).get("v1", "ConfigMap", "counter", "n")["data"] == {"n": "45"}


def test_event_sink_keeps_only_the_newest_events(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, max_events=3)
    obj = cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}})
    posted = [cluster.post_event(obj, "Tick", f"tick {i}")["message"] for i in range(5)]
    assert sorted(e["message"] for e in LocalCluster(tmp_path).list("v1", "Event")) == posted[2:]


def test_loaded_objects_are_defaulted_in_memory_only(tmp_path: Path) -> None:
    text = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: n}\n"
        "spec: {selector: {matchLabels: {app: d}}}\n"
    )
    (tmp_path / "d.yaml").write_text(text)
    cluster = LocalCluster(tmp_path)
    assert cluster.get("apps/v1", "Deployment", "d", "n")["spec"]["replicas"] == 1
    labelled = cluster.patch_spec(ObjectRef("apps/v1", "Deployment", "d", "n"), {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1  # defaulting is not a spec change
    # only the written field reaches the file: no defaults, no bookkeeping, the flow style kept
    assert (tmp_path / "d.yaml").read_text() == text.replace("namespace: n}", "namespace: n, labels: {a: b}}")
    assert (
        LocalCluster(tmp_path).get("apps/v1", "Deployment", "d", "n")["metadata"]["resourceVersion"]
        == labelled["metadata"]["resourceVersion"]
    )
