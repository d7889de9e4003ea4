"""WVA ConfigMap parsing: good entries load, each bad key is reported with its ConfigMap and key."""

from __future__ import annotations

from decimal import Decimal

import pytest

from engine.optimize.config import (
    ConfigError,
    parse_accelerator_costs,
    parse_inventory,
    parse_service_class,
    parse_service_classes,
)
from engine.units import duration_seconds, format_duration, parse_quantity


def test_accelerator_costs_parse_wva_json_and_report_bad_keys() -> None:
    costs, errors = parse_accelerator_costs(
        {
            "A100": '{"device": "NVIDIA-A100-PCIE-80GB", "cost": "40.00"}',
            "H100": '{"device": "NVIDIA-H100-80GB-HBM3", "cost": 80}',
            "BAD": "{not json",
            "NEG": '{"device": "x", "cost": "-1"}',
            "NOCOST": '{"device": "x"}',
            "INF": '{"device": "x", "cost": 1e400}',
            "NAN": '{"device": "x", "cost": "NaN"}',
            "DEVICE": '{"device": {"name": "x"}, "cost": 1}',
            "DECODED": {"device": "x", "cost": 1},  # type: ignore[dict-item]
        }
    )
    assert {k: v.cost for k, v in costs.items()} == {"A100": 40.0, "H100": 80.0}
    assert costs["A100"].device == "NVIDIA-A100-PCIE-80GB"
    by_source = {e.source.split("/")[-1]: str(e) for e in errors}
    assert sorted(by_source) == ["BAD", "DECODED", "DEVICE", "INF", "NAN", "NEG", "NOCOST"]
    assert "value must be a string, got dict" in by_source["DECODED"]
    assert "invalid JSON" in by_source["BAD"]
    assert "cost must be a finite non-negative number, got inf" in by_source["INF"]
    assert "device must be a non-empty string" in by_source["DEVICE"]


def test_service_class_parses_priority_and_slos() -> None:
    klass = parse_service_class(
        "name: Premium\npriority: 1\ndata:\n  - model: meta/llama-3.1-8b\n    slo-tpot: 24\n    slo-ttft: 500\n",
        "service-classes-config/premium.yaml",
    )
    assert klass.name == "Premium" and klass.priority == 1
    slo = klass.slo_for("meta/llama-3.1-8b")
    assert slo is not None and slo.itl_ms == 24 and slo.ttft_ms == 500 and slo.tps is None
    assert klass.slo_for("other") is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("name: X\npriority: 0\n", "priority"),
        ("priority: 1\n", "name"),
        ("name: X\ndata: {a: 1}\n", "data"),
        ("name: X\ndata:\n  - slo-tpot: 3\n", "model"),
        ("name: X\ndata:\n  - model: m\n    slo-ttft: fast\n", "slo-ttft"),
        ("name: X\ndata:\n  - model: m\n    slo-ttft: 0\n", "slo-ttft"),
        ("name: X\ndata:\n  - model: m\n    slo-ttft: .inf\n", "slo-ttft must be a finite non-negative number"),
        ("name: X\ndata:\n  - model: m\n    slo-tpot: .nan\n", "slo-tpot must be a finite non-negative number"),
        ("[unclosed", "invalid YAML"),
        ("name: X\ndata:\n  - model: m\n    slo-ttf: 500\n", "unknown key 'slo-ttf': did you mean 'slo-ttft'?"),
        ("name: X\ndata:\n  - model: m\n    slo-attainmnet: 0.9\n", "did you mean 'slo-attainment'?"),
    ],
)
def test_bad_service_class_names_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_service_class(text, "cm/key")
    assert info.value.source.startswith("cm/key") and fragment in str(info.value)


def test_a_service_class_entry_ignores_keys_it_does_not_know_as_wva_does() -> None:
    """A key this reader does not know and that is no near miss of one it does (a key a newer WVA adds) is ignored,
    so the entry's targets still apply."""
    klass = parse_service_class(
        "name: X\ndata:\n  - model: m\n    slo-ttft: 500\n    slo-tbt: 30\n    slo-ttft-p99: 900\n", "cm/key"
    )
    slo = klass.slo_for("m")
    assert slo is not None and slo.ttft_ms == 500


def test_service_classes_keep_good_keys_when_one_is_bad() -> None:
    classes, errors = parse_service_classes({"good.yaml": "name: Free\npriority: 2\n", "bad.yaml": "name: [x"})
    assert list(classes) == ["good.yaml"] and classes["good.yaml"].priority == 2
    assert [e.source for e in errors] == ["service-classes-config/bad.yaml"]


def test_inventory_counts() -> None:
    inventory, errors = parse_inventory({"A100": "16", "H100": " 8 ", "L40S": "many", "MI300X": "-2"})
    assert inventory == {"A100": 16, "H100": 8}
    assert sorted(e.source for e in errors) == ["accelerator-inventory/L40S", "accelerator-inventory/MI300X"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5", Decimal(5)),
        ("500m", Decimal("0.5")),
        ("1Ki", Decimal(1024)),
        ("2G", Decimal("2e9")),
        (3, Decimal(3)),
        ("1.5", Decimal("1.5")),
        ("1e3", Decimal(1000)),
    ],
)
def test_parse_quantity(value: object, expected: Decimal) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize("value", ["", "five", "5x", "1KiB", True])
def test_parse_quantity_rejects_garbage(value: object) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("1d", 86400.0),
        ("24h", 86400.0),
        ("2w", 1209600.0),
        ("500ms", 0.5),
        ("1y", 31536000.0),
    ],
)
def test_a_promql_duration_in_seconds(text: str, seconds: float) -> None:
    """What a flow's PromQL duration parameter holds, days and weeks included (``format_window`` writes ``1d``)."""
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(180, "3m"), (86400, "1d"), (90, "90s"), (1.5, "1.5s"), (0, "0s"), (7200.0, "2h"), (10_000_000, "10000000s")],
)
def test_a_duration_is_written_in_the_largest_unit_that_states_it(seconds: float, shown: str) -> None:
    """One formatter for the command line's defaults and bounds and, in whole seconds, PromQL windows: never an
    exponent (``1e+07s`` is no duration either reads)."""
    assert format_duration(seconds) == shown


@pytest.mark.parametrize("text", ["", "1", "1.5h", "-1h", "1 d", "1e308s", "1hx", "h"])
def test_a_promql_duration_refuses_what_prometheus_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="PromQL duration"):
        duration_seconds(text)
