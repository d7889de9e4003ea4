"""The distributed path end to end: a real Prefect server, the work pool `modelplane register-deployments` creates from
deployments/work-pool-template.json, the optimize deployment registered by the documented `prefect deploy`, and
the official worker (`prefect worker start --type kubernetes`, prefect-kubernetes) pointed at the Kubernetes API
test server. The worker creates the flow run's Job; the test server's job runner runs it as Modelplane's image
would (tests/servers/kubeserver/jobs.py: `prefect flow-run execute` from this checkout, the pull step's
$MODELPLANE_HOME, the `modelplane` service account's credentials); the run completes, its artifact is
published, the example cluster's VariantAutoscalings get their status, and the worker's observer reports the
Pod's phases as Prefect events.

Every API call is attributed (the worker and the Pod use their service accounts' tokens): the worker's are
checked against the Role of deployments/worker/worker.yaml, the flow run's against deployments/rbac.yaml.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from flows.deployments import KUBERNETES_POOL, ensure_work_pool
from flows.image import IMAGE
from flows.install_manifests import SETTINGS
from flows.worker_manifests import API_KEY_SECRET, API_KEY_SECRET_KEY, NAMESPACE, WORKER_RULES, worker_objects
from flows.worker_manifests import NAME as WORKER
from tests.flows.platform_support import cluster_server, load_example_cluster  # noqa: F401
from tests.flows.prefect_server import REPO, PrefectServer
from tests.flows.test_rbac import Permission, permission_of, role_permissions
from tests.servers.kubeserver.fixture import KubeServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

API_KEY = "pnu_modelplane-test-key-0123456789"
WORKER_USER = f"system:serviceaccount:{NAMESPACE}:{WORKER}"
FLOW_USER = f"system:serviceaccount:{NAMESPACE}:modelplane"  # the work pool's service_account_name


# Rules of the worker's Role a successful run does not reach, with the prefect-kubernetes 0.8 code that uses them.
WORKER_RULES_ELSEWHERE: dict[Permission, str] = {
    ("batch", "jobs", "delete"): "cancelling a flow run deletes its Job (KubernetesWorker.kill_infrastructure)",
    ("batch", "jobs", "get"): "before calling a run crashed, the observer reads its Job back (observer._read_job_uid)",
    (
        "",
        "pods/log",
        "get",
    ): "a run that crashed before reaching the API gets its Pod's log (observer._fetch_crashed_pod_logs)",
}


def granted(rules: list[dict[str, list[str]]]) -> set[Permission]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.fixture(scope="module")
def platform(
    prefect_server: PrefectServer, cluster_server: KubeServer
) -> Iterator[tuple[PrefectServer, KubeServer, dict[str, Any]]]:  # noqa: F811
    """The example cluster on the API test server, the Kubernetes pool, the optimize deployment and a worker."""
    load_example_cluster(cluster_server)

    async def create_pool() -> bool:
        from prefect.client.orchestration import PrefectClient

        async with PrefectClient(api=prefect_server.api_url) as prefect:
            return await ensure_work_pool(prefect, KUBERNETES_POOL, "kubernetes")

    assert asyncio.run(create_pool()) is True
    deploy = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefect",
            "--no-prompt",
            "deploy",
            "--prefect-file",
            "deployments/prefect.yaml",
            "--name",
            "optimize",
        ],
        cwd=REPO,
        env=prefect_server.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    deployment = prefect_server.get("/deployments/name/optimize/optimize")
    # An API key, as Prefect Cloud's: the worker reads it from the Secret, the flow-run Job must only refer to it.
    k8s.CoreV1Api(cluster_server.api_client()).create_namespaced_secret(
        NAMESPACE,
        {"metadata": {"name": API_KEY_SECRET}, "stringData": {API_KEY_SECRET_KEY: API_KEY}},
    )
    cluster_server.reset_stats()
    prefect_server.start_worker(
        KUBERNETES_POOL,
        worker_type="kubernetes",
        env={
            "KUBECONFIG": cluster_server.kubeconfig_as(WORKER_USER, NAMESPACE),
            "PREFECT_API_KEY": API_KEY,
            # deployments/worker/worker.yaml's settings: the observer watches the Jobs' namespace only, and the
            # Jobs get the API key from the Secret.
            **{
                item["name"]: item["value"] for item in worker_env() if item["name"].startswith("PREFECT_INTEGRATIONS_")
            },
        },
    )
    yield prefect_server, cluster_server, deployment


def test_the_deployment_runs_the_image_from_its_workdir(
    platform: tuple[PrefectServer, KubeServer, dict[str, Any]],
) -> None:
    _, _, deployment = platform
    assert deployment["work_pool_name"] == KUBERNETES_POOL
    assert deployment["job_variables"]["image"] == IMAGE
    assert deployment["pull_steps"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": "{{ $MODELPLANE_HOME }}"}}
    ]


def test_a_flow_run_executes_in_the_job_the_worker_creates(
    platform: tuple[PrefectServer, KubeServer, dict[str, Any]], pushgateway: Any
) -> None:
    prefect, kube, deployment = platform
    # The install's settings reach flow-run Jobs as they reach the control loop: the ConfigMap names the Pushgateway
    # the run publishes to, and the operator's Secret of the same name (where a Prometheus token goes) the cluster
    # name it publishes under.
    core = k8s.CoreV1Api(kube.api_client())
    core.create_namespaced_config_map(
        NAMESPACE, {"metadata": {"name": SETTINGS}, "data": {"MODELPLANE_PUSHGATEWAY_URL": pushgateway.url}}
    )
    core.create_namespaced_secret(
        NAMESPACE, {"metadata": {"name": SETTINGS}, "stringData": {"MODELPLANE_CLUSTER_NAME": "from-settings"}}
    )
    # Relative to the image's WORKDIR, where the pull step changes to; `cluster` is left to its default: the
    # Pod's in-cluster credentials.
    run = prefect.create_run(deployment["id"], {"metrics_file": "deployments/example-metrics.yaml"})
    final = prefect.wait_for_run(run["id"], timeout=180)
    assert final["state"]["type"] == "COMPLETED", (
        prefect.run_logs(run["id"])
        + "\n--- kubeserver ---\n"
        + (kube.workdir / "kubeserver.log").read_text(errors="replace")[-3000:]
    )
    assert final["infrastructure_pid"].startswith(f"{NAMESPACE}:")
    print(
        f"flow run: created -> running {seconds(run['created'], final['start_time']):.1f} s, "
        f"running -> completed {seconds(final['start_time'], final['end_time']):.1f} s"
    )

    artifacts = prefect.post("/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})
    assert sorted((a["key"], a["type"]) for a in artifacts) == [
        ("optimize-allocation", "table"),
        ("optimize-reasons", "table"),
    ], artifacts

    api = kube.api_client()

    def finished_jobs() -> list[Any]:  # the process reports the run Completed a moment before it exits
        jobs = (
            k8s.BatchV1Api(api)
            .list_namespaced_job(NAMESPACE, label_selector=f"prefect.io/flow-run-id={run['id']}")
            .items
        )
        return jobs if jobs and all(job.status.succeeded or job.status.failed for job in jobs) else []

    jobs = wait_for(finished_jobs, 60, "the Job to finish")
    assert len(jobs) == 1 and jobs[0].status.succeeded == 1
    container = jobs[0].spec.template.spec.containers[0]
    assert container.image == IMAGE and container.args == ["prefect", "flow-run", "execute"]
    assert jobs[0].spec.template.spec.service_account_name == "modelplane"
    sources = [(source.config_map_ref or source.secret_ref) for source in container.env_from or []]
    assert [(source.name, source.optional) for source in sources] == [(SETTINGS, True)] * 2, (
        "the Job reads the install's settings ConfigMap and Secret, and starts without them"
    )
    assert 'cluster="from-settings"' in pushgateway.metrics(), "the run published where the settings say"
    keys = [item for item in container.env if item.name == "PREFECT_API_KEY"]
    assert [
        (item.value, item.value_from and (item.value_from.secret_key_ref.name, item.value_from.secret_key_ref.key))
        for item in keys
    ] == [(None, (API_KEY_SECRET, API_KEY_SECRET_KEY))], "the Job refers to the Secret"
    assert API_KEY not in json.dumps(api.sanitize_for_serialization(jobs[0])), "the key itself is in no Job"
    variant = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        "llmd.ai", "v1alpha1", "llm-serving", "variantautoscalings", "llama-3-1-8b-h100"
    )
    assert variant.get("status", {}).get("conditions"), "the flow run wrote the cycle's status through the API server"

    expected = {"prefect.kubernetes.pod.running", "prefect.kubernetes.pod.succeeded"}
    wait_for(lambda: expected <= pod_events(prefect, run["id"]), 60, f"the observer's events {expected}")

    calls = kube.requests(limit=0)
    worker_calls = [c for c in calls if c["user"] == WORKER_USER]
    flow_calls = [c for c in calls if c["user"] == FLOW_USER]
    assert any(c["verb"] == "create" and "/jobs" in c["path"] for c in worker_calls), "the worker created the Job"
    assert any(c["verb"] == "watch" and "/pods" in c["path"] for c in worker_calls), "the observer watched the Pods"
    assert flow_calls, "the flow run used the Pod's service account"
    worker_used = {p for c in worker_calls if (p := permission_of(c)) is not None}
    assert worker_used <= granted(WORKER_RULES), (
        f"deployments/worker/worker.yaml must grant {worker_used - granted(WORKER_RULES)}"
    )
    unused = granted(WORKER_RULES) - worker_used - set(WORKER_RULES_ELSEWHERE)
    assert not unused, f"the worker's Role grants what it does not use (remove, or say where it is used): {unused}"
    outside = {c["path"] for c in worker_calls if permission_of(c) and f"/namespaces/{NAMESPACE}/" not in c["path"]}
    assert not outside, f"the worker's Role is namespaced: calls outside {NAMESPACE}: {outside}"
    flow_used = {p for c in flow_calls if (p := permission_of(c)) is not None}
    assert flow_used <= role_permissions(), f"deployments/rbac.yaml must grant {flow_used - role_permissions()}"


def worker_env() -> list[dict[str, Any]]:
    """The env of the worker's container in deployments/worker/worker.yaml."""
    (deployment,) = [obj for obj in worker_objects() if obj["kind"] == "Deployment"]
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["env"])


def pod_events(prefect: PrefectServer, run_id: str) -> set[str]:
    """The names of the prefect.kubernetes.pod.* events related to the flow run."""
    return {e["event"] for e in prefect.events("prefect.kubernetes.pod.", related=f"prefect.flow-run.{run_id}")}


def seconds(start: str, end: str) -> float:
    from datetime import datetime

    return (
        datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))
    ).total_seconds()
