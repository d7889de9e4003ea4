"""``modelplane calibrate --from-benchmark FILE``: performance profiles from benchmark results.

Not a command of its own: the body of ``calibrate`` when it is given benchmark files.  It reads the files
(tasks/benchmarks.py), fits one profile per configuration (engine/simulate/benchmarks.py) and prints them,
or, with ``--apply NAMESPACE/NAME``, offers the one selected configuration's profile to those
VariantAutoscalings as a metrics calibration does (flows/calibrate.py ``apply_profile``).  No Prefect run:
it needs no server and no cluster unless it applies.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from engine.simulate.benchmarks import BenchmarkPoint, fit_benchmark, group_points
from engine.simulate.calibrate import ProfileFit, Unidentifiable
from flows.cli.common import console, exit_with_outcome, table_of
from flows.cli.output import print_json
from flows.exitcodes import CannotRun, cli_errors
from tasks.benchmarks import BenchmarkFormatError, read_benchmark_files

PARAMETERS = ("alpha", "beta", "gamma", "delta")


def _selected(files: list[pathlib.Path], config: str | None) -> tuple[dict[str, list[BenchmarkPoint]], dict[str, str]]:
    """Points per configuration (only those whose name contains ``config``) and each configuration's format."""
    try:
        read = read_benchmark_files(files)
    except BenchmarkFormatError as exc:
        raise CannotRun(str(exc)) from None
    formats = {point.config: name for name, point in read}
    points = [p for _, p in read if config is None or config.lower() in p.config.lower()]
    if not points:
        what = f" whose configuration contains {config!r}" if config else ""
        raise CannotRun(f"no benchmark points{what} in {', '.join(map(str, files))}")
    return group_points(points), formats


def _targets(apply: list[str]) -> list[tuple[str, str]]:
    targets = []
    for text in apply:
        namespace, _, name = text.partition("/")
        if not namespace or not name or "/" in name:
            raise CannotRun(f"--apply {text!r}: expected NAMESPACE/NAME of a VariantAutoscaling")
        targets.append((namespace, name))
    return targets


def _fit_json(
    config: str, fmt: str, points: list[BenchmarkPoint], fit: ProfileFit | None, why: str | None
) -> dict[str, Any]:
    shapes = sorted({(round(p.in_tokens), round(p.out_tokens)) for p in points})
    entry: dict[str, Any] = {"configuration": config, "format": fmt, "points": len(points), "tokenShapes": shapes}
    if fit is None:
        return entry | {"error": why}
    return entry | {
        "fit": {n: getattr(fit, n).as_dict() for n in PARAMETERS},
        "decodeFitError": round(fit.decode_rel_rmse, 6),
        "prefillFitError": round(fit.prefill_rel_rmse, 6),
        "undetermined": fit.undetermined,
        "perfParms": fit.perf_parms(),
        "notes": fit.notes,
    }


def calibrate_from_benchmarks(
    files: list[pathlib.Path],
    config: str | None,
    apply: list[str],
    cluster: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Fit, print, and (with ``apply``) offer the profile; exits 0, 2 (could not run) or 3 (some configuration unfit).

    Args:
        files: The benchmark result files (``--from-benchmark``).
        config: Only configurations whose name contains this (``--benchmark-config``), or None for all.
        apply: The VariantAutoscalings (``NAMESPACE/NAME``) to offer the fitted profile to (``--apply``); empty to only
            print.
        cluster: The cluster the VariantAutoscalings of ``apply`` live in, or None for the default.
        dry_run: Whether to fit and print without writing.
        as_json: Whether to print JSON instead of a table.

    Raises:
        CannotRun: ``apply`` is given and the selection holds not exactly one configuration, or it has no profile
            (printed as one ``error:`` line, exit 2).
    """
    with cli_errors():
        groups, formats = _selected(files, config)
        targets = _targets(apply)
        if targets and len(groups) != 1:
            raise CannotRun(
                f"--apply needs exactly one configuration, the selection has {len(groups)}: "
                "narrow it with --benchmark-config"
            )
    fits: dict[str, tuple[ProfileFit | None, str | None]] = {}
    for name, points in groups.items():
        try:
            fits[name] = (fit_benchmark(points), None)
        except Unidentifiable as exc:
            fits[name] = (None, str(exc))
    problems = [f"{name}: {why}" for name, (fit, why) in fits.items() if fit is None]
    if targets:
        fit, why = next(iter(fits.values()))
        if fit is None:
            with cli_errors():
                raise CannotRun(f"no profile to apply: {why}")
        from flows.calibrate import apply_profile

        with cli_errors():
            report = apply_profile(fit, targets, cluster or "", dry_run)
        problems += [f"{r.namespace}/{r.name}: {r.error}" for r in report.rows if r.error]
        if as_json:
            print_json(report.as_json())
        else:
            for row in report.rows:
                written = "written" if row.spec_written else "not written"
                console.print(f"{row.namespace}/{row.name}: {row.reason} ({written}): {row.message}", highlight=False)
            if dry_run:
                console.print("dry run: nothing was written")
        exit_with_outcome(problems)
    if as_json:
        entries = [_fit_json(n, formats[n], groups[n], *fits[n]) for n in groups]
        print_json(entries)
        exit_with_outcome(problems)
    _print_table(groups, fits)
    exit_with_outcome(problems)


def _cell(fit: ProfileFit, name: str) -> str:
    estimate = getattr(fit, name)
    mark = " (undetermined)" if name in fit.undetermined else ""
    return f"{estimate.value:.4g} [{estimate.low:.4g}, {estimate.high:.4g}]{mark}"


def _print_table(
    groups: dict[str, list[BenchmarkPoint]], fits: dict[str, tuple[ProfileFit | None, str | None]]
) -> None:
    rows = []
    for name, points in groups.items():
        fit, _ = fits[name]
        shapes = ", ".join(f"{i}/{o}" for i, o in sorted({(round(p.in_tokens), round(p.out_tokens)) for p in points}))
        values = [_cell(fit, n) if fit else "-" for n in PARAMETERS]
        rows.append((name, len(points), shapes, *values))
    columns = ("configuration", "points", "tokens in/out", *PARAMETERS)
    console.print(table_of("Profiles fitted from benchmark results (95% intervals)", columns, rows))
    for name, (fit, why) in fits.items():
        if fit is None:
            console.print(f"{name}: no profile: {why}", highlight=False)
            continue
        console.print(
            f"{name}: perfParms (decode fit error {fit.decode_rel_rmse:.1%}, prefill {fit.prefill_rel_rmse:.1%})",
            highlight=False,
        )
        console.print(yaml.safe_dump({"perfParms": fit.perf_parms()}, sort_keys=False).rstrip(), highlight=False)
        for reason in fit.undetermined.values():
            console.print(f"  undetermined: {reason}", highlight=False)
        for note in fit.notes:
            console.print(f"  note: {note}", highlight=False)
