"""``modelplane simulate`` on the example cluster with a slice of the Azure conversation trace: the table,
the JSON summary, the PNG plots, the HTML report and the Prefect artifact; bad input exits with one line."""

from __future__ import annotations

import json
import math
import pathlib
import re
import shlex
import shutil

import pytest
from typer.testing import CliRunner

from engine.simulate.policies import POLICIES
from flows.cli import app
from flows.cli.output import print_json
from flows.simulate import simulate
from tasks.simulate_plots import policy_label
from tests.flows.artifacts import newest_artifact

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "examples"
SIMULATION = REPO / "deployments" / "simulation"
DOCS = REPO / "docs" / "simulate.md"
TRACE = REPO / "deployments" / "traces" / "azure-conv-2023-20min.csv"
PNG = b"\x89PNG\r\n\x1a\n"


def test_cli_compares_every_policy_and_writes_the_report(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app,
        ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), "--duration", "300", "--output", str(out)],
        terminal_width=250,
    )
    assert result.exit_code == 0, result.output
    for policy in POLICIES:
        assert policy in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert [p["policy"] for p in summary["policies"]] == list(POLICIES)
    requests = summary["settings"]["requests"]
    assert requests > 1000  # ~5 minutes of the conversation trace
    for policy in summary["policies"]:
        assert policy["requests"] == requests
        assert 0.0 <= policy["slo_attainment"] <= 1.0 and policy["cost"] > 0
        assert set(policy["slo_attainment_by_model"]) == {
            "llm-serving/ibm/granite-13b",
            "llm-serving/meta/llama-3.1-8b",
        }
    static = next(p for p in summary["policies"] if p["policy"] == "static-peak")
    assert static["replica_changes"] == 0
    for name in ("frontier", "load_capacity", "replicas", "latency", "cost"):
        assert (out / f"{name}.png").read_bytes().startswith(PNG)
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5 and "static-peak" in html
    # What the numbers mean is on the page: targets, attainment and its ceiling, the cost unit, the oracle.
    assert "<td>500</td><td>24</td>" in html and "<td>800</td><td>40</td>" in html  # llama / granite TTFT, ITL targets
    assert "SLO attainment = the share of the trace" in html and "Attainment ceiling of this trace" in html
    assert "accelerator-hours x unit cost per accelerator-hour" in html and "A100 40" in html
    assert 0.9 < summary["attainment_ceiling"]["all"] <= 1.0
    # Every model's default 90 % target is within its ceiling on this slice: nothing is out of reach.
    assert set(summary["attainment_targets"].values()) == {0.9} and summary["attainment_allowed"] == 0.9
    assert "note:" not in result.stdout and "above its ceiling" not in html
    oracle = [p for p in summary["frontier"] if p["policy"] == "oracle"]
    assert len(oracle) == 6 and {p["policy"] for p in summary["frontier"]} == set(POLICIES)
    assert {p["setting"] for p in summary["frontier"] if p["policy"] == "modelplane"} >= {
        "as configured",
        "ttft-percentile 95",
    }
    ratios = {p["policy"]: p["cost_vs_oracle"] for p in summary["policies"]}
    assert all(r is None or r > 0.5 for r in ratios.values()) and 0.999 <= ratios["oracle"] < 1.3
    assert "cost / clairvoyant schedule at equal attainment" in html and "attainment ceiling" in result.stdout
    assert "clairvoyant schedule (oracle)" in html and "clairvoyant" in result.stdout and "unreachable" not in html
    # Static peak's headroom (up to +100 %) spans the attainments the reactive policies reach: no extrapolation.
    static_best = max(p["slo_attainment"] for p in summary["frontier"] if p["policy"] == "static-peak")
    reactive = [p["slo_attainment"] for p in summary["policies"] if p["policy"] not in ("static-peak", "oracle")]
    assert static_best >= max(reactive)


def test_flow_publishes_the_comparison_as_an_artifact(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    report = simulate(
        cluster=str(EXAMPLES),
        trace=str(TRACE),
        duration_s=120,
        policies=["modelplane", "static-peak"],
        frontier=False,
        output_dir=str(tmp_path / "r"),
    )
    assert [o.policy for o in report.outcomes] == ["modelplane", "static-peak"]

    report_artifact = newest_artifact("simulate-report")
    assert "| modelplane |" in report_artifact.data and "data:image/png;base64," in report_artifact.data
    assert "| setting | value |" in report_artifact.data and "| None |" not in report_artifact.data


def test_cli_bad_input_exits_with_one_line(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    missing = CliRunner().invoke(app, ["simulate", "--cluster", str(EXAMPLES), "--trace", str(tmp_path / "nope.csv")])
    assert missing.exit_code == 2
    assert "nope.csv does not exist" in missing.output and "Traceback" not in missing.output

    broken = tmp_path / "broken.csv"
    broken.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12,x\n")
    bad = CliRunner().invoke(app, ["simulate", "--cluster", str(EXAMPLES), "--trace", str(broken)])
    assert bad.exit_code == 2 and "row 2" in bad.output and "Traceback" not in bad.output

    policy = CliRunner().invoke(app, ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), "-p", "magic"])
    assert policy.exit_code == 2 and "unknown policy magic" in policy.output

    router = CliRunner().invoke(
        app, ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), "--router", "least-latncy"]
    )
    assert (
        router.exit_code == 2 and "unknown router 'least-latncy'; choose from auto, least-outstanding" in router.output
    )

    wave = CliRunner().invoke(
        app, ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), "--wave-floor", "1.5", "--no-frontier"]
    )
    assert wave.exit_code == 2 and "wave_floor" in wave.output and "Traceback" not in wave.output

    # Not finite: every request replayed at t=0 (exit 0), or numpy's message that names no option.
    for option, value, named in (("--compression", "inf", "compression"), ("--seed", "-1", "--seed")):
        refused = CliRunner().invoke(
            app, ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), option, value, "--no-frontier"]
        )
        assert refused.exit_code == 2 and named in refused.output and "Traceback" not in refused.output, option


def test_cli_wave_floor_gives_the_trace_a_days_shape(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    def requests(*extra: str) -> dict[str, object]:
        out = tmp_path / f"r{len(extra)}"
        args = ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), "--duration", "240", "-p", "static-peak"]
        result = CliRunner().invoke(app, [*args, "--no-frontier", "--output", str(out), *extra])
        assert result.exit_code == 0, result.output
        return json.loads((out / "summary.json").read_text())["settings"]

    recorded, shaped = requests(), requests("--wave-floor", "0.3")
    assert recorded["wave_floor"] == 1.0 and shaped["wave_floor"] == 0.3 and shaped["wave_period_s"] is None
    # Kept on average 0.3 + 0.7 / 2 = 65 % of the requests over one period (the slice).
    assert 0.55 * recorded["requests"] < shaped["requests"] < 0.75 * recorded["requests"]
    # The day's swing is what a load follower can save on: the bound falls with it.
    assert 0.0 < shaped["follower_bound"] < recorded["follower_bound"] <= 1.0


def test_cli_bursty_replays_a_named_variant_with_the_traces_requests(
    prefect_harness: None, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "bursty"
    args = ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), "--bursty", "tune-a", "-p", "static-peak"]
    result = CliRunner().invoke(app, [*args, "--no-frontier", "--output", str(out)])
    assert result.exit_code == 0, result.output
    settings = json.loads((out / "summary.json").read_text())["settings"]
    assert settings["bursty"] == "tune-a" and settings["requests"] == 8801
    burstiness = settings["burstiness"]
    assert burstiness["minutes"] == 57 and burstiness["minute_cv"] > 0.7 and burstiness["silent_minutes"] > 0
    assert burstiness["second_dispersion"] > 8

    # The bursty variants' long prompts put granite-13b's ceiling below a 90 % target: the command says so, and what
    # that leaves over all requests with each model at its target or ceiling.
    capped = CliRunner().invoke(app, [*args, "--slo-attainment", "0.9", "--output", str(out)], terminal_width=250)
    assert capped.exit_code == 0, capped.output
    summary = json.loads((out / "summary.json").read_text())
    granite, llama = (
        summary["attainment_ceiling"]["llm-serving/ibm/granite-13b"],
        summary["attainment_ceiling"]["llm-serving/meta/llama-3.1-8b"],
    )
    assert granite < 0.9 < llama and summary["attainment_targets"]["llm-serving/ibm/granite-13b"] == 0.9
    assert granite < summary["attainment_allowed"] < 0.9  # about half the requests each
    assert "note: llm-serving/ibm/granite-13b's target 90.0% is above its ceiling" in capped.stdout
    assert f"gives {summary['attainment_allowed']:.1%} over all requests" in capped.stdout
    assert "llama-3.1-8b's target" not in capped.stdout
    assert "granite-13b&#x27;s target 90.0% is above its ceiling" in (out / "report.html").read_text()

    unknown = CliRunner().invoke(app, [*args[:5], "--bursty", "tune-z"])
    assert unknown.exit_code == 2 and "unknown bursty variant 'tune-z'" in unknown.output
    mixed = CliRunner().invoke(app, [*args, "--rate-scale", "2", "--no-frontier", "--output", str(out)])
    assert mixed.exit_code == 2 and "rate_scale cannot be combined with burst" in mixed.output
    assert "Traceback" not in unknown.output + mixed.output


def test_same_inputs_and_seed_give_the_same_report_byte_for_byte(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    def run(name: str, seed: int) -> dict[str, bytes]:
        out = tmp_path / name
        result = CliRunner().invoke(
            app,
            [
                "simulate",
                "--cluster",
                str(EXAMPLES),
                "--trace",
                str(TRACE),
                "--duration",
                "180",
                "-p",
                "hpa",
                "-p",
                "static-peak",
                "-p",
                "oracle",
                "--seed",
                str(seed),
                "--output",
                str(out),
            ],
            terminal_width=250,
        )
        assert result.exit_code == 0, result.output
        return {f.name: f.read_bytes() for f in sorted(out.iterdir())}

    first, again, other = run("a", 0), run("b", 0), run("c", 7)
    assert set(first) == {
        "summary.json",
        "report.html",
        "frontier.png",
        "load_capacity.png",
        "replicas.png",
        "latency.png",
        "cost.png",
    }
    assert first == again
    assert first["summary.json"] != other["summary.json"]  # the seed splits the trace between the models differently


def docs_command_and_table() -> tuple[list[str], list[str]]:
    """The command docs/simulate.md shows for the benchmark's scenario and the table it says the command gives."""
    text = DOCS.read_text()
    block = text[text.index("<!-- simulate-cli:start -->") : text.index("<!-- simulate-cli:end -->")]
    command = re.search(r"```sh [^\n]*\n(modelplane simulate-policies .*)\n```", block)
    assert command is not None, "docs/simulate.md shows the command between the simulate-cli markers"
    return shlex.split(command.group(1))[1:], [line for line in block.splitlines() if line.startswith("| ")][1:]


def policy_rows(policies: list[dict[str, object]]) -> list[str]:
    """summary.json's policies as the docs' table rows: attainment, cost, cost / static peak, changes, unserved
    (each policy named as the reports name it)."""
    static = next(p for p in policies if p["policy"] == "static-peak")
    return [
        f"| {policy_label(str(p['policy']))} | {p['slo_attainment']:.1%} | {p['cost']:.1f} | {p['cost'] / static['cost']:.2f} | "  # type: ignore[operator]
        f"{p['replica_changes']} | {p['unserved_requests']} |"
        for p in policies
    ]


def test_the_docs_command_reproduces_the_docs_table(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    args, table = docs_command_and_table()
    assert "--start" in args and args[args.index("--start") + 1] == "static"
    args[args.index("-o") + 1] = str(tmp_path / "report")
    args = [str(REPO / a) if a.startswith("deployments/") else a for a in args]
    result = CliRunner().invoke(app, args, terminal_width=250)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["settings"]["start"] == "static"
    produced = policy_rows(summary["policies"])
    assert produced == table, "docs/simulate.md's table is not what its command gives; it gives:\n" + "\n".join(
        produced
    )


def test_the_benchmark_and_the_command_replay_one_scenario() -> None:
    """bench.simulate's simulation_scenario is what `modelplane simulate --start static` on deployments/simulation
    replays: the same requests, the same starting replicas, the same outcome."""
    from bench.simulate import simulation_scenario
    from engine.simulate.outcome import summarize_outcome
    from engine.simulate.policies import initial_replicas, run_policy
    from engine.simulate.records import SimConfig
    from flows.parameters import SIMULATE_INTERVAL_S, SIMULATE_STARTUP_DELAY_S, SYSTEM_NAMESPACE
    from tasks.replay import read_inputs

    shape = {"duration_s": 480.0, "seed": 1}
    flow = read_inputs.fn(
        str(SIMULATION),
        str(TRACE),
        SYSTEM_NAMESPACE,
        None,
        shape,
        SimConfig(interval_s=SIMULATE_INTERVAL_S, startup_delay_s=SIMULATE_STARTUP_DELAY_S, seed=1),
        kv_tokens_per_slot=2048,
        hpa_metric=None,
        hpa_target=None,
        sizing_ttft_scale=1.0,
        router="auto",
        oracle_curves=False,
        start="static",
    )
    bench = simulation_scenario(str(TRACE), **shape)  # type: ignore[arg-type]
    assert flow.start_from_static and bench.start_from_static
    assert initial_replicas(flow) == initial_replicas(bench)
    assert (flow.trace.arrival_s == bench.trace.arrival_s).all() and flow.trace.models == bench.trace.models
    for policy in ("modelplane", "wva-greedy"):
        a = summarize_outcome(policy, flow, run_policy(policy, flow))
        b = summarize_outcome(policy, bench, run_policy(policy, bench))
        assert a.as_json() == b.as_json()


def test_cli_start_chooses_where_reactive_policies_start(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    def replicas_changed(start: str) -> dict[str, object]:
        out = tmp_path / start
        args = [
            "simulate",
            "--cluster",
            str(SIMULATION),
            "--trace",
            str(TRACE),
            "--duration",
            "180",
            "-p",
            "modelplane",
        ]
        result = CliRunner().invoke(app, [*args, "--start", start, "--no-frontier", "--output", str(out)])
        assert result.exit_code == 0, result.output
        summary = json.loads((out / "summary.json").read_text())
        assert summary["settings"]["start"] == start
        return summary["policies"][0]

    cold, warm = replicas_changed("manifests"), replicas_changed("static")
    # From the manifests' 1-2 replicas the first minutes miss what static peak's allocation serves.
    assert warm["slo_attainment"] > cold["slo_attainment"] + 0.05  # type: ignore[operator]
    bad = CliRunner().invoke(app, ["simulate", "--cluster", str(SIMULATION), "--trace", str(TRACE), "--start", "300"])
    assert bad.exit_code == 2 and "--start '300': choose static or manifests" in bad.output


def test_frontier_curves_join_points_in_attainment_order() -> None:
    from engine.simulate.frontier import FrontierPoint, Limits
    from tasks.simulate_plots import frontier_curves

    # A knob whose costlier setting attains less (a scale-down window, a noisy replay): cost order would zigzag.
    points = [
        FrontierPoint("hpa", "as configured", 0.80, 100.0),
        FrontierPoint("hpa", "target 2", 0.90, 95.0),
        FrontierPoint("hpa", "target 6", 0.60, 70.0),
        FrontierPoint("oracle", "as configured", 0.92, 120.0),
    ]
    curves = frontier_curves(Limits({"all": 0.99}, points))
    assert curves["hpa"] == [(0.60, 70.0), (0.80, 100.0), (0.90, 95.0)]
    assert curves["oracle"] == [(0.92, 120.0)]


def test_the_latency_plot_says_which_requests_it_leaves_out() -> None:
    """Unserved requests have no latency: the plot's labels count them per model, the outcome records them."""
    from engine.simulate.outcome import summarize_outcome
    from engine.simulate.records import SimConfig
    from engine.simulate.replay import simulate as replay
    from engine.simulate.scenario import build_scenario
    from engine.simulate.trace import TraceShape
    from tasks.simulate import read_description, read_trace
    from tasks.simulate_plots import _latency_label

    description = read_description(str(SIMULATION), "modelplane-system")
    trace = read_trace(
        TRACE, TraceShape({"llm-serving/meta/llama-3.1-8b": 1.0, "llm-serving/ibm/granite-13b": 1.0}, duration_s=120.0)
    )
    scenario = build_scenario(description, trace, SimConfig(interval_s=60.0, startup_delay_s=120.0))
    granite = [v.key for v in scenario.variants if "granite" in v.key]
    start = {v.key: (0 if v.key in granite else 2) for v in scenario.variants}
    outcome = summarize_outcome("static", scenario, replay(scenario.variants, trace, scenario.config, start))
    dropped = int((trace.model_index == trace.models.index("llm-serving/ibm/granite-13b")).sum())
    assert outcome.unserved_by_model == {"llm-serving/ibm/granite-13b": dropped, "llm-serving/meta/llama-3.1-8b": 0}
    assert _latency_label(outcome, "llm-serving/ibm/granite-13b") == f"static\n{dropped} unserved"
    assert _latency_label(outcome, "llm-serving/meta/llama-3.1-8b") == "static"
    assert outcome.as_json()["unserved_by_model"]["llm-serving/ibm/granite-13b"] == dropped


def test_the_artifact_shows_settings_as_a_person_reads_them() -> None:
    """No Python reprs in the Prefect artifact: a list of mappings is JSON, a flag is yes/no, a pipe cannot break
    the table (unset settings are left out by markdown_report)."""
    from tasks.simulate import setting_text

    assert setting_text([{"metricName": "kv", "targetValue": 0.8}]) == '[{"metricName": "kv", "targetValue": 0.8}]'
    assert setting_text(True) == "yes" and setting_text(60.0) == "60.0"
    assert setting_text("a|b") == "a\\|b"


def test_cli_refuses_a_configuration_that_does_not_parse(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    """An inventory count of "zero" was left out (a replay on an unbounded inventory, no warning) and a cost of -40
    surfaced as "'A100' has no unit cost": simulate and tune refuse with the ConfigMap, key and reason, and simulate
    leaves no empty report folder behind (the folders it checked it could make were kept)."""
    cluster = tmp_path / "cluster"
    shutil.copytree(SIMULATION, cluster)
    config = cluster / "01-optimizer-config.yaml"
    original = config.read_text()
    cases = (
        ('  A100: "32"', '  A100: "zero"', "accelerator-inventory/A100: count must be an integer, got 'zero'"),
        ('"cost": "40.00"', '"cost": "-40"', "accelerator-unit-costs/A100: cost must be a finite non-negative number"),
    )
    for written, broken, reason in cases:
        assert written in original
        config.write_text(original.replace(written, broken))
        for command in (
            ["simulate", "-p", "static-peak", "--no-frontier", "--output", str(tmp_path / "new" / "report")],
            ["tune-sizing", "--dry-run"],
        ):
            result = CliRunner().invoke(
                app, [*command, "--cluster", str(cluster), "--trace", str(TRACE), "--duration", "60"]
            )
            assert result.exit_code == 2, result.output
            assert f"invalid configuration (ConfigMaps in modelplane-system): {reason}" in result.output
            assert "Traceback" not in result.output and "SLO attainment" not in result.output
            assert not (tmp_path / "new").exists()


def test_cli_checks_the_output_directory_before_any_replay(
    prefect_harness: None, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file in the way of the report was found only after every replay, as a FileExistsError."""
    import flows.simulate

    def no_replay(*args: object, **kwargs: object) -> None:
        raise AssertionError("a replay ran before the output directory was checked")

    monkeypatch.setattr(flows.simulate, "simulate_policy", no_replay)
    in_the_way = tmp_path / "report"
    in_the_way.write_text("not a directory")
    args = ["simulate", "--cluster", str(SIMULATION), "--trace", str(TRACE), "--duration", "60", "-p", "static-peak"]
    result = CliRunner().invoke(app, [*args, "--output", str(in_the_way)])
    assert result.exit_code == 2, result.output
    assert f"output directory {in_the_way} exists and is not a directory" in result.output
    assert "Traceback" not in result.output and in_the_way.read_text() == "not a directory"
    result = CliRunner().invoke(app, [*args, "--output", "/proc/modelplane-report"])
    assert result.exit_code == 2 and "output directory /proc/modelplane-report cannot be made" in result.output


def test_a_model_without_requests_has_no_attainment_not_nan(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    """A share so small that no request goes to granite: its attainment, latency and ceiling are null in the JSON
    (NaN was written, which no JSON reader accepts) and "-" in the table ("nan%")."""
    granite, llama = "llm-serving/ibm/granite-13b", "llm-serving/meta/llama-3.1-8b"
    args = ["simulate", "--cluster", str(SIMULATION), "--trace", str(TRACE), "--duration", "60", "-p", "static-peak"]
    args += ["--model-share", f"{llama}=1", "--model-share", f"{granite}=1e-12"]

    def strict(text: str) -> dict[str, object]:
        def refuse(constant: str) -> None:
            raise AssertionError(f"{constant} in the JSON")

        return dict(json.loads(text, parse_constant=refuse))

    printed = CliRunner().invoke(app, [*args, "--json", "--output", str(tmp_path / "json")])
    assert printed.exit_code == 0, printed.output
    document = strict(printed.stdout)
    policy = document["policies"][0]  # type: ignore[index]
    assert policy["slo_attainment_by_model"][granite] is None and policy["slo_attainment_by_model"][llama] > 0
    assert set(policy["latency_ms"][granite].values()) == {None}
    assert document["attainment_ceiling"][granite] is None  # type: ignore[index]
    strict((tmp_path / "json" / "summary.json").read_text())

    table = CliRunner().invoke(app, [*args, "--no-frontier", "--output", str(tmp_path / "table")], terminal_width=250)
    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if "static-peak" in line)
    assert "nan" not in table.stdout and [cell.strip() for cell in row.split("│")][3] == "-"


def test_every_json_output_writes_a_number_json_cannot_hold_as_null(capsys: pytest.CaptureFixture[str]) -> None:
    """Python's NaN and Infinity tokens are refused by every other JSON reader (node's JSON.parse, jq)."""
    print_json({"slo_attainment": math.nan, "rows": [1.5, (math.inf, -math.inf)], "when": pathlib.Path("/x")})
    assert json.loads(capsys.readouterr().out) == {"slo_attainment": None, "rows": [1.5, [None, None]], "when": "/x"}


def test_cli_refuses_a_share_that_is_not_a_finite_weight(prefect_harness: None) -> None:
    """--model-share M=inf made numpy's "Probabilities contain NaN" traceback."""
    llama = "llm-serving/meta/llama-3.1-8b"
    for weight in ("inf", "nan", "0"):
        result = CliRunner().invoke(
            app,
            ["simulate", "--cluster", str(SIMULATION), "--trace", str(TRACE), "--model-share", f"{llama}={weight}"],
        )
        assert result.exit_code == 2, result.output
        assert f"--model-share: '{llama}={weight}': the weight must be a finite number above 0" in result.output
        assert "Traceback" not in result.output


def test_cli_names_what_a_trace_is_when_it_is_no_file(prefect_harness: None, tmp_path: pathlib.Path) -> None:
    """A directory given as --trace was reported as "does not exist"; a CSV field past csv's limit was a traceback."""
    result = CliRunner().invoke(app, ["simulate", "--cluster", str(SIMULATION), "--trace", str(tmp_path)])
    assert result.exit_code == 2 and f"trace file {tmp_path} is a directory, not a regular file" in result.output
    huge = tmp_path / "huge.csv"
    huge.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1," + "9" * 200_000 + "\n")
    for command in ("simulate", "tune-sizing"):
        result = CliRunner().invoke(app, [command, "--cluster", str(SIMULATION), "--trace", str(huge)])
        assert result.exit_code == 2, result.output
        assert f"trace file {huge}, line 2: field larger than field limit (131072)" in result.output
        assert "Traceback" not in result.output


def test_links_left_in_the_output_folder_are_replaced_never_followed(
    prefect_harness: None, tmp_path: pathlib.Path
) -> None:
    """A reused report folder holding links at the report's file names (another run's, or planted): the links are
    replaced by the report's files and their targets are left alone. Before, the run wrote through them: a file
    outside the folder overwritten with summary.json, and report.html and a plot created beside it."""
    out, outside = tmp_path / "report", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "precious.txt").write_text("ORIGINAL")
    (out / "summary.json").symlink_to(outside / "precious.txt")
    (out / "report.html").symlink_to(outside / "new.html")
    (out / "cost.png").symlink_to(outside / "plot.png")
    args = ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), "--duration", "120", "--output", str(out)]
    result = CliRunner().invoke(app, [*args, "--policy", "static-peak", "--no-frontier"], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "ORIGINAL"
    assert not any(p.is_symlink() for p in out.iterdir())
    assert json.loads((out / "summary.json").read_text())["policies"][0]["policy"] == "static-peak"
    assert (out / "cost.png").read_bytes().startswith(PNG) and "static-peak" in (out / "report.html").read_text()
