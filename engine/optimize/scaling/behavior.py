"""Behaviour correction: how far a target's replicas may move now, given what was recommended before.

Decides the corrected replica count from a recommendation and the target's history, as Kthena does:

* :func:`correct` -- ``pkg/autoscaler/algorithm/revision.go`` (GetCorrectedInstances), the panic
  bookkeeping of ``pkg/autoscaler/autoscaler/scaler.go``/``status.go`` and the sliding windows of
  ``pkg/autoscaler/datastructure/sliding_window.go``;
* :func:`apply_scale_to_zero` -- ``ModelBackend.scaleToZeroGracePeriod``.

Why explicit state: each flow run is a fresh process, so the windows live in :class:`ScalingState`,
which the flow keeps in ``AutoscalingPolicyBinding.status`` (:meth:`ScalingState.to_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from engine.api.kthena import AutoscalingPolicyBehavior, AutoscalingPolicyPanicPolicy, AutoscalingPolicyStablePolicy
from engine.api.meta import parse_duration as parse_go_duration
from engine.api.meta import parse_time

SELECT_OR = "Or"
SELECT_AND = "And"


# --------------------------------------------------------------------------------------------
# Durations and times
# --------------------------------------------------------------------------------------------


def parse_duration(value: str | int | float | timedelta | None) -> float:
    """Seconds of a duration given as a Go/metav1 string, a number of seconds or a ``timedelta``.

    Strings go to :func:`engine.api.meta.parse_duration` (the one parser, matching the CRDs'
    Duration pattern); numbers are seconds; ``None`` and ``""`` (an unset field) are 0.
    Raises ``ValueError`` on anything else.
    """
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if not value.strip():
        return 0.0
    return parse_go_duration(value)


MAX_POLICY_WINDOW_S = 30 * 60.0
"""The longest period, stabilization window or panic hold Kthena's AutoscalingPolicy webhook admits (30 minutes)."""


def policy_window(value: str | None, default: float, path: str, what: str) -> float:
    """Seconds of a policy's period, window or hold (``default`` when unset). Raises ``ValueError`` naming
    ``path``, in the words of Kthena's admission webhook, when it is longer than 30 minutes: the webhook refuses
    such a policy, so no cluster running Kthena holds one."""
    seconds = default if value is None else parse_duration(value)
    if not 0.0 <= seconds <= MAX_POLICY_WINDOW_S:
        raise ValueError(f"{path}: {what} must be between 0 and 30 minutes, got {value!r}")
    return seconds


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix (fractional seconds only when present)."""
    moment = moment.astimezone(UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# Behaviour
# --------------------------------------------------------------------------------------------


def _get(spec: Mapping[str, Any] | None, key: str, default: Any) -> Any:
    """``spec[key]`` unless absent or null."""
    if not spec:
        return default
    value = spec.get(key)
    return default if value is None else value


@dataclass(frozen=True)
class StablePolicy:
    """AutoscalingPolicyStablePolicy: per-``period`` rate limits and a stabilization window.

    ``instances`` is the absolute change allowed per period, ``percent`` the change relative
    to the replica count at the start of the period; ``select_policy`` ``Or`` allows the
    larger of the two changes, ``And`` the smaller, anything else imposes no limit (Kthena).
    ``period`` 0 disables the rate limit; ``stabilization_window`` 0 disables stabilization.
    Durations are in seconds.
    """

    instances: int = 1
    percent: int = 100
    period: float = 15.0
    select_policy: str = SELECT_OR
    stabilization_window: float = 0.0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, default_window: float = 0.0) -> StablePolicy:
        """Build from the camelCase CRD form, applying the CRD defaults to absent fields."""
        return cls(
            instances=int(_get(spec, "instances", 1)),
            percent=int(_get(spec, "percent", 100)),
            period=parse_duration(_get(spec, "period", 15.0)),
            select_policy=str(_get(spec, "selectPolicy", SELECT_OR)),
            stabilization_window=parse_duration(_get(spec, "stabilizationWindow", default_window)),
        )

    @classmethod
    def from_model(
        cls, policy: AutoscalingPolicyStablePolicy | None, default_window: float = 0.0, path: str = "stablePolicy"
    ) -> StablePolicy:
        """Build from the API model, applying the CRD defaults to absent fields. Raises ``ValueError`` naming
        ``path`` when a period or window is longer than Kthena's webhook allows (:func:`policy_window`)."""
        if policy is None:
            return cls(stabilization_window=default_window)
        return cls(
            instances=1 if policy.instances is None else policy.instances,
            percent=100 if policy.percent is None else policy.percent,
            period=policy_window(policy.period, 15.0, f"{path}.period", "stable policy period"),
            select_policy=SELECT_OR if policy.select_policy is None else policy.select_policy,
            stabilization_window=policy_window(
                policy.stabilization_window,
                default_window,
                f"{path}.stabilizationWindow",
                "stable policy stabilization window",
            ),
        )

    from_dict = from_spec


@dataclass(frozen=True)
class PanicPolicy:
    """AutoscalingPolicyPanicPolicy: fast scale-up when the recommendation surges.

    Panic is entered when ``recommended * 100 >= current * panic_threshold_percent`` and
    held for ``panic_mode_hold`` seconds (re-armed while still triggering); ``None`` threshold
    disables it, as does a hold of 0.  In panic, scale-up is limited to ``percent`` of the
    smallest corrected count within ``period`` (period 0, the default: no limit, as in Kthena
    whose window of length 0 holds no sample) and scale-down is forbidden.
    """

    percent: int = 1000
    period: float = 0.0
    panic_threshold_percent: int | None = 200
    panic_mode_hold: float = 60.0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> PanicPolicy:
        """Build from the camelCase CRD form, applying the CRD defaults to absent fields."""
        return cls(
            percent=int(_get(spec, "percent", 1000)),
            period=parse_duration(_get(spec, "period", 0.0)),
            panic_threshold_percent=int(_get(spec, "panicThresholdPercent", 200)),
            panic_mode_hold=parse_duration(_get(spec, "panicModeHold", 60.0)),
        )

    @classmethod
    def from_model(cls, policy: AutoscalingPolicyPanicPolicy | None, path: str = "panicPolicy") -> PanicPolicy:
        """Build from the API model, applying the CRD defaults to absent fields. Raises ``ValueError`` naming
        ``path`` when its period or hold is longer than Kthena's webhook allows (:func:`policy_window`)."""
        if policy is None:
            return cls()
        return cls(
            percent=1000 if policy.percent is None else policy.percent,
            period=policy_window(policy.period, 0.0, f"{path}.period", "panic policy period"),
            panic_threshold_percent=200 if policy.panic_threshold_percent is None else policy.panic_threshold_percent,
            panic_mode_hold=policy_window(
                policy.panic_mode_hold, 60.0, f"{path}.panicModeHold", "panic policy panic mode hold"
            ),
        )

    from_dict = from_spec


@dataclass(frozen=True)
class Behavior:
    """AutoscalingPolicyBehavior with Kthena's defaults.

    Defaults: stable policies ``instances 1, percent 100, period 15s, selectPolicy Or``;
    stabilization windows 0 for scale-up and 5m for scale-down (Kthena's mutating webhook);
    panic ``percent 1000, panicThresholdPercent 200, panicModeHold 60s, period 0``.
    """

    scale_up: StablePolicy = field(default_factory=StablePolicy)
    scale_down: StablePolicy = field(default_factory=lambda: StablePolicy(stabilization_window=300.0))
    panic: PanicPolicy = field(default_factory=PanicPolicy)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> Behavior:
        """Build from ``spec.behavior`` (camelCase: ``scaleUp.stablePolicy``, ``scaleUp.panicPolicy``, ``scaleDown``)."""
        spec = spec or {}
        scale_up = spec.get("scaleUp") or {}
        return cls(
            scale_up=StablePolicy.from_spec(scale_up.get("stablePolicy"), default_window=0.0),
            scale_down=StablePolicy.from_spec(spec.get("scaleDown"), default_window=300.0),
            panic=PanicPolicy.from_spec(scale_up.get("panicPolicy")),
        )

    @classmethod
    def from_model(cls, behavior: AutoscalingPolicyBehavior | None) -> Behavior:
        """Build from an AutoscalingPolicy's ``spec.behavior`` as its API model."""
        scale_up = behavior.scale_up if behavior is not None else None
        return cls(
            scale_up=StablePolicy.from_model(
                scale_up.stable_policy if scale_up else None, 0.0, "spec.behavior.scaleUp.stablePolicy"
            ),
            scale_down=StablePolicy.from_model(
                behavior.scale_down if behavior else None, 300.0, "spec.behavior.scaleDown"
            ),
            panic=PanicPolicy.from_model(
                scale_up.panic_policy if scale_up else None, "spec.behavior.scaleUp.panicPolicy"
            ),
        )

    from_dict = from_spec

    def horizon(self) -> float:
        """Longest window or period in seconds: history older than this (x2 for the last sample) is useless."""
        return max(
            self.scale_up.period,
            self.scale_up.stabilization_window,
            self.scale_down.period,
            self.scale_down.stabilization_window,
            self.panic.period,
            0.0,
        )


# --------------------------------------------------------------------------------------------
# Serializable state
# --------------------------------------------------------------------------------------------


class Sample(NamedTuple):
    """One evaluation: when, what the metrics recommended, what was applied after correction."""

    time: datetime
    recommended: int
    corrected: int


def _as_sample(item: Any) -> Sample:
    """Accept a Sample, a ``(time, recommended, corrected)`` tuple or a ``{time, recommended, corrected}`` dict."""
    if isinstance(item, Mapping):
        return Sample(parse_time(item["time"]), int(item["recommended"]), int(item["corrected"]))
    time, recommended, corrected = item
    return Sample(parse_time(time), int(recommended), int(corrected))


@dataclass
class ScalingState:
    """Window state of one autoscaling target, persisted between evaluations.

    ``history`` holds the past samples (oldest first), ``panic_mode_end`` when panic mode
    ends (``None``: not in panic), ``zero_since`` since when the recommendation has been 0
    (for the scale-to-zero grace period).  Functions never mutate a state: they return a new one.
    """

    history: list[Sample] = field(default_factory=list)
    panic_mode_end: datetime | None = None
    zero_since: datetime | None = None

    def __post_init__(self) -> None:
        self.history = sorted((_as_sample(item) for item in self.history), key=lambda s: s.time)
        if self.panic_mode_end is not None:
            self.panic_mode_end = parse_time(self.panic_mode_end)
        if self.zero_since is not None:
            self.zero_since = parse_time(self.zero_since)

    def to_dict(self) -> dict[str, Any]:
        """camelCase, RFC 3339 form for ``AutoscalingPolicyBinding.status``."""
        return {
            "history": [
                {"time": format_time(s.time), "recommended": s.recommended, "corrected": s.corrected}
                for s in self.history
            ],
            "panicModeEnd": format_time(self.panic_mode_end) if self.panic_mode_end else None,
            "zeroSince": format_time(self.zero_since) if self.zero_since else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ScalingState:
        """Inverse of :meth:`to_dict`; missing keys give an empty state."""
        data = data or {}
        return cls(
            history=[_as_sample(item) for item in data.get("history") or []],
            panic_mode_end=parse_time(data["panicModeEnd"]) if data.get("panicModeEnd") else None,
            zero_since=parse_time(data["zeroSince"]) if data.get("zeroSince") else None,
        )


def initialize_state(current: int, now: datetime, state: ScalingState | None = None) -> ScalingState:
    """Record ``current`` as if it had just been recommended and applied (Kthena's InitializeWithCurrentReplicas).

    Why: right after (re)start the stabilization windows are empty, so a single low sample
    could scale down at once; seeding them with the current count makes a new controller
    wait for a full window first, like a controller that has been watching all along.
    """
    state = state or ScalingState()
    return ScalingState(
        history=[*state.history, Sample(now, current, current)],
        panic_mode_end=state.panic_mode_end,
        zero_since=state.zero_since,
    )


# --------------------------------------------------------------------------------------------
# Windows over the history (equivalent to Kthena's sliding windows)
# --------------------------------------------------------------------------------------------


def _seconds(delta: timedelta) -> float:
    return delta.total_seconds()


def _window_recommendations(history: Sequence[Sample], window: float, now: datetime) -> list[int]:
    """Recommendations recorded within the last ``window`` seconds (inclusive); none when window is 0."""
    if window <= 0:
        return []
    return [s.recommended for s in history if _seconds(now - s.time) <= window]


def _window_corrected(history: Sequence[Sample], period: float, now: datetime) -> list[int]:
    """Corrected counts that were in effect at some time within the last ``period`` seconds.

    A corrected count stays in effect until the next sample (a "line chart"); a count is
    dropped when it stopped being in effect more than ``period`` ago, and a last count is
    forgotten after ``2 * period`` without a new sample (Kthena's drifting value).
    """
    values = []
    for index, sample in enumerate(history):
        if index + 1 < len(history):
            ended = history[index + 1].time
            if _seconds(ended - sample.time) <= 2 * period and _seconds(now - ended) <= period:
                values.append(sample.corrected)
        elif _seconds(now - sample.time) <= 2 * period:
            values.append(sample.corrected)
    return values


def _past_low(history: Sequence[Sample], period: float, current: int, now: datetime) -> int:
    """Smallest count in effect within ``period`` (including current): base of the panic limit."""
    return min([current, *_window_corrected(history, period, now)])


# --------------------------------------------------------------------------------------------
# Correction
# --------------------------------------------------------------------------------------------


def is_panic(state: ScalingState, now: datetime) -> bool:
    """Whether ``now`` is within panic mode (inclusive of its end)."""
    return state.panic_mode_end is not None and now <= state.panic_mode_end


def _refresh_panic(
    current: int, recommended: int, panic: PanicPolicy, state: ScalingState, now: datetime
) -> datetime | None:
    """New panic end: re-armed to ``now + hold`` while ``recommended >= current * threshold%``."""
    threshold = panic.panic_threshold_percent
    if threshold is None or recommended * 100 < current * threshold:
        return state.panic_mode_end
    if panic.panic_mode_hold <= 0:
        return None
    return now + timedelta(seconds=panic.panic_mode_hold)


def _stable_limit(policy: StablePolicy, base: int, up: bool) -> float:
    """Farthest count reachable from ``base`` under a stable policy, upwards (``up``) or downwards: ``base`` moved
    by ``instances`` or by ``percent`` of it, the farther of the two for ``Or``, the nearer for ``And``."""
    sign = 1 if up else -1
    absolute = base + sign * policy.instances
    relative = base + sign * (base * policy.percent // 100)
    if policy.select_policy == SELECT_OR:
        return max(absolute, relative) if up else min(absolute, relative)
    if policy.select_policy == SELECT_AND:
        return min(absolute, relative) if up else max(absolute, relative)
    return sign * math.inf


def _correct_panic(current: int, recommended: int, behavior: Behavior, history: Sequence[Sample], now: datetime) -> int:
    """Panic: scale up by at most ``percent`` of the lowest count within the panic period, never down.

    Like Kthena's ``MinCorrectedForPanic`` window, a period of 0 (the default) is an empty window:
    there is no base, hence no panic limit at all (not a limit relative to the current count).
    """
    corrected = recommended
    panic = behavior.panic
    if panic.period > 0:
        base = _past_low(history, panic.period, current, now)
        if base > 0:
            corrected = min(corrected, base + int(base * panic.percent / 100.0))
    return max(corrected, current)


def _correct_stable(
    current: int, recommended: int, policy: StablePolicy, history: Sequence[Sample], now: datetime
) -> int:
    """Stable scale-up (scale-down), one rule and its mirror: the lowest (highest) recommendation in the
    stabilization window, then the per-period rate limit from the lowest (highest) count in effect within the
    period; never below (above) ``current``."""
    up = recommended > current
    cautious = min if up else max
    corrected = cautious([recommended, *_window_recommendations(history, policy.stabilization_window, now)])
    if policy.period > 0:
        base = cautious([current, *_window_corrected(history, policy.period, now)])
        corrected = int(cautious(corrected, _stable_limit(policy, base, up)))
    return max(corrected, current) if up else min(corrected, current)


def _prune(history: Sequence[Sample], horizon: float, now: datetime) -> list[Sample]:
    """Drop samples that no window or period can see any more."""
    kept = []
    for index, sample in enumerate(history):
        if index + 1 < len(history):
            if _seconds(now - history[index + 1].time) <= horizon:
                kept.append(sample)
        elif _seconds(now - sample.time) <= 2 * horizon:
            kept.append(sample)
    return kept


def correct(
    current: int,
    recommended: int,
    behavior: Behavior | None,
    state: ScalingState | None,
    now: datetime,
    *,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
) -> tuple[int, ScalingState]:
    """Apply the scaling behaviour to a recommendation; returns ``(corrected, new_state)``.

    1. Panic bookkeeping: ``recommended * 100 >= current * panicThresholdPercent`` (re)arms
       panic until ``now + panicModeHold``.
    2. In panic: ``min(recommended, base + base * panic.percent / 100)`` with base the lowest
       count in effect within the panic period (period 0 or base 0: no limit), never below
       ``current``.
    3. Otherwise, if ``recommended > current``: the minimum recommendation within the scale-up
       stabilization window (earlier samples; 0 window: none), limited per period to
       ``base + instances`` / ``base + base * percent / 100`` (Or: the larger, And: the
       smaller) with base the lowest count in effect within the period; never below current.
    4. If ``recommended < current``: the maximum recommendation within the scale-down window,
       limited to ``base - instances`` / ``base - base * percent / 100`` (Or: the lower,
       And: the higher) with base the highest count in effect within the period; never above current.
    5. Clamp to ``[min_replicas, max_replicas]`` when given; append the sample and prune.
    """
    behavior = behavior or Behavior()
    state = state or ScalingState()
    history = state.history
    panic_end = _refresh_panic(current, recommended, behavior.panic, state, now)
    in_panic = panic_end is not None and now <= panic_end
    if in_panic:
        corrected = _correct_panic(current, recommended, behavior, history, now)
    elif recommended > current:
        corrected = _correct_stable(current, recommended, behavior.scale_up, history, now)
    elif recommended < current:
        corrected = _correct_stable(current, recommended, behavior.scale_down, history, now)
    else:
        corrected = recommended
    if min_replicas is not None:
        corrected = max(corrected, min_replicas)
    if max_replicas is not None:
        corrected = min(corrected, max_replicas)
    corrected = max(corrected, 0)
    new_history = _prune([*history, Sample(now, recommended, corrected)], behavior.horizon(), now)
    if panic_end is not None and now > panic_end:
        panic_end = None
    return corrected, ScalingState(history=new_history, panic_mode_end=panic_end, zero_since=state.zero_since)


# --------------------------------------------------------------------------------------------
# Scale to zero
# --------------------------------------------------------------------------------------------


def apply_scale_to_zero(
    target: int,
    state: ScalingState | None,
    grace_period_s: float | str | timedelta | None,
    now: datetime,
    *,
    current: int | None = None,
) -> tuple[int, ScalingState]:
    """Honour ``ModelBackend.scaleToZeroGracePeriod``: reach 0 only after a full grace period at 0.

    While the target is 0 for less than the grace period the result holds at 1; once it has
    been 0 continuously for the grace period (inclusive) the result is 0.  Any positive
    target resets the clock.  A backend already at 0 (``current == 0``) stays at 0.  A grace
    period of 0 (or ``None``) lets the target through at once.
    """
    state = state or ScalingState()
    grace = parse_duration(grace_period_s)

    def with_zero(zero_since: datetime | None) -> ScalingState:
        return ScalingState(history=list(state.history), panic_mode_end=state.panic_mode_end, zero_since=zero_since)

    if target > 0:
        return target, with_zero(None)
    since = state.zero_since or now
    if current == 0 or grace <= 0 or _seconds(now - since) >= grace:
        return 0, with_zero(since)
    return 1, with_zero(since)
