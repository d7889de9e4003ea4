"""The commands that replay traffic offline: ``simulate`` (replay a trace against a cluster description and compare
autoscaling policies) and ``tune`` (replay a window's traffic to choose each model's cheapest sizing setting that
meets its SLO attainment target). Both read the WVA ConfigMaps in ``--config-namespace`` (default
:data:`flows.parameters.SYSTEM_NAMESPACE`)."""

from __future__ import annotations

import datetime
import math
import os
import pathlib
from typing import Any, get_args

import typer

from flows.cli.common import (
    command,
    config_namespace_option,
    console,
    exit_with_outcome,
    json_option,
    manifests_path,
    run_flow,
    table_of,
    track_option,
)
from flows.cli.options import duration_option
from flows.cli.output import print_json
from flows.exitcodes import CannotRun, cli_errors
from flows.parameters import (
    MAX_CONTROL_INTERVAL_S,
    MIN_CONTROL_INTERVAL_S,
    SIMULATE_INTERVAL_S,
    SIMULATE_OUTPUT_DIR,
    SIMULATE_STARTUP_DELAY_S,
)


@command("simulate-policies", "simulate", renamed={"--share": "--model-share", "--output": "--output-dir"})
def simulate(
    cluster_option: str = typer.Option(
        ...,
        "--cluster",
        metavar="PATH",
        help="Manifests directory/file: VariantAutoscalings, targets, WVA ConfigMaps (not empty).",
    ),
    trace: pathlib.Path = typer.Option(
        ..., "--trace", help="Trace CSV (timestamp, prompt tokens, output tokens; Azure format as is)."
    ),
    policy: list[str] = typer.Option(
        [],
        "--policy",
        "-p",
        metavar="POLICY",
        help="Policy to compare (repeatable): modelplane, saturation-only, wva-greedy, hpa, static-peak, oracle "
        "(the clairvoyant schedule); default: all.",
    ),
    compression: float = typer.Option(1.0, help="Divide inter-arrival times by this (time compression)."),
    rate_scale: float = typer.Option(1.0, "--rate-scale", help="Multiply the number of requests."),
    slice_start: float = duration_option(
        0.0, "--slice-start", help="Start of the replayed slice, after the trace's first request."
    ),
    duration: float | None = duration_option(
        None, "--duration", help="Length of the replayed slice, before compression (default: to the end)."
    ),
    wave_floor: float = typer.Option(
        1.0,
        "--wave-floor",
        help="A day's shape: thin the trace so its rate goes from this share of the recorded one to all of it "
        "and back (0 < floor <= 1; 1 = as recorded).",
    ),
    wave_period: float | None = duration_option(
        None, "--wave-period", help="Period of the --wave-floor wave, replayed time (default: the slice's length)."
    ),
    bursty: str | None = typer.Option(
        None,
        "--bursty",
        metavar="VARIANT",
        help="Replay a named bursty variant (silent minutes, bursts, sub-minute clusters) filled with the trace's "
        "requests: tune-a, tune-b, tune-c (tuning), held-long-silences, held-sharp-clusters, held-2x-rate (held out).",
    ),
    share: list[str] = typer.Option(
        [],
        "--model-share",
        metavar="MODEL=WEIGHT",
        help="Share of a model ('namespace/modelID') in the trace (repeatable; default: equal shares).",
    ),
    interval: float = duration_option(
        SIMULATE_INTERVAL_S,
        "--interval",
        help="Control interval, simulated time, 1s to 1h.",
        minimum=MIN_CONTROL_INTERVAL_S,
        maximum=MAX_CONTROL_INTERVAL_S,
    ),
    startup_delay: float = duration_option(
        SIMULATE_STARTUP_DELAY_S, "--startup-delay", help="How long a new replica takes to become ready."
    ),
    sizing_ttft_scale: float = typer.Option(
        1.0,
        "--sizing-ttft-scale",
        help="Policies size for the TTFT targets x this; attainment is judged against the targets.",
    ),
    hpa_metric: str | None = typer.Option(
        None,
        "--hpa-metric",
        metavar="METRIC",
        help="Per-replica metric of the HPA-style policy (default: the cluster's AutoscalingPolicy).",
    ),
    hpa_target: float | None = typer.Option(None, "--hpa-target", help="Target per replica of --hpa-metric."),
    router: str | None = typer.Option(
        None,
        "--router",
        metavar="auto|least-outstanding|least-load|least-latency",
        help="Gateway router: least-outstanding, least-load (llm-d/Kthena: queue + KV), "
        "least-latency (predicted TTFT/ITL vs SLO); auto (the default) = what the cluster says.",
    ),
    start: str = typer.Option(
        "static",
        "--start",
        metavar="static|manifests",
        help="Where the reactive policies start: static (static peak's allocation, the default, as the benchmarks) "
        "or manifests (the scale targets' replicas, a cold start).",
    ),
    slo_attainment: float | None = typer.Option(
        None,
        "--slo-attainment",
        help="Every model's SLO attainment target (0.5-0.999), as modelplane.io/slo-attainment on every "
        "VariantAutoscaling; Modelplane's attainment loop sizes for it. Default: what the manifests say.",
    ),
    frontier: bool = typer.Option(
        True,
        "--frontier/--no-frontier",
        help="Also sweep each policy's knob and the clairvoyant schedule: "
        "cost-attainment curves, attainment ceiling, cost / clairvoyant schedule.",
    ),
    seed: int = typer.Option(0, min=0, help="Seed of every random draw."),
    output: pathlib.Path = typer.Option(
        pathlib.Path(SIMULATE_OUTPUT_DIR), "--output-dir", "-o", help="Directory of the report (HTML, plots, JSON)."
    ),
    config_namespace: str = config_namespace_option(),
    track: bool = track_option(),
    as_json: bool = json_option("the JSON summary"),
) -> None:
    """Replay a trace against a cluster description and compare autoscaling policies (table, JSON, HTML report).

    The cost column is per replay: accelerator-hours over the replay times each accelerator's unit cost per hour
    (ConfigMap accelerator-unit-costs).

    Exit codes: 0 done; 2 could not run (missing cluster or trace, malformed trace,
    unknown policy, a VariantAutoscaling that cannot be simulated), with one line on stderr.\f

    Args:
        cluster_option: ``--cluster``: Manifests directory/file: VariantAutoscalings, targets, WVA ConfigMaps (not
            empty).
        trace: ``--trace``: Trace CSV (timestamp, prompt tokens, output tokens; Azure format as is).
        policy: ``--policy``/``-p``: Policy to compare (repeatable): modelplane, saturation-only, wva-greedy, hpa,
            static-peak, oracle (the clairvoyant schedule); default: all.
        compression: ``--compression``: Divide inter-arrival times by this (time compression).
        rate_scale: ``--rate-scale``: Multiply the number of requests.
        slice_start: ``--slice-start``: Start of the replayed slice, after the trace's first request. In seconds (the
            option reads 90s, 5m, 1d; default 0s).
        duration: ``--duration``: Length of the replayed slice, before compression (default: to the end). In seconds
            (the option reads 90s, 5m, 1d).
        wave_floor: ``--wave-floor``: A day's shape: thin the trace so its rate goes from this share of the recorded one
            to all of it and back (0 < floor <= 1; 1 = as recorded).
        wave_period: ``--wave-period``: Period of the --wave-floor wave, replayed time (default: the slice's length). In
            seconds (the option reads 90s, 5m, 1d).
        bursty: ``--bursty``: Replay a named bursty variant (silent minutes, bursts, sub-minute clusters) filled with
            the trace's requests: tune-a, tune-b, tune-c (tuning), held-long-silences, held-sharp-clusters, held-2x-rate
            (held out).
        share: ``--model-share``: Share of a model ('namespace/modelID') in the trace (repeatable; default: equal
            shares).
        interval: ``--interval``: Control interval, simulated time. In seconds (the option reads 90s, 5m, 1d; default
            1m).
        startup_delay: ``--startup-delay``: How long a new replica takes to become ready. In seconds (the option reads
            90s, 5m, 1d; default 2m).
        sizing_ttft_scale: ``--sizing-ttft-scale``: Policies size for the TTFT targets x this; attainment is judged
            against the targets.
        hpa_metric: ``--hpa-metric``: Per-replica metric of the HPA-style policy (default: the cluster's
            AutoscalingPolicy).
        hpa_target: ``--hpa-target``: Target per replica of --hpa-metric.
        router: ``--router``: Gateway router: least-outstanding, least-load (llm-d/Kthena: queue + KV), least-latency
            (predicted TTFT/ITL vs SLO); auto (the default) = what the cluster says.
        start: ``--start``: Where the reactive policies start: static (static peak's allocation, the default, as the
            benchmarks) or manifests (the scale targets' replicas, a cold start).
        slo_attainment: ``--slo-attainment``: Every model's SLO attainment target (0.5-0.999), as modelplane.io/slo-
            attainment on every VariantAutoscaling; Modelplane's attainment loop sizes for it. Default: what the
            manifests say.
        frontier: ``--frontier``: Also sweep each policy's knob and the clairvoyant schedule: cost-attainment curves,
            attainment ceiling, cost / clairvoyant schedule.
        seed: ``--seed``: Seed of every random draw.
        output: ``--output-dir``/``-o``: Directory of the report (HTML, plots, JSON).
        config_namespace: ``--config-namespace``: Namespace of the WVA ConfigMaps.
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print the JSON summary instead of a table.

    Raises:
        CannotRun: The description or trace is missing or malformed, or a policy, router, bursty variant, start or
            attainment is not one it knows (printed as one ``error:`` line, exit 2; a ConfigMap entry that does not
            parse or an output directory that cannot be made stop the flow, with one line too).
        typer.BadParameter: A ``--model-share`` weight that is not a finite number above 0.
    """
    from engine.optimize.spec import SpecError
    from engine.simulate.trace import TraceError
    from flows.simulate import StartFrom
    from flows.simulate import simulate as simulate_flow
    from tasks.simulate import InvalidConfiguration, OutputDirectoryError, summary_table

    with cli_errors():  # what can be checked before a flow run starts: bad input is one line, not a failed run's log
        shares = _shares(share)
        cluster = manifests_path(cluster_option)
        if not cluster.exists():
            raise CannotRun(f"cluster description {cluster} does not exist")
        _check_simulation_input(policy, router, trace, bursty)
        if start not in get_args(StartFrom):
            choices = " or ".join(get_args(StartFrom))
            raise CannotRun(f"--start {start!r}: choose {choices} (the slice's start is --slice-start)")
        _check_slo_attainment(slo_attainment)
    routing: dict[str, Any] = {"router": router} if router is not None else {}  # absent: the flow's default
    report = run_flow(
        simulate_flow,
        track=track,
        cannot_run=(TraceError, SpecError, InvalidConfiguration, OutputDirectoryError),
        cluster=str(cluster),
        trace=str(trace),
        config_namespace=config_namespace,
        policies=policy or None,
        compression=compression,
        rate_scale=rate_scale,
        start_s=slice_start,
        duration_s=duration,
        wave_floor=wave_floor,
        wave_period_s=wave_period,
        bursty=bursty,
        model_shares=shares or None,
        interval_s=interval,
        startup_delay_s=startup_delay,
        sizing_ttft_scale=sizing_ttft_scale,
        hpa_metric=hpa_metric,
        hpa_target=hpa_target,
        start=start,
        slo_attainment=slo_attainment,
        frontier=frontier,
        seed=seed,
        output_dir=str(output),
        **routing,
    )
    if as_json:
        print_json(report.as_json())
        exit_with_outcome([])
    rows = summary_table(report.outcomes, report.limits)
    ceiling = f", attainment ceiling {report.limits.ceiling['all']:.1%}" if report.limits is not None else ""
    title = f"Policies replayed on {trace.name} ({report.settings['requests']} requests{ceiling})"
    numeric = [column for column in rows[0] if column != "policy"]
    console.print(table_of(title, list(rows[0]), [list(row.values()) for row in rows], right=numeric))
    if report.limits is not None and (beyond := report.limits.out_of_reach()):
        console.print(f"note: {beyond}")
    console.print(f"report: {report.files['html']}  summary: {report.files['json']}")
    exit_with_outcome([])  # 3 when the boundary reader left invalid VariantAutoscalings out


def _shares(items: list[str]) -> dict[str, float]:
    """``--model-share MODEL=WEIGHT`` options as a dict; a weight that is not a finite number above 0 is a bad value
    of the option (one line: ``inf`` would turn every model's probability into NaN)."""
    shares: dict[str, float] = {}
    for item in items:
        model, _, weight = item.rpartition("=")
        try:
            share = float(weight)
        except ValueError:
            raise typer.BadParameter(
                f"{item!r}: expected MODEL=WEIGHT with a number", param_hint="--model-share"
            ) from None
        if not 0 < share < math.inf:  # NaN fails too
            raise typer.BadParameter(
                f"{item!r}: the weight must be a finite number above 0", param_hint="--model-share"
            )
        shares[model] = share
    return shares


def _check_slo_attainment(value: float | None) -> None:
    """:class:`CannotRun` for an ``--slo-attainment`` the annotation would refuse."""
    from engine.slo.target import check_attainment

    if value is not None:
        try:
            check_attainment(value)
        except ValueError as exc:
            raise CannotRun(f"--slo-attainment: {exc}") from None


def _check_simulation_input(policy: list[str], router: str | None, trace: pathlib.Path, bursty: str | None) -> None:
    """:class:`CannotRun` for an unknown policy, router or bursty variant, or a trace file that is missing or malformed."""
    from engine.simulate.bursts import BURSTY_VARIANTS
    from engine.simulate.policies import POLICIES
    from engine.simulate.scenario import check_gateway_router
    from engine.simulate.trace import TraceError
    from tasks.traces import read_trace_rows

    unknown = [p for p in policy if p not in POLICIES]
    if unknown:
        raise CannotRun(f"unknown policy {', '.join(unknown)}; choose from {', '.join(POLICIES)}")
    if router is not None:
        try:
            check_gateway_router(router)
        except ValueError as exc:
            raise CannotRun(str(exc)) from None
    if bursty is not None and bursty not in BURSTY_VARIANTS:
        raise CannotRun(f"unknown bursty variant {bursty!r}; choose from {', '.join(BURSTY_VARIANTS)}")
    try:
        read_trace_rows(trace)
    except TraceError as exc:  # names the file, and the line or row
        raise CannotRun(str(exc)) from None


def _window_end(end: str | None, trace: pathlib.Path | None, window: str) -> datetime.datetime | None:
    """``--end`` as a time (UTC without an offset), checked as the flow checks it (:func:`window_span` on the
    command's ``window``): not with a request log, not later than now."""
    from engine.simulate.rebuild import window_span

    if end is None:
        return None
    if trace is not None:
        raise CannotRun("--end: the end of a window rebuilt from Prometheus; a request log (--trace) is replayed whole")
    try:
        when = datetime.datetime.fromisoformat(end)
    except ValueError:
        raise CannotRun(f"--end {end!r}: not an ISO 8601 time such as 2026-11-30T06:00Z") from None
    try:
        window_span(window, when, datetime.datetime.now(datetime.UTC))
    except ValueError as exc:
        raise CannotRun(f"--end: {exc}") from None
    return when


@command("tune-sizing", "tune")
def tune(
    cluster_option: str = typer.Option(
        ...,
        "--cluster",
        metavar="CLUSTER",
        help="Manifests directory/file (or kubeconfig:PATH): the VariantAutoscalings to tune.",
    ),
    trace: pathlib.Path | None = typer.Option(
        None,
        "--trace",
        help="The window's request log (trace CSV: timestamp, prompt tokens, output tokens). Without it, the last "
        "--window of traffic is rebuilt from Prometheus.",
    ),
    prometheus_url: str | None = typer.Option(
        None,
        "--prometheus-url",
        metavar="URL",
        help="Prometheus to rebuild the traffic from (default: $PROMETHEUS_URL).",
    ),
    window: float = duration_option(
        86400.0, "--window", help="How much recent traffic to rebuild from Prometheus when no --trace is given."
    ),
    end: str | None = typer.Option(
        None,
        "--end",
        metavar="TIME",
        help="When the window rebuilt from Prometheus ends, an ISO 8601 time such as 2026-11-30T06:00Z (UTC without "
        "an offset; seconds are dropped): the same window can be tuned on again. Default: now.",
    ),
    slo_attainment: float | None = typer.Option(
        None, "--slo-attainment", help="Every model's target (0.5-0.999). Default: what the VariantAutoscalings say."
    ),
    duration: float | None = duration_option(
        None, "--duration", help="Replay only the log's first part this long (default: all of it)."
    ),
    config_namespace: str = config_namespace_option(),
    dry_run: bool = typer.Option(False, "--dry-run", help="Replay and choose, write nothing."),
    seed: int = typer.Option(0, min=0, help="Seed of the replay's random draws."),
    track: bool = track_option(),
    as_json: bool = json_option(),
) -> None:
    """Choose per model the cheapest sizing setting that meets its SLO attainment target on a window's traffic.

    Replays the attainment loop, pinned percentiles and static-peak floors on the request log (or on the last
    window of traffic rebuilt from Prometheus) and writes the choice (annotations and modelplane.io/tuned, and
    status.tuning) on each model's VariantAutoscalings. Costs within 10 % of the cheapest that met the target count
    as equal, and of those the one attaining least is chosen; a model whose target no candidate met gets the
    closest, and the output says so. Exit codes: 0 every choice written; 2 could not run,
    with one line on stderr; 3 degraded: a write failed.\f

    Args:
        cluster_option: ``--cluster``: Manifests directory/file (or kubeconfig:PATH): the VariantAutoscalings to tune.
        trace: ``--trace``: The window's request log (trace CSV: timestamp, prompt tokens, output tokens). Without it,
            the last --window of traffic is rebuilt from Prometheus.
        prometheus_url: ``--prometheus-url``: Prometheus to rebuild the traffic from (default: $PROMETHEUS_URL).
        window: ``--window``: How much recent traffic to rebuild from Prometheus when no --trace is given. In seconds
            (the option reads 90s, 5m, 1d; default 1d).
        end: ``--end``: When the window rebuilt from Prometheus ends, an ISO 8601 time such as 2026-11-30T06:00Z (UTC
            without an offset; seconds are dropped): the same window can be tuned on again. Default: now.
        slo_attainment: ``--slo-attainment``: Every model's target (0.5-0.999). Default: what the VariantAutoscalings
            say.
        duration: ``--duration``: Replay only the log's first part this long (default: all of it). In seconds (the
            option reads 90s, 5m, 1d).
        config_namespace: ``--config-namespace``: Namespace of the WVA ConfigMaps.
        dry_run: ``--dry-run``: Replay and choose, write nothing.
        seed: ``--seed``: Seed of the replay's random draws.
        track: ``--track``: Record the run in Prefect where it needs none (:func:`flows.cli.common.tracking_wanted`).
        as_json: ``--json``: Print a JSON list instead of a table.

    Raises:
        CannotRun: The description or request log is missing or malformed, there is neither a request log nor a
            Prometheus URL, the window is not whole minutes, the end is not a time, is later than now or comes with
            a request log, or the attainment is out of range (printed as one ``error:`` line, exit 2).
    """
    from engine.optimize.spec import SpecError
    from engine.simulate.rebuild import TRAFFIC_STEP_S, TrafficError
    from engine.simulate.trace import TraceError
    from engine.slo.target import format_window
    from tasks.clients.metrics.snapshot import MetricsUnavailable
    from tasks.simulate import InvalidConfiguration

    with cli_errors():
        cluster = manifests_path(cluster_option)
        if trace is not None:
            _check_simulation_input([], None, trace, None)
        elif not (prometheus_url or os.environ.get("PROMETHEUS_URL")):
            raise CannotRun("no traffic to replay: give --trace (a request log) or --prometheus-url ($PROMETHEUS_URL)")
        elif window < TRAFFIC_STEP_S or window % TRAFFIC_STEP_S:
            raise CannotRun(
                f"--window {format_window(window)}: whole minutes, at least 1m (Prometheus is read by the minute)"
            )
        window_end = _window_end(end, trace, format_window(window))
        _check_slo_attainment(slo_attainment)
    report = run_flow(
        "flows.tune:tune",
        track=track,
        cannot_run=(TraceError, SpecError, TrafficError, MetricsUnavailable, InvalidConfiguration),
        cluster=str(cluster),
        trace=None if trace is None else str(trace),
        prometheus_url=prometheus_url,
        window=format_window(window),
        end=window_end,
        config_namespace=config_namespace,
        slo_attainment=slo_attainment,
        duration_s=duration,
        dry_run=dry_run,
        seed=seed,
    )
    problems = [f"not written: {failure}" for failure in report.failed]
    notes = [f"{c.model}: no candidate met {c.goal:.1%}; the closest was chosen" for c in report.choices if not c.met]
    notes += [f"{c.model}: target {c.target:.1%} {c.out_of_reach}" for c in report.choices if c.out_of_reach]
    if as_json:
        print_json(report.as_json())
        exit_with_outcome(problems)
    rows = [
        (
            c.model,
            f"{c.target:.1%}",
            r.candidate.name,
            f"{r.attainment:.1%}",
            f"{r.cost:,.1f}",
            "<- chosen" if r is c.chosen else "",
        )
        for c in report.choices
        for r in c.rows
    ]
    columns = ("model", "target", "candidate", "attainment", "cost/replay", "")
    replayed = trace.name if trace is not None else f"the last {format_window(window)} of traffic"
    console.print(table_of(f"Candidates replayed on {replayed}", columns, rows, right=("attainment", "cost/replay")))
    for line in notes:
        console.print(line, highlight=False)
    console.print("dry run: nothing was written" if dry_run else f"written: {len(report.written)} VariantAutoscalings")
    exit_with_outcome(problems)
