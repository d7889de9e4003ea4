"""The in-cluster install of the Prefect Kubernetes worker, generated (``modelplane render-worker-manifests --write
deployments/worker``; tests/flows/test_worker_manifests.py fails when the checked-in files drift).

Two ways to run the worker that executes the work pool ``modelplane-kubernetes``, both with Modelplane's image
(flows/image.py: it installs prefect-kubernetes through the ``kubernetes`` extra):

* ``worker.yaml``: ``kubectl apply`` it after deployments/rbac.yaml. A ConfigMap with ``PREFECT_API_URL``
  (edit it), the ServiceAccount ``prefect-worker``, a Role in ``modelplane-system`` with exactly what the worker
  and its observer do there (:data:`WORKER_RULES`; the end-to-end test checks every call against it), and a
  Deployment running ``prefect worker start --pool modelplane-kubernetes --type kubernetes``.
* ``helm-values.yaml``: values for Prefect's official ``prefect-worker`` chart, with the same image, pool,
  base job template (deployments/work-pool-template.json) and observer namespace.

Flow runs themselves run as the ServiceAccount ``modelplane`` of deployments/rbac.yaml (the work pool's
``service_account_name``), never as the worker's.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from flows.deployments import KUBERNETES_POOL, kubernetes_pool_template
from flows.image import image, split_reference
from flows.parameters import SYSTEM_NAMESPACE

NAMESPACE = SYSTEM_NAMESPACE  # flows/parameters.py
NAME = "prefect-worker"
UID = 10001  # deployments/Dockerfile's USER
# A Prefect server installed with Prefect's `prefect-server` chart in namespace `prefect`: edit for yours.
DEFAULT_API_URL = "http://prefect-server.prefect.svc.cluster.local:4200/api"
# Prefect Cloud's API key, optional: `kubectl create secret generic prefect-api-key -n modelplane-system --from-literal=key=...`
API_KEY_SECRET = "prefect-api-key"
API_KEY_SECRET_KEY = "key"
LABELS = {
    "app.kubernetes.io/name": NAME,
    "app.kubernetes.io/part-of": "modelplane",
    "app.kubernetes.io/component": "worker",
}

# What prefect-kubernetes 0.8 does in the Jobs' namespace: the worker creates a Job per flow run and deletes
# it to cancel the run; its observer (kopf) lists and watches the Jobs and Pods labelled with a flow-run id,
# reads a Job back before calling a run crashed, and forwards a crashed Pod's log. (Nothing reads Events or a
# Pod by name.) tests/flows/test_kubernetes_worker.py checks each call against these rules.
WORKER_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]

WORKER_ARGS = [
    "worker",
    "start",
    "--pool",
    KUBERNETES_POOL,
    "--type",
    "kubernetes",
    "--install-policy",
    "never",
    "--with-healthcheck",
]


def pod_security() -> dict[str, Any]:
    """The pod security context of Modelplane's pods: non-root as Modelplane's user, RuntimeDefault seccomp.

    Returns:
        The ``securityContext`` of a pod spec.
    """
    return {"runAsNonRoot": True, "runAsUser": UID, "fsGroup": UID, "seccompProfile": {"type": "RuntimeDefault"}}


def container_security() -> dict[str, Any]:
    """The container security context: non-root, read-only root filesystem, no privilege escalation, no capability.

    Returns:
        The ``securityContext`` of a container.
    """
    return {
        "runAsNonRoot": True,
        "runAsUser": UID,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def pod_of(container: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a workload running one of Modelplane's own containers: ``fields`` (its account, restart
    policy, ...), then the non-root security context, the container, and the writable ``/tmp`` the container's
    read-only root filesystem needs (the volume, and its mount as the container's last field).

    Args:
        container: The container (image, command, environment, ...), without volume mounts.
        fields: The pod's own fields (service account, restart policy, ...), first in the spec.

    Returns:
        The pod spec.
    """
    return {
        **fields,
        "securityContext": pod_security(),
        "containers": [{**container, "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }


def deployment_of(meta: dict[str, Any], replicas: int, pod: dict[str, Any]) -> dict[str, Any]:
    """A Deployment (``meta``: its name, namespace and labels) of ``replicas`` pods with spec ``pod`` and the
    Deployment's labels, selected by its ``app.kubernetes.io/name`` label.

    Args:
        meta: The Deployment's metadata; its labels carry ``app.kubernetes.io/name``.
        replicas: How many pods it runs.
        pod: The pod spec (:func:`pod_of`).

    Returns:
        The Deployment manifest.
    """
    labels = meta["labels"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": labels["app.kubernetes.io/name"]}},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


# prefect-kubernetes copies the worker's PREFECT_API_KEY into every flow-run Job: as a plain env value unless these
# name a Secret in the Jobs' namespace, in which case the Job refers to it (secretKeyRef) and the key appears in no
# Job manifest. The worker's own key comes from the same Secret (prefect_client_env), so they cannot differ.
API_KEY_FROM_SECRET = [
    {"name": "PREFECT_INTEGRATIONS_KUBERNETES_WORKER_API_KEY_SECRET_NAME", "value": API_KEY_SECRET},
    {"name": "PREFECT_INTEGRATIONS_KUBERNETES_WORKER_API_KEY_SECRET_KEY", "value": API_KEY_SECRET_KEY},
]


def prefect_client_env() -> list[dict[str, Any]]:
    """The environment of a Prefect client in Modelplane's image (read-only root filesystem, ``/tmp`` writable),
    with the API key of the optional Secret ``prefect-api-key``.

    Returns:
        The container's ``env`` entries.
    """
    return [
        {"name": "PREFECT_HOME", "value": "/tmp/prefect"},
        {"name": "HOME", "value": "/tmp"},
        # Prefect Cloud: create the Secret `prefect-api-key` (key `key`); a self-hosted server needs none.
        {
            "name": "PREFECT_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": API_KEY_SECRET, "key": API_KEY_SECRET_KEY, "optional": True}},
        },
    ]


def worker_objects(
    reference: str | None = None, api_url: str = DEFAULT_API_URL, settings: str | None = None
) -> list[dict[str, Any]]:
    """ConfigMap, ServiceAccount, Role, RoleBinding and Deployment of the worker in ``modelplane-system``, running
    image ``reference`` (default: Modelplane's, flows/image.py). With ``settings`` (the install's ConfigMap
    ``modelplane``) the worker reads ``PREFECT_API_URL`` from that ConfigMap instead of its own.

    Args:
        reference: The worker's image, or None for Modelplane's.
        api_url: The Prefect API URL the worker's own ConfigMap holds (without ``settings``).
        settings: The name of the install's ConfigMap to read ``PREFECT_API_URL`` from, or None for the worker's own.

    Returns:
        The manifests, in apply order.
    """
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": LABELS}
    env = [
        # The observer watches the Jobs' namespace only, so the Role above is enough (no cluster-wide watch).
        {"name": "PREFECT_INTEGRATIONS_KUBERNETES_OBSERVER_NAMESPACES", "value": NAMESPACE},
        *prefect_client_env(),
        *API_KEY_FROM_SECRET,
    ]
    container = {
        "name": NAME,
        "image": reference or image(),
        "imagePullPolicy": "IfNotPresent",
        "command": ["prefect"],
        "args": WORKER_ARGS,
        "envFrom": [{"configMapRef": {"name": name}} for name in (NAME, settings) if name],
        "env": env,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": container_security(),
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "initialDelaySeconds": 30, "periodSeconds": 30},
    }
    # One worker is enough for the pool's load (it only submits Jobs); a second replica is safe too.
    deployment = deployment_of(meta, 1, pod_of(container, {"serviceAccountName": NAME}))
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {
                **({} if settings else {"PREFECT_API_URL": api_url}),
                "PREFECT_WORKER_QUERY_SECONDS": "5",
                "PREFECT_WORKER_PREFETCH_SECONDS": "10",
            },
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": WORKER_RULES},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        deployment,
    ]


def helm_values(reference: str | None = None, api_url: str = DEFAULT_API_URL) -> dict[str, Any]:
    """Values for Prefect's ``prefect-worker`` chart: image ``reference`` (default: Modelplane's, flows/image.py)
    and the same worker as worker.yaml.

    The chart mounts the base job template at ``baseJobTemplate.json`` in the worker's working directory and
    syncs it into an existing pool; the chart's own Role (jobs, pods, pods/log, events) covers WORKER_RULES.

    Args:
        reference: The worker's image, or None for Modelplane's.
        api_url: The Prefect API URL the worker talks to.

    Returns:
        The chart's values.
    """
    reference = reference or image()
    repository, tag = split_reference(reference)
    template = kubernetes_pool_template(image=reference)
    return {
        "worker": {
            "image": {"repository": repository, "prefectTag": tag, "pullPolicy": "IfNotPresent"},
            # Modelplane's image has no /opt/prefect/entrypoint.sh: run the CLI directly.
            "command": ["prefect"],
            "args": [*WORKER_ARGS, "--base-job-template", "baseJobTemplate.json"],
            "apiConfig": "selfHostedServer",
            "selfHostedServerApiConfig": {"apiUrl": api_url},
            "config": {
                "workPool": KUBERNETES_POOL,
                "type": "kubernetes",
                "installPolicy": "never",
                "jobNamespace": NAMESPACE,
                "baseJobTemplate": {"configuration": json.dumps(template, indent=2)},
            },
            # With `apiConfig: cloud` the chart reads the worker's key from its Secret `prefect-api-key` (key `key`,
            # `worker.cloudApiConfig`): the flow-run Jobs then refer to that Secret instead of carrying the key.
            "extraEnvVars": API_KEY_FROM_SECRET,
            "livenessProbe": {"enabled": True},
            "podSecurityContext": pod_security(),
            "containerSecurityContext": container_security(),
            "initContainer": {"containerSecurityContext": container_security()},
        },
        "serviceAccount": {"create": True, "name": NAME},
        "role": {"create": True},
        "rolebinding": {"create": True},
    }


class Dumper(yaml.SafeDumper):
    """Plain YAML for people: no anchors for repeated objects, multi-line strings as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


def render_worker_manifests() -> dict[str, str]:
    """``{file name: text}`` of deployments/worker/.

    Returns:
        The files' texts by file name: ``worker.yaml`` and ``helm-values.yaml``.
    """
    header = "# Generated by `modelplane render-worker-manifests --write deployments/worker` (flows/worker_manifests.py): do not edit.\n"
    worker = (
        header
        + "# kubectl apply -f deployments/worker/worker.yaml (after deployments/rbac.yaml); edit PREFECT_API_URL.\n"
        + yaml.dump_all(worker_objects(), Dumper=Dumper, sort_keys=False)
    )
    values = (
        header
        + f"# helm install prefect-worker prefect/prefect-worker -n {NAMESPACE} -f deployments/worker/helm-values.yaml\n"
        + yaml.dump(helm_values(), Dumper=Dumper, sort_keys=False, width=120)
    )
    return {"worker.yaml": worker, "helm-values.yaml": values}
