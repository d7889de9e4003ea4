"""Trace parsing and shaping: the Azure format as it is, other column spellings, slicing, compression,
rate scaling, the day-shaped envelope, the model split, and errors that name the row or column."""

from __future__ import annotations

import csv
import math
import pathlib

import numpy as np
import pytest

from engine.simulate.trace import (
    MAX_REPLAY_REQUESTS,
    MAX_REPLAY_S,
    MAX_REQUEST_TOKENS,
    MAX_TRACE_FIELDS,
    TraceError,
    TraceShape,
    parse_trace_rows,
    shape_trace,
    wave_envelope,
)

AZURE = [
    ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
    ["2023-11-16 18:15:50.9951690", "396", "109"],
    ["2023-11-16 18:15:46.6805900", "374", "44"],
    ["2023-11-16 18:15:51.2224670", "879", "0"],
]


def test_azure_rows_read_as_they_are_sorted_and_relative() -> None:
    t, prompts, outputs = parse_trace_rows(AZURE)
    assert t.tolist() == pytest.approx([0.0, 4.314579, 4.541877])
    assert prompts.tolist() == [374, 396, 879]
    assert outputs.tolist() == [44, 109, 1]  # no generated token still returns one


def test_numeric_seconds_and_other_column_names() -> None:
    t, prompts, outputs = parse_trace_rows(
        [["arrival_s", "prompt_tokens", "output_tokens"], ["10.5", "5", "7"], ["12", "6", "8"], []]
    )
    assert t.tolist() == [0.0, 1.5] and prompts.tolist() == [5, 6] and outputs.tolist() == [7, 8]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "empty"),
        ([["when", "ContextTokens", "GeneratedTokens"], ["1", "2", "3"]], "no time column"),
        ([["TIMESTAMP", "ContextTokens", "GeneratedTokens"], ["1", "x", "3"]], "row 2"),
        ([["TIMESTAMP", "ContextTokens", "GeneratedTokens"], ["yesterday", "1", "3"]], "row 2: timestamp 'yesterday'"),
        ([["TIMESTAMP", "ContextTokens", "GeneratedTokens"], ["1", "-4", "3"]], "from 0 to 10,000,000, got '-4'"),
        ([["TIMESTAMP", "ContextTokens", "GeneratedTokens"], ["1", "4", "nan"]], "row 2: token counts .* got 'nan'"),
        ([["TIMESTAMP", "ContextTokens", "GeneratedTokens"], ["1", "1e20", "3"]], "row 2: token counts .* got '1e20'"),
        ([["TIMESTAMP", "ContextTokens", "GeneratedTokens"], ["1", "1e400", "3"]], "got '1e400'"),
        (
            [["TIMESTAMP", "ContextTokens", "GeneratedTokens"], ["0", "1", "1"], ["inf", "1", "1"]],
            "row 3: .* not a finite number",
        ),
        (
            [["TIMESTAMP", "ContextTokens", "GeneratedTokens"], ["nan", "1", "1"]],
            "row 2: timestamp 'nan' is not a finite number",
        ),
        ([["TIMESTAMP", "ContextTokens", "GeneratedTokens"]], "no requests"),
    ],
)
def test_bad_traces_name_the_problem(rows: list[list[str]], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_trace_rows(rows)


def arrays(n: int = 1000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.arange(n, dtype=float), np.full(n, 100), np.full(n, 10)


def test_slice_and_compression() -> None:
    t, p, o = arrays()
    trace = shape_trace(t, p, o, TraceShape({"ns/m": 1.0}, start_s=100.0, duration_s=200.0, compression=2.0))
    assert len(trace) == 200
    assert trace.arrival_s[0] == 0.0 and trace.arrival_s[-1] == pytest.approx(99.5)


def test_rate_scaling_thins_and_multiplies() -> None:
    t, p, o = arrays(10000)
    half = shape_trace(t, p, o, TraceShape({"ns/m": 1.0}, rate_scale=0.5, seed=1))
    assert 4800 < len(half) < 5200
    triple = shape_trace(t, p, o, TraceShape({"ns/m": 1.0}, rate_scale=3.0, seed=1))
    assert len(triple) == 30000
    assert np.all(np.diff(triple.arrival_s) >= 0) and triple.arrival_s[-1] < 10000


def test_models_get_their_shares_deterministically() -> None:
    t, p, o = arrays(20000)
    shape = TraceShape({"ns/a": 3.0, "ns/b": 1.0}, seed=4)
    first, second = shape_trace(t, p, o, shape), shape_trace(t, p, o, shape)
    assert first.models == ("ns/a", "ns/b")
    assert np.array_equal(first.model_index, second.model_index)
    assert np.mean(first.model_index == 0) == pytest.approx(0.75, abs=0.02)


def test_the_largest_token_count_reads() -> None:
    _, prompts, _ = parse_trace_rows(
        [["arrival_s", "prompt_tokens", "output_tokens"], ["0", f"{MAX_REQUEST_TOKENS}", "1"]]
    )
    assert prompts.tolist() == [MAX_REQUEST_TOKENS]


def test_shape_rejects_nonsense() -> None:
    with pytest.raises(TraceError):
        TraceShape({})
    with pytest.raises(TraceError):
        TraceShape({"ns/m": 1.0}, compression=0)
    for bad in ({"compression": float("inf")}, {"rate_scale": float("nan")}, {"start_s": float("nan")}):
        with pytest.raises(TraceError, match="finite"):
            TraceShape({"ns/m": 1.0}, **bad)
    t, p, o = arrays(10)
    with pytest.raises(TraceError, match="no requests"):
        shape_trace(t, p, o, TraceShape({"ns/m": 1.0}, start_s=100.0))


def test_a_share_must_be_a_finite_weight_above_zero() -> None:
    """An infinite share passed the check and turned every model's probability into NaN ("Probabilities contain
    NaN" from numpy, a traceback)."""
    for weight in (math.inf, math.nan, 0.0, -1.0):
        with pytest.raises(TraceError, match="each with a finite weight > 0"):
            TraceShape({"ns/a": 1.0, "ns/b": weight})


def test_a_replay_too_long_or_too_large_is_refused_before_it_is_built() -> None:
    """A timestamp centuries off, a compression far below 1 or a rate scale in the millions is a clear error, not
    a replay that runs for days or a MemoryError."""
    t, p, o = np.asarray([0.0, MAX_REPLAY_S]), np.full(2, 10), np.full(2, 10)
    assert len(shape_trace(t, p, o, TraceShape({"ns/m": 1.0}))) == 2  # a year exactly replays
    with pytest.raises(TraceError, match="would span 732 days .* at most 366 days"):
        shape_trace(t, p, o, TraceShape({"ns/m": 1.0}, compression=0.5))
    t, p, o = arrays(1000)
    with pytest.raises(TraceError, match=f"makes 1,000,000,000 requests .* at most {MAX_REPLAY_REQUESTS:,}"):
        shape_trace(t, p, o, TraceShape({"ns/m": 1.0}, rate_scale=1e6))


def test_wave_keeps_the_envelope_share_per_interval() -> None:
    t, p, o = arrays(60000)  # one request a second for 1,000 minutes
    shape = TraceShape({"ns/m": 1.0}, wave_floor=0.2, wave_period_s=30000.0, seed=3)
    trace = shape_trace(t, p, o, shape)
    counts = np.bincount((trace.arrival_s // 600).astype(int), minlength=100)
    middles = np.arange(100) * 600 + 300.0
    expected = 600 * wave_envelope(middles, 0.2, 30000.0)
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 0.02 * expected)
    assert counts[0] < 0.25 * 600 and counts[25] > 0.97 * 600  # the low point, then all kept at half the period


def test_wave_period_defaults_to_the_slice_and_is_deterministic() -> None:
    t, p, o = arrays(36000)
    shape = TraceShape({"ns/m": 1.0}, start_s=6000.0, duration_s=24000.0, compression=2.0, wave_floor=0.3, seed=7)
    first, second = shape_trace(t, p, o, shape), shape_trace(t, p, o, shape)
    assert np.array_equal(first.arrival_s, second.arrival_s)
    assert np.array_equal(first.model_index, second.model_index)
    other = shape_trace(
        t, p, o, TraceShape({"ns/m": 1.0}, start_s=6000.0, duration_s=24000.0, compression=2.0, wave_floor=0.3, seed=8)
    )
    assert not np.array_equal(first.arrival_s, other.arrival_s)
    # period = the replayed slice, 12,000 s: low at both ends, everything kept in the middle
    counts = np.bincount((first.arrival_s // 1200).astype(int), minlength=10)  # 2,400 requests per bin before thinning
    assert counts[0] < 0.45 * 2400 and counts[-1] < 0.45 * 2400
    assert counts[4] > 0.93 * 2400 and counts[5] > 0.93 * 2400


@pytest.mark.parametrize("rate_scale", [1.0, 0.5, 2.5])
def test_wave_floor_one_replays_as_recorded(rate_scale: float) -> None:
    t, p, o = arrays(5000)
    plain = shape_trace(t, p, o, TraceShape({"ns/a": 1.0, "ns/b": 2.0}, rate_scale=rate_scale, seed=2))
    flat = shape_trace(
        t,
        p,
        o,
        TraceShape({"ns/a": 1.0, "ns/b": 2.0}, rate_scale=rate_scale, seed=2, wave_floor=1.0, wave_period_s=99.0),
    )
    for name in ("arrival_s", "in_tokens", "out_tokens", "model_index"):
        assert np.array_equal(getattr(plain, name), getattr(flat, name))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"wave_floor": 0.0}, "wave_floor must be > 0 and <= 1"),
        ({"wave_floor": 1.5}, "wave_floor must be > 0 and <= 1"),
        ({"wave_floor": float("nan")}, "wave_floor"),
        ({"wave_floor": 0.5, "wave_period_s": 0.0}, "wave_period_s must be > 0"),
    ],
)
def test_wave_rejects_nonsense(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        TraceShape({"ns/m": 1.0}, **kwargs)


def test_the_replay_how_to_states_the_limits_the_reader_enforces() -> None:
    """docs/how-to/replay-traffic.md writes the limits out by hand: it must say the ones the code has."""
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "how-to" / "replay-traffic.md").read_text()
    text = " ".join(page.split())
    assert f"0 to {MAX_REQUEST_TOKENS:,}" in text
    assert MAX_REPLAY_S == 366 * 86_400.0 and "spans at most a year" in text
    assert f"at most {MAX_REPLAY_REQUESTS // 1_000_000} million requests" in text


HEADER = ["time", "in_tokens", "output_tokens"]


def test_a_row_with_more_fields_than_a_trace_can_have_is_refused_in_one_short_line() -> None:
    """A row of ``0,x`` and 5x10^7 empty fields was quoted whole: a 200 MB error line and 4.6 GB of memory; with
    valid tokens it replayed.  A row, the header too, is refused by its count of fields, its content never quoted."""
    wide = [""] * 100_000
    cases = [
        ([HEADER, ["0", "x", *wide]], "row 2 has 100,002 fields"),
        ([HEADER, ["0", "1", "1"], ["1", "10", "10", *wide]], "row 3 has 100,003 fields"),
        ([[*HEADER, *wide], ["0", "1", "1"]], "row 1 has 100,003 fields"),
    ]
    for rows, message in cases:
        with pytest.raises(TraceError) as raised:
            parse_trace_rows(rows)
        assert str(raised.value).startswith(message) and len(str(raised.value)) < 200, str(raised.value)[:300]
    parse_trace_rows([[*HEADER, *[""] * (MAX_TRACE_FIELDS - 3)], ["0", "1", "1", *[""] * (MAX_TRACE_FIELDS - 3)]])


def test_an_error_quotes_at_most_a_bounded_part_of_the_trace() -> None:
    """Each message that quotes a cell or the header cuts the quote: a cell may be 131,072 characters long."""
    long = "y" * 100_000
    cases = [
        [["when", long, "in_tokens", "output_tokens"], ["0", "1", "1", "1"]],
        [HEADER, [long, "1", "1"]],
        [HEADER, ["0", long, "1"]],
        [HEADER, ["0", "1", "1e" + "9" * 100_000]],
        [HEADER, ["0", "1"]],
    ]
    for rows in cases:
        with pytest.raises(TraceError) as raised:
            parse_trace_rows(rows)
        assert "\n" not in str(raised.value) and len(str(raised.value)) < 300, str(raised.value)[:300]


def test_timestamps_too_far_apart_for_a_finite_span_are_refused_naming_the_row() -> None:
    """``1e308`` and ``-1e308`` are finite but their difference is not: the later one's arrival became inf and the
    slice (``< end``) dropped it without a word ("replaying 1 requests")."""
    with pytest.raises(
        TraceError, match=r"^row 4: timestamp '-1e308' is too far from row 2's: .* not a finite number of seconds$"
    ):
        parse_trace_rows([HEADER, ["1e308", "10", "10"], ["0", "1", "1"], ["-1e308", "1", "1"]])
    t, p, o = np.asarray([0.0, math.inf]), np.full(2, 10), np.full(2, 10)
    with pytest.raises(TraceError, match="finite"):
        shape_trace(t, p, o, TraceShape({"ns/m": 1.0}))


def test_a_fractional_token_count_is_refused_and_a_whole_one_written_as_a_float_reads() -> None:
    """``10.9`` was cut to 10 though the message says counts must be integers; ``10.0`` and ``1e3`` (a float column
    exported whole) stay accepted, as they were."""
    with pytest.raises(TraceError, match=r"^row 2: token counts must be integers, got '10\.9'$"):
        parse_trace_rows([HEADER, ["0", "10.9", "10"]])
    with pytest.raises(TraceError, match=r"^row 3: token counts must be integers, got '0\.5'$"):
        parse_trace_rows([HEADER, ["0", "10", "10"], ["1", "10", "0.5"]])
    _, prompts, outputs = parse_trace_rows([HEADER, ["0", "10.0", "1e3"]])
    assert prompts.tolist() == [10] and outputs.tolist() == [1000]


def test_a_file_row_longer_than_any_acceptable_row_is_refused_before_it_is_read_whole(tmp_path: pathlib.Path) -> None:
    """csv parses a whole row before its fields can be counted (a 50 MB row took 4.6 GB): a row longer than
    ``MAX_TRACE_FIELDS`` fields of csv's field limit can be is refused as it is read, on one line or over several
    (a quoted field holds line breaks); rows nearly that long, one after the other, still read.  csv's field limit
    is lowered so that the files stay small."""
    from tasks.traces import read_trace_rows

    limit = csv.field_size_limit(1_000)
    try:
        wide = tmp_path / "wide.csv"
        wide.write_text("time,in_tokens,output_tokens\n0,1,1\n1,10,10" + "," * 200_000 + "\n")
        split = tmp_path / "split.csv"
        split.write_text("time,in_tokens,output_tokens\n0,1,1\n1,10,10" + "," * 70_000 + '"a\nb"' + "," * 70_000 + "\n")
        for path, line in ((wide, 3), (split, 4)):
            with pytest.raises(TraceError) as raised:
                read_trace_rows(path)
            message = str(raised.value)
            assert message.startswith(f"trace file {path}, line {line}: longer than ") and len(message) < 300, message
        # every field but the three read at csv's limit, each character a doubled quote
        longest = tmp_path / "longest.csv"
        notes = [f"note{i}" for i in range(MAX_TRACE_FIELDS - 3)]
        full = '"' + '""' * 1_000 + '"'
        rows = [",".join([str(second), "1", "1", *[full] * len(notes)]) for second in range(3)]
        longest.write_text("\r\n".join([",".join([*HEADER, *notes]), *rows, ""]))
        t, prompts, _ = read_trace_rows(longest)
        assert t.tolist() == [0.0, 1.0, 2.0] and prompts.tolist() == [1, 1, 1]
    finally:
        csv.field_size_limit(limit)
