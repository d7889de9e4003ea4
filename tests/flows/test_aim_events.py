"""What ``kubectl describe`` shows of the AIM objects after discover-models, resolve-templates and
rollout-services ran on the Kubernetes API test server: core/v1 Events saying what was rendered and why.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.flows.test_aim_e2e import (  # noqa: F401 (fixtures)
    MI300X_PROFILES,
    AimEnv,
    aim_crds,
    aim_labels,
    env,
)
from tests.upstream_crds import SKIP_REASON, upstream_crds_dir

pytestmark = pytest.mark.skipif(upstream_crds_dir() is None, reason=SKIP_REASON)


def described(env: AimEnv, kind: str, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """The Events section of ``kubectl describe KIND NAME``: (type, reason, message, count), oldest first."""
    items = env.core.list_namespaced_event(
        namespace or env.ns, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}"
    ).items
    return [
        {"type": e.type, "reason": e.reason, "message": e.message, "count": e.count}
        for e in sorted(items, key=lambda e: int(e.metadata.resource_version))
    ]


def test_describe_shows_what_was_discovered_resolved_and_rendered(env: AimEnv) -> None:  # noqa: F811
    image = env.registry.image(f"{env.ns}/llama", "0.8.4")
    env.registry.push_image(f"{env.ns}/llama", "0.8.4", aim_labels("meta/llama-3.1-8b", MI300X_PROFILES))
    env.node("mi300x", {"amd.com/gpu.device-id": "74a1", "amd.com/gpu.count": "8"})
    env.config()
    model = env.model("llama", image)
    env.discover()
    [discovered] = described(env, "AIMClusterModel", model, "default")  # cluster-scoped: Events in default
    assert discovered["reason"] == "ModelDiscovered" and discovered["type"] == "Normal"
    assert image in discovered["message"] and "2 recommended deployments" in discovered["message"]

    env.template("llama-t", f"{env.ns}/llama:1.0", metric="latency", gpuModel="MI300X", gpusPerReplica=1)
    env.service("llama-s", f"{env.ns}/llama:1.0", "llama-t", cacheModel=False)
    env.resolve()
    [resolved] = described(env, "AIMServiceTemplate", "llama-t")
    assert resolved["type"] == "Normal" and resolved["message"].startswith("Available")
    assert "model sources " in resolved["message"]

    env.rollout()
    events = described(env, "AIMService", "llama-s")
    [rolled] = [e for e in events if e["reason"] == "RolledOut"]
    [isvc] = env.list("inferenceservices", "serving.kserve.io", "v1beta1")
    assert f"InferenceService {isvc['metadata']['name']} (image {image}) created" in rolled["message"]
    assert "HTTPRoute" in rolled["message"] and "created" in rolled["message"]
    [status] = [e for e in events if e["reason"] != "RolledOut"]
    assert status["type"] == "Normal" and status["message"].startswith("Starting")

    env.rollout()  # nothing changed: nothing more to say
    assert described(env, "AIMService", "llama-s") == events


def test_describe_says_why_a_service_failed(env: AimEnv) -> None:  # noqa: F811
    repo = f"{env.ns}/cfg"
    env.registry.push_image(repo, "1", aim_labels("cfg/model", MI300X_PROFILES))
    env.node("mi300x", {"amd.com/gpu.device-id": "0x74A1"})
    env.model("cfg", env.registry.image(repo, "1"))
    env.template("cfg-t", f"{env.ns}/cfg:1.0", metric="throughput", gpuModel="MI300X", gpusPerReplica=1)
    env.service("cfg-s", f"{env.ns}/cfg:1.0", "cfg-t", configRef="tenant", cacheModel=False)
    env.discover(namespaces=None)
    env.resolve()
    env.rollout()
    [failed] = described(env, "AIMService", "cfg-s")
    assert failed["type"] == "Warning" and failed["message"].startswith("Failed")
    assert "tenant" in failed["message"]
