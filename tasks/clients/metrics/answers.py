"""What the Prometheus client accepts of an answer: its size, how long it may take to arrive
(:func:`tasks.clients.streams.read_bounded` reads it within both), the shape of its rows, and which sample values and times are usable. Anything else is refused here, so a broken or hostile
Prometheus is a model's missing metrics (or the cycle's unavailable ones), never a traceback, a hang or a
number the sizing would act on."""

from __future__ import annotations

import datetime as dt
import math

MAX_ANSWER_BYTES = 256 << 20
"""The largest answer read (256 MiB): the cycle's queries aggregate by model and pod, so a larger one is not
Prometheus's answer to them, and holding it would take the control loop's memory (500 MB took 1.1 GB)."""
ANSWER_DEADLINE_TIMEOUTS = 6
"""An answer must arrive whole within this many of the client's ``timeout_s`` (30 s at the default 5 s): a large
answer on a slow link gets time, a server sending a byte at a time does not get forever."""
QUOTED_ERROR_MAX = 500
"""The most characters of a Prometheus error a message quotes (on one line): a 40 kB error with line breaks made
the run's one-line report many lines, and a condition message past the API's 32,768 characters."""
MAX_CLOCK_SKEW_S = 300.0
"""How far in the future a sample may be stamped and still be read as current (clocks of Prometheus and the
control loop disagree by seconds, not minutes)."""


def is_row(row: object, result_type: str) -> bool:
    """Whether a result row has Prometheus's shape.

    Args:
        row: One entry of ``data.result``.
        result_type: ``vector`` or ``matrix``.

    Returns:
        True for an object whose ``metric`` maps label names to strings, with a ``value`` ``[time, "number"]`` (a
        vector) or a list of them as ``values`` (a matrix).
    """
    if not isinstance(row, dict):
        return False
    labels = row.get("metric", {})
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        return False
    points = [row.get("value")] if result_type == "vector" else row.get("values")
    return isinstance(points, list) and all(_is_point(point) for point in points)


def _is_point(point: object) -> bool:
    """``[time, "value"]``: a number and a string (Prometheus sends values as strings)."""
    return (
        isinstance(point, list)
        and len(point) == 2
        and isinstance(point[0], int | float)
        and not isinstance(point[0], bool)
        and isinstance(point[1], str)
    )


def is_count(value: float) -> bool:
    """Whether a sample is a finite number >= 0, as a rate, a mean token count or a queue is.

    Args:
        value: The sample.

    Returns:
        True for a finite number >= 0 (NaN is not).
    """
    return 0.0 <= value < math.inf


def sample_age(now: dt.datetime, epoch: float | None) -> float | None:
    """How old a sample is.

    Args:
        now: The cycle's instant.
        epoch: The sample's time (seconds since the epoch), or None.

    Returns:
        Seconds from ``epoch`` to ``now`` (0 for a sample up to :data:`MAX_CLOCK_SKEW_S` ahead); None without a
        usable time: none, not a finite number, or further in the future than the skew (a sample stamped in the
        year 33658 was read as current, then failed the whole cycle when converted).
    """
    if epoch is None or not math.isfinite(epoch) or epoch > now.timestamp() + MAX_CLOCK_SKEW_S:
        return None
    return max(now.timestamp() - epoch, 0.0)
