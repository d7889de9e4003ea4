"""The replays the simulate and tune flows run: read the cluster description and the trace into a scenario, then
replay it under a policy, over a policy's knob, or with one tuning candidate's settings.

Each is a Prefect task (a replay is minutes of CPU on a model-day: the flows submit them in parallel and the UI
shows one run per policy or candidate). The decisions themselves are the engine's (:mod:`engine.simulate`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.simulate.frontier import knob_settings, with_oracle_curves
from engine.simulate.outcome import PolicyOutcome, summarize_outcome
from engine.simulate.policies import run_policy
from engine.simulate.records import SimConfig
from engine.simulate.scenario import Scenario, build_scenario, served_models, with_hpa_metric, with_slo_attainment
from engine.simulate.trace import TraceShape
from engine.simulate.tune import Candidate, with_candidate
from tasks.simulate import read_description, read_trace
from tasks.tracking import task


@task(name="read-simulation-inputs")
def read_inputs(
    cluster: str,
    trace_path: str,
    config_namespace: str,
    model_shares: dict[str, float] | None,
    shape: dict[str, Any],
    config: SimConfig,
    *,
    kv_tokens_per_slot: int,
    hpa_metric: str | None,
    hpa_target: float | None,
    sizing_ttft_scale: float,
    router: str,
    oracle_curves: bool,
    start: str = "static",
    slo_attainment: float | None = None,
    dry_run: bool = False,
) -> Scenario:
    """The cluster description and the trace, shaped by ``shape`` (:class:`TraceShape`'s other fields) over
    ``model_shares`` (empty: equal shares of the models served), parsed into a scenario.

    Args:
        cluster: The cluster target holding the VariantAutoscalings (only read).
        trace_path: The trace CSV.
        config_namespace: Namespace of the WVA ConfigMaps.
        model_shares: Weight of each model ('namespace/modelID'); empty = equal shares.
        shape: :class:`TraceShape`'s fields other than the shares.
        config: The simulator's settings.
        kv_tokens_per_slot: KV-cache capacity per batch slot in tokens.
        hpa_metric: Per-replica metric of the HPA-style policy (with ``hpa_target``).
        hpa_target: Target value per replica of ``hpa_metric``.
        sizing_ttft_scale: The policies size for the TTFT targets times this.
        router: The simulated gateway's endpoint picker.
        oracle_curves: Also compute the clairvoyant schedule's curves.
        start: ``static``: the reactive policies start from static peak's allocation; else the manifests'.
        slo_attainment: Every model's attainment target, when given.
        dry_run: Read the cluster without holding anything on it.

    Returns:
        The scenario every replay of the run starts from.

    Raises:
        ValueError: ``hpa_metric`` without ``hpa_target`` (or the reverse), no VariantAutoscaling, or shares of
            models not served.
        TraceError: the trace file is missing or malformed.
    """
    description = replace(
        read_description(cluster, config_namespace, dry_run=dry_run), kv_tokens_per_slot=kv_tokens_per_slot
    )
    if hpa_metric or hpa_target:
        if not (hpa_metric and hpa_target):
            raise ValueError("hpa_metric and hpa_target go together")
        description = with_hpa_metric(description, hpa_metric, hpa_target)
    if slo_attainment is not None:
        description = with_slo_attainment(description, slo_attainment)
    models = served_models(description)
    if not models:
        raise ValueError(f"no VariantAutoscaling found in {cluster}: nothing to simulate")
    shares = model_shares or {m: 1.0 for m in models}
    unknown = sorted(set(shares) - set(models))
    if unknown:
        raise ValueError(f"model_shares names {', '.join(unknown)}, not served here (models: {', '.join(models)})")
    trace = read_trace(trace_path, TraceShape(shares, **shape))
    scenario = build_scenario(description, trace, config, sizing_ttft_scale=sizing_ttft_scale, router=router)
    scenario = replace(scenario, start_from_static=start == "static")
    return with_oracle_curves(scenario) if oracle_curves else scenario


@task(name="simulate-policy", task_run_name="replay {name}")
def simulate_policy(name: str, scenario: Scenario) -> PolicyOutcome:
    """Replay the trace under one policy and summarize the run.

    Args:
        name: The policy (:data:`engine.simulate.policies.POLICIES`).
        scenario: What to replay.

    Returns:
        The run's outcome (attainment, cost, replica changes).
    """
    return summarize_outcome(name, scenario, run_policy(name, scenario))


@task(name="sweep-policy-knob", task_run_name="sweep {name}")
def sweep_knob(name: str, scenario: Scenario) -> list[tuple[str, str, PolicyOutcome]]:
    """Replay the trace under one policy at each setting of its knob (one task per policy, not per replay).

    Args:
        name: The policy whose knob is swept.
        scenario: What to replay.

    Returns:
        (policy, setting, outcome) per setting of the knob.
    """
    return [
        (name, label, summarize_outcome(name, tuned, run_policy(name, tuned)))
        for label, tuned in knob_settings(scenario, name)
    ]


@task(name="replay-candidate", task_run_name="replay {candidate.name}")
def replay_candidate(scenario: Scenario, candidate: Candidate) -> PolicyOutcome:
    """The Modelplane policy replayed on the window's traffic with one candidate's settings.

    Args:
        scenario: The window's traffic against the cluster description.
        candidate: The tuning setting to replay.

    Returns:
        The replay's outcome (attainment and cost the tune flow chooses on).
    """
    tuned = with_candidate(scenario, candidate)
    return summarize_outcome("modelplane", tuned, run_policy("modelplane", tuned))
