"""tasks/clients/pushgateway.py against Debian's real prometheus-pushgateway."""

from __future__ import annotations

from typing import Any

import pytest

from engine.cycle_metrics import MetricSet
from tasks.clients.pushgateway import Pushgateway, push


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


def test_a_gateway_answering_a_byte_at_a_time_is_given_up_at_its_deadline() -> None:
    """urllib's timeout bounds each read: before, a gateway sending its status line a byte every 0.1 s held the
    optimize cycle (and its writes) until the flow's time-out, and the second push after it forever."""
    import socket
    import threading
    import time

    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(1)
            try:
                conn.recv(65536)
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                    if stop.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(0.1)
            except OSError:
                return

    threading.Thread(target=drip, daemon=True).start()
    gateway = Pushgateway(f"http://127.0.0.1:{server.getsockname()[1]}", timeout_s=0.5)
    started = time.monotonic()
    try:
        error = push(gateway, "optimize", MetricSet())
    finally:
        stop.set()
        server.close()
    assert error is not None and "did not answer within 1s" in error
    assert time.monotonic() - started < 3


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


def test_optimize_pushes_each_models_slo_attainment_target_budget_and_burn_rate(pushgateway: Any) -> None:
    import math

    from engine.cycle_metrics import CycleFacts, optimize_cycle_metrics
    from engine.slo.measure import LatencyHistograms, model_attainment
    from engine.slo.target import AttainmentTarget

    target = AttainmentTarget(0.9, 3600.0, "annotation")
    histograms = LatencyHistograms(
        ttft_window=[(0.5, 95.0), (math.inf, 100.0)],
        ttft_recent=[(0.5, 16.0), (math.inf, 20.0)],
        itl_window=None,
        itl_recent=None,
    )
    attainment = {
        ("ns", "llama"): model_attainment(target, histograms, 500.0, None),
        ("ns", "granite"): model_attainment(target, None, 500.0, 40.0, "no TTFT samples"),
    }
    metrics = optimize_cycle_metrics([], [], CycleFacts(started=0.0, stages={}, attainment=attainment))
    llama, granite = {"namespace": "ns", "model": "llama"}, {"namespace": "ns", "model": "granite"}
    assert metrics.value("modelplane_slo_attainment", **llama) == 0.95
    assert metrics.value("modelplane_slo_attainment_target", **llama) == 0.9
    assert metrics.value("modelplane_slo_error_budget_remaining", **llama) == pytest.approx(0.5)
    assert metrics.value("modelplane_slo_burn_rate", **llama) == pytest.approx(2.0)  # 80 % over the last 2 minutes
    # Unknown attainment: the target is published, no attainment, budget or burn rate (never a made-up 0).
    assert metrics.value("modelplane_slo_attainment_target", **granite) == 0.9
    assert metrics.value("modelplane_slo_attainment", **granite) is None
    assert metrics.value("modelplane_slo_burn_rate", **granite) is None

    assert push(Pushgateway(pushgateway.url, cluster="c-slo"), "optimize", metrics) is None
    lines = [line for line in pushgateway.metrics().splitlines() if 'cluster="c-slo"' in line]
    burn = next(line for line in lines if line.startswith("modelplane_slo_burn_rate{"))
    assert 'model="llama"' in burn and 'namespace="ns"' in burn and 'job="modelplane"' in burn
    assert float(burn.rsplit(" ", 1)[1]) == pytest.approx(2.0)
    assert not any(line.startswith("modelplane_slo_attainment{") and 'model="granite"' in line for line in lines)
