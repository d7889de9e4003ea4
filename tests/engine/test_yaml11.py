"""Configuration YAML read as the Kubernetes reader reads it (engine.yaml11)."""

from __future__ import annotations

import pytest

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
