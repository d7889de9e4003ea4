"""Typed views of the Kubernetes built-in and upstream objects Modelplane reads but does not define.

Modelplane's own kinds are read as the pydantic models that generate their CRDs (:mod:`engine.api.validate`,
through the boundary reader ``tasks/boundary.py``). The other objects a flow reads -- a ``Scale``, a
Deployment's replicas and pod template, a PersistentVolumeClaim's size, a CustomResourceDefinition
document, a Kthena ModelRoute -- are read through the views here: each declares only the fields
Modelplane reads, ignores the rest, and treats an absent or ``null`` field as its default (what the
API server's defaulting means for these kinds). The views are read-only: writes go through the object
as the cluster returned it.

One place for them, beside the boundary reader, so no flow or task walks a manifest with
``obj.get("spec") or {}`` chains. An :class:`Observed` view also keeps the object as the cluster returned
it (:attr:`Observed.object`): the engine reads the view's fields and diffs or writes through the object,
so a view never has to declare what it does not read.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

__all__ = [
    "CustomResourceDefinition",
    "HTTPRoute",
    "InferenceService",
    "ModelRoute",
    "Node",
    "Observed",
    "PersistentVolumeClaim",
    "PodSpec",
    "Scalable",
    "Scale",
    "ScaleTarget",
    "Workload",
]


class View(BaseModel):
    """Base of every view: camelCase aliases, unknown fields ignored, ``null`` read as absent."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """``{"spec": null}`` reads as no ``spec``: the field's default, as ``obj.get("spec") or {}`` did."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


class MetaView(View):
    """The parts of ``metav1.ObjectMeta`` the views read."""

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, Any] = Field(default_factory=dict)
    resource_version: str | None = Field(None, alias="resourceVersion")


# ---------------------------------------------------------------------------------------------- Scale


class ScaleSpec(View):
    """``autoscaling/v1`` ScaleSpec."""

    replicas: int | None = None


class ScaleStatus(View):
    """``autoscaling/v1`` ScaleStatus: the observed replicas and the pods' label selector."""

    replicas: int | None = None
    selector: str | None = None


class Scale(View):
    """An ``autoscaling/v1`` Scale (the scale subresource of any scalable kind)."""

    metadata: MetaView = Field(default_factory=MetaView)
    spec: ScaleSpec = Field(default_factory=ScaleSpec)
    status: ScaleStatus = Field(default_factory=ScaleStatus)


# ------------------------------------------------------------------------------------------- Lease


class LeaseSpec(View):
    """``coordination.k8s.io/v1`` LeaseSpec: the leader-election record (client-go's LeaderElectionRecord)."""

    holder_identity: str | None = Field(None, alias="holderIdentity")
    lease_duration_seconds: int | None = Field(None, alias="leaseDurationSeconds")
    acquire_time: str | None = Field(None, alias="acquireTime")
    renew_time: str | None = Field(None, alias="renewTime")
    lease_transitions: int | None = Field(None, alias="leaseTransitions")


class Lease(View):
    """A ``coordination.k8s.io/v1`` Lease."""

    metadata: MetaView = Field(default_factory=MetaView)
    spec: LeaseSpec = Field(default_factory=LeaseSpec)

    @property
    def record(self) -> dict[str, Any]:
        """The spec as written (camelCase keys, absent fields left out), for comparing and rewriting it."""
        return self.spec.model_dump(by_alias=True, exclude_none=True)


# --------------------------------------------------------------------------------------- workloads


class ResourceList(View):
    """A container's resource requests and limits (resource name -> quantity)."""

    requests: dict[str, Any] = Field(default_factory=dict)
    limits: dict[str, Any] = Field(default_factory=dict)


class Container(View):
    """The parts of a container a workload's accelerator is read from."""

    resources: ResourceList = Field(default_factory=ResourceList)


class MatchExpression(View):
    """One node selector requirement (``key``, ``operator``, ``values``)."""

    key: str | None = None
    operator: str | None = None
    values: list[Any] = Field(default_factory=list)


class NodeSelectorTerm(View):
    """One term of a required node affinity."""

    match_expressions: list[MatchExpression] = Field(default_factory=list, alias="matchExpressions")


class NodeSelector(View):
    """A required node affinity: its terms."""

    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list, alias="nodeSelectorTerms")


class NodeAffinity(View):
    """A pod's node affinity (only the required part is read)."""

    required: NodeSelector = Field(default_factory=NodeSelector, alias="requiredDuringSchedulingIgnoredDuringExecution")


class Affinity(View):
    """A pod's affinity."""

    node_affinity: NodeAffinity = Field(default_factory=NodeAffinity, alias="nodeAffinity")


class PodSpec(View):
    """The parts of a pod spec that say which accelerator its pods run on."""

    node_selector: dict[str, Any] = Field(default_factory=dict, alias="nodeSelector")
    affinity: Affinity = Field(default_factory=Affinity)
    containers: list[Container] = Field(default_factory=list)


class PodTemplate(View):
    """A pod template."""

    spec: PodSpec = Field(default_factory=PodSpec)


class LeaderWorkerTemplate(View):
    """A LeaderWorkerSet's templates (only the workers' is read)."""

    worker_template: PodTemplate | None = Field(None, alias="workerTemplate")


class ScalableSpec(View):
    """The spec of a scalable workload (Deployment, StatefulSet, LeaderWorkerSet, Kthena ModelServing)."""

    replicas: int | None = None


class ScalableStatus(View):
    """The status of a scalable workload."""

    ready_replicas: int | None = Field(None, alias="readyReplicas")


class Scalable(View):
    """A scalable workload, as far as its replicas go (desired and ready)."""

    metadata: MetaView = Field(default_factory=MetaView)
    spec: ScalableSpec = Field(default_factory=ScalableSpec)
    status: ScalableStatus = Field(default_factory=ScalableStatus)


class ScalableAsWritten(View):
    """A scalable workload's replicas as written (``-1``, ``"two"`` included), for a reader that reports a value
    that is no replica count on the object that points at the workload instead of failing on the workload."""

    metadata: MetaView = Field(default_factory=MetaView)
    spec: Any = None
    status: Any = None

    @property
    def replicas(self) -> object:
        """``spec.replicas`` as written; 1 when absent (the API server's default); the spec itself when it is
        no mapping (then it is no count either)."""
        if not isinstance(self.spec, dict):
            return 1 if self.spec is None else self.spec
        value = self.spec.get("replicas")
        return 1 if value is None else value

    @property
    def ready_replicas(self) -> object:
        """``status.readyReplicas`` as written, or None."""
        return self.status.get("readyReplicas") if isinstance(self.status, dict) else None

    def selector(self) -> str | None:
        """The Scale's label selector as :meth:`ScaleTarget.selector` reads it, from the selectors as written; None
        when they are malformed (a workload whose replicas or status are no counts still has its pods found)."""
        parts = {
            "spec": {"selector": self.spec.get("selector")} if isinstance(self.spec, dict) else {},
            "status": {"selector": self.status.get("selector")} if isinstance(self.status, dict) else {},
        }
        try:
            return ScaleTarget.model_validate(parts).selector()
        except ValidationError:
            return None


class LabelSelector(View):
    """A ``metav1.LabelSelector``'s ``matchLabels`` (the part a Scale's selector string is made of)."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")


class ScaleTargetSpec(ScaleSpec):
    """What a scalable object's spec says of its Scale: the desired replicas and the pods' selector (a
    LabelSelector, or a string on kinds that keep it as one)."""

    selector: LabelSelector | str | None = None


class ScaleTarget(Scale):
    """Any object with a scale subresource, read as the API server reads it to answer ``GET .../scale``: its
    status is the Scale's status, its spec adds the selector the Scale's is made of."""

    spec: ScaleTargetSpec = Field(default_factory=ScaleTargetSpec)

    def selector(self) -> str | None:
        """The Scale's label selector: the status's string, else one made of the spec's ``matchLabels``."""
        if self.status.selector is not None:
            return self.status.selector
        labels = self.spec.selector.match_labels if isinstance(self.spec.selector, LabelSelector) else {}
        return ",".join(f"{k}={v}" for k, v in labels.items()) or None


class WorkloadSpec(ScalableSpec):
    """A scalable workload's spec with the pod template its pods are made from."""

    template: PodTemplate | None = None
    leader_worker_template: LeaderWorkerTemplate | None = Field(None, alias="leaderWorkerTemplate")


class Workload(Scalable):
    """A scalable workload: its replicas and the pod template its pods are made from."""

    spec: WorkloadSpec = Field(default_factory=WorkloadSpec)

    def pod_spec(self) -> PodSpec:
        """The pod spec of its pods (``spec.template``, a LeaderWorkerSet's worker template)."""
        lws = self.spec.leader_worker_template
        template = self.spec.template or (lws.worker_template if lws else None)
        return template.spec if template else PodSpec()


# --------------------------------------------------------------------------------- volumes and CRDs


class ClaimResources(View):
    """A PersistentVolumeClaim's requested resources."""

    requests: dict[str, Any] = Field(default_factory=dict)


class ClaimSpec(View):
    """A PersistentVolumeClaim's spec (only its request is read)."""

    resources: ClaimResources = Field(default_factory=ClaimResources)


class ClaimStatus(View):
    """A PersistentVolumeClaim's status: phase and bound capacity."""

    phase: str | None = None
    capacity: dict[str, Any] = Field(default_factory=dict)


class PersistentVolumeClaim(View):
    """A ``v1`` PersistentVolumeClaim."""

    metadata: MetaView = Field(default_factory=MetaView)
    spec: ClaimSpec = Field(default_factory=ClaimSpec)
    status: ClaimStatus = Field(default_factory=ClaimStatus)

    def capacity(self) -> str | None:
        """What the claim holds: its bound capacity, else its request."""
        return self.status.capacity.get("storage") or self.spec.resources.requests.get("storage")


class ConditionView(View):
    """A status condition as a controller reports it (any field may be absent): a Job's (``Complete``,
    ``Failed``, ``SuccessCriteriaMet``, ``FailureTarget``), an InferenceService's, an HTTPRoute parent's."""

    type: str | None = None
    status: str | None = None
    reason: str | None = None
    message: str | None = None


class JobStatus(View):
    """A Job's status, as far as how it ended goes."""

    conditions: list[ConditionView] = Field(default_factory=list)


class Job(View):
    """A ``batch/v1`` Job (a cache's fill): its name and how the job controller says it ended."""

    metadata: MetaView = Field(default_factory=MetaView)
    status: JobStatus = Field(default_factory=JobStatus)


class PodMeta(MetaView):
    """A Pod's metadata: the views' fields and when it was created (as written, for ordering)."""

    creation_timestamp: str | None = Field(None, alias="creationTimestamp")


class TerminatedState(View):
    """How a container ended: its termination message (a fill's report)."""

    message: str | None = None


class ContainerState(View):
    """A container's state (only a terminated one is read)."""

    terminated: TerminatedState | None = None


class ContainerStatus(View):
    """One container's status in a Pod."""

    state: ContainerState = Field(default_factory=ContainerState)


class PodStatus(View):
    """A Pod's phase and its containers' states."""

    phase: str | None = None
    container_statuses: list[ContainerStatus] = Field(default_factory=list, alias="containerStatuses")


class Pod(View):
    """A ``v1`` Pod, as far as a fill Job's pod reports: labels (``job-name``), phase, termination messages."""

    metadata: PodMeta = Field(default_factory=PodMeta)
    status: PodStatus = Field(default_factory=PodStatus)


class CrdNames(View):
    """A CustomResourceDefinition's names."""

    kind: str
    plural: str


class CrdValidation(View):
    """A served version's schema."""

    open_api_v3_schema: dict[str, Any] | None = Field(None, alias="openAPIV3Schema")


class CrdVersion(View):
    """One version of a CustomResourceDefinition."""

    name: str
    served: bool = True
    subresources: dict[str, Any] = Field(default_factory=dict)
    schema_: CrdValidation = Field(default_factory=CrdValidation, alias="schema")


class CrdSpec(View):
    """A CustomResourceDefinition's spec."""

    group: str
    names: CrdNames
    scope: str = "Namespaced"
    versions: list[CrdVersion] = Field(default_factory=list)


class CustomResourceDefinition(View):
    """An ``apiextensions.k8s.io/v1`` CustomResourceDefinition document."""

    spec: CrdSpec


# ------------------------------------------------------------------------------------------ Kthena


class ModelRouteSpec(View):
    """A Kthena ModelRoute's spec: the model its router serves."""

    model_name: str | None = Field(None, alias="modelName")


class ModelRoute(View):
    """A Kthena ``networking.serving.volcano.sh`` ModelRoute (Kthena's CRD, not generated here)."""

    metadata: MetaView = Field(default_factory=MetaView)
    spec: ModelRouteSpec = Field(default_factory=ModelRouteSpec)


# ------------------------------------------------------------------------------ nodes and AIM children


class Node(View):
    """A ``v1`` Node, as far as its labels go (which GPUs it carries)."""

    metadata: MetaView = Field(default_factory=MetaView)


class OwnerReference(View):
    """One ``metav1.OwnerReference``."""

    api_version: str | None = Field(None, alias="apiVersion")
    kind: str | None = None
    name: str | None = None
    uid: str | None = None
    controller: bool | None = None


class OwnedMeta(MetaView):
    """Object metadata with the uid and owner references (who controls the object)."""

    uid: str | None = None
    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")

    def controller_uid(self) -> str | None:
        """The uid of the object's controller (its ``ownerReferences`` entry with ``controller: true``)."""
        for ref in self.owner_references:
            if ref.controller:
                return ref.uid
        return None


class Observed(View):
    """A view of an object another controller owns the status of, keeping the object as read: the
    engine reads the fields and diffs and writes through :attr:`object`."""

    metadata: OwnedMeta = Field(default_factory=OwnedMeta)
    _object: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def read(cls, obj: dict[str, Any]) -> Self:
        """The view of ``obj``, keeping ``obj`` itself."""
        view = cls.model_validate(obj)
        view._object = obj
        return view

    @property
    def object(self) -> dict[str, Any]:
        """The object as the cluster returned it (empty for a view built without one)."""
        return self._object


class FailureInfo(View):
    """KServe's ``modelStatus.lastFailureInfo``."""

    reason: str | None = None
    message: str | None = None


class ModelStatus(View):
    """KServe's ``status.modelStatus`` (only the last failure is read)."""

    last_failure_info: FailureInfo = Field(default_factory=FailureInfo, alias="lastFailureInfo")


class InferenceServiceStatus(View):
    """A KServe InferenceService's status: its conditions and the model's last failure."""

    conditions: list[ConditionView] = Field(default_factory=list)
    model_status: ModelStatus = Field(default_factory=ModelStatus, alias="modelStatus")


class InferenceService(Observed):
    """A KServe ``serving.kserve.io/v1beta1`` InferenceService (KServe's CRD, not generated here)."""

    status: InferenceServiceStatus = Field(default_factory=InferenceServiceStatus)


class RouteParentStatus(View):
    """What one Gateway reports on an HTTPRoute."""

    conditions: list[ConditionView] = Field(default_factory=list)


class HTTPRouteStatus(View):
    """A Gateway API HTTPRoute's status: one entry per parent Gateway."""

    parents: list[RouteParentStatus] = Field(default_factory=list)


class HTTPRoute(Observed):
    """A Gateway API ``gateway.networking.k8s.io/v1`` HTTPRoute."""

    status: HTTPRouteStatus = Field(default_factory=HTTPRouteStatus)
