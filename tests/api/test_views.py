"""The typed views of built-in and upstream objects (engine/api/views.py): only the fields Modelplane reads,
an absent or null field read as its default, unknown fields ignored."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.api.views import CustomResourceDefinition, ModelRoute, PersistentVolumeClaim, Scalable, Scale, Workload
from tasks.optimize.bindings import workload_accelerator


def test_null_and_absent_read_as_defaults() -> None:
    scale = Scale.model_validate({"spec": None, "status": {"replicas": 2, "selector": "app=a"}, "extra": 1})
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (None, 2, "app=a")
    assert Scalable.model_validate({"kind": "ConfigMap", "data": {"a": "b"}}).spec.replicas is None
    assert Scalable.model_validate({"spec": {"replicas": 3}, "status": {"readyReplicas": 1}}).status.ready_replicas == 1


def test_a_wrong_shape_is_refused_not_guessed() -> None:
    with pytest.raises(ValidationError):
        Scale.model_validate({"spec": "three"})


def test_a_claim_holds_its_capacity_else_its_request() -> None:
    requested = {"spec": {"resources": {"requests": {"storage": "10Gi"}}}}
    assert PersistentVolumeClaim.model_validate(requested).capacity() == "10Gi"
    bound = {**requested, "status": {"phase": "Bound", "capacity": {"storage": "12Gi"}}}
    assert PersistentVolumeClaim.model_validate(bound).capacity() == "12Gi"
    assert PersistentVolumeClaim.model_validate({}).capacity() is None


def test_a_crd_document_names_its_versions() -> None:
    crd = CustomResourceDefinition.model_validate(
        {
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [
                    {"name": "v1", "subresources": {"status": {}}, "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v0", "served": False},
                ],
            }
        }
    )
    assert crd.spec.scope == "Namespaced"
    assert [(v.name, v.served, "status" in v.subresources) for v in crd.spec.versions] == [
        ("v1", True, True),
        ("v0", False, False),
    ]
    assert crd.spec.versions[0].schema_.open_api_v3_schema == {"type": "object"}


def test_a_workloads_accelerator_is_read_from_its_pod_template() -> None:
    pod = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}]}
                    ]
                }
            }
        }
    }
    lws = Workload.model_validate({"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": pod}}}})
    assert workload_accelerator(lws) == "1x H100"
    gpus = {"containers": [{"resources": {"limits": {"amd.com/gpu": 8}}}]}
    assert workload_accelerator(Workload.model_validate({"spec": {"template": {"spec": gpus}}})) == "8x amd.com/gpu"
    labelled = {"metadata": {"labels": {"inference.optimization/acceleratorName": "MI300X"}}}
    assert workload_accelerator(Workload.model_validate(labelled)) == "1x MI300X"
    assert workload_accelerator(Workload.model_validate({"spec": {"replicas": 1}})) == ""


def test_a_model_route_names_its_model() -> None:
    route = ModelRoute.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": {"modelName": "llama"}})
    assert (route.metadata.name, route.spec.model_name) == ("r", "llama")
