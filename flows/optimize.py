"""The ``optimize`` flow: one allocation cycle for every VariantAutoscaling and AutoscalingPolicyBinding.

Lifecycle, top to bottom (read with ``tasks``, one ``engine`` plan, write with ``tasks``), steps 1 to 6 under the
cluster's writer lock (:func:`flows.one_writer.writer_lock`: a Lease, a lock file on the local backend; none in a dry run):

1. read the cluster: one LIST per kind, the WVA ConfigMaps of the Modelplane namespace;
2. read the current replicas of every scale target;
3. collect metrics (Prometheus, or a metrics file for local/CI runs) and each binding's targets and instances,
   with each model's latency histograms over its SLO window and the last two minutes (SLO attainment);
4. plan, one pure call (:func:`engine.optimize.plan.plan_cycle`): model-based MILP allocation, saturation
   analysis, hybrid arbitration, safety rules; Kthena recommendations with behaviour correction for bindings;
5. publish (when a Pushgateway is configured): WVA's ``wva_desired_replicas`` family and Modelplane's
   operational gauges, before any write, so ``status.actuation`` of a ``metrics``-mode target says
   whether its desired replicas reached the HPA's source (``tasks/clients/pushgateway.py``, ``engine/optimize/actuation.py``);
6. actuate: scale each target whose actuation mode scales (``scale``, ``both``) through its scale
   subresource, then write status (conditions, desired allocation, actuation) and an Event when the
   desired replicas change; a status write conditioned on a resourceVersion that has moved re-plans that
   object (:func:`flows.one_writer.replanner`);
7. publish again with the writes' outcomes, a table artifact and a one-line summary.

Every run is a fresh process: state that must survive (scaling windows, panic mode) lives in the
resources' status.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import Field

from engine.api.registry import AUTOSCALING_POLICY_BINDING, KTHENA_API, LLMD_API, VARIANT_AUTOSCALING
from engine.cycle_metrics import CycleFacts, optimize_cycle_metrics, wva_targets
from engine.optimize.bindings import BindingDecision
from engine.optimize.plan import CyclePlan, VariantDecision, plan_cycle
from engine.optimize.spec import CycleInputs, ModelLoad, PodSample, accelerator_text
from engine.perf.saturation import SaturationConfigSet
from engine.perf.tail_sizing import PromptDistribution
from engine.slo.measure import LatencyHistograms
from engine.units import PROMETHEUS_DURATION_PATTERN
from flows.exitcodes import CannotRun, ExitCode, degraded_summary, exit_code
from flows.one_writer import replanner, writer_lock
from flows.parameters import (
    SYSTEM_NAMESPACE,
    ClusterTarget,
    NamespaceName,
    Namespaces,
    NonNegativeSeconds,
    PositiveSeconds,
    ScaleDownWindowSeconds,
    Setting,
    absent_as,
)
from flows.reconcile import Table, conclude
from flows.runs import flow
from tasks.clients.cluster import ObjectRef, connect, local_path_problem
from tasks.clients.events import emit_change
from tasks.clients.metrics.file import FileMetrics
from tasks.clients.metrics.prometheus import PrometheusMetrics
from tasks.clients.metrics.snapshot import MetricsSnapshot, MetricsSource
from tasks.clients.pushgateway import Pushgateway, push
from tasks.optimize.bindings import BindingRowDetails, binding_scale_targets, describe_bindings, read_bindings
from tasks.optimize.outcome import actuation_problems, degraded_reasons
from tasks.optimize.read import (
    ClusterState,
    TargetReplicas,
    collect_metrics,
    read_cluster_state,
    read_current_replicas,
    scale_targets_of,
)
from tasks.optimize.write import WriteOutcome, apply_bindings, apply_decisions
from tasks.tracking import quote, run_logger

DEFAULT_INTERVAL_S = 60
DEFAULT_RATE_WINDOW = "1m"
RateWindow = Annotated[str, Field(pattern=f"^$|{PROMETHEUS_DURATION_PATTERN}", examples=["1m", "30s"]), absent_as("")]
"""A PromQL duration such as ``1m`` or ``30s``; empty keeps ``PROMETHEUS_RATE_WINDOW`` (default 1m)."""


@dataclass
class CycleRow:
    """One line of the allocation table."""

    namespace: str
    name: str
    kind: str
    model: str
    accelerator: str
    current: int | None
    desired: int | None
    cost: float | None
    """Per hour (:data:`engine.optimize.plan.COST_UNIT`) of the desired replicas; None: unpriced (a binding
    target whose binding gives no cost)."""
    reason: str
    applied: bool = False
    message: str = ""
    scaled: bool = False
    mode: str = "scale"
    held: str = ""
    """Why a scale-down of this row waits (the stabilization window), empty when none does."""


@dataclass
class CycleReport:
    """What one optimize cycle decided and did."""

    rows: list[CycleRow] = field(default_factory=list)
    summary: str = ""
    metrics_error: str | None = None
    writes: list[WriteOutcome] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    push_error: str | None = None
    """Why the metrics could not be pushed (None: pushed, or no Pushgateway configured)."""

    @property
    def exit_code(self) -> ExitCode:
        """The CLI's exit code for this cycle (see :mod:`flows.exitcodes`): 3 when it ran degraded."""
        return exit_code(self.degraded)

    def as_json(self) -> list[dict[str, Any]]:
        """The report as the CLI's JSON list."""
        return [asdict(row) for row in self.rows]


def metrics_source(
    metrics_file: str | None, prometheus_url: str | None, rate_window: str | None
) -> MetricsSource | None:
    """The metrics backend the parameters name, or None when none is configured.

    Args:
        metrics_file: A metrics YAML file to read instead of Prometheus, or None/empty.
        prometheus_url: Prometheus's base URL, or None/empty for ``$PROMETHEUS_URL``.
        rate_window: The PromQL window of the arrival-rate query (e.g. ``1m``), or None/empty for
            ``$PROMETHEUS_RATE_WINDOW``, else ``1m``.

    Returns:
        The file backend, the Prometheus backend, or None.
    """
    if metrics_file:
        return FileMetrics(metrics_file)
    url = prometheus_url or os.environ.get("PROMETHEUS_URL")
    if not url:
        return None
    # Token (file), TLS, timeouts and retries come from PROMETHEUS_* variables. The rate window: the
    # run's parameter when given, else $PROMETHEUS_RATE_WINDOW, else 1m.
    environ = dict(os.environ)
    if rate_window:
        environ["PROMETHEUS_RATE_WINDOW"] = rate_window
    environ.setdefault("PROMETHEUS_RATE_WINDOW", DEFAULT_RATE_WINDOW)
    return PrometheusMetrics.from_env(url, environ=environ)


def cycle_inputs(
    state: ClusterState,
    replicas: TargetReplicas,
    snapshot: MetricsSnapshot | None,
    metrics_error: str | None,
    now: datetime,
    time_limit_s: float,
    scale_down_window_s: float,
) -> CycleInputs:
    """Translate the gathered state and metrics snapshot into the engine's cycle inputs.

    Args:
        state: The cycle's read of the cluster.
        replicas: The current and ready replicas of every scale target.
        snapshot: The cycle's metrics, or None when they could not be collected.
        metrics_error: Why the metrics could not be collected, or None.
        now: The cycle's time.
        time_limit_s: The allocation solver's time limit, in seconds.
        scale_down_window_s: How long a scale-down must stay recommended before it is applied, in seconds.

    Returns:
        The inputs of :func:`engine.optimize.cycle.plan_cycle`.
    """
    loads: dict[tuple[str, str], ModelLoad] = {}
    pods: dict[tuple[str, str], list[PodSample]] = {}
    missing: dict[tuple[str, str], str] = {}
    latency: dict[tuple[str, str], LatencyHistograms] = {}
    latency_missing: dict[tuple[str, str], str] = {}
    waiting: dict[tuple[str, str], float] = {}
    if snapshot is not None:
        for key, load in snapshot.loads.items():
            loads[(key.namespace, key.model_id)] = ModelLoad(
                load.arrival_rate_rps,
                load.avg_in_tokens,
                load.avg_out_tokens,
                PromptDistribution.from_buckets(load.prompt_buckets) if load.prompt_buckets else None,
                load.recent_peak_rps,
                load.recent_change_rps,
                load.change_noise_rps,
                burst_rps=load.burst_rps,
                peaks_rps=load.peaks_rps,
                lowest_rps=load.lowest_rps,
            )
        for key, samples in snapshot.pods.items():
            pods[(key.namespace, key.model_id)] = [PodSample(p.pod, p.kv_cache_usage, p.queue_length) for p in samples]
        for key, lines in snapshot.missing_by_model.items():
            missing[(key.namespace, key.model_id)] = "; ".join(lines)
        latency = {(key.namespace, key.model_id): histograms for key, histograms in snapshot.latency.items()}
        latency_missing = {(key.namespace, key.model_id): why for key, why in snapshot.latency_missing.items()}
        waiting = {(key.namespace, key.model_id): count for key, count in snapshot.gateway_waiting.items()}
    return CycleInputs(
        now=now,
        variants=state.variant_models(),
        current_replicas=replicas.current,
        ready_replicas=replicas.ready,
        invalid_targets=replicas.invalid,
        accelerator_costs=state.accelerator_costs,
        service_classes=state.service_classes,
        saturation=SaturationConfigSet.from_configmap(state.saturation_data),
        inventory=state.inventory,
        unreadable_inventory=state.unreadable_inventory,
        loads=loads,
        pods=pods,
        metrics_error=metrics_error,
        missing_metrics=missing,
        latency=latency,
        latency_missing=latency_missing,
        time_limit_s=time_limit_s,
        scale_down_window_s=scale_down_window_s,
        gateway_waiting=waiting,
    )


def report_rows(
    decisions: list[VariantDecision],
    writes: list[WriteOutcome],
    bindings: list[BindingDecision],
    binding_details: dict[tuple[str, str], BindingRowDetails] | None = None,
) -> list[CycleRow]:
    """The allocation table: one row per variant and per binding target (a binding's model and its
    targets' accelerators from ``binding_details``).

    Args:
        decisions: The decision of every VariantAutoscaling.
        writes: What was written for them (empty in a dry run).
        bindings: The decision of every AutoscalingPolicyBinding.
        binding_details: Each binding's model and its targets' accelerators by (namespace, name), or None.

    Returns:
        The rows, variants first.
    """
    outcomes = {(w.namespace, w.name): w for w in writes}
    rows = [
        CycleRow(
            namespace=d.namespace,
            name=d.name,
            kind=VARIANT_AUTOSCALING,
            model=d.model_id or "",
            accelerator=accelerator_text(d.accelerator or "", d.accelerator_count),
            current=d.current,
            desired=d.desired,
            cost=round(d.cost, 2),
            reason=d.reason,
            applied=outcomes[(d.namespace, d.name)].applied if (d.namespace, d.name) in outcomes else False,
            message=d.message,
            scaled=outcomes[(d.namespace, d.name)].scaled if (d.namespace, d.name) in outcomes else False,
            mode=outcomes[(d.namespace, d.name)].mode if (d.namespace, d.name) in outcomes else "scale",
            held=d.held,
        )
        for d in decisions
    ]
    for b in bindings:
        details = (binding_details or {}).get((b.namespace, b.name)) or BindingRowDetails()
        for target in b.targets:
            rows.append(
                CycleRow(
                    namespace=b.namespace,
                    name=f"{b.name}/{target.name}",
                    kind=AUTOSCALING_POLICY_BINDING,
                    model=details.model,
                    accelerator=details.accelerators.get(target.name, ""),
                    current=target.current,
                    desired=target.desired,
                    cost=round(target.cost, 2) if target.priced else None,
                    reason=b.reason,
                    applied=target.applied,
                    message=b.message,
                    scaled=target.scaled,
                    mode=target.mode,
                )
            )
    return rows


@flow(name="optimize", timeout_seconds=DEFAULT_INTERVAL_S - 10, log_prints=True)
def optimize(
    namespaces: Namespaces = (),
    namespace_selector: Setting = "",
    config_namespace: NamespaceName = SYSTEM_NAMESPACE,
    prometheus_url: Setting = "",
    metrics_file: Setting = "",
    rate_window: RateWindow = "",
    cluster: ClusterTarget = "",
    dry_run: bool = False,
    solver_time_limit_s: PositiveSeconds = 10.0,
    status_heartbeat_s: NonNegativeSeconds = 300.0,
    scale_down_stabilization_s: ScaleDownWindowSeconds = 0.0,
    pushgateway_url: Setting = "",
) -> CycleReport:
    """One allocation cycle over every VariantAutoscaling and AutoscalingPolicyBinding.

    Args:
        namespaces: Namespaces to optimize; empty means all namespaces.
        namespace_selector: Label selector on Namespace objects (e.g. 'modelplane.io/optimize=true'); combined
            with namespaces, only namespaces in both are optimized.
        config_namespace: Namespace of the WVA ConfigMaps (costs, service classes, saturation, inventory).
        prometheus_url: Prometheus base URL; empty = $PROMETHEUS_URL. Ignored when metrics_file is set.
        metrics_file: Read metrics from this YAML file instead of Prometheus (local and CI previews); empty = Prometheus.
        rate_window: PromQL window of the arrival-rate query, e.g. '1m' or '30s'; empty = $PROMETHEUS_RATE_WINDOW,
            else 1m (WVA's window; shorter reacts faster and is noisier).
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH' or
            'kubeconfig:PATH#context'; or a manifests directory/file.
        dry_run: Decide and report, but write nothing (no scale, no status, no events).
        solver_time_limit_s: Time limit of the allocation MILP, in seconds.
        status_heartbeat_s: Rewrite a status whose only change is lastRunTime at most this often.
        scale_down_stabilization_s: Scale a VariantAutoscaling down only after the scale-down has been recommended
            for this long (seconds; then to the highest count recommended within the last window, as the HPA's
            rolling window, at most half the replicas a cycle), so rate() lag between close cycles cannot flap
            replicas. 0 = at once (WVA); the scheduled deployment sets 180 (a replica's start-up plus one cycle).
            Per resource: annotation modelplane.io/scale-down-stabilization-window.
        pushgateway_url: Prometheus Pushgateway to publish WVA's wva_desired_replicas family and Modelplane's own
            metrics to (HPA/KEDA actuation, dashboards); empty = $MODELPLANE_PUSHGATEWAY_URL, else off.

    Returns:
        The cycle's report: the allocation table, summary, writes and degraded reasons; a degraded run ends Failed
        named Degraded (:func:`flows.exitcodes.flow_result`).

    Raises:
        CannotRun: The cluster path is unusable, the configuration ConfigMap is missing, another run holds the
            writer lock, or the lock was lost before writing (the run wrote nothing).
    """
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    started, timer = time.time(), StageTimer()
    conn = connect(cluster, dry_run=dry_run)  # the parameter names the cluster; a dry run's writes change nothing
    problem = local_path_problem(conn)
    if problem:
        raise CannotRun(problem)

    # One writer at a time: the cycle reads, plans and writes under the cluster's Lease (a lock file on the local
    # backend), so two runs never interleave their scales and statuses. A dry run writes nothing and takes none.
    with writer_lock(conn, config_namespace, dry_run) as lock:
        # Read. Task inputs holding every object of the cycle are passed with quote(): Prefect would otherwise
        # walk each of their nodes looking for futures, which costs seconds at 1,000 variants.
        with timer.stage("read"):
            state = read_cluster_state(conn, list(namespaces or ()) or None, config_namespace, namespace_selector)
            if state.missing_configuration:
                raise CannotRun(state.missing_configuration)
            for error in state.config_errors:
                logger.warning("configuration: %s", error)
            replicas = read_current_replicas(conn, scale_targets_of(state) | binding_scale_targets(state))
        with timer.stage("metrics"):
            source = metrics_source(metrics_file, prometheus_url, rate_window)
            snapshot, metrics_error = collect_metrics(source, quote(state))
        if metrics_error:
            logger.warning("metrics unavailable, holding every variant: %s", metrics_error)
        with timer.stage("read"):
            bindings_read, binding_errors = read_bindings(
                conn, quote(state), quote(snapshot), metrics_error, quote(replicas)
            )

        # Plan: one pure call decides every VariantAutoscaling and binding.
        with timer.stage("decide"):
            inputs = cycle_inputs(
                state, replicas, snapshot, metrics_error, now, solver_time_limit_s, scale_down_stabilization_s
            )
            plan = plan_cycle(inputs, [binding_inputs for _, binding_inputs in bindings_read])

        # Write: publish first (status.actuation of a metrics-mode target says whether its desired replicas
        # reached the HPA's source; a dry run publishes nothing, an HPA would act on it), then scale and status.
        gateway = None if dry_run else Pushgateway.configured(pushgateway_url)
        facts = CycleFacts(
            started=started, stages=timer.stages, loads=plan.loads, slos=plan.slos, attainment=plan.attainment
        )
        published, push_error = publish_plan(gateway, plan, facts, timer)
        writes: list[WriteOutcome] = []
        if not dry_run:
            if lock is not None and not lock.held:
                raise CannotRun(f"lost the {lock.where} to {lock.holder_now} before writing; this run wrote nothing")
            replan = replanner(conn, state, inputs)
            with timer.stage("write"):
                writes = apply_decisions(
                    conn, quote(state), quote(plan.variants), now, status_heartbeat_s, published, replan
                )
                binding_plans = [(binding, decision) for (binding, _), decision in zip(bindings_read, plan.bindings)]
                binding_errors += apply_bindings(conn, quote(binding_plans), now, state.actuation_mode, published)

    degraded = degraded_reasons(conn, state, plan, writes, binding_errors, metrics_error)
    degraded += actuation_problems(writes, plan.bindings, gateway, push_error, dry_run)
    timer.stages["total"] = time.time() - started
    final_error = publish_outcome(gateway, plan, facts, writes, binding_errors, degraded)
    if final_error and push_error is None:
        push_error = final_error
        degraded.append(f"metrics not published ({final_error})")
    details = describe_bindings(state.bindings, replicas)  # the table from what the cycle read, no GET
    report = CycleReport(
        rows=report_rows(plan.variants, writes, plan.bindings, details),
        summary=degraded_summary(plan.summary, degraded),
        metrics_error=metrics_error,
        writes=writes,
        degraded=degraded,
        push_error=push_error,
    )
    emit_scaling_events(report)
    publish(report)
    return conclude("optimize", report, None)


class StageTimer:
    """Wall time per named stage of a run (the ``modelplane_cycle_duration_seconds`` gauge)."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as ``name`` (added to any earlier time of the same stage)."""
        begin = time.monotonic()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.monotonic() - begin


def publish_plan(
    gateway: Pushgateway | None, plan: CyclePlan, facts: CycleFacts, timer: StageTimer
) -> tuple[frozenset[tuple[str, str]], str | None]:
    """Push the plan's metrics before any write: the (namespace, name) of every target whose desired
    replicas reached the Pushgateway, and why the push failed (None: pushed, or no Pushgateway).

    Args:
        gateway: The Pushgateway, or None when there is none (or in a dry run).
        plan: The cycle's plan.
        facts: The cycle's timings, loads, SLOs and attainment.
        timer: The cycle's stage timer (the push is timed as ``publish``).

    Returns:
        The (namespace, name) of the targets published, and why the push failed or None.
    """
    if gateway is None:
        return frozenset(), None
    with timer.stage("publish"):
        push_error = push(gateway, "optimize", optimize_cycle_metrics(plan.variants, plan.bindings, facts))
    if push_error is not None:
        run_logger().error("publishing metrics: %s", push_error)
        return frozenset(), push_error
    return frozenset((t.namespace, t.variant_name) for t in wva_targets(plan.variants, plan.bindings)), None


def publish_outcome(
    gateway: Pushgateway | None,
    plan: CyclePlan,
    facts: CycleFacts,
    writes: list[WriteOutcome],
    binding_errors: list[str],
    degraded: list[str],
) -> str | None:
    """Push the plan's metrics again with the writes' outcomes and the run's total time; why it failed, or None.

    Args:
        gateway: The Pushgateway, or None.
        plan: The cycle's plan.
        facts: The cycle's timings, loads, SLOs and attainment.
        writes: What was written for the VariantAutoscalings.
        binding_errors: The bindings' write errors.
        degraded: The reasons the cycle was degraded.

    Returns:
        Why the push failed, or None (also when there is no Pushgateway).
    """
    if gateway is None:
        return None
    final = dataclasses.replace(
        facts,
        writes=write_counts(writes, plan.bindings, binding_errors),
        applied={(w.namespace, w.name): w.applied for w in writes},
        degraded=tuple(degraded),
    )
    return push(gateway, "optimize", optimize_cycle_metrics(plan.variants, plan.bindings, final))


def write_counts(
    writes: list[WriteOutcome], bindings: list[BindingDecision], binding_errors: list[str]
) -> dict[tuple[str, str], int]:
    """(kind, outcome) -> count of the run's writes: ``scaled``, ``status_written``, ``error`` (``modelplane_writes``).

    Args:
        writes: What was written for the VariantAutoscalings.
        bindings: The decision of every binding (its targets scaled).
        binding_errors: The bindings' write errors.

    Returns:
        The counts by (kind, outcome).
    """
    counts: dict[tuple[str, str], int] = {}

    def add(kind: str, outcome: str, n: int) -> None:
        counts[(kind, outcome)] = counts.get((kind, outcome), 0) + n

    add(VARIANT_AUTOSCALING, "scaled", sum(1 for w in writes if w.scaled))
    add(VARIANT_AUTOSCALING, "status_written", sum(1 for w in writes if w.status_written))
    add(VARIANT_AUTOSCALING, "error", sum(1 for w in writes if w.error))
    add(AUTOSCALING_POLICY_BINDING, "scaled", sum(1 for b in bindings for t in b.targets if t.scaled))
    add(AUTOSCALING_POLICY_BINDING, "error", len(binding_errors))
    return counts


def emit_scaling_events(report: CycleReport) -> None:
    """One Prefect event per target this cycle actually scaled (none in a dry run: nothing is applied).

    Args:
        report: The cycle's report.
    """
    for row in report.rows:
        if not row.scaled or row.desired is None or row.desired == row.current:
            continue
        payload = {
            "current": row.current,
            "desired": row.desired,
            "accelerator": row.accelerator,
            "model": row.model,
            "reason": row.reason,
        }
        if row.kind == VARIANT_AUTOSCALING:
            emit_change(ObjectRef(LLMD_API, VARIANT_AUTOSCALING, row.name, row.namespace), "scaled", payload)
        else:
            binding, _, target = row.name.partition("/")
            emit_change(
                ObjectRef(KTHENA_API, AUTOSCALING_POLICY_BINDING, binding, row.namespace),
                "scaled",
                {**payload, "target": target},
            )


ALLOCATION = Table(
    "optimize-allocation",
    (
        "namespace",
        ("variant", "name"),
        "accelerator",
        ("replicas", lambda r: f"{_count(r.current)} → {_count(r.desired)}"),
        ("cost/h", lambda r: "unpriced" if r.cost is None else f"{r.cost:.2f}"),
    ),
    "Allocation decided by this cycle (why: optimize-reasons)",
)
"""What every variant gets: one of the two tables the cycle publishes, each narrow enough for the UI's pane."""

REASONS = Table(
    "optimize-reasons",
    (("variant", "name"), "model", ("reason", lambda r: f"{r.reason} (held)" if r.held else r.reason)),
    "Why each variant got its allocation (the replicas and costs: optimize-allocation)",
)
"""Why each variant got its allocation; the held scale-downs' sentences go to its description, which wraps."""


def publish(report: CycleReport) -> None:
    """Publish the cycle as its two table artifacts (only inside a flow run).

    Args:
        report: The cycle's report.
    """
    ALLOCATION.publish(report.rows, report.summary)
    held = "; ".join(f"{r.name}: {r.held}" for r in report.rows if r.held)
    REASONS.publish(report.rows, f"held: {held}" if held else "")


def _count(replicas: int | None) -> str:
    """A replica count as the allocation table shows it (unknown: a dash)."""
    return "-" if replicas is None else str(replicas)
