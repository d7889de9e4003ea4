"""Files a person hands a command (a metrics file, benchmark results, a calibration windows file, a trace): only a
regular file is read, never a directory, a named pipe (which would block) or a device (``/dev/zero`` never ends),
a file read whole within its reader's size, text that is not UTF-8 named with the file; each reader turns every
refusal into its own one-line error naming the file (tasks/clients/inputs.py and the readers built on it)."""

from __future__ import annotations

import os
import pathlib

import pytest

from engine.simulate.benchmarks import BenchmarkFormatError
from engine.simulate.trace import TraceError, TraceShape
from tasks import benchmarks, calibrate
from tasks.benchmarks import read_benchmark_files
from tasks.calibrate import WindowsFileError, read_windows_file
from tasks.clients.inputs import InputFileError, open_regular, read_text
from tasks.clients.metrics import file as metrics_file_module
from tasks.clients.metrics.file import FileMetrics
from tasks.clients.metrics.snapshot import MetricsFileError, ModelKey
from tasks.simulate import read_trace

NOT_UTF8 = b"models: []\n# caf\xe9\n"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ONE_MODEL = TraceShape({"ns/m": 1.0})


@pytest.fixture
def fifo(tmp_path: pathlib.Path) -> pathlib.Path:
    """A named pipe nobody writes to: opening it for reading the ordinary way blocks forever."""
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(20)
def test_only_a_regular_file_is_opened_and_a_pipe_never_blocks(tmp_path: pathlib.Path, fifo: pathlib.Path) -> None:
    for path, kind in ((tmp_path, "a directory"), (fifo, "a named pipe (FIFO)"), ("/dev/zero", "a character device")):
        with pytest.raises(InputFileError) as raised:
            open_regular(path)
        assert str(raised.value) == f"{path}: {kind}, not a regular file"
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing")
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")  # what a link points at is what is read
    with pytest.raises(InputFileError, match="a character device"):
        open_regular(link)


def test_a_file_is_read_whole_within_its_limit_as_utf8(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"\xef\xbb\xbfh\xc3\xa9")  # 6 bytes
    assert read_text(path, 6, "a test file").text == "\ufeffhé"
    assert read_text(path, 6, "a test file", encoding="utf-8-sig").text == "hé"
    with pytest.raises(InputFileError, match=r"f\.txt: 6 bytes, larger than the 5 bytes a test file may hold"):
        read_text(path, 5, "a test file")
    sparse = tmp_path / "sparse.yaml"
    with sparse.open("wb") as handle:  # 65 MiB that take no disk: refused by its size, never read
        handle.truncate(65 << 20)
    with pytest.raises(InputFileError, match=r"68,157,440 bytes, larger than the 64 MiB a test file may hold"):
        read_text(sparse, 64 << 20, "a test file")
    path.write_bytes(b"ok\n\xff")
    with pytest.raises(InputFileError, match=r"f\.txt: not UTF-8 text \(byte 3: invalid start byte\)"):
        read_text(path, 100, "a test file")


@pytest.mark.timeout(20)
def test_the_metrics_file_must_be_a_regular_utf8_file_within_64_mib(
    tmp_path: pathlib.Path, fifo: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--metrics-file /dev/zero`` ran out of memory, a named pipe hung the cycle, and text that was not UTF-8 was
    a UnicodeDecodeError without the file's name."""
    assert metrics_file_module.MAX_METRICS_FILE_BYTES == 4 << 20  # what a cycle reads within its time-out
    for path, problem in (
        (pathlib.Path("/dev/zero"), "a character device, not a regular file"),
        (fifo, "a named pipe (FIFO), not a regular file"),
        (tmp_path, "a directory, not a regular file"),
    ):
        with pytest.raises(MetricsFileError) as raised:
            FileMetrics(path).collect([ModelKey("m", "n")])
        assert str(raised.value) == f"{path}: {problem}"
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes(NOT_UTF8)
    with pytest.raises(MetricsFileError, match=r"latin1\.yaml: not UTF-8 text \(byte 16: invalid continuation byte"):
        FileMetrics(binary).collect([ModelKey("m", "n")])
    large = tmp_path / "large.yaml"
    large.write_text("models: []\n" + "#" * 100 + "\n")
    monkeypatch.setattr(metrics_file_module, "MAX_METRICS_FILE_BYTES", 100)
    with pytest.raises(MetricsFileError, match=r"large\.yaml: 112 bytes, larger than the 100 bytes a metrics file"):
        FileMetrics(large).collect([ModelKey("m", "n")])


@pytest.mark.timeout(60)
def test_a_benchmark_file_is_refused_with_one_line_naming_it(
    tmp_path: pathlib.Path, fifo: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not UTF-8 was a UnicodeDecodeError, 200,000 nested ``[`` a RecursionError and ``/dev/zero`` a MemoryError."""
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"x": "caf\xe9"}')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    deep_lines = tmp_path / "deep.jsonl"
    deep_lines.write_text("{}\n" + "[" * 200_000 + "\n")
    for path, message in (
        (latin1, r"latin1\.json: not UTF-8 text \(byte 10: invalid continuation byte\)"),
        (deep, r"deep\.json: JSON nested deeper than it can be read"),
        (deep_lines, r"deep\.jsonl: JSON nested deeper than it can be read"),
        (pathlib.Path("/dev/zero"), "/dev/zero: a character device, not a regular file"),
        (fifo, r"pipe\.yaml: a named pipe \(FIFO\), not a regular file"),
    ):
        with pytest.raises(BenchmarkFormatError, match=message):
            read_benchmark_files([path])
    assert benchmarks.MAX_BENCHMARK_FILE_BYTES == 256 << 20
    monkeypatch.setattr(benchmarks, "MAX_BENCHMARK_FILE_BYTES", 4)
    (small := tmp_path / "five.json").write_text("12345")
    with pytest.raises(BenchmarkFormatError, match=r"five\.json: 5 bytes, larger than the 4 bytes a benchmark"):
        read_benchmark_files([small])


@pytest.mark.timeout(20)
def test_a_windows_file_that_is_not_utf8_or_not_a_file_is_one_line(tmp_path: pathlib.Path, fifo: pathlib.Path) -> None:
    latin1 = tmp_path / "windows.yaml"
    latin1.write_bytes(b"windowSeconds: 300\n# caf\xe9\nvariants: []\n")
    with pytest.raises(WindowsFileError, match=r"windows\.yaml: not UTF-8 text \(byte 24: invalid continuation"):
        read_windows_file(latin1)
    with pytest.raises(WindowsFileError, match=r"pipe\.yaml: a named pipe \(FIFO\), not a regular file"):
        read_windows_file(fifo)
    assert calibrate.MAX_WINDOWS_FILE_BYTES == 64 << 20


def test_a_trace_field_past_the_csv_limit_is_a_trace_error_naming_file_and_line(tmp_path: pathlib.Path) -> None:
    """csv's "field larger than field limit (131072)" was a traceback."""
    trace = tmp_path / "huge.csv"
    trace.write_text(AZURE_HEADER + "0,1,1\n" + "1," + "9" * 200_000 + ",1\n")
    with pytest.raises(TraceError) as raised:
        read_trace(trace, ONE_MODEL)
    assert str(raised.value) == f"trace file {trace}, line 3: field larger than field limit (131072)"


@pytest.mark.timeout(20)
def test_a_trace_that_is_no_regular_file_says_what_it_is(tmp_path: pathlib.Path, fifo: pathlib.Path) -> None:
    """A directory or a named pipe was reported as "does not exist"."""
    assert_trace_error(tmp_path, f"trace file {tmp_path} is a directory, not a regular file")
    assert_trace_error(fifo, f"trace file {fifo} is a named pipe (FIFO), not a regular file")
    assert_trace_error(tmp_path / "nope.csv", f"trace file {tmp_path / 'nope.csv'} does not exist")
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes(AZURE_HEADER.encode() + b"0,1,1\n1,2,3 caf\xe9\n")
    assert_trace_error(latin1, f"trace file {latin1}, line 3: not UTF-8 text (invalid continuation byte)")
    bad_row = tmp_path / "row.csv"
    bad_row.write_text(AZURE_HEADER + "0,x,1\n")
    assert_trace_error(bad_row, f"trace file {bad_row}: row 2: prompt and output tokens must be integers")


def test_a_trace_exported_with_a_byte_order_mark_reads(tmp_path: pathlib.Path) -> None:
    """A spreadsheet's "CSV UTF-8" export begins with a BOM, which made the header '\\ufeffTIMESTAMP'."""
    path = tmp_path / "excel.csv"
    path.write_bytes(
        b"\xef\xbb\xbf" + (AZURE_HEADER + "2023-11-16 18:15:46,374,44\n2023-11-16 18:15:50,396,109\n").encode()
    )
    trace = read_trace(path, ONE_MODEL)
    assert trace.arrival_s.tolist() == [0.0, 4.0] and trace.in_tokens.tolist() == [374, 396]


def assert_trace_error(path: pathlib.Path, message: str) -> None:
    with pytest.raises(TraceError) as raised:
        read_trace(path, ONE_MODEL)
    assert str(raised.value).startswith(message), str(raised.value)
