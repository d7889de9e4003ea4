"""The GPUs of a cluster as AIM sees them: Node labels read into a per-model inventory, and the scheduling terms
that send a replica to nodes with its GPU.

:func:`cluster_gpus` reads AMD (``amd.com/gpu.device-id`` and family labels, aim-engine's device table) and NVIDIA
(GPU feature discovery's ``nvidia.com/gpu.product`` and ``nvidia.com/gpu.count``) Node labels;
:func:`node_affinity` and :func:`gpu_resource_name` are what a rendered InferenceService asks the scheduler for.
Template resolution (:mod:`engine.aim.templates`) and the service plan (:mod:`engine.aim.services`) use them.
Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.api.views import Node

AMD_DEVICE_IDS: dict[str, str] = {
    **dict.fromkeys(("738c", "738e"), "MI100"),
    **dict.fromkeys(("7408", "740c"), "MI250X"),
    **dict.fromkeys(("740f", "7410"), "MI210"),
    "74a0": "MI300A",
    **dict.fromkeys(("74a1", "74a9", "74b5", "74bd"), "MI300X"),
    **dict.fromkeys(("74a2", "74a8", "74b6"), "MI308X"),
    **dict.fromkeys(("74a5", "74b9"), "MI325X"),
    **dict.fromkeys(("75a0", "75b0"), "MI350X"),
    **dict.fromkeys(("75a3", "75b3"), "MI355X"),
    **dict.fromkeys(("7460", "7461"), "V710"),
    **dict.fromkeys(("7448", "744a"), "W7900"),
    **dict.fromkeys(("7449", "745e"), "W7800"),
    "73a2": "W6900X",
    "73a3": "W6800",
    "73ab": "W6800X",
    **dict.fromkeys(("73a1", "73ae"), "V620"),
    "7550": "RX9070",
    "744c": "RX7900",
    "73af": "RX6900",
    "73bf": "RX6800",
}
"""AMD PCI device id -> GPU model (aim-engine's table)."""
AMD_MODELS = frozenset(AMD_DEVICE_IDS.values())
AMD_RESOURCE = "amd.com/gpu"
NVIDIA_RESOURCE = "nvidia.com/gpu"
AMD_DEVICE_LABELS = ("amd.com/gpu.device-id", "beta.amd.com/gpu.device-id")
AMD_FAMILY_LABELS = ("amd.com/gpu.family", "beta.amd.com/gpu.family")
AMD_COUNT_LABEL = "amd.com/gpu.count"
NVIDIA_PRODUCT_LABEL = "nvidia.com/gpu.product"
NVIDIA_COUNT_LABEL = "nvidia.com/gpu.count"

_MODEL_TOKEN = re.compile(r"^(MI|ME|RX|RTX|GTX|A|H|L|T|V|K|P|QUADRO|TESLA|GRID)?[A-Z]*[0-9]+[A-Z0-9]*$")
_SPLIT = re.compile(r"[- /:]+")


def normalize_gpu_model(name: str) -> str:
    """A GPU model name as aim-engine compares them: ``MI300X (rev 2)`` -> ``MI300X``,
    ``Instinct-MI325X`` -> ``MI325X``, ``NVIDIA-H100-80GB-HBM3`` -> ``H100``."""
    tokens = [t for t in _SPLIT.split(name.strip().replace("_", "-").upper()) if t]
    for token in tokens:
        if token in ("AMD", "INSTINCT"):
            continue
        if _MODEL_TOKEN.match(token):
            return token.removeprefix("INSTINCT")
    return tokens[0] if tokens else ""


@dataclass(frozen=True)
class NodeGPU:
    """The GPUs of one node: vendor resource name, normalised model, count (when labelled), and the
    node label (key, value) that identified the model (for node affinity)."""

    node: str
    resource: str
    model: str
    count: int | None
    label: tuple[str, str]


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _amd_device_model(device_id: str) -> str:
    key = device_id.strip().lower().removeprefix("0x")
    return AMD_DEVICE_IDS.get(key, f"AMD-{key.upper()}")


def _amd_labelled(labels: Mapping[str, str], keys: Sequence[str]) -> tuple[str, int | None, tuple[str, str]] | None:
    """The AMD GPU named by one of ``keys``: the model as labelled, the count the label encodes (None: the
    node's count label says it), and the label; or None when none is set.

    A label ``<key>: <model>`` comes first; else a count-encoded one, ``<key>.<model>: <count>`` (the first in
    label order whose count is not 0)."""
    for key in keys:
        if labels.get(key):
            return labels[key], None, (key, labels[key])
    for key, value in sorted(labels.items()):
        for prefix in keys:
            if key.startswith(prefix + ".") and value not in ("", "0"):
                return key[len(prefix) + 1 :], _int(value), (key, value)
    return None


def node_gpu(node: Node) -> NodeGPU | None:
    """The GPU of a node from its labels (AMD device id, count-encoded ids, family; then NVIDIA
    product), or ``None`` when no model can be determined (such nodes are ignored, as upstream)."""
    labels: Mapping[str, str] = node.metadata.labels
    name = node.metadata.name or ""
    amd_count = _int(labels.get(AMD_COUNT_LABEL))
    for keys, model_of in ((AMD_DEVICE_LABELS, _amd_device_model), (AMD_FAMILY_LABELS, normalize_gpu_model)):
        found = _amd_labelled(labels, keys)
        if found is not None:
            model, count, label = found
            return NodeGPU(name, AMD_RESOURCE, model_of(model), count or amd_count, label)
    product = labels.get(NVIDIA_PRODUCT_LABEL)
    if product:
        return NodeGPU(
            name,
            NVIDIA_RESOURCE,
            normalize_gpu_model(product),
            _int(labels.get(NVIDIA_COUNT_LABEL)),
            (NVIDIA_PRODUCT_LABEL, product),
        )
    return None


@dataclass(frozen=True)
class GpuInventory:
    """The GPUs the cluster's nodes carry, by normalised model."""

    nodes: tuple[NodeGPU, ...] = ()

    def models(self) -> list[str]:
        """Every GPU model present, sorted."""
        return sorted({n.model for n in self.nodes})

    def of(self, model: str) -> list[NodeGPU]:
        """The nodes carrying ``model`` (any spelling)."""
        wanted = normalize_gpu_model(model)
        return [n for n in self.nodes if n.model == wanted]


def cluster_gpus(nodes: Iterable[Node]) -> GpuInventory:
    """The GPU inventory of a Node list."""
    return GpuInventory(tuple(gpu for gpu in (node_gpu(n) for n in nodes) if gpu is not None))


def gpu_resource_name(model: str, inventory: GpuInventory | None = None) -> str:
    """The extended resource a pod requests for ``model``: what its nodes advertise, else by vendor."""
    if inventory is not None:
        found = inventory.of(model)
        if found:
            return found[0].resource
    return AMD_RESOURCE if normalize_gpu_model(model) in AMD_MODELS else NVIDIA_RESOURCE


def gpu_unavailable(model: str, per_replica: int | None, inventory: GpuInventory) -> str | None:
    """Why ``model`` x ``per_replica`` cannot be placed in the cluster, or ``None`` when it can.

    The model must be present; when the nodes label their GPU count, some node must have at least
    ``per_replica`` of them.
    """
    present = inventory.of(model)
    if not present:
        available = ", ".join(inventory.models()) or "none"
        return f"Required GPU model '{normalize_gpu_model(model)}' not available in cluster. Available: {available}"
    counts = [n.count for n in present if n.count is not None]
    if per_replica and counts and len(counts) == len(present) and max(counts) < per_replica:
        return f"{per_replica} x {normalize_gpu_model(model)} per replica needed; the largest node has {max(counts)}"
    return None


def node_affinity(model: str, inventory: GpuInventory) -> dict[str, Any] | None:
    """Required node affinity placing a workload on ``model`` nodes: every AMD device id of the model
    (as aim-engine), or the exact node label values seen for NVIDIA/family-labelled nodes."""
    wanted = normalize_gpu_model(model)
    terms: dict[str, set[str]] = {}
    if wanted in AMD_MODELS:
        terms[AMD_DEVICE_LABELS[0]] = {i for i, m in AMD_DEVICE_IDS.items() if m == wanted}
    for gpu in inventory.of(model):
        key, value = gpu.label
        if key in AMD_DEVICE_LABELS:
            key = AMD_DEVICE_LABELS[0]
            value = value.lower().removeprefix("0x")
        terms.setdefault(key, set()).add(value)
    if not terms:
        return None
    # One selector term per label key: nodes labelled either way qualify (terms are ORed).
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": sorted(values)}]}
                    for key, values in sorted(terms.items())
                ]
            }
        }
    }
