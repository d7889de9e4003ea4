"""The ``simulate`` flow: replay a request trace against a cluster description under several autoscaling policies.

Lifecycle, top to bottom:

1. read the cluster description with the optimize flow's own tasks (VariantAutoscalings, current
   replicas, WVA ConfigMaps, the first Kthena AutoscalingPolicy for the HPA-style policy);
2. read and shape the trace (slice, time compression, rate scaling, or a named bursty replay of its requests;
   split over the models);
3. replay it once per policy in the discrete-event simulator (``engine.simulate.replay``), the decisions made
   every interval by the policy's code (``engine.simulate.policies``: Modelplane's is ``plan_variants``);
4. summarize each run (SLO attainment per model, cost, replica changes, unserved requests);
5. with ``frontier``, replay each policy over its own knob and the clairvoyant schedule (policy ``oracle``)
   over its target attainment (``engine.simulate.frontier``): the cost-attainment curves, the trace's
   attainment ceiling and every cost as a ratio to the clairvoyant schedule's at equal attainment;
6. write the report (JSON summary, PNG plots, one HTML page) and publish it as a Prefect artifact.

Nothing is written to the cluster: a simulation only reads it.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from engine.simulate.bursts import BURSTY_VARIANTS, burst_statistics
from engine.simulate.follower import trace_follower_bound
from engine.simulate.frontier import Limits, knob_settings, limits
from engine.simulate.outcome import PolicyOutcome
from engine.simulate.policies import POLICIES, PolicyName
from engine.simulate.records import SimConfig
from engine.simulate.scenario import (
    ROUTER_AUTO,
)
from engine.slo.target import MAX_ATTAINMENT, MIN_ATTAINMENT
from flows.parameters import (
    SIMULATE_INTERVAL_S,
    SIMULATE_OUTPUT_DIR,
    SIMULATE_STARTUP_DELAY_S,
    SYSTEM_NAMESPACE,
    ControlInterval,
    NamespaceName,
    NonEmpty,
    NonNegativeSeconds,
    PositiveSeconds,
    Seed,
    absent_as,
)
from flows.runs import flow
from tasks.progress import step
from tasks.replay import read_inputs, simulate_policy, sweep_knob
from tasks.simulate import check_output_dir, markdown_report, write_report
from tasks.tracking import markdown_artifact, quote, run_logger, tracked

# Literal types so the Prefect form offers the choices (kept equal to POLICIES and the simulated gauges).
RouterName = Literal["auto", "least-outstanding", "least-load", "least-latency"]
PositiveFactor = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A finite multiplier that must be above zero."""
ShareOfPeak = Annotated[float, Field(gt=0, le=1)]
"""A share of the high rate: above zero, at most one."""
BurstyName = Literal[
    "tune-a", "tune-b", "tune-c", "held-long-silences", "held-sharp-clusters", "held-2x-rate"
]  # kept equal to engine.simulate.bursts.BURSTY_VARIANTS
StartFrom = Literal["static", "manifests"]
"""Where the reactive policies start: static peak's allocation, or the scale targets' replicas in the manifests."""
SloAttainment = Annotated[float, Field(ge=MIN_ATTAINMENT, le=MAX_ATTAINMENT)]
"""An SLO attainment target, as ``modelplane.io/slo-attainment`` takes it."""
HpaMetric = Literal["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"]


@dataclass
class SimulationReport:
    """What the flow returns: one outcome per policy and where the report files are."""

    outcomes: list[PolicyOutcome]
    files: dict[str, str]
    settings: dict[str, Any] = field(default_factory=dict)
    limits: Limits | None = None

    def as_json(self) -> dict[str, Any]:
        """The JSON summary (summary.json holds the same and the definitions)."""
        policies = [o.as_json() for o in self.outcomes]
        if self.limits is not None:
            for entry, o in zip(policies, self.outcomes):
                ratio = self.limits.cost_ratio(o.attainment, o.cost)
                entry["cost_vs_oracle"] = round(ratio, 4) if ratio is not None else None
        return {
            "settings": self.settings,
            "policies": policies,
            "files": self.files,
            **(self.limits.as_json() if self.limits is not None else {}),
        }


@flow(name="simulate", log_prints=True)
def simulate(
    cluster: NonEmpty,
    trace: NonEmpty,
    config_namespace: NamespaceName = SYSTEM_NAMESPACE,
    policies: Annotated[Sequence[PolicyName], absent_as(POLICIES)] = POLICIES,
    compression: PositiveFactor = 1.0,
    rate_scale: PositiveFactor = 1.0,
    start_s: NonNegativeSeconds = 0.0,
    duration_s: PositiveSeconds | None = None,
    wave_floor: ShareOfPeak = 1.0,
    wave_period_s: PositiveSeconds | None = None,
    bursty: BurstyName | None = None,
    model_shares: Annotated[Mapping[str, float], absent_as({})] = {},
    interval_s: ControlInterval = SIMULATE_INTERVAL_S,
    startup_delay_s: NonNegativeSeconds = SIMULATE_STARTUP_DELAY_S,
    kv_tokens_per_slot: Annotated[int, Field(ge=1)] = 2048,
    sizing_ttft_scale: PositiveFactor = 1.0,
    hpa_metric: HpaMetric | None = None,
    hpa_target: PositiveFactor | None = None,
    router: RouterName = ROUTER_AUTO,
    start: StartFrom = "static",
    slo_attainment: SloAttainment | None = None,
    frontier: bool = True,
    seed: Seed = 0,
    output_dir: NonEmpty = SIMULATE_OUTPUT_DIR,
) -> SimulationReport:
    """Replay a request trace against a cluster description and compare autoscaling policies.

    Args:
        cluster: Manifests directory/file (or 'kubeconfig:PATH[#context]') holding the VariantAutoscalings,
            their scale targets and the WVA ConfigMaps; only read.
        trace: CSV with a timestamp, prompt tokens and output tokens per request (the Azure LLM trace format reads as is).
        config_namespace: Namespace of the WVA ConfigMaps (costs, service classes, saturation, inventory).
        policies: Policies to compare (modelplane, saturation-only, wva-greedy, hpa, static-peak, oracle = the
            clairvoyant schedule); every one by default (an empty list too).
        compression: Divide inter-arrival times by this (2 = the trace replayed twice as fast).
        rate_scale: Multiply the number of requests (below 1 thins, above 1 adds jittered copies).
        start_s: Start of the trace slice, seconds after the first request.
        duration_s: Length of the slice in seconds (before compression); empty = to the end.
        wave_floor: A day's shape: requests are thinned so the rate goes from this share of the recorded one up to
            all of it and back (1 = as recorded); see docs/simulate.md.
        wave_period_s: Period of that wave in replayed seconds; empty = the slice's length.
        bursty: Replace the trace's arrival times by a named bursty replay (engine.simulate.bursts: silent minutes,
            bursts, sub-minute clusters) filled with the trace's requests; not combined with the slice, compression,
            rate or wave settings. tune-* are the tuning variants, held-* the held-out ones (docs/simulate.md).
        model_shares: Weight of each model ('namespace/modelID') in the trace; empty = equal shares.
        interval_s: Control interval of every policy in simulated seconds, 1 to 3600 (WVA's GLOBAL_OPT_INTERVAL: 60).
        startup_delay_s: Seconds a new replica takes to become ready (model load).
        kv_tokens_per_slot: KV-cache capacity per batch slot in tokens (capacity = maxBatchSize x this).
        sizing_ttft_scale: The policies size for the service classes' TTFT targets times this (0.5 = aim for half);
            attainment is still judged against the configured targets.
        hpa_metric: Per-replica metric of the HPA-style policy (vllm:num_requests_waiting, vllm:num_requests_running,
            vllm:kv_cache_usage_perc); empty = the cluster's AutoscalingPolicy (or Kthena's example policy).
        hpa_target: Target value per replica of hpa_metric.
        router: The simulated gateway's endpoint picker, the same for every policy: least-outstanding (fewest requests
            in flight), least-load (llm-d inference scheduler / Kthena router: queue depth and KV-cache utilisation),
            least-latency (lowest predicted TTFT/ITL against the SLO); auto = what the cluster says (a
            modelplane.io/router annotation on a model's VariantAutoscaling, else least-load for a model behind a
            Kthena ModelRoute, else least-outstanding).
        start: Where the reactive policies start: static = static peak's allocation (the default: what switching a
            policy on does to a statically provisioned service; the benchmarks' scenario, docs/simulate.md),
            manifests = the scale targets' replicas (a cold start).
        slo_attainment: Every model's SLO attainment target (modelplane.io/slo-attainment on every
            VariantAutoscaling), which Modelplane's attainment loop sizes for; unset: what the manifests say.
        frontier: Also replay each policy over its own knob and the clairvoyant schedule (policy oracle), for the
            cost-attainment curves, the attainment ceiling and each cost's ratio to the clairvoyant schedule's.
        seed: Seed of every random draw (model split, rate scaling): same inputs, same results.
        output_dir: Directory for summary.json, the PNG plots and report.html.

    Returns:
        The report: each policy's outcome, the files written, the settings and the limits (with ``frontier``).
    """
    policies = list(policies or POLICIES)
    logger = run_logger()
    shape = {
        "start_s": start_s,
        "duration_s": duration_s,
        "compression": compression,
        "rate_scale": rate_scale,
        "seed": seed,
        "wave_floor": wave_floor,
        "wave_period_s": wave_period_s,
        "burst": BURSTY_VARIANTS[bursty] if bursty is not None else None,
    }
    config = SimConfig(interval_s=interval_s, startup_delay_s=startup_delay_s, seed=seed)
    directory = check_output_dir(output_dir)  # before any replay: a report that cannot be written fails at once
    scenario = read_inputs(
        cluster,
        trace,
        config_namespace,
        dict(model_shares or {}),
        shape,
        config,
        kv_tokens_per_slot=kv_tokens_per_slot,
        hpa_metric=hpa_metric,
        hpa_target=hpa_target,
        sizing_ttft_scale=sizing_ttft_scale,
        router=router,
        oracle_curves=frontier or "oracle" in policies,
        start=start,
        slo_attainment=slo_attainment,
    )
    logger.info(
        "replaying %d requests over %.0f s against %d variants",
        len(scenario.trace),
        scenario.trace.duration_s,
        len(scenario.variants),
    )

    swept_policies = list(dict.fromkeys([*policies, "oracle"])) if frontier else []
    sweeps = {name: len(knob_settings(scenario, name)) for name in swept_policies}
    with step("simulate", total=len(policies) + sum(sweeps.values()), unit="replays") as replays:
        outcomes = []
        for name in policies:
            outcomes.append(simulate_policy(name, quote(scenario)))
            replays.advance(note=name)
        swept = []
        for name in swept_policies:
            swept += sweep_knob(name, quote(scenario))
            replays.advance(sweeps[name], note=f"{name} knob")
    for o in outcomes:
        logger.info(
            "%s: SLO attainment %.1f%%, cost %.1f, %d replica changes, %d unserved",
            o.policy,
            100 * o.attainment,
            o.cost,
            o.replica_changes,
            o.unserved,
        )

    bounds: Limits | None = None
    if frontier:
        bounds = limits(scenario, outcomes, swept)
        logger.info(
            "attainment ceiling %.1f%%; frontier of %d replays", 100 * bounds.ceiling["all"], len(bounds.frontier)
        )
        if beyond := bounds.out_of_reach():
            logger.info("%s", beyond)

    settings = {
        "trace": pathlib.Path(trace).name,
        "requests": len(scenario.trace),
        "duration_s": round(scenario.trace.duration_s, 1),
        "compression": compression,
        "rate_scale": rate_scale,
        "wave_floor": wave_floor,
        "wave_period_s": wave_period_s,
        "bursty": bursty,
        # How bursty the replayed arrivals are (engine.simulate.bursts.burst_statistics).
        "burstiness": burst_statistics(
            scenario.trace.arrival_s,
            scenario.trace.in_tokens,
            60.0 * BURSTY_VARIANTS[bursty].duration_min if bursty is not None else None,
        ).as_dict(),
        # What an ideal load follower could cost against static provisioning on this trace (docs/simulate.md).
        "follower_bound": round(trace_follower_bound(scenario.trace, interval_s), 3),
        "interval_s": interval_s,
        "startup_delay_s": startup_delay_s,
        "seed": seed,
        "sizing_ttft_scale": sizing_ttft_scale,
        "hpa": [metric.to_dict() for metric in scenario.description.hpa_policy.metrics],
        "router": router,
        "start": start,
    }
    files = write_report(outcomes, scenario, directory, "Modelplane policy comparison", settings, bounds)
    report = SimulationReport(outcomes, {k: str(v) for k, v in files.items()}, settings, bounds)
    publish(report, files)
    return report


def publish(report: SimulationReport, files: dict[str, pathlib.Path]) -> None:
    """Publish the comparison (table + plots) as a Prefect markdown artifact (only inside a flow run).

    Args:
        report: The run's report.
        files: The files :func:`tasks.simulate.write_report` wrote, by name (the plots are embedded).
    """
    if not tracked():
        return
    markdown_artifact(
        key="simulate-report",
        markdown=markdown_report(report.outcomes, files, report.settings, report.limits),
        description="Autoscaling policies replayed against the cluster description",
    )
