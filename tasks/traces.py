"""Read a request trace file (CSV: arrival time, prompt tokens, output tokens per request) for the simulate and tune
flows and for their commands' checks before a run.

Parsing the rows is :func:`engine.simulate.trace.parse_trace_rows`; this module only opens the file and turns every
failure into one :class:`~engine.simulate.trace.TraceError` naming the file: missing, not a regular file (a
directory, a named pipe, a device), not UTF-8, a row the CSV reader refuses (a field over its 131,072 characters)
or one longer than any row the parser accepts (refused as it is read: csv parses a whole row before its fields can
be counted) with its line, or a row the parser refuses with its row. A UTF-8 byte-order mark (what a spreadsheet's
"CSV UTF-8" export begins with) is dropped. Light to import: a command checks its trace before it imports its flow.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator

import numpy as np

from engine.simulate.trace import MAX_TRACE_FIELDS, TraceError, parse_trace_rows
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
        lines = _RowLines(handle)
        reader = csv.reader(lines)
        try:
            return parse_trace_rows(lines.rows(reader))
        except csv.Error as exc:
            raise TraceError(f"trace file {path}, line {lines.line}: {exc}") from None
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


class _RowLines:
    """A trace file's lines for :func:`csv.reader`, refusing a row longer than any row the parser accepts before it is
    read whole: csv yields a row only once it has parsed all of it, so a 50 MB row of 5x10^7 empty fields took
    4.6 GB before its fields could be counted.

    A row the parser accepts has at most :data:`~engine.simulate.trace.MAX_TRACE_FIELDS` fields of at most csv's
    field limit each, and a field takes at most twice its content in the file (each quote doubled) plus its two
    quotes and a delimiter: a longer row is refused as soon as that many characters are read (as a :class:`csv.Error`,
    so its line is named like csv's own errors), and reading holds at most one such row's worth of text."""

    def __init__(self, handle: io.TextIOBase) -> None:
        self._handle = handle
        self._limit = MAX_TRACE_FIELDS * (2 * csv.field_size_limit() + 3) + 2  # + a CR LF
        self._row_chars = 0  # of the row csv is reading
        self.line = 0
        """The number of the line read last (csv's ``line_num``, and the line refused by the count of characters)."""

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        """The next line, read no further than the current row's remaining characters allow."""
        line = self._handle.readline(self._limit - self._row_chars + 1)
        if not line:
            raise StopIteration
        self.line += 1
        self._row_chars += len(line)
        if self._row_chars > self._limit:
            raise csv.Error(  # what csv says of a field past its limit, the file and line added the same way
                f"longer than {self._limit:,} characters, more than a row of at most "
                f"{MAX_TRACE_FIELDS} fields of at most {csv.field_size_limit():,} characters each can be"
            )
        return line

    def rows(self, reader: Iterator[list[str]]) -> Iterator[list[str]]:
        """``reader``'s rows, the count of characters starting again with each (csv reads no line ahead of a row)."""
        for row in reader:
            self._row_chars = 0
            yield row
