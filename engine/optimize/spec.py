"""What the optimizer reads: VariantAutoscalings and the cycle's gathered inputs, parsed into typed values.

Decides whether a VariantAutoscaling can be optimized as written and what it asks for: its model,
variant, accelerator, performance profile, SLO reference, scale target, replica bounds (the
``modelplane.io/min-replicas``, ``max-replicas`` and ``scale-to-zero`` annotations), TTFT percentile,
actuation opt-in and SLO attainment target (``modelplane.io/slo-attainment``, ``slo-window``); and the one cost of one of its replicas. A resource that cannot be optimized
raises :class:`SpecError` naming the field, so the cycle gives it its own condition and the others
proceed (:mod:`engine.optimize.plan`). :class:`CycleInputs` is everything one cycle decides from,
gathered by the optimize flow's tasks.

The engine receives the VariantAutoscaling already parsed as its API model
(:class:`engine.api.llmd.VariantAutoscaling`) by the tasks layer's boundary reader
(``tasks/boundary.py``, :func:`engine.api.validate.parse_object`), which applied the CRD schema (the API
server's rules, whichever backend the object came from); the checks here are what the schema cannot
say (a profile whose decode parameters are both 0 or not numbers, max below min, a missing scale target).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from engine.api.llmd import MAX_ACCELERATOR_COUNT, MAX_BATCH_SIZE, VariantAutoscaling, VariantProfile
from engine.api.meta import parse_duration
from engine.errors import InputError
from engine.optimize.actuation import RECOMMEND, ActuationModeError, resource_mode
from engine.optimize.config import AcceleratorCost, ConfigError, ServiceClass
from engine.perf.prompt_split import ANNOTATION_ROUTER, check_router
from engine.perf.queueing import PerfProfile, Workload
from engine.perf.saturation import DEFAULT_VARIANT_COST, SaturationConfigSet
from engine.perf.tail_sizing import (
    ANNOTATION_TTFT_PERCENTILE,
    DEFAULT_TTFT_PERCENTILE,
    PromptDistribution,
    TailSizingError,
    ttft_percentile,
)
from engine.slo.measure import LatencyHistograms, ModelAttainment
from engine.slo.target import AttainmentTarget, TargetError, annotated, resolve_target
from engine.units import format_duration

ANNOTATION_MIN_REPLICAS = "modelplane.io/min-replicas"
ANNOTATION_MAX_REPLICAS = "modelplane.io/max-replicas"
ANNOTATION_SCALE_TO_ZERO = "modelplane.io/scale-to-zero"
ANNOTATION_SCALE_DOWN_WINDOW = "modelplane.io/scale-down-stabilization-window"
"""VariantAutoscaling annotation: scale-down stabilization window (a Duration such as ``3m``)."""
ANNOTATION_BURST_SIZING = "modelplane.io/burst-sizing"
"""VariantAutoscaling annotation: ``true`` sizes the model for its sub-minute bursts (:mod:`engine.perf.load_burst`)."""
MAX_SCALE_DOWN_WINDOW_S = 3600.0
"""The longest scale-down stabilization window a VariantAutoscaling may ask for: an hour, the HPA's bound for
``behavior.scaleDown.stabilizationWindowSeconds``."""
# WVA's label for the accelerator of a VariantAutoscaling that does not carry spec.accelerator (seed 001).
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"


COST_UNIT = "per hour"
"""What a cost figure of the optimizer means: accelerator-unit-costs give each accelerator's cost per hour (WVA's
unit cost), so a variant's cost (unit cost x accelerators per replica x replicas) is per hour of its allocation."""


def accelerator_text(name: str, count: int = 1) -> str:
    """How a table names what one replica runs on: ``1x A100``, ``2x H100``, ``1x nvidia.com/gpu`` (the GPU
    resource, where nothing names the accelerator type); empty for none."""
    return f"{count}x {name}" if name else ""


class SpecError(InputError):
    """A VariantAutoscaling cannot be optimized as written; ``field`` names the offending path."""

    @property
    def field(self) -> str:
        """The offending path (``spec.variantProfile``, an annotation)."""
        return self.where


@dataclass(frozen=True)
class ModelLoad:
    """Observed load of one model in one namespace: arrival rate (req/s) and token averages."""

    arrival_rate_rps: float
    avg_in_tokens: float
    avg_out_tokens: float
    prompt_tokens: PromptDistribution | None = None
    """Prompt-length histogram (``vllm:request_prompt_tokens_bucket``) for tail-aware sizing, when collected."""
    recent_peak_rps: float | None = None
    """Highest 1-minute arrival rate over the last start-up delay (see :mod:`engine.perf.load_peak`), when collected."""
    recent_change_rps: float | None = None
    """Largest 1-minute change of the arrival rate over the last intervals (negative: it fell in each; see
    :mod:`engine.perf.load_trend`), when collected."""
    change_noise_rps: float | None = None
    """Median absolute 1-minute change of the arrival rate over the last half hour (the rate's noise), when collected."""
    burst_rps: float | None = None
    """The Poisson rate that explains the highest sub-minute arrival count over the start-up horizon
    (:func:`engine.perf.load_burst.burst_rate`), when collected: about the arrival rate on Poisson traffic, a
    multiple of it on clustered traffic."""
    peaks_rps: dict[float, float] | None = None
    """Highest 1-minute arrival rate per look-back in seconds (:data:`engine.perf.load_peak.HOLD_WINDOWS_S`), for
    the attainment loop's peak hold, when collected."""
    lowest_rps: float | None = None
    """Lowest 1-minute arrival rate over the longest of those look-backs, when collected: 0 when the model had a
    minute without requests there (intermittent traffic, :func:`engine.slo.controller.step`)."""
    sizing_factor: float = 1.0
    """The share of the planning rate the model is sized for: the attainment loop's load factor (below 1 only while
    the model attains more than its target at the loop's lowest percentile, :func:`engine.slo.controller.step`)."""

    @property
    def workload(self) -> Workload:
        """The request shape a replica is sized for: the average prompt and output tokens (at least one output
        token, so a load that produced none still has a finite per-token latency to size)."""
        return Workload(in_tokens=self.avg_in_tokens, out_tokens=max(self.avg_out_tokens, 1.0))


@dataclass(frozen=True)
class PodSample:
    """Saturation gauges of one serving pod."""

    pod: str
    kv_cache_usage: float
    queue_length: float


@dataclass(frozen=True)
class VariantSpec:
    """What the optimizer needs from one VariantAutoscaling, parsed and checked."""

    namespace: str
    name: str
    model_id: str
    variant_id: str
    accelerator: str | None
    accelerator_count: int
    max_batch: int | None
    profile: PerfProfile | None
    slo_ref: tuple[str, str] | None
    variant_cost: float | None
    """``spec.variantCost`` as declared (None when the resource does not declare one): see :func:`replica_cost`."""
    target_api_version: str
    target_kind: str
    target_name: str
    min_replicas: int
    max_replicas: int | None
    actuate: bool
    ttft_percentile: float | None = DEFAULT_TTFT_PERCENTILE
    """Share of requests (%) sized to meet the TTFT target (``modelplane.io/ttft-percentile``); None: the mean."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    slo_attainment: float | None = None
    """The attainment this resource's ``modelplane.io/slo-attainment`` asks for (None: not annotated); the
    model's target is :func:`model_targets`."""
    slo_window_s: float | None = None
    """The evaluation window its ``modelplane.io/slo-window`` sets, in seconds (None: not annotated)."""
    scale_down_window_s: float | None = None
    """The scale-down stabilization window its ``modelplane.io/scale-down-stabilization-window`` sets, in seconds
    (None: not annotated, the cycle's :attr:`CycleInputs.scale_down_window_s` applies)."""
    burst_sizing: bool = False
    """Whether its ``modelplane.io/burst-sizing`` asks that the model be sized for the rate its sub-minute peaks
    imply (:attr:`ModelLoad.burst_rps`) when that is above the recent peak rate."""

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of the VariantAutoscaling."""
        return (self.namespace, self.name)

    @property
    def model_key(self) -> tuple[str, str]:
        """(namespace, modelID): variants of one model in one namespace share its load."""
        return (self.namespace, self.model_id)

    @property
    def target_key(self) -> tuple[str, str, str]:
        """(namespace, kind, name) of the scale target."""
        return (self.namespace, self.target_kind, self.target_name)


@dataclass(frozen=True)
class CycleInputs:
    """Everything one cycle decides from. Keys of ``loads``/``pods`` are (namespace, modelID)."""

    now: datetime
    variants: list[VariantAutoscaling]
    """The VariantAutoscalings as the boundary parsed them (metadata and spec; the status is the writer's)."""
    current_replicas: Mapping[tuple[str, str, str], int]
    accelerator_costs: Mapping[str, AcceleratorCost]
    service_classes: Mapping[tuple[str, str], ServiceClass | ConfigError]
    saturation: SaturationConfigSet
    inventory: Mapping[str, int] | None = None
    unreadable_inventory: Mapping[str, str] = field(default_factory=dict)
    """Accelerators whose ``accelerator-inventory`` entry does not parse: why. Their variants hold their replicas:
    read as no entry, the accelerator would be unlimited, and a typo would scale its variants up without bound."""
    ready_replicas: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    invalid_targets: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    """Scale targets whose replicas are not a count, keyed as ``current_replicas``: why (their variants are invalid)."""
    loads: Mapping[tuple[str, str], ModelLoad] = field(default_factory=dict)
    pods: Mapping[tuple[str, str], list[PodSample]] = field(default_factory=dict)
    metrics_error: str | None = None  # set when the metrics backend itself failed
    missing_metrics: Mapping[tuple[str, str], str] = field(default_factory=dict)
    latency: Mapping[tuple[str, str], LatencyHistograms] = field(default_factory=dict)
    """Per model: its TTFT and ITL bucket increases over its SLO window and the recent range (SLO attainment)."""
    latency_missing: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """Per model without latency histograms: why (its attainment is then unknown; no decision depends on it)."""
    time_limit_s: float = 10.0
    attainment: Mapping[tuple[str, str], ModelAttainment] = field(default_factory=dict)
    """Per (namespace, modelID): its SLO attainment measured from vLLM's latency histograms this cycle (absent:
    not measured; the attainment loop then holds, :mod:`engine.optimize.attainment`)."""
    loop_holds: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Per (namespace, modelID): the attainment loop's peak hold last cycle, in seconds (``status.slo.peakHold``)."""
    loop_factors: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Per (namespace, modelID): the attainment loop's load factor last cycle (``status.slo.loadFactor``)."""
    loop_percentiles: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Per (namespace, modelID): the TTFT percentile the attainment loop sized it for last cycle
    (``status.slo.sizingPercentile``); absent: the loop starts from the target (see :mod:`engine.optimize.attainment`)."""
    scale_down_window_s: float = 0.0
    """Default scale-down stabilization window (seconds); a VariantAutoscaling may set its own with the
    ``modelplane.io/scale-down-stabilization-window`` annotation. 0: scale down at once."""
    gateway_waiting: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Per (namespace, modelID): requests waiting in its gateway's flow-control queue (absent: none seen, or the
    gateway exports no queue); a model with no replica and requests waiting is scaled from zero
    (:mod:`engine.optimize.wake`)."""


PROFILE_PARAMETER_MIN: Final = 1e-6
"""The smallest non-zero profile parameter (alpha, beta, gamma, delta, in ms): below it a parameter is 0 to
any measurement, and a value near the float's underflow (``1e-320``) would turn its inverse into infinity."""
PROFILE_PARAMETER_MAX: Final = 1e6
"""The largest profile parameter (ms): 1000 s per token or per batch slot is no serving engine; larger
values (``1e308``) overflow the latency model to infinity."""
MAX_REPLICAS: Final = 1_000_000
"""The most replicas a scale target may have or a ``modelplane.io/max-replicas`` annotation may ask for
(Kthena's replica bound): a target beyond it is reported, never priced or scaled."""
MAX_VARIANT_COST: Final = 1e9
"""The largest ``spec.variantCost`` (and per-replica cost); a cycle's total stays a readable number."""


def _number(params: Mapping[str, Any], key: str, path: str) -> float:
    """Profile parameter ``key``: 0 or within [:data:`PROFILE_PARAMETER_MIN`, :data:`PROFILE_PARAMETER_MAX`]."""
    if key not in params:
        raise SpecError(f"{path}.{key}", "missing")
    try:
        value = float(params[key])
    except (TypeError, ValueError):
        raise SpecError(f"{path}.{key}", f"must be a number, got {params[key]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"{path}.{key}", f"must be a finite non-negative number, got {params[key]!r}")
    if value != 0 and not PROFILE_PARAMETER_MIN <= value <= PROFILE_PARAMETER_MAX:
        raise SpecError(
            f"{path}.{key}",
            f"must be 0 or between {PROFILE_PARAMETER_MIN:g} and {PROFILE_PARAMETER_MAX:g} (ms), got {params[key]!r}",
        )
    return value


def parse_profile(profile: VariantProfile | None) -> tuple[PerfProfile | None, int | None]:
    """The variant's performance profile, or ``(None, None)`` when it has none (saturation-only)."""
    if profile is None:
        return None, None
    base = "spec.variantProfile"
    max_batch = profile.max_batch_size
    if not 1 <= max_batch <= MAX_BATCH_SIZE:  # the schema says so too; a model built in code skips the schema
        raise SpecError(f"{base}.maxBatchSize", f"must be an integer from 1 to {MAX_BATCH_SIZE}, got {max_batch!r}")
    decode = profile.perf_parms.decode_parms or {}
    prefill = profile.perf_parms.prefill_parms or {}
    alpha = _number(decode, "alpha", f"{base}.perfParms.decodeParms")
    beta = _number(decode, "beta", f"{base}.perfParms.decodeParms")
    gamma = _number(prefill, "gamma", f"{base}.perfParms.prefillParms")
    delta = _number(prefill, "delta", f"{base}.perfParms.prefillParms")
    if alpha + beta == 0:
        raise SpecError(f"{base}.perfParms.decodeParms", "alpha and beta cannot both be 0")
    return PerfProfile(alpha=alpha, beta=beta, gamma=gamma, delta=delta, max_batch=max_batch), max_batch


def _scale_down_window(annotations: Mapping[str, str]) -> float | None:
    """The scale-down stabilization window a VariantAutoscaling's annotation sets, in seconds (None: not set, the
    cycle's default applies); ``ValueError`` saying why when the value is no duration from 0s to an hour."""
    text = annotations.get(ANNOTATION_SCALE_DOWN_WINDOW)
    if text is None:
        return None
    seconds = parse_duration(text)
    if seconds > MAX_SCALE_DOWN_WINDOW_S:
        raise ValueError(
            f"must be at most {format_duration(MAX_SCALE_DOWN_WINDOW_S)} (the HPA's longest window), got {text!r}"
        )
    return seconds


def _annotation_bool(annotations: Mapping[str, str], key: str) -> bool:
    """A ``true``/``false`` annotation (any case; absent: false); :class:`SpecError` naming it otherwise."""
    text = annotations.get(key, "false").strip().lower()
    if text not in ("true", "false"):
        raise SpecError(f"metadata.annotations[{key}]", f"must be true or false, got {annotations[key]!r}")
    return text == "true"


def _annotation_int(annotations: Mapping[str, str], key: str, minimum: int) -> int | None:
    """A replica-count annotation: an integer from ``minimum`` to :data:`MAX_REPLICAS`, or None when absent."""
    if key not in annotations:
        return None
    try:
        value = int(str(annotations[key]).strip())
    except ValueError:
        raise SpecError(f"metadata.annotations[{key}]", f"must be an integer, got {annotations[key]!r}") from None
    if not minimum <= value <= MAX_REPLICAS:
        raise SpecError(f"metadata.annotations[{key}]", f"must be from {minimum} to {MAX_REPLICAS}, got {value}")
    return value


def parse_variant(va: VariantAutoscaling) -> VariantSpec:
    """Reduce a parsed VariantAutoscaling (either seed generation) to a :class:`VariantSpec`.

    Raises :class:`SpecError` naming the field when the resource cannot be optimized at all.
    """
    meta, spec = va.metadata, va.spec
    annotations = meta.annotations
    model_id = spec.model_id
    if not model_id:
        raise SpecError("spec.modelID", "required")
    target = spec.scale_target_ref
    if target is None or not target.name:
        raise SpecError(
            "spec.scaleTargetRef.name", "required: Modelplane scales the target through its scale subresource"
        )
    profile, max_batch = parse_profile(spec.variant_profile)
    accelerator = spec.accelerator or meta.labels.get(ACCELERATOR_LABEL) or None
    count = spec.accelerator_count if spec.accelerator_count is not None else 1
    if not 1 <= count <= MAX_ACCELERATOR_COUNT:  # the schema says so too; a model built in code skips the schema
        raise SpecError("spec.acceleratorCount", f"must be an integer from 1 to {MAX_ACCELERATOR_COUNT}, got {count!r}")
    declared_cost = (
        spec.variant_cost if "variant_cost" in spec.model_fields_set else None
    )  # the model's default is not a declaration
    try:
        variant_cost = float(declared_cost) if declared_cost is not None else None
    except ValueError:
        raise SpecError("spec.variantCost", f"must be a decimal string, got {declared_cost!r}") from None
    if variant_cost is not None and not variant_cost <= MAX_VARIANT_COST:
        raise SpecError("spec.variantCost", f"must be at most {MAX_VARIANT_COST:g}, got {declared_cost!r}")
    slo = spec.slo_class_ref
    slo_ref = (slo.name, slo.key) if slo is not None and slo.name and slo.key else None
    scale_to_zero = _annotation_bool(annotations, ANNOTATION_SCALE_TO_ZERO)
    burst_sizing = _annotation_bool(annotations, ANNOTATION_BURST_SIZING)
    try:
        scale_down_window_s = _scale_down_window(annotations)
    except ValueError as exc:
        raise SpecError(f"metadata.annotations[{ANNOTATION_SCALE_DOWN_WINDOW}]", str(exc)) from None
    minimum = _annotation_int(annotations, ANNOTATION_MIN_REPLICAS, 0)
    if minimum is None:
        minimum = 0 if scale_to_zero else 1
    maximum = _annotation_int(annotations, ANNOTATION_MAX_REPLICAS, 1)
    if maximum is not None and maximum < minimum:
        raise SpecError(
            f"metadata.annotations[{ANNOTATION_MAX_REPLICAS}]", f"{maximum} is below min replicas {minimum}"
        )
    variant_id = spec.variant_id or f"{model_id}-{accelerator or 'unknown'}-{count}"
    try:
        percentile = ttft_percentile(annotations)
    except TailSizingError as exc:
        raise SpecError(f"metadata.annotations[{ANNOTATION_TTFT_PERCENTILE}]", str(exc)) from None
    try:
        attainment, window_s = annotated(annotations)
    except TargetError as exc:
        raise SpecError(exc.field, exc.detail) from None
    try:
        check_router(annotations.get(ANNOTATION_ROUTER))
    except ValueError as exc:
        raise SpecError(f"metadata.annotations[{ANNOTATION_ROUTER}]", str(exc)) from None
    try:
        actuate = actuation_enabled(annotations)
    except ActuationModeError as exc:
        raise SpecError(exc.field, str(exc).split(": ", 1)[1]) from None
    return VariantSpec(
        namespace=meta.namespace or "default",
        name=meta.name or "",
        model_id=model_id,
        variant_id=variant_id,
        accelerator=accelerator,
        accelerator_count=count,
        max_batch=max_batch,
        profile=profile,
        slo_ref=slo_ref,
        variant_cost=variant_cost,
        target_api_version=target.api_version or "apps/v1",
        target_kind=target.kind or "Deployment",
        target_name=target.name,
        min_replicas=minimum,
        max_replicas=maximum,
        actuate=actuate,
        ttft_percentile=percentile,
        annotations=dict(annotations),
        slo_attainment=attainment,
        slo_window_s=window_s,
        scale_down_window_s=scale_down_window_s,
        burst_sizing=burst_sizing,
    )


def actuation_enabled(annotations: Mapping[str, str]) -> bool:
    """False when the resource asks only for recommendations (``modelplane.io/actuation: recommend``).

    Whether the target is scaled or its desired replicas published is the actuation mode's business
    (:mod:`engine.optimize.actuation`); raises :class:`~engine.optimize.actuation.ActuationModeError` on an unknown value.
    """
    return resource_mode(annotations) != RECOMMEND


def clamp(value: int, spec: VariantSpec) -> int:
    """Clamp a replica count to the variant's [min, max]."""
    value = max(value, spec.min_replicas)
    return min(value, spec.max_replicas) if spec.max_replicas is not None else value


def free_accelerators(
    specs: Iterable[VariantSpec], inventory: Mapping[str, int] | None, replicas: Callable[[VariantSpec], int]
) -> Callable[[VariantSpec], bool]:
    """Whether the inventory has room for one more replica of a variant once every variant holds ``replicas(spec)``
    (always, without an inventory; never on an accelerator type the inventory does not list).

    The shortage ladder asks it of a plan, scale from zero of the cycle's targets: one reading of the inventory.
    """
    if not inventory:
        return lambda spec: True
    used: dict[str, int] = {}
    for spec in specs:
        accelerator = spec.accelerator or ""
        used[accelerator] = used.get(accelerator, 0) + replicas(spec) * spec.accelerator_count

    def has_room(spec: VariantSpec) -> bool:
        accelerator = spec.accelerator or ""
        return accelerator in inventory and inventory[accelerator] - used.get(accelerator, 0) >= spec.accelerator_count

    return has_room


def replica_cost(spec: VariantSpec, accelerator_costs: Mapping[str, AcceleratorCost]) -> float:
    """The one cost of one replica of a variant, used everywhere a cost appears.

    ``spec.variantCost`` when the resource declares it; otherwise the accelerator's unit cost
    (``accelerator-unit-costs``) times ``acceleratorCount``; WVA's default 10.0 only when neither is
    known. ``status.currentAlloc.variantCost`` reports it, the saturation analysis picks the cheapest
    variant to grow by it, and the cycle's table and summary price ``replicas x`` it. The allocation
    MILP prices options with the unit costs, which is the same number unless a resource declares its own.
    """
    if spec.variant_cost is not None:
        return spec.variant_cost
    unit = accelerator_costs.get(spec.accelerator or "")
    if unit is not None:
        return unit.cost * spec.accelerator_count
    return DEFAULT_VARIANT_COST


def model_slos(
    variants: Iterable[VariantAutoscaling], service_classes: Mapping[tuple[str, str], ServiceClass | ConfigError]
) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """(namespace, model) -> its (TTFT, ITL) targets, from each VariantAutoscaling's ``sloClassRef``;
    the highest-priority class wins when a model's variants point at several."""
    chosen: dict[tuple[str, str], tuple[int, float | None, float | None]] = {}
    for va in variants:
        ref = va.spec.slo_class_ref
        entry = service_classes.get((ref.name, ref.key) if ref is not None else ("", ""))
        model = va.spec.model_id
        if not isinstance(entry, ServiceClass):
            continue
        slo = entry.slo_for(model)
        if slo is None:
            continue
        key = (va.metadata.namespace or "default", model)
        if key not in chosen or entry.priority < chosen[key][0]:
            chosen[key] = (entry.priority, slo.ttft_ms, slo.itl_ms)
    return {key: (ttft, itl) for key, (_, ttft, itl) in chosen.items()}


def model_targets(
    variants: Iterable[VariantAutoscaling], service_classes: Mapping[tuple[str, str], ServiceClass | ConfigError]
) -> dict[tuple[str, str], AttainmentTarget]:
    """(namespace, model) -> its SLO attainment target (:mod:`engine.slo.target`): the variants' annotations,
    else the ``slo-attainment`` of the highest-priority service class they point at, else the default.

    A variant whose annotations are invalid is left out here (it is reported invalid by :func:`parse_variant`).
    """
    attainments: dict[tuple[str, str], list[float]] = {}
    windows: dict[tuple[str, str], list[float]] = {}
    classes: dict[tuple[str, str], tuple[int, ServiceClass]] = {}
    for va in variants:
        key = (va.metadata.namespace or "default", va.spec.model_id)
        attainments.setdefault(key, [])
        windows.setdefault(key, [])
        try:
            attainment, window_s = annotated(va.metadata.annotations)
        except TargetError:
            continue
        if attainment is not None:
            attainments[key].append(attainment)
        if window_s is not None:
            windows[key].append(window_s)
        ref = va.spec.slo_class_ref
        entry = service_classes.get((ref.name, ref.key) if ref is not None else ("", ""))
        slo = entry.slo_for(va.spec.model_id) if isinstance(entry, ServiceClass) else None
        if isinstance(entry, ServiceClass) and slo is not None and slo.attainment is not None:
            if key not in classes or entry.priority < classes[key][0]:
                classes[key] = (entry.priority, entry)
    targets: dict[tuple[str, str], AttainmentTarget] = {}
    for key in attainments:
        chosen = classes.get(key)
        slo = chosen[1].slo_for(key[1]) if chosen else None
        targets[key] = resolve_target(
            attainments[key],
            windows[key],
            slo.attainment if slo is not None else None,
            chosen[1].name if chosen else None,
        )
    return targets
