"""The autoscaling commands that act on a cluster's metrics: ``optimize`` (one cycle on a cluster) and ``calibrate``
(fit performance profiles from metrics). Both read the WVA ConfigMaps in ``--config-namespace`` (default
:data:`flows.parameters.SYSTEM_NAMESPACE`). The commands that replay traffic offline are flows/cli/replay.py."""

from __future__ import annotations

import pathlib
import re

import typer
from rich.text import Text

from engine.optimize.spec import MAX_SCALE_DOWN_WINDOW_S
from engine.units import duration_seconds
from flows.cli.common import (
    cluster_option,
    command,
    config_namespace_option,
    console,
    err,
    exit_with_outcome,
    json_option,
    namespaces_option,
    needs,
    run_flow,
    table_of,
    track_option,
)
from flows.cli.options import duration_option
from flows.cli.output import print_json
from flows.exitcodes import CannotRun, cli_errors
from flows.parameters import (
    CALIBRATE_LOOKBACK,
    CALIBRATE_WINDOW,
    SCALE_DOWN_STABILIZATION_S,
    SYSTEM_NAMESPACE,
)


@command(
    "optimize-allocation",
    "optimize",
    renamed={"--metrics": "--metrics-file", "--prometheus": "--prometheus-url", "--pushgateway": "--pushgateway-url"},
)
def optimize(
    cluster: str | None = cluster_option(),
    metrics: pathlib.Path | None = typer.Option(
        None, "--metrics-file", exists=True, dir_okay=False, help="Metrics YAML file (instead of Prometheus)."
    ),
    prometheus: str | None = typer.Option(
        None, "--prometheus-url", metavar="URL", help="Prometheus base URL (default $PROMETHEUS_URL)."
    ),
    rate_window: str | None = typer.Option(
        None,
        "--rate-window",
        metavar="DURATION",
        help="PromQL window of the arrival-rate query, e.g. 1m or 30s (default $PROMETHEUS_RATE_WINDOW, else 1m).",
    ),
    namespace: list[str] = namespaces_option(),
    namespace_selector: str | None = typer.Option(
        None, "--namespace-selector", "-l", metavar="SELECTOR", help="Label selector on Namespaces."
    ),
    config_namespace: str = config_namespace_option(),
    scale_down_stabilization: float = duration_option(
        SCALE_DOWN_STABILIZATION_S,
        "--scale-down-stabilization",
        help="Scale a VariantAutoscaling down only after the scale-down has been recommended this long, then by at "
        "most half its replicas a cycle, as the optimize deployment does; 0 = at once, as WVA.",
        minimum=0,
        maximum=MAX_SCALE_DOWN_WINDOW_S,
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Decide and print, write nothing."),
    track: bool = track_option(),
    as_json: bool = json_option(),
    pushgateway: str | None = typer.Option(
        None,
        "--pushgateway-url",
        metavar="URL",
        help="Prometheus Pushgateway URL to publish wva_desired_replicas and Modelplane's metrics to "
        "(default $MODELPLANE_PUSHGATEWAY_URL; unset = off).",
    ),
) -> None:
    """Run one optimization cycle and print the allocation table (writes status back unless --dry-run).

    The cost column is per hour: a replica's cost times the desired replicas. A replica's cost is the
    VariantAutoscaling's spec.variantCost when it declares one, else the accelerators' unit costs (ConfigMap
    accelerator-unit-costs, per accelerator and hour) times the accelerators of a replica (the allocation itself
    prices accelerators by the unit costs); a binding target whose binding gives no cost is unpriced. The total adds
    every row.

    Exit codes: 0 clean; 2 could not run (cluster path missing, no Kubernetes access,
    configuration ConfigMap missing, a parameter rejected), with one line on stderr; 3 ran degraded
    (metrics missing, resources invalid or not ready, write errors), as the summary line says.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        metrics: ``--metrics-file``: Metrics YAML file (instead of Prometheus).
        prometheus: ``--prometheus-url``: Prometheus base URL (default $PROMETHEUS_URL).
        rate_window: ``--rate-window``: PromQL window of the arrival-rate query, e.g. 1m or 30s (default
            $PROMETHEUS_RATE_WINDOW, else 1m).
        namespace: ``--namespace``/``-n``: Limit to these namespaces (repeatable).
        namespace_selector: ``--namespace-selector``/``-l``: Label selector on Namespaces.
        config_namespace: ``--config-namespace``: Namespace of the WVA ConfigMaps.
        scale_down_stabilization: ``--scale-down-stabilization``: Scale a VariantAutoscaling down only after the scale-
            down has been recommended this long, then by at most half its replicas a cycle, as the optimize deployment
            does; 0 = at once, as WVA. In seconds (the option reads 90s, 5m, 1d; default 3m).
        dry_run: ``--dry-run``: Decide and print, write nothing.
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON list instead of a table.
        pushgateway: ``--pushgateway-url``: Prometheus Pushgateway URL to publish wva_desired_replicas and Modelplane's
            metrics to (default $MODELPLANE_PUSHGATEWAY_URL; unset = off).
    """
    from engine.units import PROMETHEUS_DURATION_PATTERN
    from tasks.optimize.precheck import cannot_run_reason

    if rate_window is not None and not re.match(PROMETHEUS_DURATION_PATTERN, rate_window):
        raise typer.BadParameter(
            f"{rate_window!r} is not a PromQL duration such as 1m or 30s", param_hint="--rate-window"
        )
    report = run_flow(
        "flows.optimize:optimize",
        track=track,
        check=lambda target: cannot_run_reason(target, config_namespace),
        namespaces=namespace or None,
        namespace_selector=namespace_selector,
        config_namespace=config_namespace,
        prometheus_url=prometheus,
        metrics_file=str(metrics) if metrics else None,
        rate_window=rate_window,
        cluster=cluster,
        dry_run=dry_run,
        scale_down_stabilization_s=scale_down_stabilization,
        pushgateway_url=pushgateway,
    )
    if as_json:
        print_json(report.as_json())
        exit_with_outcome(report.degraded)
    rows = []
    for row in report.rows:
        changed = row.desired is not None and row.current is not None and row.desired != row.current
        desired = Text(str(row.desired if row.desired is not None else "-"), style="bold" if changed else "")
        current = row.current if row.current is not None else "-"
        cost = "unpriced" if row.cost is None else f"{row.cost:.2f}"
        reason = f"{row.reason}: {row.held}" if row.held else row.reason
        rows.append((row.namespace, row.name, row.model, row.accelerator, current, desired, cost, reason))
    columns = ("namespace", "name", "model", "accelerator", "current", "desired", "cost/h", "reason")
    console.print(table_of("Modelplane allocation", columns, rows, right=("current", "desired", "cost/h")))
    console.print(report.summary)
    if dry_run:
        console.print("dry run: nothing was written")
    if report.metrics_error:
        err.print(f"metrics unavailable: {report.metrics_error}", style="yellow", soft_wrap=True)
    exit_with_outcome(report.degraded)


@command(
    "calibrate-profiles",
    "calibrate",
    renamed={"--prometheus": "--prometheus-url", "--windows": "--windows-file"},
)
def calibrate(
    cluster: str | None = cluster_option(),
    prometheus: str | None = typer.Option(
        None, "--prometheus-url", metavar="URL", help="Prometheus base URL (default $PROMETHEUS_URL)."
    ),
    windows: pathlib.Path | None = typer.Option(
        None, "--windows-file", help="Windows YAML file (instead of Prometheus)."
    ),
    namespace: list[str] = namespaces_option(),
    lookback: float = duration_option(
        duration_seconds(CALIBRATE_LOOKBACK),
        "--lookback",
        help="How far back to read metrics (a day: gamma needs hours of varied load).",
        minimum=1.0,
    ),
    window: float = duration_option(
        duration_seconds(CALIBRATE_WINDOW), "--window", help="Length of one metrics window.", minimum=1.0
    ),
    config_namespace: str = config_namespace_option(),
    dry_run: bool = typer.Option(False, "--dry-run", help="Fit and print, write nothing."),
    track: bool = track_option(),
    as_json: bool = json_option(),
    from_benchmark: list[pathlib.Path] = typer.Option(
        [],
        "--from-benchmark",
        help="Fit from benchmark results instead of metrics (repeatable): vllm bench serve results, guidellm or "
        "inference-perf reports, llm-d planner benchmark tables. Prints one profile per configuration.",
    ),
    benchmark_config: str | None = typer.Option(
        None, "--benchmark-config", help="With --from-benchmark: only configurations whose name contains this."
    ),
    apply: list[str] = typer.Option(
        [],
        "--apply",
        help="With --from-benchmark: offer the profile to this VariantAutoscaling (NAMESPACE/NAME, repeatable) on "
        "--cluster; written where it carries modelplane.io/calibration=apply.",
    ),
) -> None:
    """Fit performance profiles (alpha, beta, gamma, delta) from vLLM metrics; write them only where opted in.

    Exit codes: 0 every variant got a profile; 2 could not run (bad windows file, a window longer than the
    lookback, no Kubernetes access), with one line on stderr; 3 degraded: some variants got no profile (no metrics, data
    that cannot determine it) or could not be written, as their rows say.\f

    Args:
        cluster: ``--cluster``: The cluster the flow runs on (:data:`flows.parameters.CLUSTER_HELP`); None: the default.
        prometheus: ``--prometheus-url``: Prometheus base URL (default $PROMETHEUS_URL).
        windows: ``--windows-file``: Windows YAML file (instead of Prometheus).
        namespace: ``--namespace``/``-n``: Limit to these namespaces (repeatable).
        lookback: ``--lookback``: How far back to read metrics (a day: gamma needs hours of varied load). In seconds
            (the option reads 90s, 5m, 1d).
        window: ``--window``: Length of one metrics window. In seconds (the option reads 90s, 5m, 1d).
        config_namespace: ``--config-namespace``: Namespace of the WVA ConfigMaps.
        dry_run: ``--dry-run``: Fit and print, write nothing.
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON list instead of a table.
        from_benchmark: ``--from-benchmark``: Fit from benchmark results instead of metrics (repeatable): vllm bench
            serve results, guidellm or inference-perf reports, llm-d planner benchmark tables. Prints one profile per
            configuration.
        benchmark_config: ``--benchmark-config``: With --from-benchmark: only configurations whose name contains this.
        apply: ``--apply``: With --from-benchmark: offer the profile to this VariantAutoscaling (NAMESPACE/NAME,
            repeatable) on --cluster; written where it carries modelplane.io/calibration=apply.

    Raises:
        CannotRun: Metrics options given with ``--from-benchmark``, or ``--apply``/``--benchmark-config`` without
            it (printed as one ``error:`` line, exit 2).
    """
    if from_benchmark:
        from flows.cli.calibrate_benchmarks import calibrate_from_benchmarks

        metrics_options = {
            "--prometheus-url": prometheus is not None,
            "--windows-file": windows is not None,
            "--namespace": bool(namespace),
            "--lookback": lookback != duration_seconds(CALIBRATE_LOOKBACK),
            "--window": window != duration_seconds(CALIBRATE_WINDOW),
            "--config-namespace": config_namespace != SYSTEM_NAMESPACE,
        }
        if given := [option for option, set_ in metrics_options.items() if set_]:
            with cli_errors():
                raise CannotRun(f"{', '.join(given)}: metrics options; --from-benchmark fits from the files alone")

        calibrate_from_benchmarks(from_benchmark, benchmark_config, apply, cluster, dry_run, as_json)
    if apply or benchmark_config:
        with cli_errors():
            raise CannotRun("--apply and --benchmark-config go with --from-benchmark")
    from engine.api.registry import LLMD_API, VARIANT_AUTOSCALING
    from engine.slo.target import format_window
    from tasks.calibrate import WindowsFileError, read_windows_file

    if windows is not None:
        with cli_errors():
            try:
                read_windows_file(windows)  # before Prefect starts: a bad file is one line
            except WindowsFileError as exc:
                raise CannotRun(str(exc)) from None
    elif window > lookback:
        with cli_errors():
            raise CannotRun(f"--window {format_window(window)} is longer than --lookback {format_window(lookback)}")
    report = run_flow(
        "flows.calibrate:calibrate",
        track=track,
        check=needs(LLMD_API, VARIANT_AUTOSCALING),
        namespaces=namespace or None,
        config_namespace=config_namespace,
        cluster=cluster,
        prometheus_url=prometheus,
        windows_file=str(windows) if windows else None,
        lookback=format_window(lookback),
        window=format_window(window),
        dry_run=dry_run,
    )
    if as_json:
        print_json(report.as_json())
        exit_with_outcome(report.degraded)
    rows = []
    for row in report.rows:
        values = [
            f"{row.fit[n]['value']:.4g}" + ("*" if row.fit[n]["fixed"] else "") if row.fit else "-"
            for n in ("alpha", "beta", "gamma", "delta")
        ]
        rows.append((row.namespace, row.name, row.reason, *values, "yes" if row.spec_written else "no"))
    columns = ("namespace", "name", "result", "alpha", "beta", "gamma", "delta", "written")
    console.print(table_of("Calibrated performance profiles", columns, rows))
    for row in report.rows:
        console.print(f"{row.namespace}/{row.name}: {row.message}", highlight=False)
    if dry_run:
        console.print("dry run: nothing was written")
    exit_with_outcome(report.degraded)
