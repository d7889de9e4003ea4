"""Benchmarks write their own marked section of docs/benchmarks.md (bench.engine.write_section)."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from bench.engine import publish_section, reproduce, write_section

A, A_END, B, B_END = "<!-- a:start -->", "<!-- a:end -->", "<!-- b:start -->", "<!-- b:end -->"


def test_a_section_is_replaced_in_place_and_appended_with_one_final_newline(tmp_path: pathlib.Path) -> None:
    doc = tmp_path / "benchmarks.md"
    write_section(f"{A}\nfirst\n{A_END}", A, A_END, doc)
    write_section(f"{B}\nother\n{B_END}", B, B_END, doc)
    write_section(f"{A}\nsecond\n{A_END}\n\n", A, A_END, doc)
    assert doc.read_text() == f"# Benchmarks\n\n{A}\nsecond\n{A_END}\n\n{B}\nother\n{B_END}\n"


def test_publishing_without_write_only_prints(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "benchmarks.md"
    publish_section(f"{A}\nrow\n{A_END}", A, A_END, write=False, doc=doc)
    assert capsys.readouterr().out == f"{A}\nrow\n{A_END}\n" and not doc.exists()
    publish_section(f"{A}\nrow\n{A_END}", A, A_END, doc=doc)
    assert doc.read_text() == f"# Benchmarks\n\n{A}\nrow\n{A_END}\n"


def test_the_reproducing_command_names_only_the_options_that_differ_from_their_defaults() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--start", default="static")
    parser.add_argument("--no-write", action="store_true")
    defaults = parser.parse_args([])
    assert reproduce("bench.x", parser, defaults, "seeds", "start") == "python -m bench.x"
    changed = parser.parse_args(["--seeds", "3", "4", "--start", "manifests", "--no-write"])
    assert reproduce("bench.x", parser, changed, "seeds", "start") == "python -m bench.x --seeds 3 4 --start manifests"
