"""``llmd.ai/v1alpha1`` VariantAutoscaling (seeds 000 and 001), one schema for both generations.

The first generation (seed 000) describes a variant by its performance profile: ``variantID``,
``accelerator``, ``acceleratorCount``, ``sloClassRef`` and ``variantProfile`` (all required there), and
reports ``status.currentAlloc``. The second (seed 001) points at the workload to scale:
``scaleTargetRef`` (required there) and ``variantCost``. Modelplane serves both with one v1alpha1
schema, the union of the fields: only ``modelID`` (required in both) is required here; what a mode
needs (a profile for model-based optimisation, a target for actuation) is checked by the optimize flow
when that mode runs and reported as a condition.

``numReplicas`` has minimum 0 in both ``Allocation`` and ``OptimizedAlloc`` (seed 001 says 1) so that
scale-to-zero decisions are representable.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from engine.api.meta import Conditions, CrossVersionObjectReference, KubeModel, ObjectMeta, Time
from engine.api.registry import LLMD_API, LlmdApiVersion

API_VERSION: Final[LlmdApiVersion] = LLMD_API
"""The apiVersion of this module's kinds (spelled in :mod:`engine.api.registry`)."""

VARIANT_ID_PATTERN = r"^.+-[A-Za-z0-9]+-[1-9][0-9]*$"
COST_PATTERN = r"^\d+(\.\d+)?$"

MAX_ACCELERATOR_COUNT: Final = 1024
"""The most accelerator units one replica may declare (``spec.acceleratorCount``): a multi-node replica of
128 nodes of 8 GPUs. Larger values are refused where the resource is read, so no count reaches the solver
beyond what its integer arithmetic holds."""
MAX_BATCH_SIZE: Final = 65536
"""The largest ``spec.variantProfile.maxBatchSize``: the queueing model keeps one state per batch slot, so
the bound keeps a cycle's memory and time bounded (vLLM's ``--max-num-seqs`` is in the hundreds)."""

# Condition types and reasons of seed 001.
METRICS_AVAILABLE = "MetricsAvailable"
OPTIMIZATION_READY = "OptimizationReady"
REASON_METRICS_AVAILABLE = "MetricsAvailable"
REASON_METRICS_UNAVAILABLE = "MetricsUnavailable"
REASON_OPTIMIZATION_SUCCEEDED = "OptimizationSucceeded"
REASON_SATURATION_ONLY_MODE = "SaturationOnlyMode"
REASON_SATURATION_SAFETY_OVERRIDE = "SaturationSafetyOverride"


class ConfigMapKeyRef(KubeModel):
    """ConfigMapKeyRef references a specific key within a ConfigMap."""

    name: str = Field(min_length=1)
    """Name is the name of the ConfigMap."""
    key: str = Field(min_length=1)
    """Key is the key within the ConfigMap."""


class PerfParms(KubeModel):
    """PerfParms contains performance parameters for the variant."""

    decode_parms: dict[str, str] | None = Field(None, alias="decodeParms", min_length=1)
    """Parameters of the decode phase (ITL): keys "alpha", "beta" for itl = alpha + beta * batchSize."""
    prefill_parms: dict[str, str] | None = Field(None, alias="prefillParms", min_length=1)
    """Parameters of the prefill phase (TTFT): keys "gamma", "delta" for ttft = gamma + delta * tokens * batchSize."""


class VariantProfile(KubeModel):
    """VariantProfile provides performance characteristics for a specific variant."""

    perf_parms: PerfParms = Field(alias="perfParms")
    """PerfParms specifies the prefill and decode parameters for TTFT and ITL models."""
    max_batch_size: int = Field(alias="maxBatchSize", ge=1, le=MAX_BATCH_SIZE)
    """MaxBatchSize is the maximum batch size supported by this variant."""


class VariantAutoscalingSpec(KubeModel):
    """VariantAutoscalingSpec defines the desired state for autoscaling a model variant (both generations)."""

    model_id: str = Field(alias="modelID", min_length=1)
    """ModelID specifies the unique identifier of the model to be autoscaled."""
    variant_id: str | None = Field(None, alias="variantID", min_length=1, pattern=VARIANT_ID_PATTERN)
    """Business identifier of the variant, {modelID}-{accelerator}-{acceleratorCount}, e.g. meta/llama-3.1-8b-A100-4."""
    accelerator: str | None = Field(None, min_length=1)
    """Accelerator type of this variant, e.g. A100 or L40S."""
    accelerator_count: int | None = Field(None, alias="acceleratorCount", ge=1, le=MAX_ACCELERATOR_COUNT)
    """Number of accelerator units per replica."""
    slo_class_ref: ConfigMapKeyRef | None = Field(None, alias="sloClassRef")
    """The ConfigMap key holding the service class (SLO) configuration."""
    variant_profile: VariantProfile | None = Field(None, alias="variantProfile")
    """Performance characteristics of this variant."""
    scale_target_ref: CrossVersionObjectReference | None = Field(None, alias="scaleTargetRef")
    """The scalable resource to manage, as in a HorizontalPodAutoscaler."""
    variant_cost: str | None = Field("10.0", alias="variantCost", pattern=COST_PATTERN)
    """Cost per replica of this variant (used in saturation analysis)."""


class Allocation(KubeModel):
    """Allocation describes the current resource allocation for this variant."""

    variant_id: str | None = Field(None, alias="variantID", min_length=1)
    """VariantID identifies this variant: {modelID}-{accelerator}-{acceleratorCount}."""
    accelerator: str | None = Field(None, min_length=1)
    """Accelerator is the type of accelerator currently allocated."""
    num_replicas: int | None = Field(None, alias="numReplicas", ge=0)
    """NumReplicas is the number of replicas currently allocated."""
    max_batch: int | None = Field(None, alias="maxBatch", ge=0)
    """MaxBatch is the maximum batch size currently allocated."""
    variant_cost: str | None = Field(None, alias="variantCost", pattern=COST_PATTERN)
    """VariantCost is the cost associated with this variant allocation."""


class OptimizedAlloc(KubeModel):
    """OptimizedAlloc describes the target optimized allocation for a model variant."""

    last_run_time: Time | None = Field(None, alias="lastRunTime")
    """LastRunTime is the timestamp of the last optimization run."""
    variant_id: str | None = Field(None, alias="variantID", min_length=1)
    """VariantID identifies which variant this optimized allocation is for."""
    accelerator: str | None = Field(None, min_length=2)
    """Accelerator is the type of accelerator for the optimized allocation."""
    num_replicas: int | None = Field(None, alias="numReplicas", ge=0)
    """NumReplicas is the number of replicas for the optimized allocation (0 = scaled to zero)."""


class ActuationStatus(KubeModel):
    """ActuationStatus provides details about the actuation process and its current status."""

    applied: bool | None = None
    """Applied indicates whether the actuation was successfully applied."""


class SloStatus(KubeModel):
    """SloStatus is the model's SLO attainment as the last optimize cycle measured it, and what the SLO controller
    last did about it. Attainment is per model: every VariantAutoscaling of the model in the namespace shows the same."""

    target: float = Field(ge=0, le=1)
    """Target is the share of requests that must meet the latency targets (modelplane.io/slo-attainment, the service
    class's slo-attainment, else 0.90)."""
    attained: float | None = Field(None, ge=0, le=1)
    """Attained is the share of requests within the TTFT and ITL targets over the window, from vLLM's histograms;
    absent while unknown (no histograms, no requests), the message says why."""
    window: str = Field(min_length=1)
    """Window is the evaluation window, a duration such as 1h (modelplane.io/slo-window)."""
    error_budget_remaining: float | None = Field(None, alias="errorBudgetRemaining")
    """ErrorBudgetRemaining is 1 - (1 - attained) / (1 - target): 1 with no miss, 0 with exactly the misses the target
    allows, negative once more requests missed (-1: twice the allowance); absent while attained is unknown."""
    requests: int | None = Field(None, ge=0)
    """Requests is how many requests the window holds (TTFT observations)."""
    measured_at: Time | None = Field(None, alias="measuredAt")
    """MeasuredAt is when the attainment was read."""
    message: str | None = None
    """Message says where the target comes from and how the attainment was read (a target inside a coarse histogram
    bucket is interpolated; a per-token ITL histogram counts tokens), or why it is unknown."""
    sizing_percentile: float | None = Field(None, alias="sizingPercentile", ge=0, le=100)
    """SizingPercentile is the TTFT percentile the attainment loop sizes the model for (it moves it so that attained
    meets target); absent while the loop is off (a pinned modelplane.io/ttft-percentile, or mean sizing)."""
    peak_hold: str | None = Field(None, alias="peakHold")
    """PeakHold is how far back the recent peak the model is sized for reaches, a duration such as 3m: the loop
    lengthens it when requests miss while replicas start (bursts, ramps) and shortens it on a surplus."""
    load_factor: float | None = Field(None, alias="loadFactor", ge=0, le=1)
    """LoadFactor is the share of its held peak load the model is sized for: the loop lowers it below 1 only while
    the model attains more than its target at the lowest sizing percentile, and raises it back first on a shortfall."""
    controller: str | None = None
    """Controller says what the attainment loop last changed and why."""


class TuningStatus(KubeModel):
    """TuningStatus is what the last tune run chose for the model: the setting whose replay of the window's traffic
    met the SLO attainment target at the lowest cost (modelplane tune; the annotations it set carry the setting)."""

    candidate: str = Field(min_length=1)
    """Candidate names the chosen setting: the attainment loop, a pinned percentile (percentile p90), or a
    static-peak floor (static floor x1.0)."""
    attained: float = Field(ge=0, le=1)
    """Attained is the share of the model's requests within its latency targets in the chosen replay."""
    target: float = Field(ge=0, le=1)
    """Target is the attainment the choice was made for."""
    met: bool
    """Met says whether a candidate met the target (a static floor counts within 3 points of it: the attainment loop
    on top of the floor tops up a day that falls short); when none did, the chosen one came closest."""
    cost: float = Field(ge=0)
    """Cost is the accelerator cost of the model's variants over the replay (unit cost x accelerator hours)."""
    traffic: str = Field(min_length=1)
    """Traffic says what was replayed: a request log, or the window rebuilt from Prometheus and the minute it ended
    (e.g. 24h to 2026-11-30T06:00Z from Prometheus: modelplane tune --window 24h --end 2026-11-30T06:00Z reads the
    same traffic again)."""
    calibration: float | None = Field(None, ge=-0.1, le=0.1)
    """Calibration is how far the replay read above what the cluster attained over the window under the settings
    that ran (their replay's attainment less the measured one, within 0.1 either way); every candidate's replayed
    attainment was judged less this. Absent when the traffic was a request log or the model's latency histograms
    were missing."""
    tuned_at: Time = Field(alias="tunedAt")
    """TunedAt is when the choice was made."""


class VariantAutoscalingStatus(KubeModel):
    """VariantAutoscalingStatus represents the current status of autoscaling for a variant."""

    current_alloc: Allocation | None = Field(None, alias="currentAlloc")
    """CurrentAlloc specifies the current resource allocation for this variant."""
    desired_optimized_alloc: OptimizedAlloc | None = Field(None, alias="desiredOptimizedAlloc")
    """DesiredOptimizedAlloc indicates the target optimized allocation based on autoscaling logic."""
    actuation: ActuationStatus | None = None
    """Actuation provides details about the actuation process and its current status."""
    conditions: Conditions | None = None
    """Conditions represent the latest available observations of the VariantAutoscaling's state."""
    slo: SloStatus | None = None
    """Slo is the model's SLO attainment target, what was measured against it and the SLO controller's adjustment."""
    tuning: TuningStatus | None = None
    """Tuning is what the last tune run chose for the model and what its replay attained."""


class VariantAutoscaling(KubeModel):
    """VariantAutoscaling represents the autoscaling configuration and status for a model variant."""

    api_version: LlmdApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["VariantAutoscaling"] = "VariantAutoscaling"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: VariantAutoscalingSpec
    """Spec defines the desired state for autoscaling the model variant."""
    status: VariantAutoscalingStatus | None = None
    """Status represents the current status of autoscaling for the model variant."""
