"""Performance profiles from benchmark results: recognise the report formats, fit ``alpha, beta, gamma, delta``.

Why: every VariantAutoscaling needs a profile before it can be sized, and a new deployment has no day of
Prometheus metrics to calibrate from (:mod:`engine.simulate.calibrate`).  What operators do have are
benchmark runs at a few request rates.  Each run (one rate of a sweep) is one :class:`BenchmarkPoint`:
the rate served, the mean prompt and output lengths, the mean TTFT and ITL.

Formats recognised (by their keys; a document that matches none is refused, naming what was expected):

* ``vllm bench serve --save-result`` (and ``benchmarks/benchmark_serving.py``): one run per document,
  ``completed``, ``duration``, ``total_input_tokens``, ``total_output_tokens``, ``mean_ttft_ms``,
  ``mean_itl_ms`` (else ``mean_tpot_ms``), ``mean_e2el_ms`` when present, ``request_rate``;
* guidellm reports (``benchmarks.json``): ``benchmarks[].config.strategy.rate`` and
  ``benchmarks[].metrics.<metric>.successful.mean`` for
  ``time_to_first_token_ms``, ``inter_token_latency_ms``, ``prompt_token_count``, ``output_token_count``,
  ``requests_per_second``, ``request_concurrency``, ``request_latency`` (seconds);
* inference-perf lifecycle reports (``stage_N_lifecycle_metrics.json``, one per rate; the stages of one run,
  its folder, are one configuration): ``load_summary.requested_rate``,
  ``successes.count``, ``successes.throughput.requests_per_sec``, ``successes.latency.<metric>.mean`` in
  seconds, the prompt length from ``successes.prompt_tokens`` (or ``prompt_len``) and the output length
  from ``successes.output_len`` (or ``output_tokens``);
* the llm-d planner's benchmark table (``benchmarks_BLIS.json`` and its siblings): ``benchmarks[]`` rows
  of ``model_hf_repo``, ``hardware``, ``hardware_count``, ``mean_input_tokens``, ``mean_output_tokens``,
  ``requests_per_second``, ``responses_per_second``, ``ttft_mean``, ``itl_mean``, ``e2e_mean``; each
  model x GPU x count is its own configuration.

A point becomes a calibration :class:`~engine.simulate.calibrate.Window`: the batch comes from Little's
law (requests served per second times the mean end-to-end latency, or the report's own mean concurrency),
and TTFT stands for the prefill time: a benchmark does not separate queueing from prefill; runs that served
their offered rate short by more than 10 % were past capacity and are left out.  The fit is
:func:`engine.simulate.calibrate.identify_profile`, which reports the parameters the points do not
determine instead of refusing the profile: a sweep at one prompt length determines ``gamma + delta*in``
only through how TTFT grows with the batch, so points at two prompt lengths are what determine both.

Pure: no I/O (the files are read by :mod:`tasks.benchmarks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from engine.simulate.calibrate import ProfileFit, Unidentifiable, Window, identify_profile

__all__ = [
    "BenchmarkPoint",
    "BenchmarkFormatError",
    "MIN_BENCHMARK_POINTS",
    "NOMINAL_REQUESTS",
    "SATURATED_SHORTFALL",
    "points_from_document",
    "group_points",
    "fit_benchmark",
]

MIN_BENCHMARK_POINTS = 3
"""Fewest rates a benchmark fit accepts: two parameters per law and one degree of freedom for the interval."""
SATURATED_SHORTFALL = 0.10
"""A run that served its offered rate short by more than this fraction was past capacity: its requests queued
without bound, so its TTFT is mostly waiting and its ITL the preempting engine's; the fit leaves it out.  Not
less: a finite run falls short of its rate by the time its last requests take to drain, up to 7 % in the
planner's table at one request per second (4,096-token prompts, far from capacity)."""
NOMINAL_REQUESTS = 1000.0
"""Requests a point stands for when its report does not count them (the planner's table): equal weights."""


class BenchmarkFormatError(ValueError):
    """A document is not a benchmark report this module reads, or lacks a field; the message names it."""


@dataclass(frozen=True)
class BenchmarkPoint:
    """One benchmark run at one load: means over its finished requests (ms, tokens, requests per second)."""

    config: str
    rate_rps: float | None
    throughput_rps: float
    in_tokens: float
    out_tokens: float
    ttft_ms: float
    itl_ms: float
    e2e_ms: float | None = None
    concurrency: float | None = None
    requests: float = NOMINAL_REQUESTS

    @property
    def saturated(self) -> bool:
        """Served short of the offered rate by more than :data:`SATURATED_SHORTFALL` (past capacity)."""
        return self.rate_rps is not None and self.throughput_rps < (1.0 - SATURATED_SHORTFALL) * self.rate_rps

    @property
    def batch(self) -> float:
        """Mean requests in flight: the report's concurrency, else Little's law on the end-to-end latency."""
        if self.concurrency is not None:
            return self.concurrency
        e2e = self.e2e_ms if self.e2e_ms is not None else self.ttft_ms + self.itl_ms * max(self.out_tokens - 1, 0)
        return self.throughput_rps * e2e / 1000.0

    def window(self) -> Window:
        """The point as a calibration window (its duration is the time its requests took at its throughput)."""
        seconds = self.requests / self.throughput_rps
        decode_tokens = self.requests * max(self.out_tokens - 1.0, 0.0)
        return Window(
            seconds=seconds,
            requests=self.requests,
            ttft_sum_s=self.ttft_ms * self.requests / 1000.0,
            queue_sum_s=0.0,
            itl_sum_s=self.itl_ms * decode_tokens / 1000.0,
            itl_count=decode_tokens,
            prompt_tokens_sum=self.in_tokens * self.requests,
            inference_sum_s=self.batch * seconds,
        )


# --------------------------------------------------------------------------------------------
# Field access with errors that name the field
# --------------------------------------------------------------------------------------------


def _at(doc: Mapping[str, Any], path: str, where: str) -> Any:
    node: Any = doc
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node or node[key] is None:
            raise BenchmarkFormatError(f"{where}: missing {path}")
        node = node[key]
    return node


def _number(doc: Mapping[str, Any], path: str, where: str, positive: bool = False) -> float:
    value = _at(doc, path, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise BenchmarkFormatError(f"{where}: {path} must be a finite number >= 0, got {value!r}")
    if positive and value == 0:
        raise BenchmarkFormatError(f"{where}: {path} must be > 0")
    return float(value)


def _first(doc: Mapping[str, Any], paths: Sequence[str], where: str, positive: bool = False) -> float:
    for path in paths:
        try:
            _at(doc, path, where)
        except BenchmarkFormatError:
            continue
        return _number(doc, path, where, positive)
    raise BenchmarkFormatError(f"{where}: missing {' or '.join(paths)}")


def _optional(doc: Mapping[str, Any], path: str, where: str) -> float | None:
    try:
        _at(doc, path, where)
    except BenchmarkFormatError:
        return None
    return _number(doc, path, where)


def _rate(value: Any) -> float | None:
    """An offered rate, None for ``inf`` (all requests at once) or anything not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


# --------------------------------------------------------------------------------------------
# The formats
# --------------------------------------------------------------------------------------------


def _vllm(doc: Mapping[str, Any], origin: str) -> list[BenchmarkPoint]:
    completed = _number(doc, "completed", origin, positive=True)
    duration = _number(doc, "duration", origin, positive=True)
    return [
        BenchmarkPoint(
            config=str(doc.get("model_id") or origin),
            rate_rps=_rate(doc.get("request_rate")),
            throughput_rps=completed / duration,
            in_tokens=_number(doc, "total_input_tokens", origin) / completed,
            out_tokens=_number(doc, "total_output_tokens", origin) / completed,
            ttft_ms=_number(doc, "mean_ttft_ms", origin),
            itl_ms=_first(doc, ("mean_itl_ms", "mean_tpot_ms"), origin),
            e2e_ms=_optional(doc, "mean_e2el_ms", origin),
            requests=completed,
        )
    ]


def _entries(doc: Mapping[str, Any], origin: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, entry) for each mapping of the document's ``benchmarks`` list; anything else is refused."""
    for i, entry in enumerate(doc["benchmarks"]):
        where = f"{origin}: benchmarks[{i}]"
        if not isinstance(entry, Mapping):
            raise BenchmarkFormatError(f"{where}: expected a mapping")
        yield where, entry


def _strategy(bench: Mapping[str, Any]) -> Mapping[str, Any]:
    """A guidellm benchmark's scheduling strategy (its ``rate`` for constant and Poisson runs): under
    ``config`` in current reports, ``scheduler`` or ``args`` in earlier ones; empty when absent."""
    for key in ("config", "scheduler", "args"):
        holder = bench.get(key)
        strategy = holder.get("strategy") if isinstance(holder, Mapping) else None
        if isinstance(strategy, Mapping):
            return strategy
    return {}


def _guidellm(doc: Mapping[str, Any], origin: str) -> list[BenchmarkPoint]:
    points = []
    for where, bench in _entries(doc, origin):
        metrics = _at(bench, "metrics", where)

        def mean(name: str, metrics: Mapping[str, Any] = metrics, where: str = where) -> float:
            return _number(metrics, f"{name}.successful.mean", where)

        strategy = _strategy(bench)
        latency_s = _optional(metrics, "request_latency.successful.mean", where)
        points.append(
            BenchmarkPoint(
                config=origin,
                rate_rps=_rate(strategy.get("rate")),
                throughput_rps=_number(metrics, "requests_per_second.successful.mean", where, positive=True),
                in_tokens=mean("prompt_token_count"),
                out_tokens=mean("output_token_count"),
                ttft_ms=mean("time_to_first_token_ms"),
                itl_ms=mean("inter_token_latency_ms"),
                e2e_ms=latency_s * 1000.0 if latency_s is not None else None,
                concurrency=_optional(metrics, "request_concurrency.successful.mean", where),
                requests=_optional(metrics, "time_to_first_token_ms.successful.count", where) or NOMINAL_REQUESTS,
            )
        )
    return points


def _inference_perf(doc: Mapping[str, Any], origin: str) -> list[BenchmarkPoint]:
    latency = _at(doc, "successes.latency", origin)

    def seconds_mean(name: str) -> float:
        return _number(latency, f"{name}.mean", f"{origin}: successes.latency") * 1000.0

    itl_name = "inter_token_latency" if latency.get("inter_token_latency") else "time_per_output_token"
    return [
        BenchmarkPoint(
            config=f"inference-perf run in {PurePath(origin).parent}",  # a run writes one stage file per rate
            rate_rps=_rate(doc.get("load_summary", {}).get("requested_rate")),
            throughput_rps=_number(doc, "successes.throughput.requests_per_sec", origin, positive=True),
            in_tokens=_first(doc, ("successes.prompt_tokens.mean", "successes.prompt_len.mean"), origin),
            out_tokens=_first(doc, ("successes.output_len.mean", "successes.output_tokens.mean"), origin),
            ttft_ms=seconds_mean("time_to_first_token"),
            itl_ms=seconds_mean(itl_name),
            e2e_ms=seconds_mean("request_latency"),
            requests=_number(doc, "successes.count", origin, positive=True),
        )
    ]


def _planner(doc: Mapping[str, Any], origin: str) -> list[BenchmarkPoint]:
    points = []
    for where, row in _entries(doc, origin):
        config = f"{_at(row, 'model_hf_repo', where)} {_at(row, 'hardware', where)}x{_at(row, 'hardware_count', where)}"
        points.append(
            BenchmarkPoint(
                config=config,
                rate_rps=_number(row, "requests_per_second", where),
                throughput_rps=_number(row, "responses_per_second", where, positive=True),
                in_tokens=_first(row, ("mean_input_tokens", "prompt_tokens"), where),
                out_tokens=_first(row, ("mean_output_tokens", "output_tokens"), where),
                ttft_ms=_number(row, "ttft_mean", where),
                itl_ms=_number(row, "itl_mean", where),
                e2e_ms=_optional(row, "e2e_mean", where),
            )
        )
    return points


def _is_planner(doc: Mapping[str, Any]) -> bool:
    rows = doc.get("benchmarks")
    return isinstance(rows, list) and bool(rows) and isinstance(rows[0], Mapping) and "ttft_mean" in rows[0]


def _is_guidellm(doc: Mapping[str, Any]) -> bool:
    rows = doc.get("benchmarks")
    return (
        isinstance(rows, list)
        and bool(rows)
        and isinstance(rows[0], Mapping)
        and isinstance(rows[0].get("metrics"), Mapping)
        and "time_to_first_token_ms" in rows[0]["metrics"]
    )


FORMATS: tuple[
    tuple[str, Callable[[Mapping[str, Any]], bool], Callable[[Mapping[str, Any], str], list[BenchmarkPoint]]], ...
] = (
    ("llm-d planner table", _is_planner, _planner),
    ("guidellm report", _is_guidellm, _guidellm),
    (
        "inference-perf report",
        lambda d: isinstance(d.get("successes"), Mapping) and "load_summary" in d,
        _inference_perf,
    ),
    ("vllm bench serve result", lambda d: "mean_ttft_ms" in d and "completed" in d, _vllm),
)
"""(name, recogniser, reader) per format, tried in order."""


def points_from_document(doc: Any, origin: str) -> tuple[str, list[BenchmarkPoint]]:
    """The format's name and the points of one parsed JSON document; ``origin`` (the file) names it in errors."""
    if isinstance(doc, Mapping):
        for name, recognise, read in FORMATS:
            if recognise(doc):
                return name, read(doc, origin)
    raise BenchmarkFormatError(
        f"{origin}: not a benchmark report this command reads (a `vllm bench serve` result, a guidellm report, "
        "an inference-perf lifecycle report or an llm-d planner benchmark table)"
    )


def group_points(points: Sequence[BenchmarkPoint]) -> dict[str, list[BenchmarkPoint]]:
    """Points per configuration, in order of first appearance."""
    groups: dict[str, list[BenchmarkPoint]] = {}
    for point in points:
        groups.setdefault(point.config, []).append(point)
    return groups


def fit_benchmark(points: Sequence[BenchmarkPoint]) -> ProfileFit:
    """Fit one configuration's profile from its points, saying which parameters they leave undetermined.

    Raises :class:`~engine.simulate.calibrate.Unidentifiable` with fewer than :data:`MIN_BENCHMARK_POINTS`
    points or when the batch size does not vary across them.
    """
    usable = [p for p in points if not p.saturated]
    saturated = len(points) - len(usable)
    if len(usable) < MIN_BENCHMARK_POINTS:
        past = f" ({saturated} more past capacity)" if saturated else ""
        raise Unidentifiable(
            f"{len(usable)} benchmark point(s){past}: need runs at {MIN_BENCHMARK_POINTS} or more request rates "
            "below capacity to fit a profile"
        )
    # A point's batch is its own mean (Little's law on the run's means), not a noisy proxy: no instrument.
    fit = identify_profile([p.window() for p in usable], min_windows=MIN_BENCHMARK_POINTS, instrument=False)
    shapes = {(round(p.in_tokens), round(p.out_tokens)) for p in usable}
    fit.notes.append(
        f"{len(usable)} points, {len(shapes)} token shape(s); TTFT taken as the prefill time (benchmarks do not "
        "separate queueing)"
    )
    if saturated:
        fit.notes.append(
            f"{saturated} point(s) past capacity left out (served more than {SATURATED_SHORTFALL:.0%} below the "
            "offered rate: their latencies are the queue's)"
        )
    return fit
