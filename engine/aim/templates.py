"""AIMServiceTemplate resolution, decided without I/O: GPUs in the cluster, profile matching, status.

A template is resolved against its model's recommended deployments (read from the image by
discovery, see :mod:`engine.aim.discovery`) instead of running the image in a dry-run Job: GPU model
(normalised), ``gpusPerReplica == gpuCount``, metric and precision (``auto`` matches any, then the
preferred precision wins). The GPU must exist in the cluster: :func:`engine.aim.gpus.cluster_gpus` reads AMD
(``amd.com/gpu.device-id`` and family labels, aim-engine's device table) and NVIDIA (GPU feature
discovery's ``nvidia.com/gpu.product`` and ``nvidia.com/gpu.count``) Node labels. A template whose GPU
is absent stays ``Pending`` (reason ``GpuNotAvailable``) and recovers when such nodes appear.

:func:`resolve_profile` is the first half (model, GPU, profile, model sources);
:func:`template_status` the second (caches when ``warmCache``), giving ``status.status``,
``status.modelSources`` and the seed's conditions and reasons.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.aim.discovery import REASON_IMAGE_NOT_FOUND, DiscoveryRecord, ImageMetadata
from engine.aim.gpus import GpuInventory, gpu_unavailable, normalize_gpu_model
from engine.api.aim import AIMClusterModel, AIMServiceTemplate, AIMServiceTemplateSpec
from engine.caches.sources import parse_source
from engine.status import ConditionUpdate

# --------------------------------------------------------------------------------------------------
# Profile matching
# --------------------------------------------------------------------------------------------------

PRECISION_PREFERENCE = ("fp4", "int4", "fp8", "int8", "fp16", "bf16", "fp32")
METRIC_PREFERENCE = ("latency", "throughput")


def preference_rank(value: str | None, order: Sequence[str]) -> int:
    """Position of ``value`` in a preference order (unknown values rank after every known one)."""
    return order.index(value) if value in order else 1000


def match_profile(spec: AIMServiceTemplateSpec, deployments: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The recommended deployment a template selects, or ``None``.

    GPU model equal after normalising, ``gpusPerReplica == gpuCount``, metric equal (a template
    without a metric takes any), precision equal unless the template says ``auto`` (any). Among several,
    aim-engine's order: metric first (latency < throughput), then precision (fp4 < int4 < fp8 < int8 <
    fp16 < bf16 < fp32).
    """
    gpu = spec.gpu_model
    count = spec.gpus_per_replica
    metric = spec.metric
    precision = spec.precision or "auto"
    candidates = []
    for deployment in deployments:
        if gpu and normalize_gpu_model(str(deployment.get("gpuModel") or "")) != normalize_gpu_model(gpu):
            continue
        if count is not None and deployment.get("gpuCount") != count:
            continue
        if metric and deployment.get("metric") != metric:
            continue
        if precision != "auto" and deployment.get("precision") != precision:
            continue
        candidates.append(deployment)
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda d: (
            preference_rank(d.get("metric"), METRIC_PREFERENCE),
            preference_rank(d.get("precision"), PRECISION_PREFERENCE),
        ),
    )


def describe_wanted(spec: AIMServiceTemplateSpec) -> str:
    """The template's selection knobs in one phrase, for messages."""
    count = "?" if spec.gpus_per_replica is None else spec.gpus_per_replica
    parts = [
        f"{count} x {spec.gpu_model or 'any GPU'}",
        spec.metric or "any metric",
        spec.precision or "auto",
    ]
    return ", ".join(str(p) for p in parts)


def normalized_source(source: str) -> str:
    """``model.source`` as a canonical model-source URI (``https://huggingface.co/X`` -> ``hf://X``)."""
    return parse_source(source).uri


# --------------------------------------------------------------------------------------------------
# Template status
# --------------------------------------------------------------------------------------------------

STATUS_PENDING, STATUS_PROGRESSING, STATUS_AVAILABLE, STATUS_FAILED = "Pending", "Progressing", "Available", "Failed"
COND_DISCOVERED, COND_CACHE_WARM, COND_READY, COND_PROGRESSING, COND_FAILURE = (
    "Discovered",
    "CacheWarm",
    "Ready",
    "Progressing",
    "Failure",
)
REASON_AWAITING = "AwaitingDiscovery"
REASON_DISCOVERED = "ProfilesDiscovered"
REASON_DISCOVERY_FAILED = "DiscoveryFailed"
REASON_GPU_NOT_AVAILABLE = "GpuNotAvailable"
REASON_WARM_REQUESTED, REASON_WARMING, REASON_WARM, REASON_WARM_FAILED = (
    "WarmRequested",
    "Warming",
    "Warm",
    "WarmFailed",
)


@dataclass(frozen=True)
class Profile:
    """The first half of a template's resolution: which model and profile, or why not."""

    status: str
    reason: str
    message: str
    model: AIMClusterModel | None = None
    metadata: ImageMetadata | None = None
    deployment: Mapping[str, Any] | None = None
    model_sources: tuple[str, ...] = ()
    failure_reason: str | None = None

    @property
    def discovered(self) -> bool:
        """Whether a profile was selected."""
        return self.deployment is not None


class ModelCatalog:
    """The AIMClusterModels of a run, looked up by canonical name (``spec.name``), each model's
    discovery record parsed once."""

    def __init__(self, models: Iterable[AIMClusterModel]) -> None:
        self._by_canonical: dict[str, list[AIMClusterModel]] = {}
        for model in models:
            self._by_canonical.setdefault(model.spec.name, []).append(model)
        self._records: dict[str, DiscoveryRecord | None] = {}

    def named(self, canonical: str) -> list[AIMClusterModel]:
        """The models whose ``spec.name`` is ``canonical``."""
        return self._by_canonical.get(canonical, [])

    def record(self, model: AIMClusterModel) -> DiscoveryRecord | None:
        """What discovery persisted on ``model``."""
        name = model.metadata.name or ""
        if name not in self._records:
            self._records[name] = DiscoveryRecord.from_annotations(model.metadata.annotations)
        return self._records[name]


def models_named(models: Iterable[AIMClusterModel] | ModelCatalog, canonical: str) -> list[AIMClusterModel]:
    """The AIMClusterModels whose ``spec.name`` is ``canonical``."""
    if isinstance(models, ModelCatalog):
        return models.named(canonical)
    return [m for m in models if m.spec.name == canonical]


def record_of(models: Iterable[AIMClusterModel] | ModelCatalog, model: AIMClusterModel) -> DiscoveryRecord | None:
    """The discovery record of ``model`` (parsed once when ``models`` is a catalog)."""
    if isinstance(models, ModelCatalog):
        return models.record(model)
    return DiscoveryRecord.from_annotations(model.metadata.annotations)


def resolve_profile(
    template: AIMServiceTemplate, models: Sequence[AIMClusterModel] | ModelCatalog, inventory: GpuInventory
) -> Profile:
    """Model, GPU availability and profile of a template (in this order: each gate explains itself)."""
    spec = template.spec
    canonical = spec.model
    named = models_named(models, canonical)
    if not named:
        return Profile(STATUS_PENDING, REASON_AWAITING, f"no AIMClusterModel has spec.name {canonical!r}")
    if len(named) > 1:
        names = ", ".join(sorted(m.metadata.name or "" for m in named))
        return Profile(
            STATUS_FAILED,
            REASON_DISCOVERY_FAILED,
            f"several AIMClusterModels have spec.name {canonical!r}: {names}",
            failure_reason="ValidationFailed",
        )
    model = named[0]
    record = record_of(models, model)
    image = model.spec.image
    if record is None or record.image != image:
        return Profile(STATUS_PENDING, REASON_AWAITING, f"waiting for discovery of {image}", model=model)
    if not record.ok:
        if record.reason == REASON_IMAGE_NOT_FOUND:
            return Profile(
                STATUS_FAILED,
                REASON_DISCOVERY_FAILED,
                record.message,
                model=model,
                failure_reason=REASON_IMAGE_NOT_FOUND,
            )
        if record.terminal:
            return Profile(
                STATUS_FAILED, REASON_DISCOVERY_FAILED, record.message, model=model, failure_reason=record.reason
            )
        return Profile(
            STATUS_PENDING,
            REASON_AWAITING,
            f"discovery of {image} failed and is retried: {record.message}",
            model=model,
        )
    metadata = record.metadata
    assert metadata is not None
    tp, per_replica = spec.tensor_parallelism, spec.gpus_per_replica
    if tp is not None and per_replica is not None and tp > per_replica:
        return Profile(
            STATUS_FAILED,
            REASON_DISCOVERY_FAILED,
            f"spec.tensorParallelism {tp} exceeds spec.gpusPerReplica {per_replica}",
            model=model,
            metadata=metadata,
            failure_reason="ValidationFailed",
        )
    if spec.gpu_model:
        missing = gpu_unavailable(spec.gpu_model, per_replica, inventory)
        if missing:
            return Profile(STATUS_PENDING, REASON_GPU_NOT_AVAILABLE, missing, model=model, metadata=metadata)
    deployment = match_profile(spec, metadata.recommended_deployments)
    if deployment is None:
        offered = len(metadata.recommended_deployments)
        return Profile(
            STATUS_FAILED,
            REASON_DISCOVERY_FAILED,
            f"no recommended deployment of {image} matches {describe_wanted(spec)} ({offered} offered)",
            model=model,
            metadata=metadata,
            failure_reason=REASON_DISCOVERY_FAILED,
        )
    sources: tuple[str, ...] = ()
    if metadata.source:
        try:
            sources = (normalized_source(metadata.source),)
        except ValueError as exc:
            return Profile(
                STATUS_FAILED,
                REASON_DISCOVERY_FAILED,
                f"the image's model.source label: {exc}",
                model=model,
                metadata=metadata,
                failure_reason=REASON_DISCOVERY_FAILED,
            )
    chosen = ", ".join(
        f"{k}={deployment[k]}" for k in ("gpuModel", "gpuCount", "metric", "precision", "profileId") if k in deployment
    )
    return Profile(
        STATUS_PROGRESSING,
        REASON_DISCOVERED,
        f"profile {chosen}",
        model=model,
        metadata=metadata,
        deployment=deployment,
        model_sources=sources,
    )


@dataclass(frozen=True)
class TemplateOutcome:
    """A template's new ``status`` (as a dict in API shape, conditions to apply separately)."""

    status: str
    model_sources: list[str]
    conditions: list[ConditionUpdate] = field(default_factory=list)


def template_status(profile: Profile, warm_cache: bool, cache_states: Mapping[str, str | None]) -> TemplateOutcome:
    """Status and conditions of a template from its profile and (when ``warm_cache``) the states of the
    caches of its model sources (``source uri -> status.status``, ``None`` for a cache just requested).

    Available = discovered and (not warmCache or every cache Available); a Failed cache fails it.
    """
    if not profile.discovered:
        failed = profile.status == STATUS_FAILED
        conditions = [
            ConditionUpdate(COND_DISCOVERED, "False", profile.reason, profile.message),
            ConditionUpdate(COND_CACHE_WARM, "False", REASON_AWAITING, "waiting for discovery"),
            ConditionUpdate(COND_READY, "False", profile.reason, profile.message),
            ConditionUpdate(COND_PROGRESSING, "False" if failed else "True", profile.reason, profile.message),
            ConditionUpdate(
                COND_FAILURE,
                "True" if failed else "False",
                profile.failure_reason or profile.reason if failed else "NoFailure",
                profile.message if failed else "",
            ),
        ]
        return TemplateOutcome(profile.status, list(profile.model_sources), conditions)
    discovered = ConditionUpdate(COND_DISCOVERED, "True", REASON_DISCOVERED, profile.message)
    sources = list(profile.model_sources)
    if not warm_cache:
        cache = ConditionUpdate(COND_CACHE_WARM, "True", REASON_WARM, "warming not requested (spec.warmCache is false)")
        status = STATUS_AVAILABLE
    else:
        states = [cache_states.get(s) for s in sources]
        if any(s == "Failed" for s in states):
            bad = [src for src in sources if cache_states.get(src) == "Failed"]
            cache = ConditionUpdate(COND_CACHE_WARM, "False", REASON_WARM_FAILED, f"cache of {', '.join(bad)} failed")
            status = STATUS_FAILED
        elif all(s == "Available" for s in states):
            cache = ConditionUpdate(COND_CACHE_WARM, "True", REASON_WARM, f"{len(sources)} model caches available")
            status = STATUS_AVAILABLE
        elif all(s is None for s in states):
            cache = ConditionUpdate(
                COND_CACHE_WARM, "False", REASON_WARM_REQUESTED, f"caches requested for {', '.join(sources)}"
            )
            status = STATUS_PROGRESSING
        else:
            ready = sum(1 for s in states if s == "Available")
            cache = ConditionUpdate(
                COND_CACHE_WARM, "False", REASON_WARMING, f"{ready} of {len(sources)} model caches available"
            )
            status = STATUS_PROGRESSING
    failed = status == STATUS_FAILED
    ready = status == STATUS_AVAILABLE
    conditions = [
        discovered,
        cache,
        ConditionUpdate(
            COND_READY,
            "True" if ready else "False",
            cache.reason if not ready else REASON_WARM if warm_cache else REASON_DISCOVERED,
            "template available" if ready else cache.message,
        ),
        ConditionUpdate(
            COND_PROGRESSING, "True" if status == STATUS_PROGRESSING else "False", cache.reason, cache.message
        ),
        ConditionUpdate(
            COND_FAILURE,
            "True" if failed else "False",
            REASON_WARM_FAILED if failed else "NoFailure",
            cache.message if failed else "",
        ),
    ]
    return TemplateOutcome(status, sources, conditions)
