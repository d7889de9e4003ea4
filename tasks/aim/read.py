"""Everything one AIM flow run reads, one LIST per kind across all namespaces, typed: the custom resources
through the boundary reader into their API models (with their status), Nodes, InferenceServices and HTTPRoutes
into the views of ``engine.api.views``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from engine.aim.discovery import (
    API_VERSION,
)
from engine.api.aim import AIMClusterModel, AIMNamespaceConfig, AIMService, AIMServiceTemplate, ModelCache
from engine.api.meta import KubeModel
from engine.api.registry import AIM_CLUSTER_MODEL, AIM_NAMESPACE_CONFIG, AIM_SERVICE, AIM_SERVICE_TEMPLATE, MODEL_CACHE
from engine.api.views import HTTPRoute, InferenceService, Node
from tasks.boundary import Accepted, accept, accept_as
from tasks.clients.cluster import Cluster, Manifest
from tasks.clients.cluster.errors import NotFound
from tasks.tracking import task

log = logging.getLogger("modelplane.aim")


NODE_API = "v1"
KSERVE_API = "serving.kserve.io/v1beta1"
GATEWAY_API = "gateway.networking.k8s.io/v1"


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


def list_kind(
    cluster: Cluster, api_version: str, kind: str, *, optional: bool = False, label_selector: str | None = None
) -> list[Manifest]:
    """One LIST of a kind across all namespaces through the boundary reader (invalid custom resources
    are marked and left out); a kind the cluster does not serve is empty when ``optional``.

    Args:
        cluster: The cluster to LIST.
        api_version: The kind's ``apiVersion``, e.g. ``aim.silogen.ai/v1alpha1``.
        kind: The kind's name.
        optional: Whether a kind the cluster does not serve (a missing CRD) reads as empty instead of failing.
        label_selector: A Kubernetes label selector the LIST filters by, or None for every object.

    Returns:
        The objects the boundary reader accepted, as manifests.

    Raises:
        NotFound: The cluster does not serve the kind and ``optional`` is False (re-raised from the LIST).
    """
    try:
        return accept(cluster, cluster.list(api_version, kind, label_selector=label_selector))
    except NotFound:
        if not optional:
            raise
        log.info("%s/%s is not served by this cluster", api_version, kind)
        return []


M = TypeVar("M", bound=KubeModel)


AimKind = Literal["models", "configs", "templates", "services", "caches", "nodes", "isvcs", "routes"]
"""What :func:`read_aim_state` can read: the fields of :class:`AimState`."""


@dataclass
class AimState:
    """Everything one AIM flow run reads, one LIST per kind, typed: our custom resources as
    :class:`tasks.boundary.Accepted` (the API model with its status, which the engine decides from, and
    the object as read, which writes go through); Nodes, InferenceServices and HTTPRoutes as views."""

    models: list[Accepted[AIMClusterModel]] = field(default_factory=list)
    configs: list[Accepted[AIMNamespaceConfig]] = field(default_factory=list)
    templates: list[Accepted[AIMServiceTemplate]] = field(default_factory=list)
    services: list[Accepted[AIMService]] = field(default_factory=list)
    caches: list[Accepted[ModelCache]] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    isvcs: list[InferenceService] = field(default_factory=list)
    routes: list[HTTPRoute] = field(default_factory=list)


def typed(items: Iterable[Accepted[M]]) -> list[M]:
    """The API models of accepted objects, in order.

    Args:
        items: Objects the boundary reader accepted.

    Returns:
        Their typed API models, in the same order.
    """
    return [item.model for item in items]


def _accepted(cluster: Cluster, kind: str, model: type[M], label_selector: str | None = None) -> list[Accepted[M]]:
    """One LIST of an AIM kind through the boundary reader, each object with its API model."""
    return accept_as(cluster, cluster.list(API_VERSION, kind, label_selector=label_selector), model)


@task(name="read-aim-state", retries=2, retry_delay_seconds=2)
def read_aim_state(cluster: Cluster, kinds: Sequence[AimKind], model_selector: str | None = None) -> AimState:
    """LIST the kinds a flow needs (``models``, ``configs``, ``templates``, ``services``, ``caches``,
    ``nodes``, ``isvcs``, ``routes``), each once across all namespaces; ``model_selector`` is a label
    selector on the AIMClusterModels. Custom resources that do not parse are marked invalid by the
    boundary reader and left out.

    Args:
        cluster: The cluster to read.
        kinds: Which parts of :class:`AimState` to read; the others stay empty.
        model_selector: A label selector the AIMClusterModels are listed with, or None for all of them.

    Returns:
        The typed objects of every requested kind (Nodes, InferenceServices and HTTPRoutes are empty when the cluster
        does not serve them).
    """
    sources: dict[AimKind, Callable[[], list[Any]]] = {
        "models": lambda: _accepted(cluster, AIM_CLUSTER_MODEL, AIMClusterModel, model_selector),
        "configs": lambda: _accepted(cluster, AIM_NAMESPACE_CONFIG, AIMNamespaceConfig),
        "templates": lambda: _accepted(cluster, AIM_SERVICE_TEMPLATE, AIMServiceTemplate),
        "services": lambda: _accepted(cluster, AIM_SERVICE, AIMService),
        "caches": lambda: _accepted(cluster, MODEL_CACHE, ModelCache),
        "nodes": lambda: [Node.model_validate(n) for n in list_kind(cluster, NODE_API, "Node", optional=True)],
        "isvcs": lambda: [
            InferenceService.read(o) for o in list_kind(cluster, KSERVE_API, "InferenceService", optional=True)
        ],
        "routes": lambda: [HTTPRoute.read(o) for o in list_kind(cluster, GATEWAY_API, "HTTPRoute", optional=True)],
    }
    return dataclasses.replace(AimState(), **{kind: sources[kind]() for kind in kinds})
