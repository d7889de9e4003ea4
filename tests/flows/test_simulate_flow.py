"""``modelplane simulate`` on the example cluster with a slice of the Azure conversation trace: the table,
the JSON summary, the PNG plots, the HTML report and the Prefect artifact; bad input exits with one line."""

from __future__ import annotations

import json
import pathlib

from typer.testing import CliRunner

from engine.simulate.policies import POLICIES
from flows.cli import app
from flows.simulate import simulate
from tests.flows.artifacts import newest_artifact

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "examples"
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
    oracle = [p for p in summary["frontier"] if p["policy"] == "oracle"]
    assert len(oracle) == 6 and {p["policy"] for p in summary["frontier"]} == set(POLICIES)
    assert {p["setting"] for p in summary["frontier"] if p["policy"] == "modelplane"} >= {
        "as configured",
        "ttft-percentile 95",
    }
    ratios = {p["policy"]: p["cost_vs_oracle"] for p in summary["policies"]}
    assert all(r is None or r > 0.5 for r in ratios.values()) and 0.999 <= ratios["oracle"] < 1.3
    assert "cost / oracle at equal attainment" in result.stdout and "attainment ceiling" in result.stdout


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

    wave = CliRunner().invoke(
        app, ["simulate", "--cluster", str(EXAMPLES), "--trace", str(TRACE), "--wave-floor", "1.5", "--no-frontier"]
    )
    assert wave.exit_code == 2 and "wave_floor" in wave.output and "Traceback" not in wave.output


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
