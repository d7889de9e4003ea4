"""What every ``--json`` prints: a command's result as JSON a strict parser reads."""

from __future__ import annotations

import json
import math
import sys

__all__ = ["print_json"]


def print_json(document: object) -> None:
    """Print ``document`` as JSON indented by two spaces, a datetime or path as its text, and a number JSON cannot
    hold (NaN, an infinity: a latency of a model that served no request) as ``null``: Python's own NaN token is
    refused by every other JSON reader.

    Args:
        document: The command's result as lists, dicts and scalars.
    """
    sys.stdout.write(json.dumps(_finite(document), indent=2, default=str, allow_nan=False) + "\n")


def _finite(value: object) -> object:
    """``value`` with every float that is not finite replaced by None (in dicts, lists and tuples)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
