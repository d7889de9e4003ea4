"""The optimize flow on the local backend: the bundled example cluster and metrics file, as the README's
main-job command runs it, and the CLI's JSON output for CI previews."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.optimize import optimize


def documents(cluster: pathlib.Path) -> list[dict[str, Any]]:
    return [d for f in sorted(cluster.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def by_kind(cluster: pathlib.Path, kind: str) -> dict[str, dict[str, Any]]:
    """The objects of ``kind`` by name (documents without a mapping ``metadata`` and a name left out)."""
    return {
        d["metadata"]["name"]: d
        for d in documents(cluster)
        if isinstance(d, dict)
        and d.get("kind") == kind
        and isinstance(d.get("metadata"), dict)
        and isinstance(d["metadata"].get("name"), str)
    }


def test_example_cluster_cycle_writes_status_and_scales(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    before = by_kind(example_cluster, "Deployment")
    report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))
    variants = by_kind(example_cluster, "VariantAutoscaling")
    assert len(variants) == 4
    for name, va in variants.items():
        status = va["status"]
        assert status["desiredOptimizedAlloc"]["numReplicas"] >= 1, name
        assert status["desiredOptimizedAlloc"]["accelerator"] == va["spec"]["accelerator"]
        assert status["actuation"] == {"applied": True}
        types = {c["type"]: c for c in status["conditions"]}
        assert types["MetricsAvailable"]["status"] == "True"
        assert types["OptimizationReady"]["status"] == "True"
        assert types["OptimizationReady"]["reason"] in (
            "OptimizationSucceeded",
            "SaturationOnlyMode",
            "SaturationSafetyOverride",
        )
    deployments = by_kind(example_cluster, "Deployment")
    rows = {r.name: r for r in report.rows}
    for name, va in variants.items():
        target = va["spec"]["scaleTargetRef"]["name"]
        assert (
            deployments[target]["spec"]["replicas"]
            == va["status"]["desiredOptimizedAlloc"]["numReplicas"]
            == rows[name].desired
        )
        assert rows[name].current == before[target]["spec"]["replicas"]
    # Llama's 20 req/s: H100 serves ~7.9 req/s per replica within the SLO at 75/h, A100 ~1.2 at 40/h.
    assert variants["llama-3-1-8b-h100"]["status"]["desiredOptimizedAlloc"]["numReplicas"] == 3
    # The Kthena binding: 12 waiting on one pod against a target of 5 -> 3 replicas, window state persisted.
    binding = by_kind(example_cluster, "AutoscalingPolicyBinding")["qwen2-5-7b-instruct"]
    assert deployments["qwen2-5-7b-instruct"]["spec"]["replicas"] == 3
    assert binding["status"]["history"][-1]["recommended"] == 3 and binding["status"]["desiredReplicas"] == 3
    events = list(yaml.safe_load_all((example_cluster / ".modelplane-events.yaml").read_text()))
    assert any(
        e and e["reason"] == "DesiredReplicasChanged" and e["involvedObject"]["name"] == "llama-3-1-8b-h100"
        for e in events
    )


def test_an_unchanged_cluster_costs_no_writes(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))  # scales some targets
    second = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))  # records the new currentAlloc
    assert not any(w.scaled for w in second.writes)
    files = {f.name: f.read_text() for f in example_cluster.iterdir() if f.is_file() and not f.name.startswith(".")}
    history = len(by_kind(example_cluster, "AutoscalingPolicyBinding")["qwen2-5-7b-instruct"]["status"]["history"])
    third = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))
    # Nothing changed but the clock: no VariantAutoscaling status write (heartbeat not due), no scale,
    # no Event. The Kthena binding records each evaluation in its window history, by design.
    assert not any(w.scaled or w.status_written or w.event for w in third.writes)
    after = {f.name: f.read_text() for f in example_cluster.iterdir() if f.is_file() and not f.name.startswith(".")}
    assert {k: v for k, v in after.items() if k != "20-kthena.yaml"} == {
        k: v for k, v in files.items() if k != "20-kthena.yaml"
    }
    binding = by_kind(example_cluster, "AutoscalingPolicyBinding")["qwen2-5-7b-instruct"]
    assert len(binding["status"]["history"]) == history + 1


def test_missing_metrics_file_model_holds(
    prefect_harness: None, example_cluster: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text("models: []\n")
    before = {n: d["spec"]["replicas"] for n, d in by_kind(example_cluster, "Deployment").items()}
    optimize(cluster=str(example_cluster), metrics_file=str(metrics))
    after = {n: d["spec"]["replicas"] for n, d in by_kind(example_cluster, "Deployment").items()}
    assert after == before
    for va in by_kind(example_cluster, "VariantAutoscaling").values():
        metrics_condition = next(c for c in va["status"]["conditions"] if c["type"] == "MetricsAvailable")
        assert metrics_condition["status"] == "False" and metrics_condition["reason"] == "MetricsUnavailable"
        assert va["status"]["actuation"] == {"applied": False}  # a hold applies nothing


def test_malformed_metrics_file_is_reported_and_holds(
    prefect_harness: None, example_cluster: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text("models:\n  - model: m\n    namespace: n\n    arrivalRate: lots\n")
    report = optimize(cluster=str(example_cluster), metrics_file=str(metrics))
    assert report.metrics_error and "arrivalRate" in report.metrics_error
    assert all(row.desired == row.current for row in report.rows if row.kind == "VariantAutoscaling")


def test_cli_json_preview_on_a_snapshot_file(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """CI previews allocation changes on a single-file snapshot (`kubectl get ... -o yaml` style)."""
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(
        "---\n".join((example_cluster / f).read_text() for f in sorted(p.name for p in example_cluster.glob("*.yaml")))
    )
    pristine = snapshot.read_text()
    result = CliRunner().invoke(
        app, ["optimize", "--cluster", str(snapshot), "--metrics", str(example_metrics), "--json", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout[result.stdout.index("[") :])
    assert {"namespace", "name", "accelerator", "current", "desired", "reason"} <= set(rows[0])
    names = {r["name"] for r in rows}
    assert {"llama-3-1-8b-a100", "llama-3-1-8b-h100", "granite-13b-a100", "granite-13b-l40s"} <= names
    assert snapshot.read_text() == pristine  # --dry-run wrote nothing


def test_cli_table(prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path) -> None:
    result = CliRunner().invoke(app, ["optimize", "--cluster", str(example_cluster), "--metrics", str(example_metrics)])
    assert result.exit_code == 0, result.output
    assert "Modelplane allocation" in result.stdout and "llama-3-1-8b-h100" in result.stdout
    assert "4 variants:" in result.stdout


def test_cli_degraded_cycle_says_so_and_exits_3(
    prefect_harness: None, example_cluster: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMETHEUS_URL", raising=False)
    result = CliRunner().invoke(app, ["optimize", "--cluster", str(example_cluster)], terminal_width=250)
    assert result.exit_code == 3, result.output
    summary = " ".join(result.stdout.split())
    assert "DEGRADED: metrics unavailable" in summary and "resources not ready" in summary
    result = CliRunner().invoke(app, ["optimize", "--cluster", str(example_cluster), "--json", "--dry-run"])
    assert result.exit_code == 3


def test_cli_prints_names_and_errors_as_written_not_as_rich_markup(
    prefect_harness: None, example_cluster: pathlib.Path
) -> None:
    """A modelID or a Prometheus URL holding "[/x]" ended the command in rich's MarkupError traceback, exit 1."""
    manifest = example_cluster / "11-granite-13b.yaml"
    manifest.write_text(manifest.read_text().replace("modelID: ibm/granite-13b", 'modelID: "ibm/[/x]granite"'))
    url = "http://127.0.0.1:1/[/bold]"
    args = ["optimize", "--cluster", str(example_cluster), "--prometheus-url", url, "--dry-run"]
    result = CliRunner().invoke(app, args, terminal_width=250)
    assert result.exit_code == 3, result.output
    assert "ibm/[/x]granite" in result.stdout and f"metrics unavailable: Prometheus at {url}" in result.stderr
    assert "Traceback" not in result.output


def test_namespace_selector_scopes_the_cycle(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    none = optimize(
        cluster=str(example_cluster), metrics_file=str(example_metrics), namespace_selector="team=nobody", dry_run=True
    )
    assert none.rows == []
    some = optimize(
        cluster=str(example_cluster),
        metrics_file=str(example_metrics),
        namespace_selector="app.kubernetes.io/part-of=modelplane",
        dry_run=True,
    )
    assert {r.namespace for r in some.rows} == {"llm-serving"} and len(some.rows) == 5
    both = optimize(
        cluster=str(example_cluster),
        metrics_file=str(example_metrics),
        namespaces=["other"],
        namespace_selector="app.kubernetes.io/part-of=modelplane",
        dry_run=True,
    )
    assert both.rows == []


TABLE_TEXT_WIDTH = 100
"""Characters a table artifact's widest row may take (each column as wide as its widest cell or header): what the
Prefect UI's artifact pane shows without a horizontal scroll at a laptop's width."""


def text_width(table: list[dict[str, Any]]) -> int:
    """The characters of a table's widest row, each column as wide as its widest cell (or its header)."""
    return sum(max(len(str(column)), *(len(str(row[column])) for row in table)) for column in table[0])


def test_each_run_publishes_an_allocation_table_artifact(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    """Two table artifacts per run, each fitting the UI's pane: what every variant gets and why."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    state = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics), return_state=True)
    flow_run_id = state.state_details.flow_run_id

    async def artifacts(key: str) -> list:
        async with get_client() as client:
            found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
            return [a for a in found if a.flow_run_id == flow_run_id]

    (artifact,) = asyncio.run(artifacts("optimize-allocation"))
    assert artifact.type == "table" and "4 variants" in artifact.description
    table = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    assert {row["variant"] for row in table} >= {
        "llama-3-1-8b-a100",
        "llama-3-1-8b-h100",
        "granite-13b-a100",
        "granite-13b-l40s",
    }
    assert set(table[0]) == {"namespace", "variant", "accelerator", "replicas", "cost/h"}
    h100 = next(row for row in table if row["variant"] == "llama-3-1-8b-h100")
    assert h100["replicas"] == "1 → 3" and h100["cost/h"] == "225.00", h100
    (why,) = asyncio.run(artifacts("optimize-reasons"))
    reasons = json.loads(why.data) if isinstance(why.data, str) else why.data
    assert set(reasons[0]) == {"variant", "model", "reason"} and len(reasons) == len(table)
    assert {row["model"] for row in reasons} >= {"ibm/granite-13b", "meta/llama-3.1-8b"}
    for rows in (table, reasons):
        assert text_width(rows) <= TABLE_TEXT_WIDTH, rows


def test_scale_down_window_state_lives_on_the_resource(
    prefect_harness: None, example_cluster: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A scale-down inside the stabilization window is held and its state written as an annotation, so the
    next run (a fresh process) continues the same window; without a window it scales down and clears it."""
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text(
        "models:\n  - model: ibm/granite-13b\n    namespace: llm-serving\n    arrivalRate: 1\n    avgInputTokens: 1024\n"
        "    avgOutputTokens: 128\n    pods:\n      - {name: granite-13b-a100-66f7c-0, kvCacheUsage: 0.05, queueLength: 0}\n"
        "      - {name: granite-13b-a100-66f7c-1, kvCacheUsage: 0.05, queueLength: 0}\n"
        "      - {name: granite-13b-a100-66f7c-2, kvCacheUsage: 0.05, queueLength: 0}\n"
    )
    from tasks.clients.cluster import LocalCluster, ObjectRef

    LocalCluster(example_cluster).set_scale(ObjectRef("apps/v1", "Deployment", "granite-13b-a100", "llm-serving"), 3)
    held = optimize(
        cluster=str(example_cluster),
        metrics_file=str(quiet),
        namespaces=["llm-serving"],
        scale_down_stabilization_s=3600,
    )
    row = next(r for r in held.rows if r.name == "granite-13b-a100")
    assert row.current == 3 and row.desired == 3 and "stabilization window" in row.message
    va = by_kind(example_cluster, "VariantAutoscaling")["granite-13b-a100"]
    assert "modelplane.io/scale-down-pending" in va["metadata"]["annotations"]
    [held_event] = [e for e in LocalCluster(example_cluster).list("v1", "Event") if e["reason"] == "ScaleDownHeld"]
    assert held_event["involvedObject"]["name"] == "granite-13b-a100" and held_event["type"] == "Normal"
    assert held_event["message"].startswith("Scale-down from 3 to ") and "stabilization window" in held_event["message"]
    released = optimize(cluster=str(example_cluster), metrics_file=str(quiet), namespaces=["llm-serving"])
    row = next(r for r in released.rows if r.name == "granite-13b-a100")
    assert row.desired < 3
    va = by_kind(example_cluster, "VariantAutoscaling")["granite-13b-a100"]
    assert "modelplane.io/scale-down-pending" not in (va["metadata"].get("annotations") or {})


def test_binding_rows_show_the_model_and_the_accelerator(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    """Issue 22: a binding row showed the policy's name under "model" and no accelerator. The model comes
    from the target Deployment's llm-d label, the accelerator from the GPU its pods request."""
    report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics), dry_run=True)
    (row,) = [r for r in report.rows if r.kind == "AutoscalingPolicyBinding"]
    assert row.name == "qwen2-5-7b-instruct/qwen2-5-7b-instruct"
    assert (row.model, row.accelerator) == ("qwen-qwen2.5-7b-instruct", "1x nvidia.com/gpu")
    result = CliRunner().invoke(
        app, ["optimize", "--cluster", str(example_cluster), "--metrics", str(example_metrics), "--dry-run", "--json"]
    )
    rows = [r for r in json.loads(result.stdout) if r["kind"] == "AutoscalingPolicyBinding"]
    assert (rows[0]["model"], rows[0]["accelerator"]) == ("qwen-qwen2.5-7b-instruct", "1x nvidia.com/gpu")


def test_status_slo_shows_the_attainment_from_the_metrics_files_histograms(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    """The example metrics file carries Llama's latency histograms (not Granite's): status.slo on every variant."""
    optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))
    variants = by_kind(example_cluster, "VariantAutoscaling")
    llama = variants["llama-3-1-8b-h100"]["status"]["slo"]
    # TTFT within 500 ms: 69,500 of 72,000; ITL within 24 ms: 3,000 + 68,500 x 14/15 interpolated in 10-25 ms.
    assert llama["attained"] == pytest.approx(round((3000 + 68500 * 14 / 15) / 72000, 4))
    assert llama["target"] == 0.9 and llama["window"] == "1h" and llama["requests"] == 72000
    assert llama["errorBudgetRemaining"] == pytest.approx(1 - (1 - llama["attained"]) / 0.1, abs=1e-3)
    assert llama["message"] == (
        "target 0.9 from service class Premium; ITL target 24 ms lies between buckets 10 ms and 25 ms: interpolated"
    )
    assert variants["llama-3-1-8b-a100"]["status"]["slo"]["attained"] == llama["attained"]  # one per model
    granite = variants["granite-13b-a100"]["status"]["slo"]
    assert "attained" not in granite and "errorBudgetRemaining" not in granite
    assert granite["message"].startswith("attainment unknown: no latency histograms for ibm/granite-13b")
    assert granite["target"] == 0.9 and granite["window"] == "1h"


def _write_status(cluster: pathlib.Path, kind: str, status: object) -> int:
    """Set ``status`` on every object of ``kind`` in the cluster's files; how many were set."""
    count = 0
    for path in sorted(cluster.glob("*.yaml")):
        docs = list(yaml.safe_load_all(path.read_text()))
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == kind:
                doc["status"] = status
                count += 1
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return count


@pytest.mark.parametrize(
    ("variant_status", "binding_status"),
    [
        pytest.param("broken", [1, 2], id="no-mapping"),
        pytest.param(
            {"slo": "broken", "conditions": 5, "desiredOptimizedAlloc": "x"},
            {"history": [5], "panicModeEnd": "soon", "zeroSince": 5, "conditions": [5]},
            id="parts-no-mapping",
        ),
    ],
)
def test_a_status_of_any_shape_is_rewritten_by_the_cycle(
    prefect_harness: None,
    example_cluster: pathlib.Path,
    example_metrics: pathlib.Path,
    variant_status: object,
    binding_status: object,
) -> None:
    """A status someone else wrote (the local backend keeps what a file says) is replaced by the cycle's, and the
    decisions are those made from no status at all: it neither fails the run nor steers a scale."""
    assert _write_status(example_cluster, "VariantAutoscaling", variant_status) == 4
    assert _write_status(example_cluster, "AutoscalingPolicyBinding", binding_status) == 1
    report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))
    assert not report.degraded, report.degraded
    variants = by_kind(example_cluster, "VariantAutoscaling")
    assert variants["llama-3-1-8b-h100"]["status"]["desiredOptimizedAlloc"]["numReplicas"] == 3
    for name, va in variants.items():
        assert {c["type"] for c in va["status"]["conditions"]} == {"MetricsAvailable", "OptimizationReady"}, name
        assert isinstance(va["status"]["slo"], dict) and va["status"]["slo"]["target"] == 0.9, name
    binding = by_kind(example_cluster, "AutoscalingPolicyBinding")["qwen2-5-7b-instruct"]["status"]
    assert [h["recommended"] for h in binding["history"]] == [3] and binding["desiredReplicas"] == 3
    assert binding.get("panicModeEnd") != "soon" and "zeroSince" not in binding  # replaced, not carried
    assert all(isinstance(c, dict) for c in binding["conditions"])


def _edit(cluster: pathlib.Path, kind: str, name: str, edit: Any) -> None:
    """Apply ``edit`` to the object ``kind``/``name`` in the cluster's files."""
    for path in sorted(cluster.glob("*.yaml")):
        docs = list(yaml.safe_load_all(path.read_text()))
        hits = [d for d in docs if isinstance(d, dict) and d.get("kind") == kind and d["metadata"]["name"] == name]
        for doc in hits:
            edit(doc)
        if hits:
            path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _hold_deletion(doc: dict[str, Any]) -> None:
    doc["metadata"].update(finalizers=["example.com/hold"], deletionTimestamp="2026-01-01T00:00:00Z")


def test_a_variant_being_deleted_is_left_alone_and_the_others_are_optimized(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    """A VariantAutoscaling a finalizer holds in deletion is not optimized, as WVA filters its active ones: its
    target is not scaled and nothing is written to it. Before, the cycle scaled its Deployment 1 -> 3."""
    _edit(example_cluster, "VariantAutoscaling", "llama-3-1-8b-h100", _hold_deletion)
    replicas = by_kind(example_cluster, "Deployment")["llama-3-1-8b-h100"]["spec"]["replicas"]
    report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))
    assert not report.degraded, report.degraded
    variants = by_kind(example_cluster, "VariantAutoscaling")
    assert "status" not in variants["llama-3-1-8b-h100"] and variants["llama-3-1-8b-h100"]["metadata"]["finalizers"]
    assert by_kind(example_cluster, "Deployment")["llama-3-1-8b-h100"]["spec"]["replicas"] == replicas
    assert all("status" in va for name, va in variants.items() if name != "llama-3-1-8b-h100")
    assert {r.name for r in report.rows} == set(variants) - {"llama-3-1-8b-h100"} | {
        "qwen2-5-7b-instruct/qwen2-5-7b-instruct"
    }


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda d: d.__setitem__("status", "broken"), id="status"),
        pytest.param(lambda d: d["spec"].__setitem__("replicas", "two"), id="replicas"),
    ],
)
def test_a_binding_target_holding_no_counts_fails_its_binding_only(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path, edit: Any
) -> None:
    """The Kthena binding's Deployment with a hand-written status or replicas that is no count: that binding is
    not scaled, the variants are. Before, the whole cycle ended ``optimize could not run: ValidationError``."""
    _edit(example_cluster, "Deployment", "qwen2-5-7b-instruct", edit)
    report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics))
    assert by_kind(example_cluster, "Deployment")["qwen2-5-7b-instruct"]["spec"]["replicas"] in (1, "two")
    variants = by_kind(example_cluster, "VariantAutoscaling")
    assert variants["llama-3-1-8b-h100"]["status"]["desiredOptimizedAlloc"]["numReplicas"] == 3
    assert by_kind(example_cluster, "Deployment")["llama-3-1-8b-h100"]["spec"]["replicas"] == 3
    assert report.degraded  # the binding's target is reported
