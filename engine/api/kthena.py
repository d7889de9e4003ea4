"""``registry.volcano.sh/v1alpha1`` Model, AutoscalingPolicy and AutoscalingPolicyBinding (seed 003).

The seed lists validation rules but no ``Required`` marks; the fields without which an object is
meaningless are required here (a backend's name, type and workers; a metric's name and target; a
binding's policy and target). A binding has exactly one of ``scalingConfiguration`` (homogeneous) and
``optimizerConfiguration`` (heterogeneous), as Kthena's webhook enforces.

``AutoscalingPolicyBindingStatus`` is empty in the seed. Modelplane's optimize flow is a fresh
process on every run, so the state of the scaling windows lives there: the recommendation history
for stabilization, the panic-mode end, the time replicas reached zero and the last scale time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

from pydantic import Field, field_validator, model_validator

from engine.api.meta import (
    Affinity,
    Conditions,
    Duration,
    EnvFromSource,
    EnvVar,
    JSONObject,
    KubeModel,
    LocalObjectReference,
    ObjectReference,
    Quantity,
    ResourceRequirements,
    ResourceWithStatus,
    Time,
)
from engine.api.registry import KTHENA_API, KthenaApiVersion

API_VERSION: Final[KthenaApiVersion] = KTHENA_API
"""The apiVersion of this module's kinds (spelled in :mod:`engine.api.registry`)."""

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MODEL_URI_PATTERN = r"^(hf://|s3://|pvc://).+"
CACHE_URI_PATTERN = r"^(hostpath://|pvc://).+"
MAX_REPLICAS = 1_000_000

ModelBackendType = Literal["vLLM", "vLLMDisaggregated", "SGLang", "MindIE", "MindIEDisaggregated"]
ModelWorkerType = Literal["server", "prefill", "decode", "controller", "coordinator"]
SelectPolicyType = Literal["Or", "And"]


# --------------------------------------------------------------------------------------------------
# AutoscalingPolicy
# --------------------------------------------------------------------------------------------------


class AutoscalingPolicyMetric(KubeModel):
    """AutoscalingPolicyMetric defines a metric and its target value for scaling."""

    metric_name: str = Field(alias="metricName", min_length=1)
    """MetricName is the name of the metric to monitor, e.g. vllm:num_requests_waiting."""
    target_value: Quantity = Field(alias="targetValue")
    """TargetValue is the per-instance target value of the metric."""


class AutoscalingPolicyStablePolicy(KubeModel):
    """AutoscalingPolicyStablePolicy defines the policy for stable scaling up or scaling down."""

    instances: int | None = Field(1, ge=0)
    """Instances is the maximum number of instances to scale per period."""
    percent: int | None = Field(100, ge=0, le=1000)
    """Percent is the maximum percentage of instances to scale per period."""
    period: Duration | None = "15s"
    """Period is the duration over which scaling is evaluated."""
    select_policy: SelectPolicyType | None = Field("Or", alias="selectPolicy")
    """Or: scale when either the Percent or the Instances limit allows; And: only when both allow."""
    stabilization_window: Duration | None = Field(None, alias="stabilizationWindow")
    """StabilizationWindow is the time window to stabilize scaling actions."""


class AutoscalingPolicyPanicPolicy(KubeModel):
    """AutoscalingPolicyPanicPolicy defines the policy for panic scaling up."""

    percent: int | None = Field(1000, ge=0, le=1000)
    """Percent is the maximum percentage of instances to scale up."""
    period: Duration | None = None
    """Period is the duration over which panic scaling is evaluated."""
    panic_threshold_percent: int | None = Field(200, alias="panicThresholdPercent", ge=110, le=1000)
    """PanicThresholdPercent is the threshold percent to enter panic mode."""
    panic_mode_hold: Duration | None = Field("60s", alias="panicModeHold")
    """PanicModeHold is the duration to hold in panic mode before returning to normal."""


class AutoscalingPolicyScaleUpPolicy(KubeModel):
    """Scale-up behaviour: a stable policy and a panic policy for sudden surges."""

    stable_policy: AutoscalingPolicyStablePolicy | None = Field(None, alias="stablePolicy")
    """Decisions based on metric averages over a window, smoothing short fluctuations."""
    panic_policy: AutoscalingPolicyPanicPolicy | None = Field(None, alias="panicPolicy")
    """Fast scale-up when the load surges within a short period."""


class AutoscalingPolicyBehavior(KubeModel):
    """AutoscalingPolicyBehavior defines the scaling behaviors for up and down actions."""

    scale_up: AutoscalingPolicyScaleUpPolicy | None = Field(None, alias="scaleUp")
    """ScaleUp defines the policy for scaling up (increasing replicas)."""
    scale_down: AutoscalingPolicyStablePolicy | None = Field(None, alias="scaleDown")
    """ScaleDown defines the policy for scaling down (decreasing replicas)."""


class AutoscalingPolicySpec(KubeModel):
    """AutoscalingPolicySpec defines the desired state of AutoscalingPolicy."""

    tolerance_percent: int | None = Field(10, alias="tolerancePercent", ge=0, le=100)
    """Deviation tolerated before scaling: act only when |current - target| >= current * TolerancePercent/100."""
    metrics: list[AutoscalingPolicyMetric] = Field(min_length=1)
    """Metrics is the list of metrics used to evaluate scaling decisions."""
    behavior: AutoscalingPolicyBehavior | None = None
    """Behavior defines the scaling behavior for both scale up and scale down."""


class AutoscalingPolicyStatus(KubeModel):
    """AutoscalingPolicyStatus defines the observed state of AutoscalingPolicy (empty in the seed)."""


class AutoscalingPolicy(ResourceWithStatus[AutoscalingPolicySpec, AutoscalingPolicyStatus]):
    """AutoscalingPolicy is the Schema for the autoscalingpolicies API."""

    api_version: KthenaApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["AutoscalingPolicy"] = "AutoscalingPolicy"


# --------------------------------------------------------------------------------------------------
# AutoscalingPolicyBinding
# --------------------------------------------------------------------------------------------------


class MetricEndpoint(KubeModel):
    """Where the target's pods expose their metrics."""

    uri: str | None = "/metrics"
    """The metric uri, e.g. /metrics."""
    port: int | None = 8100
    """The port of pods exposing metric endpoints."""


class Target(KubeModel):
    """The objects to be monitored and scaled."""

    target_ref: ObjectReference = Field(alias="targetRef")
    """TargetRef references the target object."""
    additional_match_labels: dict[str, str] | None = Field(None, alias="additionalMatchLabels")
    """Additional labels to match the target's pods."""
    metric_endpoint: MetricEndpoint | None = Field(None, alias="metricEndpoint")
    """MetricEndpoint is the metric source."""


class _ReplicaBounds(KubeModel):
    """A scaling target's ``minReplicas``/``maxReplicas`` (declared by each kind that has them) must not cross:
    the autoscaler would otherwise clamp to both at once (Kthena's clamp takes the maximum, so a binding with
    minReplicas 8 and maxReplicas 2 scaled its target to 2 in one step)."""

    if TYPE_CHECKING:  # each subclass declares the two fields, with its own schema and place among its fields
        min_replicas: int | None
        max_replicas: int | None

    @model_validator(mode="after")
    def _bounds_do_not_cross(self) -> _ReplicaBounds:
        low, high = (
            0 if self.min_replicas is None else self.min_replicas,
            1 if self.max_replicas is None else self.max_replicas,
        )
        if low > high:
            limit = (
                f"maxReplicas {high}" if self.max_replicas is not None else f"maxReplicas, which is {high} when not set"
            )
            raise ValueError(f"minReplicas {low} is above {limit}")
        return self


class ScalingConfiguration(_ReplicaBounds):
    """Homogeneous scaling: one target sized from the policy's metrics."""

    target: Target
    """Target represents the objects be monitored and scaled."""
    min_replicas: int | None = Field(None, alias="minReplicas", ge=0, le=MAX_REPLICAS)
    """MinReplicas is the minimum number of replicas."""
    max_replicas: int | None = Field(None, alias="maxReplicas", ge=1, le=MAX_REPLICAS)
    """MaxReplicas is the maximum number of replicas."""


class OptimizerParam(_ReplicaBounds):
    """One group of a heterogeneous optimisation: its target, cost and replica bounds."""

    target: Target
    """The scaling instance configuration."""
    cost: int | None = Field(None, ge=0)
    """Cost is the cost associated with running this backend."""
    min_replicas: int | None = Field(None, alias="minReplicas", ge=0, le=MAX_REPLICAS)
    """MinReplicas is the minimum number of replicas for the backend."""
    max_replicas: int | None = Field(None, alias="maxReplicas", ge=1, le=MAX_REPLICAS)
    """MaxReplicas is the maximum number of replicas for the backend."""


class OptimizerConfiguration(KubeModel):
    """Heterogeneous scaling: replicas distributed over groups by cost."""

    params: list[OptimizerParam] = Field(min_length=1)
    """Parameters of multiple Model Infer Groups to be optimized."""
    cost_expansion_rate_percent: int | None = Field(200, alias="costExpansionRatePercent", ge=0)
    """CostExpansionRatePercent is the percentage rate at which the cost expands."""

    @field_validator("params")
    @classmethod
    def _each_target_once(cls, params: list[OptimizerParam]) -> list[OptimizerParam]:
        """A workload named by two params would be counted twice and given two conflicting replica counts."""
        seen: dict[tuple[str | None, str | None, str | None, str | None], int] = {}
        for index, param in enumerate(params):
            ref = param.target.target_ref
            key = (ref.api_version, ref.kind, ref.namespace, ref.name)
            if key in seen:
                raise ValueError(
                    f"params[{index}].target names the same {ref.kind or 'target'} {ref.name!r} as "
                    f"params[{seen[key]}].target: each group must be a different workload"
                )
            seen[key] = index
        return params


class AutoscalingPolicyBindingSpec(KubeModel):
    """AutoscalingPolicyBindingSpec defines the desired state of AutoscalingPolicyBinding."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "oneOf": [{"required": ["scalingConfiguration"]}, {"required": ["optimizerConfiguration"]}]
        }
    }

    policy_ref: LocalObjectReference = Field(alias="policyRef")
    """PolicyRef references the autoscaling policy."""
    optimizer_configuration: OptimizerConfiguration | None = Field(None, alias="optimizerConfiguration")
    """Dynamically distributes replicas across heterogeneous groups (e.g. H100/A100) by cost."""
    scaling_configuration: ScalingConfiguration | None = Field(None, alias="scalingConfiguration")
    """Adjusts the number of instances of one target from the metrics and their target values."""

    @model_validator(mode="after")
    def _exactly_one_configuration(self) -> AutoscalingPolicyBindingSpec:
        if (self.optimizer_configuration is None) == (self.scaling_configuration is None):
            raise ValueError("exactly one of scalingConfiguration and optimizerConfiguration must be set")
        return self


class RecommendationRecord(KubeModel):
    """One past decision, kept for the stabilization window."""

    time: Time
    """When the recommendation was made."""
    recommended: int = Field(ge=0)
    """Replicas recommended from the metrics."""
    corrected: int = Field(ge=0)
    """Replicas after the behaviour correction."""


class TargetActuation(KubeModel):
    """The actuation of one binding target (the shape of WVA's ActuationStatus; modes in docs/metrics.md)."""

    applied: bool | None = None
    """Applied: the target was scaled (scale mode), its desired replicas published (metrics mode), or both."""


class TargetReplicas(KubeModel):
    """Replicas assigned to one target of a heterogeneous binding."""

    name: str = Field(min_length=1)
    """Name of the target object."""
    namespace: str | None = None
    """Namespace of the target object."""
    replicas: int = Field(ge=0)
    """Replicas assigned to it."""
    actuation: TargetActuation | None = None
    """Whether this target's actuation was applied, as a VariantAutoscaling's ``status.actuation`` says it."""


class AutoscalingPolicyBindingStatus(KubeModel):
    """Modelplane's scaling state for the binding, persisted between optimize runs."""

    observed_generation: int | None = Field(None, alias="observedGeneration")
    """The binding generation the state was computed for."""
    conditions: Conditions | None = None
    """Latest observations of the binding's state."""
    last_scale_time: Time | None = Field(None, alias="lastScaleTime")
    """When the target was last scaled."""
    current_replicas: int | None = Field(None, alias="currentReplicas", ge=0)
    """Replicas observed at the last run (sum over targets when heterogeneous)."""
    desired_replicas: int | None = Field(None, alias="desiredReplicas", ge=0)
    """Replicas decided at the last run (sum over targets when heterogeneous)."""
    history: list[RecommendationRecord] | None = None
    """Recent recommendations, oldest first, for the stabilization windows."""
    panic_mode_end: Time | None = Field(None, alias="panicModeEnd")
    """Panic mode holds until this time."""
    zero_since: Time | None = Field(None, alias="zeroSince")
    """Since when the recommendation has been zero replicas (scale-to-zero grace period)."""
    targets: list[TargetReplicas] | None = None
    """Per-target replicas of a heterogeneous binding."""


class AutoscalingPolicyBinding(ResourceWithStatus[AutoscalingPolicyBindingSpec, AutoscalingPolicyBindingStatus]):
    """AutoscalingPolicyBinding binds a policy to the targets it scales."""

    api_version: KthenaApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["AutoscalingPolicyBinding"] = "AutoscalingPolicyBinding"


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------


class LoraAdapter(KubeModel):
    """LoraAdapter defines a LoRA (Low-Rank Adaptation) adapter configuration."""

    name: str = Field(pattern=DNS_LABEL_PATTERN)
    """Name is the name of the LoRA adapter."""
    artifact_url: str = Field(alias="artifactURL", pattern=MODEL_URI_PATTERN)
    """ArtifactURL is the URL where the LoRA adapter artifact is stored."""


class ModelWorker(KubeModel):
    """ModelWorker defines the model worker configuration."""

    type: ModelWorkerType | None = "server"
    """Type is the type of the model worker."""
    image: str | None = None
    """Image is the container image for the worker."""
    replicas: int | None = Field(None, ge=0, le=MAX_REPLICAS)
    """Replicas is the number of replicas for the worker."""
    pods: int | None = Field(None, ge=0, le=MAX_REPLICAS)
    """Pods is the number of pods for the worker."""
    resources: ResourceRequirements | None = None
    """Resources specifies the resource requirements for the worker."""
    affinity: Affinity | None = None
    """Affinity specifies the affinity rules for scheduling the worker pods."""
    config: JSONObject | None = None
    """Worker-specific configuration (e.g. vLLM engine arguments)."""


class ModelBackend(KubeModel):
    """ModelBackend defines the configuration for a model backend."""

    name: str = Field(pattern=DNS_LABEL_PATTERN)
    """Name of the backend, unique within the Model."""
    type: ModelBackendType
    """Type is the type of the backend."""
    model_uri: str | None = Field(None, alias="modelURI", pattern=MODEL_URI_PATTERN)
    """Where the model is downloaded from: hf://, s3://, pvc://."""
    cache_uri: str | None = Field(None, alias="cacheURI", pattern=CACHE_URI_PATTERN)
    """Where the downloaded model is stored: hostpath://, pvc://."""
    env_from: list[EnvFromSource] | None = Field(None, alias="envFrom")
    """Sources of environment variables for the container."""
    env: list[EnvVar] | None = None
    """Environment variables (ENDPOINT, RUNTIME_URL, RUNTIME_PORT, RUNTIME_METRICS_PATH, HF_ENDPOINT)."""
    min_replicas: int | None = Field(None, alias="minReplicas", ge=0, le=MAX_REPLICAS)
    """MinReplicas is the minimum number of replicas for the backend."""
    max_replicas: int | None = Field(None, alias="maxReplicas", ge=1, le=MAX_REPLICAS)
    """MaxReplicas is the maximum number of replicas for the backend."""
    scaling_cost: int | None = Field(None, alias="scalingCost", ge=0)
    """ScalingCost is the cost associated with running this backend."""
    route_weight: int | None = Field(100, alias="routeWeight", ge=0, le=100)
    """Percentage of traffic sent to this backend."""
    scale_to_zero_grace_period: Duration | None = Field(None, alias="scaleToZeroGracePeriod")
    """How long to wait before scaling to zero."""
    workers: list[ModelWorker] = Field(min_length=1, max_length=1000)
    """Workers is the list of workers associated with this backend."""
    lora_adapters: list[LoraAdapter] | None = Field(None, alias="loraAdapters")
    """LoRA adapters served by this backend."""
    autoscaling_policy: AutoscalingPolicySpec | None = Field(None, alias="autoscalingPolicy")
    """The autoscaling policy for this backend."""


ModelMatch = JSONObject
"""Predicate matching inference requests to this model (body, headers, uri); not expanded by the seed."""


class ModelSpec(KubeModel):
    """ModelSpec defines the desired state of Model."""

    name: str | None = Field(None, max_length=64, pattern=DNS_LABEL_PATTERN)
    """The model name (the CR name cannot hold every model name)."""
    owner: str | None = None
    """Owner is the owner of the model."""
    backends: list[ModelBackend] = Field(min_length=1)
    """The backends serving this model; at least one."""
    autoscaling_policy: AutoscalingPolicySpec | None = Field(None, alias="autoscalingPolicy")
    """The autoscaling policy used for this model."""
    cost_expansion_rate_percent: int | None = Field(None, alias="costExpansionRatePercent", ge=0, le=1000)
    """CostExpansionRatePercent is the percentage rate at which the cost expands."""
    model_match: ModelMatch | None = Field(None, alias="modelMatch")
    """Conditions (ANDed) matching inference requests to this model."""


class ModelBackendStatus(KubeModel):
    """ModelBackendStatus defines the status of a model backend."""

    name: str | None = None
    """Name is the name of the backend."""
    replicas: int | None = None
    """Replicas is the number of replicas currently running for the backend."""


class ModelStatus(KubeModel):
    """ModelStatus defines the observed state of Model."""

    conditions: Conditions | None = None
    """Conditions represents the latest available observations of the model's state."""
    backend_statuses: list[ModelBackendStatus] | None = Field(None, alias="backendStatuses")
    """BackendStatuses contains the status of each backend."""
    observed_generation: int | None = Field(None, alias="observedGeneration")
    """ObservedGeneration track of generation."""


class Model(ResourceWithStatus[ModelSpec, ModelStatus]):
    """Model is the Schema for the models API."""

    api_version: KthenaApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["Model"] = "Model"
