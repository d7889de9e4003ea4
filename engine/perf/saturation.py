"""Saturation analysis and hybrid arbitration for a model's variants (WVA saturation analyzer).

Why: model-based (queueing) targets react to the arrival rate, but only live KV-cache and
queue metrics show that replicas are about to run out of room.  This module is the fast,
reactive guardrail from llm-d's workload-variant-autoscaler (``internal/saturation/analyzer.go``):

1. a replica is *saturated* when ``kv_cache_usage >= kvCacheThreshold`` or
   ``queue_length >= queueLengthThreshold``;
2. the average spare capacity (threshold - usage) over the non-saturated replicas of all
   variants of a model is compared with the spare triggers: scale up when
   ``avg_spare_kv < kvSpareTrigger`` or ``avg_spare_queue < queueSpareTrigger``;
3. scale-down is *safe* only with at least two non-saturated replicas and when the load of
   those replicas, redistributed over one fewer replica, still leaves spare capacity at or
   above both triggers;
4. saturation targets move one replica at a time: +1 on the cheapest variant, -1 on the most
   expensive variant that has more than one replica (ties broken by name);
5. arbitration against a model-based target per variant (the hybrid decision matrix).

Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

import yaml

from engine import yaml11
from engine.errors import shown

__all__ = [
    "ACTION_NO_CHANGE",
    "ACTION_SCALE_DOWN",
    "ACTION_SCALE_UP",
    "CONFIGMAP_NAME",
    "DEFAULT_VARIANT_COST",
    "MIN_NON_SATURATED_REPLICAS_FOR_SCALE_DOWN",
    "REASON_METRICS_AVAILABLE",
    "REASON_METRICS_UNAVAILABLE",
    "REASON_OPTIMIZATION_SUCCEEDED",
    "REASON_SATURATION_ONLY",
    "REASON_SAFETY_OVERRIDE",
    "Decision",
    "ModelAnalysis",
    "ReplicaMetrics",
    "SaturationConfig",
    "SaturationConfigSet",
    "VariantAnalysis",
    "VariantState",
    "analyze",
    "analyze_model",
    "arbitrate",
    "arbitrate_all",
    "config_for",
    "direction",
    "is_saturated",
    "is_scale_down_safe",
    "metrics_condition",
    "parse_saturation_config",
    "saturation_targets",
    "should_scale_up",
]

CONFIGMAP_NAME = "saturation-scaling-config"
"""Name of the WVA ConfigMap holding the ``default`` entry and per-model overrides."""

DEFAULT_VARIANT_COST = 10.0
"""``spec.variantCost`` default of a VariantAutoscaling (seed 001)."""

MIN_NON_SATURATED_REPLICAS_FOR_SCALE_DOWN = 2
"""Below this many non-saturated replicas a removal cannot be redistributed safely."""

REASON_OPTIMIZATION_SUCCEEDED = "OptimizationSucceeded"
REASON_SATURATION_ONLY = "SaturationOnlyMode"
REASON_SAFETY_OVERRIDE = "SaturationSafetyOverride"
REASON_METRICS_AVAILABLE = "MetricsAvailable"
REASON_METRICS_UNAVAILABLE = "MetricsUnavailable"

ACTION_SCALE_UP: Final = "scale-up"
ACTION_SCALE_DOWN: Final = "scale-down"
ACTION_NO_CHANGE: Final = "no-change"

Action = Literal["scale-up", "scale-down", "no-change"]

# camelCase ConfigMap keys -> dataclass field names.
_CONFIG_KEYS: dict[str, str] = {
    "kvCacheThreshold": "kv_cache_threshold",
    "queueLengthThreshold": "queue_length_threshold",
    "kvSpareTrigger": "kv_spare_trigger",
    "queueSpareTrigger": "queue_spare_trigger",
}


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SaturationConfig:
    """Thresholds of the saturation analyzer (WVA defaults: 0.80, 5, 0.1, 3).

    ``kv_cache_threshold`` and ``kv_spare_trigger`` are fractions in [0, 1];
    ``queue_length_threshold`` and ``queue_spare_trigger`` are request counts (>= 0).
    """

    kv_cache_threshold: float = 0.80
    queue_length_threshold: float = 5
    kv_spare_trigger: float = 0.1
    queue_spare_trigger: float = 3

    def validate(self) -> None:
        """Raise ``ValueError`` when the thresholds break WVA's validation rules.

        Rules: both KV values in [0, 1], both queue values >= 0, and
        ``kv_cache_threshold >= kv_spare_trigger``.
        """
        for name in ("kv_cache_threshold", "kv_spare_trigger"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be between 0 and 1, got {shown(value)}")
        for name in ("queue_length_threshold", "queue_spare_trigger"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be >= 0, got {shown(value)}")
        if self.kv_cache_threshold < self.kv_spare_trigger:
            raise ValueError(
                f"kvCacheThreshold ({self.kv_cache_threshold}) must be >= kvSpareTrigger ({self.kv_spare_trigger})"
            )

    def described(self) -> str:
        """The thresholds as the ConfigMap spells them: ``kvCacheThreshold=0.8, queueLengthThreshold=5, ...``."""
        return ", ".join(f"{key}={getattr(self, name):g}" for key, name in _CONFIG_KEYS.items())

    def merged(self, values: Mapping[str, Any]) -> SaturationConfig:
        """Return a copy with the camelCase (or snake_case) keys present in ``values`` replaced.

        Why: per-model overrides only carry the fields they change; the rest is inherited
        from the ``default`` entry.  Unknown keys (``model_id``, ``namespace``, ...) are ignored.
        """
        changes: dict[str, float] = {}
        for key, value in values.items():
            name = _CONFIG_KEYS.get(key, key if key in _CONFIG_KEYS.values() else None)
            if name is None or value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ValueError(f"{key} must be a number, got {shown(value)}")
            changes[name] = float(value)
        return replace(self, **changes)

    def to_dict(self) -> dict[str, float]:
        """The ConfigMap (camelCase) form of this configuration."""
        return {camel: getattr(self, snake) for camel, snake in _CONFIG_KEYS.items()}


@dataclass(frozen=True)
class SaturationConfigSet:
    """The parsed ``saturation-scaling-config`` ConfigMap: a default plus per-model overrides.

    ``overrides`` maps ``(model_id, namespace)`` to the merged configuration; ``errors``
    lists the entries that were skipped (WVA logs and skips invalid entries).
    """

    default: SaturationConfig = field(default_factory=SaturationConfig)
    overrides: Mapping[tuple[str, str], SaturationConfig] = field(default_factory=dict)
    errors: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """One line per error of the ConfigMap, each naming the thresholds used instead (the run is degraded
        by them: a threshold a person set and Modelplane ignored is never silent)."""
        defaults = self.default.described()
        lines = []
        for error in self.errors:
            used = (
                f"using the built-in defaults {defaults}"
                if error.startswith("default:")
                else f"that override is skipped: its model uses the default {defaults}"
            )
            lines.append(f"ConfigMap {CONFIGMAP_NAME}: {error}; {used}")
        return lines

    def config_for(self, model: str, namespace: str) -> SaturationConfig:
        """Configuration for ``model`` in ``namespace``: its override if any, else the default."""
        return self.overrides.get((model, namespace), self.default)

    @classmethod
    def from_configmap(cls, data: Mapping[str, Any] | None) -> SaturationConfigSet:
        """Alias of :func:`parse_saturation_config`."""
        return parse_saturation_config(data)


def _load_entry(raw: Any) -> Mapping[str, Any]:
    """Decode one ConfigMap value (a YAML string, or an already decoded mapping)."""
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, (str, bytes)):
        loaded = yaml11.safe_load(raw)
        if loaded is None:
            return {}
        if not isinstance(loaded, Mapping):
            raise ValueError("entry is not a YAML mapping")
        return loaded
    raise ValueError(f"unsupported entry type {type(raw).__name__}")


def parse_saturation_config(data: Mapping[str, Any] | None) -> SaturationConfigSet:
    """Parse the ``data`` of the ``saturation-scaling-config`` ConfigMap.

    Format (WVA): key ``default`` holds the global thresholds as YAML with camelCase keys;
    every other key is a free-form name whose YAML value carries ``model_id`` and
    ``namespace`` plus the fields it overrides.  Missing ConfigMap, missing or invalid
    ``default`` -> the built-in defaults; invalid or incomplete overrides are skipped and
    reported in ``errors``.  Overrides inherit unspecified fields from the (valid) default.
    """
    data = data or {}
    errors: list[str] = []
    default = SaturationConfig()
    if "default" in data:
        try:
            candidate = SaturationConfig().merged(_load_entry(data["default"]))
            candidate.validate()
            default = candidate
        except (ValueError, TypeError, yaml.YAMLError) as exc:
            errors.append(f"default: {exc}")
    overrides: dict[tuple[str, str], SaturationConfig] = {}
    for key in sorted(k for k in data if k != "default"):
        try:
            entry = _load_entry(data[key])
            model = entry.get("model_id") or entry.get("modelID") or entry.get("modelId")
            namespace = entry.get("namespace")
            if not model or not namespace:
                raise ValueError("override must set model_id and namespace")
            config = default.merged(entry)
            config.validate()
        except (ValueError, TypeError, yaml.YAMLError) as exc:
            errors.append(f"{key}: {exc}")
            continue
        overrides[(str(model), str(namespace))] = config
    return SaturationConfigSet(default=default, overrides=overrides, errors=tuple(errors))


def config_for(configs: SaturationConfigSet | Mapping[str, Any] | None, model: str, namespace: str) -> SaturationConfig:
    """Configuration for ``model``/``namespace`` from a parsed set or raw ConfigMap data."""
    if not isinstance(configs, SaturationConfigSet):
        configs = parse_saturation_config(configs)
    return configs.config_for(model, namespace)


# --------------------------------------------------------------------------------------------
# Analysis
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaMetrics:
    """Live metrics of one replica (pod): ``vllm:kv_cache_usage_perc`` (0..1) and ``vllm:num_requests_waiting``."""

    pod: str
    variant: str
    kv_cache_usage: float
    queue_length: float


@dataclass(frozen=True)
class VariantAnalysis:
    """Saturation figures of one variant's replicas."""

    variant: str
    replica_count: int
    non_saturated_count: int
    saturated_replicas: tuple[str, ...]
    avg_spare_kv: float
    avg_spare_queue: float
    max_kv_cache_usage: float
    max_queue_length: float


@dataclass(frozen=True)
class ModelAnalysis:
    """Saturation figures of a model across all its variants, plus the two verdicts."""

    model: str
    namespace: str
    total_replicas: int
    non_saturated_count: int
    saturated_replicas: tuple[str, ...]
    avg_spare_kv: float
    avg_spare_queue: float
    should_scale_up: bool
    scale_up_reason: str
    scale_down_safe: bool
    variants: Mapping[str, VariantAnalysis]


def is_saturated(replica: ReplicaMetrics, config: SaturationConfig) -> bool:
    """A replica is saturated when its KV usage or its queue reaches the threshold (``>=``)."""
    return replica.kv_cache_usage >= config.kv_cache_threshold or replica.queue_length >= config.queue_length_threshold


def _analyze_variant(variant: str, replicas: Sequence[ReplicaMetrics], config: SaturationConfig) -> VariantAnalysis:
    """Spare capacity averaged over the variant's non-saturated replicas."""
    saturated = [r.pod for r in replicas if is_saturated(r, config)]
    healthy = [r for r in replicas if not is_saturated(r, config)]
    count = len(healthy)
    spare_kv = sum(config.kv_cache_threshold - r.kv_cache_usage for r in healthy)
    spare_queue = sum(config.queue_length_threshold - r.queue_length for r in healthy)
    return VariantAnalysis(
        variant=variant,
        replica_count=len(replicas),
        non_saturated_count=count,
        saturated_replicas=tuple(saturated),
        avg_spare_kv=spare_kv / count if count else 0.0,
        avg_spare_queue=spare_queue / count if count else 0.0,
        max_kv_cache_usage=max((r.kv_cache_usage for r in replicas), default=0.0),
        max_queue_length=max((r.queue_length for r in replicas), default=0.0),
    )


def should_scale_up(avg_spare_kv: float, avg_spare_queue: float, config: SaturationConfig) -> tuple[bool, str]:
    """Scale-up signal: average spare KV ``<`` kvSpareTrigger OR average spare queue ``<`` queueSpareTrigger."""
    kv = avg_spare_kv < config.kv_spare_trigger
    queue = avg_spare_queue < config.queue_spare_trigger
    if kv and queue:
        return True, (
            f"both KV spare ({avg_spare_kv:.3f} < {config.kv_spare_trigger:.3f}) and "
            f"queue spare ({avg_spare_queue:.1f} < {config.queue_spare_trigger:.1f})"
        )
    if kv:
        return True, f"KV spare capacity low ({avg_spare_kv:.3f} < {config.kv_spare_trigger:.3f})"
    if queue:
        return True, f"queue spare capacity low ({avg_spare_queue:.1f} < {config.queue_spare_trigger:.1f})"
    return False, ""


def is_scale_down_safe(
    non_saturated_count: int, avg_spare_kv: float, avg_spare_queue: float, config: SaturationConfig
) -> bool:
    """Whether removing one replica keeps enough headroom (WVA's redistribution simulation).

    Needs at least two non-saturated replicas.  The average load (threshold - spare) grows
    by N/(N-1) when one of N replicas goes; the spare left must stay ``>=`` both triggers.
    """
    if non_saturated_count < MIN_NON_SATURATED_REPLICAS_FOR_SCALE_DOWN:
        return False
    factor = non_saturated_count / (non_saturated_count - 1)
    kv_after = config.kv_cache_threshold - (config.kv_cache_threshold - avg_spare_kv) * factor
    queue_after = config.queue_length_threshold - (config.queue_length_threshold - avg_spare_queue) * factor
    return kv_after >= config.kv_spare_trigger and queue_after >= config.queue_spare_trigger


def analyze_model(
    replicas: Iterable[ReplicaMetrics],
    config: SaturationConfig | None = None,
    model: str = "",
    namespace: str = "",
) -> ModelAnalysis:
    """Analyse all replicas of all variants of one model.

    With no replicas at all nothing is known: no scale-up and scale-down not safe (WVA).
    With replicas but none non-saturated, the average spare is 0, so scale-up fires.
    """
    config = config or SaturationConfig()
    replicas = list(replicas)
    by_variant: dict[str, list[ReplicaMetrics]] = {}
    for replica in replicas:
        by_variant.setdefault(replica.variant, []).append(replica)
    variants = {name: _analyze_variant(name, by_variant[name], config) for name in sorted(by_variant)}
    if not replicas:
        return ModelAnalysis(model, namespace, 0, 0, (), 0.0, 0.0, False, "", False, variants)
    count = sum(v.non_saturated_count for v in variants.values())
    spare_kv = sum(v.avg_spare_kv * v.non_saturated_count for v in variants.values())
    spare_queue = sum(v.avg_spare_queue * v.non_saturated_count for v in variants.values())
    avg_kv = spare_kv / count if count else 0.0
    avg_queue = spare_queue / count if count else 0.0
    up, reason = should_scale_up(avg_kv, avg_queue, config)
    return ModelAnalysis(
        model=model,
        namespace=namespace,
        total_replicas=len(replicas),
        non_saturated_count=count,
        saturated_replicas=tuple(p for v in variants.values() for p in v.saturated_replicas),
        avg_spare_kv=avg_kv,
        avg_spare_queue=avg_queue,
        should_scale_up=up,
        scale_up_reason=reason,
        scale_down_safe=is_scale_down_safe(count, avg_kv, avg_queue, config),
        variants=variants,
    )


analyze = analyze_model
"""Short alias of :func:`analyze_model`."""


def metrics_condition(analysis: ModelAnalysis) -> tuple[str, str]:
    """``(reason, message)`` of the ``MetricsAvailable`` condition for this analysis (seed 001)."""
    if analysis.total_replicas > 0:
        return REASON_METRICS_AVAILABLE, "Saturation metrics data is available for scaling decisions"
    return REASON_METRICS_UNAVAILABLE, "No saturation metrics available"


# --------------------------------------------------------------------------------------------
# Saturation targets across variants
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantState:
    """What the decision needs to know about one variant (a VariantAutoscaling).

    ``cost`` is ``spec.variantCost`` (default 10.0).  ``min_replicas``/``max_replicas`` clamp
    the saturation target when given.  ``desired_replicas`` (the last target; None or 0 =
    unset) and ``pending_replicas`` (current - ready) carry WVA's anti-cascade rules: either
    one puts the whole model in transition, and no saturation move is made.
    """

    name: str
    cost: float = DEFAULT_VARIANT_COST
    current_replicas: int = 0
    min_replicas: int | None = None
    max_replicas: int | None = None
    desired_replicas: int | None = None
    pending_replicas: int = 0


def _has_desired(state: VariantState) -> bool:
    """WVA treats a desired count of 0 as "not set"."""
    return bool(state.desired_replicas) and state.desired_replicas != state.current_replicas


def _converging_to(state: VariantState) -> int:
    """The replicas a variant is converging to: its desired count while it differs, else the current one."""
    desired = state.desired_replicas
    return desired if desired and desired != state.current_replicas else state.current_replicas


def _in_transition(states: Sequence[VariantState]) -> bool:
    """A variant still converging (desired != current, or pending replicas) blocks the whole model."""
    return any(_has_desired(s) or s.pending_replicas > 0 for s in states)


def _clamp(state: VariantState, target: int) -> int:
    """Apply the variant's bounds after the move (a max of 0 or less means unbounded, as in WVA)."""
    if state.min_replicas is not None and target < state.min_replicas:
        target = state.min_replicas
    if state.max_replicas is not None and state.max_replicas > 0 and target > state.max_replicas:
        target = state.max_replicas
    return target


def saturation_targets(analysis: ModelAnalysis, variants: Iterable[VariantState]) -> dict[str, int]:
    """Per-variant saturation targets: one replica more or less, chosen by cost (WVA CalculateSaturationTargets).

    * No metrics at all: every variant keeps its current count.
    * Model in transition (any variant with a non-zero desired count different from its
      current count, or with pending replicas): nothing moves; a variant in transition
      keeps its desired count, the others their current count.
    * Scale-up: +1 on the cheapest variant without pending replicas (ties: alphabetically
      first name).
    * Otherwise, when scale-down is safe: -1 on the most expensive variant with more than
      one replica (ties: alphabetically last name, as WVA's comparison does).
    * Finally each target is clamped to the variant's min/max (after the choice, as WVA does).
    """
    states = list(variants)
    if analysis.total_replicas == 0:
        return {s.name: s.current_replicas for s in states}
    if _in_transition(states):
        return {s.name: _converging_to(s) for s in states}
    targets = {s.name: s.current_replicas for s in states}
    if analysis.should_scale_up:
        grow = [s for s in states if s.pending_replicas <= 0]
        if grow:
            chosen = min(grow, key=lambda s: (s.cost, s.name))
            targets[chosen.name] += 1
    elif analysis.scale_down_safe:
        shrink = [s for s in states if s.current_replicas > 1]
        if shrink:
            chosen = max(shrink, key=lambda s: (s.cost, s.name))
            targets[chosen.name] -= 1
    return {s.name: _clamp(s, targets[s.name]) for s in states}


capacity_targets = saturation_targets
"""Alias of :func:`saturation_targets`."""


# --------------------------------------------------------------------------------------------
# Arbitration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """The outcome for one variant: target replicas, condition reason and message, action."""

    target: int
    reason: str
    message: str
    action: Action


def direction(current: int, target: int) -> Action:
    """``scale-up``, ``scale-down`` or ``no-change`` from ``current`` to ``target``."""
    if target > current:
        return ACTION_SCALE_UP
    if target < current:
        return ACTION_SCALE_DOWN
    return ACTION_NO_CHANGE


def _current_of(current: int | VariantState) -> int:
    """Accept a replica count or a :class:`VariantState`."""
    return current.current_replicas if isinstance(current, VariantState) else int(current)


def _safe_of(scale_down_safe: bool | ModelAnalysis | None) -> bool:
    """Accept a boolean or a :class:`ModelAnalysis`; ``None`` (no analysis) does not block."""
    if isinstance(scale_down_safe, ModelAnalysis):
        return scale_down_safe.scale_down_safe
    return True if scale_down_safe is None else bool(scale_down_safe)


def arbitrate(
    current: int | VariantState,
    saturation_target: int,
    model_target: int | None = None,
    scale_down_safe: bool | ModelAnalysis | None = True,
) -> Decision:
    """Combine the saturation target and the model-based target of one variant.

    WVA's hybrid matrix (``ArbitrateWithModelBased``), in order:

    * no model-based target (no performance profile / SLO): the saturation target,
      reason ``SaturationOnlyMode``;
    * saturation wants up while the model wants down: veto, hold current,
      ``SaturationSafetyOverride``;
    * the model wants down while scale-down is unsafe: block, hold current,
      ``SaturationSafetyOverride``;
    * saturation wants up and the model wants no change: the saturation target;
    * the model wants up or down: the model-based target;
    * otherwise no change.  The last three use ``OptimizationSucceeded`` ("Hybrid mode").
    """
    cur = _current_of(current)
    if model_target is None:
        action = direction(cur, saturation_target)
        return Decision(
            saturation_target,
            REASON_SATURATION_ONLY,
            f"Saturation-only mode: {action} decision (target: {saturation_target} replicas)",
            action,
        )
    sat_action = direction(cur, saturation_target)
    model_action = direction(cur, model_target)
    if sat_action == ACTION_SCALE_UP and model_action == ACTION_SCALE_DOWN:
        return Decision(
            cur,
            REASON_SAFETY_OVERRIDE,
            f"Saturation safety override: model-based scale-down to {model_target} vetoed, "
            f"saturation needs scale-up to {saturation_target}, holding {cur} replicas",
            ACTION_NO_CHANGE,
        )
    if model_action == ACTION_SCALE_DOWN and not _safe_of(scale_down_safe):
        return Decision(
            cur,
            REASON_SAFETY_OVERRIDE,
            f"Saturation safety override: model-based scale-down to {model_target} blocked, holding {cur} replicas",
            ACTION_NO_CHANGE,
        )
    if sat_action == ACTION_SCALE_UP and model_action == ACTION_NO_CHANGE:
        target = saturation_target
    elif model_action in (ACTION_SCALE_UP, ACTION_SCALE_DOWN):
        target = model_target
    else:
        target = cur
    action = direction(cur, target)
    return Decision(
        target,
        REASON_OPTIMIZATION_SUCCEEDED,
        f"Hybrid mode: {action} decision (target: {target} replicas)",
        action,
    )


def arbitrate_all(
    analysis: ModelAnalysis,
    variants: Iterable[VariantState],
    model_targets: Mapping[str, int] | None = None,
) -> dict[str, Decision]:
    """Saturation targets for all variants, each arbitrated against its model-based target.

    ``model_targets`` is ``None`` (or lacks a variant) when there is no model-based target:
    that variant is decided in saturation-only mode.
    """
    states = list(variants)
    sat = saturation_targets(analysis, states)
    model_targets = model_targets or {}
    return {s.name: arbitrate(s, sat[s.name], model_targets.get(s.name), analysis.scale_down_safe) for s in states}
