"""Parsing of the optimizer's ConfigMaps (WVA formats), pure and strict.

The optimize flow reads these ConfigMaps from the Modelplane namespace and hands their ``data``
dicts here. Every parse error names the ConfigMap and key, so a typo in one entry is reported as a
condition on the affected resources instead of crashing the whole cycle.

Formats (as the Workload Variant Autoscaler uses them):

* ``accelerator-unit-costs``: key = accelerator name, value = JSON ``{"device": "...", "cost": "40.00"}``.
* service classes (``service-classes-config``): key = class file (e.g. ``premium.yaml``), value = YAML
  ``{name, priority, data: [{model, slo-tpot, slo-ttft, slo-tps?, slo-attainment?}]}``; priority 1 is the
  highest. ``slo-attainment`` (Modelplane's own) is the share of the model's requests that must meet the
  targets, a fraction within 0.5..0.999 (:mod:`engine.slo.target`).
* ``accelerator-inventory`` (optional, Modelplane's own): key = accelerator name, value = count.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import yaml

from engine import yaml11
from engine.errors import InputError, shown
from engine.slo.target import SERVICE_CLASS_KEY, check_attainment

ACCELERATOR_COSTS_CONFIGMAP = "accelerator-unit-costs"
SERVICE_CLASSES_CONFIGMAP = "service-classes-config"
SATURATION_CONFIGMAP = "saturation-scaling-config"
INVENTORY_CONFIGMAP = "accelerator-inventory"

Entry = TypeVar("Entry")


class ConfigError(InputError):
    """A ConfigMap entry could not be parsed; ``source`` names ``<configmap>/<key>``."""

    @property
    def source(self) -> str:
        """The entry: ``<configmap>/<key>``."""
        return self.where


@dataclass(frozen=True)
class AcceleratorCost:
    """Unit cost of one accelerator of a type (cost per accelerator per unit time)."""

    name: str
    device: str
    cost: float


@dataclass(frozen=True)
class ModelSLO:
    """Latency targets of one model within a service class (milliseconds; tps in tokens/s)."""

    model: str
    ttft_ms: float | None = None
    itl_ms: float | None = None
    tps: float | None = None
    attainment: float | None = None
    """Share of requests that must meet the targets (``slo-attainment``); None: not set by this class."""


@dataclass(frozen=True)
class ServiceClass:
    """A named service class: a priority (1 = highest) and per-model SLOs."""

    name: str
    priority: int
    slos: dict[str, ModelSLO] = field(default_factory=dict)

    def slo_for(self, model: str) -> ModelSLO | None:
        """The SLO this class sets for ``model``, if any."""
        return self.slos.get(model)


def _positive_number(value: Any, source: str, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(source, f"{what} must be a number, got {shown(value)}") from None
    if not math.isfinite(number) or number < 0:
        raise ConfigError(source, f"{what} must be a finite non-negative number, got {shown(value)}")
    return number


def parse_accelerator_costs(data: Mapping[str, str]) -> tuple[dict[str, AcceleratorCost], list[ConfigError]]:
    """Parse ``accelerator-unit-costs``; returns the good entries and one error per bad key."""
    return _parse_entries(data, ACCELERATOR_COSTS_CONFIGMAP, _accelerator_cost)


def _accelerator_cost(key: str, value: str, source: str) -> AcceleratorCost:
    entry = _mapping(value, source, "JSON", "a JSON object with 'device' and 'cost'")
    if "cost" not in entry:
        raise ConfigError(source, "missing 'cost'")
    cost = _positive_number(entry["cost"], source, "cost")
    device = entry.get("device", key)
    if not isinstance(device, str) or not device:
        raise ConfigError(source, f"device must be a non-empty string, got {shown(device)}")
    return AcceleratorCost(name=key, device=device, cost=cost)


def _mapping(value: str, source: str, language: Literal["JSON", "YAML"], expected: str) -> dict[str, Any]:
    """An entry's value parsed as ``language``: it must be ``expected`` (a mapping), else a ConfigError saying why."""
    try:
        doc = json.loads(value) if language == "JSON" else yaml11.safe_load(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(source, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, f"invalid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(source, f"value must be {expected}")
    return doc


def parse_service_class(value: str, source: str) -> ServiceClass:
    """Parse one service-class YAML document (the value behind a VariantAutoscaling's ``sloClassRef``)."""
    doc = _mapping(value, source, "YAML", "a YAML mapping with name, priority and data")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(source, "'name' must be a non-empty string")
    priority = doc.get("priority", 1)
    if not isinstance(priority, int) or isinstance(priority, bool) or priority < 1:
        raise ConfigError(source, f"'priority' must be an integer >= 1 (1 = highest), got {shown(priority)}")
    entries = doc.get("data") or []
    if not isinstance(entries, list):
        raise ConfigError(source, "'data' must be a list of {model, slo-tpot, slo-ttft}")
    slos: dict[str, ModelSLO] = {}
    for index, entry in enumerate(entries):
        where = f"{source} data[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            raise ConfigError(where, "each entry needs a 'model' string")
        _refuse_misspelt_keys(entry, where)
        slos[entry["model"]] = ModelSLO(
            model=entry["model"],
            ttft_ms=_optional_number(entry, "slo-ttft", where),
            itl_ms=_optional_number(entry, "slo-tpot", where),
            tps=_optional_number(entry, "slo-tps", where),
            attainment=_optional_attainment(entry, where),
        )
    return ServiceClass(name=name, priority=priority, slos=slos)


SERVICE_CLASS_ENTRY_KEYS = ("model", "slo-ttft", "slo-tpot", "slo-tps", SERVICE_CLASS_KEY)
"""The keys of a service-class entry this optimizer reads."""


def _refuse_misspelt_keys(entry: Mapping[str, Any], source: str) -> None:
    """Refuse a key that is a near miss of one this optimizer reads (``slo-ttf``): read as WVA reads the ConfigMap,
    it would be ignored and the target it meant dropped without a word. Other unknown keys stay ignored, as WVA
    ignores them, so a key a newer WVA adds to the same ConfigMap does not break this reader."""
    for key in entry:
        if not isinstance(key, str) or key in SERVICE_CLASS_ENTRY_KEYS:
            continue
        near = difflib.get_close_matches(key, SERVICE_CLASS_ENTRY_KEYS, n=1, cutoff=0.85)
        if near:
            raise ConfigError(source, f"unknown key {shown(key)}: did you mean {near[0]!r}?")


def _optional_number(entry: Mapping[str, Any], key: str, source: str) -> float | None:
    if entry.get(key) is None:
        return None
    value = _positive_number(entry[key], source, key)
    if value == 0:
        raise ConfigError(source, f"{key} must be greater than 0")
    return value


def _optional_attainment(entry: Mapping[str, Any], source: str) -> float | None:
    if entry.get(SERVICE_CLASS_KEY) is None:
        return None
    try:
        return check_attainment(entry[SERVICE_CLASS_KEY])
    except ValueError as exc:
        raise ConfigError(source, f"{SERVICE_CLASS_KEY} {exc}") from None


def parse_service_classes(
    data: Mapping[str, str], configmap: str = SERVICE_CLASSES_CONFIGMAP
) -> tuple[dict[str, ServiceClass], list[ConfigError]]:
    """Parse every key of a service-classes ConfigMap; returns classes by key and per-key errors."""
    return _parse_entries(data, configmap, lambda key, value, source: parse_service_class(value, source))


def parse_inventory(data: Mapping[str, str]) -> tuple[dict[str, int], list[ConfigError]]:
    """Parse ``accelerator-inventory``: accelerator name -> number of accelerators available."""
    return _parse_entries(data, INVENTORY_CONFIGMAP, _inventory_count)


def _inventory_count(key: str, value: str, source: str) -> int:
    try:
        count = int(str(value).strip())
    except ValueError:
        raise ConfigError(source, f"count must be an integer, got {shown(value)}") from None
    if count < 0:
        raise ConfigError(source, f"count must be >= 0, got {count}")
    return count


def _parse_entries(
    data: Mapping[str, str], configmap: str, parse: Callable[[str, str, str], Entry]
) -> tuple[dict[str, Entry], list[ConfigError]]:
    """Each key of a ConfigMap parsed on its own by ``parse(key, value, "<configmap>/<key>")``: the good entries by
    key, and one error per bad key (a bad entry never hides the good ones)."""
    entries: dict[str, Entry] = {}
    errors: list[ConfigError] = []
    for key in sorted(data, key=str):
        source = f"{configmap}/{key}"
        try:
            if not isinstance(data[key], str):  # ConfigMap data is map[string]string: an API server refuses others
                raise ConfigError(source, f"value must be a string, got {type(data[key]).__name__}")
            entries[key] = parse(key, data[key], source)
        except ConfigError as exc:
            errors.append(exc)
    return entries, errors
