"""The environment of a cache fill, as the kubelet gives it to the fill Job: plain values, and ``secretKeyRef``s
read from the cache's namespace. The warm-caches pass resolves it for fills that run in the command (the local
backend) and to check the credentials exist before a Job is started; a missing or malformed reference is the
cache's :data:`engine.caches.plan.CREDENTIALS_MISSING` failure, never its value and never the pass's stop."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from engine.api.secrets import secret_key_ref_error
from engine.caches.plan import CREDENTIALS_MISSING, Failure
from tasks.clients.cluster import Cluster, NotFound


def secret_value(cluster: Cluster, namespace: str, name: str, key: str) -> str:
    """One key of a Secret (``data`` base64, or ``stringData`` in a manifest not yet normalised).

    Args:
        cluster: The cluster to read.
        namespace: The Secret's namespace.
        name: The Secret's name.
        key: The key to read.

    Returns:
        The key's value, decoded.

    Raises:
        KeyError: The Secret has no such key.
        NotFound: There is no such Secret (raised by the cluster client).
    """
    secret = cluster.get("v1", "Secret", name, namespace)
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    data = secret.get("data") or {}
    if key not in data:
        raise KeyError(key)
    return base64.b64decode(data[key]).decode()


def resolve_env(
    cluster: Cluster, namespace: str, env: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, str], Failure | None]:
    """The env as values, ``secretKeyRef``s read from the namespace's Secrets (as the kubelet does for
    the Job). A missing Secret or key is a :data:`CREDENTIALS_MISSING` failure naming it (never its value).

    Args:
        cluster: The cluster the Secrets are read from.
        namespace: The cache's namespace, whose Secrets the env references.
        env: Kubernetes env entries (``value`` or ``valueFrom.secretKeyRef``).

    Returns:
        The env's values by name (optional references that are missing left out), and the failure of the first
        required reference that is missing, or None.
    """
    values: dict[str, str] = {}
    for item in env:
        name = item.get("name")
        if not name:
            continue
        if "value" in item:
            values[name] = str(item["value"])
            continue
        source = item.get("valueFrom") or {}
        ref = (source.get("secretKeyRef") or {}) if isinstance(source, Mapping) else source
        if not ref:
            continue
        problem = secret_key_ref_error(ref)  # the API models' check: the model keeps valueFrom as free-form JSON
        if problem:
            return values, Failure(CREDENTIALS_MISSING, f"env {name}: valueFrom.{problem}; fix the reference")
        try:
            values[name] = secret_value(cluster, namespace, ref["name"], ref["key"])
        except (NotFound, KeyError):
            if ref.get("optional"):
                continue
            return values, Failure(
                CREDENTIALS_MISSING,
                f"env {name}: Secret {namespace}/{ref['name']} has no key {ref['key']!r}; create it or fix the reference",
            )
    return values, None
