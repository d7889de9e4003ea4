"""Read benchmark result files into :class:`engine.simulate.benchmarks.BenchmarkPoint`s.

A file holds one JSON document (a ``vllm bench serve --save-result`` result, a guidellm report, an
inference-perf lifecycle report, an llm-d planner benchmark table) or JSON lines, one document a line
(``vllm bench serve --append-result``).  Recognising the format and reading its fields is
:func:`engine.simulate.benchmarks.points_from_document`; this module only opens and parses the files,
and turns every failure into one :class:`BenchmarkFormatError` line naming the file.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable

from engine.simulate.benchmarks import BenchmarkFormatError, BenchmarkPoint, points_from_document
from tasks.clients.inputs import InputFileError, read_text

__all__ = ["read_benchmark_files", "BenchmarkFormatError"]


MAX_BENCHMARK_FILE_BYTES = 256 << 20
"""The largest benchmark result file read (256 MiB: a guidellm report keeps every request it sent); a larger one, or
one that is not a regular file (a directory, a named pipe, ``/dev/zero``), is refused unread."""


def _documents(file: pathlib.Path) -> list[object]:
    try:
        text = read_text(file, MAX_BENCHMARK_FILE_BYTES, "a benchmark result file").text
    except OSError as exc:
        raise BenchmarkFormatError(f"{file}: cannot read ({exc.strerror or type(exc).__name__})") from None
    except InputFileError as exc:
        raise BenchmarkFormatError(str(exc)) from None
    try:
        return _parsed(file, text)
    except RecursionError:  # json's parser recurses once per '[' or '{': no result file nests more than a few
        raise BenchmarkFormatError(f"{file}: JSON nested deeper than it can be read") from None


def _parsed(file: pathlib.Path, text: str) -> list[object]:
    """The file's one JSON document, else its JSON lines."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError as whole:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            raise BenchmarkFormatError(f"{file}: invalid JSON ({whole})") from None
    try:
        return [json.loads(line) for line in lines]
    except json.JSONDecodeError as exc:
        raise BenchmarkFormatError(f"{file}: neither JSON nor JSON lines ({exc})") from None


def read_benchmark_files(paths: Iterable[str | pathlib.Path]) -> list[tuple[str, BenchmarkPoint]]:
    """(format name, point) for every run in ``paths``, in file order.

    Args:
        paths: Benchmark result files (YAML or JSON, one or more documents each) in any supported format.

    Returns:
        Each run as the name of the format it was read as and its :class:`BenchmarkPoint`, files in the given order.
    """
    result: list[tuple[str, BenchmarkPoint]] = []
    for path in paths:
        file = pathlib.Path(path)
        for doc in _documents(file):
            name, points = points_from_document(doc, str(file))
            result.extend((name, point) for point in points)
    return result
