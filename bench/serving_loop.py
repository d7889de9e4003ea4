"""Benchmark: the served control loop for ten minutes against a real Prefect server and the Kubernetes API test server.

    python -m bench.serving_loop [--minutes 10] [--models 500]

What the install's ``modelplane-serving`` Deployment runs (``serve-deployments --control-loop --leader-elect``):
the control loop's deployments of deployments/prefect.yaml served by Prefect's ``serve`` from one process that
holds the Lease, on a real ``prefect server start`` (its scheduler creating the 60 s optimize runs), over a
cluster of 1,000 VariantAutoscalings (500 models x A100/H100, each scaling its own Deployment; the population of
``bench.optimize``), metrics from a file (the optimize deployment's ``metrics_file`` parameter; the other
parameters are prefect.yaml's). Reported: schedule lateness of the optimize runs (their start time minus the time
they were scheduled for), Jobs created in the cluster, the pods a day the control loop costs served and as Jobs,
and the serving process's CPU and memory (the process and the flow-run subprocesses it starts), read from /proc.
The table is printed and written between the serving-loop markers of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import yaml

from bench.engine import machine, publish_section

START, END = "<!-- serving-loop:start -->", "<!-- serving-loop:end -->"
CONFIG_NAMESPACE = "modelplane-system"
LEASE = "modelplane-serve"
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def serve_control_loop(metrics_file: str, identity: str) -> None:
    """The serving process: the control loop's deployments, the optimize one reading ``metrics_file``, served
    while this process holds the Lease (as ``modelplane serve-deployments --control-loop --leader-elect``)."""
    from flows.deployments import CONTROL_LOOP, PREFECT_YAML, runner_deployments, served_name
    from flows.leading import serve_while_leading
    from tasks.clients.cluster import connect
    from tasks.leader import LeaseConfig

    served = runner_deployments(PREFECT_YAML, only=CONTROL_LOOP)
    for deployment in served:
        if deployment.name == served_name("optimize"):
            deployment.parameters = {**deployment.parameters, "metrics_file": metrics_file}
    serve_while_leading(served, connect(None), LeaseConfig(LEASE, CONFIG_NAMESPACE, identity), None)


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live descendant."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        for task in pathlib.Path(f"/proc/{current}/task").glob("*/children"):
            try:
                queue.extend(int(child) for child in task.read_text().split())
            except OSError:
                continue
    return found


def cpu_seconds(pid: int, with_reaped_children: bool) -> float:
    """User + system CPU of ``pid`` (and of its children it has waited for) from /proc/PID/stat."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if with_reaped_children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / TICKS


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` now."""
    try:
        return int(pathlib.Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
    except OSError:
        return 0.0


class TreeSampler:
    """Peak memory of the serving process and of its largest flow-run subprocess, sampled once a second."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.serving_peak = 0.0
        self.run_peak = 0.0
        self.tree_peak = 0.0

    def sample(self) -> None:
        tree = process_tree(self.pid)
        sizes = {pid: rss_mib(pid) for pid in tree}
        self.serving_peak = max(self.serving_peak, sizes.get(self.pid, 0.0))
        self.run_peak = max([self.run_peak, *(size for pid, size in sizes.items() if pid != self.pid)])
        self.tree_peak = max(self.tree_peak, sum(sizes.values()))

    def cpu(self) -> float:
        """CPU of the whole tree so far: the serving process, the runs it reaped and the ones still running."""
        live = [pid for pid in process_tree(self.pid) if pid != self.pid]
        return cpu_seconds(self.pid, True) + sum(cpu_seconds(pid, True) for pid in live)


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def runs_per_day_as_jobs() -> dict[str, float]:
    """Runs a day of each control-loop deployment's schedules: one Job pod each on a work pool."""
    from flows.deployments import CONTROL_LOOP, PREFECT_YAML

    entries = yaml.safe_load(PREFECT_YAML.read_text())["deployments"]
    return {
        entry["name"]: sum(86400 / schedule["interval"] for schedule in entry.get("schedules") or [])
        for entry in entries
        if entry["name"] in CONTROL_LOOP
    }


def measure(minutes: float, models: int) -> dict[str, Any]:
    """Start the servers and the serving process, let the loop run ``minutes``, and read what it did."""
    from bench.optimize import metrics_document, populate
    from engine.api.crds import render_crds
    from tests.flows.prefect_server import PrefectServer
    from tests.servers.kubeserver.fixture import start_kube_server

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="serving-loop-"))
    kube = start_kube_server(workdir / "kube")
    prefect = PrefectServer(workdir / "prefect")
    prefect.env["PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED"] = "true"  # as a production server schedules runs
    try:
        kube.install_crds([yaml.safe_load(text) for text in render_crds().values()])
        populate(kube, models, config_namespace=CONFIG_NAMESPACE)
        metrics = workdir / "metrics.yaml"
        metrics.write_text(yaml.safe_dump(metrics_document(models), sort_keys=False))
        prefect.start()
        env = {"MODELPLANE_CLUSTER": f"kubeconfig:{kube.kubeconfig}", "PYTHONPATH": str(pathlib.Path.cwd())}
        serving = spawn_replica(prefect, "leader", str(metrics), env)
        sampler = TreeSampler(serving.pid)
        deployment_id = wait_for_deployment(prefect, serving)
        first = wait_for_first_run(prefect, deployment_id, sampler)
        cpu_start, started = sampler.cpu(), time.monotonic()
        while time.monotonic() - started < minutes * 60:
            if serving.poll() is not None:
                raise RuntimeError(f"the serving process exited {serving.returncode}: {prefect.log('leader')[-3000:]}")
            sampler.sample()
            time.sleep(1)
        cpu = sampler.cpu() - cpu_start
        elapsed = time.monotonic() - started
        runs = [
            run
            for run in prefect.runs(deployment_id)
            if run["auto_scheduled"] and run["start_time"] and parse_time(run["expected_start_time"]) >= first
        ]
        jobs = kube._call("GET", "/apis/batch/v1/jobs")["items"]
        failover = kill_the_leader(prefect, kube, deployment_id, serving, str(metrics), env)
        for run in sorted(prefect.runs(deployment_id), key=lambda run: run["expected_start_time"]):
            print(
                f"{run['name']:24} expected {run['expected_start_time']} started {run['start_time']} "
                f"{run['state']['name']} auto={run['auto_scheduled']} runs={run['run_count']}",
                file=sys.stderr,
            )
    finally:
        prefect.stop()
        kube.stop()
    lateness = sorted(
        (parse_time(run["start_time"]) - parse_time(run["expected_start_time"])).total_seconds() for run in runs
    )
    states: dict[str, int] = {}
    for run in runs:
        states[run["state"]["name"]] = states.get(run["state"]["name"], 0) + 1
    return {
        "minutes": elapsed / 60,
        "runs": len(runs),
        "states": states,
        "lateness": lateness,
        "jobs": len(jobs),
        "cpu_s": cpu,
        "serving_peak": sampler.serving_peak,
        "run_peak": sampler.run_peak,
        "tree_peak": sampler.tree_peak,
        "load": os.getloadavg(),
        **failover,
    }


def spawn_replica(prefect: Any, identity: str, metrics: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A serving replica in a process group of its own (killed as a whole, as a pod dies), logging to
    ``<identity>.log`` in the Prefect home."""
    with open(prefect.home / f"{identity}.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.serving_loop", "--serve", metrics, "--identity", identity],
            env={**prefect.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    prefect.processes.append(process)
    return process


def lease_holder(kube: Any) -> str | None:
    """Who holds the serving Lease now."""
    lease = kube._call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{CONFIG_NAMESPACE}/leases/{LEASE}")
    return lease["spec"].get("holderIdentity")


def wait_for_holder(kube: Any, identity: str, since: datetime, timeout: float = 300) -> float:
    """Seconds from ``since`` until ``identity`` holds the Lease."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lease_holder(kube) == identity:
            return (datetime.now(UTC) - since).total_seconds()
        time.sleep(0.5)
    raise RuntimeError(f"{identity} did not take the Lease in {timeout} s")


def kill_the_leader(
    prefect: Any, kube: Any, deployment_id: str, leader: subprocess.Popen[bytes], metrics: str, env: dict[str, str]
) -> dict[str, Any]:
    """Start a standby, kill the leader's whole process group (no Lease release, its runs die with it), and time
    how long until the standby starts an optimize run, and how late that run was."""
    standby = spawn_replica(prefect, "standby", metrics, env)
    time.sleep(45)  # the standby's imports and its first tries at the Lease, which the leader keeps renewing
    if standby.poll() is not None:
        raise RuntimeError(f"the standby exited {standby.returncode}: {prefect.log('standby')[-3000:]}")
    killed = datetime.now(UTC)
    os.killpg(leader.pid, signal.SIGKILL)
    leader.wait()
    takeover = wait_for_holder(kube, "standby", killed)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        started = [
            run for run in prefect.runs(deployment_id) if run["start_time"] and parse_time(run["start_time"]) > killed
        ]
        if started:
            start = min(parse_time(run["start_time"]) for run in started)
            first = next(run for run in started if parse_time(run["start_time"]) == start)
            return {
                "takeover_s": takeover,
                "resumed_s": (start - killed).total_seconds(),
                "resumed_late_s": (start - parse_time(first["expected_start_time"])).total_seconds(),
            }
        time.sleep(1)
    raise RuntimeError(
        f"no optimize run started in 600 s after the leader was killed: {prefect.log('standby')[-3000:]}"
    )


def wait_for_deployment(prefect: Any, serving: Any, timeout: float = 300) -> str:
    """The id of the served optimize deployment once the serving process has registered it."""
    from flows.deployments import served_name

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if serving.poll() is not None:
            raise RuntimeError(f"the serving process exited {serving.returncode}: {prefect.log('leader')[-3000:]}")
        response = prefect.request("GET", f"/deployments/name/optimize/{served_name('optimize')}")
        if response.status_code == 200:
            return str(response.json()["id"])
        time.sleep(1)
    raise RuntimeError(f"optimize was not served in {timeout} s: {prefect.log('leader')[-3000:]}")


def wait_for_first_run(prefect: Any, deployment_id: str, sampler: TreeSampler, timeout: float = 300) -> datetime:
    """When the first scheduled optimize run was due, once it has finished: the measurement starts after it, so
    Prefect's start-up and the first cycle (every status new) are outside it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sampler.sample()
        finished = [run for run in prefect.runs(deployment_id) if run["end_time"] and run["auto_scheduled"]]
        if finished:
            return max(parse_time(run["expected_start_time"]) for run in finished)
        time.sleep(2)
    raise RuntimeError(f"no optimize run finished in {timeout} s: {prefect.log('leader')[-3000:]}")


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def render(result: dict[str, Any], models: int) -> str:
    lateness = result["lateness"]
    served_runs = runs_per_day_as_jobs()
    states = ", ".join(f"{name} {count}" for name, count in sorted(result["states"].items()))
    per_cycle = result["cpu_s"] / max(result["runs"], 1)
    load = ", ".join(f"{value:.1f}" for value in result["load"])
    lines = [
        START,
        "",
        "## The served control loop",
        "",
        f"Command: `python -m bench.serving_loop --minutes {result['minutes']:.0f} --models {models}` on {machine()}; "
        f"load average at the end {load}.",
        "",
        "The control loop's deployments of deployments/prefect.yaml served by Prefect's `serve` from one process",
        "holding the Lease (what the install's `modelplane-serving` Deployment runs), on a real `prefect server",
        f"start` whose scheduler creates the runs, over {2 * models:,} VariantAutoscalings on the Kubernetes API test",
        "server, metrics from a file. The measurement starts after the first optimize run (Prefect's start-up and",
        "the first cycle, where every status is new, are outside it). Lateness is a run's start time minus the",
        "time it was scheduled for. CPU is the serving process and the flow-run subprocesses it starts.",
        "",
        "| optimize runs | states | lateness p50 | p95 | max | Jobs created | CPU per cycle | serving process peak RSS "
        "| largest run's peak RSS |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {result['runs']} in {result['minutes']:.1f} min | {states} | {percentile(lateness, 50):.1f} s "
        f"| {percentile(lateness, 95):.1f} s | {max(lateness):.1f} s | {result['jobs']} | {per_cycle:.1f} s "
        f"| {result['serving_peak']:.0f} MiB | {result['run_peak']:.0f} MiB |",
        "",
        "Failover: the leader's process group killed (no Lease release; its runs die with it): the standby held the",
        f"Lease {result['takeover_s']:.1f} s later and started the next optimize run {result['resumed_s']:.1f} s after "
        f"the kill, {result['resumed_late_s']:.1f} s after that run was due.",
        "",
        "Pods a day for the control loop: served, none (the Deployment's two replicas run for as long as it",
        f"exists); as Jobs on a work pool, one pod a run: {sum(served_runs.values()):,.0f} "
        f"({', '.join(f'{name} {runs:,.0f}' for name, runs in sorted(served_runs.items()) if runs)}).",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--models", type=int, default=500)
    parser.add_argument("--serve", metavar="METRICS_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--identity", default="leader", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    if args.serve:
        serve_control_loop(args.serve, args.identity)
        return 0
    result = measure(args.minutes, args.models)
    if not result["lateness"]:
        print("error: no scheduled optimize run started in the measurement window", file=sys.stderr)
        return 1
    section = render(result, args.models)
    publish_section(section, START, END, write=not args.no_write)
    met = percentile(result["lateness"], 95) < 5 and result["jobs"] == 0 and result["takeover_s"] < 30
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
