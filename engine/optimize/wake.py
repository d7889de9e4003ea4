"""Scale from zero: a model with no replica and requests waiting at its gateway gets one replica.

Why: a model whose variants all sit at zero replicas exports no vLLM metric, so the cycle sees no load for
it and holds it at zero however many requests arrive; the requests wait at the gateway until they time
out.  The gateway does see them: the inference scheduler's flow-control queue
(``llm_d_epp_flow_control_queue_size``, formerly ``inference_extension_flow_control_queue_size``, by
``target_model_name``), which WVA's scale-from-zero engine reads for the same purpose.  So when that
queue holds requests for a model with no replica, the cheapest of its valid variants with room in the
accelerator inventory gets one (as WVA's engine checks its GPU limiter);
once it serves, the model's own metrics size it as any other.

Pure: the cycle's inputs in, the variants to wake and why out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.optimize.spec import CycleInputs, VariantSpec, free_accelerators, replica_cost
from engine.perf.saturation import REASON_OPTIMIZATION_SUCCEEDED

__all__ = ["Wake", "variants_to_wake", "woken_decision"]


@dataclass(frozen=True)
class Wake:
    """What the gateway's queue asks of one variant this cycle."""

    replicas: int
    """1: scale it from zero; 0: requests wait, but no accelerator its model runs on has room in the inventory."""
    message: str
    """The sentence its condition gives."""


def variants_to_wake(
    specs: Iterable[VariantSpec],
    inputs: CycleInputs,
    targets: Mapping[tuple[str, str], int],
    failed: Iterable[tuple[str, str]],
) -> dict[tuple[str, str], Wake]:
    """The variants to scale to one replica this cycle (at most one per model), or, where no accelerator is free,
    the variant that says why its model stays at zero.

    Args:
        specs: The cycle's readable variants (a scale target that exists).
        inputs: The cycle's inputs: current replicas, accelerator costs and inventory, and ``gateway_waiting``.
        targets: The model-based targets this cycle (a model the plan already scales up needs no wake; the
            inventory they take is not free).
        failed: Variant keys the model-based plan reported invalid or infeasible (never woken).

    Returns:
        Per variant key, what to do and the condition's message.
    """
    specs = list(specs)
    by_model: dict[tuple[str, str], list[VariantSpec]] = defaultdict(list)
    for spec in specs:
        by_model[spec.model_key].append(spec)
    excluded = set(failed)
    added: dict[tuple[str, str], int] = {}  # replicas woken this cycle: they take inventory too
    woken: dict[tuple[str, str], Wake] = {}
    for model_key, members in sorted(by_model.items()):
        waiting = inputs.gateway_waiting.get(model_key, 0.0)
        if waiting <= 0 or any(_replicas(spec, inputs) or targets.get(spec.key, 0) for spec in members):
            continue
        able = sorted(
            (spec for spec in members if spec.key not in excluded),
            key=lambda s: (replica_cost(s, inputs.accelerator_costs), s.name),
        )
        if not able:
            continue
        has_room = free_accelerators(
            specs, inputs.inventory, lambda s: max(_replicas(s, inputs), targets.get(s.key, 0)) + added.get(s.key, 0)
        )
        chosen = next((spec for spec in able if has_room(spec)), None)
        queued = f"{waiting:g} request(s) wait at the gateway for {model_key[1]} and none of its variants has a replica"
        if chosen is None:
            woken[able[0].key] = Wake(0, f"{queued}, but no accelerator it runs on has room in the inventory")
            continue
        added[chosen.key] = 1
        woken[chosen.key] = Wake(1, f"Scale from zero: {queued}; the cheapest with room ({chosen.name}) gets one")
    return woken


def woken_decision(
    wake: Wake | None, desired: int, reason: str, message: str, ready: bool
) -> tuple[int, str, str, bool]:
    """A variant's (desired, reason, message, ready) with what the gateway's queue asks of it applied."""
    if wake is None:
        return desired, reason, message, ready
    if wake.replicas:
        return max(desired, wake.replicas), REASON_OPTIMIZATION_SUCCEEDED, wake.message, True
    return desired, reason, f"{message}; {wake.message}", ready


def _replicas(spec: VariantSpec, inputs: CycleInputs) -> int:
    """The variant's current replicas (0 when its scale target reports none)."""
    return inputs.current_replicas.get(spec.target_key, 0)
