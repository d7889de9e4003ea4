"""Benchmark: one optimize cycle over 1,000 VariantAutoscalings against the Kubernetes API test server.

    python -m bench.optimize [--models 500]

500 models x 2 accelerators (A100, H100), each VariantAutoscaling scaling its own Deployment, the WVA
ConfigMaps, and metrics for every model from a metrics file. The flow runs under a temporary Prefect
server; a warm-up run on an empty namespace takes Prefect's start-up out of the measurement. Reported:
wall time of the cycle, API calls by verb (from the server's counters), and the process's peak RSS. A second cycle records the replicas the first one set, and a third shows what an unchanged cluster costs. The table is
printed and written between the flow-bench markers of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import resource
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import yaml

from bench.engine import machine, publish_section
from engine.api.registry import LLMD_API, VARIANT_AUTOSCALING
from tests.factories import deployment, variant_autoscaling

START, END = "<!-- flow-bench:start -->", "<!-- flow-bench:end -->"
FLOW_PACKAGES = ("numpy", "PuLP", "highspy", "prefect", "kubernetes")
NAMESPACE = "bench"
CONFIG_NAMESPACE = "bench-system"


def model_name(i: int) -> str:
    return f"org/model-{i:04d}"


def variant(i: int, accelerator: str) -> dict[str, Any]:
    """The VariantAutoscaling of model ``i`` on ``accelerator``, scaling its own Deployment."""
    return variant_autoscaling(f"model-{i:04d}-{accelerator.lower()}", NAMESPACE, model_name(i), accelerator)


def config_maps(models: int, config_namespace: str = CONFIG_NAMESPACE) -> list[dict[str, Any]]:
    costs = {"A100": '{"device": "NVIDIA-A100", "cost": "40.00"}', "H100": '{"device": "NVIDIA-H100", "cost": "80.00"}'}
    klass = yaml.safe_dump(
        {
            "name": "Premium",
            "priority": 1,
            "data": [{"model": model_name(i), "slo-tpot": 24, "slo-ttft": 500} for i in range(models)],
        }
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "accelerator-unit-costs", "namespace": config_namespace},
            "data": costs,
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "service-classes-config", "namespace": config_namespace},
            "data": {"premium.yaml": klass},
        },
    ]


def metrics_document(models: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    entries = []
    for i in range(models):
        pods = [
            {
                "name": f"model-{i:04d}-{acc}-0",
                "kvCacheUsage": round(rng.uniform(0.1, 0.7), 3),
                "queueLength": rng.randint(0, 2),
            }
            for acc in ("a100", "h100")
        ]
        entries.append(
            {
                "model": model_name(i),
                "namespace": NAMESPACE,
                "arrivalRateRps": round(rng.uniform(0.5, 30.0), 2),
                "avgInputTokens": rng.choice([128, 256, 512]),
                "avgOutputTokens": rng.choice([128, 256]),
                "pods": pods,
            }
        )
    return {"collectedAt": "2026-11-22T12:00:00Z", "models": entries}


def populate(server: Any, models: int, config_namespace: str = CONFIG_NAMESPACE) -> None:
    """Create the ConfigMaps (in ``config_namespace``), 1,000 Deployments (ready) and 1,000 VariantAutoscalings."""
    from kubernetes import client as k8s

    from tasks.clients.cluster.kube import KubeCluster

    cluster = KubeCluster(api_client=server.api_client())
    for namespace in (NAMESPACE, config_namespace, "warm-up"):  # as on a cluster, namespaces come first
        server.create_namespace(namespace)
    for cm in config_maps(models, config_namespace):
        cluster.create(cm)
    apps = k8s.AppsV1Api(server.api_client())

    def one(args: tuple[int, str]) -> None:
        i, accelerator = args
        name = f"model-{i:04d}-{accelerator.lower()}"
        cluster.create(deployment(name, NAMESPACE, 1))
        apps.patch_namespaced_deployment_status(name, NAMESPACE, {"status": {"replicas": 1, "readyReplicas": 1}})
        cluster.create(variant(i, accelerator))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, [(i, acc) for i in range(models) for acc in ("A100", "H100")]))
    assert len(cluster.list(LLMD_API, VARIANT_AUTOSCALING, NAMESPACE)) == 2 * models


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(server: Any, run: Any) -> dict[str, Any]:
    """Run one cycle; wall time, API calls by verb, the process's peak RSS after it, and the report.

    tracemalloc is deliberately not used: it slows allocation-heavy Python several-fold and would
    distort the wall time it is measured with.
    """
    server.reset_stats()
    started = time.perf_counter()
    report = run()
    wall = time.perf_counter() - started
    stats = server.stats()
    changed = sum(1 for w in report.writes if w.status_written or w.scaled)
    return {
        "wall_s": wall,
        "peak_mib": peak_rss_mib(),
        "by_verb": stats["by_verb"],
        "by_key": stats["by_key"],
        "changed": changed,
        "scaled": sum(1 for w in report.writes if w.scaled),
        "rows": len(report.rows),
    }


def render(models: int, first: dict[str, Any], second: dict[str, Any], steady: dict[str, Any]) -> str:
    def lists(result: dict[str, Any]) -> str:
        keys = sorted(k for k in result["by_key"] if k.startswith("list "))
        return ", ".join(f"{k.removeprefix('list ')} {result['by_key'][k]}" for k in keys)

    def row(label: str, result: dict[str, Any]) -> str:
        verbs = result["by_verb"]
        patches = verbs.get("patch", 0)
        bound = 2 * result["changed"]
        return (
            f"| {label} | {result['wall_s']:.2f} s | {verbs.get('list', 0)} ({lists(result)}) | {verbs.get('get', 0)} | "
            f"{patches} | {result['changed']} changed, {result['scaled']} scaled; bound {bound} | {verbs.get('create', 0)} | "
            f"{result['peak_mib']:.1f} MiB |"
        )

    return "\n".join(
        [
            START,
            "",
            "## Optimize flow cycle",
            "",
            f"Command: `python -m bench.optimize --models {models}` on {machine(FLOW_PACKAGES)}.",
            "",
            f"One cycle of the `optimize` flow over {2 * models:,} VariantAutoscalings ({models} models x A100/H100), each",
            "scaling its own Deployment, against the Kubernetes API test server (subprocess, official client),",
            "metrics from a file, excluding Prefect start-up (a warm-up run precedes the measurement).",
            "Peak RSS is the whole benchmark process (Python, Prefect client, kubernetes client, the 1,000",
            "objects), read after each cycle; the API server and Prefect server run in other processes.",
            "Targets: under 10 s; one LIST per kind; PATCH calls <= changed objects x 2 (status + scale).",
            "",
            "| cycle | wall time | LIST calls (per kind) | GET | PATCH | PATCH bound | POST (Events) | process peak RSS |",
            "|---|---|---|---|---|---|---|---|",
            row("1st: every status new", first),
            row("2nd: currentAlloc of the targets the 1st scaled", second),
            row("3rd: nothing changed", steady),
            "",
            END,
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=500)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.testing.utilities import prefect_test_harness

    from engine.api.crds import render_crds
    from flows.optimize import optimize
    from tests.servers.kubeserver.fixture import start_kube_server

    server = start_kube_server()
    try:
        server.install_crds([yaml.safe_load(text) for text in render_crds().values()])
        populate(server, args.models)
        with tempfile.TemporaryDirectory() as tmp:
            metrics = pathlib.Path(tmp) / "metrics.yaml"
            metrics.write_text(yaml.safe_dump(metrics_document(args.models), sort_keys=False))
            params = dict(
                namespaces=[NAMESPACE],
                config_namespace=CONFIG_NAMESPACE,
                metrics_file=str(metrics),
                cluster=f"kubeconfig:{server.kubeconfig}",
            )
            with prefect_test_harness(server_startup_timeout=120):
                optimize(**{**params, "namespaces": ["warm-up"]})
                first = measure(server, lambda: optimize(**params))
                second = measure(server, lambda: optimize(**params))
                steady = measure(server, lambda: optimize(**params))
    finally:
        server.stop()
    section = render(args.models, first, second, steady)
    publish_section(section, START, END, write=not args.no_write)
    ok = first["wall_s"] < 10 and first["by_verb"].get("patch", 0) <= 2 * first["changed"]
    ok = ok and all(count == 1 for key, count in first["by_key"].items() if key.startswith("list "))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
