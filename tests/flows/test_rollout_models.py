"""The rollout-models flow against the Kubernetes API test server, through the official client.

Each test has its own namespace; the flow runs scoped to it (one Prefect flow run per pass).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client as k8s

from engine.api.crds import render_crds
from flows.optimize import optimize
from flows.rollout_models import rollout_models
from tests.rollout.models import QUEUE_POLICY, backend, model, server_worker

GROUP, VERSION = "registry.volcano.sh", "v1alpha1"


class Env:
    """One test's namespace and client helpers."""

    def __init__(self, server: Any, namespace: str) -> None:
        self.server = server
        self.ns = namespace
        api = server.api_client()
        self.core = k8s.CoreV1Api(api)
        self.apps = k8s.AppsV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.cluster = f"kubeconfig:{server.kubeconfig}"

    def create(self, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "models", body)

    def patch_model(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "models", name, {"spec": spec})

    def run(self) -> Any:
        return rollout_models(namespaces=[self.ns], cluster=self.cluster)

    def status(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "models", name).get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next(c for c in self.status(name).get("conditions", []) if c["type"] == type_)

    def deployments(self) -> dict[str, dict[str, Any]]:
        items = self.apps.list_namespaced_deployment(self.ns).items
        return {d.metadata.name: self.apps.api_client.sanitize_for_serialization(d) for d in items}

    def services(self) -> dict[str, dict[str, Any]]:
        items = self.core.list_namespaced_service(self.ns).items
        return {s.metadata.name: self.core.api_client.sanitize_for_serialization(s) for s in items}

    def custom_objects(self, plural: str) -> dict[str, dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, plural)["items"]
        return {o["metadata"]["name"]: o for o in items}

    def mark_available(self, name: str, replicas: int = 1) -> None:
        """What the Deployment controller would report once the pods serve."""
        status = {
            "replicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "ok"}
            ],
        }
        self.apps.patch_namespaced_deployment_status(name, self.ns, {"status": status})

    def writes(self) -> list[dict[str, Any]]:
        """API writes in this namespace since the last stats reset."""
        return [
            r
            for r in self.server.requests()
            if r["method"] in ("POST", "PUT", "PATCH", "DELETE") and f"/namespaces/{self.ns}/" in r["path"]
        ]


@pytest.fixture(scope="module")
def installed_crds(kube_server: Any) -> None:
    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])


@pytest.fixture()
def env(kube_server: Any, kube_namespace: str, installed_crds: None, prefect_harness: None) -> Iterator[Env]:
    yield Env(kube_server, kube_namespace)
    kube_server.clear_injections()


def assert_valid_k8s(obj: dict[str, Any]) -> None:
    """The object validates against the Kubernetes schemas (strict: no unknown fields)."""
    clean = json.loads(json.dumps(obj))
    meta = clean.get("metadata", {})
    for key in ("managedFields",):
        meta.pop(key, None)
    kubernetes_validate.validate(clean, "1.30", strict=True)


def two_backend_model(ns: str) -> dict[str, Any]:
    """Two backends on different accelerators under one model-level policy; the A100 one is cheaper."""
    a100 = backend("a100", minReplicas=1, maxReplicas=6, scalingCost=40)
    h100 = backend(
        "h100",
        minReplicas=1,
        maxReplicas=6,
        scalingCost=100,
        workers=[server_worker(resources={"limits": {"nvidia.com/gpu": "1"}})],
    )
    return model(
        "qwen",
        ns,
        [a100, h100],
        autoscalingPolicy=QUEUE_POLICY,
        costExpansionRatePercent=200,
        modelMatch={"body": {"model": "qwen"}},
    )


def test_two_backends_with_a_model_level_policy_are_scaled_by_cost(env: Env, tmp_path: Any) -> None:
    env.create(two_backend_model(env.ns))
    report = env.run()
    assert report.models[0].result == "Progressing"

    deployments = env.deployments()
    assert set(deployments) == {"qwen-a100", "qwen-h100"}
    for deployment in deployments.values():
        assert_valid_k8s(deployment)
        assert deployment["spec"]["replicas"] == 1
        owner = deployment["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "Model" and owner["name"] == "qwen" and owner["controller"] is True
    for service in env.services().values():
        assert_valid_k8s(service)
    container = deployments["qwen-a100"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert container["args"][2:4] == ["--model", "/models/qwen2.5-7b"]  # the PVC mounted directly, absolute path
    assert "--gpu-memory-utilization" in container["args"] and "--served-model-name" in container["args"]

    policies, bindings = env.custom_objects("autoscalingpolicies"), env.custom_objects("autoscalingpolicybindings")
    assert set(policies) == {"qwen"} and set(bindings) == {"qwen"}
    optimizer = bindings["qwen"]["spec"]["optimizerConfiguration"]
    assert optimizer["costExpansionRatePercent"] == 200
    assert [
        (p["target"]["targetRef"]["name"], p["cost"], p["minReplicas"], p["maxReplicas"]) for p in optimizer["params"]
    ] == [
        ("qwen-a100", 40, 1, 6),
        ("qwen-h100", 100, 1, 6),
    ]
    assert bindings["qwen"]["metadata"]["annotations"]["modelplane.io/scale-to-zero-grace-period"] == "30s"
    route = json.loads(env.core.read_namespaced_config_map("qwen-route", env.ns).data["route.json"])
    assert route["modelMatch"] == {"body": {"model": "qwen"}}
    assert [(b["name"], b["weight"], b["service"]) for b in route["backends"]] == [
        ("a100", 100, "qwen-a100"),
        ("h100", 100, "qwen-h100"),
    ]

    # One optimize cycle: 15 waiting per pod against a target of 5 -> 6 replicas in all, poured by cost.
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text(
        yaml.safe_dump(
            {
                "instances": [
                    {"namespace": env.ns, "pod": "qwen-a100-5d8f-0", "metrics": {"vllm:num_requests_waiting": 15}},
                    {"namespace": env.ns, "pod": "qwen-h100-7c9e-0", "metrics": {"vllm:num_requests_waiting": 15}},
                ]
            }
        )
    )
    optimize(namespaces=[env.ns], metrics_file=str(metrics), cluster=env.cluster)
    a100, h100 = (env.apps.read_namespaced_deployment(n, env.ns).spec.replicas for n in ("qwen-a100", "qwen-h100"))
    assert a100 + h100 == 6 and a100 > h100 >= 1

    # The next rollout keeps what the optimizer decided.
    env.server.reset_stats()
    env.run()
    assert env.apps.read_namespaced_deployment("qwen-a100", env.ns).spec.replicas == a100
    assert not [w for w in env.writes() if "/deployments/" in w["path"]]


def test_disaggregated_backend_becomes_prefill_and_decode(env: Env) -> None:
    prefill = server_worker(
        type="prefill",
        replicas=2,
        config={"kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"}},
    )
    decode = server_worker(type="decode", config={"served-model-name": "qwen-pd"})
    env.create(model("pd", env.ns, [backend("pd", type="vLLMDisaggregated", workers=[prefill, decode])]))
    env.run()
    deployments = env.deployments()
    assert set(deployments) == {"pd-pd-prefill", "pd-pd-decode"}
    assert deployments["pd-pd-prefill"]["spec"]["replicas"] == 2
    assert deployments["pd-pd-prefill"]["spec"]["selector"]["matchLabels"]["registry.volcano.sh/role"] == "prefill"
    args = deployments["pd-pd-prefill"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--kv-transfer-config") + 1] == '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    for obj in [*deployments.values(), *env.services().values()]:
        assert_valid_k8s(obj)
    route = json.loads(env.core.read_namespaced_config_map("pd-route", env.ns).data["route.json"])
    assert route["backends"][0]["service"] == "pd-pd-decode" and route["backends"][0]["servedModelName"] == "qwen-pd"


def test_sglang_and_mindie(env: Env) -> None:
    sglang = backend("sgl", type="SGLang", workers=[server_worker(image="lmsysorg/sglang:v0.4.9", config={"tp": 1})])
    mindie = backend(
        "ascend", type="MindIE", workers=[server_worker(image="ascendhub.huawei.com/public-ascendhub/mindie:2.0")]
    )
    env.create(model("mixed", env.ns, [sglang, mindie]))
    env.run()
    deployments = env.deployments()
    assert set(deployments) == {"mixed-sgl"}
    container = deployments["mixed-sgl"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python3"] and container["args"][:2] == ["-m", "sglang.launch_server"]
    assert container["ports"][0]["containerPort"] == 30000
    assert_valid_k8s(deployments["mixed-sgl"])
    failed = env.condition("mixed", "Failed")
    assert failed["status"] == "True" and failed["reason"] == "BackendNotSupported"
    assert "spec.backends[1].type" in failed["message"] and "MindIE is not supported" in failed["message"]


def test_removed_backend_is_deleted_and_a_spec_change_updates_only_its_workload(env: Env) -> None:
    env.create(model("m", env.ns, [backend("one"), backend("two")]))
    env.run()
    assert set(env.deployments()) == {"m-one", "m-two"}
    env.mark_available("m-one")
    env.mark_available("m-two")
    env.run()
    assert env.condition("m", "Active")["status"] == "True"
    assert env.status("m")["backendStatuses"] == [{"name": "one", "replicas": 1}, {"name": "two", "replicas": 1}]

    # No change: nothing is written at all.
    env.server.reset_stats()
    env.run()
    assert env.writes() == []

    # A spec change on one backend updates that Deployment only; removing the other deletes it.
    changed = backend("one", workers=[server_worker(config={"max-model-len": 4096})])
    env.patch_model("m", {"backends": [changed]})
    env.server.reset_stats()
    env.run()
    deployments = env.deployments()
    assert set(deployments) == {"m-one"} and "m-two" not in env.services()
    args = deployments["m-one"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-model-len") + 1] == "4096" and "--gpu-memory-utilization" not in args
    paths = [w["path"].split("?")[0] for w in env.writes()]
    assert any(p.endswith("/deployments/m-one") for p in paths) and any(p.endswith("/deployments/m-two") for p in paths)
    assert env.status("m")["observedGeneration"] == 2
    assert env.status("m")["backendStatuses"] == [{"name": "one", "replicas": 1}]


def test_each_webhook_rule_gives_its_condition(env: Env) -> None:
    cases = {
        "two-servers": ([backend("b", workers=[server_worker(), server_worker()])], {}, "spec.backends[0].workers"),
        "pd-server": ([backend("b", type="vLLMDisaggregated")], {}, "spec.backends[0].workers[0].type"),
        "min-above-max": (
            [backend("b", minReplicas=3, maxReplicas=2, autoscalingPolicy=QUEUE_POLICY)],
            {},
            "spec.backends[0].minReplicas",
        ),
        "both-policies": (
            [backend("b", scalingCost=1, autoscalingPolicy=QUEUE_POLICY, maxReplicas=2)],
            {"autoscalingPolicy": QUEUE_POLICY},
            "spec.backends[0].autoscalingPolicy",
        ),
        "no-cost": ([backend("b", maxReplicas=2)], {"autoscalingPolicy": QUEUE_POLICY}, "spec.backends[0].scalingCost"),
        "grace-too-long": (
            [backend("b", scalingCost=1, maxReplicas=2, scaleToZeroGracePeriod="31m")],
            {"autoscalingPolicy": QUEUE_POLICY},
            "spec.backends[0].scaleToZeroGracePeriod",
        ),
        "no-policy-range": ([backend("b", maxReplicas=3)], {}, "spec.backends[0].minReplicas"),
        "no-policy-cost": ([backend("b", scalingCost=5)], {}, "spec.backends[0].scalingCost"),
        "backend-policy-min": (
            [backend("b", minReplicas=0, maxReplicas=2, autoscalingPolicy=QUEUE_POLICY)],
            {},
            "spec.backends[0].minReplicas",
        ),
        "zero-sum-min": (
            [backend("b", minReplicas=0, maxReplicas=2, scalingCost=1)],
            {"autoscalingPolicy": QUEUE_POLICY},
            "spec.backends",
        ),
        "bad-image": (
            [backend("b", workers=[server_worker(image="Not An Image")])],
            {},
            "spec.backends[0].workers[0].image",
        ),
        "sum-max": (
            [
                backend("b", minReplicas=1, maxReplicas=1_000_000, autoscalingPolicy=QUEUE_POLICY),
                backend("c", minReplicas=1, maxReplicas=1, autoscalingPolicy=QUEUE_POLICY),
            ],
            {},
            "spec.backends",
        ),
        "dup-name": ([backend("b"), backend("b")], {}, "spec.backends[1].name"),
        "no-model-uri": ([{k: v for k, v in backend("b").items() if k != "modelURI"}], {}, "spec.backends[0].modelURI"),
        "pd-no-decode": (
            [backend("b", type="vLLMDisaggregated", workers=[server_worker(type="prefill")])],
            {},
            "spec.backends[0].workers",
        ),
        "stray-expansion": ([backend("b")], {"costExpansionRatePercent": 150}, "spec.costExpansionRatePercent"),
        "bad-lora": (
            [backend("b", loraAdapters=[{"name": "x", "artifactURL": "hf://a/b/c"}])],
            {},
            "spec.backends[0].loraAdapters[0].artifactURL",
        ),
    }
    for name, (backends, spec, _) in cases.items():
        env.create(model(name, env.ns, backends, **spec))
    env.create(model("fine", env.ns, [backend("b")]))
    report = env.run()
    assert {m.name for m in report.failed} == set(cases)
    for name, (_, _, field_path) in cases.items():
        failed = env.condition(name, "Failed")
        assert failed["status"] == "True" and failed["reason"] == "InvalidModel", name
        assert field_path in failed["message"], (name, failed["message"])
    assert set(env.deployments()) == {"fine-b"}  # the valid Model in the same run proceeds


def test_failed_clears_once_the_cause_is_fixed(env: Env) -> None:
    env.create(model("m", env.ns, [backend("b", maxReplicas=3)]))
    env.run()
    assert env.condition("m", "Failed")["status"] == "True" and env.deployments() == {}
    env.patch_model("m", {"backends": [backend("b")]})
    env.run()
    failed = env.condition("m", "Failed")
    assert failed["status"] == "False" and failed["reason"] == "ModelHealthy"
    assert set(env.deployments()) == {"m-b"}
    assert env.condition("m", "Initialized")["reason"] == "ModelCreating"


# ------------------------------------------------------------------------------------------ caches


def test_weights_from_a_shared_managed_cache(env: Env) -> None:
    hf = dict(modelURI="hf://Qwen/Qwen2.5-0.5B-Instruct")
    env.create(model("first", env.ns, [backend("b", **hf)]))
    env.run()
    caches = env.custom.list_namespaced_custom_object("aim.silogen.ai", "v1alpha1", env.ns, "modelcaches")["items"]
    assert len(caches) == 1 and caches[0]["spec"]["sourceUri"].startswith("hf://Qwen/Qwen2.5-0.5B-Instruct")
    assert env.deployments() == {}
    active = env.condition("first", "Active")
    assert (
        active["status"] == "False" and f"waiting for ModelCache {caches[0]['metadata']['name']}" in active["message"]
    )

    # The warm-caches flow fills it; the rollout then mounts its PVC read-only and serves from it.
    name = caches[0]["metadata"]["name"]
    env.custom.patch_namespaced_custom_object_status(
        "aim.silogen.ai",
        "v1alpha1",
        env.ns,
        "modelcaches",
        name,
        {"status": {"status": "Available", "persistentVolumeClaim": f"{name}-pvc"}},
    )
    env.create(model("second", env.ns, [backend("b", **hf)]))
    env.run()
    deployments = env.deployments()
    assert set(deployments) == {"first-b", "second-b"}
    pod = deployments["first-b"]["spec"]["template"]["spec"]
    assert {"name": "weights", "persistentVolumeClaim": {"claimName": f"{name}-pvc", "readOnly": True}} in pod[
        "volumes"
    ]
    args = pod["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "/models"
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in pod["containers"][0]["env"]
    caches = env.custom.list_namespaced_custom_object("aim.silogen.ai", "v1alpha1", env.ns, "modelcaches")["items"]
    assert len(caches) == 1 and caches[0]["status"].get("lastUsed")  # one cache, shared by both Models
    assert_valid_k8s(deployments["second-b"])


# ------------------------------------------------------------------------------------ runtime LoRA


class FakeVLLM:
    """A vLLM-compatible OpenAI server's LoRA endpoints on 127.0.0.1: lists, loads and unloads adapters."""

    def __init__(self, loaded: set[str]) -> None:
        import http.server
        import threading

        fake = self
        self.loaded = set(loaded)
        self.calls: list[tuple[str, dict[str, Any]]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                models = [{"id": "qwen", "object": "model"}] + [
                    {"id": n, "object": "model", "parent": "qwen"} for n in sorted(fake.loaded)
                ]
                self._reply(200, {"object": "list", "data": models})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                fake.calls.append((self.path, body))
                if self.path == "/v1/load_lora_adapter":
                    fake.loaded.add(body["lora_name"])
                elif self.path == "/v1/unload_lora_adapter":
                    fake.loaded.discard(body["lora_name"])
                self._reply(200, {})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server.fileno() != -1:
            self.server.shutdown()
            self.server.server_close()


def test_lora_only_change_is_applied_at_runtime_without_a_rollout(env: Env) -> None:
    vllm = FakeVLLM(loaded={"sql"})
    try:
        runtime = [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "true"}]
        lora_backend = dict(env=runtime, workers=[server_worker(config={"port": vllm.port})])
        env.create(
            model(
                "lora",
                env.ns,
                [backend("b", loraAdapters=[{"name": "sql", "artifactURL": "pvc://adapters/sql"}], **lora_backend)],
            )
        )
        env.run()
        deployment = env.deployments()["lora-b"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--enable-lora") + 1 : args.index("--enable-lora") + 3] == [
            "--lora-modules",
            "sql=/loras/sql/sql",
        ]
        assert_valid_k8s(deployment)
        labels = deployment["spec"]["selector"]["matchLabels"]
        env.core.create_namespaced_pod(
            env.ns,
            {
                "metadata": {"name": "lora-b-0", "labels": labels},
                "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.10.1"}]},
            },
        )
        env.core.patch_namespaced_pod_status(
            "lora-b-0", env.ns, {"status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
        )

        env.patch_model(
            "lora",
            {
                "backends": [
                    backend("b", loraAdapters=[{"name": "chat", "artifactURL": "hf://acme/chat-lora"}], **lora_backend)
                ]
            },
        )
        env.server.reset_stats()
        report = env.run()
        assert vllm.calls == [
            ("/v1/unload_lora_adapter", {"lora_name": "sql"}),
            ("/v1/load_lora_adapter", {"lora_name": "chat", "lora_path": "acme/chat-lora"}),
        ]
        assert report.models[0].lora == ["lora-b-0: unloaded sql", "lora-b-0: loaded chat"]
        assert not [w for w in env.writes() if "/deployments" in w["path"]]  # no Deployment rewrite

        # Already applied: the next pass asks the pod and changes nothing.
        env.run()
        assert len(vllm.calls) == 2

        # The pod's API is down: the Model says so, nothing is rewritten, the next pass retries.
        vllm.stop()
        env.patch_model("lora", {"backends": [backend("b", loraAdapters=[], **lora_backend)]})
        env.server.reset_stats()
        env.run()
        failed = env.condition("lora", "Failed")
        assert (
            failed["status"] == "True"
            and failed["reason"] == "ModelAbnormal"
            and "runtime LoRA update on pod lora-b-0 failed" in failed["message"]
        )
        assert not [w for w in env.writes() if "/deployments" in w["path"]]
    finally:
        vllm.stop()


def _cache_of(env: Env, uri: str) -> str:
    caches = env.custom.list_namespaced_custom_object("aim.silogen.ai", "v1alpha1", env.ns, "modelcaches")["items"]
    return next(c["metadata"]["name"] for c in caches if c["spec"]["sourceUri"].startswith(uri))


def _set_cache_status(env: Env, name: str, status: dict[str, Any]) -> None:
    env.custom.patch_namespaced_custom_object_status(
        "aim.silogen.ai", "v1alpha1", env.ns, "modelcaches", name, {"status": status}
    )


def test_offline_runtime_lora_adapters_come_from_the_model_cache(env: Env) -> None:
    """``HF_HUB_OFFLINE=1`` with runtime updates: a new adapter is not posted as a repo id (the offline engine
    cannot fetch it); it is downloaded into its ModelCache and loaded by path from the mounted cache, and an
    adapter whose cache cannot be filled is a condition naming it."""
    vllm = FakeVLLM(loaded={"sql"})
    try:
        offline = [
            {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "true"},
            {"name": "HF_HUB_OFFLINE", "value": "1"},
        ]
        spec = dict(env=offline, workers=[server_worker(config={"port": vllm.port})])
        sql = {"name": "sql", "artifactURL": "pvc://adapters/sql"}
        env.create(model("off", env.ns, [backend("b", loraAdapters=[sql], **spec)]))
        env.run()
        labels = env.deployments()["off-b"]["spec"]["selector"]["matchLabels"]
        env.core.create_namespaced_pod(
            env.ns,
            {
                "metadata": {"name": "off-b-0", "labels": labels},
                "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.10.1"}]},
            },
        )
        env.core.patch_namespaced_pod_status(
            "off-b-0", env.ns, {"status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
        )

        chat = {"name": "chat", "artifactURL": "hf://acme/chat-lora"}
        env.patch_model("off", {"backends": [backend("b", loraAdapters=[sql, chat], **spec)]})
        report = env.run()
        assert vllm.calls == [] and report.models[0].lora == []  # no repo id posted to the offline engine
        active = env.condition("off", "Active")
        assert "LoRA adapter chat: waiting for ModelCache" in active["message"], active

        cache = _cache_of(env, "hf://acme/chat-lora")
        _set_cache_status(env, cache, {"status": "Available", "persistentVolumeClaim": f"{cache}-pvc"})
        env.run()
        pod = env.deployments()["off-b"]["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        assert args[args.index("--lora-modules") + 1 :][:2] == ["chat=/loras/chat", "sql=/loras/sql/sql"]
        assert {"name": "lora-chat", "persistentVolumeClaim": {"claimName": f"{cache}-pvc", "readOnly": True}} in pod[
            "volumes"
        ]
        assert {"name": "HF_HUB_OFFLINE", "value": "1"} in pod["containers"][0]["env"]
        assert vllm.calls == []

        gone = {"name": "gone", "artifactURL": "hf://acme/gone-lora"}
        env.patch_model("off", {"backends": [backend("b", loraAdapters=[sql, chat, gone], **spec)]})
        env.run()
        _set_cache_status(env, _cache_of(env, "hf://acme/gone-lora"), {"status": "Failed"})
        env.run()
        failed = env.condition("off", "Failed")
        assert failed["status"] == "True" and "LoRA adapter gone cannot be had offline" in failed["message"], failed
        assert "chat=/loras/chat" in env.deployments()["off-b"]["spec"]["template"]["spec"]["containers"][0]["args"]
    finally:
        vllm.stop()


# ------------------------------------------------------------------------------------ S3 endpoint


def test_kthena_s3_endpoint_reaches_every_download(env: Env) -> None:
    """Seed 003: ``ENDPOINT`` must be set for s3://. It reaches the cacheURI init container, the shared
    model cache and the LoRA cache (so their fill Jobs); the keys stay Secret references; ``aios_models``
    (Kthena's example bucket) is accepted."""
    from engine.api.aim import ModelCache
    from engine.caches.fill import JobSettings, download_env, render_job

    s3_env = [
        {"name": "ENDPOINT", "value": "http://minio.storage:9000"},
        {"name": "ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "access"}}},
        {"name": "SECRET_KEY", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "secret"}}},
        {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
    ]
    lora = [{"name": "sql", "artifactURL": "s3://aios_models/loras/sql"}]
    env.create(
        model(
            "s3m",
            env.ns,
            [
                backend(
                    "direct", modelURI="s3://aios_models/qwen", cacheURI="pvc://cache", env=s3_env, loraAdapters=lora
                ),
                backend("shared", modelURI="s3://aios_models/qwen-small", env=s3_env),
            ],
        )
    )
    env.run()
    assert "Failed" not in {c["type"] for c in env.status("s3m").get("conditions", []) if c["status"] == "True"}
    caches = env.custom.list_namespaced_custom_object("aim.silogen.ai", "v1alpha1", env.ns, "modelcaches")["items"]
    assert sorted(c["spec"]["sourceUri"] for c in caches) == [
        "s3://aios_models/loras/sql",
        "s3://aios_models/qwen-small",
    ]
    download = [e for e in s3_env if e["name"] != "VLLM_LOGGING_LEVEL"]
    for cache in caches:
        assert cache["spec"]["env"] == download
        parsed = ModelCache.model_validate(cache)
        job = render_job(
            parsed,
            cache["spec"]["sourceUri"],
            0,
            download_env(parsed.spec.env, None).env,
            JobSettings("modelplane:test"),
        )
        assert [
            e
            for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
            if e["name"] in ("ENDPOINT", "ACCESS_KEY", "SECRET_KEY")
        ] == download
        env.custom.patch_namespaced_custom_object_status(
            "aim.silogen.ai",
            "v1alpha1",
            env.ns,
            "modelcaches",
            cache["metadata"]["name"],
            {"status": {"status": "Available", "persistentVolumeClaim": f"{cache['metadata']['name']}-pvc"}},
        )
    env.run()
    deployments = env.deployments()
    assert set(deployments) == {"s3m-direct", "s3m-shared"}
    init = deployments["s3m-direct"]["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["model-downloader"]
    assert init[0]["command"][3] == "s3://aios_models/qwen" and init[0]["env"] == download
    assert_valid_k8s(deployments["s3m-direct"])


# ------------------------------------------------------------------------------- P/D as one group


def test_prefill_decode_keep_their_ratio_through_an_optimize_cycle(env: Env, tmp_path: Any) -> None:
    """A 2:1 P/D backend under a model-level policy is one scale unit: the optimizer pours groups, each
    2 prefill + 1 decode, and prices a group at the backend's scalingCost once."""
    prefill, decode = server_worker(type="prefill", replicas=2), server_worker(type="decode")
    pd = backend(
        "pd", type="vLLMDisaggregated", minReplicas=1, maxReplicas=4, scalingCost=30, workers=[prefill, decode]
    )
    plain = backend("plain", minReplicas=1, maxReplicas=4, scalingCost=100)
    env.create(model("pm", env.ns, [pd, plain], autoscalingPolicy=QUEUE_POLICY, costExpansionRatePercent=200))
    env.run()
    binding = env.custom_objects("autoscalingpolicybindings")["pm"]
    params = binding["spec"]["optimizerConfiguration"]["params"]
    assert [(p["target"]["targetRef"]["name"], p["minReplicas"], p["maxReplicas"], p["cost"]) for p in params] == [
        ("pm-pd-prefill", 1, 4, 30),
        ("pm-plain", 1, 4, 100),
    ]
    assert {
        d: env.apps.read_namespaced_deployment(d, env.ns).spec.replicas for d in ("pm-pd-prefill", "pm-pd-decode")
    } == {"pm-pd-prefill": 2, "pm-pd-decode": 1}

    for waiting, groups in ((11, 4), (6, 4)):  # 11 waiting against 5: 5 units, the cheap group first
        metrics = tmp_path / "metrics.yaml"
        metrics.write_text(
            yaml.safe_dump(
                {
                    "instances": [
                        {"namespace": env.ns, "pod": pod, "metrics": {"vllm:num_requests_waiting": waiting}}
                        for pod in ("pm-pd-prefill-1-a", "pm-pd-prefill-1-b", "pm-pd-decode-1-a", "pm-plain-1-a")
                    ]
                }
            )
        )
        optimize(namespaces=[env.ns], metrics_file=str(metrics), cluster=env.cluster)
        prefill_n, decode_n = (
            env.apps.read_namespaced_deployment(n, env.ns).spec.replicas for n in ("pm-pd-prefill", "pm-pd-decode")
        )
        assert prefill_n == 2 * decode_n, (prefill_n, decode_n)
        assert decode_n == groups
        binding = env.custom_objects("autoscalingpolicybindings")["pm"]
        assert {t["name"]: t["replicas"] for t in binding["status"]["targets"]}["pm-pd-prefill"] == prefill_n

    # The next rollout keeps what the optimizer decided, in ratio.
    env.server.reset_stats()
    env.run()
    assert not [w for w in env.writes() if "/deployments/" in w["path"]]


def test_a_multi_node_backend_runs_one_ray_group_with_deployments(env: Env, tmp_path: Any) -> None:
    """``pods: 3`` up to 3 groups: with Deployments every ray worker joins the head behind one headless Service,
    so a second head would split them. The backend is held at one group (a head and 2 ray workers), whatever
    the optimizer wants or a previous rollout left, and the Model says why."""
    worker = server_worker(pods=3, resources={"limits": {"nvidia.com/gpu": "8"}})
    mn = backend("ray", minReplicas=1, maxReplicas=3, scalingCost=10, workers=[worker])
    env.create(model("mn", env.ns, [mn], autoscalingPolicy=QUEUE_POLICY))
    env.run()
    replicas = {n: d["spec"]["replicas"] for n, d in env.deployments().items()}
    assert replicas == {"mn-ray": 1, "mn-ray-worker": 2}
    (param,) = env.custom_objects("autoscalingpolicybindings")["mn"]["spec"]["optimizerConfiguration"]["params"]
    assert (param["target"]["targetRef"]["name"], param["minReplicas"], param["maxReplicas"]) == ("mn-ray", 1, 1)
    limited = env.condition("mn", "ScalingLimited")
    assert (limited["status"], limited["reason"]) == ("True", "MultiNodeGroupHeld")
    assert "backend ray" in limited["message"] and "maxReplicas 3" in limited["message"]

    metrics = tmp_path / "metrics.yaml"
    metrics.write_text(
        yaml.safe_dump(
            {"instances": [{"namespace": env.ns, "pod": "mn-ray-1-a", "metrics": {"vllm:num_requests_waiting": 40}}]}
        )
    )
    optimize(namespaces=[env.ns], metrics_file=str(metrics), cluster=env.cluster)
    assert {n: d["spec"]["replicas"] for n, d in env.deployments().items()} == replicas  # 40 waiting: still one

    env.apps.patch_namespaced_deployment_scale("mn-ray", env.ns, {"spec": {"replicas": 3}})  # an older rollout's
    env.run()
    assert {n: d["spec"]["replicas"] for n, d in env.deployments().items()} == replicas

    env.patch_model("mn", {"backends": [{**mn, "maxReplicas": 1}]})
    env.run()
    limited = env.condition("mn", "ScalingLimited")
    assert (limited["status"], limited["reason"]) == ("False", "NotLimited")


def _start_fake_vllm(port: int, env: dict[str, str]) -> Any:
    import subprocess
    import sys

    from tests.servers.s3test.fixture import wait_for_port

    process = subprocess.Popen(
        [sys.executable, "-m", "tests.rollout.fake_vllm", str(port), "rt"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for_port(port, process)
    return process


def test_runtime_lora_resolves_a_hub_adapter_as_vllm_does(env: Env, hf_server: Any, tmp_path: Any) -> None:
    """A runtime LoRA load posts the adapter's repo id; vLLM resolves it with ``snapshot_download`` in
    the engine's env. The rendered env lets that work (no ``HF_HUB_OFFLINE``; downloads in an emptyDir)."""
    import os

    import requests

    from tests.servers.processes import stop_process
    from tests.servers.s3test.fixture import free_port

    repo = hf_server.repos.new_repo_id("chat-lora")
    hf_server.repos.commit(
        repo, {"adapter_config.json": b'{"r": 8, "peft_type": "LORA"}', "adapter_model.safetensors": b"\0" * 64}
    )
    port = free_port()
    runtime = [
        {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "true"},
        {"name": "HF_ENDPOINT", "value": hf_server.endpoint},
    ]
    spec = dict(env=runtime, workers=[server_worker(config={"port": port})])
    env.create(model("rt", env.ns, [backend("b", loraAdapters=[], **spec)]))
    env.run()
    deployment = env.deployments()["rt-b"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert not any(e["name"] == "HF_HUB_OFFLINE" for e in container["env"])
    hf_home = next(e["value"] for e in container["env"] if e["name"] == "HF_HOME")
    assert {"name": "hf-home", "mountPath": hf_home} in container["volumeMounts"] and {
        "name": "hf-home",
        "emptyDir": {},
    } in pod["volumes"]
    assert_valid_k8s(deployment)

    # The engine process: this machine's env without any HF_* setting, plus the container's env values
    # (HF_HOME is the emptyDir: here a temporary directory).
    engine_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    engine_env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
    engine_env["HF_HOME"] = str(tmp_path / "hf-home")
    engine_env["PYTHONPATH"] = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    vllm = _start_fake_vllm(port, engine_env)
    offline_port = free_port()
    offline = _start_fake_vllm(
        offline_port, {**engine_env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "offline")}
    )
    try:
        env.core.create_namespaced_pod(
            env.ns,
            {
                "metadata": {"name": "rt-b-0", "labels": deployment["spec"]["selector"]["matchLabels"]},
                "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.10.1"}]},
            },
        )
        env.core.patch_namespaced_pod_status(
            "rt-b-0", env.ns, {"status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
        )
        env.patch_model(
            "rt", {"backends": [backend("b", loraAdapters=[{"name": "chat", "artifactURL": f"hf://{repo}"}], **spec)]}
        )
        report = env.run()
        assert report.models[0].lora == ["rt-b-0: loaded chat"], report.models[0].result
        models = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()["data"]
        assert [m["id"] for m in models if m.get("parent")] == ["chat"]
        assert list((tmp_path / "hf-home").rglob("adapter_config.json"))
        assert "Failed" not in {c["type"] for c in env.status("rt").get("conditions", []) if c["status"] == "True"}

        # Under the offline switch the same load fails as it does in vLLM.
        failed = requests.post(
            f"http://127.0.0.1:{offline_port}/v1/load_lora_adapter",
            json={"lora_name": "chat", "lora_path": repo},
            timeout=30,
        )
        assert failed.status_code == 400 and "LocalEntryNotFoundError" in failed.text
    finally:
        stop_process(vllm, timeout=10, group=True)
        stop_process(offline, timeout=10, group=True)


def test_a_model_in_foreground_deletion_is_left_to_the_garbage_collector(env: Env) -> None:
    """``kubectl delete --cascade=foreground`` of a Model (here also held by a finalizer of someone else's): the
    API server collects its workloads while the Model waits. A rollout pass then must neither re-create them
    (the deletion would wait on each one made) nor write its status. Before, the pass made its Deployment again."""
    env.create(model("held", env.ns, [backend("a100")]))
    env.run()
    assert list(env.deployments()) == ["held-a100"]
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.ns, "models", "held", {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    env.custom.delete_namespaced_custom_object(
        GROUP, VERSION, env.ns, "models", "held", propagation_policy="Foreground"
    )
    assert env.deployments() == {}  # collected: blockOwnerDeletion dependents go first
    status = env.status("held")
    report = env.run()
    assert env.deployments() == {} and env.services() == {}
    assert env.status("held") == status and report.rows == [] and not report.degraded
    held = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, "models", "held")
    assert held["metadata"]["deletionTimestamp"]
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.ns, "models", "held", {"metadata": {"finalizers": None}}
    )
