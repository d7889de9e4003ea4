"""deployments/rbac.yaml grants exactly what the flows do in a cluster.

Every flow of deployments/prefect.yaml runs (in-process, one Prefect flow run each) against a Kubernetes API
test server holding the example cluster, through the official client; the server logs every request with its
RBAC verb. Each (API group, resource[/subresource], verb) seen must be granted by the ClusterRole, and each
rule of the ClusterRole must be used by some flow run here (or be listed in EXERCISED_ELSEWHERE with the test
that uses it). A new flow is covered as soon as its prefect.yaml entry exists.
"""

from __future__ import annotations

import pathlib
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from flows.deployments import deployment_entries, load_entry_flow
from tests.flows.platform_support import LOCAL_RUN_PARAMETERS, cluster_server, load_example_cluster  # noqa: F401
from tests.servers.kubeserver.fixture import KubeServer
from tests.upstream_crds import upstream_crds_dir

REPO = pathlib.Path(__file__).resolve().parents[2]
RBAC = REPO / "deployments" / "rbac.yaml"
ENTRIES = deployment_entries()

Permission = tuple[str, str, str]  # (API group, resource or resource/subresource, verb)

# Further runs that reach other code paths: (flow, extra parameters, API failures to inject first as
# (method, path regex, HTTP status)). A 409 on a status write makes the flow re-read and retry.
EXTRA_RUNS: list[tuple[str, dict[str, Any], list[tuple[str, str, int]]]] = [
    (
        "optimize",
        {"namespace_selector": "app.kubernetes.io/part-of=modelplane"},
        [
            ("PATCH", r"/variantautoscalings/[^/]+/status$", 409),
            ("PATCH", r"/autoscalingpolicybindings/[^/]+/status$", 409),
        ],
    ),
]

# Rules of the Role that the runs here do not reach, each with the code path that uses it.
EXERCISED_ELSEWHERE: dict[Permission, str] = {
    (
        "",
        "configmaps",
        "get",
    ): "optimize: a sloClassRef ConfigMap kept in the variant's own namespace (tasks/optimize/read.py)",
    ("", "persistentvolumeclaims", "delete"): "warm-caches: opt-in garbage collection (tests/caches)",
    **{
        ("coordination.k8s.io", "leases", verb): "serve-deployments --leader-elect (tests/test_leader_election.py)"
        for verb in ("get", "create", "patch")
    },
    ("", "events", "patch"): "a repeated Event bumps the recorded one (tests/flows/test_rollout_events.py)",
    ("aim.silogen.ai", "modelcaches", "delete"): "warm-caches: opt-in garbage collection (tests/caches)",
    (
        "aim.silogen.ai",
        "modelcaches",
        "create",
    ): "warm-caches/resolve-templates when a consumer needs a cache no one made yet (tests/caches)",
    **{
        (
            "registry.volcano.sh",
            kind,
            verb,
        ): "rollout-models: a policy changed, or a backend removed (tests/flows/test_rollout_models.py)"
        for kind in ("autoscalingpolicies", "autoscalingpolicybindings")
        for verb in ("patch", "delete")
    },
    ("apps", "deployments", "delete"): "rollout-models: a backend removed (tests/flows/test_rollout_models.py)",
    ("", "services", "delete"): "rollout-models: a backend removed (tests/flows/test_rollout_models.py)",
    (
        "",
        "configmaps",
        "patch",
    ): "rollout-models: a route weight or model match changed (tests/flows/test_rollout_models.py)",
    ("", "configmaps", "delete"): "rollout-models: a Model's routes removed (tests/flows/test_rollout_models.py)",
    (
        "serving.kserve.io",
        "inferenceservices",
        "create",
    ): "rollout-services once the service's caches are Available (tests/aim)",
    (
        "serving.kserve.io",
        "inferenceservices",
        "patch",
    ): "rollout-services on a replicas or template change (tests/aim)",
    ("gateway.networking.k8s.io", "httproutes", "create"): "rollout-services with a gateway set (tests/aim)",
    ("gateway.networking.k8s.io", "httproutes", "patch"): "rollout-services when the route changes (tests/aim)",
    **{
        (
            group,
            kind,
            verb,
        ): "rollout-models on a cluster serving Kthena's CRDs (tests/flows/test_rollout_kthena_native.py)"
        for group, kind in (
            ("networking.serving.volcano.sh", "modelservers"),
            ("networking.serving.volcano.sh", "modelroutes"),
            ("workload.serving.volcano.sh", "modelservings"),
        )
        for verb in ("list", "create", "patch", "delete")
    },
    (
        "workload.serving.volcano.sh",
        "modelservings/scale",
        "get",
    ): "optimize on ModelServing targets (tests/flows/test_rollout_kthena_native.py)",
    (
        "workload.serving.volcano.sh",
        "modelservings/scale",
        "patch",
    ): "optimize on ModelServing targets (tests/flows/test_rollout_kthena_native.py)",
}


def needs_upstream_crds() -> set[Permission]:
    """The rules only reachable when the upstream KServe/Gateway CRDs are registered (rollout-services lists
    InferenceServices and HTTPRoutes): without ``shared/upstream-crds`` beside the repository the runs here
    cannot use them, and tests/flows/test_aim_e2e.py says it skipped."""
    if upstream_crds_dir() is not None:
        return set()
    return {("serving.kserve.io", "inferenceservices", "list"), ("gateway.networking.k8s.io", "httproutes", "list")}


def permission_of(request: dict[str, Any]) -> Permission | None:
    """The RBAC (group, resource[/subresource], verb) of one logged API request; None for discovery."""
    parts = [p for p in urlsplit(request["path"]).path.split("/") if p]
    if request["verb"] in ("discovery", None) or not parts or parts[0] not in ("api", "apis"):
        return None
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return None
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    return group, resource, request["verb"]


def role_permissions() -> set[Permission]:
    """Every (group, resource, verb) the ClusterRole grants."""
    role = next(doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc and doc["kind"] == "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def rule_text(missing: set[Permission]) -> str:
    """The rules to add, in rbac.yaml's form."""
    return "\n".join(
        f'  - apiGroups: ["{g}"]\n    resources: ["{r}"]\n    verbs: ["{v}"]' for g, r, v in sorted(missing)
    )


@pytest.fixture(scope="module")
def used_permissions(cluster_server: KubeServer, prefect_harness: None) -> dict[Permission, set[str]]:
    """(group, resource, verb) -> the flows that used it, over one run of every flow on the example cluster."""
    used: dict[Permission, set[str]] = {}
    by_name = {entry["name"]: entry for entry in ENTRIES}
    runs = [(entry["name"], {}, []) for entry in ENTRIES] + [run for run in EXTRA_RUNS if run[0] in by_name]
    for name, extra, injections in runs:
        entry = by_name[name]
        load_example_cluster(cluster_server)
        cluster_server.reset_stats()
        for method, path, status in injections:
            cluster_server.inject(method, path, status)
        parameters = {
            **(entry.get("parameters") or {}),
            **LOCAL_RUN_PARAMETERS.get(name, {}),
            **extra,
            "cluster": f"kubeconfig:{cluster_server.kubeconfig}",
        }
        load_entry_flow(entry)(**parameters)
        cluster_server.clear_injections()
        requests = cluster_server.requests(limit=0)
        assert len(requests) < 2000, "the request log is capped at 2,000: run fewer objects"
        for request in requests:
            permission = permission_of(request)
            if permission is not None:
                used.setdefault(permission, set()).add(entry["name"])
    return used


def test_every_call_the_flows_make_is_granted(used_permissions: dict[Permission, set[str]]) -> None:
    missing = set(used_permissions) - role_permissions()
    assert not missing, (
        "deployments/rbac.yaml must grant (used by "
        + ", ".join(sorted({flow for p in missing for flow in used_permissions[p]}))
        + "):\n"
        + rule_text(missing)
    )


def test_the_role_grants_nothing_the_flows_do_not_use(used_permissions: dict[Permission, set[str]]) -> None:
    unused = role_permissions() - set(used_permissions) - set(EXERCISED_ELSEWHERE) - needs_upstream_crds()
    assert not unused, (
        "deployments/rbac.yaml grants what no flow uses (remove, or list in EXERCISED_ELSEWHERE):\n" + rule_text(unused)
    )


def test_the_optimize_cycle_is_seen(used_permissions: dict[Permission, set[str]]) -> None:
    """The recording works: optimize's list of VariantAutoscalings and its status write are in the log."""
    assert ("llmd.ai", "variantautoscalings", "list") in used_permissions
    assert ("llmd.ai", "variantautoscalings/status", "patch") in used_permissions
    assert ("llmd.ai", "variantautoscalings", "get") in used_permissions, "the injected conflict makes it re-read"
    assert ("", "namespaces", "list") in used_permissions, "the namespace selector lists Namespaces"
