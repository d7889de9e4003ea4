"""Actuation modes on the local backend (the bundled example cluster): the ConfigMap default, per-resource
annotations, binding targets, and what reaches a real Pushgateway."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from flows.optimize import optimize
from tests.flows.test_optimize_local import by_kind


def add(cluster: pathlib.Path, name: str, *docs: dict[str, Any]) -> None:
    (cluster / name).write_text(yaml.safe_dump_all(docs))


def annotate(cluster: pathlib.Path, kind: str, name: str, annotations: dict[str, str]) -> None:
    for path in sorted(cluster.glob("*.yaml")):
        docs = list(yaml.safe_load_all(path.read_text()))
        hit = [d for d in docs if d and d.get("kind") == kind and d["metadata"]["name"] == name]
        if hit:
            hit[0]["metadata"].setdefault("annotations", {}).update(annotations)
            path.write_text(yaml.safe_dump_all(docs))
            return
    raise AssertionError(f"{kind}/{name} not found")


def test_configmap_default_metrics_scales_nothing_but_what_opts_back_in(
    prefect_harness: None,
    example_cluster: pathlib.Path,
    example_metrics: pathlib.Path,
    pushgateway: Any,
) -> None:
    add(
        example_cluster,
        "05-actuation.yaml",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "modelplane-optimizer-config", "namespace": "modelplane-system"},
            "data": {"actuation-mode": "metrics"},
        },
    )
    annotate(example_cluster, "VariantAutoscaling", "llama-3-1-8b-a100", {"modelplane.io/actuation": "both"})
    before = by_kind(example_cluster, "Deployment")
    report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics), pushgateway_url=pushgateway.url)
    after = by_kind(example_cluster, "Deployment")
    variants = by_kind(example_cluster, "VariantAutoscaling")
    rows = {r.name: r for r in report.rows}
    for name, va in variants.items():
        target = va["spec"]["scaleTargetRef"]["name"]
        desired = va["status"]["desiredOptimizedAlloc"]["numReplicas"]
        assert va["status"]["actuation"] == {"applied": True}, name
        if name == "llama-3-1-8b-a100":
            assert rows[name].mode == "both" and after[target]["spec"]["replicas"] == desired
        else:
            assert (
                rows[name].mode == "metrics" and after[target]["spec"]["replicas"] == before[target]["spec"]["replicas"]
            )
    assert variants["llama-3-1-8b-h100"]["status"]["desiredOptimizedAlloc"]["numReplicas"] == 3
    # The binding target is published and left to its HPA: 3 desired, still 1 replica.
    assert after["qwen2-5-7b-instruct"]["spec"]["replicas"] == before["qwen2-5-7b-instruct"]["spec"]["replicas"]
    assert rows["qwen2-5-7b-instruct/qwen2-5-7b-instruct"].mode == "metrics"
    binding = by_kind(example_cluster, "AutoscalingPolicyBinding")["qwen2-5-7b-instruct"]
    assert binding["status"]["targets"][0]["actuation"] == {"applied": True}
    text = pushgateway.metrics()
    assert any(
        line.startswith("wva_desired_replicas{")
        and 'variant_name="qwen2-5-7b-instruct"' in line
        and line.endswith(" 3")
        for line in text.splitlines()
    )
    assert any(
        line.startswith("wva_desired_replicas{") and 'variant_name="llama-3-1-8b-h100"' in line and line.endswith(" 3")
        for line in text.splitlines()
    )
    assert "modelplane_cycle_duration_seconds{" in text and 'stage="total"' in text
    assert report.exit_code == 0, report.summary


def test_binding_target_override_and_a_malformed_mode(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    annotate(
        example_cluster,
        "AutoscalingPolicyBinding",
        "qwen2-5-7b-instruct",
        {"modelplane.io/actuation": "scale", "modelplane.io/actuation-targets": '{"qwen2-5-7b-instruct": "recommend"}'},
    )
    annotate(example_cluster, "VariantAutoscaling", "llama-3-1-8b-h100", {"modelplane.io/actuation": "hpa"})
    before = by_kind(example_cluster, "Deployment")
    report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))
    after = by_kind(example_cluster, "Deployment")
    assert after["qwen2-5-7b-instruct"]["spec"]["replicas"] == before["qwen2-5-7b-instruct"]["spec"]["replicas"]
    binding = by_kind(example_cluster, "AutoscalingPolicyBinding")["qwen2-5-7b-instruct"]
    assert binding["status"]["desiredReplicas"] == 3 and "lastScaleTime" not in binding["status"]
    assert binding["status"]["targets"][0]["actuation"] == {"applied": False}
    va = by_kind(example_cluster, "VariantAutoscaling")["llama-3-1-8b-h100"]
    ready = next(c for c in va["status"]["conditions"] if c["type"] == "OptimizationReady")
    assert ready["reason"] == "InvalidConfiguration" and "modelplane.io/actuation" in ready["message"]
    assert after["llama-3-1-8b-h100"]["spec"]["replicas"] == before["llama-3-1-8b-h100"]["spec"]["replicas"]
    assert report.exit_code == 3
