"""Kubernetes Events from rollout-models and optimize on the Kubernetes API test server, read as
``kubectl describe`` reads them (core/v1 Events by involvedObject), and aggregated as client-go's recorder does.
"""

from __future__ import annotations

from typing import Any

import yaml

from flows.optimize import optimize
from tests.flows.test_rollout_models import Env, env, installed_crds, two_backend_model  # noqa: F401 (fixtures)
from tests.rollout.models import backend, model

DEPLOYMENTS_PATH = r"/apis/apps/v1/namespaces/[^/]+/deployments$"


def described(env: Env, kind: str, name: str) -> list[dict[str, Any]]:
    """The Events section of ``kubectl describe KIND NAME``: the core/v1 Events about the object."""
    items = env.core.list_namespaced_event(
        env.ns, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}"
    ).items
    return [env.core.api_client.sanitize_for_serialization(e) for e in items]


def test_describe_model_says_what_was_rolled_out_and_why_it_failed(env: Env) -> None:  # noqa: F811
    env.create(model("m", env.ns, [backend("b", maxReplicas=3)]))  # max 3 with one worker: invalid
    env.run()
    [invalid] = described(env, "Model", "m")
    assert (invalid["type"], invalid["reason"]) == ("Warning", "InvalidModel") and "maxReplicas" in invalid["message"]
    env.run()  # the same invalid spec: already on the status and in its Event, nothing new to say
    assert [e["count"] for e in described(env, "Model", "m")] == [1]

    env.patch_model("m", {"backends": [backend("b")]})
    env.run()
    rolled = [e for e in described(env, "Model", "m") if e["reason"] == "RolledOut"]
    assert [e["type"] for e in rolled] == ["Normal"] and rolled[0]["source"]["component"] == "modelplane"
    assert rolled[0]["message"].startswith("created Deployment/m-b, Service/m-b")


def test_a_repeated_failure_bumps_count_on_one_event(env: Env) -> None:  # noqa: F811
    env.create(model("f", env.ns, [backend("b")]))
    env.server.inject("POST", DEPLOYMENTS_PATH, 403, times=3, message="deployments is forbidden: quota")
    for _ in range(3):
        env.run()
    warnings = [e for e in described(env, "Model", "f") if e["type"] == "Warning"]
    assert len(warnings) == 1, warnings
    [failed] = warnings
    assert failed["reason"] == "ModelAbnormal" and "forbidden" in failed["message"]
    assert failed["count"] == 3 and failed["series"]["count"] == 3
    assert failed["lastTimestamp"] >= failed["firstTimestamp"]


def test_ten_unchanged_optimize_cycles_create_no_event(env: Env, tmp_path: Any) -> None:  # noqa: F811
    env.create(two_backend_model(env.ns))
    env.run()
    metrics = tmp_path / "metrics.yaml"
    pods = [
        {"namespace": env.ns, "pod": pod, "metrics": {"vllm:num_requests_waiting": 15}}
        for pod in ("qwen-a100-5d8f-0", "qwen-h100-7c9e-0")
    ]
    metrics.write_text(yaml.safe_dump({"instances": pods}))
    for _ in range(2):  # the first cycle scales (an Event), the next records what it did
        optimize(namespaces=[env.ns], metrics_file=str(metrics), cluster=env.cluster)
    before = env.core.list_namespaced_event(env.ns).items
    assert any(e.reason == "DesiredReplicasChanged" for e in before)
    env.server.reset_stats()
    for _ in range(10):
        optimize(namespaces=[env.ns], metrics_file=str(metrics), cluster=env.cluster)
    after = env.core.list_namespaced_event(env.ns).items
    assert sorted(e.metadata.name for e in after) == sorted(e.metadata.name for e in before)
    assert env.server.count("create", "events") == 0
