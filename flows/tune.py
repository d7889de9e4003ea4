"""The ``tune`` flow: per model, the sizing setting that would have met its SLO attainment target at the lowest cost
on the cluster's own recent traffic.

Lifecycle, top to bottom:

1. read the cluster's VariantAutoscalings and configuration (the simulate flow's reader) and the window's traffic:
   a request log in the trace CSV format (``timestamp, input tokens, output tokens`` per request; docs/simulate.md);
2. replay every candidate setting (:func:`engine.simulate.tune.candidates`: the attainment loop, pinned
   percentiles, static-peak floors) in parallel, one Prefect task each;
3. per model, the cheapest candidate whose replay met the model's target, else the closest
   (:func:`engine.simulate.tune.choose`);
4. unless ``dry_run``, write the choice on every VariantAutoscaling of the model: the candidate's annotations
   (``modelplane.io/ttft-percentile``, ``modelplane.io/min-replicas``; the ones another candidate would set are
   removed) and ``modelplane.io/tuned`` (what was chosen, its attainment and cost, the target, when);
5. publish the frontier each model chose from as a table artifact.

One VariantAutoscaling's failed write does not stop the others; the run is then degraded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine.api.registry import VARIANT_AUTOSCALING
from engine.optimize.spec import ANNOTATION_MIN_REPLICAS
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE
from engine.simulate.outcome import PolicyOutcome, summarize_outcome
from engine.simulate.policies import run_policy
from engine.simulate.records import SimConfig
from engine.simulate.scenario import Scenario, joined_key
from engine.simulate.tune import ANNOTATION_TUNED, Candidate, ModelChoice, candidates, choose, with_candidate
from flows.parameters import (
    SIMULATE_INTERVAL_S,
    SIMULATE_STARTUP_DELAY_S,
    SYSTEM_NAMESPACE,
    NamespaceName,
    NonEmpty,
    PositiveSeconds,
)
from flows.runs import flow
from flows.simulate import SloAttainment, read_inputs
from tasks.cluster import ClusterError, ObjectRef, connect
from tasks.progress import step
from tasks.tracking import run_logger, table_artifact, task

TUNED_ANNOTATIONS = (ANNOTATION_TTFT_PERCENTILE, ANNOTATION_MIN_REPLICAS)
"""The annotations a candidate may set; writing a choice removes the ones it does not set."""


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
                    "frontier": [
                        {"candidate": r.candidate.name, "attainment": round(r.attainment, 4), "cost": round(r.cost, 2)}
                        for r in c.rows
                    ],
                }
                for c in self.choices
            ],
            "written": self.written,
            "failed": self.failed,
            "dry_run": self.dry_run,
        }


@task(name="replay-candidate", task_run_name="replay {candidate.name}")
def replay_candidate(scenario: Scenario, candidate: Candidate) -> PolicyOutcome:
    """The Modelplane policy replayed on the window's traffic with one candidate's settings."""
    tuned = with_candidate(scenario, candidate)
    return summarize_outcome("modelplane", tuned, run_policy("modelplane", tuned))


@task(name="write-choice")
def write_choice(cluster: str, scenario: Scenario, choice: ModelChoice, now: datetime) -> tuple[list[str], list[str]]:
    """The chosen candidate's annotations and ``modelplane.io/tuned`` on every VariantAutoscaling of the model."""
    backend = connect(cluster)
    written: list[str] = []
    failed: list[str] = []
    record = json.dumps(
        {
            "candidate": choice.chosen.candidate.name,
            "attainment": round(choice.chosen.attainment, 4),
            "cost": round(choice.chosen.cost, 2),
            "target": choice.target,
            "met": choice.met,
            "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        sort_keys=True,
    )
    for va in scenario.description.variants:
        namespace, name = va.metadata.namespace or "default", va.metadata.name or ""
        if joined_key((namespace, va.spec.model_id)) != choice.model:
            continue
        settings: dict[str, str | None] = {key: None for key in TUNED_ANNOTATIONS}
        settings.update(choice.chosen.candidate.settings_for(joined_key((namespace, name))))
        settings[ANNOTATION_TUNED] = record
        try:
            backend.patch_spec(
                ObjectRef(va.api_version, VARIANT_AUTOSCALING, name, namespace),
                {"metadata": {"annotations": settings}},
            )
            written.append(f"{namespace}/{name}")
        except ClusterError as exc:
            failed.append(f"{namespace}/{name}: {exc.message}")
    return written, failed


TUNE_TIMEOUT_S = 3 * 3600.0
"""A nightly run's limit: the replays of one model-day take minutes per candidate (docs/benchmarks.md)."""


@flow(name="tune", log_prints=True, max_workers=2, timeout_seconds=TUNE_TIMEOUT_S)
def tune(
    cluster: NonEmpty,
    trace: NonEmpty,
    config_namespace: NamespaceName = SYSTEM_NAMESPACE,
    slo_attainment: SloAttainment | None = None,
    duration_s: PositiveSeconds | None = None,
    dry_run: bool = False,
    seed: int = 0,
) -> TuneReport:
    """Choose per model the cheapest setting that meets its SLO attainment target on the window's traffic.

    Args:
        cluster: Manifests directory/file (or 'kubeconfig:PATH[#context]') holding the VariantAutoscalings,
            service classes and accelerator costs; the choice is written there.
        trace: The window's request log, in the trace CSV format (one request per row: timestamp, input and
            output tokens).
        config_namespace: Namespace of the WVA ConfigMaps.
        slo_attainment: Every model's target for this tuning (default: what the VariantAutoscalings say).
        duration_s: Replay only the log's first seconds (default: all of it).
        dry_run: Replay and choose, write nothing.
        seed: Seed of the replay's random draws (the model split of the log): same inputs, same choice.
    """
    logger = run_logger()
    config = SimConfig(interval_s=SIMULATE_INTERVAL_S, startup_delay_s=SIMULATE_STARTUP_DELAY_S, seed=seed)
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
    settings = candidates(scenario)
    logger.info("replaying %d requests under %d candidate settings", len(scenario.trace), len(settings))
    futures = [replay_candidate.submit(scenario, candidate) for candidate in settings]
    replays = []
    with step("tune", total=len(settings), unit="replays") as progress:
        for candidate, future in zip(settings, futures):
            replays.append((candidate, future.result()))
            progress.advance(note=candidate.name)
    report = TuneReport(choose(scenario, replays), dry_run=dry_run)
    now = datetime.now(UTC)
    for choice in report.choices:
        logger.info(
            "%s: %s (attained %.1f %% of a %.1f %% target at %.1f)",
            choice.model,
            choice.chosen.candidate.name,
            100 * choice.chosen.attainment,
            100 * choice.target,
            choice.chosen.cost,
        )
        if not dry_run:
            written, failed = write_choice(cluster, scenario, choice, now)
            report.written += written
            report.failed += failed
    publish(report)
    return report


def publish(report: TuneReport) -> None:
    """The frontier each model chose from, as a table artifact (one row per model and candidate)."""
    rows = [
        {
            "model": choice.model,
            "candidate": row.candidate.name,
            "attainment": f"{100 * row.attainment:.1f} %",
            "cost": f"{row.cost:,.1f}",
            "meets target": "yes" if row.meets else "no",
            "chosen": "yes" if row is choice.chosen else "",
        }
        for choice in report.choices
        for row in choice.rows
    ]
    table_artifact(key="tune-frontier", table=rows, description="Candidates replayed on the window's traffic")
