"""Constrained parameter types shared by every flow's signature: the ONLY place a flow's parameter rules live.

Prefect builds a deployment's parameter schema from the flow's signature (pydantic), so a constraint
written here ends up in the JSON schema the server stores: with ``enforce_parameter_schema: true`` the
UI form and ``prefect deployment run -p`` reject a bad value before a run is created, and a local call
(``modelplane ...``) fails the same check before the flow body runs. Use these in flow signatures
instead of bare ``str``/``float`` so every lifecycle shows the same rules.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

PROMETHEUS_DURATION_PATTERN = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
"""A PromQL range duration (``30s``, ``1m``, ``1h30m``), as Prometheus parses it."""

KUBE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""An RFC 1123 label: a Namespace name (and the names of most namespaced objects)."""

PromDuration = Annotated[str, Field(pattern=PROMETHEUS_DURATION_PATTERN, examples=["1m", "30s"])]
"""A PromQL range such as ``1m``."""

PositiveSeconds = Annotated[float, Field(gt=0)]
"""A duration in seconds that must be above zero (time limits)."""

NonNegativeSeconds = Annotated[float, Field(ge=0)]
"""A duration in seconds, zero allowed (zero disables the behaviour it configures)."""

NamespaceName = Annotated[str, Field(pattern=KUBE_NAME_PATTERN, min_length=1, max_length=63)]
"""A Kubernetes Namespace name."""

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
"""The name of a Kubernetes object (RFC 1123 subdomain)."""

ImageRef = Annotated[str, Field(min_length=1)]
"""A container image reference (not empty)."""

NonEmpty = Annotated[str, Field(min_length=1)]
"""A string that must not be empty (a file path, a directory)."""

ClusterTarget = str | None
"""The ``cluster`` parameter every flow takes (``tasks.cluster.connect``): absent or empty =
``$MODELPLANE_CLUSTER``, else kubeconfig or in-cluster; ``kubeconfig:PATH[#CONTEXT]``; or a manifests
directory/file. An empty value is never the working directory."""

CLUSTER_HELP = (
    "Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; "
    "or a manifests directory/file."
)
"""The ``cluster`` parameter's description (flow docstrings and CLI help say the same)."""
