"""tasks/pushgateway.py against Debian's real prometheus-pushgateway."""

from __future__ import annotations

from typing import Any

from engine.cycle_metrics import MetricSet
from tasks.pushgateway import Pushgateway, push


def test_push_puts_the_group_by_cluster_and_flow_and_replaces_it(pushgateway: Any) -> None:
    gateway = Pushgateway(pushgateway.url, cluster="c-push")
    first = MetricSet()
    first.set("wva_desired_replicas", 3, variant_name="a", namespace="ns", accelerator_type="H100")
    first.set("wva_desired_replicas", 2, variant_name="b", namespace="ns", accelerator_type="A100")
    assert push(gateway, "optimize", first) is None
    text = pushgateway.metrics()
    assert "# TYPE wva_desired_replicas gauge" in text
    line = next(
        line for line in text.splitlines() if line.startswith("wva_desired_replicas{") and 'variant_name="a"' in line
    )
    for label in (
        'accelerator_type="H100"',
        'cluster="c-push"',
        'flow="optimize"',
        'job="modelplane"',
        'namespace="ns"',
    ):
        assert label in line
    assert line.endswith(" 3")
    second = MetricSet()
    second.set("wva_desired_replicas", 4, variant_name="a", namespace="ns", accelerator_type="H100")
    assert push(gateway, "optimize", second) is None
    text = pushgateway.metrics()
    assert 'variant_name="b"' not in text  # PUT replaced the whole group: the stale series is gone
    group = next(g for g in pushgateway.groups() if g["labels"].get("cluster") == "c-push")
    assert group["labels"] == {"job": "modelplane", "cluster": "c-push", "flow": "optimize"}


def test_a_failing_gateway_is_an_error_string_without_credentials() -> None:
    gateway = Pushgateway("http://user:secret@127.0.0.1:1", timeout_s=1)
    error = push(gateway, "optimize", MetricSet())
    assert error and "unreachable" in error and "secret" not in error


def test_configuration_comes_from_the_parameter_or_the_environment() -> None:
    assert Pushgateway.configured(None, {}) is None
    env = {"MODELPLANE_PUSHGATEWAY_URL": "http://pgw:9091/", "MODELPLANE_CLUSTER_NAME": "prod"}
    assert Pushgateway.configured(None, env) == Pushgateway("http://pgw:9091", "prod", 5.0)
    assert Pushgateway.configured("http://other:9091", env).url == "http://other:9091"  # type: ignore[union-attr]


def test_warm_caches_publishes_fills_by_outcome_and_volume_bytes() -> None:
    from types import SimpleNamespace

    from flows.warm_caches import CacheRow, WarmReport, cache_metrics

    report = WarmReport(
        rows=[
            CacheRow("ns", "llama", "hf://a/b", "Available", "", "cache-llama", 1, "filled in-process (attempt 1)"),
            CacheRow("ns", "qwen", "hf://c/d", "Progressing", "", "cache-qwen", 1, "started Job cache-qwen-1"),
            CacheRow("ns", "bad", "s3://x", "Failed", "", "", 2, "fill attempt 2 failed"),
        ]
    )
    world = SimpleNamespace(pvcs={("ns", "cache-llama"): {"status": {"capacity": {"storage": "2Gi"}}, "spec": {}}})
    metrics = cache_metrics(report, world)
    assert [metrics.value("modelplane_cache_fills", outcome=o) for o in ("filled", "started", "failed")] == [1, 1, 1]
    assert metrics.value("modelplane_cache_bytes", namespace="ns", cache="llama") == 2 * 1024**3
