"""One writer at a time: the optimize cycle holds the cluster's Lease (a lock file on the local backend) while it
reads, plans and writes, and a VariantAutoscaling's status write is conditioned on the resourceVersion its
decision was made from (a conflict re-reads and re-plans that object). Two runs at once with different metrics
never leave a status that disagrees with its scale target's replicas.

Against the Kubernetes API test server (it stores Leases, counts requests and injects failures) and the local
backend. The concurrent runs are threads calling the flow: each is a flow run of its own, as two processes'
would be, and they share nothing but the cluster.
"""

from __future__ import annotations

import pathlib
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import flows.one_writer as one_writer
import flows.optimize as optimize_flow
from engine.api.crds import render_crds
from engine.api.registry import LLMD_API, VARIANT_AUTOSCALING
from flows.cli import app
from flows.exitcodes import CannotRun, ExitCode
from flows.optimize import optimize
from tasks.clients.cluster import Cluster, LocalCluster, ObjectRef
from tasks.clients.cluster.kube import KubeCluster
from tasks.writer_lock import LockHeld, hold_writer_lock
from tests.factories import deployment, variant_autoscaling

MODELS = 60  # x A100/H100: 120 VariantAutoscalings
PAIRS = 10
LOCAL_MODELS = 10  # the local backend rewrites a file per write: a smaller cluster keeps its test short


def model_name(i: int) -> str:
    return f"org/model-{i:02d}"


def variant_name(i: int, accelerator: str) -> str:
    return f"model-{i:02d}-{accelerator.lower()}"


def config_maps(namespace: str) -> list[dict[str, Any]]:
    """The WVA ConfigMaps of deployments/examples' shape: unit costs and one Premium class for every model."""
    klass = {
        "name": "Premium",
        "priority": 1,
        "data": [{"model": model_name(i), "slo-tpot": 24, "slo-ttft": 500} for i in range(MODELS)],
    }
    costs = {"A100": '{"device": "NVIDIA-A100", "cost": "40.00"}', "H100": '{"device": "NVIDIA-H100", "cost": "80.00"}'}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "accelerator-unit-costs", "namespace": namespace},
            "data": costs,
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "service-classes-config", "namespace": namespace},
            "data": {"premium.yaml": yaml.safe_dump(klass)},
        },
    ]


def populate(cluster: Cluster, namespace: str, config_namespace: str, models: int = MODELS) -> None:
    """``models`` models x A100/H100: each VariantAutoscaling scaling its own Deployment (one replica)."""
    for cm in config_maps(config_namespace):
        cluster.create(cm)

    def one(i: int, accelerator: str) -> None:
        name = variant_name(i, accelerator)
        cluster.create(deployment(name, namespace, 1))
        cluster.create(variant_autoscaling(name, namespace, model_name(i), accelerator))

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda args: one(*args), [(i, acc) for i in range(models) for acc in ("A100", "H100")]))


def write_metrics(path: pathlib.Path, namespace: str, seed: int, models: int = MODELS) -> pathlib.Path:
    """A metrics file: every model's load drawn from ``seed`` (two seeds: two runs deciding differently)."""
    rng = random.Random(seed)
    entries = [
        {
            "model": model_name(i),
            "namespace": namespace,
            "arrivalRateRps": round(rng.uniform(0.5, 40.0), 2),
            "avgInputTokens": rng.choice([128, 256, 512]),
            "avgOutputTokens": rng.choice([128, 256]),
            "pods": [
                {"name": f"{variant_name(i, acc)}-0", "kvCacheUsage": round(rng.uniform(0.1, 0.7), 3), "queueLength": 0}
                for acc in ("A100", "H100")
            ],
        }
        for i in range(models)
    ]
    path.write_text(yaml.safe_dump({"collectedAt": "2026-11-22T12:00:00Z", "models": entries}, sort_keys=False))
    return path


def inconsistent(cluster: Cluster, namespace: str) -> list[str]:
    """Every VariantAutoscaling whose desired replicas (status) are not its Deployment's replicas."""
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in cluster.list("apps/v1", "Deployment", namespace)}
    found = []
    for va in cluster.list(LLMD_API, VARIANT_AUTOSCALING, namespace):
        name = va["metadata"]["name"]
        desired = ((va.get("status") or {}).get("desiredOptimizedAlloc") or {}).get("numReplicas")
        if desired != replicas[name]:
            found.append(f"{name}: status {desired}, Deployment {replicas[name]}")
    return found


def run_pairs(run: Callable[[pathlib.Path], Any], metrics: tuple[pathlib.Path, pathlib.Path], pairs: int) -> None:
    """``pairs`` times, two optimize runs started together with different metrics; each pair joined before the
    next. A run that waited out the lock is allowed to stop (CannotRun); any other failure fails the test."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(pairs):
            for future in [pool.submit(run, metrics[0]), pool.submit(run, metrics[1])]:
                try:
                    future.result()
                except CannotRun:
                    pass


# ----------------------------------------------------------------------------------------- the lock itself


@pytest.fixture()
def kube(kube_server: Any) -> KubeCluster:
    return KubeCluster(api_client=kube_server.api_client())


def exclusive(cluster_of: Callable[[], Cluster], namespace: str, runs: int = 6) -> int:
    """Start ``runs`` holders at once, each keeping the lock a moment; the most that held it at the same time."""
    inside, most = 0, 0
    guard = threading.Lock()

    def hold() -> None:
        nonlocal inside, most
        with hold_writer_lock(cluster_of(), "modelplane-optimize", namespace, wait_s=30):
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.1)
            with guard:
                inside -= 1

    with ThreadPoolExecutor(max_workers=runs) as pool:
        list(pool.map(lambda _: hold(), range(runs)))
    return most


def test_two_runs_never_both_hold_the_lease(kube_server: Any, kube_namespace: str) -> None:
    assert exclusive(lambda: KubeCluster(api_client=kube_server.api_client()), kube_namespace) == 1


def test_two_runs_never_both_hold_the_local_lock(tmp_path: pathlib.Path) -> None:
    (tmp_path / "c").mkdir()
    assert exclusive(lambda: LocalCluster(tmp_path / "c"), "modelplane-system") == 1


def test_a_held_lease_names_its_holder_and_is_taken_once_released(kube: KubeCluster, kube_namespace: str) -> None:
    with hold_writer_lock(kube, "modelplane-optimize", kube_namespace, wait_s=1) as first:
        lease = kube.get("coordination.k8s.io/v1", "Lease", "modelplane-optimize", kube_namespace)
        assert lease["spec"]["holderIdentity"] == first.identity
        with pytest.raises(LockHeld) as held:
            with hold_writer_lock(kube, "modelplane-optimize", kube_namespace, wait_s=1):
                pytest.fail("a second holder")
        assert held.value.holder == first.identity
    started = time.monotonic()
    with hold_writer_lock(kube, "modelplane-optimize", kube_namespace, wait_s=5) as second:
        assert time.monotonic() - started < 1  # released, not expired: taken at once
        assert kube.get("coordination.k8s.io/v1", "Lease", "modelplane-optimize", kube_namespace)["spec"][
            "holderIdentity"
        ] == (second.identity)


def test_a_waiting_run_proceeds_when_the_holder_releases(tmp_path: pathlib.Path) -> None:
    cluster = LocalCluster(tmp_path)
    released = threading.Event()

    def holder() -> None:
        with hold_writer_lock(cluster, "modelplane-optimize", "ns", wait_s=1):
            time.sleep(1.0)
        released.set()

    thread = threading.Thread(target=holder)
    thread.start()
    time.sleep(0.2)
    with hold_writer_lock(LocalCluster(tmp_path), "modelplane-optimize", "ns", wait_s=10):
        assert released.wait(0)  # it got the lock only after the holder let go
    thread.join()


def test_a_killed_holder_leaves_no_stale_local_lock(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    holder = (
        "import sys, time; from tasks.clients.cluster import LocalCluster; from tasks.writer_lock import hold_writer_lock\n"
        "with hold_writer_lock(LocalCluster(sys.argv[1]), 'modelplane-optimize', 'ns', 1):\n"
        "    print('held', flush=True); time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as held:
            with hold_writer_lock(LocalCluster(tmp_path), "modelplane-optimize", "ns", wait_s=0.5):
                pass
        assert f"_{proc.pid}_" in held.value.holder
    finally:
        proc.kill()
        proc.wait(10)
    with hold_writer_lock(LocalCluster(tmp_path), "modelplane-optimize", "ns", wait_s=0.5):
        pass  # the kernel released the dead holder's flock


# ----------------------------------------------------------------------------------------- the flow under it


@dataclass
class BigCluster:
    """120 VariantAutoscalings on the Kubernetes API test server, and how to run one optimize cycle on them."""

    server: Any
    cluster: KubeCluster
    namespace: str
    config_namespace: str

    def optimize(self, metrics_file: pathlib.Path) -> Any:
        # The runs queue on the Lease and share two cores with the suite's other workers: the cycle's own timeout
        # (50 s, for a 60 s schedule) is not what these tests check, and a loaded CI machine exceeded it.
        return optimize.with_options(timeout_seconds=600)(
            namespaces=[self.namespace],
            config_namespace=self.config_namespace,
            metrics_file=str(metrics_file),
            cluster=f"kubeconfig:{self.server.kubeconfig}",
        )


@pytest.fixture()
def big_kube(kube_server: Any, kube_namespace: str) -> BigCluster:
    kube_server.install_crds([yaml.safe_load(text) for text in render_crds().values()])
    cluster = KubeCluster(api_client=kube_server.api_client())
    config_namespace = f"{kube_namespace}-cfg"
    kube_server.create_namespace(config_namespace)
    populate(cluster, kube_namespace, config_namespace)
    return BigCluster(kube_server, cluster, kube_namespace, config_namespace)


def test_concurrent_pairs_on_the_kube_server_leave_no_inconsistent_object(
    prefect_harness: None, big_kube: BigCluster, tmp_path: pathlib.Path
) -> None:
    cluster, namespace, config_namespace = big_kube.cluster, big_kube.namespace, big_kube.config_namespace
    metrics = (write_metrics(tmp_path / "a.yaml", namespace, 1), write_metrics(tmp_path / "b.yaml", namespace, 2))
    run_pairs(big_kube.optimize, metrics, PAIRS)
    assert inconsistent(cluster, namespace) == []
    lease = cluster.get("coordination.k8s.io/v1", "Lease", "modelplane-optimize", config_namespace)
    assert lease["spec"]["holderIdentity"] == ""  # released by the last run
    assert lease["spec"]["leaseTransitions"] >= 2 * PAIRS - 1


def test_concurrent_pairs_on_the_local_backend_leave_no_inconsistent_object(
    prefect_harness: None, tmp_path: pathlib.Path
) -> None:
    folder = tmp_path / "cluster"
    folder.mkdir()
    populate(LocalCluster(folder), "llm-serving", "modelplane-system", LOCAL_MODELS)
    a, b = (write_metrics(tmp_path / f"{seed}.yaml", "llm-serving", seed, LOCAL_MODELS) for seed in (1, 2))
    run = optimize.with_options(timeout_seconds=600)
    run_pairs(lambda m: run(metrics_file=str(m), cluster=str(folder)), (a, b), 3)
    assert inconsistent(LocalCluster(folder), "llm-serving") == []
    assert (folder / ".modelplane-optimize.lock").read_text().strip()  # the last holder's name, for the next waiter


def test_a_run_finding_the_lease_held_stops_naming_the_holder(
    prefect_harness: None,
    big_kube: BigCluster,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster, namespace, config_namespace = big_kube.cluster, big_kube.namespace, big_kube.config_namespace
    monkeypatch.setattr(one_writer, "LOCK_WAIT_S", 1.0)
    metrics = write_metrics(tmp_path / "a.yaml", namespace, 1)
    before = {
        va["metadata"]["name"]: va["metadata"]["resourceVersion"]
        for va in cluster.list(LLMD_API, VARIANT_AUTOSCALING, namespace)
    }
    with hold_writer_lock(cluster, "modelplane-optimize", config_namespace, wait_s=1) as lock:
        with pytest.raises(CannotRun) as stopped:
            big_kube.optimize(metrics)
    message = str(stopped.value)
    assert f"Lease {config_namespace}/modelplane-optimize is held by {lock.identity}" in message
    assert "changed nothing" in message
    after = {
        va["metadata"]["name"]: va["metadata"]["resourceVersion"]
        for va in cluster.list(LLMD_API, VARIANT_AUTOSCALING, namespace)
    }
    assert after == before


@pytest.mark.parametrize("deleting", [False, True], ids=["replanned", "being-deleted"])
def test_a_status_conflict_rereads_and_replans_the_object_unless_it_is_being_deleted(
    prefect_harness: None,
    big_kube: BigCluster,
    kube_server: Any,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    deleting: bool,
) -> None:
    """A 409 on one status write: that object is read again and decided again (one re-plan), its status written
    from the re-read object; the others are written at their first try. Found being deleted when re-read (a
    finalizer holds it), it is neither decided again nor written, as a cycle leaves such an object alone (before,
    its status was written from the re-plan)."""
    cluster, namespace = big_kube.cluster, big_kube.namespace
    metrics = write_metrics(tmp_path / "a.yaml", namespace, 1)
    seen: list[tuple[str, object]] = []
    real = one_writer.replanner

    def counting(*args: Any, **kwargs: Any) -> Any:
        replan = real(*args, **kwargs)

        def wrapped(fresh: dict[str, Any]) -> Any:
            if deleting:
                fresh["metadata"].update(finalizers=["example.com/hold"], deletionTimestamp="2026-01-01T00:00:00Z")
            seen.append((fresh["metadata"]["name"], replan(fresh)))
            return seen[-1][1]

        return wrapped

    monkeypatch.setattr(optimize_flow, "replanner", counting)
    victim = variant_name(3, "H100")
    before = cluster.get(LLMD_API, VARIANT_AUTOSCALING, victim, namespace).get("status")
    kube_server.reset_stats()
    kube_server.inject("PATCH", f"/variantautoscalings/{victim}/status$", 409, times=1, reason="Conflict")
    report = big_kube.optimize(metrics)
    assert [name for name, _ in seen] == [victim]
    assert kube_server.count("get", "variantautoscalings") == 1  # the re-read, and only of that object
    if deleting:
        assert seen[0][1] is None
        assert cluster.get(LLMD_API, VARIANT_AUTOSCALING, victim, namespace).get("status") == before
        return
    assert seen[0][1] is not None and all(w.error is None for w in report.writes)
    assert inconsistent(cluster, namespace) == []


def test_a_status_that_keeps_conflicting_without_a_replan_is_that_objects_error(
    prefect_harness: None,
    big_kube: BigCluster,
    kube_server: Any,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller that gives no re-plan (``replan=None``) and a status write that conflicts at every try: the
    object's outcome names the conflict, the others are written; nothing calls the missing re-plan."""
    namespace = big_kube.namespace
    metrics = write_metrics(tmp_path / "a.yaml", namespace, 1)
    real = optimize_flow.apply_decisions

    def without_replan(*args: Any, **kwargs: Any) -> Any:  # the flow passes (..., published, replan)
        kwargs.pop("replan", None)
        return real(*args[:6], **kwargs, replan=None)

    monkeypatch.setattr(optimize_flow, "apply_decisions", without_replan)
    victim = variant_name(3, "H100")
    kube_server.inject("PATCH", f"/variantautoscalings/{victim}/status$", 409, times=20, reason="Conflict")
    report = big_kube.optimize(metrics)
    errors = {w.name: w.error for w in report.writes if w.error}
    assert list(errors) == [victim]
    assert errors[victim].startswith("status: ") and "re-plans" not in errors[victim]
    kube_server.clear_injections()


def test_a_stale_decision_is_replanned_not_written_over_a_newer_object(
    prefect_harness: None,
    big_kube: BigCluster,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another writer scales a target and rewrites its VariantAutoscaling's status between this run's read and
    its write: the run's status write conflicts, and what it writes is decided from what the other wrote (the
    target's replicas as they are now), so status and target agree."""
    cluster, namespace = big_kube.cluster, big_kube.namespace
    metrics = write_metrics(tmp_path / "a.yaml", namespace, 1)
    victim = variant_name(5, "A100")
    real = optimize_flow.apply_decisions
    seen: dict[str, Any] = {}

    def interfere(*args: Any, **kwargs: Any) -> Any:  # runs after the read and the plan, before the writes
        cluster.set_scale(ObjectRef("apps/v1", "Deployment", victim, namespace), 7)
        va = cluster.get(LLMD_API, VARIANT_AUTOSCALING, victim, namespace)
        cluster.patch_status(ObjectRef.of(va), {"desiredOptimizedAlloc": {"numReplicas": 7}})
        result = real(*args, **kwargs)
        seen["decision"] = next(
            d for d in args[2].unquote() if d.name == victim
        )  # the cycle's decisions, as the run applied them
        return result

    monkeypatch.setattr(optimize_flow, "apply_decisions", interfere)
    big_kube.optimize(metrics)
    assert seen["decision"].current == 7  # decided again from the target as the other writer left it
    assert inconsistent(cluster, namespace) == []


def test_the_cli_stops_with_one_error_line_naming_the_holder(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(one_writer, "LOCK_WAIT_S", 0.5)
    before = {p.name: p.read_bytes() for p in example_cluster.glob("*.yaml")}
    with hold_writer_lock(LocalCluster(example_cluster), "modelplane-optimize", "modelplane-system", 1) as lock:
        result = CliRunner().invoke(
            app, ["optimize", "--cluster", str(example_cluster), "--metrics", str(example_metrics)], terminal_width=250
        )
    assert result.exit_code == ExitCode.CANNOT_RUN, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and lock.identity in errors[0] and "another optimize run" in errors[0], result.output
    assert {p.name: p.read_bytes() for p in example_cluster.glob("*.yaml")} == before


def test_a_dry_run_takes_no_lock(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(one_writer, "LOCK_WAIT_S", 0.5)
    with hold_writer_lock(LocalCluster(example_cluster), "modelplane-optimize", "modelplane-system", 1):
        report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics), dry_run=True)
    assert report.rows  # decided while another run held the lock: a preview never waits, never writes
