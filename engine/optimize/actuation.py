"""Actuation modes: who moves a target's replicas once the optimizer has decided them.

Modes (``modelplane.io/actuation`` on a VariantAutoscaling or an AutoscalingPolicyBinding; the
cluster-wide default is the key ``actuation-mode`` of the optional ConfigMap
``modelplane-optimizer-config`` in the config namespace; without either, ``scale``):

* ``scale`` (today's behaviour): Modelplane writes the target's scale subresource.
* ``metrics``: Modelplane never writes the scale subresource; it publishes the desired replicas as
  WVA's ``wva_desired_replicas`` family to a Prometheus Pushgateway and an HPA (prometheus-adapter)
  or a KEDA ScaledObject scales the target, so one scaler owns each Deployment and the cluster's
  guard rails (HPA behavior, min/max) stay in force.
* ``both``: writes the scale subresource *and* publishes (migration: the HPA is installed and agrees
  before Modelplane stops scaling).
* ``recommend``: neither scales nor counts a publication as actuation (advice only).

Why an annotation first and a ConfigMap default: the mode belongs to the object it concerns (a
migration moves one variant at a time, ``kubectl annotate`` flips it, GitOps keeps it beside the
variant, and it is the same opt-in Modelplane already had for ``recommend``); a WVA installation that
moves wholesale sets the default once instead of annotating every resource. An unknown annotation
value makes that resource invalid (a condition naming the annotation, nothing scaled); an unknown
ConfigMap value is a configuration error and falls back to ``recommend``, never to ``scale``: a typo
meant as ``metrics`` must not make Modelplane fight the HPA.

``status.actuation.applied`` follows WVA exactly: WVA sets it to true once it has emitted the
desired-replicas signal for the external autoscaler (and, before it handed scaling to HPA, once it had
scaled the target). So: ``scale`` -> the scale write succeeded or none was needed; ``metrics`` -> the
desired replicas were published to the Pushgateway this cycle; ``both`` -> both; ``recommend`` -> false.
A hold (missing metrics, not ready) applies no scale write, and in ``metrics`` mode publishes the held
value (the current replicas), which is what an HPA must read while data is missing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

ANNOTATION_ACTUATION = "modelplane.io/actuation"
"""Per resource: ``scale`` | ``metrics`` | ``both`` | ``recommend``."""
ANNOTATION_TARGET_ACTUATION = "modelplane.io/actuation-targets"
"""On an AutoscalingPolicyBinding: a JSON object target name -> mode, overriding the binding's mode per target."""
OPTIMIZER_CONFIGMAP = "modelplane-optimizer-config"
"""Optional ConfigMap of the config namespace with Modelplane's own optimizer settings."""
ACTUATION_MODE_KEY = "actuation-mode"
"""Key of :data:`OPTIMIZER_CONFIGMAP`: the default mode of every resource without the annotation."""

SCALE, METRICS, BOTH, RECOMMEND = "scale", "metrics", "both", "recommend"
MODES = (SCALE, METRICS, BOTH, RECOMMEND)
DEFAULT_MODE = SCALE


class ActuationModeError(ValueError):
    """An actuation mode that is not one of :data:`MODES`; ``field`` names where it was written."""

    def __init__(self, field: str, value: object) -> None:
        super().__init__(f"{field}: unknown actuation mode {value!r} (one of {', '.join(MODES)})")
        self.field = field


def parse_mode(value: object, field: str) -> str:
    """A mode as written (case and surrounding blanks ignored); raises :class:`ActuationModeError`."""
    mode = str(value).strip().lower()
    if mode not in MODES:
        raise ActuationModeError(field, value)
    return mode


def default_mode(config_data: Mapping[str, str] | None) -> tuple[str, str | None]:
    """The cluster-wide default from ``modelplane-optimizer-config`` data: (mode, error or None).

    A malformed value falls back to ``recommend`` (see the module docstring) and is reported.
    """
    raw = (config_data or {}).get(ACTUATION_MODE_KEY)
    if raw is None or str(raw).strip() == "":
        return DEFAULT_MODE, None
    try:
        return parse_mode(raw, f"{OPTIMIZER_CONFIGMAP}/{ACTUATION_MODE_KEY}"), None
    except ActuationModeError as exc:
        return RECOMMEND, f"{exc}; acting as 'recommend' until it is fixed"


def resource_mode(annotations: Mapping[str, str] | None, default: str = DEFAULT_MODE) -> str:
    """The mode of one resource: its annotation, else ``default``; raises on an unknown annotation value."""
    raw = (annotations or {}).get(ANNOTATION_ACTUATION)
    if raw is None:
        return default
    return parse_mode(raw, f"metadata.annotations[{ANNOTATION_ACTUATION}]")


def target_modes(annotations: Mapping[str, str] | None, binding_mode: str) -> dict[str, str]:
    """Per-target overrides of an AutoscalingPolicyBinding (``modelplane.io/actuation-targets``).

    Targets not named use ``binding_mode``. Raises :class:`ActuationModeError` naming the annotation.
    """
    raw = (annotations or {}).get(ANNOTATION_TARGET_ACTUATION)
    if not raw:
        return {}
    field = f"metadata.annotations[{ANNOTATION_TARGET_ACTUATION}]"
    try:
        data = json.loads(raw)
    except ValueError:
        raise ActuationModeError(field, raw) from None
    if not isinstance(data, dict):
        raise ActuationModeError(field, raw)
    return {str(name): parse_mode(mode, f"{field}.{name}") for name, mode in data.items()}


def scales(mode: str) -> bool:
    """Whether Modelplane writes the scale subresource in this mode."""
    return mode in (SCALE, BOTH)


def publishes(mode: str) -> bool:
    """Whether the publication of the desired replicas is (part of) the actuation in this mode."""
    return mode in (METRICS, BOTH)


@dataclass(frozen=True)
class Actuation:
    """What one target's actuation did this cycle."""

    mode: str
    scale_ok: bool
    """The scale write succeeded or none was needed (only meaningful when the mode scales)."""
    published: bool
    """The desired replicas reached the Pushgateway this cycle."""

    @property
    def applied(self) -> bool:
        """``status.actuation.applied`` as WVA reports it (see the module docstring)."""
        if self.mode == RECOMMEND:
            return False
        if self.mode == SCALE:
            return self.scale_ok
        if self.mode == METRICS:
            return self.published
        return self.scale_ok and self.published


def desired_ratio(desired: int, current: int) -> float:
    """WVA's ``wva_desired_ratio``: desired / current, and desired itself when current is 0 (0 -> N)."""
    return float(desired) if current == 0 else desired / current
