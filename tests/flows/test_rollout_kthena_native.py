"""rollout-models on a cluster that serves Kthena's CRDs: ModelServer + ModelRoute per Model (what
kthena-router reads), the runtime sidecar's metric contract, and ModelServing instead of Deployments,
every object validated by the Kubernetes API test server against the upstream CRDs."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from engine.api.crds import render_crds
from flows.optimize import optimize
from flows.rollout_models import rollout_models
from tests.rollout.kthena_router import NoRoute, Request, route
from tests.rollout.models import backend, model, server_worker
from tests.servers.kubeserver.fixture import KubeServer, start_kube_server
from tests.upstream_crds import SKIP_REASON, kthena_crds, kthena_crds_present

pytestmark = pytest.mark.skipif(not kthena_crds_present(), reason=SKIP_REASON)

NET = ("networking.serving.volcano.sh", "v1alpha1")
WORKLOAD = ("workload.serving.volcano.sh", "v1alpha1")
REGISTRY = ("registry.volcano.sh", "v1alpha1")
KTHENA_POLICY: dict[str, Any] = {
    "tolerancePercent": 10,
    "metrics": [{"metricName": "kthena:num_requests_waiting", "targetValue": 5}],
    "behavior": {"scaleUp": {"stablePolicy": {"instances": 10, "percent": 1000, "period": "15s"}}},
}


@pytest.fixture(scope="module")
def kthena_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """A private API server with Modelplane's CRDs and Kthena's (so only these tests see them)."""
    server = start_kube_server(tmp_path_factory.mktemp("kthena-kubeserver"))
    try:
        server.install_crds([yaml.safe_load(text) for text in render_crds().values()] + list(kthena_crds()))
        yield server
    finally:
        server.stop()


class Env:
    def __init__(self, server: KubeServer, namespace: str) -> None:
        self.server, self.ns = server, namespace
        api = server.api_client()
        self.apps, self.custom = k8s.AppsV1Api(api), k8s.CustomObjectsApi(api)
        self.cluster = f"kubeconfig:{server.kubeconfig}"

    def objects(self, group_version: tuple[str, str], plural: str) -> dict[str, dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(*group_version, self.ns, plural)["items"]
        return {o["metadata"]["name"]: o for o in items}

    def deployments(self) -> dict[str, dict[str, Any]]:
        return {
            d.metadata.name: self.apps.api_client.sanitize_for_serialization(d)
            for d in self.apps.list_namespaced_deployment(self.ns).items
        }


@pytest.fixture()
def env(kthena_server: KubeServer, prefect_harness: None) -> Env:
    import uuid

    namespace = f"k-{uuid.uuid4().hex[:8]}"
    kthena_server.create_namespace(namespace)
    return Env(kthena_server, namespace)


def is_within(rendered: Any, stored: Any) -> bool:
    """Every field rendered is stored as rendered (the server may add defaults, never drop or change)."""
    if isinstance(rendered, dict):
        return isinstance(stored, dict) and all(k in stored and is_within(v, stored[k]) for k, v in rendered.items())
    if isinstance(rendered, list):
        return (
            isinstance(stored, list)
            and len(rendered) == len(stored)
            and all(is_within(a, b) for a, b in zip(rendered, stored))
        )
    return rendered == stored


def assert_schema_kept_everything(objects: dict[str, dict[str, Any]]) -> None:
    """The upstream CRD's structural schema pruned nothing of what was rendered (an unknown field would be)."""
    from engine.rollout.workloads import ANNOTATION_LAST_APPLIED

    for name, obj in objects.items():
        rendered = json.loads(obj["metadata"]["annotations"][ANNOTATION_LAST_APPLIED])
        assert is_within(rendered["spec"], obj["spec"]), (
            f"{obj['kind']}/{name}: the server dropped or changed rendered fields"
        )


def pd_model(ns: str) -> dict[str, Any]:
    prefill = server_worker(
        type="prefill",
        replicas=2,
        config={"kv-transfer-config": {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer"}},
    )
    decode = server_worker(type="decode")
    runtime_env = [{"name": "RUNTIME_PORT", "value": "8100"}, {"name": "RUNTIME_METRICS_PATH", "value": "/metrics"}]
    manifest = model(
        "qwen",
        ns,
        [
            backend(
                "pd",
                type="vLLMDisaggregated",
                minReplicas=1,
                maxReplicas=3,
                scalingCost=30,
                workers=[prefill, decode],
                env=runtime_env,
            ),
            backend(
                "solo",
                minReplicas=1,
                maxReplicas=3,
                scalingCost=100,
                routeWeight=30,
                loraAdapters=[{"name": "sql", "artifactURL": "pvc://adapters/sql"}],
            ),
        ],
        autoscalingPolicy=KTHENA_POLICY,
        costExpansionRatePercent=200,
        modelMatch={"body": {"model": "qwen-display"}},
    )
    manifest["spec"]["name"] = "qwen-display"  # what clients ask for (Kthena's ModelRoute key)
    return manifest


def test_model_server_route_and_runtime_sidecar_as_kthena_renders_them(env: Env, tmp_path: Any) -> None:
    env.custom.create_namespaced_custom_object(*REGISTRY, env.ns, "models", pd_model(env.ns))
    report = rollout_models(namespaces=[env.ns], cluster=env.cluster)
    assert not report.failed, report.models[0].result
    uid = env.custom.get_namespaced_custom_object(*REGISTRY, env.ns, "models", "qwen")["metadata"]["uid"]

    # A ModelServer per backend (accepted by the upstream schema), as Kthena's model controller builds it.
    servers = env.objects(NET, "modelservers")
    assert set(servers) == {"qwen-pd", "qwen-solo"}
    assert_schema_kept_everything(servers)
    assert_schema_kept_everything(env.objects(NET, "modelroutes"))
    pd = servers["qwen-pd"]["spec"]
    assert pd["model"] == "qwen-display" and pd["inferenceEngine"] == "vLLM"  # spec.name, what the engine serves
    assert pd["workloadSelector"]["matchLabels"] == {
        "registry.volcano.sh/model-uid": uid,
        "registry.volcano.sh/backend-name": "pd",
    }
    assert pd["workloadSelector"]["pdGroup"]["prefillLabels"] == {"registry.volcano.sh/role": "prefill"}
    assert pd["workloadSelector"]["pdGroup"]["decodeLabels"] == {"registry.volcano.sh/role": "decode"}
    assert pd["workloadPort"] == {
        "port": 8000,
        "protocol": "http",
    }  # protocol: the CRD's default, applied by the server
    assert pd["trafficPolicy"]["retry"] == {"attempts": 5, "retryInterval": "0s"} and pd["kvConnector"] == {
        "type": "mooncake"
    }

    # One ModelRoute named after the Model: default over both backends by routeWeight, a rule per adapter.
    route = env.objects(NET, "modelroutes")["qwen"]["spec"]
    assert route["modelName"] == "qwen-display" and route["loraAdapters"] == ["sql"]
    assert route["rules"][0] == {
        "name": "default",
        "modelMatch": {"body": {"model": "qwen-display"}},
        "targetModels": [{"modelServerName": "qwen-pd", "weight": 100}, {"modelServerName": "qwen-solo", "weight": 30}],
    }
    assert route["rules"][1] == {
        "name": "sql",
        "modelMatch": {"body": {"model": "sql"}},
        "targetModels": [{"modelServerName": "qwen-solo", "weight": 30}],
    }

    # Served under spec.name; every serving pod carries the runtime sidecar on 8100.
    deployments = env.deployments()
    for name in ("qwen-pd-prefill", "qwen-pd-decode", "qwen-solo"):
        template = deployments[name]["spec"]["template"]
        containers = {c["name"]: c for c in template["spec"]["containers"]}
        assert set(containers) == {"runtime", "engine"}
        engine_args = containers["engine"]["args"]
        assert engine_args[engine_args.index("--served-model-name") + 1] == "qwen-display"
        runtime = containers["runtime"]
        assert runtime["image"] == "ghcr.io/volcano-sh/runtime:latest" and runtime["ports"][0]["containerPort"] == 8100
        args = runtime["args"]
        assert (
            args[args.index("--engine-base-url") + 1] == "http://localhost:8000"
            and args[args.index("--model") + 1] == "qwen-display"
        )
        assert template["metadata"]["annotations"]["prometheus.io/port"] == "8100"
        assert template["metadata"]["labels"]["registry.volcano.sh/model-uid"] == uid  # the ModelServer selects them
    assert "qwen-route" not in {
        c.metadata.name for c in k8s.CoreV1Api(env.server.api_client()).list_namespaced_config_map(env.ns).items
    }

    # The binding reads the sidecar's port; a policy on kthena:num_requests_waiting gets samples and scales.
    binding = env.objects(REGISTRY, "autoscalingpolicybindings")["qwen"]
    assert {p["target"]["metricEndpoint"]["port"] for p in binding["spec"]["optimizerConfiguration"]["params"]} == {
        8100
    }
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text(
        yaml.safe_dump(
            {
                "instances": [
                    {"namespace": env.ns, "pod": pod, "metrics": {"kthena:num_requests_waiting": 12}}
                    for pod in ("qwen-pd-prefill-1-a", "qwen-pd-prefill-1-b", "qwen-pd-decode-1-a", "qwen-solo-1-a")
                ]
            }
        )
    )
    optimize(namespaces=[env.ns], metrics_file=str(metrics), cluster=env.cluster)
    binding = env.objects(REGISTRY, "autoscalingpolicybindings")["qwen"]
    ready = next(c for c in binding["status"]["conditions"] if c["type"] == "OptimizationReady")
    assert ready["status"] == "True", ready["message"]
    prefill, decode = (
        env.apps.read_namespaced_deployment(n, env.ns).spec.replicas for n in ("qwen-pd-prefill", "qwen-pd-decode")
    )
    assert decode > 1 and prefill == 2 * decode

    # A second pass writes nothing.
    env.server.reset_stats()
    rollout_models(namespaces=[env.ns], cluster=env.cluster)
    assert not [
        r
        for r in env.server.requests()
        if r["method"] in ("POST", "PUT", "PATCH")
        and f"/namespaces/{env.ns}/" in r["path"]
        and "/models/" not in r["path"]
    ]


TENANT_MATCH = {"headers": {"x-tenant": {"exact": "gold"}}}


def landings(routes: list[dict[str, Any]], request: Request, draws: int = 400) -> dict[str, int] | str:
    """Where kthena-router sends ``draws`` copies of a request (ModelServer name -> count), or "404"."""
    rng, counts = random.Random(7), {}  # type: ignore[var-annotated]
    for _ in range(draws):
        try:
            server, _ = route(routes, request, rng)
        except NoRoute:
            return "404"
        counts[server] = counts.get(server, 0) + 1
    return counts


@pytest.mark.parametrize("model_match", [None, TENANT_MATCH], ids=["no-modelMatch", "header-modelMatch"])
def test_lora_requests_reach_only_the_backends_carrying_the_adapter(env: Env, model_match: Any) -> None:
    """Two backends at weight 50, adapter ``sql`` on ``a`` only: kthena-router (its rule selection ported in
    tests/rollout/kthena_router.py) sends the model's requests to both and the adapter's to ``a`` alone,
    with the Model's header match on every rule."""
    extra = {"modelMatch": model_match} if model_match else {}
    adapter = [{"name": "sql", "artifactURL": "pvc://adapters/sql"}]
    backends = [backend("a", routeWeight=50, loraAdapters=adapter), backend("b", routeWeight=50)]
    env.custom.create_namespaced_custom_object(*REGISTRY, env.ns, "models", model("chat", env.ns, backends, **extra))
    report = rollout_models(namespaces=[env.ns], cluster=env.cluster)
    assert not report.failed, report.models[0].result
    stored = env.objects(NET, "modelroutes")
    assert_schema_kept_everything(stored)  # accepted by the upstream CRD, nothing pruned
    routes = [stored["chat"]]
    gold = {"X-Tenant": "gold"} if model_match else {}
    base = landings(routes, Request("chat", gold))
    assert isinstance(base, dict) and set(base) == {"chat-a", "chat-b"} and min(base.values()) > 150, base
    assert landings(routes, Request("sql", gold)) == {"chat-a": 400}
    assert route(routes, Request("sql", gold), random.Random(1))[1] is True  # a LoRA request
    assert landings(routes, Request("other", gold)) == "404"
    if model_match:  # the header match is kept on the adapter's rule too
        for name in ("chat", "sql"):
            assert landings(routes, Request(name)) == "404"
            assert landings(routes, Request(name, {"x-tenant": "silver"})) == "404"
    # As Kthena's model controller orders them: default first, then one rule per adapter.
    assert [(r["name"], r["modelMatch"]["body"]) for r in routes[0]["spec"]["rules"]] == [
        ("default", {"model": "chat"}),
        ("sql", {"model": "sql"}),
    ]


def test_more_adapters_than_a_model_route_holds_fail_the_model_and_route_the_first_ten(env: Env) -> None:
    adapters = [{"name": f"ad{i:02d}", "artifactURL": f"pvc://adapters/{i}"} for i in range(11)]
    manifest = model("wide", env.ns, [backend("a", loraAdapters=adapters), backend("b")])
    env.custom.create_namespaced_custom_object(*REGISTRY, env.ns, "models", manifest)
    report = rollout_models(namespaces=[env.ns], cluster=env.cluster)
    assert report.failed
    status = env.custom.get_namespaced_custom_object(*REGISTRY, env.ns, "models", "wide")["status"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "InvalidModel")
    assert (
        failed["message"].startswith("spec.backends[].loraAdapters: 11 distinct adapters")
        and "ad10" in failed["message"]
    )
    route_spec = env.objects(NET, "modelroutes")["wide"]["spec"]
    assert route_spec["loraAdapters"] == [f"ad{i:02d}" for i in range(10)] and len(route_spec["rules"]) == 11


def test_model_serving_instead_of_deployments(env: Env, tmp_path: Any) -> None:
    big = server_worker(pods=2, resources={"limits": {"nvidia.com/gpu": "8"}})
    env.custom.create_namespaced_custom_object(*REGISTRY, env.ns, "models", pd_model(env.ns))
    env.custom.create_namespaced_custom_object(
        *REGISTRY, env.ns, "models", model("big", env.ns, [backend("ray", workers=[big])])
    )
    report = rollout_models(namespaces=[env.ns], cluster=env.cluster, workload="ModelServing")
    assert not report.failed, [m.result for m in report.models]
    assert env.deployments() == {}
    servings = env.objects(WORKLOAD, "modelservings")
    assert set(servings) == {"qwen-pd", "qwen-solo", "big-ray"}
    assert_schema_kept_everything(servings)
    pd = servings["qwen-pd"]["spec"]
    assert pd["replicas"] == 1 and pd["recoveryPolicy"] == "ServingGroupRecreate"
    assert [(r["name"], r["replicas"], r["workerReplicas"]) for r in pd["template"]["roles"]] == [
        ("prefill", 2, 0),
        ("decode", 1, 0),
    ]
    assert pd["template"]["gangPolicy"] == {"minRoleReplicas": {"prefill": 2, "decode": 1}}
    entry = {c["name"] for c in pd["template"]["roles"][0]["entryTemplate"]["spec"]["containers"]}
    assert entry == {"runtime", "engine"}
    # The router pairs P/D pods within a ModelServing group.
    assert (
        env.objects(NET, "modelservers")["qwen-pd"]["spec"]["workloadSelector"]["pdGroup"]["groupKey"]
        == "modelserving.volcano.sh/group-name"
    )
    # Multi-node: a leader role with one ray worker joining the entry through ENTRY_ADDRESS.
    ray = servings["big-ray"]["spec"]["template"]["roles"][0]
    assert (ray["name"], ray["workerReplicas"]) == ("leader", 1)
    assert servings["big-ray"]["spec"]["template"]["gangPolicy"] == {"minRoleReplicas": {"leader": 1}}  # vllm.yaml
    worker_script = ray["workerTemplate"]["spec"]["containers"][0]["args"][-1]
    assert "worker --ray_address=$ENTRY_ADDRESS --ray_port=6379" in worker_script
    # The optimizer scales the ModelServing (its replicas are groups) through its scale subresource.
    binding = env.objects(REGISTRY, "autoscalingpolicybindings")["qwen"]
    refs = [p["target"]["targetRef"] for p in binding["spec"]["optimizerConfiguration"]["params"]]
    assert refs == [
        {"apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "ModelServing", "name": "qwen-pd"},
        {"apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "ModelServing", "name": "qwen-solo"},
    ]
    assert "modelplane.io/scale-groups" not in binding["metadata"].get("annotations", {})
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text(
        yaml.safe_dump(
            {
                "instances": [
                    {"namespace": env.ns, "pod": pod, "metrics": {"kthena:num_requests_waiting": 12}}
                    for pod in ("qwen-pd-0-prefill-0", "qwen-solo-0-leader-0")
                ]
            }
        )
    )
    optimize(namespaces=[env.ns], metrics_file=str(metrics), cluster=env.cluster)
    groups = {
        name: env.objects(WORKLOAD, "modelservings")[name]["spec"]["replicas"] for name in ("qwen-pd", "qwen-solo")
    }
    assert groups["qwen-pd"] > 1 and sum(groups.values()) > 2, groups  # scaled through the scale subresource
    rollout_models(namespaces=[env.ns], cluster=env.cluster, workload="ModelServing")
    assert {
        n: env.objects(WORKLOAD, "modelservings")[n]["spec"]["replicas"] for n in groups
    } == groups  # the optimizer's count survives


def test_off_keeps_plain_deployments_and_the_route_config_map(env: Env) -> None:
    env.custom.create_namespaced_custom_object(*REGISTRY, env.ns, "models", model("plain", env.ns, [backend("b")]))
    rollout_models(namespaces=[env.ns], cluster=env.cluster, kthena_networking="off")
    assert env.objects(NET, "modelservers") == {} and env.objects(NET, "modelroutes") == {}
    containers = env.deployments()["plain-b"]["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["engine"]


def test_a_manifests_folder_with_kthenas_crds_renders_the_native_objects(
    kthena_server: KubeServer, tmp_path: Any, prefect_harness: None
) -> None:
    """A local folder serves the kinds its CustomResourceDefinition documents define, as a cluster does: with
    Kthena's networking CRDs in it the rollout renders ModelServer and ModelRoute (served under ``spec.name``,
    Kthena's current route key), and the API test server accepts both under the upstream CRDs unchanged."""
    from engine.rollout.workloads import ANNOTATION_LAST_APPLIED
    from tasks.clients.cluster import LocalCluster
    from tests.upstream_crds import upstream_crds_dir

    folder = tmp_path / "cluster"
    folder.mkdir()
    crds = upstream_crds_dir()
    assert crds is not None
    for name in ("modelservers", "modelroutes"):
        (folder / f"crd-{name}.yaml").write_text(
            (crds / f"kthena/networking.serving.volcano.sh_{name}.yaml").read_text()
        )
    adapter = [{"name": "sql", "artifactURL": "pvc://adapters/sql"}]
    manifest = model("chat", "team", [backend("a", loraAdapters=adapter), backend("b")], modelMatch=TENANT_MATCH)
    manifest["spec"]["name"] = "chat-7b"
    (folder / "model.yaml").write_text(yaml.safe_dump(manifest))

    report = rollout_models(namespaces=["team"], cluster=str(folder))
    assert not report.failed, report.models[0].result
    local = LocalCluster(str(folder))
    servers = {o["metadata"]["name"]: o for o in local.list(f"{NET[0]}/{NET[1]}", "ModelServer", "team")}
    routes = local.list(f"{NET[0]}/{NET[1]}", "ModelRoute", "team")
    assert set(servers) == {"chat-a", "chat-b"} and [r["metadata"]["name"] for r in routes] == ["chat"]
    assert {s["spec"]["model"] for s in servers.values()} == {"chat-7b"} and routes[0]["spec"]["modelName"] == "chat-7b"
    args = local.get("apps/v1", "Deployment", "chat-a", "team")["spec"]["template"]["spec"]["containers"]
    engine = next(c for c in args if c["name"] == "engine")["args"]
    assert engine[engine.index("--served-model-name") + 1] == "chat-7b"
    assert local.list("v1", "ConfigMap", "team", label_selector="registry.volcano.sh/model-name=chat") == []

    namespace = f"local-{tmp_path.name[-8:].lower().replace('_', '-')}"
    kthena_server.create_namespace(namespace)
    custom = k8s.CustomObjectsApi(kthena_server.api_client())
    for obj, plural in [(o, "modelservers") for o in servers.values()] + [(routes[0], "modelroutes")]:
        rendered = json.loads(obj["metadata"]["annotations"][ANNOTATION_LAST_APPLIED])
        assert is_within(rendered["spec"], obj["spec"])  # the local folder's CRD schema pruned nothing
        meta = {"name": obj["metadata"]["name"], "namespace": namespace}
        stored = custom.create_namespaced_custom_object(*NET, namespace, plural, {**rendered, "metadata": meta})
        assert is_within(rendered["spec"], stored["spec"]), f"{obj['kind']}: the upstream CRD changed it"
