"""Metrics actuation end to end: the optimize flow publishes WVA's ``wva_desired_replicas`` to a real
Pushgateway, a real Prometheus scrapes it, and the exact queries the shipped KEDA ScaledObject and
prometheus-adapter rule run (``deployments/autoscaling/``) return each variant's desired replicas.

Real components: the Kubernetes API test server (its request log proves no scale subresource is written),
Debian's prometheus-pushgateway, Debian's prometheus scraping the fake vLLM exporter and the gateway.
"""

from __future__ import annotations

import math
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.flows.test_optimize_e2e import A100, H100, Env, installed_crds  # noqa: F401  (fixture re-used)

REPO = pathlib.Path(__file__).resolve().parents[2]
AUTOSCALING = REPO / "deployments" / "autoscaling"
METRICS = {"modelplane.io/actuation": "metrics"}


def keda_query(variant: str, namespace: str) -> str:
    """The shipped ScaledObject's query with only its two label values pointed at this test's variant."""
    shipped = yaml.safe_load((AUTOSCALING / "keda-scaledobject.yaml").read_text())
    query = shipped["spec"]["triggers"][0]["metadata"]["query"]
    example_variant = shipped["spec"]["scaleTargetRef"]["name"]
    example_namespace = shipped["metadata"]["namespace"]
    assert (
        query.count(f'variant_name="{example_variant}"') == 1 and query.count(f'namespace="{example_namespace}"') == 1
    )
    return query.replace(f'variant_name="{example_variant}"', f'variant_name="{variant}"').replace(
        f'namespace="{example_namespace}"', f'namespace="{namespace}"'
    )


def adapter_query(variant: str, namespace: str) -> str:
    """The shipped prometheus-adapter rule's metricsQuery as the adapter renders it for the HPA in hpa.yaml:
    ``<<.Series>>`` is the series name, ``<<.LabelMatchers>>`` the HPA's selector plus the namespace."""
    rule = yaml.safe_load((AUTOSCALING / "prometheus-adapter-values.yaml").read_text())["rules"]["external"][0]
    series = rule["seriesQuery"].split("{", 1)[0]
    namespace_label = next(
        label for label, target in rule["resources"]["overrides"].items() if target["resource"] == "namespace"
    )
    matchers = f'variant_name="{variant}",{namespace_label}="{namespace}"'
    return rule["metricsQuery"].replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)


def query_value(prometheus: Any, promql: str) -> float | None:
    """One instant value as KEDA's Prometheus scaler reads it: None when the result is empty (an error
    for KEDA with ignoreNullValues false), an AssertionError when it is ambiguous (several series)."""
    result = prometheus.query(promql)
    assert len(result) <= 1, f"{promql} returned several series: {result}"
    return float(result[0]["value"][1]) if result else None


class HpaEquivalent:
    """What an HPA does with the shipped external metric (AverageValue target 1): desired =
    ceil(value / 1); an empty result or an unreachable Prometheus is an error and the HPA keeps the
    current replicas. It writes the Deployment's scale subresource, as the HPA controller does."""

    def __init__(self, env: Env, variant: str) -> None:
        self.env, self.variant = env, variant
        self.seen: list[float | None] = []

    def sync(self) -> int:
        current = self.env.replicas(self.variant)
        try:
            value = query_value(self.env.prometheus, keda_query(self.variant, self.env.ns))
        except Exception:  # noqa: BLE001 - Prometheus down: the HPA's metric read fails
            value = None
        self.seen.append(value)
        if value is None:
            return current
        desired = math.ceil(value / 1.0)
        if desired != current:
            self.env.apps.patch_namespaced_deployment_scale(self.variant, self.env.ns, {"spec": {"replicas": desired}})
        return desired


@pytest.fixture()
def env(
    kube_server: Any,
    kube_namespace: str,
    prometheus_pushgateway: Any,
    vllm_exporter: Any,
    pushgateway: Any,
    installed_crds: None,
    prefect_harness: None,
) -> Iterator[Env]:  # noqa: F811
    environment = Env(kube_server, kube_namespace, prometheus_pushgateway, vllm_exporter)
    environment.configure()
    environment.pushgateway = pushgateway  # type: ignore[attr-defined]
    yield environment
    vllm_exporter.remove_model(environment.model, kube_namespace)
    kube_server.clear_injections()


def published(env: Env, name: str, metric: str = "wva_desired_replicas") -> float | None:
    """The value the Pushgateway serves for one variant of this test's namespace."""
    pattern = re.compile(rf"^{metric}\{{(?P<labels>[^}}]*)\}} (?P<value>\S+)$", re.M)
    for match in pattern.finditer(env.pushgateway.metrics()):  # type: ignore[attr-defined]
        labels = match["labels"]
        if f'variant_name="{name}"' in labels and f'namespace="{env.ns}"' in labels:
            return float(match["value"])
    return None


def scale_writes(env: Env) -> list[dict[str, Any]]:
    """Writes to any scale subresource since the last reset (the test server's request log)."""
    return [
        r
        for r in env.server.requests()
        if r["path"].split("?")[0].endswith("/scale") and r["method"] in ("PUT", "PATCH", "POST")
    ]


def test_metrics_mode_publishes_and_never_writes_the_scale(env: Env) -> None:
    """Acceptance: in metrics mode the cycle writes no scale subresource, status.actuation is WVA's, and
    the shipped KEDA and prometheus-adapter queries return each variant's desired replicas."""
    env.deployment("a100", 1)
    env.deployment("h100", 1)
    env.variant("a100", "A100", A100, annotations=METRICS)
    env.variant("h100", "H100", H100, annotations=METRICS)
    env.load(14.0, {"a100-0": 0.4, "h100-0": 0.4})
    env.server.reset_stats()
    report = env.cycle(pushgateway_url=env.pushgateway.url)  # type: ignore[attr-defined]
    assert scale_writes(env) == []
    assert env.replicas("a100") == 1 and env.replicas("h100") == 1
    desired = {name: env.status(name)["desiredOptimizedAlloc"]["numReplicas"] for name in ("a100", "h100")}
    assert desired == {"a100": 1, "h100": 2}
    for name in ("a100", "h100"):
        # WVA sets actuation.applied once it has emitted the desired replicas for the external autoscaler.
        assert env.status(name)["actuation"] == {"applied": True}
    assert report.push_error is None and report.exit_code == 0, report.summary
    rows = {r.name: r for r in report.rows}
    assert rows["h100"].mode == "metrics" and rows["h100"].applied and not rows["h100"].scaled
    # Prometheus scrapes the gateway; the shipped queries give the desired replicas of each variant.
    for name, value in desired.items():
        env.prometheus.wait_for(
            keda_query(name, env.ns), lambda r, v=value: len(r) == 1 and float(r[0]["value"][1]) == v, timeout=20
        )
        assert query_value(env.prometheus, adapter_query(name, env.ns)) == value
    result = env.prometheus.query(f'wva_current_replicas{{namespace="{env.ns}",variant_name="h100"}}')
    assert result[0]["metric"]["accelerator_type"] == "H100" and result[0]["metric"]["job"] == "modelplane"
    ratio = env.prometheus.query(f'wva_desired_ratio{{namespace="{env.ns}",variant_name="h100"}}')
    assert float(ratio[0]["value"][1]) == 2.0


def test_status_actuation_matches_scale_mode_and_wva(env: Env, kube_server: Any) -> None:
    """The same inputs in scale mode (one namespace) and metrics mode (another) give the same status but
    for who scaled; a Pushgateway that is down leaves applied false (WVA: the signal was not emitted),
    the run degraded, and never crashes the cycle."""
    other = Env(kube_server, f"{env.ns}-m", env.prometheus, env.exporter)
    kube_server.create_namespace(other.ns)
    other.configure()
    for each, marks in ((env, None), (other, METRICS)):
        each.deployment("h100", 1)
        each.variant("h100", "H100", H100, annotations=marks)
    try:
        for each in (env, other):
            each.load(20.0, {"h100-0": 0.4})
        for each in (env, other):
            each.cycle(pushgateway_url=env.pushgateway.url)  # type: ignore[attr-defined]
        scaled, metrics = env.status("h100"), other.status("h100")
        assert scaled["actuation"] == metrics["actuation"] == {"applied": True}
        assert scaled["desiredOptimizedAlloc"]["numReplicas"] == metrics["desiredOptimizedAlloc"]["numReplicas"] == 3
        assert env.replicas("h100") == 3 and other.replicas("h100") == 1
        # The gateway is down: the cycle still runs, metrics-mode actuation is not applied, the run is degraded.
        env.pushgateway.stop()  # type: ignore[attr-defined]
        try:
            report = other.cycle(pushgateway_url=env.pushgateway.url)  # type: ignore[attr-defined]
        finally:
            env.pushgateway.start()  # type: ignore[attr-defined]
        assert other.status("h100")["actuation"] == {"applied": False}
        assert report.exit_code == 3 and report.push_error and "metrics not published" in report.summary
    finally:
        env.exporter.remove_model(other.model, other.ns)


def test_a_deleted_variant_disappears_from_the_gateway(env: Env) -> None:
    env.deployment("keep", 1)
    env.deployment("gone", 1)
    env.variant("keep", "H100", H100, annotations=METRICS)
    env.variant("gone", "H100", H100, annotations=METRICS)
    env.load(5.0, {"keep-0": 0.3, "gone-0": 0.3})
    env.cycle(pushgateway_url=env.pushgateway.url)  # type: ignore[attr-defined]
    assert published(env, "keep") is not None and published(env, "gone") is not None
    env.custom.delete_namespaced_custom_object("llmd.ai", "v1alpha1", env.ns, "variantautoscalings", "gone")
    env.cycle(pushgateway_url=env.pushgateway.url)  # type: ignore[attr-defined]
    assert published(env, "keep") is not None
    assert published(env, "gone") is None and published(env, "gone", "wva_current_replicas") is None


def test_metrics_mode_without_a_gateway_is_reported(env: Env) -> None:
    env.deployment("h100", 1)
    env.variant("h100", "H100", H100, annotations=METRICS)
    env.load(20.0, {"h100-0": 0.4})
    report = env.cycle()
    assert env.replicas("h100") == 1 and env.status("h100")["actuation"] == {"applied": False}
    assert report.exit_code == 3 and "no Pushgateway configured" in report.summary


def test_an_hpa_reading_the_metric_never_sees_a_harmful_value(env: Env) -> None:
    """Safety in metrics mode: an HPA-equivalent reading the shipped query scales up with the decisions,
    and while metrics are missing (the model's vLLM series gone) or Prometheus is down, it never reads a
    value below the replicas running (Modelplane publishes its hold) and never reads 0."""
    env.deployment("h100", 1)
    env.variant("h100", "H100", H100, annotations=METRICS)
    hpa = HpaEquivalent(env, "h100")
    gateway = env.pushgateway.url  # type: ignore[attr-defined]
    env.load(20.0, {"h100-0": 0.4})
    env.cycle(pushgateway_url=gateway)
    env.prometheus.wait_for(
        keda_query("h100", env.ns), lambda r: len(r) == 1 and float(r[0]["value"][1]) == 3, timeout=20
    )
    assert hpa.sync() == 3 and env.replicas("h100") == 3
    # 1. The model's metrics disappear: Modelplane holds (no scale-down on missing metrics) and publishes 3.
    env.exporter.remove_model(env.model, env.ns)
    env.prometheus.wait_for(f'vllm:request_success_total{{namespace="{env.ns}"}}', lambda r: r == [], timeout=30)
    report = env.cycle(pushgateway_url=gateway)
    assert env.status("h100")["desiredOptimizedAlloc"]["numReplicas"] == 3 and report.exit_code == 3
    assert published(env, "h100") == 3
    for _ in range(3):
        assert hpa.sync() == 3
    # 2. Prometheus is down: Modelplane cannot read metrics, holds and publishes 3; the HPA cannot read
    # its metric either and keeps the replicas; after the restart it reads 3 again.
    env.prometheus.stop()
    try:
        report = env.cycle(pushgateway_url=gateway)
        assert report.metrics_error and published(env, "h100") == 3
        assert hpa.sync() == 3
    finally:
        env.prometheus.start()
    env.prometheus.wait_for(keda_query("h100", env.ns), lambda r: len(r) == 1, timeout=20)
    assert hpa.sync() == 3 and env.replicas("h100") == 3
    assert all(value is None or value >= 3 for value in hpa.seen[1:]), hpa.seen
    assert 0 not in hpa.seen


def test_the_cli_in_metrics_mode_writes_no_scale(env: Env) -> None:
    """Acceptance, through the command: ``modelplane optimize --pushgateway`` on a cluster whose default
    mode is ``metrics`` (ConfigMap modelplane-optimizer-config) writes no scale subresource."""
    from typer.testing import CliRunner

    from flows.cli import app

    env.core.create_namespaced_config_map(
        env.config_ns, {"metadata": {"name": "modelplane-optimizer-config"}, "data": {"actuation-mode": "metrics"}}
    )
    env.deployment("h100", 1)
    env.variant("h100", "H100", H100)
    env.load(20.0, {"h100-0": 0.4})
    env.server.reset_stats()
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "--cluster",
            f"kubeconfig:{env.server.kubeconfig}",
            "-n",
            env.ns,
            "--config-namespace",
            env.config_ns,
            "--prometheus",
            env.prometheus.url,
            "--rate-window",
            "10s",
            "--pushgateway",
            env.pushgateway.url,
            "--json",  # type: ignore[attr-defined]
        ],
    )
    assert result.exit_code == 0, result.output
    assert scale_writes(env) == [] and env.replicas("h100") == 1
    assert env.status("h100")["actuation"] == {"applied": True}
    assert env.status("h100")["desiredOptimizedAlloc"]["numReplicas"] == 3 and published(env, "h100") == 3
