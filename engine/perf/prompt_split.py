"""Heterogeneous, prompt-aware sizing: reserve the faster variant's capacity for the prompts only it serves in time.

Why: a model's variants differ in the longest prompt they prefill within the TTFT target alone on an idle
replica (``(ttft - gamma) / delta``: llama on an A100 4,948 tokens, on an H100 8,281).  Tail sizing
(:mod:`engine.perf.tail_sizing`) sizes each variant for the share of the requests *it* can meet, and the
allocation then picks the cheapest capacity; when it picks the variant with the shorter limit, the prompts
beyond that limit miss wherever they land.  A gateway that routes by predicted latency (llm-d's
predicted-latency scorer, Kthena's least-latency plugin; the simulator's ``least-latency`` router) sends
them to a replica that can serve them, if one exists: the plan should hold one.  This is the oracle's
long-prompt constraint (:func:`engine.simulate.oracle.tail_rates`) in the shipped policy: the cheaper
accelerator for the base load, the faster one for the tail.

:func:`long_prompt_floor` says how many replicas of the carrier (the cheapest per request among the variants
with the longer limit) the tail needs: the tail's rate over the carrier's tail-sized per-replica rate,
rounded up.  The optimizer applies it as a floor on the carrier's replicas, so the allocation still chooses
the rest of the mix by cost.  A floor is all the allocation can express; the carrier's rate is the one sized
for the model's whole prompt distribution (the router sends it short prompts too), an approximation.

Switched per VariantAutoscaling by ``modelplane.io/prompt-split``: ``auto`` applies it when the model's
gateway routes by predicted latency (``modelplane.io/router: least-latency``; with a router that ignores the
prompt the long prompts land anywhere and a reserved replica only adds cost), ``true`` always, ``false``
(the default, :data:`DEFAULT_PROMPT_SPLIT`) never.  Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from engine.perf.queueing import PerfProfile
from engine.perf.tail_sizing import PromptDistribution

__all__ = [
    "ANNOTATION_PROMPT_SPLIT",
    "ANNOTATION_ROUTER",
    "ROUTERS",
    "DEFAULT_PROMPT_SPLIT",
    "LATENCY_ROUTERS",
    "check_router",
    "long_prompt_floor",
    "prompt_limit_tokens",
    "prompt_split_enabled",
]

ANNOTATION_PROMPT_SPLIT = "modelplane.io/prompt-split"
DEFAULT_PROMPT_SPLIT = "false"
"""Off unless asked for: on the benchmark's clusters it changed nothing, with either router (the variant that
serves long prompts in time is also the cheaper per request there), so it did not earn a default."""
ANNOTATION_ROUTER = "modelplane.io/router"
"""On a VariantAutoscaling: the router the gateway in front of its model uses (one of :data:`ROUTERS`)."""
ROUTERS = ("least-outstanding", "least-load", "least-latency")
"""The gateway's endpoint pickers a model may be behind (the simulator replays each:
:class:`engine.simulate.records.Routing`)."""
LATENCY_ROUTERS = frozenset({"least-latency"})
"""Routers that send a request to a replica whose profile predicts it meets the SLO (so long prompts reach
the variant that serves them in time)."""


def check_router(named: str | None) -> None:
    """``ValueError`` naming the accepted routers when ``named`` (the :data:`ANNOTATION_ROUTER` value, None when
    absent) is none of :data:`ROUTERS` (a typo would otherwise read as a router that predicts no latency,
    silently)."""
    if named is not None and named not in ROUTERS:
        raise ValueError(f"unknown router {named!r}; choose from {', '.join(ROUTERS)}")


def prompt_split_enabled(annotations: Mapping[str, str]) -> bool:
    """Whether the variant's model is sized with the long-prompt floor (see the module docstring).

    Raises ValueError naming the accepted values for anything but ``auto``, ``true`` or ``false``.
    """
    value = str(annotations.get(ANNOTATION_PROMPT_SPLIT, DEFAULT_PROMPT_SPLIT)).strip().lower()
    if value == "auto":
        return str(annotations.get(ANNOTATION_ROUTER, "")).strip() in LATENCY_ROUTERS
    if value in ("true", "false"):
        return value == "true"
    raise ValueError(f"must be auto, true or false, got {value!r}")


def prompt_limit_tokens(profile: PerfProfile, ttft_ms: float) -> float:
    """The longest prompt ``profile`` prefills within ``ttft_ms`` alone on an idle replica (inf when delta is 0)."""
    if ttft_ms < profile.gamma:
        return 0.0
    return (ttft_ms - profile.gamma) / profile.delta if profile.delta > 0 else math.inf


def long_prompt_floor(
    load_rps: float, prompts: PromptDistribution, shorter_limit: float, carrier_rate_rps: float
) -> int:
    """Replicas of the carrier the prompts beyond ``shorter_limit`` need: their rate (``load_rps`` x the share of
    prompts longer than the limit) over ``carrier_rate_rps`` per replica, rounded up; 0 when no prompt is longer."""
    if load_rps <= 0 or prompts.total <= 0 or carrier_rate_rps <= 0 or not math.isfinite(shorter_limit):
        return 0
    beyond = 1.0 - float(prompts.cdf(np.asarray([shorter_limit]))[0])
    tail = load_rps * max(beyond, 0.0)
    return int(math.ceil(tail / carrier_rate_rps - 1e-9)) if tail > 1e-12 else 0
