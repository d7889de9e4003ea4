"""The exit-code contract (docs/platform.md "Exit codes", flows/exitcodes.py) on the paths that broke it:

usage errors are one ``error:`` line (no click box); the AIM commands count failed images, templates not
Available and services not Running as a degraded run; a directory of ``.json`` manifests is read (and
written back as JSON); a live cluster without Nodes is "no Node fits", not "Nodes not visible".
Runs that need a flow are in tests/flows/test_exit_contract_flows.py.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.discover_models import DiscoveryReport
from flows.exitcodes import ExitCode, exit_code
from flows.resolve_templates import ResolveReport
from flows.rollout_services import RolloutReport
from tests.test_exitcodes import EXAMPLES, assert_one_line_error, invoke, modelplane


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("optimize", "--bogus"), "No such option: --bogus"),
        (("discover-models", "--resync-seconds", "soon"), "--resync-interval"),
        (("serve-openmodel",), "Missing argument"),
        (("no-such-command",), "No such command"),
        (("fill-cache", "hf://a/b"), "Missing argument"),
    ],
)
def test_usage_errors_are_one_line(args: tuple[str, ...], fragment: str) -> None:
    result = invoke(*args)
    assert_one_line_error(result, fragment)
    assert "╭" not in result.stderr and "Usage:" not in result.stderr


def test_usage_error_from_the_real_entry_point_is_one_line() -> None:
    assert_one_line_error(
        modelplane("optimize", "--rate-window", "1 minute", "--cluster", str(EXAMPLES)), "--rate-window"
    )


def test_help_still_exits_zero() -> None:
    result = CliRunner().invoke(app, ["discover-models", "--help"])
    assert result.exit_code == 0 and "--resync-interval" in result.stdout and "DURATION" in result.stdout


def test_aim_rows_that_are_not_ok_make_a_degraded_run() -> None:
    """The reports' ``degraded`` lists (the CLI's exit 3 and the run's Degraded state) name every AIM object
    that is not done: an image not read, a template not Available, a service not Running."""
    models = DiscoveryReport(
        rows=[
            SimpleNamespace(name="a", image="r/a:1", result="ok"),  # type: ignore[list-item]
            SimpleNamespace(name="b", image="r/b:1", result="ImageNotFound"),
        ]
    )
    assert models.degraded == ["AIMClusterModel b: image r/b:1: ImageNotFound"]
    templates = ResolveReport(
        rows=[
            SimpleNamespace(namespace="n", name=s, status=s, reason="")  # type: ignore[misc]
            for s in ("Available", "Failed", "Progressing", "Pending")
        ]
    )
    assert [p.split(": ")[1] for p in templates.degraded] == ["Failed", "Progressing", "Pending"]
    services = RolloutReport(
        rows=[
            SimpleNamespace(namespace="n", name=s, status=s, reason="R")  # type: ignore[misc]
            for s in ("Running", "Failed", "Degraded", "Starting", "Pending")
        ]
    )
    assert len(services.degraded) == 4 and exit_code(services.degraded) == ExitCode.DEGRADED
    clean = DiscoveryReport(rows=[SimpleNamespace(name="a", image="i", result="ok")])  # type: ignore[list-item]
    assert exit_code(clean.degraded) == ExitCode.OK


def _as_json_directory(source: pathlib.Path, target: pathlib.Path) -> int:
    """Every object of the YAML manifests under ``source`` as one ``.json`` file each under ``target``."""
    from tasks.manifests import read_manifest_documents

    documents, errors = read_manifest_documents(source)
    assert not errors
    target.mkdir()
    for index, (_, obj) in enumerate(documents):
        (target / f"{index:03d}.json").write_text(json.dumps(obj, indent=2, default=str) + "\n")
    return len(documents)


def test_a_directory_of_json_manifests_is_read(tmp_path: pathlib.Path) -> None:
    count = _as_json_directory(EXAMPLES, tmp_path / "json")
    result = invoke("validate-manifests", "--cluster", str(tmp_path / "json"), "--json")
    rows = json.loads(result.stdout)
    assert len(rows) == count > 10 and result.returncode in (ExitCode.OK, ExitCode.DEGRADED)
    yaml_rows = json.loads(invoke("validate-manifests", "--cluster", str(EXAMPLES), "--json").stdout)
    assert sorted(r["result"] == "valid" for r in rows) == sorted(r["result"] == "valid" for r in yaml_rows)


def test_json_manifests_are_written_back_as_json(tmp_path: pathlib.Path) -> None:
    from tasks.clients.cluster import connect

    (tmp_path / "cm.json").write_text(
        '{"apiVersion": "v1", "kind": "ConfigMap",\n'
        ' "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}}\n'
    )
    (tmp_path / "other.json").write_text('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}\n')
    before = (tmp_path / "other.json").read_bytes()
    cluster = connect(str(tmp_path))
    assert {o["metadata"]["name"] for o in cluster.list("v1", "ConfigMap")} == {"a", "b"}
    cluster.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "w"}}
    )
    written = json.loads((tmp_path / "cm.json").read_text())
    assert written["data"] == {"k": "w"} and "uid" not in written["metadata"]
    assert (tmp_path / "other.json").read_bytes() == before


def test_a_cluster_without_nodes_is_not_a_cluster_whose_nodes_are_hidden(tmp_path) -> None:
    from tasks.clients.cluster import connect
    from tasks.serve_openmodel import node_labels
    from tests.servers.kubeserver.fixture import start_kube_server

    server = start_kube_server(tmp_path / "kube")  # its own: no Node at all, and none of the session's touched
    try:
        assert node_labels(connect(f"kubeconfig:{server.kubeconfig}")) == []  # no Node: nothing fits or moves
    finally:
        server.stop()
    shutil.copytree(EXAMPLES, tmp_path / "c")
    for path in (tmp_path / "c").rglob("*.yaml"):
        if "kind: Node" in path.read_text():
            path.unlink()
    assert node_labels(connect(str(tmp_path / "c"))) is None  # manifests that describe no Node: not checked
