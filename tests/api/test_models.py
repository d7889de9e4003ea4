"""The pydantic models: every kind resolves, examples parse, seed defaults apply, rules hold."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest
import yaml

from engine.api.aim import AIMNamespaceConfig, AIMService, AIMServiceTemplate, ModelCache
from engine.api.kthena import AutoscalingPolicy, AutoscalingPolicyBinding, Model
from engine.api.llmd import VariantAutoscaling
from engine.api.registry import KINDS, KindInfo
from engine.api.validate import ManifestInvalid, parse_object
from tests.api.helpers import custom_resource_examples

EXAMPLES = custom_resource_examples()


@pytest.mark.parametrize("info", KINDS, ids=lambda k: k.kind)
def test_registry_resolves_model_and_list(info: KindInfo) -> None:
    model = info.model()
    assert model.__name__ == info.kind
    list_model = info.list_model()
    assert list_model.__name__ == info.list_kind
    assert list_model is info.list_model()  # made once
    empty = list_model()
    assert empty.to_dict()["kind"] == info.list_kind
    assert empty.to_dict()["apiVersion"] == info.api_version
    item = next((m for _, m in EXAMPLES if m["kind"] == info.kind), None)
    if item is not None:  # a LIST answer parses into the kind's own model
        answer = list_model.model_validate({"apiVersion": info.api_version, "kind": info.list_kind, "items": [item]})
        assert isinstance(answer.items[0], model)
    assert ("status" in model.model_fields) == info.has_status


def test_every_kind_has_an_example() -> None:
    assert {doc["kind"] for _, doc in EXAMPLES} == {k.kind for k in KINDS}


@pytest.mark.parametrize(("source", "manifest"), EXAMPLES, ids=[s for s, _ in EXAMPLES])
def test_examples_parse_and_round_trip(source: str, manifest: dict[str, Any]) -> None:
    # After `./dev.sh demo` the examples carry the status the optimize flow wrote: it must parse too.
    obj = parse_object(manifest)
    again = parse_object(obj.to_dict())
    assert again == obj


def test_checked_in_examples_carry_no_status() -> None:
    """The committed examples are specs only (the working tree may hold a demo run's status)."""
    repo = pathlib.Path(__file__).resolve().parents[2]
    listed = subprocess.run(["git", "ls-files", "deployments/examples"], cwd=repo, capture_output=True, text=True)
    if listed.returncode != 0 or not listed.stdout.strip():
        pytest.skip("not a git checkout")
    for path in listed.stdout.split():
        if not path.endswith((".yaml", ".yml")):
            continue
        text = subprocess.run(
            ["git", "show", f"HEAD:{path}"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout
        for doc in yaml.safe_load_all(text):
            assert not (doc or {}).get("status"), (
                f"{path}: {(doc or {}).get('kind')} {doc['metadata']['name']} has a status"
            )


def _manifest(api_version: str, kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _va(spec: dict[str, Any]) -> dict[str, Any]:
    return _manifest("llmd.ai/v1alpha1", "VariantAutoscaling", "v", "ns", spec)


def test_variant_autoscaling_accepts_first_generation() -> None:
    va = parse_object(
        _va(
            {
                "modelID": "meta/llama-3.1-8b",
                "variantID": "meta/llama-3.1-8b-A100-4",
                "accelerator": "A100",
                "acceleratorCount": 4,
                "sloClassRef": {"name": "service-classes-config", "key": "premium.yaml"},
                "variantProfile": {
                    "maxBatchSize": 256,
                    "perfParms": {
                        "decodeParms": {"alpha": "20.58", "beta": "0.41"},
                        "prefillParms": {"gamma": "5.2", "delta": "0.1"},
                    },
                },
            }
        )
    )
    assert isinstance(va, VariantAutoscaling)
    assert va.spec.scale_target_ref is None
    assert va.spec.variant_profile.perf_parms.decode_parms == {"alpha": "20.58", "beta": "0.41"}


def test_variant_autoscaling_accepts_second_generation_with_default_cost() -> None:
    va = parse_object(_va({"modelID": "meta/llama-3.1-8b", "scaleTargetRef": {"kind": "Deployment", "name": "llama"}}))
    assert va.spec.variant_cost == "10.0"
    assert va.spec.scale_target_ref.api_version is None
    assert va.spec.variant_profile is None


def test_variant_autoscaling_status_allows_scale_to_zero_and_seed_conditions() -> None:
    manifest = _va({"modelID": "m"})
    manifest["status"] = {
        "currentAlloc": {
            "variantID": "m-A100-1",
            "accelerator": "A100",
            "numReplicas": 0,
            "maxBatch": 0,
            "variantCost": "40.00",
        },
        "desiredOptimizedAlloc": {"lastRunTime": "2026-01-09T22:00:00Z", "accelerator": "A100", "numReplicas": 0},
        "actuation": {"applied": True},
        "conditions": [
            {
                "type": "MetricsAvailable",
                "status": "True",
                "reason": "MetricsAvailable",
                "message": "Saturation metrics data is available for scaling decisions",
                "lastTransitionTime": "2026-01-09T22:00:00Z",
            },
        ],
    }
    va = parse_object(manifest)
    assert va.status.desired_optimized_alloc.num_replicas == 0
    assert va.to_dict()["status"]["desiredOptimizedAlloc"]["lastRunTime"] == "2026-01-09T22:00:00Z"


def test_python_names_and_wire_names_both_work() -> None:
    va = VariantAutoscaling(metadata={"name": "x"}, spec={"model_id": "m", "variant_cost": "5"})
    wire = va.to_dict()
    assert wire["spec"] == {"modelID": "m", "variantCost": "5"}
    assert wire["apiVersion"] == "llmd.ai/v1alpha1" and wire["kind"] == "VariantAutoscaling"


def test_kthena_policy_defaults() -> None:
    policy = AutoscalingPolicy.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "metrics": [{"metricName": "vllm:num_requests_waiting", "targetValue": "5"}],
                "behavior": {"scaleUp": {"stablePolicy": {}, "panicPolicy": {"period": "15s"}}, "scaleDown": {}},
            },
        }
    )
    assert policy.spec.tolerance_percent == 10
    stable = policy.spec.behavior.scale_up.stable_policy
    assert (stable.instances, stable.percent, stable.period, stable.select_policy) == (1, 100, "15s", "Or")
    panic = policy.spec.behavior.scale_up.panic_policy
    assert (panic.percent, panic.panic_threshold_percent, panic.panic_mode_hold) == (1000, 200, "60s")
    assert policy.spec.behavior.scale_down.period == "15s"


def test_kthena_model_defaults() -> None:
    model = Model.model_validate(
        {"metadata": {"name": "m"}, "spec": {"backends": [{"name": "b", "type": "vLLM", "workers": [{}]}]}}
    )
    assert model.spec.backends[0].route_weight == 100
    assert model.spec.backends[0].workers[0].type == "server"


def test_kthena_binding_defaults_and_status_state() -> None:
    binding = AutoscalingPolicyBinding.model_validate(
        {
            "metadata": {"name": "b"},
            "spec": {
                "policyRef": {"name": "p"},
                "optimizerConfiguration": {
                    "params": [
                        {
                            "target": {"targetRef": {"kind": "Deployment", "name": "a"}, "metricEndpoint": {}},
                            "cost": 10,
                            "minReplicas": 1,
                            "maxReplicas": 4,
                        }
                    ],
                },
            },
            "status": {
                "observedGeneration": 2,
                "lastScaleTime": "2026-01-09T22:00:00Z",
                "currentReplicas": 1,
                "desiredReplicas": 3,
                "history": [{"time": "2026-01-09T21:59:00Z", "recommended": 3, "corrected": 2}],
                "panicModeEnd": "2026-01-09T22:01:00Z",
                "targets": [{"name": "a", "namespace": "ns", "replicas": 3}],
            },
        }
    )
    assert binding.spec.optimizer_configuration.cost_expansion_rate_percent == 200
    endpoint = binding.spec.optimizer_configuration.params[0].target.metric_endpoint
    assert (endpoint.uri, endpoint.port) == ("/metrics", 8100)
    assert binding.status.history[0].corrected == 2
    assert binding.to_dict()["status"]["panicModeEnd"] == "2026-01-09T22:01:00Z"


def test_aim_defaults() -> None:
    service = AIMService.model_validate({"metadata": {"name": "s"}, "spec": {"model": "m", "templateRef": "t"}})
    assert (service.spec.cache_model, service.spec.replicas, service.spec.config_ref) == (True, 1, "default")
    template = AIMServiceTemplate.model_validate({"metadata": {"name": "t"}, "spec": {"model": "m"}})
    assert (template.spec.precision, template.spec.warm_cache) == ("auto", False)
    template = AIMServiceTemplate.model_validate({"metadata": {"name": "t"}, "spec": {"model": "m"}, "status": {}})
    assert template.status.status == "Pending"
    config = AIMNamespaceConfig.model_validate(
        {"metadata": {"name": "default"}, "spec": {"routing": {"gateway": {"name": "gw"}}}}
    )
    assert config.spec.routing.auto_create_route is True
    assert (config.spec.routing.gateway.group, config.spec.routing.gateway.kind) == (
        "gateway.networking.k8s.io",
        "Gateway",
    )
    cache = ModelCache.model_validate({"metadata": {"name": "c"}, "spec": {"sourceUri": "hf://a/b"}, "status": {}})
    assert cache.status.status == "Pending"


def _error(manifest: dict[str, Any]) -> ManifestInvalid:
    with pytest.raises(ManifestInvalid) as info:
        parse_object(manifest)
    return info.value


def test_error_names_kind_name_namespace_and_path() -> None:
    error = _error(_va({"modelID": "m", "variantProfile": {"perfParms": {}, "maxBatchSize": 0}}))
    assert (error.kind, error.name, error.namespace) == ("VariantAutoscaling", "v", "ns")
    assert error.field_path == "spec.variantProfile.maxBatchSize"
    assert "greater than or equal to 1" in error.message


def test_error_path_through_lists() -> None:
    error = _error(
        {
            "apiVersion": "registry.volcano.sh/v1alpha1",
            "kind": "Model",
            "metadata": {"name": "m"},
            "spec": {"backends": [{"name": "b", "type": "vLLM", "workers": []}]},
        }
    )
    assert error.field_path == "spec.backends[0].workers"


def test_error_path_for_quantity_drops_union_tags() -> None:
    error = _error(
        {
            "apiVersion": "aim.silogen.ai/v1alpha1",
            "kind": "ModelCache",
            "metadata": {"name": "c"},
            "spec": {"sourceUri": "hf://a/b", "size": 1.5},
        }
    )
    assert error.field_path == "spec.size"


def _namespace_config(spec: dict[str, Any]) -> dict[str, Any]:
    return _manifest("aim.silogen.ai/v1alpha1", "AIMNamespaceConfig", "default", "team-a", spec)


@pytest.mark.parametrize(
    ("spec", "path", "part"),
    [
        ({"images": {"imagePullSecrets": ["ok", "Bad_Name"]}}, "spec.images.imagePullSecrets[1]", "'Bad_Name' is not"),
        ({"images": {"imagePullSecrets": ["a" * 254]}}, "spec.images.imagePullSecrets[0]", "no more than 253"),
        ({"images": {"imagePullSecrets": ["creds\n"]}}, "spec.images.imagePullSecrets[0]", "a valid Secret name"),
        (
            {"credentials": {"huggingFaceToken": {"name": "hf/../x", "key": "token"}}},
            "spec.credentials.huggingFaceToken.name",
            "'hf/../x' is not a valid Secret name: a lowercase RFC 1123 subdomain",
        ),
        (
            {"credentials": {"huggingFaceToken": {"name": "hf", "key": "to ken"}}},
            "spec.credentials.huggingFaceToken.key",
            "'to ken' is not a valid Secret key: a valid config key must consist of",
        ),
        (
            {"credentials": {"s3": [{"region": "x", "secretAccessKey": {"name": "s3", "key": ".."}}]}},
            "spec.credentials.s3[0].secretAccessKey.key",
            "must not be '..'",
        ),
        (  # it was copied into the ModelCaches the namespace requested, and into their PVCs
            {"cacheStorageClassName": "../../Bad Class\nx"},
            "spec.cacheStorageClassName",
            "is not a valid StorageClass name: a lowercase RFC 1123 subdomain",
        ),
    ],
)
def test_a_namespace_config_naming_no_valid_secret_is_invalid_naming_the_field(
    spec: dict[str, Any], path: str, part: str
) -> None:
    """The names are rendered into InferenceServices and fill Jobs and read from the cluster: refused where read."""
    error = _error(_namespace_config(spec))
    assert error.field_path == path and part in error.message, error.errors
    assert len(error.message) < 400  # a hostile name is quoted, not copied whole


def test_a_namespace_config_naming_valid_secrets_parses() -> None:
    config = parse_object(
        _namespace_config(
            {
                "images": {"imagePullSecrets": ["registry-creds", "team.a-creds"]},
                "credentials": {"huggingFaceToken": {"name": "hf-token", "key": ".HF_token-1"}},
            }
        )
    )
    assert isinstance(config, AIMNamespaceConfig) and config.spec.images.image_pull_secrets == [
        "registry-creds",
        "team.a-creds",
    ]


@pytest.mark.parametrize(
    ("ref", "part"),
    [
        ({"name": "HF", "key": "token"}, "secretKeyRef.name: 'HF' is not a valid Secret name"),
        ({"name": "hf", "key": "a/b"}, "secretKeyRef.key: 'a/b' is not a valid Secret key"),
        ({"name": "hf"}, "secretKeyRef must name a Secret and a key"),
        ("hf", "secretKeyRef must name a Secret and a key"),
    ],
)
def test_an_env_secret_key_ref_the_api_server_would_refuse_is_invalid(ref: object, part: str) -> None:
    """A ModelCache's env is rendered into its fill Job as written (valueFrom is free-form JSON in the schema)."""
    env = [{"name": "PLAIN", "value": "x"}, {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]
    cache = {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": {"sourceUri": "hf://a/b", "env": env},
    }
    error = _error(cache)
    assert error.field_path == "spec.env[1].valueFrom" and part in error.message, error.errors
    env[1]["valueFrom"] = {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}
    assert isinstance(parse_object(cache), ModelCache)


def test_error_for_foreign_kind_and_missing_kind() -> None:
    assert _error({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}).field_path == "kind"
    assert _error({"apiVersion": "v1", "metadata": {"name": "x"}}).field_path == "kind"
    assert _error({"kind": "Model"}).field_path == "apiVersion"


def test_binding_needs_exactly_one_configuration() -> None:
    base = {
        "apiVersion": "registry.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicyBinding",
        "metadata": {"name": "b"},
        "spec": {"policyRef": {"name": "p"}},
    }
    assert _error(base).field_path == "spec"
    assert "Value error" not in str(_error(base)), "a model's own check reads in its own words"


def _binding(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "registry.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicyBinding",
        "metadata": {"name": "b", "namespace": "ns"},
        "spec": {"policyRef": {"name": "p"}, **spec},
    }


_TARGET = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"}}


@pytest.mark.parametrize(
    ("spec", "path", "needle"),
    [
        (
            {"scalingConfiguration": {"target": _TARGET, "minReplicas": 8, "maxReplicas": 2}},
            "spec.scalingConfiguration",
            "minReplicas 8 is above maxReplicas 2",
        ),
        (
            {"scalingConfiguration": {"target": _TARGET, "minReplicas": 3}},
            "spec.scalingConfiguration",
            "which is 1 when not set",
        ),
        (
            {
                "optimizerConfiguration": {
                    "params": [{"target": _TARGET, "minReplicas": 9, "maxReplicas": 4, "cost": 1}]
                }
            },
            "spec.optimizerConfiguration.params[0]",
            "minReplicas 9 is above maxReplicas 4",
        ),
        (
            {"optimizerConfiguration": {"params": [{"target": _TARGET, "cost": 1}, {"target": _TARGET, "cost": 2}]}},
            "spec.optimizerConfiguration.params",
            "params[1].target names the same Deployment 'llama' as params[0].target",
        ),
    ],
)
def test_a_binding_whose_bounds_cross_or_that_names_a_target_twice_is_invalid(
    spec: dict[str, Any], path: str, needle: str
) -> None:
    """Before, min above max was clamped to max (a scale-down past the policy's behaviour) and a target named by
    two params had its replicas counted twice; now the binding is refused, naming the field."""
    error = _error(_binding(spec))
    assert error.field_path == path and needle in str(error), error


def test_a_binding_whose_bounds_meet_is_valid() -> None:
    parse_object(_binding({"scalingConfiguration": {"target": _TARGET, "minReplicas": 4, "maxReplicas": 4}}))
    other = {"targetRef": {**_TARGET["targetRef"], "name": "llama-h100"}}
    parse_object(_binding({"optimizerConfiguration": {"params": [{"target": _TARGET}, {"target": other}]}}))


def test_format_path() -> None:
    from engine.api.validate import format_path

    assert format_path(["spec", "backends", 0, "workers"]) == "spec.backends[0].workers"
    assert format_path(["spec", "limits", "nvidia.com/gpu"]) == 'spec.limits["nvidia.com/gpu"]'
    assert format_path([]) == ""
