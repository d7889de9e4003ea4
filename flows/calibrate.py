"""The ``calibrate`` flow: fit each VariantAutoscaling's performance profile from what its vLLM pods export.

Lifecycle, top to bottom:

1. read the VariantAutoscalings (the optimize flow's read task);
2. collect windows of vLLM metrics per variant: Prometheus range queries over the lookback, one model at a time
   (one window per pod and step, the variant's pods named after its scale target; at most
   :data:`tasks.calibrate.MAX_WINDOWS_PER_VARIANT` per variant, evenly sampled past it), or a windows file;
3. fit ``alpha, beta, gamma, delta`` with confidence intervals (``engine.simulate.calibrate``), or say why the
   data cannot determine them; a model's windows are released once its variants are fitted;
4. write a ``ProfileCalibrated`` condition on every VariantAutoscaling, and the profile into the spec
   only where the resource opted in (``modelplane.io/calibration: apply``) -- never silently;
5. publish the proposals as a table artifact.

One variant's failure (no metrics, a model whose queries fail, an unidentifiable profile, an API error) does not stop
the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine.api.llmd import VariantAutoscaling
from engine.api.registry import LLMD_API, VARIANT_AUTOSCALING
from engine.optimize.spec import SpecError, parse_variant
from engine.simulate.calibrate import ProfileFit, Unidentifiable, Window, calibration_outcome, fit_profile
from engine.units import duration_seconds, format_duration
from flows.exitcodes import flow_result
from flows.parameters import (
    CALIBRATE_LOOKBACK,
    CALIBRATE_MAX_LOOKBACK_S,
    CALIBRATE_WINDOW,
    SYSTEM_NAMESPACE,
    ClusterTarget,
    NamespaceName,
    Namespaces,
    PromDuration,
    Setting,
)
from flows.reconcile import Table
from flows.runs import flow
from tasks.boundary import Accepted
from tasks.calibrate import collect_windows, write_outcome
from tasks.clients.cluster import connect
from tasks.clients.cluster.errors import ClusterError
from tasks.optimize.read import read_cluster_state
from tasks.tracking import run_logger

PARAMETERS = ("alpha", "beta", "gamma", "delta")
"""The profile's parameters, in the order the table shows them."""
CALIBRATE_TIMEOUT_S = 1800.0
"""How long a calibrate run may take (half an hour). A run reads the cluster once and each model's metrics in 8 to 10
range queries, seconds against a working Prometheus; a Prometheus that answers a byte at a time takes each query
to its deadline and retries (about two minutes), so without a limit a run stalled for as long as the server kept
sending. It ends as "timed out" (exit 2) instead."""


@dataclass
class CalibrationRow:
    """One VariantAutoscaling's result."""

    namespace: str
    name: str
    reason: str
    message: str
    fit: dict[str, Any] | None = None
    current: dict[str, float] | None = None
    spec_written: bool = False
    error: str | None = None


@dataclass
class CalibrationReport:
    """What one calibrate run proposed and wrote."""

    rows: list[CalibrationRow] = field(default_factory=list)

    @property
    def degraded(self) -> list[str]:
        """Why the run was degraded (exit 3, the ``Degraded`` run state): variants with no profile or a failed write."""
        return [f"{r.namespace}/{r.name}: {r.reason}" for r in self.rows if r.fit is None or r.error]

    def as_json(self) -> list[dict[str, Any]]:
        """The report as the CLI's JSON list."""
        return [row.__dict__ for row in self.rows]


def _current(va: VariantAutoscaling) -> dict[str, float] | None:
    try:
        profile = parse_variant(va).profile
    except SpecError:
        return None
    return (
        None
        if profile is None
        else {"alpha": profile.alpha, "beta": profile.beta, "gamma": profile.gamma, "delta": profile.delta}
    )


def calibrate_variant(
    va: VariantAutoscaling, windows: list[Window] | None, metrics_error: str | None, note: str | None = None
) -> tuple[ProfileFit | None, str | None]:
    """Fit one variant, or the reason there is no fit.

    Args:
        va: The VariantAutoscaling (its current profile gives gamma's prior).
        windows: The metric windows of its pods, or None when none were read.
        metrics_error: Why the metrics could not be read, or None.
        note: How the windows were sampled (:attr:`tasks.calibrate.Collected.notes`), added to the fit's notes.

    Returns:
        The fitted profile and None, or None and why there is no fit.
    """
    if windows is None or not windows:
        return None, f"no metrics for this variant's pods{': ' + metrics_error if metrics_error else ''}"
    current = _current(va)
    try:
        fit = fit_profile(windows, gamma_prior=current["gamma"] if current else None)
    except Unidentifiable as exc:
        return None, str(exc)
    if note:
        fit.notes.append(note)
    return fit, None


def _by_model(variants: list[Accepted[VariantAutoscaling]]) -> list[list[Accepted[VariantAutoscaling]]]:
    """The variants grouped by model (namespace, model ID), in the order the models first appear."""
    groups: dict[tuple[str, str], list[Accepted[VariantAutoscaling]]] = {}
    for va in variants:
        groups.setdefault((va.namespace, va.model.spec.model_id), []).append(va)
    return list(groups.values())


@flow(name="calibrate", timeout_seconds=CALIBRATE_TIMEOUT_S, log_prints=True)
def calibrate(
    namespaces: Namespaces = (),
    config_namespace: NamespaceName = SYSTEM_NAMESPACE,
    cluster: ClusterTarget = "",
    prometheus_url: Setting = "",
    windows_file: Setting = "",
    lookback: PromDuration = CALIBRATE_LOOKBACK,
    window: PromDuration = CALIBRATE_WINDOW,
    dry_run: bool = False,
) -> CalibrationReport:
    """Fit every VariantAutoscaling's alpha/beta/gamma/delta from vLLM metrics; propose, and apply where opted in.

    Args:
        namespaces: Namespaces to calibrate; empty means all namespaces.
        config_namespace: Namespace of the WVA ConfigMaps (read with the cluster state).
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.
        prometheus_url: Prometheus base URL; empty = $PROMETHEUS_URL. Ignored when windows_file is set.
        windows_file: Read metric windows from this YAML file instead of Prometheus (local and CI runs); empty = Prometheus.
        lookback: How far back to read metrics, a PromQL duration of at most 31 days (default a day, ``24h`` or
            ``1d``: gamma needs hours of varied load to be determined).
        window: Length of one window (PromQL increase range and step), a PromQL duration such as ``5m``.
        dry_run: Fit and report, write nothing (no condition, no spec).

    Returns:
        The report: one row per VariantAutoscaling (its fit, condition reason and whether the spec was written); a
        degraded run (a write failed) ends Failed named Degraded (:func:`flows.exitcodes.flow_result`).

    Raises:
        ValueError: ``lookback`` is longer than 31 days (:data:`flows.parameters.CALIBRATE_MAX_LOOKBACK_S`).
    """
    if duration_seconds(lookback) > CALIBRATE_MAX_LOOKBACK_S:
        raise ValueError(f"lookback {lookback} is longer than {format_duration(CALIBRATE_MAX_LOOKBACK_S)}")
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    conn = connect(
        cluster, dry_run=dry_run
    )  # a dry run's writes (the boundary marking an invalid object) change nothing
    state = read_cluster_state(conn, list(namespaces or ()) or None, config_namespace)
    fits: dict[tuple[str, str], tuple[ProfileFit | None, str | None]] = {}
    warned: set[str] = set()
    # One model at a time from Prometheus: its windows are fitted, then released before the next model is read.
    for group in [state.variants] if windows_file else _by_model(state.variants):
        collected = collect_windows(group, windows_file, prometheus_url, lookback, window)
        for reason in dict.fromkeys(collected.errors.values()):
            if reason not in warned:  # the same reason for every model (no metrics source) is said once
                warned.add(reason)
                logger.warning("metrics: %s", reason)
        for va in group:
            key = (va.namespace, va.name)
            fits[key] = calibrate_variant(
                va.model, collected.windows.get(key), collected.errors.get(key), collected.notes.get(key)
            )
        del collected

    report = CalibrationReport()
    for va in state.variants:
        obj, key = va.obj, (va.namespace, va.name)
        fit, why = fits[key]
        outcome = calibration_outcome(va.model, fit, why)
        row = CalibrationRow(
            key[0],
            key[1],
            outcome.reason,
            outcome.message,
            current=_current(va.model),
            fit={n: getattr(fit, n).as_dict() for n in PARAMETERS} | {"windows": fit.windows} if fit else None,
        )
        if not dry_run:
            try:
                row.spec_written = write_outcome(conn, obj, outcome, now)
            except ClusterError as exc:  # one variant's API failure must not stop the others
                row.error = exc.message
                logger.error("VariantAutoscaling %s/%s: %s", key[0], key[1], exc.message)
        logger.info("%s/%s: %s", key[0], key[1], outcome.message)
        report.rows.append(row)
    TABLE.publish(report.rows, "")
    return flow_result(report, report.degraded)


def _estimate(name: str) -> Callable[[CalibrationRow], str]:
    """A fitted parameter as the table shows it: value, 95% interval (or ``kept``), and the current value."""

    def cell(row: CalibrationRow) -> str:
        if not row.fit:
            return ""
        e = row.fit[name]
        now = f" (now {row.current[name]:g})" if row.current else ""
        kept = " kept" if e["fixed"] else f" [{e['ci95'][0]:.4g}, {e['ci95'][1]:.4g}]"
        return f"{e['value']:.4g}{kept}{now}"

    return cell


TABLE = Table(
    "calibrate-profiles",
    (
        "namespace",
        ("variant", "name"),
        ("result", "reason"),
        *((name, _estimate(name)) for name in PARAMETERS),
        ("written", "spec_written"),
        "message",
    ),
    "Performance profiles fitted from vLLM metrics (95% confidence intervals)",
)


def apply_profile(
    fit: ProfileFit, targets: list[tuple[str, str]], cluster: ClusterTarget = "", dry_run: bool = False
) -> CalibrationReport:
    """Offer one fitted profile (from benchmark results) to each VariantAutoscaling ``(namespace, name)``.

    The same outcome as a metrics calibration: a ``ProfileCalibrated`` condition on each, and the profile
    written into ``spec.variantProfile`` only where the resource carries ``modelplane.io/calibration: apply``
    and every parameter was determined.  A VariantAutoscaling that cannot be read or written is a row with
    its error; the others proceed.

    Args:
        fit: The profile fitted from benchmark results.
        targets: The VariantAutoscalings to offer it to, as (namespace, name).
        cluster: The cluster they live in (empty for the default, as the flows' ``cluster`` parameter).
        dry_run: Whether to decide and report without writing.

    Returns:
        One row per target: the outcome, whether the spec was written, or the error that kept it from being read
        or written.
    """
    conn = connect(cluster, dry_run=dry_run)
    now = datetime.now(UTC).replace(microsecond=0)
    fitted = {n: getattr(fit, n).as_dict() for n in PARAMETERS} | {"windows": fit.windows}
    report = CalibrationReport()
    for namespace, name in targets:
        try:
            obj = conn.get(LLMD_API, VARIANT_AUTOSCALING, name, namespace)
            va = VariantAutoscaling.model_validate(obj)
        except ClusterError as exc:
            report.rows.append(CalibrationRow(namespace, name, "ReadFailed", exc.message, error=exc.message))
            continue
        except ValueError as exc:  # an invalid object: say so, touch nothing
            message = f"invalid VariantAutoscaling: {exc}".splitlines()[0]
            report.rows.append(CalibrationRow(namespace, name, "Invalid", message, error=message))
            continue
        outcome = calibration_outcome(va, fit, None)
        row = CalibrationRow(namespace, name, outcome.reason, outcome.message, fit=fitted, current=_current(va))
        if not dry_run:
            try:
                row.spec_written = write_outcome(conn, obj, outcome, now)
            except ClusterError as exc:
                row.error = exc.message
        report.rows.append(row)
    return report
