"""DESIGN.md, "Adding a custom resource kind": a kind is its registry entry and its model, nothing else.

``Gizmo`` below exists only in this file: a pydantic model and one :class:`KindInfo`, added to the kind
registry with :func:`engine.api.registry.registered`. With no other edit it gets a CRD (``modelplane
crds``), validation (``modelplane validate-manifests`` and the boundary reader), a REST mapping and schema
enforcement in both cluster backends, and leaves no trace once the block ends.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any, Literal

import kubernetes_validate
import pytest
import yaml
from pydantic import Field
from typer.testing import CliRunner

from engine.api.crds import build_crd, crd_file_name, render_crds
from engine.api.meta import Conditions, KubeModel, ListMeta, ObjectMeta
from engine.api.registry import KindInfo, PrinterColumn, kind_info, kinds, registered
from engine.api.validate import ManifestInvalid, load_documents, parse_object
from flows.cli import app
from tasks.boundary import accept, collecting
from tasks.clients.cluster import LocalCluster, ObjectRef
from tasks.clients.cluster.errors import Invalid, NotFound
from tasks.clients.cluster.resources import resource_for
from tasks.clients.events import event_name

GIZMO_API = "gizmos.example.test/v1"


class GizmoSpec(KubeModel):
    """GizmoSpec is what a Gizmo asks for."""

    size: int = Field(ge=1, le=8)
    """How many parts the gizmo has."""
    color: Literal["red", "blue"] = "red"
    """Paint colour."""


class GizmoStatus(KubeModel):
    """GizmoStatus is what the controller observed."""

    status: Literal["Pending", "Ready", "Failed"] | None = None
    """Lifecycle phase."""
    conditions: Conditions | None = None
    """Latest observations."""


class Gizmo(KubeModel):
    """Gizmo is a kind that exists only in this test."""

    api_version: Literal["gizmos.example.test/v1"] = Field(GIZMO_API, alias="apiVersion")
    kind: Literal["Gizmo"] = "Gizmo"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: GizmoSpec
    """Spec is the desired gizmo."""
    status: GizmoStatus | None = None
    """Status is the observed gizmo."""


class GizmoList(KubeModel):
    """GizmoList is a list of Gizmos."""

    api_version: Literal["gizmos.example.test/v1"] = Field(GIZMO_API, alias="apiVersion")
    kind: Literal["GizmoList"] = "GizmoList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[Gizmo] = Field(default_factory=list)


GIZMO = KindInfo(
    GIZMO_API,
    "Gizmo",
    "gizmos",
    __name__,
    short_names=("gz",),
    event_name="gizmo",
    printer_columns=(PrinterColumn("Size", ".spec.size", "integer"), PrinterColumn("Status", ".status.status")),
)


def gizmo(name: str, size: Any, namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GIZMO_API,
        "kind": "Gizmo",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size, **spec},
    }


@pytest.fixture
def with_gizmo() -> Iterator[KindInfo]:
    with registered(GIZMO):
        yield GIZMO


def test_the_kind_is_unknown_outside_the_block() -> None:
    assert kind_info(GIZMO_API, "Gizmo") is None and GIZMO not in kinds()
    with pytest.raises(NotFound):
        resource_for(GIZMO_API, "Gizmo")
    assert crd_file_name(GIZMO) not in render_crds()
    assert load_documents([("a#0", gizmo("g", 0))]).passthrough  # not ours: passed through unvalidated


def test_it_gets_a_crd(with_gizmo: KindInfo) -> None:
    rendered = render_crds()
    crd = yaml.safe_load(rendered[crd_file_name(with_gizmo)])
    kubernetes_validate.validate(crd, "1.30", strict=True)
    assert crd["metadata"]["name"] == "gizmos.gizmos.example.test" and crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["size"]["minimum"] == 1 and spec["properties"]["size"]["maximum"] == 8
    assert spec["properties"]["color"]["description"] == "Paint colour."
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Size", "Status"]
    result = CliRunner().invoke(app, ["crds"])
    assert result.exit_code == 0 and "kind: Gizmo" in result.output


def test_it_is_validated_by_the_cli_and_the_boundary_reader(with_gizmo: KindInfo, tmp_path: pathlib.Path) -> None:
    assert isinstance(parse_object(gizmo("ok", 2)), Gizmo)
    with pytest.raises(ManifestInvalid) as bad:
        parse_object(gizmo("bad", 9))
    assert bad.value.field_path == "spec.size"
    (tmp_path / "g.yaml").write_text(yaml.safe_dump_all([gizmo("ok", 2), gizmo("bad", "two")]))
    result = CliRunner().invoke(app, ["validate", "--cluster", str(tmp_path)])
    assert result.exit_code == 3, result.output
    assert "spec.size" in result.output and "Gizmo" in result.output


def test_the_local_backend_serves_and_enforces_it(with_gizmo: KindInfo, tmp_path: pathlib.Path) -> None:
    cluster = LocalCluster(str(tmp_path))
    created = cluster.create({**gizmo("g", 3), "spec": {"size": 3, "extra": "pruned"}})
    assert created["spec"] == {"size": 3, "color": "red"}  # unknown field pruned, default filled
    with pytest.raises(Invalid) as bad:
        cluster.create(gizmo("h", 0))
    assert bad.value.field == "spec.size"
    cluster.patch_status(ObjectRef.of(created), {"status": "Ready"})
    assert cluster.get(GIZMO_API, "Gizmo", "g", "ns")["status"] == {"status": "Ready"}
    assert event_name(ObjectRef.of(created), "changed") == "modelplane.gizmos.gizmo.changed"


def test_the_boundary_reader_marks_an_invalid_one_failed(with_gizmo: KindInfo, tmp_path: pathlib.Path) -> None:
    (tmp_path / "g.yaml").write_text(yaml.safe_dump_all([gizmo("ok", 2), gizmo("bad", 2, color="green")]))
    cluster = LocalCluster(str(tmp_path))
    with collecting() as rejected:
        kept = accept(cluster, cluster.list(GIZMO_API, "Gizmo"))
    assert [o["metadata"]["name"] for o in kept] == ["ok"]
    assert any("spec.color" in line for line in rejected)
    assert cluster.get(GIZMO_API, "Gizmo", "bad", "ns")["status"]["status"] == "Failed"  # its status has a phase


def test_the_kube_backend_maps_it_to_rest(with_gizmo: KindInfo, kube_server: Any, kube_namespace: str) -> None:
    from tasks.clients.cluster.kube import KubeCluster

    assert (
        resource_for(GIZMO_API, "Gizmo").path("ns", "g", "status")
        == "/apis/gizmos.example.test/v1/namespaces/ns/gizmos/g/status"
    )
    kube_server.install_crds([build_crd(with_gizmo)])
    cluster = KubeCluster(api_client=kube_server.api_client())
    cluster.create(gizmo("g", 4, namespace=kube_namespace))
    assert [o["spec"] for o in cluster.list(GIZMO_API, "Gizmo", kube_namespace)] == [{"size": 4, "color": "red"}]
    with pytest.raises(Invalid) as bad:
        cluster.create(gizmo("h", 9, namespace=kube_namespace))
    assert "spec.size" in str(bad.value)
