"""Configuration YAML read as the Kubernetes reader reads it (engine.yaml11)."""

from __future__ import annotations

import re

import pytest
import yaml

from engine import yaml11
from engine.optimize.config import ConfigError, parse_service_class
from engine.perf.saturation import parse_saturation_config


@pytest.mark.parametrize("text", ["0b_", "0x_", "-0b__", "+0x_"])
def test_a_number_pattern_that_is_no_number_is_a_string(text: str) -> None:
    assert yaml11.safe_load(f"a: {text}") == {"a": text}
    assert yaml11.safe_load(f"a: '{text}'") == {"a": text}


def test_numbers_and_the_other_yaml11_scalars_are_read_as_pyyaml_reads_them() -> None:
    text = "{b: 0b101, h: 0x1F, o: 0755, s: '1:30', t: 1:30, u: 1_000, f: 1.5e+3, i: .inf, y: yes, n: ~, d: 2024-01-01}"
    loaded = yaml11.safe_load(text)
    assert loaded["b"] == 5 and loaded["h"] == 31 and loaded["o"] == 493 and loaded["t"] == 90
    assert loaded["s"] == "1:30" and loaded["u"] == 1000 and loaded["f"] == 1500.0 and loaded["i"] == float("inf")
    assert loaded["y"] is True and loaded["n"] is None and str(loaded["d"]) == "2024-01-01"


def test_a_service_class_with_no_number_where_a_number_belongs_is_a_config_error_naming_the_field() -> None:
    """It raised ValueError out of PyYAML's constructor before: no ConfigError, nothing naming the field."""
    with pytest.raises(ConfigError, match="'priority' must be an integer >= 1.*'0b_'"):
        parse_service_class("name: Premium\npriority: 0b_\n", "service-classes-config/premium.yaml")


def test_a_saturation_threshold_that_is_no_number_names_the_key() -> None:
    config = parse_saturation_config({"default": "kvCacheThreshold: 0x_\n"})
    assert config.default.kv_cache_threshold == 0.8
    assert len(config.errors) == 1 and config.errors[0].startswith("default:") and "0x_" in config.errors[0]


def _bomb(levels: int) -> str:
    """``levels`` levels of nine aliases each (a "billion laughs" at nine): a few hundred bytes."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (_bomb(9), "nodes written expand to 490329064"),
        (
            "s: &s " + "x" * 65_536 + "\nl: [" + ", ".join(["*s"] * 600) + "]\n",
            "excessive aliasing: 65538 bytes of text written expand to 39387138",
        ),
        ("a: " + "[" * 101 + "]" * 101 + "\n", "nested more than 100 levels deep"),
        ("arrivalRate: 1200\narrivalRate: 1\n", "duplicate key 'arrivalRate'"),
        ("a: &r {self: *r}\n", "recursive alias"),
        ("x: !!bool maybe\n", "cannot read 'maybe' as tag:yaml.org,2002:bool (KeyError)"),
        ("x: !!int abc\n", "cannot read 'abc' as tag:yaml.org,2002:int (ValueError)"),
        ("x: !!float abc\n", "as tag:yaml.org,2002:float (ValueError)"),
        ("x: !!timestamp nope\n", "as tag:yaml.org,2002:timestamp (AttributeError)"),
    ],
    ids=["alias bomb", "shared long text", "deep", "key twice", "recursive alias", "bool", "int", "float", "timestamp"],
)
def test_configuration_yaml_is_refused_as_a_yaml_error_before_anything_walks_it(text: str, problem: str) -> None:
    """A metrics file, windows file or ConfigMap value holding a few hundred bytes of aliases took 6-8 GB once an
    error message printed it; 990 levels of brackets ended in RecursionError; a key written twice kept the last
    value silently; ``!!bool maybe`` raised KeyError out of PyYAML. Each is a YAMLError naming the problem."""
    with pytest.raises(yaml.YAMLError, match=re.escape(problem)):
        yaml11.safe_load(text)


def test_what_the_checks_allow_is_read() -> None:
    """100 levels, a block shared a few times, a long text used once: all read as before."""
    deep = yaml11.safe_load("a: " + "[" * 99 + "]" * 99 + "\n")["a"]  # the root mapping is the 100th level
    for _ in range(98):
        (deep,) = deep
    assert deep == []
    shared = yaml11.safe_load("base: &b {cost: 1}\nx: *b\ny: *b\nlong: " + "x" * 100_000 + "\n")
    assert shared["x"] is shared["y"] and shared["x"] == {"cost": 1} and len(shared["long"]) == 100_000
    assert yaml11.safe_load("x: !!bool yes\ny: !!int '7'\n") == {"x": True, "y": 7}
