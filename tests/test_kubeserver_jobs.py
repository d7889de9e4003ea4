"""The test API server's job runner: Modelplane's Jobs run as local processes, as a kubelet would run them."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.servers.kubeserver.fixture import KubeServer
from tests.servers.kubeserver.jobs import volume_path
from tests.waiting import wait_for

IMAGE = "ghcr.io/modelplane/modelplane:test"


def job(
    name: str, script: str, *, env: list[dict[str, Any]] | None = None, backoff_limit: int = 0, image: str = IMAGE
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": image,
                            "command": ["python", "-c", script, "/data/out.txt", "/dev/termination-log"],
                            "env": env or [],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                        }
                    ],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "vol"}}],
                }
            },
        },
    }


def pvc(name: str = "vol") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def conditions(batch: client.BatchV1Api, name: str, ns: str) -> set[str]:
    status = batch.read_namespaced_job_status(name, ns).status
    return {c.type for c in (status.conditions or []) if c.status == "True"}


@pytest.fixture()
def apis(kube_server: KubeServer) -> tuple[client.CoreV1Api, client.BatchV1Api]:
    api = kube_server.api_client()
    return client.CoreV1Api(api), client.BatchV1Api(api)


def test_a_job_runs_with_secret_env_and_its_pvc_mounted(
    kube_server: KubeServer, kube_namespace: str, apis: Any
) -> None:
    core, batch = apis
    core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "s"}, "stringData": {"token": "hunter2"}})
    core.create_namespaced_persistent_volume_claim(kube_namespace, pvc())
    script = (
        "import os, sys; open(sys.argv[1], 'w').write(os.environ['TOKEN']);"
        "open(sys.argv[2], 'w').write('{\"done\": true}')"
    )
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}}]
    batch.create_namespaced_job(kube_namespace, job("ok", script, env=env))

    wait_for(lambda: "Complete" in conditions(batch, "ok", kube_namespace))
    assert batch.read_namespaced_job_status("ok", kube_namespace).status.succeeded == 1
    claim = core.read_namespaced_persistent_volume_claim_status("vol", kube_namespace)
    assert claim.status.phase == "Bound" and claim.status.capacity == {"storage": "1Gi"}
    assert (volume_path(kube_server.workdir, kube_namespace, "vol") / "out.txt").read_text() == "hunter2"
    pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=ok").items
    assert len(pods) == 1 and pods[0].status.phase == "Succeeded"
    assert pods[0].status.container_statuses[0].state.terminated.message == '{"done": true}'


def test_a_failing_job_is_retried_up_to_its_backoff_limit(
    kube_server: KubeServer, kube_namespace: str, apis: Any
) -> None:
    core, batch = apis
    core.create_namespaced_persistent_volume_claim(kube_namespace, pvc())
    batch.create_namespaced_job(
        kube_namespace, job("bad", "import sys; print('error: no luck'); sys.exit(3)", backoff_limit=1)
    )

    wait_for(lambda: "Failed" in conditions(batch, "bad", kube_namespace))
    status = batch.read_namespaced_job_status("bad", kube_namespace).status
    assert status.failed == 2
    failed = [c for c in status.conditions if c.type == "Failed"][0]
    assert failed.reason == "BackoffLimitExceeded"
    pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=bad").items
    assert len(pods) == 2
    terminated = pods[0].status.container_statuses[0].state.terminated
    assert terminated.exit_code == 3 and terminated.message == "error: no luck"


def test_a_missing_secret_keeps_the_pod_pending(kube_server: KubeServer, kube_namespace: str, apis: Any) -> None:
    core, batch = apis
    core.create_namespaced_persistent_volume_claim(kube_namespace, pvc())
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}]
    batch.create_namespaced_job(kube_namespace, job("wait", "pass", env=env))

    def waiting() -> Any:
        pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=wait").items
        statuses = pods[0].status.container_statuses if pods and pods[0].status else None
        return statuses and statuses[0].state.waiting

    state = wait_for(waiting)
    assert state.reason == "CreateContainerConfigError" and "absent" in state.message
    assert conditions(batch, "wait", kube_namespace) == set()


def test_jobs_of_other_images_are_left_alone(kube_server: KubeServer, kube_namespace: str, apis: Any) -> None:
    _, batch = apis
    batch.create_namespaced_job(kube_namespace, job("other", "pass", image="busybox:1"))
    time.sleep(0.5)
    status = batch.read_namespaced_job_status("other", kube_namespace).status
    assert not status.active and not status.succeeded and not status.conditions


def test_a_job_runs_in_the_images_workdir_with_its_service_accounts_credentials(
    kube_server: KubeServer, kube_namespace: str, apis: Any
) -> None:
    """Modelplane's image is this checkout: the process starts in its WORKDIR with its ENV, and the Pod's
    service account is its in-cluster identity (a kubeconfig whose requests the server logs under that name)."""
    import json
    import pathlib

    from tests.servers.kubeserver.jobs import modelplane_image

    core, batch = apis
    core.create_namespaced_persistent_volume_claim(kube_namespace, pvc())
    script = (
        "import json, os, sys; from kubernetes import client, config; config.load_kube_config();"
        f"client.CoreV1Api().list_namespaced_config_map('{kube_namespace}');"
        "open(sys.argv[1], 'w').write(json.dumps({'cwd': os.getcwd(), 'home': os.environ['MODELPLANE_HOME']}))"
    )
    manifest = job("sa", script)
    manifest["spec"]["template"]["spec"]["serviceAccountName"] = "runner"
    kube_server.reset_stats()
    batch.create_namespaced_job(kube_namespace, manifest)

    wait_for(lambda: conditions(batch, "sa", kube_namespace) & {"Complete", "Failed"}, timeout=60)
    assert "Complete" in conditions(batch, "sa", kube_namespace)
    seen = json.loads((volume_path(kube_server.workdir, kube_namespace, "vol") / "out.txt").read_text())
    checkout = str(pathlib.Path(__file__).resolve().parents[1])
    assert seen == {"cwd": checkout, "home": checkout}, f"the WORKDIR {modelplane_image().workdir} is the checkout"
    calls = [
        r for r in kube_server.requests() if r["path"].startswith(f"/api/v1/namespaces/{kube_namespace}/configmaps")
    ]
    assert [r["user"] for r in calls] == [f"system:serviceaccount:{kube_namespace}:runner"]
    assert {r["user"] for r in kube_server.requests() if "/jobs" in r["path"]} == {"admin"}
