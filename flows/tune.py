"""The ``tune`` flow: per model, the sizing setting that would have met its SLO attainment target at the lowest cost
on the cluster's own recent traffic.

Lifecycle, top to bottom:

1. read the cluster's VariantAutoscalings and configuration (the simulate flow's reader) and the window's traffic:
   a request log in the trace CSV format (``timestamp, input tokens, output tokens`` per request; docs/simulate.md),
   or, without one, the last ``window`` of each model's traffic rebuilt from Prometheus (requests per minute and
   the token histograms, :mod:`engine.simulate.rebuild`); a model without traffic in the window keeps its settings;
2. replay every candidate setting (:func:`engine.simulate.tune.candidates`: the attainment loop, pinned
   percentiles, static-peak floors) in parallel, one Prefect task each; with traffic from Prometheus, also the
   settings that ran over the window, as they are (:data:`engine.simulate.tune.AS_CONFIGURED`);
3. calibrate (traffic from Prometheus): per model, the attainment the cluster measured over the window (vLLM's
   latency histograms) against what the replay of the settings that ran reached; every candidate is judged by its
   replayed attainment less that difference (:func:`engine.simulate.tune.calibrations`). A request log's window
   is not the one Prometheus measured: its candidates are judged as replayed;
4. per model whose target falls between two floors, one more floor interpolated between them
   (:func:`engine.simulate.tune.interpolated_floors`); then per model, of the candidates that met the model's
   target and cost within 10 % of the cheapest of them, the one attaining least, else the closest
   (:func:`engine.simulate.tune.choose`);
5. unless ``dry_run``, write the choice on every VariantAutoscaling of the model: the candidate's annotations
   (``modelplane.io/ttft-percentile``, ``modelplane.io/min-replicas``) over the operator's own values of them
   (:func:`engine.simulate.tune.tuned_settings`) and ``modelplane.io/tuned`` (what was chosen, its attainment and
   cost, the target, when, and the operator's values it replaced), and the same record as ``status.tuning``;
6. publish the frontier each model chose from as a table artifact.

One VariantAutoscaling's failed write does not stop the others; the run is then degraded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine.simulate.outcome import PolicyOutcome
from engine.simulate.rebuild import TRAFFIC_STEP_S, ModelTraffic, WindowSpan, rebuild_trace, window_span
from engine.simulate.records import SimConfig
from engine.simulate.scenario import (
    Scenario,
    build_scenario,
    joined_key,
    with_scenario_variants,
    with_slo_attainment,
)
from engine.simulate.tune import (
    AS_CONFIGURED,
    Calibration,
    Candidate,
    ModelChoice,
    calibrations,
    candidates,
    choose,
    interpolated_floors,
)
from engine.slo.measure import MeasuredAttainment
from engine.units import duration_seconds
from flows.parameters import (
    SIMULATE_INTERVAL_S,
    SIMULATE_STARTUP_DELAY_S,
    SYSTEM_NAMESPACE,
    NamespaceName,
    NonEmpty,
    PositiveSeconds,
    PromDuration,
    Seed,
    Setting,
)
from flows.runs import flow
from flows.simulate import SloAttainment
from tasks.clients.metrics.prometheus import PrometheusMetrics
from tasks.clients.metrics.snapshot import ModelKey
from tasks.clients.metrics.traffic import read_traffic
from tasks.progress import step
from tasks.replay import read_inputs, replay_candidate
from tasks.simulate import read_description
from tasks.tracking import run_logger, table_artifact
from tasks.tune import measure_window, write_choice


@dataclass
class TuneReport:
    """What a tune run chose per model, and what it wrote."""

    choices: list[ModelChoice]
    written: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def degraded(self) -> bool:
        """Some write failed (a model whose target no candidate met still gets the closest: reported, not degraded)."""
        return bool(self.failed)

    def as_json(self) -> dict[str, Any]:
        """The report as the CLI prints it with ``--json``."""
        return {
            "models": [
                {
                    "model": c.model,
                    "target": c.target,
                    "chosen": c.chosen.candidate.name,
                    "attainment": round(c.chosen.attainment, 4),
                    "cost": round(c.chosen.cost, 2),
                    "met": c.met,
                    "reachable": None if c.reachable is None else round(c.reachable, 4),
                    "calibration": _calibration_json(c.calibration),
                    "frontier": [
                        {
                            "candidate": r.candidate.name,
                            "attainment": round(r.attainment, 4),
                            "judged": round(c.judged(r), 4),
                            "cost": round(r.cost, 2),
                            "meets": r.meets,
                        }
                        for r in c.rows
                    ],
                }
                for c in self.choices
            ],
            "written": self.written,
            "failed": self.failed,
            "dry_run": self.dry_run,
        }


def _calibration_json(calibration: Calibration | None) -> dict[str, Any] | None:
    """A model's calibration as the JSON report gives it (None: judged as replayed)."""
    if calibration is None:
        return None
    return {
        "replayed": round(calibration.replayed, 4),
        "measured": round(calibration.measured, 4),
        "offset": round(calibration.offset, 4),
        "capped": calibration.capped,
    }


TUNE_TIMEOUT_S = 3 * 3600.0
"""A nightly run's limit: the replays of one model-day take minutes per candidate (docs/benchmarks.md)."""


DEFAULT_WINDOW = "24h"
"""How much of the cluster's recent traffic a tune run without a request log replays (a day: the nightly run)."""


@flow(name="tune", log_prints=True, max_workers=2, timeout_seconds=TUNE_TIMEOUT_S)
def tune(
    cluster: NonEmpty,
    trace: NonEmpty | None = None,
    config_namespace: NamespaceName = SYSTEM_NAMESPACE,
    slo_attainment: SloAttainment | None = None,
    duration_s: PositiveSeconds | None = None,
    dry_run: bool = False,
    seed: Seed = 0,
    prometheus_url: Setting = "",
    window: PromDuration = DEFAULT_WINDOW,
    end: datetime | None = None,
) -> TuneReport:
    """Choose per model the cheapest setting that meets its SLO attainment target on the window's traffic.

    Args:
        cluster: Manifests directory/file (or 'kubeconfig:PATH[#context]') holding the VariantAutoscalings,
            service classes and accelerator costs; the choice is written there.
        trace: The window's request log, in the trace CSV format (one request per row: timestamp, input and
            output tokens). Without it, the last `window` of traffic is rebuilt from Prometheus.
        config_namespace: Namespace of the WVA ConfigMaps.
        slo_attainment: Every model's target for this tuning (default: what the VariantAutoscalings say).
        duration_s: Replay only the log's first seconds (default: all of it).
        dry_run: Replay and choose, write nothing.
        seed: Seed of the replay's random draws (the model split of the log, the rebuilt arrivals): same inputs,
            same choice.
        prometheus_url: Prometheus base URL to rebuild the traffic from when no request log is given; empty
            = $PROMETHEUS_URL.
        window: How much recent traffic to rebuild from Prometheus, a duration such as 24h or 90m.
        end: When the window rebuilt from Prometheus ends (seconds are dropped: Prometheus is read by the minute);
            empty = now. A past window is read as Prometheus holds it, so a tuning can be run again on the same
            traffic.

    Returns:
        The report: per model the chosen candidate and its frontier, and the VariantAutoscalings written or failed.

    Raises:
        ValueError: an end given with a request log, or later than now; a window that is not whole minutes.
    """
    logger = run_logger()
    config = SimConfig(interval_s=SIMULATE_INTERVAL_S, startup_delay_s=SIMULATE_STARTUP_DELAY_S, seed=seed)
    measured: dict[str, MeasuredAttainment] = {}  # a request log's window is not the one Prometheus measured
    if trace is not None and end is not None:
        raise ValueError("end is the end of a window rebuilt from Prometheus; a request log (trace) is replayed whole")
    if trace is not None:
        scenario = read_inputs(
            cluster,
            trace,
            config_namespace,
            None,
            {"seed": seed, "duration_s": duration_s},
            config,
            kv_tokens_per_slot=2048,
            hpa_metric=None,
            hpa_target=None,
            sizing_ttft_scale=1.0,
            router="auto",
            oracle_curves=False,
            start="static",
            slo_attainment=slo_attainment,
            dry_run=dry_run,
        )
        source = "request log"
    else:
        span = window_span(window, end, datetime.now(UTC))
        ran, measured = prometheus_window(cluster, config_namespace, config, prometheus_url, span, dry_run)
        scenario = (
            ran
            if slo_attainment is None
            else with_scenario_variants(ran, with_slo_attainment(ran.description, slo_attainment))
        )
        source = f"{span} from Prometheus"
    settings = candidates(scenario)
    calibrating = any(found.attained is not None for found in measured.values())
    logger.info("replaying %d requests (%s) under %d candidate settings", len(scenario.trace), source, len(settings))
    # The settings that ran are replayed under the targets they ran with, whatever this tuning's targets.
    replays = replay_all([(scenario, c) for c in settings] + ([(ran, AS_CONFIGURED)] if calibrating else []), "tune")
    calibration = calibrated(replays, measured) if calibrating else {}
    between = interpolated_floors(scenario, replays, calibration)
    if between:
        logger.info("replaying %s, between the floors that bracket a target", ", ".join(c.name for c in between))
        replays += replay_all([(scenario, c) for c in between], "tune between floors")
    replayed = {scenario.trace.models[i] for i in set(scenario.trace.model_index.tolist())}
    report = TuneReport([c for c in choose(scenario, replays, calibration) if c.model in replayed], dry_run=dry_run)
    now = datetime.now(UTC)
    for choice in report.choices:
        logger.info(
            "%s: %s (replayed %.1f %%, judged %.1f %%, of a %.1f %% target%s at %.1f)",
            choice.model,
            choice.chosen.candidate.name,
            100 * choice.chosen.attainment,
            100 * choice.judged(choice.chosen),
            100 * choice.target,
            f", {choice.out_of_reach}" if choice.out_of_reach else "",
            choice.chosen.cost,
        )
        if not dry_run:
            written, failed = write_choice(cluster, scenario, choice, now, source)
            report.written += written
            report.failed += failed
    publish(report)
    return report


def replay_all(jobs: list[tuple[Scenario, Candidate]], stage: str) -> list[tuple[Candidate, PolicyOutcome]]:
    """Every candidate replayed on its scenario, one task each, in parallel (the flow's task runner).

    Args:
        jobs: Each candidate with the scenario it is replayed on (the window's traffic on the cluster's
            VariantAutoscalings).
        stage: The progress stage's name.

    Returns:
        Each candidate with its replay's outcome, in the order given.
    """
    futures = [replay_candidate.submit(scenario, candidate) for scenario, candidate in jobs]
    replays = []
    with step(stage, total=len(jobs), unit="replays") as progress:
        for (_, candidate), future in zip(jobs, futures):
            replays.append((candidate, future.result()))
            progress.advance(note=candidate.name)
    return replays


def calibrated(
    replays: list[tuple[Candidate, PolicyOutcome]], measured: dict[str, MeasuredAttainment]
) -> dict[str, Calibration]:
    """Per model measured over the window: how far the replay of the settings that ran reads from the measurement
    (:func:`engine.simulate.tune.calibrations`), each logged; a model without a measurement is said to be judged as
    replayed.

    Args:
        replays: The candidates' replays, :data:`~engine.simulate.tune.AS_CONFIGURED` among them.
        measured: Per model, the attainment measured over the window.

    Returns:
        Per model measured, its calibration.
    """
    logger = run_logger()
    found = calibrations(replays, {model: m.attained for model, m in measured.items()})
    for model, attained in sorted(measured.items()):
        known = found.get(model)
        if known is None:
            logger.warning("%s: not calibrated (%s): candidates judged as replayed", model, attained.note or "unknown")
            continue
        logger.info(
            "%s: the settings that ran replayed at %.1f %%, measured %.1f %%: candidates judged %+.1f points%s",
            model,
            100 * known.replayed,
            100 * known.measured,
            -100 * known.offset,
            " (capped: the replay does not describe the window well)" if known.capped else "",
        )
    return found


def prometheus_window(
    cluster: str,
    config_namespace: str,
    config: SimConfig,
    prometheus_url: str | None,
    span: WindowSpan,
    dry_run: bool,
) -> tuple[Scenario, dict[str, MeasuredAttainment]]:
    """The cluster's description and a window of its models' traffic rebuilt from Prometheus (models
    without a request in the window are replayed with none and not tuned: they keep their settings, and the log
    says so), with what each model attained over the window.

    Args:
        cluster: The cluster to describe (manifests or ``kubeconfig:PATH[#context]``).
        config_namespace: The namespace of the WVA ConfigMaps.
        config: The simulator's settings.
        prometheus_url: Prometheus's base URL, or None/empty for ``$PROMETHEUS_URL``.
        span: The traffic to rebuild: a Prometheus duration (whole minutes) up to a whole minute.
        dry_run: Whether the read may write nothing.

    Returns:
        The scenario to replay as the cluster has it (its VariantAutoscalings' own settings and targets: what ran
        over the window), starting from static peak's allocation; and per model, what it attained over the window
        (:func:`tasks.tune.measure_window`).

    Raises:
        ValueError: no Prometheus URL, a window that is not a whole number of minutes.
        TrafficError: no request in the window, or requests without token histograms.
        MetricsUnavailable: Prometheus cannot be read.
    """
    logger = run_logger()
    metrics = PrometheusMetrics.from_env(prometheus_url)
    if metrics is None:
        raise ValueError("no traffic to replay: give a request log (trace) or a Prometheus URL ($PROMETHEUS_URL)")
    description = read_description(cluster, config_namespace, dry_run=dry_run)
    keys = {ModelKey(va.spec.model_id, va.metadata.namespace or "default") for va in description.variants}
    metrics = metrics.evaluated_at(span.end)  # the traffic and what was attained over it: the same minutes
    window_s = duration_seconds(span.window)
    traffic = read_traffic(metrics, keys, window_s, span.end, TRAFFIC_STEP_S)
    quiet = ModelTraffic((), TRAFFIC_STEP_S, None, None)
    by_model = {joined_key((key.namespace, key.model_id)): traffic.get(key, quiet) for key in keys}
    for model in sorted(m for m, record in by_model.items() if record.requests == 0):
        logger.warning("%s: no request in the %s in Prometheus: not tuned, its settings stay", model, span)
    trace = rebuild_trace(by_model, seed=config.seed)
    logger.info(
        "rebuilt %d requests of %d model(s) over %s (Poisson arrivals inside each minute: sub-minute bursts are "
        "not in Prometheus' counters)",
        len(trace),
        len(trace.models),
        span,
    )
    scenario = dataclasses.replace(build_scenario(description, trace, config), start_from_static=True)
    return scenario, measure_window(metrics, description, window_s)


def publish(report: TuneReport) -> None:
    """The frontier each model chose from, as a table artifact (one row per model and candidate).

    Args:
        report: The run's report.
    """
    rows = [
        {
            "model": choice.model,
            "candidate": row.candidate.name,
            "attainment": f"{100 * row.attainment:.1f} %",
            "judged": f"{100 * choice.judged(row):.1f} %",
            "cost": f"{row.cost:,.1f}",
            "meets target": choice.verdict(row),
            "chosen": "yes" if row is choice.chosen else "",
        }
        for choice in report.choices
        for row in choice.rows
    ]
    table_artifact(key="tune-frontier", table=rows, description="Candidates replayed on the window's traffic")
