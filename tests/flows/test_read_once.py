"""Read once per run: a run's writes trust what it read and go back to the cluster only on a conflict.

Counted at the Kubernetes API test server (its request log): one optimize cycle over 100 VariantAutoscalings and
20 AutoscalingPolicyBindings LISTs each kind once and GETs nothing after its first write (the report's table comes
from what the cycle read); one warm-caches pass LISTs the ModelCaches of each namespace once, however many
consumers request caches in it.
"""

from __future__ import annotations

import pathlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from engine.api.crds import render_crds
from flows.optimize import optimize
from flows.warm_caches import warm_caches
from tasks.clients.cluster import ObjectRef
from tasks.clients.cluster.kube import KubeCluster
from tests.factories import deployment
from tests.flows.test_optimize_one_writer import populate, write_metrics

MODELS = 50  # x A100/H100: 100 VariantAutoscalings
BINDINGS = 20
WRITES = ("create", "update", "patch", "delete")


def binding_target(i: int, namespace: str) -> dict[str, Any]:
    """The Deployment binding ``i`` scales: a model label and a GPU request (the table's model and accelerator)."""
    target = deployment(f"bound-{i:02d}", namespace, 1)
    target["metadata"]["labels"]["llm-d.ai/model"] = f"org-bound-{i:02d}"
    target["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return target


def binding(i: int, namespace: str) -> dict[str, Any]:
    """A homogeneous AutoscalingPolicyBinding of the queue policy to ``bound-<i>``."""
    return {
        "apiVersion": "registry.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicyBinding",
        "metadata": {"name": f"bound-{i:02d}", "namespace": namespace},
        "spec": {
            "policyRef": {"name": "queue-depth"},
            "scalingConfiguration": {
                "minReplicas": 1,
                "maxReplicas": 8,
                "target": {
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"bound-{i:02d}"},
                    "metricEndpoint": {"uri": "/metrics", "port": 8100},
                },
            },
        },
    }


def policy(namespace: str) -> dict[str, Any]:
    """The AutoscalingPolicy every binding uses: five waiting requests per pod."""
    return {
        "apiVersion": "registry.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "queue-depth", "namespace": namespace},
        "spec": {"metrics": [{"metricName": "vllm:num_requests_waiting", "targetValue": 5}]},
    }


@pytest.fixture()
def crds(kube_server: Any) -> None:
    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])


def data_requests(kube_server: Any) -> list[dict[str, Any]]:
    """The run's requests as the server logged them, oldest first, without the writer lock's Lease (taken,
    renewed and released around the cycle, never data)."""
    return [r for r in kube_server.requests(limit=0) if "/leases" not in r["path"]]


def resource_of(request: dict[str, Any]) -> str:
    """``variantautoscalings``, ``deployments/scale``... of a logged request (the path, without the query)."""
    parts = request["path"].split("?")[0].strip("/").split("/")
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        parts = parts[parts.index("namespaces") + 2 :]
    else:
        parts = parts[-1:]
    return "/".join(p for i, p in enumerate(parts) if i in (0, 2))


def test_one_optimize_cycle_lists_each_kind_once_and_gets_nothing_after_its_writes(
    prefect_harness: None, kube_server: Any, kube_namespace: str, crds: None, tmp_path: pathlib.Path
) -> None:
    cluster = KubeCluster(api_client=kube_server.api_client())
    config_namespace = f"{kube_namespace}-cfg"
    kube_server.create_namespace(config_namespace)
    populate(cluster, kube_namespace, config_namespace, models=MODELS)
    cluster.create(policy(kube_namespace))

    def one(i: int) -> None:
        cluster.create(binding_target(i, kube_namespace))
        cluster.create(binding(i, kube_namespace))

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, range(BINDINGS)))
    metrics = write_metrics(tmp_path / "metrics.yaml", kube_namespace, seed=1, models=MODELS)
    kube_server.reset_stats()

    report = optimize(
        namespaces=[kube_namespace],
        config_namespace=config_namespace,
        metrics_file=str(metrics),
        cluster=f"kubeconfig:{kube_server.kubeconfig}",
    )

    requests = data_requests(kube_server)
    lists = Counter(resource_of(r) for r in requests if r["verb"] == "list")
    assert lists and max(lists.values()) == 1, lists
    first_write = next(i for i, r in enumerate(requests) if r["verb"] in WRITES and "/events" not in r["path"])
    gets_after = [f"{r['method']} {r['path']}" for r in requests[first_write:] if r["verb"] == "get"]
    assert gets_after == []
    # The table still shows each binding's model and accelerator, from the Deployments the cycle listed.
    rows = {r.name: r for r in report.rows if r.kind == "AutoscalingPolicyBinding"}
    assert len(rows) == BINDINGS
    assert (rows["bound-07/bound-07"].model, rows["bound-07/bound-07"].accelerator) == (
        "org-bound-07",
        "1x nvidia.com/gpu",
    )
    assert sum(1 for r in report.rows if r.kind == "VariantAutoscaling") == 2 * MODELS


def aim_template(name: str, namespace: str, model: str) -> dict[str, Any]:
    """An AIMServiceTemplate whose resolved model source is ``model`` and that asks for its cache."""
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMServiceTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": "m", "warmCache": True},
        "status": {"modelSources": [model]},
    }


def test_one_warm_caches_pass_lists_the_model_caches_of_a_namespace_once(
    prefect_harness: None, kube_server: Any, kube_namespace: str, crds: None
) -> None:
    """Ten consumers of five sources in one namespace, one cache already there: one LIST of ModelCaches."""
    cluster = KubeCluster(api_client=kube_server.api_client())
    sources = [f"hf://org/model-{i}" for i in range(5)]
    cluster.create(
        {
            "apiVersion": "aim.silogen.ai/v1alpha1",
            "kind": "ModelCache",
            "metadata": {"name": "mine", "namespace": kube_namespace},
            "spec": {"sourceUri": sources[0]},
        }
    )
    for i in range(10):
        template = aim_template(f"t-{i}", kube_namespace, sources[i % 5])
        status = template.pop("status")
        created = cluster.create(template)
        cluster.patch_status(ObjectRef.of(created), status)
    kube_server.reset_stats()

    report = warm_caches(namespaces=[kube_namespace], cluster=f"kubeconfig:{kube_server.kubeconfig}")

    assert len(report.ensured) == 10, report.problems
    assert {r.name for r in report.rows} >= {"mine"} and len(report.rows) == 5
    cache_lists = [r for r in data_requests(kube_server) if r["verb"] == "list" and "/modelcaches" in r["path"]]
    assert len(cache_lists) == 1, [r["path"] for r in cache_lists]
