"""Request traces for the simulator: parsing CSV rows, slicing, time compression, rate scaling, a day-shaped
envelope, bursty replays (engine.simulate.bursts), model split.

A trace is a CSV with a header and one row per request: an arrival timestamp, prompt tokens and
output tokens.  The Azure LLM inference trace reads as it is (``TIMESTAMP,ContextTokens,
GeneratedTokens``); other spellings of the three columns are recognised (see ``_COLUMNS``).
Timestamps are either ISO 8601 date-times (fractions beyond microseconds are cut) or numbers
of seconds.  A row holds at most :data:`MAX_TRACE_FIELDS` fields, and an error quotes the trace as
:func:`engine.errors.shown` quotes a value (80 characters of a cell, six of a row's): a malformed row is named, never
printed whole.

Pure: rows come in as strings (the caller reads the file), randomness from a seeded generator.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from engine.errors import shown
from engine.simulate.bursts import BurstShape, bursty_requests
from engine.simulate.records import Trace

__all__ = [
    "MAX_REPLAY_REQUESTS",
    "MAX_REPLAY_S",
    "MAX_REQUEST_TOKENS",
    "MAX_TRACE_FIELDS",
    "TraceError",
    "TraceShape",
    "parse_trace_rows",
    "shape_trace",
    "split_models",
    "wave_envelope",
]

_COLUMNS = {
    "time": ("timestamp", "time", "arrival", "arrival_time", "arrival_s"),
    "in": ("contexttokens", "prompt_tokens", "input_tokens", "prompttokens", "in_tokens"),
    "out": ("generatedtokens", "output_tokens", "completion_tokens", "generation_tokens", "out_tokens"),
}


MAX_TRACE_FIELDS = 64
"""The most fields one row (the header too) may have: the reader recognises 15 spellings of its three columns
(``_COLUMNS``), so 64 leaves room for every one of them and dozens of other columns a request log carries (ids, a
model, a status), and a longer row is no trace.  Without it a row of 5x10^7 empty fields was parsed, then quoted
whole in its error: 4.6 GB and a 200 MB line."""
MAX_REQUEST_TOKENS = 10_000_000
"""The most prompt or output tokens one row may count: no model's context window is longer, so a larger count is a
corrupt row (a count past 2^63 does not even fit the simulator's integers)."""
MAX_REPLAY_S = 366 * 86_400.0
"""The longest span a replay may have, a year: the simulator decides once a minute, so a longer one (a timestamp
off by centuries, a compression far below 1) would run for days or ask for more memory than a machine has."""
MAX_REPLAY_REQUESTS = 50_000_000
"""The most requests a replay may hold after rate scaling, over 2,500 times the recorded conversation hour (19,366
requests): a scale in the millions ends in this error, not a MemoryError (``--rate-scale 1e9`` asked numpy for
20.9 TiB)."""


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the row or column."""


@dataclass(frozen=True)
class TraceShape:
    """How to replay a trace.

    ``start_s``/``duration_s`` cut a slice (seconds from the first request; ``None`` = to the end);
    ``compression`` divides inter-arrival times (2 = twice as fast); ``rate_scale`` multiplies the
    number of requests (below 1 by thinning, above 1 by adding jittered copies); ``model_shares``
    maps each model key to its weight (requests are assigned at random with these weights).

    ``wave_floor`` gives the replay a day's shape: requests are kept with probability
    ``floor + (1 - floor) * (1 - cos(2 pi t / period)) / 2`` (``t`` seconds from the slice's start as
    replayed), so the rate goes from ``floor`` of the recorded one up to all of it at half the period and
    back. 1.0 (the default) replays the trace as recorded.  ``wave_period_s`` is the period in replayed
    seconds, ``None`` = the slice's length.  Why: a recorded hour varies little (the conversation trace's
    per-minute CV is 0.22), so no policy that follows the load can save much over static provisioning
    on it; a day's swing is where following the load pays, and thinning a real trace keeps its
    request sizes and burst structure.

    ``burst`` replaces the recorded arrivals by a bursty replay (:class:`BurstShape`: silent minutes, bursts,
    sub-minute clusters) filled with the recorded requests resampled toward longer prompts; the recorded times
    are not used, so it goes with none of the slicing, compression, rate or wave fields (the burst's own
    ``requests_per_min`` and ``duration_min`` set the rate and length).  ``None`` (the default): as recorded.
    """

    model_shares: Mapping[str, float]
    start_s: float = 0.0
    duration_s: float | None = None
    compression: float = 1.0
    rate_scale: float = 1.0
    seed: int = 0
    wave_floor: float = 1.0
    wave_period_s: float | None = None
    burst: BurstShape | None = None

    def __post_init__(self) -> None:
        if not self.model_shares or any(not 0 < w < math.inf for w in self.model_shares.values()):
            raise TraceError("model shares must name at least one model, each with a finite weight > 0")
        if not 0 < self.compression < math.inf or not 0 < self.rate_scale < math.inf:
            raise TraceError(
                f"compression and rate_scale must be finite and > 0, got {self.compression}, {self.rate_scale}"
            )
        if not 0 <= self.start_s < math.inf or (self.duration_s is not None and not 0 < self.duration_s < math.inf):
            raise TraceError(
                f"start must be finite and >= 0 and duration finite and > 0, got {self.start_s}, {self.duration_s}"
            )
        if not 0 < self.wave_floor <= 1:
            raise TraceError(
                f"wave_floor must be > 0 and <= 1 (the low rate's share of the high), got {self.wave_floor}"
            )
        if self.wave_period_s is not None and not self.wave_period_s > 0:
            raise TraceError(f"wave_period_s must be > 0, got {self.wave_period_s}")
        if self.burst is not None:
            recorded = ("start_s", "duration_s", "compression", "rate_scale", "wave_floor", "wave_period_s")
            changed = [name for name in recorded if getattr(self, name) != getattr(TraceShape, name)]
            if changed:
                raise TraceError(
                    f"a bursty replay sets its own length and rate: {', '.join(changed)} cannot be combined with burst"
                )


def wave_envelope(t: np.ndarray, floor: float, period_s: float) -> np.ndarray:
    """The share of requests kept at replayed time ``t``: ``floor`` at 0 and at each full period, 1 at half of it."""
    return floor + (1.0 - floor) * 0.5 * (1.0 - np.cos(2.0 * np.pi * t / period_s))


def _column(header: Sequence[str], kind: str) -> int:
    names = [h.strip().lower() for h in header]
    for candidate in _COLUMNS[kind]:
        if candidate in names:
            return names.index(candidate)
    raise TraceError(f"trace header {shown(list(header))} has no {kind} column (one of {', '.join(_COLUMNS[kind])})")


def _seconds(value: str, row: int) -> float:
    """A timestamp cell as seconds (a number of seconds, or an ISO 8601 date-time as Unix seconds)."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise TraceError(f"row {row}: timestamp {shown(value)} is not a finite number of seconds")
        return seconds
    head, dot, fraction = text.partition(".")
    if dot:
        digits = "".join(ch for ch in fraction if ch.isdigit())
        zone = fraction[len(digits) :]
        text = f"{head}.{digits[:6]}{zone}"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(
            f"row {row}: timestamp {shown(value)} is neither a number of seconds nor an ISO 8601 date-time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _tokens(row: Sequence[str], column: int, number: int) -> int:
    """One token count of a row: a whole number from 0 to :data:`MAX_REQUEST_TOKENS`.  Written as a float it reads
    when it is whole (``10.0``, ``1e3``: a column a spreadsheet or pandas exported as floats); ``10.9`` is refused,
    not cut to 10."""
    try:
        count = float(row[column])
    except (ValueError, IndexError):
        raise TraceError(f"row {number}: prompt and output tokens must be integers, got {shown(list(row))}") from None
    if not 0 <= count <= MAX_REQUEST_TOKENS:  # NaN fails both
        raise TraceError(
            f"row {number}: token counts must be from 0 to {MAX_REQUEST_TOKENS:,}, got {shown(row[column])}"
        )
    if not count.is_integer():
        raise TraceError(f"row {number}: token counts must be integers, got {shown(row[column])}")
    return int(count)


def parse_trace_rows(rows: Iterable[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival seconds from the first request, prompt tokens, output tokens), sorted by arrival.

    A row with more than :data:`MAX_TRACE_FIELDS` fields, a timestamp, token count or span between the earliest and
    the latest timestamp that the format does not allow raises :class:`TraceError` naming the row."""
    iterator = iter(rows)
    try:
        header = next(iterator)
    except StopIteration:
        raise TraceError("trace is empty (no header)") from None
    _check_fields(header, 1)
    ti, ii, oi = _column(header, "time"), _column(header, "in"), _column(header, "out")
    # Typed arrays, 8 bytes a value: lists of Python numbers took about 120 bytes a request (2.7 GB for 10^7).
    times = array("d")
    prompts = array("q")
    outputs = array("q")
    # The earliest and the latest timestamp so far and their rows: 1e308 and -1e308 are finite, their difference
    # is not, and an arrival of inf was dropped by the slice without a word.
    low = high = math.nan
    low_row = high_row = 0
    for number, row in enumerate(iterator, start=2):
        _check_fields(row, number)
        if not row or all(not cell.strip() for cell in row):
            continue
        prompt, output = _tokens(row, ii, number), _tokens(row, oi, number)
        seconds = _seconds(row[ti], number)
        if not seconds >= low:  # the first row too: NaN compares false
            low, low_row = seconds, number
        if not seconds <= high:
            high, high_row = seconds, number
        if not math.isfinite(high - low):
            other = low_row if number == high_row else high_row
            raise TraceError(
                f"row {number}: timestamp {shown(row[ti])} is too far from row {other}'s: "
                "the span between them is not a finite number of seconds"
            )
        times.append(seconds)
        prompts.append(prompt)
        outputs.append(max(output, 1))  # a request that generated nothing still returns one (end) token
    if not times:
        raise TraceError("trace has no requests")
    t = np.frombuffer(times, dtype=float)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    return t, np.frombuffer(prompts, dtype=np.int64)[order], np.frombuffer(outputs, dtype=np.int64)[order]


def _check_fields(row: Sequence[str], number: int) -> None:
    """:class:`TraceError` for a row with more than :data:`MAX_TRACE_FIELDS` fields: its count, never its content."""
    if len(row) > MAX_TRACE_FIELDS:
        raise TraceError(
            f"row {number} has {len(row):,} fields; a trace row has at most {MAX_TRACE_FIELDS} "
            "(a timestamp, prompt and output tokens, and other columns)"
        )


def shape_trace(arrival_s: np.ndarray, in_tokens: np.ndarray, out_tokens: np.ndarray, shape: TraceShape) -> Trace:
    """Slice, compress, scale, thin to the day-shaped envelope (or replace the arrivals by a bursty replay) and
    split a parsed trace into the simulator's :class:`Trace` (each step drawn from one generator seeded by
    ``shape.seed``, so a seed gives one trace)."""
    if not np.isfinite(arrival_s).all():  # the slice below would drop an inf without a word
        raise TraceError("arrival times must be finite numbers of seconds")
    rng = np.random.default_rng(shape.seed)
    if shape.burst is not None:
        t, p, o = bursty_requests(in_tokens, out_tokens, shape.burst, rng)
        return split_models(t, p, o, shape.model_shares, rng)
    end = math.inf if shape.duration_s is None else shape.start_s + shape.duration_s
    keep = (arrival_s >= shape.start_s) & (arrival_s < end)
    t = (arrival_s[keep] - shape.start_s) / shape.compression
    p, o = in_tokens[keep], out_tokens[keep]
    length = shape.duration_s / shape.compression if shape.duration_s is not None else float(t.max(initial=0.0))
    if len(t) * shape.rate_scale > MAX_REPLAY_REQUESTS:
        raise TraceError(
            f"rate_scale {shape.rate_scale:g} makes {len(t) * shape.rate_scale:,.0f} requests of the slice's {len(t):,}; "
            f"a replay holds at most {MAX_REPLAY_REQUESTS:,}"
        )
    if shape.rate_scale != 1.0:
        copies = np.floor(shape.rate_scale).astype(int)
        extra = rng.random(len(t)) < (shape.rate_scale - copies)
        repeat = np.full(len(t), copies) + extra
        t, p, o = np.repeat(t, repeat), np.repeat(p, repeat), np.repeat(o, repeat)
        gap = float(np.median(np.diff(np.unique(t)))) if len(t) > 1 else 0.0
        # The first copy of each request keeps its time; further copies land within one typical gap.
        starts = np.concatenate([[0], np.cumsum(repeat)[:-1]])
        first = np.zeros(len(t), dtype=bool)
        first[starts[repeat > 0]] = True
        t = t + np.where(first, 0.0, rng.uniform(0.0, gap, len(t)))
    period = shape.wave_period_s if shape.wave_period_s is not None else length
    if shape.wave_floor < 1.0 and period > 0:
        kept = rng.random(len(t)) < wave_envelope(t, shape.wave_floor, period)
        t, p, o = t[kept], p[kept], o[kept]
    if len(t) == 0:
        raise TraceError("the selected slice of the trace holds no requests")
    order = np.argsort(t, kind="stable")
    t, p, o = t[order], p[order], o[order]
    _check_span(float(t[-1] - t[0]))
    return split_models(t - t[0] if shape.start_s > 0 else t, p, o, shape.model_shares, rng)


def _check_span(span_s: float) -> None:
    """:class:`TraceError` for a replay longer than :data:`MAX_REPLAY_S`."""
    if not span_s <= MAX_REPLAY_S:
        raise TraceError(
            f"the replay would span {span_s / 86_400:,.4g} days (after slicing and compression); the simulator "
            f"replays at most {MAX_REPLAY_S / 86_400:.0f} days: choose a shorter part of the trace"
        )


def split_models(
    t: np.ndarray, p: np.ndarray, o: np.ndarray, model_shares: Mapping[str, float], rng: np.random.Generator
) -> Trace:
    """Sorted requests as a :class:`Trace`, each assigned to a model at random with ``model_shares``' weights."""
    models = tuple(sorted(model_shares))
    weights = np.asarray([model_shares[m] for m in models], dtype=float)
    index = rng.choice(len(models), size=len(t), p=weights / weights.sum())
    return Trace(t, p, o, index.astype(np.int64), models)
