"""The attainment target of a model's SLO: which share of its requests must meet the latency targets, and over
which window it is judged.

Where it comes from, most specific first:

1. the annotation ``modelplane.io/slo-attainment`` on a VariantAutoscaling (a decimal fraction, ``"0.95"``);
2. the key ``slo-attainment`` beside ``slo-ttft`` / ``slo-tpot`` in the model's service-class entry;
3. :data:`DEFAULT_ATTAINMENT` (0.90).

The evaluation window is the annotation ``modelplane.io/slo-window`` (``90s``, ``30m``, ``1h``, ``7d``; a Go
duration, or whole days with ``d``), default one hour. Valid ranges: attainment 0.5 <= x <= 0.999 (beyond
0.999 the histograms of an hour hold too few misses to tell), window 5 minutes to 30 days (a window shorter than
a few control intervals says nothing the recent range does not; Prometheus retention rarely exceeds a month). A
value outside them is :class:`TargetError` naming the annotation, which the optimize cycle reports as that resource's
``InvalidConfiguration`` condition (:func:`engine.optimize.spec.parse_variant`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api.meta import parse_duration
from engine.units import format_duration

ANNOTATION_SLO_ATTAINMENT = "modelplane.io/slo-attainment"
"""VariantAutoscaling annotation: the share of the model's requests that must meet its latency targets."""
ANNOTATION_SLO_WINDOW = "modelplane.io/slo-window"
"""VariantAutoscaling annotation: the window the attainment is judged over (a duration such as ``1h``)."""
SERVICE_CLASS_KEY = "slo-attainment"
"""The key of a service-class data entry that sets the attainment for that model."""

DEFAULT_ATTAINMENT = 0.90
MIN_ATTAINMENT = 0.5
MAX_ATTAINMENT = 0.999
DEFAULT_WINDOW_S = 3600.0
MIN_WINDOW_S = 300.0
MAX_WINDOW_S = 30 * 86400.0

SOURCE_ANNOTATION = "annotation"
SOURCE_DEFAULT = "default"

_DAYS = re.compile(r"^([0-9]+(?:\.[0-9]+)?)d$")


class TargetError(ValueError):
    """An attainment or window value cannot be used; ``field`` names where it was written."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


@dataclass(frozen=True)
class AttainmentTarget:
    """A model's SLO target: ``attainment`` (share of requests within the latency targets), judged over
    ``window_s`` seconds; ``source`` says where the attainment came from (``annotation``, ``service class
    <name>`` or ``default``)."""

    attainment: float
    window_s: float
    source: str

    @property
    def window(self) -> str:
        """The window as a duration string (``1h``, ``30m``, ``7d``), as ``status.slo.window`` shows it."""
        return format_window(self.window_s)


DEFAULT_TARGET = AttainmentTarget(DEFAULT_ATTAINMENT, DEFAULT_WINDOW_S, SOURCE_DEFAULT)


def check_attainment(value: Any) -> float:
    """``value`` as an attainment fraction within [0.5, 0.999]; ``ValueError`` saying what is wrong."""
    try:
        number = float(str(value).strip()) if not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not MIN_ATTAINMENT <= number <= MAX_ATTAINMENT:  # NaN fails too
        raise ValueError(
            f"must be a decimal fraction between {MIN_ATTAINMENT} and {MAX_ATTAINMENT} (e.g. 0.90), got {value!r}"
        )
    return number


def parse_window(value: str) -> float:
    """Seconds in a window duration: a Go duration (``90s``, ``30m``, ``1h30m``) or days (``7d``), within
    5 minutes and 30 days; ``ValueError`` otherwise."""
    text = str(value).strip()
    days = _DAYS.match(text)
    try:
        seconds = float(days.group(1)) * 86400.0 if days else parse_duration(text)
    except ValueError:
        raise ValueError(f"must be a duration such as 30m, 1h or 7d, got {value!r}") from None
    if not MIN_WINDOW_S <= seconds <= MAX_WINDOW_S:
        raise ValueError(f"must be between 5m and 30d, got {value!r}")
    return seconds


def format_window(seconds: float) -> str:
    """A window as PromQL takes it, in whole seconds and the largest unit that states it exactly: ``7d``, ``1h``,
    ``30m``, ``90s``."""
    return format_duration(round(seconds))


def annotated(annotations: Mapping[str, str]) -> tuple[float | None, float | None]:
    """(attainment, window seconds) a resource's annotations set, None where absent; :class:`TargetError`
    naming the annotation when a value is invalid."""
    attainment = window = None
    if ANNOTATION_SLO_ATTAINMENT in annotations:
        try:
            attainment = check_attainment(annotations[ANNOTATION_SLO_ATTAINMENT])
        except ValueError as exc:
            raise TargetError(f"metadata.annotations[{ANNOTATION_SLO_ATTAINMENT}]", str(exc)) from None
    if ANNOTATION_SLO_WINDOW in annotations:
        try:
            window = parse_window(annotations[ANNOTATION_SLO_WINDOW])
        except ValueError as exc:
            raise TargetError(f"metadata.annotations[{ANNOTATION_SLO_WINDOW}]", str(exc)) from None
    return attainment, window


def resolve_target(
    annotated_attainments: list[float],
    annotated_windows: list[float],
    class_attainment: float | None,
    class_name: str | None = None,
) -> AttainmentTarget:
    """A model's target from what its variants' annotations and its service class say.

    Precedence: annotation > service class > default. When a model's variants disagree, the strictest
    reading wins: the highest annotated attainment and the shortest annotated window (a model has one
    measured attainment, so it has one target).
    """
    window = min(annotated_windows) if annotated_windows else DEFAULT_WINDOW_S
    if annotated_attainments:
        return AttainmentTarget(max(annotated_attainments), window, SOURCE_ANNOTATION)
    if class_attainment is not None:
        return AttainmentTarget(
            class_attainment, window, f"service class {class_name}" if class_name else "service class"
        )
    return AttainmentTarget(DEFAULT_ATTAINMENT, window, SOURCE_DEFAULT)
