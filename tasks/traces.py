"""Read a request trace file (CSV: arrival time, prompt tokens, output tokens per request) for the simulate and tune
flows and for their commands' checks before a run.

Parsing the rows is :func:`engine.simulate.trace.parse_trace_rows`; this module only opens the file and turns every
failure into one :class:`~engine.simulate.trace.TraceError` naming the file: missing, not a regular file (a
directory, a named pipe, a device), not UTF-8, a row the CSV reader refuses (a field over its 131,072 characters)
with its line, or a row the parser refuses with its row. A UTF-8 byte-order mark (what a spreadsheet's "CSV UTF-8"
export begins with) is dropped. Light to import: a command checks its trace before it imports its flow.
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np

from engine.simulate.trace import TraceError, parse_trace_rows
from tasks.clients.inputs import InputFileError, open_regular

__all__ = ["read_trace_rows"]


def read_trace_rows(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A trace file's requests: arrival seconds from the first request, prompt tokens and output tokens, by arrival.

    Args:
        path: The trace CSV.

    Returns:
        (arrival seconds, prompt tokens, output tokens), sorted by arrival.

    Raises:
        TraceError: The file does not exist, cannot be read, is not a regular file or not UTF-8 text, or a row is
            malformed; the message names the file (and the line or row).
    """
    try:
        binary = open_regular(path)
    except FileNotFoundError:
        raise TraceError(f"trace file {path} does not exist") from None
    except InputFileError as exc:
        raise TraceError(f"trace file {path} is {exc.problem}") from None
    except OSError as exc:
        raise TraceError(f"trace file {path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        try:
            return parse_trace_rows(reader)
        except csv.Error as exc:
            raise TraceError(f"trace file {path}, line {reader.line_num}: {exc}") from None
        except UnicodeDecodeError as exc:  # decoded a block at a time: the line is found again, by lines
            raise TraceError(
                f"trace file {path}, line {_first_undecodable_line(path)}: not UTF-8 text ({exc.reason})"
            ) from None
        except TraceError as exc:
            raise TraceError(f"trace file {path}: {exc}") from None
        except OSError as exc:
            raise TraceError(f"trace file {path}: cannot read ({exc.strerror or type(exc).__name__})") from None


def _first_undecodable_line(path: str | os.PathLike[str]) -> int | str:
    """The number of the file's first line that is not UTF-8 (``?`` when it reads well now: it changed meanwhile)."""
    with open_regular(path) as binary:
        for number, line in enumerate(binary, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return "?"
