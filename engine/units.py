"""Kubernetes Quantity and PromQL duration parsing, pure (the ``kubernetes`` package is off limits to ``engine``)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a Kubernetes Quantity (``"500m"``, ``"10Gi"``, ``"1.5"``, ``5``) into a Decimal.

    Raises ``ValueError`` naming the value when it is not a quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]
    except InvalidOperation:
        raise ValueError(f"not a quantity: {value!r}") from None


PROMETHEUS_DURATION_PATTERN = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
"""A PromQL range duration (``30s``, ``1m``, ``1h30m``, ``1d``), as Prometheus parses it."""
_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_DURATION_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
"""Prometheus's duration units in seconds (a day is 24 hours, a week 7 days, a year 365 days)."""


def format_duration(seconds: float) -> str:
    """``180`` -> ``3m``, ``86400`` -> ``1d``, ``90`` -> ``90s``, ``1.5`` -> ``1.5s``: the largest unit that divides
    it exactly, whole numbers without a decimal point or an exponent (``10000000s``).

    Args:
        seconds: A duration in seconds, at least 0.

    Returns:
        The duration in the largest unit that divides it (``d``, ``h``, ``m``), else in seconds.
    """
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds:g}s"


def duration_seconds(text: str) -> float:
    """Seconds in a PromQL duration (:data:`PROMETHEUS_DURATION_PATTERN`: ``90s``, ``1h30m``, ``1d``, ``2w``);
    ``ValueError`` otherwise."""
    if not re.fullmatch(PROMETHEUS_DURATION_PATTERN, text.strip()):
        raise ValueError(f"invalid duration {text!r}: expected a PromQL duration such as '90s', '24h' or '1d'")
    return sum(float(number) * _DURATION_UNIT_S[unit] for number, unit in _DURATION_PART.findall(text))
