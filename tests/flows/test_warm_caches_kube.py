"""The warm-caches flow in a cluster, end to end: the official client against the Kubernetes API test
server, whose job runner executes the fill Jobs (``modelplane cache fill`` from Modelplane's image) as
local processes with the PVC as a directory and the Secrets resolved; S3 is moto."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from engine.caches.identity import CACHE_MARKER
from flows.warm_caches import warm_caches
from tasks.clients.cluster import Cluster, ObjectRef
from tests.servers.kubeserver.fixture import KubeServer
from tests.servers.kubeserver.jobs import volume_path
from tests.servers.s3test.fixture import S3Server
from tests.waiting import wait_for

MC = ("aim.silogen.ai/v1alpha1", "ModelCache")
FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": bytes(range(256)) * 2048}


@pytest.fixture()
def kube(kube_server: KubeServer) -> tuple[KubeServer, Cluster, str]:
    from engine.api.crds import render_crds
    from tasks.clients.cluster.kube import KubeCluster

    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])
    return kube_server, KubeCluster(api_client=kube_server.api_client()), f"kubeconfig:{kube_server.kubeconfig}"


def seed(cluster: Cluster, ns: str, s3: S3Server, secret_key: str) -> str:
    bucket = s3.new_bucket()
    for key, body in FILES.items():
        s3.client().put_object(Bucket=bucket, Key=f"tiny/{key}", Body=body)
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-creds", "namespace": ns},
            "stringData": {"id": s3.access_key, "secret": secret_key},
        }
    )
    cluster.create(
        {
            "apiVersion": "aim.silogen.ai/v1alpha1",
            "kind": "AIMNamespaceConfig",
            "metadata": {"name": "default", "namespace": ns},
            "spec": {
                "credentials": {
                    "s3": [
                        {
                            "endpointUrl": s3.endpoint,
                            "accessKeyId": {"name": "s3-creds", "key": "id"},
                            "secretAccessKey": {"name": "s3-creds", "key": "secret"},
                        }
                    ]
                }
            },
        }
    )
    uri = f"s3://{bucket}/tiny"
    cluster.create(
        {
            "apiVersion": MC[0],
            "kind": MC[1],
            "metadata": {"name": "tiny", "namespace": ns},
            "spec": {"sourceUri": uri, "size": "1Gi"},
        }
    )
    return uri


def job_done(cluster: Cluster, ns: str, name: str) -> str | None:
    job = cluster.get("batch/v1", "Job", name, ns)
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return condition["type"]
    return None


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def test_a_fill_job_fills_the_pvc_and_the_verified_marker_makes_the_cache_available(
    prefect_harness: None, kube: tuple[KubeServer, Cluster, str], kube_namespace: str, s3_server: S3Server
) -> None:
    server, cluster, target = kube
    ns = kube_namespace
    uri = seed(cluster, ns, s3_server, s3_server.secret_key)

    report = warm_caches(
        cluster=target, namespaces=[ns], image="ghcr.io/modelplane/modelplane:test", image_pull_secrets=["regcred"]
    )
    assert [r.action for r in report.rows] == ["started Job tiny-fill-1"]
    cache = cluster.get(*MC, "tiny", ns)
    assert cache["status"]["status"] == "Progressing"
    assert cache["status"]["persistentVolumeClaim"] == "tiny-cache"
    pvc = cluster.get("v1", "PersistentVolumeClaim", "tiny-cache", ns)
    assert (
        pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    )  # spec.size as written, no headroom on top
    assert pvc["metadata"]["ownerReferences"][0]["name"] == "tiny"
    job = cluster.get("batch/v1", "Job", "tiny-fill-1", ns)
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "secret"}
    assert env["AWS_ENDPOINT_URL"]["value"] == s3_server.endpoint
    assert container["image"] == "ghcr.io/modelplane/modelplane:test"
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert job["spec"]["backoffLimit"] == 2 and job["spec"]["ttlSecondsAfterFinished"] == 3600
    assert job["spec"]["activeDeadlineSeconds"] == 3600  # a 1Gi volume at 1 MiB/s is under the hour's floor

    assert wait_for(lambda: job_done(cluster, ns, "tiny-fill-1")) == "Complete"
    warm_caches(cluster=target, namespaces=[ns], image="ghcr.io/modelplane/modelplane:test")

    cache = cluster.get(*MC, "tiny", ns)
    assert cache["status"]["status"] == "Available"
    assert conditions(cache)["Ready"] == ("True", "Warm")
    volume = volume_path(server.workdir, ns, "tiny-cache")
    for key, body in FILES.items():
        assert (volume / key).read_bytes() == body
    assert json.loads((volume / CACHE_MARKER).read_text())["source"] == uri

    again = warm_caches(cluster=target, namespaces=[ns], image="ghcr.io/modelplane/modelplane:test")
    assert [r.action for r in again.rows] == ["none"]
    assert [j["metadata"]["name"] for j in cluster.list("batch/v1", "Job", ns)] == ["tiny-fill-1"]


def test_a_complete_job_without_a_verified_marker_is_not_available(
    prefect_harness: None, kube: tuple[KubeServer, Cluster, str], kube_namespace: str, s3_server: S3Server
) -> None:
    _, cluster, target = kube
    ns = kube_namespace
    seed(cluster, ns, s3_server, s3_server.secret_key)
    # A Job of the first attempt that "completed" without running the fill (another image, status set by hand).
    cluster.patch_spec(
        ObjectRef.of(cluster.get(*MC, "tiny", ns)),
        {"metadata": {"annotations": {"modelplane.io/fill-attempts": "1/1"}}},
    )
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "tiny-cache", "namespace": ns, "labels": {"modelplane.io/cache": "tiny"}},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Gi"}}},
        }
    )
    job = cluster.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "tiny-fill-1", "namespace": ns, "labels": {"modelplane.io/cache": "tiny"}},
            "spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]}}
            },
        }
    )
    cluster.patch_status(
        ObjectRef.of(job),
        {
            "succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        },
    )

    warm_caches(cluster=target, namespaces=[ns], image="ghcr.io/modelplane/modelplane:test", retry_backoff_s=3600)

    cache = cluster.get(*MC, "tiny", ns)
    assert cache["status"]["status"] == "Failed"
    assert conditions(cache)["Failure"] == ("True", "VerificationFailed")


def test_a_failing_job_is_reported_retried_with_backoff_and_not_recreated_forever(
    prefect_harness: None, kube: tuple[KubeServer, Cluster, str], kube_namespace: str, s3_server: S3Server
) -> None:
    _, cluster, target = kube
    ns = kube_namespace
    wrong = "WRONGsecretVALUE1234567890"
    seed(cluster, ns, s3_server, wrong)

    def run(backoff: float) -> None:
        warm_caches(
            cluster=target,
            namespaces=[ns],
            image="ghcr.io/modelplane/modelplane:test",
            max_fill_attempts=2,
            retry_backoff_s=backoff,
            job_backoff_limit=0,
        )

    run(3600)
    assert wait_for(lambda: job_done(cluster, ns, "tiny-fill-1")) == "Failed"
    run(3600)
    cache = cluster.get(*MC, "tiny", ns)
    assert cache["status"]["status"] == "Failed"
    assert conditions(cache)["Failure"] == ("True", "AuthenticationFailed")
    assert conditions(cache)["Progressing"] == ("False", "RetryBackoff")
    assert wrong not in json.dumps(cache)

    run(3600)  # still backing off: no new Job
    assert [j["metadata"]["name"] for j in cluster.list("batch/v1", "Job", ns)] == ["tiny-fill-1"]

    run(0)  # the retry replaces the failed Job
    assert [j["metadata"]["name"] for j in cluster.list("batch/v1", "Job", ns)] == ["tiny-fill-2"]
    assert cluster.get(*MC, "tiny", ns)["status"]["status"] == "Progressing"
    assert wait_for(lambda: job_done(cluster, ns, "tiny-fill-2")) == "Failed"

    run(0)
    run(0)
    cache = cluster.get(*MC, "tiny", ns)
    assert cache["status"]["status"] == "Failed"
    assert conditions(cache)["Progressing"] == ("False", "AuthenticationFailed")
    assert "gave up after 2 attempts" in {c["type"]: c for c in cache["status"]["conditions"]}["Progressing"]["message"]
    assert [j["metadata"]["name"] for j in cluster.list("batch/v1", "Job", ns)] == ["tiny-fill-2"]
    assert wrong not in json.dumps(cache)


def test_a_fill_job_that_vanishes_is_reported_and_retried(
    prefect_harness: None, kube: tuple[KubeServer, Cluster, str], kube_namespace: str, s3_server: S3Server
) -> None:
    _, cluster, target = kube
    ns = kube_namespace
    seed(cluster, ns, s3_server, s3_server.secret_key)
    # Attempt 1 was started (PVC, attempts annotation, Progressing) but its Job is gone.
    cache = cluster.get(*MC, "tiny", ns)
    cluster.patch_spec(ObjectRef.of(cache), {"metadata": {"annotations": {"modelplane.io/fill-attempts": "1/1"}}})
    cluster.patch_status(ObjectRef.of(cache), {"status": "Progressing"})
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "tiny-cache", "namespace": ns, "labels": {"modelplane.io/cache": "tiny"}},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Gi"}}},
        }
    )

    warm_caches(cluster=target, namespaces=[ns], image="ghcr.io/modelplane/modelplane:test", retry_backoff_s=3600)
    cache = cluster.get(*MC, "tiny", ns)
    assert cache["status"]["status"] == "Failed"
    assert conditions(cache)["Failure"] == ("True", "FillJobMissing")
    assert cluster.list("batch/v1", "Job", ns) == []
