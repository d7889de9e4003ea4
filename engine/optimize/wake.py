"""Scale from zero: a model with no replica and requests waiting at its gateway gets one replica.

Why: a model whose variants all sit at zero replicas exports no vLLM metric, so the cycle sees no load for
it and holds it at zero however many requests arrive; the requests wait at the gateway until they time
out.  The gateway does see them: the inference scheduler's flow-control queue
(``llm_d_epp_flow_control_queue_size``, formerly ``inference_extension_flow_control_queue_size``, by
``target_model_name``), which WVA's scale-from-zero engine reads for the same purpose.  So when that
queue holds requests for a model with no replica, the cheapest of its valid variants gets one;
once it serves, the model's own metrics size it as any other.

Pure: the cycle's inputs in, the variants to wake and why out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from engine.optimize.spec import CycleInputs, VariantSpec, replica_cost

__all__ = ["variants_to_wake"]


def variants_to_wake(
    specs: Iterable[VariantSpec],
    inputs: CycleInputs,
    targets: Mapping[tuple[str, str], int],
    failed: Iterable[tuple[str, str]],
) -> dict[tuple[str, str], str]:
    """The variants to scale to one replica this cycle, each with the sentence its condition gives.

    Args:
        specs: The cycle's readable variants (a scale target that exists).
        inputs: The cycle's inputs: current replicas, accelerator costs, and ``gateway_waiting``.
        targets: The model-based targets this cycle (a model the plan already scales up needs no wake).
        failed: Variant keys the model-based plan reported invalid or infeasible (never woken).

    Returns:
        Per variant key, the condition's message; at most one variant per model.
    """
    by_model: dict[tuple[str, str], list[VariantSpec]] = defaultdict(list)
    for spec in specs:
        by_model[spec.model_key].append(spec)
    excluded = set(failed)
    woken: dict[tuple[str, str], str] = {}
    for model_key, members in sorted(by_model.items()):
        waiting = inputs.gateway_waiting.get(model_key, 0.0)
        if waiting <= 0 or any(_replicas(spec, inputs) or targets.get(spec.key, 0) for spec in members):
            continue
        able = [spec for spec in members if spec.key not in excluded]
        if not able:
            continue
        chosen = min(able, key=lambda s: (replica_cost(s, inputs.accelerator_costs), s.name))
        woken[chosen.key] = (
            f"Scale from zero: {waiting:g} request(s) wait at the gateway for {chosen.model_id} and none of its "
            f"variants has a replica; the cheapest ({chosen.name}) gets one"
        )
    return woken


def _replicas(spec: VariantSpec, inputs: CycleInputs) -> int:
    """The variant's current replicas (0 when its scale target reports none)."""
    return inputs.current_replicas.get(spec.target_key, 0)
