"""engine.caches.requests: the caches AIM templates and services, Kthena Models and OpenModels need, decided
from their API models (parsed once at the boundary, as the warm-caches flow reads them)."""

from __future__ import annotations

from typing import Any

from engine.api.aim import AIMService, AIMServiceTemplate
from engine.api.kthena import Model
from engine.api.llmaz import OpenModel
from engine.api.validate import ManifestInvalid, parse_object
from engine.caches.requests import (
    RequestProblem,
    kthena_requests,
    openmodel_requests,
    service_requests,
    template_requests,
)

AIM = "aim.silogen.ai/v1alpha1"


def template(name: str, sources: list[str], warm: bool = True) -> AIMServiceTemplate:
    obj = AIMServiceTemplate.model_validate(
        {
            "apiVersion": AIM,
            "kind": "AIMServiceTemplate",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"model": "m", "warmCache": warm},
            "status": {"modelSources": sources},
        }
    )
    return obj


def service(name: str, **spec: Any) -> AIMService:
    return AIMService.model_validate(
        {"apiVersion": AIM, "kind": "AIMService", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}
    )


def backend(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type": "vLLM", "workers": [{"type": "server", "image": "vllm", "replicas": 1}], **fields}


def test_templates_that_warm_their_cache_and_services_that_cache_their_model() -> None:
    problems: list[RequestProblem] = []
    templates = [
        template("warm", ["hf://org/a", "s3://bucket/b"]),
        template("cold", ["hf://org/c"], warm=False),
        template("bad", ["ftp://x"]),
    ]
    requests = template_requests(templates, problems)
    assert [(r.source.uri, r.requested_by) for r in requests] == [
        ("hf://org/a", "AIMServiceTemplate/ns/warm"),
        ("s3://bucket/b", "AIMServiceTemplate/ns/warm"),
    ]
    assert problems[0].consumer == "AIMServiceTemplate/ns/bad" and problems[0].field == "status.modelSources[0]"

    services = [
        service("chat", model="m", templateRef="cold"),
        service("off", model="m", templateRef="cold", cacheModel=False),
        service("lost", model="m", templateRef="absent"),
        service("auto", model="m"),  # rollout-services selects its template and requests its caches
    ]
    assert [(r.source.uri, r.requested_by) for r in service_requests(services, templates, [])] == [
        ("hf://org/c", "AIMService/ns/chat")
    ]


def test_kthena_backends_without_cache_uri_and_openmodels() -> None:
    model = Model.model_validate(
        {
            "apiVersion": "registry.volcano.sh/v1alpha1",
            "kind": "Model",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {
                "backends": [
                    backend(
                        "a",
                        modelURI="hf://org/a",
                        env=[
                            {"name": "HF_ENDPOINT", "value": "http://mirror"},
                            {"name": "PORT", "value": "1"},
                            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                        ],
                    ),
                    backend("b", modelURI="hf://org/b", cacheURI="hostpath:///data"),
                    backend("c", modelURI="pvc://claim/path"),
                    backend("d"),
                ]
            },
        }
    )
    # A URI past the CRD's pattern never reaches the engine (the boundary rejects it); one that matches the
    # pattern but is no source the downloader reads is a problem naming the backend's field.
    model.spec.backends[3].model_uri = "hf://"
    problems: list[RequestProblem] = []
    requests = kthena_requests([model], problems)
    assert [(r.source.uri, r.env) for r in requests] == [
        (
            "hf://org/a",
            (
                {"name": "HF_ENDPOINT", "value": "http://mirror"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            ),
        )
    ]
    assert [p.field for p in problems] == ["spec.backends[3].modelURI"]

    def openmodel(name: str, source: dict[str, Any]) -> OpenModel:
        return OpenModel.model_validate(
            {
                "apiVersion": "llmaz.io/v1alpha1",
                "kind": "OpenModel",
                "metadata": {"name": name},
                "spec": {"familyName": "qwen", "source": source, "inferenceConfig": {}},
            }
        )

    qwen = openmodel("qwen", {"modelHub": {"modelID": "Qwen/Qwen2.5-0.5B-Instruct"}})
    broken = openmodel("broken", {})
    assert openmodel_requests([qwen], None, []) == []
    problems = []
    [request] = openmodel_requests([qwen, broken], "serving", problems)
    assert request.namespace == "serving" and request.requested_by == "OpenModel/qwen"
    assert request.source.uri == "hf://Qwen/Qwen2.5-0.5B-Instruct"
    assert problems[0].consumer == "OpenModel/broken" and problems[0].field == "spec.source"


def test_what_the_rules_no_longer_check_is_refused_at_the_boundary_naming_the_field() -> None:
    """Issue 22: ``cacheModel: "no"`` was not False, so a cache was requested; a string spec crashed; a
    ``backends`` that is not a list was iterated. Each is now refused by the parse every reader shares, naming
    the field, so no cache is requested on a guess."""
    refused = {
        "spec.cacheModel": {"kind": "AIMService", "spec": {"model": "m", "templateRef": "t", "cacheModel": "no"}},
        "spec": {"kind": "AIMService", "spec": "llama please"},
        "spec.warmCache": {"kind": "AIMServiceTemplate", "spec": {"model": "m", "warmCache": "yes"}},
        "spec.backends": {
            "apiVersion": "registry.volcano.sh/v1alpha1",
            "kind": "Model",
            "spec": {"backends": {"name": "a", "modelURI": "hf://org/a"}},
        },
    }
    for field, obj in refused.items():
        manifest = {"apiVersion": AIM, "metadata": {"name": "x", "namespace": "ns"}, **obj}
        try:
            parse_object(manifest)
        except ManifestInvalid as exc:
            assert exc.field_path == field, (field, exc)
        else:
            raise AssertionError(f"{field}: parsed")
