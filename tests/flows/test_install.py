"""The one-command install (deployments/install): its generated files in sync, the base and both overlays render
with `kubectl kustomize` into strictly valid objects holding everything an optimize run needs, an overlay sets the
image, Prometheus and the Prefect API in one place each, and `kubectl apply -k` installs it on the Kubernetes API
test server, whose job runner then runs the registration Job against this worker's Prefect API."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pathlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml

from engine.api.crds import render_crds
from engine.optimize.config import ACCELERATOR_COSTS_CONFIGMAP, SATURATION_CONFIGMAP, SERVICE_CLASSES_CONFIGMAP
from flows.deployments import CONTROL_LOOP, KUBERNETES_POOL, deployment_entries
from flows.image import DEFAULT_REPOSITORY, IMAGE
from flows.install_manifests import BASE, REGISTER_JOB, SERVING, SETTINGS, render_install
from flows.parameters import SYSTEM_NAMESPACE
from tests.servers.kubeserver.fixture import KubeServer, start_kube_server

REPO = pathlib.Path(__file__).resolve().parents[2]
INSTALL = REPO / "deployments" / "install"
TARGETS = {
    "install": INSTALL,
    "laptop": INSTALL / "overlays" / "laptop",
    "production": INSTALL / "overlays" / "production",
}
# The Kubernetes versions the rendered objects are validated against: the oldest and the newest minor that
# kubernetes-validate 1.3x knows and the cloud providers still support (batch/v1 Jobs' ttlSecondsAfterFinished,
# apps/v1, rbac v1 and apiextensions v1 are GA in all of them).
KUBERNETES_VERSIONS = ("1.30", "1.33")


def kustomize(target: pathlib.Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize` renders from ``target`` (a fresh copy each call: tests may change them)."""
    return [doc for doc in yaml.safe_load_all(kustomized(target)) if doc]


@functools.cache
def kustomized(target: pathlib.Path) -> str:
    """`kubectl kustomize` run once per target in a worker: the tests of this module read the same three targets
    a dozen times, and the checked-in files do not change during a run."""
    done = subprocess.run(["kubectl", "kustomize", str(target)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def by_kind_and_name(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in objects}


def containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        container
        for obj in objects
        if obj["kind"] in ("Deployment", "Job")
        for container in obj["spec"]["template"]["spec"]["containers"]
    ]


def test_the_generated_files_are_in_sync() -> None:
    for name, text in render_install().items():
        assert (BASE / name).read_text() == text, f"run `python -m flows.install_manifests` ({name})"


def test_the_crds_kustomization_lists_every_generated_crd() -> None:
    listed = yaml.safe_load((REPO / "deployments" / "crds" / "Kustomization").read_text())["resources"]
    assert sorted(listed) == sorted(render_crds()), "list every file of deployments/crds in its Kustomization"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("target", TARGETS, ids=list(TARGETS))
def test_every_rendered_object_is_strictly_valid(target: str, version: str) -> None:
    objects = kustomize(TARGETS[target])
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("target", TARGETS, ids=list(TARGETS))
def test_the_install_holds_what_an_optimize_run_needs(target: str) -> None:
    objects = by_kind_and_name(kustomize(TARGETS[target]))
    assert ("Namespace", SYSTEM_NAMESPACE) in objects
    crds = {yaml.safe_load(text)["metadata"]["name"] for text in render_crds().values()}
    assert crds <= {name for kind, name in objects if kind == "CustomResourceDefinition"}
    for name in (ACCELERATOR_COSTS_CONFIGMAP, SERVICE_CLASSES_CONFIGMAP, SATURATION_CONFIGMAP, SETTINGS):
        assert objects[("ConfigMap", name)]["metadata"]["namespace"] == SYSTEM_NAMESPACE, name
    assert set(objects[("ConfigMap", SETTINGS)]["data"]) == {"PROMETHEUS_URL", "PREFECT_API_URL", "MODELPLANE_IMAGE"}
    assert {
        ("ServiceAccount", "modelplane"),
        ("ClusterRole", "modelplane"),
        ("ClusterRoleBinding", "modelplane"),
    } <= set(objects)
    assert {("Deployment", "prefect-worker"), ("Role", "prefect-worker"), ("Job", REGISTER_JOB)} <= set(objects)
    job = objects[("Job", REGISTER_JOB)]["spec"]["template"]["spec"]["containers"][0]
    assert job["command"][-2:] == ["register-deployments", "--without-control-loop"]
    # The control loop runs in one long-lived process, not as a Job a minute: two replicas, one leading.
    serving = objects[("Deployment", SERVING)]
    pod = serving["spec"]["template"]["spec"]
    (loop,) = pod["containers"]
    assert {"serve-deployments", "--control-loop", "--leader-elect"} <= set(loop["command"]), loop["command"]
    assert serving["spec"]["replicas"] == 2 and pod["serviceAccountName"] == "modelplane"
    assert loop["livenessProbe"]["httpGet"]["path"] == loop["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert {e["name"] for e in loop["env"]} >= {"POD_NAME", "POD_NAMESPACE"}
    # A Prometheus bearer token is a secret: the loop reads the operator's Secret `modelplane` after the ConfigMap.
    assert loop["envFrom"][-1] == {"secretRef": {"name": SETTINGS, "optional": True}}
    for container in containers(list(objects.values())):
        assert {"configMapRef": {"name": SETTINGS}} in container["envFrom"], container["name"]


def test_the_base_runs_modelplanes_image_of_this_version() -> None:
    objects = kustomize(INSTALL)
    assert {container["image"] for container in containers(objects)} == {IMAGE}
    assert by_kind_and_name(objects)[("ConfigMap", SETTINGS)]["data"]["MODELPLANE_IMAGE"] == IMAGE


@pytest.mark.parametrize("overlay", ["laptop", "production"])
def test_an_overlay_sets_the_image_prometheus_and_prefect_once(overlay: str) -> None:
    kustomization = yaml.safe_load((TARGETS[overlay] / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    reference = f"{image['newName']}:{image['newTag']}"
    (generator,) = kustomization["configMapGenerator"]
    literals = dict(item.split("=", 1) for item in generator["literals"])
    assert set(kustomization) == {"apiVersion", "kind", "resources", "images", "configMapGenerator"}
    objects = kustomize(TARGETS[overlay])
    assert {container["image"] for container in containers(objects)} == {reference}
    assert DEFAULT_REPOSITORY not in yaml.safe_dump_all(objects)
    settings = by_kind_and_name(objects)[("ConfigMap", SETTINGS)]["data"]
    assert settings == {**literals, "MODELPLANE_IMAGE": reference}


# ------------------------------------------------------------------------------- on the API test server


@pytest.fixture(scope="module")
def install_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """A private, empty API server: the install creates the namespace and the CRDs itself."""
    server = start_kube_server(tmp_path_factory.mktemp("install-kubeserver"))
    try:
        yield server
    finally:
        server.stop()


def kubectl_apply(server: KubeServer, target: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """``kubectl apply -k``; ``--validate=false``: the test server serves no OpenAPI document (/openapi/v2) for
    kubectl's client-side validation (the objects are validated strictly above instead)."""
    return subprocess.run(
        ["kubectl", "--kubeconfig", server.kubeconfig, "apply", "-k", str(target), "--validate=false"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_kubectl_apply_installs_every_object_and_a_second_apply_changes_nothing(install_server: KubeServer) -> None:
    target = TARGETS["laptop"]  # its image is no Modelplane image the job runner runs: nothing registers here
    first = kubectl_apply(install_server, target)
    assert first.returncode == 0, first.stderr
    api = install_server.api_client()
    from kubernetes import client, dynamic

    resources = dynamic.DynamicClient(api).resources
    for obj in kustomize(target):
        kind = resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        stored = kind.get(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
        assert stored.metadata.name == obj["metadata"]["name"]
    assert client.CoreV1Api(api).read_namespaced_config_map(SETTINGS, SYSTEM_NAMESPACE).data["PROMETHEUS_URL"] == ""
    again = kubectl_apply(install_server, target)
    assert again.returncode == 0, again.stderr
    assert all(line.endswith(" unchanged") for line in again.stdout.splitlines()), again.stdout


def test_the_registration_job_registers_every_deployment(
    install_server: KubeServer, prefect_api: str, tmp_path: pathlib.Path
) -> None:
    """An overlay naming this worker's Prefect API and a Prometheus; the job runner runs the Job as Modelplane's
    image would (`python -m flows.cli register-deployments` in its WORKDIR, this checkout), with the ConfigMap
    `modelplane` as its environment: the pool and every deployment land on the API with those settings."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    prometheus = "http://prometheus.example.org:9090"
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(BASE, overlay)],
                "configMapGenerator": [
                    {
                        "name": SETTINGS,
                        "namespace": SYSTEM_NAMESPACE,
                        "behavior": "merge",
                        "literals": [f"PREFECT_API_URL={prefect_api}", f"PROMETHEUS_URL={prometheus}"],
                    }
                ],
            }
        )
    )
    names = [entry["name"] for entry in deployment_entries() if entry["name"] not in CONTROL_LOOP]

    async def registered() -> list[Any]:
        async with get_client() as prefect:
            return [
                deployment
                for deployment in await prefect.read_deployments()
                if deployment.name in names and deployment.work_pool_name == KUBERNETES_POOL
            ]

    async def remove(deployments: list[Any]) -> None:
        async with get_client() as prefect:
            for deployment in deployments:
                await prefect.delete_resource_owned_automations(f"prefect.deployment.{deployment.id}")
                await prefect.delete_deployment(deployment.id)
            with contextlib.suppress(ObjectNotFound):  # the Job failed before creating it
                await prefect.delete_work_pool(KUBERNETES_POOL)

    assert not asyncio.run(registered())
    try:
        applied = kubectl_apply(install_server, overlay)
        assert applied.returncode == 0, applied.stderr
        from kubernetes import client

        jobs = client.BatchV1Api(install_server.api_client())
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            status = jobs.read_namespaced_job(REGISTER_JOB, SYSTEM_NAMESPACE).status
            if status.succeeded or status.failed:
                break
            time.sleep(1)
        logs = "\n".join(
            path.read_text() for path in install_server.workdir.glob(f"**/pods/{SYSTEM_NAMESPACE}/{REGISTER_JOB}-*/log")
        )
        assert status.succeeded == 1, logs
        deployments = asyncio.run(registered())
        assert sorted(deployment.name for deployment in deployments) == sorted(names), logs
        for deployment in deployments:
            assert deployment.job_variables["env"] == {"PROMETHEUS_URL": prometheus, "MODELPLANE_IMAGE": IMAGE}
            assert deployment.job_variables["image"] == IMAGE
    finally:
        asyncio.run(remove(asyncio.run(registered())))
