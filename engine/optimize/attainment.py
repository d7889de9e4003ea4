"""The attainment loop inside one optimize cycle: which percentile each model is sized for, and why.

Each model whose variants are sized by the tail-aware model (:mod:`engine.perf.tail_sizing`) gets one step of the
loop (:func:`engine.slo.controller.step`) from its SLO attainment target (:func:`engine.optimize.spec.model_targets`),
the attainment measured this cycle (:class:`engine.slo.measure.ModelAttainment`, read by the flow from vLLM's
histograms) and the percentile the loop chose last cycle (kept in the VariantAutoscalings' ``status.slo``).

When the loop is off for a model, and why:

* a variant of the model pins ``modelplane.io/ttft-percentile`` (the operator chose the sizing by hand), or sizes
  the mean request (``"mean"``): the pinned setting stands;
* the cycle has no measurement for the model: the percentile holds (the last one, else the configured one), and
  the message says so -- the loop never acts on missing metrics.

Anti-windup beyond the controller's own: a model the shortage ladder sized below the loop's percentile (the
inventory or the variants' ``max-replicas`` cannot hold it) does not have its percentile raised further
(:func:`held_at_caps`); otherwise the loop would climb to its bound while the plan stays capped, and size at that
bound the moment the shortage ends.

Where a model starts: the last cycle's percentile; else, when its target was stated (annotation or service class),
the feed-forward start for that target (:func:`engine.slo.controller.feed_forward_percentile`: the target's share
of what the model can attain at all, its ceiling, once a prompt histogram says what that is); else the configured
percentile (80 by default), so a cluster that states nothing starts where it always did. While every request of
the evaluation window is recent (before the model's first traffic, its first minutes, or the first after a
silence as long as the window) the percentile is no lower than the feed-forward: the first minutes of traffic
bring the ceiling the start is computed with.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from engine.api.llmd import SloStatus
from engine.api.meta import parse_duration
from engine.optimize.spec import CycleInputs, ModelLoad, VariantSpec, model_slos, model_targets
from engine.perf.load_peak import held_peak
from engine.perf.prompt_split import prompt_limit_tokens
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE, describe_cap
from engine.slo.controller import AttainmentSample, ControllerStep, feed_forward_percentile, step
from engine.slo.measure import ModelAttainment
from engine.slo.target import SOURCE_DEFAULT

__all__ = ["held_at_caps", "held_loads", "loop_steps", "sample_of"]


def sample_of(attainment: ModelAttainment | None) -> AttainmentSample | None:
    """The controller's view of a model's measurement (None: nothing measured)."""
    if attainment is None or attainment.recent.attained is None:
        return None
    return AttainmentSample(
        recent=attainment.recent.attained,
        recent_requests=attainment.recent.requests or 0.0,
        window=attainment.window.attained,
        window_requests=attainment.window.requests or 0.0,
    )


def loop_steps(inputs: CycleInputs, specs: Sequence[VariantSpec]) -> dict[tuple[str, str], ControllerStep]:
    """Per (namespace, modelID) under the loop: the percentile to size with this cycle and the loop's message."""
    by_model: dict[tuple[str, str], list[VariantSpec]] = defaultdict(list)
    for spec in specs:
        by_model[spec.model_key].append(spec)
    targets = model_targets(inputs.variants, inputs.service_classes)
    slos = model_slos(inputs.variants, inputs.service_classes)
    steps: dict[tuple[str, str], ControllerStep] = {}
    for model, members in by_model.items():
        if not _loop_applies(members):
            continue
        target = targets.get(model)
        if target is None:
            continue
        remembered_percentile, remembered_hold, remembered_factor = _remembered(inputs, model)
        previous = inputs.loop_percentiles.get(model, remembered_percentile)
        load = inputs.loads.get(model)
        peaks = load.peaks_rps if load is not None else None
        measured = inputs.attainment.get(model)
        ceiling = _ceiling(members, load, slos.get(model, (None, None))[0])
        if target.source == SOURCE_DEFAULT:
            if previous is None:
                previous = max(s.ttft_percentile or 0.0 for s in members)
        elif previous is None:
            previous = feed_forward_percentile(target.attainment, ceiling=ceiling)
        elif _window_is_all_recent(measured):
            previous = max(previous, feed_forward_percentile(target.attainment, ceiling=ceiling))
        hold_s = inputs.loop_holds.get(model, remembered_hold)
        steps[model] = step(
            previous,
            target.attainment,
            None if _already_acted_on(inputs, model, measured) else sample_of(measured),
            hold_s=hold_s,
            hold_range_s=(min(peaks), min(max(peaks), target.window_s)) if peaks else None,
            ceiling=ceiling,
            pending=_starting(members, inputs),
            given_back=_given_back(load, hold_s),
            capped_up=_at_maximum(members, inputs),
            at_minimum=_at_minimum(members, inputs),
            load_factor=inputs.loop_factors.get(model, remembered_factor),
            intermittent=_intermittent(load),
            hold_binds=_hold_binds(load, hold_s),
        )
    return steps


def held_at_caps(
    steps: Mapping[tuple[str, str], ControllerStep], caps: Mapping[tuple[str, str], float]
) -> dict[tuple[str, str], ControllerStep]:
    """The loop's steps with a raise undone for every model the shortage ladder capped this cycle.

    Args:
        steps: Each model's step under the loop (:func:`loop_steps`).
        caps: Each model the shortage ladder sized below its percentile, with the percentile it was sized for
            (0: the mean request).

    Returns:
        The steps, a capped model's raised percentile back at where it started and its message saying why.
    """
    held = dict(steps)
    for model, cap in caps.items():
        loop = steps.get(model)
        if loop is None or loop.previous is None or loop.percentile <= loop.previous:
            continue
        held[model] = dataclasses.replace(
            loop,
            percentile=loop.previous,
            changed=False,
            action=f"sizing percentile held at p{loop.previous:.1f}",
            evidence=(
                f"the accelerator inventory and the variants' max-replicas hold the model at {describe_cap(cap)}, so "
                f"raising it would change nothing now and overshoot when the shortage ends; {loop.evidence}"
            ),
        )
    return held


def _ceiling(members: Sequence[VariantSpec], load: ModelLoad | None, ttft_ms: float | None) -> float | None:
    """The share of the model's prompts that its fastest-prefilling variant serves within the TTFT target alone on
    an idle replica (:func:`engine.perf.prompt_split.prompt_limit_tokens`): no sizing attains more. None without a
    prompt histogram or a TTFT target."""
    if load is None or load.prompt_tokens is None or not ttft_ms or load.prompt_tokens.total <= 0:
        return None
    limits = [prompt_limit_tokens(s.profile, ttft_ms) for s in members if s.profile is not None]
    if not limits:
        return None
    prompts = (
        load.prompt_tokens.with_mean(load.avg_in_tokens) if load.prompt_tokens.mean is None else load.prompt_tokens
    )
    longest = max(limits)
    return 1.0 if math.isinf(longest) else float(prompts.cdf(np.asarray([longest]))[0])


def _window_is_all_recent(measured: ModelAttainment | None) -> bool:
    """Whether every request of the model's evaluation window is in the loop's recent range (none at all, or the
    first traffic after a silence as long as the window): the loop has learnt nothing yet that still stands, so
    its percentile starts no lower than the feed-forward, whose ceiling the first minutes of traffic now give. A
    window that could not be read (None, or an unknown count) is not this: the loop then holds what it has."""
    if measured is None or measured.window.requests is None or measured.recent.requests is None:
        return False
    return measured.window.requests <= measured.recent.requests


def _already_acted_on(inputs: CycleInputs, model: tuple[str, str], measured: ModelAttainment | None) -> bool:
    """Whether this cycle's window measurement is the one the model's status already records (same attainment,
    same request count): a metrics snapshot read twice, or no request since the last cycle. The loop then holds,
    so a repeated run on the same snapshot decides the same and writes nothing."""
    if measured is None or measured.window.attained is None or measured.window.requests is None:
        return False
    if not (math.isfinite(measured.window.attained) and math.isfinite(measured.window.requests)):
        return False  # no measurement a status can hold (it records a whole count): nothing to compare
    attained, requests = round(measured.window.attained, 4), int(round(measured.window.requests))
    return any(slo.attained == attained and slo.requests == requests for slo in _recorded(inputs, model))


def _remembered(inputs: CycleInputs, model: tuple[str, str]) -> tuple[float | None, float | None, float | None]:
    """The loop's state as the model's VariantAutoscalings last recorded it (``status.slo.sizingPercentile``,
    ``peakHold``, ``loadFactor``): each scheduled run is a fresh process, so the state lives in the resources.
    Variants that disagree (one was just added) give the highest percentile, the longest hold and the highest load
    factor, the safe reading."""
    percentiles: list[float] = []
    holds: list[float] = []
    factors: list[float] = []
    for slo in _recorded(inputs, model):
        if slo.load_factor is not None:
            factors.append(slo.load_factor)
        if slo.sizing_percentile is not None:
            percentiles.append(slo.sizing_percentile)
        if slo.peak_hold:
            try:
                holds.append(parse_duration(slo.peak_hold))
            except ValueError:
                continue  # a hold this loop did not write: start afresh
    return (
        max(percentiles) if percentiles else None,
        max(holds) if holds else None,
        max(factors) if factors else None,
    )


def _recorded(inputs: CycleInputs, model: tuple[str, str]) -> list[SloStatus]:
    """The ``status.slo`` each of the model's VariantAutoscalings carries (those with one)."""
    return [
        va.status.slo
        for va in inputs.variants
        if (va.metadata.namespace or "default", va.spec.model_id) == model
        and va.status is not None
        and va.status.slo is not None
    ]


def _loop_applies(members: Sequence[VariantSpec]) -> bool:
    """Tail-sized (a profile and a percentile, not the mean) and no variant pins the percentile by hand."""
    return all(
        s.profile is not None and s.ttft_percentile is not None and ANNOTATION_TTFT_PERCENTILE not in s.annotations
        for s in members
    )


_HIGHER = 1.05
"""A peak counts as higher than another when it is more than 5 % above it (the rate's noise between look-backs
is not a peak the hold keeps or gave back)."""


def _given_back(load: ModelLoad | None, hold_s: float | None) -> bool:
    """Whether the load was more than 5 % higher earlier in the longest look-back than over the current hold."""
    if load is None or not load.peaks_rps:
        return False
    hold = hold_s if hold_s is not None else min(load.peaks_rps)
    held, longest = held_peak(load.peaks_rps, hold), load.peaks_rps[max(load.peaks_rps)]
    return held is not None and longest > _HIGHER * held


def _hold_binds(load: ModelLoad | None, hold_s: float | None) -> bool:
    """Whether the peak the hold reaches back to is more than 5 % above the start-up window's (what the plan sizes
    for without a hold); True when not known."""
    if load is None or not load.peaks_rps or hold_s is None:
        return True
    held, recent = held_peak(load.peaks_rps, hold_s), load.recent_peak_rps
    if held is None or recent is None:
        return True
    return held > _HIGHER * recent


def _intermittent(load: ModelLoad | None) -> bool | None:
    """Whether the model's traffic stopped for a whole minute within the longest look-back while it had requests;
    None when the lowest rate or the peaks were not read (the loop then neither restarts its hold nor gives it
    back faster than on intermittent traffic)."""
    if load is None or load.lowest_rps is None or not load.peaks_rps:
        return None
    return load.lowest_rps <= 0.0 < max(load.peaks_rps.values())


def _starting(members: Sequence[VariantSpec], inputs: CycleInputs) -> bool:
    """Whether replicas of the model are still starting (scaled to, not ready): a shortfall is not yet the plan's."""
    return any(
        _count(inputs.current_replicas, s) > inputs.ready_replicas.get(s.target_key, _count(inputs.current_replicas, s))
        for s in members
    )


def _at_maximum(members: Sequence[VariantSpec], inputs: CycleInputs) -> bool:
    """Every variant of the model at its ``max-replicas``: the allocation cannot grow it."""
    return all(s.max_replicas is not None and _count(inputs.current_replicas, s) >= s.max_replicas for s in members)


def _at_minimum(members: Sequence[VariantSpec], inputs: CycleInputs) -> bool:
    """Every variant of the model at its ``min-replicas``: the allocation cannot shrink it."""
    return all(_count(inputs.current_replicas, s) <= s.min_replicas for s in members)


def _count(replicas: Mapping[tuple[str, str, str], int], spec: VariantSpec) -> int:
    return int(replicas.get(spec.target_key, 0))


def held_loads(
    loads: Mapping[tuple[str, str], ModelLoad], steps: Mapping[tuple[str, str], ControllerStep]
) -> dict[tuple[str, str], ModelLoad]:
    """The loads with each model's recent peak reaching back as far as its loop's hold (never lower than read), and
    sized at its loop's load factor."""
    held = dict(loads)
    for model, loop in steps.items():
        load = loads.get(model)
        if load is None:
            continue
        if loop.load_factor != load.sizing_factor:
            load = held[model] = dataclasses.replace(load, sizing_factor=loop.load_factor)
        if loop.hold_s is None:
            continue
        peak = held_peak(load.peaks_rps, loop.hold_s)
        if peak is not None and (load.recent_peak_rps is None or peak > load.recent_peak_rps):
            held[model] = dataclasses.replace(load, recent_peak_rps=peak)
    return held
