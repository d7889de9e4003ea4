"""One writer at a time, across processes: ten pairs of optimize runs, each run its own Python process, started
together on the Kubernetes API test server's 120 VariantAutoscalings with different metrics per run of a pair.

Threads of one process (tests/flows/test_optimize_one_writer.py) do not interleave their reads and writes the way
two processes do; these runs share nothing but the API server, as two ``modelplane optimize-allocation`` commands
or two scheduled flow runs would. Each process runs the optimize flow untracked (no Prefect API: the same flow
code the command runs, without a Prefect server's start-up per run), forked from one process that imported it. Afterwards no VariantAutoscaling's status
may disagree with its Deployment's replicas. Without the Lease and the conditioned status writes the same
pairs leave inconsistent objects.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from tests.flows.test_optimize_one_writer import PAIRS, BigCluster, big_kube, inconsistent, write_metrics

__all__ = ["big_kube"]  # the fixture, used by name

REPO = pathlib.Path(__file__).resolve().parents[2]
LAUNCHER = """
import json, os, sys, traceback
from flows.exitcodes import CannotRun
from flows.optimize import optimize
from flows.runs import run_untracked

namespace, config_namespace, kubeconfig = sys.argv[1:4]


def run(metrics):
    try:
        run_untracked(optimize, {
            "namespaces": [namespace],
            "config_namespace": config_namespace,
            "metrics_file": metrics,
            "cluster": f"kubeconfig:{kubeconfig}",
        })
    except CannotRun as exc:  # waited out the lock: the command's exit 2
        print(f"error: {exc}", file=sys.stderr, flush=True)
        os._exit(2)
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


for line in sys.stdin:  # one pair per line: both runs forked at once, then both waited for
    pids = []
    for metrics in line.split():
        pid = os.fork()
        if pid == 0:
            run(metrics)
        pids.append(pid)
    print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]), flush=True)
"""
"""A process that imports the flow once, then forks a fresh process for each run: every run is a process of its
own (its own memory, API client and connections), without paying the imports twenty times."""


def launcher(big: BigCluster) -> subprocess.Popen[str]:
    """The launcher of the runs against ``big`` (this checkout first on its path, no Prefect API)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, big.namespace, big.config_namespace, big.server.kubeconfig],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.long_wall  # half a minute or more, and no Prefect API: it was handed out in a run's last minutes
@pytest.mark.timeout(600)
def test_concurrent_pairs_of_processes_leave_no_inconsistent_object(
    big_kube: BigCluster, tmp_path: pathlib.Path
) -> None:
    cluster, namespace = big_kube.cluster, big_kube.namespace
    metrics = (write_metrics(tmp_path / "a.yaml", namespace, 1), write_metrics(tmp_path / "b.yaml", namespace, 2))
    runs = launcher(big_kube)
    assert runs.stdin is not None and runs.stdout is not None
    codes: list[int] = []
    for _ in range(PAIRS):
        runs.stdin.write(f"{metrics[0]} {metrics[1]}\n")
        runs.stdin.flush()
        codes += json.loads(runs.stdout.readline() or "[]")
    _, stderr = runs.communicate(timeout=60)
    assert runs.returncode == 0 and len(codes) == 2 * PAIRS, stderr
    assert all(code in (0, 2) for code in codes), (codes, stderr)  # 2: waited out the lock
    assert codes.count(0) >= PAIRS, codes  # at least one run of each pair did its work
    assert inconsistent(cluster, namespace) == []
    lease: Any = cluster.get("coordination.k8s.io/v1", "Lease", "modelplane-optimize", big_kube.config_namespace)
    assert lease["spec"]["holderIdentity"] == ""  # released by the last run
