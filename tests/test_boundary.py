"""The boundary reader (tasks/boundary.py): one invalid custom resource is marked and left out, the others
pass; ``modelplane validate-manifests`` (engine.api.validate) and the flows judge with the same reader."""

from __future__ import annotations

import contextvars
import logging
import pathlib
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from engine.api.aim import AIMService
from engine.api.validate import load_documents
from tasks.boundary import accept, accept_as, collecting, drain_rejections, invalid_field, parse_resource, start_run
from tasks.clients.cluster import connect

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
    with collecting() as rejected:
        kept = accept(cluster, cluster.list("aim.silogen.ai/v1alpha1", "AIMService"))
    assert [o["metadata"]["name"] for o in kept] == ["ok"]
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


def test_validate_reports_a_duplicate_object_as_the_local_backend_reads_it(tmp_path: pathlib.Path) -> None:
    from tasks.manifests import check_manifests

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "b"}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all([cm, SERVICE], sort_keys=False))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump_all([dict(cm, data={"a": "other"}), SERVICE], sort_keys=False))
    other_ns = dict(cm, metadata={"name": "c", "namespace": "elsewhere"})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(other_ns, sort_keys=False))

    verdicts = {v.source.removeprefix(f"{tmp_path}/"): v.problem for v in check_manifests(tmp_path).verdicts}

    assert verdicts["a.yaml#0"] is None and verdicts["a.yaml#1"] is None and verdicts["c.yaml#0"] is None
    assert verdicts["b.yaml#0"] == f"duplicate object, also in {tmp_path}/a.yaml#0: the first is used"
    assert verdicts["b.yaml#1"] == f"duplicate object, also in {tmp_path}/a.yaml#1: the first is used"
    assert connect(str(tmp_path)).get("v1", "ConfigMap", "c", "ns")["data"] == {"a": "b"}  # the first, as reported


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


def test_each_run_collects_its_own_rejections(tmp_path: pathlib.Path) -> None:
    """Two runs at once (threads, as a serving process runs flows) each report only their own invalid objects;
    a run's undrained rejections never reach the context that started it, nor the next run."""
    clusters = {}
    for name in ("first", "second"):
        bad = dict(SERVICE, metadata={"name": name, "namespace": "ns"}, spec=dict(SERVICE["spec"], replicas=-2))
        (tmp_path / name).mkdir()
        clusters[name] = connect(str(write(tmp_path / name, bad)))
    barrier = threading.Barrier(2)

    def run(name: str) -> list[str]:
        start_run()
        barrier.wait()
        accept(clusters[name], clusters[name].list("aim.silogen.ai/v1alpha1", "AIMService"))
        barrier.wait()  # both have rejected theirs before either drains
        return drain_rejections()

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(contextvars.copy_context().run, run, name) for name in clusters}
    for name, future in futures.items():
        lines = future.result()
        assert len(lines) == 1 and f"ns/{name}: invalid: spec.replicas" in lines[0]

    def leave_undrained() -> None:
        start_run()
        accept(clusters["first"], clusters["first"].list("aim.silogen.ai/v1alpha1", "AIMService"))

    contextvars.copy_context().run(leave_undrained)
    assert drain_rejections() == []  # no run here: nothing collected, nothing leaked


READY = {
    "type": "Ready",
    "status": "True",
    "reason": "RuntimeReady",
    "message": "the service is running",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


def test_the_typed_object_carries_its_status_read_tolerantly(caplog: pytest.LogCaptureFixture) -> None:
    """One typed object carries metadata, spec and the previous status (what the engine decides from). The
    status is ours to rewrite, so it never rejects an object: a part that does not parse (a condition, a
    field) is read as absent with a warning, the rest is kept; a status that is not a mapping is none."""
    whole = parse_resource(dict(SERVICE, status={"status": "Running", "observedGeneration": 3, "conditions": [READY]}))
    assert isinstance(whole, AIMService) and whole.status is not None
    assert (whole.status.status, whole.status.observed_generation) == ("Running", 3)
    assert [c.reason for c in whole.status.conditions or []] == ["RuntimeReady"]
    torn = {"type": "Failure", "status": "maybe"}  # no reason, message or time, and not a condition status
    with caplog.at_level(logging.WARNING, logger="tasks.boundary"):
        partial = parse_resource(dict(SERVICE, status={"status": "Exploded", "conditions": [torn, READY]}))
    assert isinstance(partial, AIMService) and partial.status is not None
    assert [c.type for c in partial.status.conditions or []] == ["Ready"]
    assert partial.status.status == "Pending"  # the unknown phase is left out: the model's default
    assert "status.conditions[0]" in caplog.text and "status.status" in caplog.text
    garbage = parse_resource(dict(SERVICE, status="a string"))
    assert isinstance(garbage, AIMService) and garbage.status is None
    # The spec still decides validity, status or not.
    assert parse_resource(dict(SERVICE, spec=dict(SERVICE["spec"], replicas=-2), status={"status": "Running"})) == (
        "spec.replicas",
        "Input should be greater than or equal to 0",
    )


def test_accepted_objects_keep_what_was_read(tmp_path: pathlib.Path) -> None:
    """``accept_as`` pairs the typed object (status included) with the object as read, which writes go through."""
    cluster = connect(str(write(tmp_path, dict(SERVICE, status={"status": "Running", "conditions": [READY]}))))
    [accepted] = accept_as(cluster, cluster.list("aim.silogen.ai/v1alpha1", "AIMService"), AIMService)
    assert accepted.model.status is not None and accepted.model.status.status == "Running"
    assert accepted.obj["status"]["conditions"] == [READY]


def test_one_validator_per_read_the_schema_check_only_where_no_api_server_validated(
    kube_server: object, kube_namespace: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object an API server serves was validated against its CRD schema when it was stored: the reader parses
    it with its API model only. A file's object was validated by nothing: the reader checks the schema too."""
    import engine.api.validate as validate
    from engine.api.crds import render_crds
    from tasks.clients.cluster.kube import KubeCluster

    checked: list[str] = []
    schema_errors = validate._crd_schema_errors

    def counted(info: object, manifest: dict) -> list:
        checked.append(manifest["metadata"]["name"])
        return schema_errors(info, manifest)  # type: ignore[arg-type]

    monkeypatch.setattr(validate, "_crd_schema_errors", counted)
    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])  # type: ignore[attr-defined]
    served = KubeCluster(api_client=kube_server.api_client())  # type: ignore[attr-defined]
    served.create(dict(SERVICE, metadata={"name": "ok", "namespace": kube_namespace}))
    kept = accept_as(served, served.list("aim.silogen.ai/v1alpha1", "AIMService", kube_namespace), AIMService)
    assert [a.name for a in kept] == ["ok"] and checked == []

    other = dict(SERVICE, metadata={"name": "other", "namespace": "ns"})
    files = connect(str(write(tmp_path, SERVICE, other)))
    kept = accept_as(files, files.list("aim.silogen.ai/v1alpha1", "AIMService"), AIMService)
    assert [a.name for a in kept] == ["ok", "other"] and checked == ["ok", "other"]
