"""The boundary reader (tasks/boundary.py): one invalid custom resource is marked and left out, the others
pass; ``modelplane validate-manifests`` (engine.api.validate) and the flows judge with the same reader."""

from __future__ import annotations

import pathlib
import re

import yaml

from engine.api.validate import load_documents
from tasks.boundary import accept, drain_rejections, invalid_field
from tasks.cluster import connect

SERVICE = {
    "apiVersion": "aim.silogen.ai/v1alpha1",
    "kind": "AIMService",
    "metadata": {"name": "ok", "namespace": "ns"},
    "spec": {"model": "meta/llama-3.1-8b-instruct:0.8.4", "templateRef": "t", "replicas": 1, "cacheModel": True},
}


def write(tmp_path: pathlib.Path, *objects: dict) -> pathlib.Path:
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
    return tmp_path


def test_an_invalid_object_is_marked_and_left_out(tmp_path: pathlib.Path) -> None:
    bad = dict(SERVICE, metadata={"name": "bad", "namespace": "ns"}, spec=dict(SERVICE["spec"], cacheModel="no"))
    shape = dict(SERVICE, metadata={"name": "shape", "namespace": "ns"}, spec="a string")
    cluster = connect(str(write(tmp_path, SERVICE, bad, shape)))
    drain_rejections()
    kept = accept(cluster, cluster.list("aim.silogen.ai/v1alpha1", "AIMService"))
    assert [o["metadata"]["name"] for o in kept] == ["ok"]
    rejected = drain_rejections()
    assert len(rejected) == 2 and any("spec.cacheModel" in line for line in rejected)
    marked = cluster.get("aim.silogen.ai/v1alpha1", "AIMService", "bad", "ns")["status"]
    assert marked["status"] == "Failed"
    ready = next(c for c in marked["conditions"] if c["type"] == "Ready")
    assert (
        ready["status"] == "False"
        and ready["reason"] == "InvalidSpec"
        and ready["message"].startswith("spec.cacheModel")
    )
    text = (tmp_path / "objects.yaml").read_text()
    accept(cluster, cluster.list("aim.silogen.ai/v1alpha1", "AIMService"))  # marked once: nothing new to write
    assert (tmp_path / "objects.yaml").read_text() == text


def test_validate_and_the_flows_agree() -> None:
    bad = dict(SERVICE, spec=dict(SERVICE["spec"], cacheModel="no"))
    report = load_documents([("a#0", bad), ("b#0", SERVICE)])
    assert [e.field_path for _, e in report.invalid] == ["spec.cacheModel"]
    assert invalid_field(bad)[0] == "spec.cacheModel" and invalid_field(SERVICE) is None


def test_other_kinds_pass_unchanged(tmp_path: pathlib.Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "b"}}
    cluster = connect(str(write(tmp_path, cm)))
    assert accept(cluster, cluster.list("v1", "ConfigMap"))[0]["data"] == {"a": "b"}


def test_flows_and_tasks_read_no_spec_through_dict_chains() -> None:
    """Issue 22's acceptance, ``grep -rn '.get("spec")' flows tasks`` finds nothing: custom resources are read
    as their API models through the boundary reader, other kinds through the typed views of engine.api.views."""
    root = pathlib.Path(__file__).resolve().parent.parent
    pattern = re.compile(r'.get\("spec"\)')
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for layer in ("flows", "tasks")
        for path in sorted((root / layer).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
