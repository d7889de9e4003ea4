"""Resource types the server serves: built-in kinds and types derived from CustomResourceDefinitions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ScaleSpec:
    """Where a kind keeps its replica counts (the ``scale`` subresource)."""

    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = None  # None: derive from .spec.selector (built-in workloads)


@dataclass(frozen=True)
class ResourceType:
    """One served resource (group, version, plural) and the semantics the store applies to it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    has_status: bool = False
    scale: ScaleSpec | None = None
    generation: bool = False
    custom: bool = False
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    categories: tuple[str, ...] = ()
    field_labels: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str]:
        """Storage key shared by all versions of a resource."""
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        """``group/version`` (or just ``version`` for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> tuple[str, str]:
        """(group, version)."""
        return (self.group, self.version)

    @property
    def singular(self) -> str:
        """Lower-case kind."""
        return self.kind.lower()

    @property
    def qualified(self) -> str:
        """``plural.group`` as used in Conflict messages (``plural`` alone for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def kind_group(self) -> str:
        """``Kind.group`` as used in Invalid messages (``Kind`` alone for the core group)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def discovery(self) -> list[dict[str, Any]]:
        """APIResource entries for this type and its subresources."""
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        out = [main]
        if self.has_status:
            out.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if self.scale is not None:
            out.append(
                {
                    "name": f"{self.plural}/scale",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        return out


_WORKLOAD_SCALE = ScaleSpec()

BUILTINS: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        namespaced=False,
        short_names=("ns",),
        has_status=True,
        field_labels=frozenset({"status.phase"}),
    ),
    ResourceType("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    ResourceType("", "v1", "secrets", "Secret", field_labels=frozenset({"type"})),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",)),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short_names=("pvc",), has_status=True),
    ResourceType("", "v1", "services", "Service", short_names=("svc",), has_status=True),
    ResourceType("", "v1", "endpoints", "Endpoints", short_names=("ep",)),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        short_names=("ev",),
        field_labels=frozenset(
            {
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            }
        ),
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        short_names=("po",),
        has_status=True,
        field_labels=frozenset(
            {
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            }
        ),
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        namespaced=False,
        short_names=("no",),
        has_status=True,
        field_labels=frozenset({"spec.unschedulable"}),
    ),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        short_names=("deploy",),
        has_status=True,
        scale=_WORKLOAD_SCALE,
        generation=True,
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        short_names=("sts",),
        has_status=True,
        scale=_WORKLOAD_SCALE,
        generation=True,
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        short_names=("rs",),
        has_status=True,
        scale=_WORKLOAD_SCALE,
        generation=True,
        categories=("all",),
    ),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "Job",
        has_status=True,
        generation=True,
        categories=("all",),
        field_labels=frozenset({"status.successful"}),
    ),
    ResourceType("batch", "v1", "cronjobs", "CronJob", short_names=("cj",), has_status=True, generation=True),
    ResourceType(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        short_names=("hpa",),
        has_status=True,
        generation=True,
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
    # RBAC objects are stored and served (an install applies them); nothing is authorized by them.
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        short_names=("ev",),
        field_labels=frozenset(
            {
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "reason",
                "type",
                "reportingController",
            }
        ),
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        short_names=("crd", "crds"),
        has_status=True,
        generation=True,
    ),
)

CRD_TYPE: ResourceType = BUILTINS[-1]
NAMESPACE_TYPE: ResourceType = BUILTINS[0]


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The ResourceTypes a CustomResourceDefinition serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for ver in spec.get("versions") or ():
        if not ver.get("served", True):
            continue
        sub = ver.get("subresources") or spec.get("subresources") or {}
        scale = None
        if "scale" in sub and isinstance(sub["scale"], dict):
            s = sub["scale"]
            scale = ScaleSpec(
                s.get("specReplicasPath", ".spec.replicas"),
                s.get("statusReplicasPath", ".status.replicas"),
                s.get("labelSelectorPath"),
            )
        schema = (ver.get("schema") or spec.get("validation") or {}).get("openAPIV3Schema")
        fields = frozenset(f["jsonPath"].lstrip(".") for f in (ver.get("selectableFields") or ()) if f.get("jsonPath"))
        out.append(
            ResourceType(
                group=spec.get("group", ""),
                version=ver["name"],
                plural=names.get("plural", ""),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                has_status="status" in sub,
                scale=scale,
                generation=True,
                custom=True,
                schema=schema,
                categories=tuple(names.get("categories") or ()),
                field_labels=fields,
            )
        )
    return out
