"""A window's traffic rebuilt from what Prometheus keeps of it, as a trace the simulator can replay.

Why: the tune flow (:mod:`engine.simulate.tune`) replays candidate settings on the cluster's own recent traffic.
A cluster rarely keeps a request log, but every vLLM server exports what a replay needs in aggregate: how many
requests each model finished per minute (``vllm:request_success_total``) and how long their prompts and outputs
were (``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens`` histograms).  This module turns those into
one :class:`~engine.simulate.records.Trace`:

* per model and per step, as many requests as the counter grew (fractional increases, which Prometheus
  extrapolates, are rounded so that the running total is kept: no request is lost or invented over the window);
* arrival times spread uniformly at random inside their step (the arrivals of a Poisson process given their
  count): what happens inside a minute is not in the counter, so sub-minute bursts are not rebuilt -- the replay
  is as smooth as Poisson traffic at each minute's rate, which the report says;
* prompt and output lengths drawn from the window's histograms (inverse transform sampling through
  :class:`~engine.perf.tail_sizing.PromptDistribution`, whose in-bucket shape is fitted to the histogram's mean
  when ``_sum`` is known); a length in the ``+Inf`` bucket is placed at the last finite bound;
* no more requests than a replay of a trace file holds (:data:`~engine.simulate.trace.MAX_REPLAY_REQUESTS`): a
  window counting more is refused before one is built, as the trace-file path refuses it, not a MemoryError.

Pure and deterministic: a seed gives one trace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from engine.perf.tail_sizing import PromptDistribution
from engine.simulate.records import Trace
from engine.simulate.trace import MAX_REPLAY_REQUESTS

__all__ = [
    "TRAFFIC_STEP_S",
    "ModelTraffic",
    "TrafficError",
    "WindowSpan",
    "rebuild_trace",
    "whole_counts",
    "window_span",
]

TRAFFIC_STEP_S = 60.0
"""The resolution the tune flow reads a window's traffic at from Prometheus: requests per minute (the optimize
cycle's)."""


class TrafficError(ValueError):
    """The window's traffic cannot be rebuilt (the message says which model and why)."""


@dataclass(frozen=True)
class ModelTraffic:
    """One model's traffic over a window as Prometheus keeps it."""

    counts: tuple[float, ...]
    """Requests finished in each step, oldest first (``increase(vllm:request_success_total[step])``)."""
    step_s: float
    """Length of one step in seconds."""
    prompt_tokens: PromptDistribution | None
    """The window's prompt-length histogram (None: no observation)."""
    output_tokens: PromptDistribution | None
    """The window's output-length histogram (None: no observation)."""
    prompt_refused: str | None = None
    """Why the prompt-length buckets Prometheus answered are no histogram (a bound ``le="NaN"``), when they are not."""
    output_refused: str | None = None
    """Why the output-length buckets are no histogram, when they are not."""

    @property
    def requests(self) -> int:
        """Requests in the window (the rounded running total), counted without building a step's count: a window
        of 1e300 requests is a number to refuse, not an array."""
        running = np.cumsum(np.asarray(_usable(self.counts), dtype=float))  # as whole_counts adds them up
        return int(np.rint(running[-1])) if len(running) else 0


def _usable(counts: Sequence[float]) -> list[float]:
    """The counts per step with a missing (non-finite) or negative one as 0."""
    return [c if math.isfinite(c) and c > 0 else 0.0 for c in counts]


def whole_counts(counts: Sequence[float]) -> np.ndarray:
    """Whole requests per step whose running total follows the fractional one (a missing or negative step is 0)."""
    values = np.asarray(_usable(counts), dtype=float)
    running = np.rint(np.cumsum(values))
    return np.diff(np.concatenate([[0.0], running])).astype(int)


@dataclass(frozen=True)
class WindowSpan:
    """The stretch of traffic a tuning rebuilds from Prometheus: ``window`` (a Prometheus duration) up to ``end``, a
    whole minute: the one asked for, else the minute the run started in."""

    window: str
    end: datetime

    def __str__(self) -> str:
        """``1d to 2026-11-30T06:00Z``: enough to read the same traffic again (``modelplane tune --window --end``)."""
        return f"{self.window} to {self.end:%Y-%m-%dT%H:%MZ}"


def window_span(window: str, end: datetime | None, now: datetime) -> WindowSpan:
    """The window to rebuild, ending at ``end`` (or ``now``) with its seconds dropped: Prometheus is read by the
    minute.

    Args:
        window: Its length, a Prometheus duration.
        end: When it ends (a time without an offset is UTC); None for now.
        now: The current time.

    Returns:
        The span, its end in UTC at a whole minute.

    Raises:
        ValueError: an end later than now (Prometheus holds no traffic there yet).
    """
    now = now.astimezone(UTC)
    if end is None:
        return WindowSpan(window, now.replace(second=0, microsecond=0))
    end = (end if end.tzinfo else end.replace(tzinfo=UTC)).astimezone(UTC)
    if end > now:
        raise ValueError(f"end {end:%Y-%m-%dT%H:%M:%SZ} is later than now: Prometheus holds no traffic there yet")
    return WindowSpan(window, end.replace(second=0, microsecond=0))


def rebuild_trace(traffic: Mapping[str, ModelTraffic], seed: int = 0) -> Trace:
    """The requests of every model's window as one trace (models named ``namespace/modelID``; a model without a
    request in the window is one of the trace's models, with no request), time 0 at the window's start.

    Raises:
        TrafficError: a model with requests but no token histogram, or steps of different lengths, or no
            request at all in the window, or more requests than a replay holds
            (:data:`~engine.simulate.trace.MAX_REPLAY_REQUESTS`, refused before any is built).
    """
    rng = np.random.default_rng(seed)
    steps = {record.step_s for record in traffic.values()}
    if len(steps) > 1:
        raise TrafficError(f"models were read at different steps ({', '.join(f'{s:g}s' for s in sorted(steps))})")
    models = tuple(sorted(traffic))
    requests = {model: traffic[model].requests for model in models}
    if sum(requests.values()) > MAX_REPLAY_REQUESTS:
        busiest = max(models, key=lambda model: requests[model])
        raise TrafficError(
            f"the window holds {_number(sum(requests.values()))} requests ({busiest}: {_number(requests[busiest])}); "
            f"a replay holds at most {MAX_REPLAY_REQUESTS:,}: choose a shorter window"
        )
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for index, model in enumerate(models):
        record = traffic[model]
        per_step = whole_counts(record.counts)
        total = int(per_step.sum())
        if total == 0:
            continue
        if record.prompt_tokens is None or record.output_tokens is None:
            missing = "prompt" if record.prompt_tokens is None else "output"
            refused = record.prompt_refused if record.prompt_tokens is None else record.output_refused
            why = f" ({refused})" if refused else ""
            raise TrafficError(f"{model}: {total} requests in the window but no {missing}-token histogram{why}")
        starts = np.repeat(np.arange(len(per_step), dtype=float) * record.step_s, per_step)
        arrivals = starts + rng.uniform(0.0, record.step_s, total)
        prompts = _draw(record.prompt_tokens, total, rng, minimum=0)
        outputs = _draw(record.output_tokens, total, rng, minimum=1)
        parts.append((arrivals, prompts, outputs, np.full(total, index)))
    if not parts:
        raise TrafficError("no request in the window: nothing to replay")
    arrival, prompt, output, model_index = (np.concatenate(column) for column in zip(*parts))
    order = np.argsort(arrival, kind="stable")
    return Trace(arrival[order], prompt[order], output[order], model_index[order], models)


def _number(count: int) -> str:
    """A request count for a message: with thousands separators, or in exponent notation past a trillion."""
    return f"{count:,}" if count < 10**12 else f"{float(count):.3g}"


def _draw(lengths: PromptDistribution, size: int, rng: np.random.Generator, minimum: int) -> np.ndarray:
    """``size`` lengths with the histogram's distribution (whole tokens, at least ``minimum``)."""
    if lengths.total <= 0:
        raise TrafficError("a token histogram without observations")
    # The inverse distribution at 1,001 shares, interpolated between them: far finer than any histogram's buckets.
    grid = np.linspace(0.0, 1.0, 1001)
    table = np.asarray([lengths.quantile(float(share)) for share in grid])
    drawn = np.interp(rng.uniform(0.0, 1.0, size), grid, table)
    whole: np.ndarray = np.maximum(np.rint(drawn), minimum).astype(int)
    return whole
