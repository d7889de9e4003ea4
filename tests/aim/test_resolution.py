"""engine.aim.templates, engine.aim.references and engine.aim.services: GPUs from node labels, profile matching, template
status, references, names and the rendered InferenceService/HTTPRoute."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from engine.aim.discovery import DiscoveryRecord, parse_image_labels
from engine.aim.gpus import cluster_gpus, gpu_unavailable, node_affinity, normalize_gpu_model
from engine.aim.references import resolve_references
from engine.aim.services import (
    CacheMount,
    blocked_status,
    contains,
    render_http_route,
    render_inference_service,
    route_name,
    route_path,
    service_status,
    update_patch,
    workload_name,
)
from engine.aim.templates import match_profile, resolve_profile, template_status
from engine.api.aim import AIMServiceTemplateSpec
from engine.api.views import HTTPRoute, InferenceService, Node
from tasks.boundary import parse_resource

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEPLOYMENTS = "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency'}, {'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'bf16', 'metric': 'latency'}, {'gpuModel': 'MI300X', 'gpuCount': 2, 'precision': 'fp16', 'metric': 'throughput'}"


def typed(obj: dict) -> Any:
    """The object as the boundary reader hands it to the engine: its API model, status included."""
    parsed = parse_resource(obj)
    assert isinstance(parsed, BaseModel), parsed
    return parsed


def wanted(**spec: object) -> AIMServiceTemplateSpec:
    """A template spec with the selection knobs ``spec`` (its model is irrelevant to matching)."""
    return AIMServiceTemplateSpec.model_validate({"model": "m", **spec})


def node(name: str, **labels: str) -> Node:
    return Node.model_validate({"metadata": {"name": name, "labels": labels}})


def model(image: str = "r.io/llama:1", source: str = "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct") -> dict:
    labels = {"com.amd.aim.model.recommendedDeployments": DEPLOYMENTS, "com.amd.aim.model.source": source}
    record = DiscoveryRecord(image=image, read_at=NOW, digest="sha256:1", metadata=parse_image_labels(labels))
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMClusterModel",
        "metadata": {"name": "llama", "uid": "m-1", "annotations": {"aim.silogen.ai/image-metadata": record.to_json()}},
        "spec": {"name": "meta/llama:1", "image": image},
    }


def template(**spec: object) -> dict:
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMServiceTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"model": "meta/llama:1", **spec},
    }


@pytest.mark.parametrize(
    "text, expected",
    [
        ("MI300X (rev 2)", "MI300X"),
        ("Instinct-MI325X", "MI325X"),
        ("AMD Instinct MI300X", "MI300X"),
        ("RX7900-XTX", "RX7900"),
        ("NVIDIA-H100-80GB-HBM3", "H100"),
        ("Tesla-T4", "T4"),
        ("NVIDIA-A100-SXM4-80GB", "A100"),
        ("mi300x", "MI300X"),
    ],
)
def test_gpu_names_normalise(text: str, expected: str) -> None:
    assert normalize_gpu_model(text) == expected


def test_amd_and_nvidia_nodes() -> None:
    inventory = cluster_gpus(
        [
            node("a", **{"amd.com/gpu.device-id": "0x74A1", "amd.com/gpu.count": "8"}),
            node("b", **{"beta.amd.com/gpu.device-id.74b5": "4"}),
            node("c", **{"amd.com/gpu.family": "AMD Instinct MI325X"}),
            node("d", **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"}),
            node("e", **{"amd.com/gpu.device-id": "ffff"}),
            node("cpu"),
        ]
    )
    assert inventory.models() == ["AMD-FFFF", "H100", "MI300X", "MI325X"]
    assert gpu_unavailable("MI300X", 8, inventory) is None
    assert gpu_unavailable("H100", 2, inventory) is None
    assert "largest node has 2" in (gpu_unavailable("H100", 4, inventory) or "")
    assert "not available in cluster" in (gpu_unavailable("MI355X", 1, inventory) or "")
    terms = node_affinity("MI300X", inventory)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "amd.com/gpu.device-id", "operator": "In", "values": ["74a1", "74a9", "74b5", "74bd"]}
            ]
        },
        {"matchExpressions": [{"key": "beta.amd.com/gpu.device-id.74b5", "operator": "In", "values": ["4"]}]},
    ]


def test_profile_matching() -> None:
    deployments = parse_image_labels({"com.amd.aim.model.recommendedDeployments": DEPLOYMENTS}).recommended_deployments
    assert (
        match_profile(wanted(gpuModel="mi300x", gpusPerReplica=1, metric="latency", precision="auto"), deployments)[
            "precision"
        ]
        == "fp8"
    )
    assert (
        match_profile(wanted(gpuModel="MI300X", gpusPerReplica=1, metric="latency", precision="bf16"), deployments)[
            "precision"
        ]
        == "bf16"
    )
    assert match_profile(wanted(gpuModel="MI300X", gpusPerReplica=2, metric="latency"), deployments) is None
    assert (
        match_profile(wanted(gpuModel="MI300X", gpusPerReplica=2, metric="throughput"), deployments)["precision"]
        == "fp16"
    )


def test_template_resolution_states() -> None:
    gpus = cluster_gpus([node("a", **{"amd.com/gpu.device-id": "74a1"})])
    ok = resolve_profile(typed(template(gpuModel="MI300X", gpusPerReplica=1, metric="latency")), [typed(model())], gpus)
    assert ok.discovered and ok.model_sources == ("hf://meta-llama/Llama-3.1-8B-Instruct",)
    assert template_status(ok, False, {}).status == "Available"
    assert template_status(ok, True, {"hf://meta-llama/Llama-3.1-8B-Instruct": None}).status == "Progressing"
    warming = template_status(ok, True, {"hf://meta-llama/Llama-3.1-8B-Instruct": "Progressing"})
    assert (warming.status, warming.conditions[1].reason) == ("Progressing", "Warming")
    failed = template_status(ok, True, {"hf://meta-llama/Llama-3.1-8B-Instruct": "Failed"})
    assert (failed.status, failed.conditions[1].reason) == ("Failed", "WarmFailed")
    assert template_status(ok, True, {"hf://meta-llama/Llama-3.1-8B-Instruct": "Available"}).status == "Available"
    no_gpu = resolve_profile(typed(template(gpuModel="MI300X", gpusPerReplica=1)), [typed(model())], cluster_gpus([]))
    assert (no_gpu.status, no_gpu.reason) == ("Pending", "GpuNotAvailable")
    tp = resolve_profile(
        typed(template(gpuModel="MI300X", gpusPerReplica=1, tensorParallelism=2)), [typed(model())], gpus
    )
    assert tp.status == "Failed" and "spec.tensorParallelism" in tp.message
    missing = resolve_profile(typed(template(gpuModel="MI300X", gpusPerReplica=1, model="x/y")), [typed(model())], gpus)
    assert (missing.status, missing.reason) == ("Pending", "AwaitingDiscovery")
    dupes = resolve_profile(
        typed(template(gpuModel="MI300X", gpusPerReplica=1)), [typed(model()), typed(model())], gpus
    )
    assert dupes.status == "Failed" and "several" in dupes.message


def test_workload_names_fit_the_kserve_host_label() -> None:
    assert workload_name("llama-chat", "team-a") == "llama-chat-e204f50a"
    long_ns = "n" * 40
    name = workload_name("a-very-long-service-name-for-chat", long_ns)
    assert len(f"{name}-predictor-{long_ns}") <= 63
    with pytest.raises(ValueError):
        workload_name("x", "n" * 45)
    assert route_path("Team-A", "1234-ABCD") == "/team-a/1234-abcd"


def test_rendered_workload_and_references() -> None:
    service = typed(
        {
            "apiVersion": "aim.silogen.ai/v1alpha1",
            "kind": "AIMService",
            "metadata": {"name": "chat", "namespace": "ns", "uid": "s-1"},
            "spec": {"model": "meta/llama:1", "templateRef": "t", "replicas": 2},
        }
    )
    as_read = {
        **template(gpuModel="MI300X", gpusPerReplica=1, metric="latency"),
        "status": {"status": "Available", "modelSources": ["hf://meta-llama/Llama-3.1-8B-Instruct"]},
    }
    tmpl = typed(as_read)
    config = {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMNamespaceConfig",
        "metadata": {"name": "default", "namespace": "ns"},
        "spec": {"images": {"imagePullSecrets": ["reg"]}},
    }
    config = typed(config)
    resolution = resolve_references(service, [typed(model())], {"t": tmpl}, {"default": config})
    assert not resolution.blocked and resolution.deployment["precision"] == "fp8"
    gpus = cluster_gpus([node("a", **{"amd.com/gpu.device-id": "74a1"})])
    isvc = render_inference_service(
        service,
        resolution,
        gpus,
        [CacheMount("hf://meta-llama/Llama-3.1-8B-Instruct", "c1", "c1-pvc")],
        config,
    )
    predictor = isvc["spec"]["predictor"]
    assert predictor["imagePullSecrets"] == [{"name": "reg"}] and predictor["minReplicas"] == 2
    env = [e["name"] for e in predictor["containers"][0]["env"]]
    assert env == sorted(env)
    # what the resolution chose, each set once; the unset ones (profile id, tensor parallelism) are left out
    assert {e["name"]: e["value"] for e in predictor["containers"][0]["env"]} == {
        "AIM_CACHE_PATH": "/workspace/cache",
        "VLLM_ENABLE_METRICS": "true",
        "AIM_METRIC": "latency",
        "AIM_PRECISION": "fp8",
        "AIM_GPU_MODEL": "MI300X",
        "AIM_GPU_COUNT": "1",
    }
    assert predictor["containers"][0]["resources"] == {
        "requests": {"cpu": "4", "memory": "32Gi", "amd.com/gpu": "1"},
        "limits": {"memory": "48Gi", "amd.com/gpu": "1"},
    }
    assert contains({**isvc, "status": {"x": 1}}, isvc) and update_patch(isvc, isvc) is None
    changed = {**isvc, "spec": {"predictor": {**predictor, "minReplicas": 3, "maxReplicas": 3}}}
    assert update_patch(isvc, changed)["spec"]["predictor"]["minReplicas"] == 3
    route = render_http_route(service, {"name": "gw", "namespace": "gw-ns"}, isvc["metadata"]["name"])
    assert route["spec"]["rules"][0]["matches"][0]["path"]["value"] == "/ns/s-1"
    # Missing or mismatched references.
    assert resolve_references(service, [], {"t": tmpl}, {"default": config}).reason == "ModelNotFound"
    assert resolve_references(service, [typed(model())], {}, {"default": config}).reason == "TemplateNotFound"
    no_config = resolve_references(service, [typed(model())], {"t": tmpl}, {})
    assert (no_config.status, no_config.reason) == (
        "Failed",
        "RuntimeConfigMissing",
    )  # aim-engine: a missing reference is Failed
    pending = typed({**as_read, "status": {"status": "Progressing"}})
    assert (resolve_references(service, [typed(model())], {"t": pending}, {"default": config}).status) == "Pending"
    blocked = blocked_status(resolve_references(service, [typed(model())], {}, {"default": config}), False)
    assert (
        blocked.status == "Failed" and {c.type: c.reason for c in blocked.conditions}["Failure"] == "TemplateNotFound"
    )


def test_service_status_from_what_the_cluster_reports() -> None:
    ready_isvc = InferenceService.read({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    accepted = HTTPRoute.read({"status": {"parents": [{"conditions": [{"type": "Accepted", "status": "True"}]}]}})
    assert service_status(True, "CacheWarm", "", ready_isvc, accepted, True, None).status == "Running"
    assert (
        service_status(True, "CacheWarm", "", ready_isvc, HTTPRoute.read({"status": {}}), True, None).status
        == "Starting"
    )
    assert (
        service_status(True, "CacheWarm", "", InferenceService.read({"status": {}}), accepted, True, None).status
        == "Starting"
    )
    assert service_status(False, "WaitingForCache", "", None, None, True, None).status == "Starting"
    assert (
        service_status(False, "CacheFailed", "", None, None, True, None).status == "Failed"
    )  # as aim-engine reports it
    refused = HTTPRoute.read(
        {
            "status": {
                "parents": [
                    {"conditions": [{"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners"}]}
                ]
            }
        }
    )
    degraded = service_status(True, "CacheWarm", "", ready_isvc, refused, True, None)
    assert (
        degraded.status == "Degraded"
        and {c.type: c.reason for c in degraded.conditions}["RoutingReady"] == "NotAllowedByListeners"
    )
    assert service_status(True, "CacheWarm", "", ready_isvc, None, False, None).status == "Running"


def test_profile_choice_ranks_metric_before_precision() -> None:
    """aim-engine ranks metric (latency < throughput) before precision: a template open on both takes
    the latency profile even when a throughput profile has the preferred precision."""
    deployments = parse_image_labels(
        {
            "com.amd.aim.model.recommendedDeployments": "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'throughput'}, "
            "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'bf16', 'metric': 'latency'}"
        }
    ).recommended_deployments
    chosen = match_profile(wanted(gpuModel="MI300X", gpusPerReplica=1, precision="auto"), deployments)
    assert (chosen["metric"], chosen["precision"]) == ("latency", "bf16")


def test_workload_names_are_unique_and_stable_per_namespace_and_service() -> None:
    """Issue 22: two services whose names share a long prefix in a 31-character namespace got one
    InferenceService. Names hash the service too when it does not survive whole, fit the host label,
    and do not change between runs; names that fit keep aim-engine's form."""
    namespace = "ml-inference-production-eu-west"
    chat, batch = workload_name("llama-3-1-8b-chat", namespace), workload_name("llama-3-1-8b-batch", namespace)
    assert chat != batch and chat == workload_name("llama-3-1-8b-chat", namespace)
    assert route_name("llama-3-1-8b-chat", namespace) != route_name("llama-3-1-8b-batch", namespace)
    for ns in (namespace, "a" * 42, "team-a"):
        names = [f"llama-3-1-8b-instruct-{suffix}" for suffix in ("chat", "batch", "eval", "x" * 30, "y" * 30)] + [
            "svc.a",
            "svc-a",
            "Svc-A",
        ]
        workloads = {workload_name(n, ns) for n in names}
        routes = {route_name(n, ns) for n in names}
        assert len(workloads) == len(names) and len(routes) == len(names)
        assert all(len(f"{w}-predictor-{ns}") <= 63 for w in workloads)
        assert all(len(r) <= 63 for r in routes)
    assert workload_name("llama-chat", "team-a") == "llama-chat-e204f50a"  # unchanged where nothing is cut


def _service(**spec: object) -> Any:
    return typed(
        {
            "apiVersion": "aim.silogen.ai/v1alpha1",
            "kind": "AIMService",
            "metadata": {"name": "auto", "namespace": "ns", "uid": "s-2"},
            "spec": {"model": "meta/llama:1", **spec},
        }
    )


def _available(name: str, **spec: object) -> dict:
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMServiceTemplate",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"model": "meta/llama:1", **spec},
        "status": {"status": "Available", "modelSources": ["hf://meta-llama/Llama-3.1-8B-Instruct"]},
    }


def _model_with(deployments: str) -> dict:
    labels = {
        "com.amd.aim.model.recommendedDeployments": deployments,
        "com.amd.aim.model.source": "hf://meta-llama/Llama-3.1-8B-Instruct",
    }
    record = DiscoveryRecord(image="r.io/llama:1", read_at=NOW, digest="sha256:1", metadata=parse_image_labels(labels))
    return {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMClusterModel",
        "metadata": {"name": "llama", "uid": "m-1", "annotations": {"aim.silogen.ai/image-metadata": record.to_json()}},
        "spec": {"name": "meta/llama:1", "image": "r.io/llama:1"},
    }


def _selection_fixture(deployments: str, *nodes: Node) -> tuple[list[Any], dict[str, Any], Any]:
    """The model (with its image's recommended deployments), the namespace config and the GPUs of ``nodes``."""
    config = {
        "default": typed(
            {
                "apiVersion": "aim.silogen.ai/v1alpha1",
                "kind": "AIMNamespaceConfig",
                "metadata": {"name": "default", "namespace": "ns"},
                "spec": {},
            }
        )
    }
    return [typed(_model_with(deployments))], config, cluster_gpus(nodes)


def test_template_auto_selection_filters_and_ranks_as_aim_engine() -> None:
    deployments = (
        "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'throughput'}, "
        "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'bf16', 'metric': 'latency'}, "
        "{'gpuModel': 'MI325X', 'gpuCount': 1, 'precision': 'fp16', 'metric': 'throughput'}, "
        "{'gpuModel': 'MI210', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency', 'type': 'preview'}, "
        "{'gpuModel': 'H100', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency'}"
    )
    models, config, gpus = _selection_fixture(
        deployments,
        node("a", **{"amd.com/gpu.device-id": "74a1"}),
        node("b", **{"amd.com/gpu.device-id": "74a5"}),
        node("c", **{"amd.com/gpu.device-id": "740f"}),
    )
    as_read = {
        "thr-fp8": _available("thr-fp8", gpuModel="MI300X", gpusPerReplica=1, metric="throughput", precision="fp8"),
        "lat-bf16": _available("lat-bf16", gpuModel="MI300X", gpusPerReplica=1, metric="latency", precision="bf16"),
        "preview": _available("preview", gpuModel="MI210", gpusPerReplica=1, metric="latency", precision="fp8"),
        "h100": _available("h100", gpuModel="H100", gpusPerReplica=1, metric="latency", precision="fp8"),
        "other-model": {
            **_available("other-model", gpuModel="MI300X", gpusPerReplica=1),
            "spec": {"model": "x/y:1", "gpuModel": "MI300X"},
        },
        "pending": {
            **_available("pending", gpuModel="MI300X", gpusPerReplica=1, metric="latency"),
            "status": {"status": "Progressing"},
        },
    }
    templates = {name: typed(obj) for name, obj in as_read.items()}
    # Among Available, optimized templates whose GPU is in the cluster, MI300X ranks before MI210 (preview is
    # dropped anyway) and H100 is absent: metric decides between the MI300X ones, latency first.
    chosen = resolve_references(_service(), models, templates, config, gpus)
    assert not chosen.blocked and chosen.template.metadata.name == "lat-bf16"
    assert "lat-bf16" in chosen.selected
    # GPU generation outranks metric: an MI325X template wins over every MI300X one.
    templates["mi325x"] = typed(
        _available("mi325x", gpuModel="MI325X", gpusPerReplica=1, metric="throughput", precision="fp16")
    )
    assert resolve_references(_service(), models, templates, config, gpus).template.metadata.name == "mi325x"
    del templates["mi325x"]
    # A tie is reported, nothing is guessed.
    templates["lat-bf16-copy"] = typed(
        _available("lat-bf16-copy", gpuModel="MI300X", gpusPerReplica=1, metric="latency", precision="bf16")
    )
    tie = resolve_references(_service(), models, templates, config, gpus)
    assert (tie.status, tie.reason) == (
        "Failed",
        "TemplateSelectionAmbiguous",
    ) and "lat-bf16, lat-bf16-copy" in tie.message
    outcome = blocked_status(tie, False)
    assert {c.type: c.reason for c in outcome.conditions}["Resolved"] == "TemplateSelectionAmbiguous"
    # An explicit templateRef still wins over selection.
    assert (
        resolve_references(_service(templateRef="thr-fp8"), models, templates, config, gpus).template.metadata.name
        == "thr-fp8"
    )
    # Unoptimized (preview) profiles only when allowed; with only those and no GPU for the others:
    only_preview = {"preview": templates["preview"], "h100": templates["h100"]}
    refused = resolve_references(_service(), models, only_preview, config, gpus)
    assert (refused.status, refused.reason) == ("Failed", "TemplateNotFound")
    assert "UnoptimizedTemplateFiltered" in refused.message and "RequiredGPUNotInCluster" in refused.message
    allowed = resolve_references(_service(allowUnoptimized=True), models, only_preview, config, gpus)
    assert allowed.template.metadata.name == "preview"
    # Templates exist but none is Available yet; or none of the model at all: Pending.
    waiting = resolve_references(_service(), models, {"pending": templates["pending"]}, config, gpus)
    assert (waiting.status, waiting.reason) == ("Pending", "TemplateNotReady")
    assert resolve_references(_service(), models, {}, config, gpus).status == "Pending"


def _auto(name: str, **spec: object) -> dict:
    """A template discovery created (upstream: a cluster-scoped AIMClusterServiceTemplate)."""
    template = _available(name, **spec)
    template["metadata"]["labels"] = {"aim.silogen.ai/origin": "auto-generated"}
    return template


def test_a_persons_template_wins_over_the_auto_generated_ones() -> None:
    """aim-engine ``internal/aimservice/selection.go``, ``preferNamespaceTemplates`` (stage 5, before
    ``choosePreferredTemplate`` ranks): its auto-created templates are cluster-scoped, and once a namespace
    template is a candidate the cluster ones are dropped, so a user's copy of an auto template is no tie and
    a user's template wins even where an auto one would rank higher."""
    models, config, gpus = _selection_fixture(
        "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency'}, "
        "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'throughput'}",
        node("a", **{"amd.com/gpu.device-id": "74a1"}),
    )
    lat = {"gpuModel": "MI300X", "gpusPerReplica": 1, "metric": "latency", "precision": "fp8"}
    auto = {"auto-lat": typed(_auto("auto-lat", **lat))}
    mine = {"mine": typed(_available("mine", **lat))}
    chosen = resolve_references(_service(), models, {**auto, **mine}, config, gpus)
    assert not chosen.blocked and chosen.template.metadata.name == "mine", chosen.message
    thr = {"gpuModel": "MI300X", "gpusPerReplica": 1, "metric": "throughput", "precision": "fp8"}
    ranked_lower = {**auto, "mine-thr": typed(_available("mine-thr", **thr))}
    assert resolve_references(_service(), models, ranked_lower, config, gpus).template.metadata.name == "mine-thr"
    # Among discovery's templates alone, or among a person's, an equal rank is still a tie.
    tie = resolve_references(_service(), models, {**auto, "auto-copy": typed(_auto("auto-copy", **lat))}, config, gpus)
    assert (tie.status, tie.reason) == ("Failed", "TemplateSelectionAmbiguous")
    both = {**auto, **mine, "mine-copy": typed(_available("mine-copy", **lat))}
    tie = resolve_references(_service(), models, both, config, gpus)
    assert tie.reason == "TemplateSelectionAmbiguous" and "mine, mine-copy" in tie.message
    # A person's template whose GPU is absent is filtered first (stage 4): discovery's template is used.
    absent = {**auto, "mine-h100": typed(_available("mine-h100", gpuModel="H100", gpusPerReplica=1, metric="latency"))}
    assert resolve_references(_service(), models, absent, config, gpus).template.metadata.name == "auto-lat"


def test_nvidia_gpus_rank_newest_first_after_amds() -> None:
    """aim-engine ``choosePreferredTemplate`` ranks GPUs by ``gpuPreferenceOrder`` (``internal/aimservice/
    selection.go``: MI325X, MI300X, MI250X, MI210) and scores every other GPU as unknown, so an A100 and an
    H100 template of the same metric and precision tie there. Modelplane appends an NVIDIA order
    (engine.aim.references.NVIDIA_GPU_PREFERENCE) after AMD's: the H100 wins, and AMD's choices are upstream's."""
    models, config, gpus = _selection_fixture(
        "{'gpuModel': 'A100', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency'}, "
        "{'gpuModel': 'H100', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency'}, "
        "{'gpuModel': 'MI210', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency'}",
        node("a", **{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
        node("h", **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        node("m", **{"amd.com/gpu.device-id": "740f"}),
    )
    spec = {"gpusPerReplica": 1, "metric": "latency", "precision": "fp8"}
    templates = {n: typed(_available(n, gpuModel=g, **spec)) for n, g in (("a100", "A100"), ("h100", "H100"))}
    chosen = resolve_references(_service(), models, templates, config, gpus)
    assert not chosen.blocked and chosen.template.metadata.name == "h100", chosen.message
    templates["mi210"] = typed(_available("mi210", gpuModel="MI210", **spec))
    assert resolve_references(_service(), models, templates, config, gpus).template.metadata.name == "mi210"
