"""Pure rollout decisions: engine flags, mounts, multi-pod groups, SGLang, runtime LoRA, flavors, revisions."""

from __future__ import annotations

import copy
import json
import random
import shlex
from datetime import UTC
from typing import Any

import kubernetes_validate
import pytest

from engine.api.kthena import Model
from engine.api.llmaz import OpenModel
from engine.rollout.kthena import ModelRef, multi_node_hold, workloads_of
from engine.rollout.kthena_validation import validate_model
from engine.rollout.kthena_weights import cache_mount, direct_weights
from engine.rollout.kthena_workloads import (
    ANNOTATION_LORA,
    config_flags,
    render_ray_service,
    render_service,
    render_workload,
    runtime_lora_change,
)
from engine.rollout.openmodel import choose_flavor
from engine.rollout.workloads import ANNOTATION_BASE_REVISION, merge_diff, revision, stamp, update_patch
from tests.rollout.models import backend, model, server_worker


def parsed(*backends: dict[str, Any], **spec: Any) -> Model:
    manifest = model("m", "ns", list(backends), **spec)
    manifest["metadata"]["uid"] = "0000-1111"
    result, errors = validate_model(manifest)
    assert result is not None and not errors, errors
    return result


def valid(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(json.loads(json.dumps(obj)), "1.30", strict=True)


def test_config_becomes_sorted_flags() -> None:
    flags = config_flags(
        {
            "tensor_parallel_size": 2,
            "enforce-eager": True,
            "enable-prefix-caching": False,
            "trust-remote-code": "",
            "kv-transfer-config": {"kv_role": "kv_both", "kv_connector": "X"},
        }
    )
    assert flags == [
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--kv-transfer-config",
        '{"kv_connector":"X","kv_role":"kv_both"}',
        "--tensor-parallel-size",
        "2",
        "--trust-remote-code",
    ]


@pytest.mark.parametrize(
    "uri, volume, path, directory",
    [
        ("pvc://models", {"persistentVolumeClaim": {"claimName": "models"}}, "/models", "/models"),
        ("pvc://models/sub/dir", {"persistentVolumeClaim": {"claimName": "models"}}, "/models", "/models/sub/dir"),
        (
            "hostpath:///var/cache/models",
            {"hostPath": {"path": "/var/cache/models", "type": "DirectoryOrCreate"}},
            "/var/cache/models",
            "/var/cache/models",
        ),
    ],
)
def test_cache_uri_is_mounted_at_an_absolute_path(uri: str, volume: dict[str, Any], path: str, directory: str) -> None:
    mount, cache_dir = cache_mount(uri)
    assert {k: v for k, v in mount.volume.items() if k != "name"} == volume
    assert mount.mount_path == path and cache_dir == directory


def test_cache_uri_download_runs_the_shared_downloader_into_kthenas_layout() -> None:
    m = parsed(
        backend(
            "b",
            modelURI="hf://Qwen/Qwen2.5-7B-Instruct",
            cacheURI="pvc://cache",
            env=[{"name": "HF_ENDPOINT", "value": "http://mirror"}, {"name": "OTHER", "value": "x"}],
        )
    )
    weights = direct_weights(m.spec.backends[0], "ghcr.io/modelplane/modelplane:0.1.0")
    assert (
        weights is not None
        and weights.model_path.startswith("/cache/")
        and len(weights.model_path) == len("/cache/") + 32
    )
    init = weights.init_containers[0]
    assert init["command"][:3] == ["modelplane", "cache", "fill"] and init["command"][-1] == weights.model_path
    assert init["env"] == [{"name": "HF_ENDPOINT", "value": "http://mirror"}]
    ref = ModelRef.of(m)
    deployment = render_workload(ref, m.spec.backends[0], workloads_of(ref, m.spec.backends[0])[0], weights, {}, 1)
    valid(deployment)


class MultiNodeContract:
    """What vLLM's ``examples/online_serving/multi-node-serving.sh`` does with its arguments (its contract,
    re-stated, not its code): ``leader`` takes ``--ray_port`` (6379), ``--ray_cluster_size`` (required) and
    ``--ray_init_timeout`` (300), forwards the rest to ``ray start --head --port=$ray_port`` and waits until
    ``ray_cluster_size`` nodes are alive; ``worker`` takes ``--ray_address`` (required), ``--ray_port`` (6379)
    and ``--ray_init_timeout``, and runs ``ray start --address=$ray_address:$ray_port --block`` plus the rest."""

    def __init__(self, command: str) -> None:
        script_call = command.split(" && ", 1)[0]
        words = shlex.split(script_call)
        assert words[0].endswith("/multi-node-serving.sh"), words
        self.subcommand, args = words[1], words[2:]
        self.ray_port, self.timeout, self.ray_address, self.cluster_size = "6379", "300", "", ""
        self.start_params: list[str] = []
        options = {"--ray_port": "ray_port", "--ray_init_timeout": "timeout"}
        options.update(
            {"--ray_address": "ray_address"} if self.subcommand == "worker" else {"--ray_cluster_size": "cluster_size"}
        )
        for arg in args:
            key, eq, value = arg.partition("=")
            if eq and key in options:
                setattr(self, options[key], value)
            else:
                self.start_params.append(arg)
        assert self.subcommand in ("leader", "worker")
        assert self.ray_address if self.subcommand == "worker" else self.cluster_size, "the script exits 1 without it"

    @property
    def ray_start(self) -> list[str]:
        """The ``ray start`` command the script runs."""
        if self.subcommand == "leader":
            return ["ray", "start", "--head", f"--port={self.ray_port}", *self.start_params]
        return ["ray", "start", f"--address={self.ray_address}:{self.ray_port}", "--block", *self.start_params]


def test_multi_pod_worker_becomes_a_leader_and_ray_followers() -> None:
    worker = server_worker(pods=3, resources={"limits": {"nvidia.com/gpu": "8"}})
    m = parsed(backend("big", minReplicas=2, maxReplicas=2, workers=[worker]))
    ref, b = ModelRef.of(m), m.spec.backends[0]
    workloads = workloads_of(ref, b)
    # Deployments run one ray group (a head + 2 workers) whatever the bounds: a second head would split them.
    assert [(w.name, w.role, w.min_replicas, w.max_replicas, w.scaled) for w in workloads] == [
        ("m-big", "server", 1, 1, True),
        ("m-big-worker", "server-worker", 2, 2, False),
    ]
    assert "held at one serving group" in (multi_node_hold(b) or "")
    weights = direct_weights(b, "img")
    assert weights is not None
    ray = render_ray_service(ref, b, workloads[0])
    leader = render_workload(ref, b, workloads[0], weights, {}, 1)
    follower = render_workload(ref, b, workloads[1], weights, {}, 2, leader_service=ray["metadata"]["name"])
    script = leader["spec"]["template"]["spec"]["containers"][0]["args"][1]
    assert " && python3 -m vllm.entrypoints.openai.api_server" in script and script.endswith(
        "--distributed-executor-backend ray"
    )

    # The leader starts a head on the ray Service's port and waits for all 3 pods of the group.
    head = MultiNodeContract(script)
    ray_port = ray["spec"]["ports"][0]["port"]
    assert (
        head.subcommand == "leader"
        and head.cluster_size == "3"
        and head.ray_start == ["ray", "start", "--head", f"--port={ray_port}", "--num-gpus=8"]
    )
    # The worker dials host:port exactly once (the script appends the port itself): the ray Service.
    joiner = MultiNodeContract(follower["spec"]["template"]["spec"]["containers"][0]["args"][1])
    assert (
        joiner.ray_start[:4] == ["ray", "start", f"--address=m-big-ray:{ray_port}", "--block"]
        and joiner.start_params == []
    )
    # Both wait longer than the script's 300 s default, and within the leader's startup budget.
    startup = leader["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    assert 300 < int(head.timeout) == int(joiner.timeout) < startup["periodSeconds"] * startup["failureThreshold"]

    # Readiness: workers join before the leader is Ready (vLLM serves only after they joined), so the ray
    # Service publishes not-ready addresses; a worker is Ready once the head answers.
    assert ray["spec"]["publishNotReadyAddresses"] is True and ray["spec"]["clusterIP"] == "None"
    assert ray["spec"]["selector"] == leader["spec"]["selector"]["matchLabels"]
    probe = follower["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["exec"]["command"] == ["bash", "-c", f"ray status --address=m-big-ray:{ray_port}"]
    assert "readinessProbe" in leader["spec"]["template"]["spec"]["containers"][0]
    service = render_service(ref, b, workloads[0])
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]
    for obj in (leader, follower, service, ray):
        valid(obj)


@pytest.mark.parametrize(("quantity", "gpus"), [("1e1", 10), ("2000m", 2), (4, 4), ("0", 0)])
def test_a_multi_pod_leader_reads_any_integer_gpu_quantity_as_its_value(quantity: str | int, gpus: int) -> None:
    worker = server_worker(pods=2, resources={"limits": {"nvidia.com/gpu": quantity}})
    m = parsed(backend("big", workers=[worker]))
    ref, b = ModelRef.of(m), m.spec.backends[0]
    leader_workload = workloads_of(ref, b)[0]
    weights = direct_weights(b, "img")
    assert weights is not None
    leader = render_workload(ref, b, leader_workload, weights, {}, 1)
    head = MultiNodeContract(leader["spec"]["template"]["spec"]["containers"][0]["args"][1])
    assert head.ray_start[-1] == f"--num-gpus={gpus}"


@pytest.mark.parametrize(
    ("where", "quantity", "why"),
    [
        ("limits", "-1", "negative"),
        ("limits", "1.5", "not a whole number"),
        ("requests", "500m", "not a whole number"),
        ("limits", "1e400", "above 9223372036854775807"),
    ],
)
def test_a_worker_gpu_quantity_that_is_no_whole_count_fails_the_model_naming_it(
    where: str, quantity: str, why: str
) -> None:
    worker = server_worker(pods=2, resources={where: {"nvidia.com/gpu": quantity, "memory": "1.5Gi"}})
    result, errors = validate_model(model("m", "ns", [backend("b", workers=[worker])]))
    assert result is not None
    assert [e.field for e in errors] == [f'spec.backends[0].workers[0].resources.{where}["nvidia.com/gpu"]']
    assert why in errors[0].message


def test_a_malformed_status_neither_fails_the_model_nor_stays() -> None:
    from datetime import datetime

    from engine.rollout.kthena_status import BackendState, model_status

    manifest = model("m", "ns", [backend("b")])
    manifest["status"] = {"conditions": [{"type": "Ready", "status": "Maybe"}, 5]}
    result, errors = validate_model(manifest)
    assert result is not None and errors == []  # the status is the rollout's output, not its input
    now = datetime(2026, 1, 1, tzinfo=UTC)
    status = model_status(manifest["status"], 1, now, [BackendState("b", 1, True)], None)
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Initialized", "True"), ("Active", "True")]
    assert model_status(5, 1, now, [], None)["conditions"][0]["type"] == "Initialized"


@pytest.mark.parametrize(
    "status",
    [5, "broken", {"conditions": 5}, {"conditions": [5, "Available"]}, {"conditions": [{"type": "Available"}]}],
)
def test_a_workload_status_of_any_shape_reads_as_not_available(status: object) -> None:
    from engine.rollout.kthena_native import model_serving_available
    from engine.rollout.kthena_status import deployment_available

    assert not deployment_available({"kind": "Deployment", "status": status})
    serving = {"spec": {"replicas": 2}, "status": status}
    assert not model_serving_available(serving)
    assert deployment_available({"status": {"conditions": [5, {"type": "Available", "status": "True"}]}})
    assert not model_serving_available({"spec": {"replicas": "2"}, "status": {"availableReplicas": "2"}})
    assert model_serving_available({"spec": {"replicas": 2}, "status": {"availableReplicas": 2}})


def test_sglang_serves_loras_with_its_own_flags() -> None:
    m = parsed(
        backend(
            "s",
            type="SGLang",
            workers=[server_worker(image="lmsysorg/sglang:v0.4.9", config={})],
            loraAdapters=[{"name": "a", "artifactURL": "pvc://loras/a"}],
        )
    )
    ref, b = ModelRef.of(m), m.spec.backends[0]
    from engine.rollout.kthena_weights import lora_mount

    weights = direct_weights(b, "img")
    assert weights is not None
    deployment = render_workload(ref, b, workloads_of(ref, b)[0], weights, {"a": lora_mount("a", "loras", "a")}, 1)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--lora-paths") + 1] == "a=/loras/a/a" and "--enable-metrics" in args
    valid(deployment)


def lora_backend(adapters: dict[str, str], runtime: bool = True) -> Model:
    env = [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "true"}] if runtime else []
    return parsed(backend("b", env=env, loraAdapters=[{"name": n, "artifactURL": u} for n, u in adapters.items()]))


def live_with(adapters: dict[str, str], base: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {ANNOTATION_LORA: json.dumps(adapters), ANNOTATION_BASE_REVISION: base}}}


def test_runtime_lora_change_only_when_allowed_and_only_adapters_changed() -> None:
    old = {"sql": "hf://acme/sql"}
    new = lora_backend({"chat": "hf://acme/chat"}).spec.backends[0]
    change = runtime_lora_change(new, live_with(old, "r1"), "r1")
    assert change is not None and change.unload == ("sql",) and change.load == (("chat", "acme/chat"),)
    assert runtime_lora_change(new, live_with(old, "r0"), "r1") is None  # something else changed too: roll out
    assert (
        runtime_lora_change(
            lora_backend({"chat": "hf://acme/chat"}, runtime=False).spec.backends[0], live_with(old, "r1"), "r1"
        )
        is None
    )
    assert (
        runtime_lora_change(lora_backend({"x": "s3://bucket/x"}).spec.backends[0], live_with(old, "r1"), "r1") is None
    )  # needs a mount
    assert runtime_lora_change(lora_backend(old).spec.backends[0], live_with(old, "r1"), "r1") is None  # nothing to do


def test_an_offline_backend_loads_new_adapters_from_their_caches_not_by_repo_id() -> None:
    """With ``HF_HUB_OFFLINE=1`` in the backend's env vLLM cannot resolve a repo id: roll out (cache, mount, path)."""
    old = {"sql": "hf://acme/sql"}
    offline = lora_backend({"chat": "hf://acme/chat"})
    offline.spec.backends[0].env.append(type(offline.spec.backends[0].env[0])(name="HF_HUB_OFFLINE", value="1"))
    assert runtime_lora_change(offline.spec.backends[0], live_with(old, "r1"), "r1") is None
    online = lora_backend({"chat": "hf://acme/chat"}).spec.backends[0]
    assert runtime_lora_change(online, live_with(old, "r1"), "r1") is not None  # online: by repo id at runtime


def test_revision_ignores_replicas_and_update_patch_removes_dropped_keys() -> None:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "template": {"spec": {"nodeSelector": {"a": "1"}}}},
    }
    other = copy.deepcopy(obj)
    other["spec"]["replicas"] = 5
    assert revision(obj) == revision(other)
    live = stamp(copy.deepcopy(obj))
    live["spec"]["progressDeadlineSeconds"] = 600  # set by the API server, never rendered: left alone
    desired = stamp({**copy.deepcopy(obj), "spec": {"replicas": 1, "template": {"spec": {}}}})
    assert update_patch(live, desired)["spec"] == {"template": {"spec": {"nodeSelector": None}}, "replicas": 1}
    assert merge_diff({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}}) == {"b": {"c": 3}}


def openmodel(flavors: list[dict[str, Any]]) -> OpenModel:
    return OpenModel.model_validate(
        {
            "apiVersion": "llmaz.io/v1alpha1",
            "kind": "OpenModel",
            "metadata": {"name": "m"},
            "spec": {"familyName": "f", "source": {"uri": "host:///m"}, "inferenceConfig": {"flavors": flavors}},
        }
    )


def test_flavor_fallback_in_order() -> None:
    om = openmodel(
        [{"name": "a", "nodeSelector": {"gpu": "a"}}, {"name": "b", "nodeSelector": {"gpu": "b"}}, {"name": "c"}]
    )
    assert choose_flavor(om, None, [{"gpu": "a"}]).flavor.name == "a"
    placement = choose_flavor(om, None, [{"gpu": "b"}])
    assert placement.flavor.name == "b" and "skipped: a: no Node matches gpu=a" in placement.message
    assert choose_flavor(om, "b", [{"gpu": "a"}]).flavor.name == "c"  # starts at the requested one
    assert choose_flavor(om, None, None).flavor.name == "a" and not choose_flavor(om, None, None).checked
    only = openmodel([{"name": "a", "nodeSelector": {"gpu": "a"}}])
    assert choose_flavor(only, None, [{"gpu": "z"}]).flavor is None
    with pytest.raises(ValueError, match="not one of"):
        choose_flavor(om, "zz", [])


def test_openmodel_parallelism_and_resources_come_from_the_flavor() -> None:
    from engine.rollout.openmodel import parallelism_args, runner_resources

    om = openmodel(
        [
            {"name": "a100x2", "limits": {"nvidia.com/gpu": 2}},
            {"name": "tp-param", "limits": {"nvidia.com/gpu": 8}, "params": {"TP": "4", "PP": "2"}},
            {"name": "one", "limits": {"nvidia.com/gpu": 1, "cpu": "16"}},
        ]
    )
    two, params, one = om.spec.inference_config.flavors
    assert parallelism_args(two) == ["--tensor-parallel-size", "2"]
    assert parallelism_args(params) == ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"]
    assert parallelism_args(one) == [] and parallelism_args(None) == []
    assert runner_resources(one) == {
        "requests": {"cpu": "16", "memory": "8Gi", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "16", "memory": "8Gi", "nvidia.com/gpu": "1"},
    }
    assert runner_resources(None)["limits"] == {"cpu": "4", "memory": "8Gi"}


def test_openmodel_parallelism_reads_any_integer_gpu_quantity() -> None:
    from engine.rollout.openmodel import parallelism_args

    om = openmodel(
        [{"name": "exp", "limits": {"nvidia.com/gpu": "1e1"}}, {"name": "milli", "limits": {"amd.com/gpu": "2000m"}}]
    )
    exp, milli = om.spec.inference_config.flavors
    assert parallelism_args(exp) == ["--tensor-parallel-size", "10"]
    assert parallelism_args(milli) == ["--tensor-parallel-size", "2"]


@pytest.mark.parametrize(
    ("flavor", "field", "why"),
    [
        ({"limits": {"nvidia.com/gpu": "-1"}}, 'limits["nvidia.com/gpu"]', "negative"),
        ({"limits": {"nvidia.com/gpu": "1.5"}}, 'limits["nvidia.com/gpu"]', "not a whole number"),
        ({"limits": {"nvidia.com/gpu": "500m"}}, 'limits["nvidia.com/gpu"]', "not a whole number"),
        ({"limits": {"amd.com/gpu": "1e400"}}, 'limits["amd.com/gpu"]', "above"),
        ({"params": {"TP": "abc"}}, "params.TP", "not an integer from 1 to 1024"),
        ({"params": {"TP": "1.5"}}, "params.TP", "not an integer from 1 to 1024"),
        ({"params": {"TP": "0"}}, "params.TP", "not an integer from 1 to 1024"),
        ({"params": {"TP": "99999999999999999999"}}, "params.TP", "not an integer from 1 to 1024"),
        ({"params": {"PP": "two"}}, "params.PP", "not an integer from 1 to 1024"),
    ],
)
def test_an_openmodel_flavor_that_cannot_be_rendered_is_refused_naming_its_field(
    flavor: dict[str, Any], field: str, why: str
) -> None:
    from engine.rollout.openmodel import REASON_INVALID_FLAVOR, invalid_reason, validate_openmodel

    manifest = openmodel(
        [{"name": "ok", "limits": {"nvidia.com/gpu": 2}, "params": {"TP": "2"}}, {"name": "bad", **flavor}]
    )
    model_, _, errors = validate_openmodel(manifest.model_dump(by_alias=True, exclude_none=True, mode="json"))
    assert model_ is not None
    assert [e.field for e in errors] == [f"spec.inferenceConfig.flavors[1].{field}"] and why in errors[0].message
    assert invalid_reason(errors) == REASON_INVALID_FLAVOR


def test_an_openmodel_whose_name_is_no_dns1035_label_gets_a_service_that_is() -> None:
    from engine.api.identity import name_error
    from engine.caches.sources import ModelSource
    from engine.rollout.openmodel import Placement, render_openmodel, service_name
    from engine.rollout.workloads import identity_problems

    assert service_name("qwen2-5-0-5b-instruct") == "qwen2-5-0-5b-instruct"  # already a label: kept
    names = ["qwen2.5-0.5b-instruct", "qwen2-5-0-5b-instruct", "7b.model", "a" * 70, "q." * 40 + "x", "a" * 253]
    services = [service_name(n) for n in names]
    assert len(set(services)) == len(names), "a derived name is never another model's"
    assert all(name_error("v1", "Service", s) is None for s in services)
    assert services[0].startswith("qwen2-5-0-5b-instruct-") and services[2].startswith("om-7b-model-")
    for name in names:
        om = openmodel([{"name": "any"}])
        om.metadata.name = name
        objects = [
            stamp(o)
            for o in render_openmodel(
                om,
                ModelSource("host", path="/m"),
                None,
                "ns",
                1,
                Placement(om.spec.inference_config.flavors[0], "m", True),
            )
        ]
        assert identity_problems(objects) == [], name
        for obj in objects:
            valid(obj)
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "qwen2.5", "namespace": "ns"}}
    assert identity_problems([bad]) == [f"Service/qwen2.5: metadata.name: {name_error('v1', 'Service', 'qwen2.5')}"]


def test_openmodels_alike_in_their_first_63_characters_never_select_each_others_pods() -> None:
    from engine.caches.sources import ModelSource
    from engine.rollout.openmodel import Placement, model_name_label, render_openmodel

    assert model_name_label("qwen2.5-0.5b-instruct") == "qwen2.5-0.5b-instruct"  # llmaz's label, unchanged
    assert model_name_label("m" * 63) == "m" * 63
    prefix = "a" * 40 + "." + "b" * 30  # 71 characters: a valid OpenModel name, too long for a label value
    selectors, pod_labels = [], []
    for name in (prefix + "-chat", prefix + "-code", "m" * 64, "m" * 65):
        om = openmodel([{"name": "any"}])
        om.metadata.name = name
        rendered = render_openmodel(
            om, ModelSource("host", path="/m"), None, "ns", 1, Placement(om.spec.inference_config.flavors[0], "m", True)
        )
        deployment = next(o for o in rendered if o["kind"] == "Deployment")
        service = next(o for o in rendered if o["kind"] == "Service")
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        assert deployment["spec"]["template"]["metadata"]["labels"].items() >= service["spec"]["selector"].items()
        selectors.append(tuple(sorted(service["spec"]["selector"].items())))
        pod_labels.append(deployment["spec"]["template"]["metadata"]["labels"]["llmaz.io/model-name"])
    assert len(set(selectors)) == 4, "each OpenModel's Service selects its own pods only"
    assert all(len(value) <= 63 and value[-1].isalnum() for value in pod_labels)
    assert pod_labels[0].startswith("a" * 40 + ".") and pod_labels[0] != model_name_label(prefix + "-code")


def test_backend_level_policy_gives_a_policy_and_a_binding_per_backend_scaling_its_group() -> None:
    from engine.rollout.kthena_autoscaling import ANNOTATION_SCALE_TO_ZERO, render_autoscaling
    from tests.rollout.models import QUEUE_POLICY

    prefill, decode = server_worker(type="prefill", replicas=2), server_worker(type="decode")
    m = parsed(
        backend(
            "pd",
            type="vLLMDisaggregated",
            minReplicas=1,
            maxReplicas=3,
            workers=[prefill, decode],
            autoscalingPolicy=QUEUE_POLICY,
        ),
        backend("fixed"),
    )
    objects = render_autoscaling(m, ModelRef.of(m))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("AutoscalingPolicy", "m-pd"),
        ("AutoscalingPolicyBinding", "m-pd"),
    ]
    group_binding = objects[1]["spec"]
    assert group_binding["policyRef"] == {"name": "m-pd"}
    assert group_binding["scalingConfiguration"]["target"]["targetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "m-pd-prefill",
    }
    # Bounds count groups (the backend's replicas); each group is 2 prefill + 1 decode.
    assert (
        group_binding["scalingConfiguration"]["minReplicas"],
        group_binding["scalingConfiguration"]["maxReplicas"],
    ) == (1, 3)
    groups = json.loads(objects[1]["metadata"]["annotations"]["modelplane.io/scale-groups"])
    assert groups == {
        "m-pd-prefill": [
            {"name": "m-pd-prefill", "perGroup": 2, "serves": True},
            {"name": "m-pd-decode", "perGroup": 1, "serves": True},
        ]
    }
    assert ANNOTATION_SCALE_TO_ZERO not in objects[1]["metadata"].get("annotations", {})
    assert objects[0]["spec"]["metrics"] == [{"metricName": "vllm:num_requests_waiting", "targetValue": 5}]


def test_status_conditions_follow_the_backends_and_failures() -> None:
    from datetime import datetime

    from engine.rollout.kthena_status import BackendState, Failure, model_status

    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    first = model_status(
        {}, 1, t0, [BackendState("a", 0, False, "waiting for ModelCache x (Pending) to hold hf://o/n")], None
    )
    types = {c["type"]: c for c in first["conditions"]}
    assert types["Initialized"]["reason"] == "ModelCreating" and types["Active"]["reason"] == "ModelProcessing"
    assert "a: waiting for ModelCache x" in types["Active"]["message"] and "Failed" not in types
    failed = model_status(
        first, 2, t1, [BackendState("a", 1, True)], Failure("InvalidModel", "spec.backends[0].workers: bad")
    )
    types = {c["type"]: c for c in failed["conditions"]}
    assert (
        types["Failed"]["status"] == "True"
        and types["Active"]["status"] == "False"
        and failed["observedGeneration"] == 2
    )
    fixed = model_status(failed, 3, t1, [BackendState("a", 2, True)], None)
    types = {c["type"]: c for c in fixed["conditions"]}
    assert (types["Failed"]["status"], types["Failed"]["reason"]) == ("False", "ModelHealthy")
    assert types["Active"]["reason"] == "ModelAvailable" and fixed["backendStatuses"] == [{"name": "a", "replicas": 2}]
    assert types["Initialized"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_runtime_sidecar_follows_the_seed_env_and_the_binding_reads_its_port() -> None:
    from engine.rollout.kthena_autoscaling import render_autoscaling
    from engine.rollout.kthena_native import runtime_container, with_runtime
    from tests.rollout.models import QUEUE_POLICY

    env = [
        {"name": "RUNTIME_PORT", "value": "9100"},
        {"name": "RUNTIME_URL", "value": "http://localhost:8001"},
        {"name": "RUNTIME_METRICS_PATH", "value": "/engine-metrics"},
    ]
    m = parsed(backend("b", minReplicas=1, maxReplicas=4, scalingCost=10, env=env), autoscalingPolicy=QUEUE_POLICY)
    ref, b = ModelRef.of(m), m.spec.backends[0]
    sidecar = runtime_container(ref, b, b.workers[0], "ghcr.io/volcano-sh/runtime:latest")
    args = sidecar["args"]
    assert (
        args[args.index("--port") + 1],
        args[args.index("--engine-base-url") + 1],
        args[args.index("--engine-metrics-path") + 1],
    ) == ("9100", "http://localhost:8001", "/engine-metrics")
    assert args[args.index("--model") + 1] == "m" and sidecar["ports"][0]["containerPort"] == 9100
    deployment = render_workload(ref, b, workloads_of(ref, b)[0], direct_weights(b, "img"), {}, 1)
    deployment["spec"]["template"] = with_runtime(
        deployment["spec"]["template"], ref, b, b.workers[0], "ghcr.io/volcano-sh/runtime:latest"
    )
    valid(deployment)
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9100"
    binding = render_autoscaling(m, ref, runtime=True)[1]
    assert binding["spec"]["optimizerConfiguration"]["params"][0]["target"]["metricEndpoint"] == {
        "uri": "/metrics",
        "port": 9100,
    }


def test_the_plan_renders_every_child_of_a_backend_and_reads_its_state() -> None:
    """kthena_plan: a multi-pod backend renders its leader, followers, Services; it owns exactly what it
    renders (and its ModelServing/ModelServer names); its state comes from what the Deployments report."""
    from engine.rollout.kthena_native import NativeMode
    from engine.rollout.kthena_plan import backend_states, model_children, owned_children, render_backend

    m = parsed(backend("big", minReplicas=2, maxReplicas=2, workers=[server_worker(pods=3)]))
    ref, b = ModelRef.of(m), m.spec.backends[0]
    weights = direct_weights(b, "img")
    assert weights is not None
    rendered = render_backend(m, ref, b, weights, {}, {}, NativeMode())
    keys = {(o["kind"], o["metadata"]["name"]) for o in rendered.objects}
    assert keys == {
        ("Deployment", "m-big"),
        ("Deployment", "m-big-worker"),
        ("Service", "m-big"),
        ("Service", "m-big-ray"),
    }
    assert keys <= owned_children(ref, b) and owned_children(ref, b) - keys == {
        ("Service", "m-big-worker"),
        ("ModelServing", "m-big"),
        ("ModelServer", "m-big"),
    }
    replicas = {o["metadata"]["name"]: o["spec"].get("replicas") for o in rendered.objects if o["kind"] == "Deployment"}
    assert replicas == {"m-big": 1, "m-big-worker": 2} and rendered.workloads == [
        "Deployment/m-big",
        "Deployment/m-big-worker",
    ]
    assert all("modelplane.io/revision" in o["metadata"]["annotations"] for o in rendered.objects)
    assert [o["kind"] for o in model_children(m, ref, NativeMode())] == ["ConfigMap"]  # fixed size: no policy

    ready = {"status": {"replicas": 1, "conditions": [{"type": "Available", "status": "True"}]}}
    objects = {
        ("Deployment", "m-big"): ready,
        ("Deployment", "m-big-worker"): {**ready, "status": {**ready["status"], "replicas": 2}},
    }
    (state,) = backend_states(m, objects, {})
    assert (state.replicas, state.available, state.waiting) == (3, True, None) and state.held
    assert backend_states(m, {}, {}, model_serving=True)[0].held is None  # a ModelServing scales groups
    (waiting,) = backend_states(m, objects, {"big": "waiting for ModelCache x"})
    assert not waiting.available and waiting.waiting == "waiting for ModelCache x"
    (partial,) = backend_states(m, {("Deployment", "m-big"): ready}, {})
    assert not partial.available


def test_model_route_shapes_by_backend_count_and_the_adapter_limit() -> None:
    """Registry-era ``convert/model_route.go`` ``getRulesAndLoraAdapters``: one backend gets one rule with the
    Model's ``modelMatch`` as written (every adapter is on it); a pinned ``body.model`` there would turn the
    adapters' requests away, so that case gets the per-adapter rules. The route lists at most 10 adapters
    (the CRD's maxItems) and says which it cannot route."""
    from engine.rollout.kthena_native import render_model_route, route_errors
    from tests.rollout.kthena_router import NoRoute, Request, route

    sql = [{"name": "sql", "artifactURL": "pvc://adapters/sql"}]
    header = {"headers": {"x-tenant": {"prefix": "gold"}}}
    m = parsed(backend("a", loraAdapters=sql), modelMatch=header)
    rules = render_model_route(m, ModelRef.of(m))["spec"]["rules"]
    assert rules == [
        {"name": "default", "modelMatch": header, "targetModels": [{"modelServerName": "m-a", "weight": 100}]}
    ]
    pinned = parsed(backend("a", loraAdapters=sql), modelMatch={"body": {"model": "m"}})
    obj = render_model_route(pinned, ModelRef.of(pinned))
    assert [r["name"] for r in obj["spec"]["rules"]] == ["default", "sql"]
    assert route([obj], Request("sql"), random.Random(0)) == ("m-a", True)
    with pytest.raises(NoRoute):
        route([obj], Request("other"), random.Random(0))

    many = [{"name": f"ad{i:02d}", "artifactURL": f"pvc://adapters/{i}"} for i in range(12)]
    wide = parsed(backend("a", loraAdapters=many), backend("b"))
    spec = render_model_route(wide, ModelRef.of(wide))["spec"]
    assert len(spec["loraAdapters"]) == 10 and len(spec["rules"]) == 11
    (error,) = route_errors(wide)
    assert error.field == "spec.backends[].loraAdapters" and "ad10, ad11" in error.message
    assert route_errors(m) == []
