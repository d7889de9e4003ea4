"""A Prometheus holding vLLM history that no exporter lived through: OpenMetrics written here, turned into TSDB
blocks by ``promtool tsdb create-blocks-from openmetrics`` (Prometheus' own backfill), served by a Prometheus with
no scrape target.

Why: the tune flow reads the last hours of each model's traffic; a test cannot wait hours for a scrape.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.simulate.windows import ITL_BUCKETS_S, TTFT_BUCKETS_S
from engine.slo.measure import REQUEST_ITL_HISTOGRAM, TTFT_HISTOGRAM
from tests.servers.promtest.fixture import PrometheusError, PrometheusProcess, find_binary

PROMPT_BOUNDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0)
"""vLLM's token histogram buckets (``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``)."""


@dataclass(frozen=True)
class ModelHistory:
    """One model's finished requests per minute and the prompt and output length of every request; optionally each
    request's TTFT and time per output token (seconds: the latency histograms the attainment loop reads)."""

    model_name: str
    namespace: str
    per_minute: Sequence[int]
    prompt_tokens: Sequence[int]
    output_tokens: Sequence[int]
    ttft_s: Sequence[float] = ()
    itl_s: Sequence[float] = ()


def find_promtool() -> str:
    """``promtool`` beside the Prometheus binary, else on PATH."""
    beside = pathlib.Path(find_binary()).with_name("promtool")
    found = str(beside) if beside.exists() else shutil.which("promtool")
    if not found:
        raise PrometheusError("promtool not found (Debian's prometheus package ships it)")
    return found


def openmetrics(histories: Sequence[ModelHistory], start_s: float) -> str:
    """The counters and histograms vLLM would have exported, one sample a minute from ``start_s`` (the first
    sample, all zero) to one minute after each model's last minute; requests of minute ``i`` take their prompt and
    output lengths in order."""
    lines: list[str] = ["# TYPE vllm:request_success counter"]
    for history in histories:
        total = 0
        lines.append(_sample("vllm:request_success_total", history, {}, 0, start_s))
        for minute, count in enumerate(history.per_minute, start=1):
            total += count
            lines.append(_sample("vllm:request_success_total", history, {}, total, start_s + 60 * minute))
    for family, field, bounds in (
        ("vllm:request_prompt_tokens", "prompt_tokens", PROMPT_BOUNDS),
        ("vllm:request_generation_tokens", "output_tokens", PROMPT_BOUNDS),
        (TTFT_HISTOGRAM, "ttft_s", TTFT_BUCKETS_S),
        (REQUEST_ITL_HISTOGRAM, "itl_s", ITL_BUCKETS_S),
    ):
        given = [history for history in histories if getattr(history, field) or bounds is PROMPT_BOUNDS]
        if given:
            lines.append(f"# TYPE {family} histogram")
        for history in given:
            lines += _histogram(family, history, getattr(history, field), start_s, bounds)
    return "\n".join(lines) + "\n# EOF\n"


def _histogram(
    family: str, history: ModelHistory, values: Sequence[float], start_s: float, bounds: Sequence[float]
) -> list[str]:
    """One model's histogram series (buckets, sum, count), each sample a minute, series after series."""
    cumulative: list[list[float]] = []  # per minute: the bucket counts, then the sum, then the count
    seen: list[float] = []
    done = 0
    for count in [0, *history.per_minute]:
        seen += list(values[done : done + count])
        done += count
        cumulative.append([sum(1 for x in seen if x <= b) for b in bounds] + [len(seen), sum(seen), len(seen)])
    series = [(f"{family}_bucket", {"le": f"{b:g}"}) for b in bounds]
    series += [(f"{family}_bucket", {"le": "+Inf"}), (f"{family}_sum", {}), (f"{family}_count", {})]
    lines = []
    for column, (name, extra) in enumerate(series):
        for minute, row in enumerate(cumulative):
            lines.append(_sample(name, history, extra, row[column], start_s + 60 * minute))
    return lines


def _sample(name: str, history: ModelHistory, extra: Mapping[str, str], value: float, at_s: float) -> str:
    labels = {"model_name": history.model_name, "namespace": history.namespace, **extra}
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{text}}} {value:g} {at_s:.3f}"


def backfilled_prometheus(workdir: pathlib.Path, text: str) -> PrometheusProcess:
    """A started Prometheus (no scrape target) whose storage holds ``text``'s samples."""
    process = PrometheusProcess(find_binary(), workdir, targets=[])
    source = workdir / "history.om"
    source.write_text(text)
    result = subprocess.run(
        [find_promtool(), "tsdb", "create-blocks-from", "openmetrics", str(source), str(process.data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise PrometheusError(f"promtool backfill failed: {result.stderr.strip()[-500:]}")
    process.start()
    return process
