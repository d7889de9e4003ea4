"""engine.caches.requests: the caches AIM templates and services, Kthena Models and OpenModels need."""

from __future__ import annotations

from engine.caches.requests import (
    RequestProblem,
    kthena_requests,
    openmodel_requests,
    service_requests,
    template_requests,
)


def template(name: str, sources: list[str], warm: bool = True) -> dict:
    return {
        "kind": "AIMServiceTemplate",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"model": "m", "warmCache": warm},
        "status": {"modelSources": sources},
    }


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
        {"kind": "AIMService", "metadata": {"name": "chat", "namespace": "ns"}, "spec": {"templateRef": "cold"}},
        {
            "kind": "AIMService",
            "metadata": {"name": "off", "namespace": "ns"},
            "spec": {"templateRef": "cold", "cacheModel": False},
        },
        {"kind": "AIMService", "metadata": {"name": "lost", "namespace": "ns"}, "spec": {"templateRef": "absent"}},
    ]
    assert [(r.source.uri, r.requested_by) for r in service_requests(services, templates, [])] == [
        ("hf://org/c", "AIMService/ns/chat")
    ]


def test_kthena_backends_without_cache_uri_and_openmodels() -> None:
    model = {
        "kind": "Model",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {
            "backends": [
                {
                    "name": "a",
                    "modelURI": "hf://org/a",
                    "env": [{"name": "HF_ENDPOINT", "value": "http://mirror"}, {"name": "PORT", "value": "1"}],
                },
                {"name": "b", "modelURI": "hf://org/b", "cacheURI": "hostpath:///data"},
                {"name": "c", "modelURI": "pvc://claim/path"},
                {"name": "d", "modelURI": "gopher://x"},
            ]
        },
    }
    problems: list[RequestProblem] = []
    requests = kthena_requests([model], problems)
    assert [(r.source.uri, r.env) for r in requests] == [
        ("hf://org/a", ({"name": "HF_ENDPOINT", "value": "http://mirror"},))
    ]
    assert problems[0].field == "spec.backends[3].modelURI"

    openmodel = {
        "kind": "OpenModel",
        "metadata": {"name": "qwen"},
        "spec": {"source": {"modelHub": {"modelID": "Qwen/Qwen2.5-0.5B-Instruct"}}},
    }
    broken = {"kind": "OpenModel", "metadata": {"name": "broken"}, "spec": {"source": {}}}
    assert openmodel_requests([openmodel], None, []) == []
    problems = []
    [request] = openmodel_requests([openmodel, broken], "serving", problems)
    assert request.namespace == "serving" and request.requested_by == "OpenModel/qwen"
    assert request.source.uri == "hf://Qwen/Qwen2.5-0.5B-Instruct"
    assert problems[0].consumer == "OpenModel/broken" and problems[0].field == "spec.source"


def test_a_cache_model_that_is_not_a_boolean_requests_nothing_and_names_the_field() -> None:
    """Issue 22: ``cacheModel: "no"`` was not False, so a cache was requested; a string spec crashed."""
    templates = [
        template("cold", ["hf://org/c"], warm=False),
        {**template("odd", ["hf://org/d"]), "spec": {"warmCache": "yes"}},
    ]
    services = [
        {
            "kind": "AIMService",
            "metadata": {"name": "no", "namespace": "ns"},
            "spec": {"templateRef": "cold", "cacheModel": "no"},
        },
        {"kind": "AIMService", "metadata": {"name": "text", "namespace": "ns"}, "spec": "llama please"},
        {"kind": "AIMService", "metadata": {"name": "ok", "namespace": "ns"}, "spec": {"templateRef": "cold"}},
        {
            "kind": "AIMService",
            "metadata": {"name": "auto", "namespace": "ns"},
            "spec": {"model": "m"},
        },  # rollout-services selects
    ]
    problems: list[RequestProblem] = []
    requests = service_requests(services, templates, problems) + template_requests(templates, problems)
    assert [r.requested_by for r in requests] == ["AIMService/ns/ok"]
    assert {(p.consumer, p.field) for p in problems} == {
        ("AIMService/ns/no", "spec.cacheModel"),
        ("AIMService/ns/text", "spec"),
        ("AIMServiceTemplate/ns/odd", "spec.warmCache"),
    }
