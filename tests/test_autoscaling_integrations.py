"""The shipped HPA/KEDA integrations (deployments/autoscaling/) and the Grafana dashboard
(deployments/grafana/), validated strictly: kubernetes-validate for the HPA, KEDA's ScaledObject schema
(subset written from KEDA's CRD, tests/schemas/) for the ScaledObject, ``promtool`` for every PromQL
expression, and every metric named must be one Modelplane publishes (engine.cycle_metrics.HELP)."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess

import jsonschema
import kubernetes_validate
import pytest
import yaml

from engine.cycle_metrics import METRIC_NAMES

REPO = pathlib.Path(__file__).resolve().parents[1]
AUTOSCALING = REPO / "deployments" / "autoscaling"
DASHBOARD = REPO / "deployments" / "grafana" / "modelplane-dashboard.json"
KEDA_SCHEMA = json.loads((REPO / "tests" / "schemas" / "keda-scaledobject.schema.json").read_text())
EXAMPLE_VARIANTS = {
    (doc["metadata"]["namespace"], doc["metadata"]["name"]): doc
    for path in sorted((REPO / "deployments" / "examples").glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if isinstance(doc, dict) and doc.get("kind") == "VariantAutoscaling"
}
# Grafana's variables replaced by values PromQL accepts.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$cluster": ".*", "$namespace": ".*"}
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}


def promtool() -> str:
    path = shutil.which("promtool") or "/usr/bin/promtool"
    if not pathlib.Path(path).exists():
        pytest.fail("promtool not found: install Debian's prometheus (dev.sh does)", pytrace=False)
    return path


def check_promql(expressions: list[str], tmp_path: pathlib.Path) -> None:
    """Every expression parses as PromQL: promtool checks a rules file with one recording rule each."""
    rules = {
        "groups": [
            {"name": "check", "rules": [{"record": f"check:expr_{i}", "expr": e} for i, e in enumerate(expressions)]}
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not functions, keywords, label names
    (inside ``{}`` or ``by (...)``), strings or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        following = text[match.end() :].lstrip()
        if following.startswith("(") or match.group(0).lower() in PROMQL_WORDS:
            continue
        names.add(match.group(0))
    return names


def grafana_expr(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def test_metric_names_are_found() -> None:
    assert metric_names('time() - max by (flow) (modelplane_cycle_timestamp_seconds{job="x",a=~"b"})') == {
        "modelplane_cycle_timestamp_seconds"
    }
    assert metric_names("sum(rate(vllm:request_success_total[1m])) / up") == {"vllm:request_success_total", "up"}


# ----------------------------------------------------------------------------------------------- HPA


def test_hpa_is_a_strictly_valid_autoscaling_v2_object() -> None:
    hpa = yaml.safe_load((AUTOSCALING / "hpa.yaml").read_text())
    kubernetes_validate.validate(hpa, "1.30", strict=True)
    metric = hpa["spec"]["metrics"][0]["external"]
    assert metric["metric"]["name"] == "wva_desired_replicas" and metric["target"] == {
        "type": "AverageValue",
        "averageValue": "1",
    }
    variant = EXAMPLE_VARIANTS[
        (hpa["metadata"]["namespace"], metric["metric"]["selector"]["matchLabels"]["variant_name"])
    ]
    assert variant["spec"]["scaleTargetRef"]["name"] == hpa["spec"]["scaleTargetRef"]["name"]


def test_prometheus_adapter_rule_serves_the_metric_the_hpa_reads(tmp_path: pathlib.Path) -> None:
    values = yaml.safe_load((AUTOSCALING / "prometheus-adapter-values.yaml").read_text())
    rule = values["rules"]["external"][0]
    assert set(rule) == {"seriesQuery", "resources", "name", "metricsQuery"}
    assert (
        re.fullmatch(rule["name"]["matches"], "wva_desired_replicas") and rule["name"]["as"] == "wva_desired_replicas"
    )
    assert {target["resource"] for target in rule["resources"]["overrides"].values()} == {"namespace"}
    rendered = (
        rule["metricsQuery"]
        .replace("<<.Series>>", "wva_desired_replicas")
        .replace("<<.LabelMatchers>>", 'variant_name="v",namespace="ns"')
    )
    check_promql([rule["seriesQuery"], rendered], tmp_path)
    assert metric_names(rendered) | metric_names(rule["seriesQuery"]) <= METRIC_NAMES


# ---------------------------------------------------------------------------------------------- KEDA


def test_keda_scaled_object_is_valid_against_keda_schema(tmp_path: pathlib.Path) -> None:
    scaled = yaml.safe_load((AUTOSCALING / "keda-scaledobject.yaml").read_text())
    jsonschema.validate(scaled, KEDA_SCHEMA)
    spec = scaled["spec"]
    assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100)  # KEDA's CEL rule
    trigger = spec["triggers"][0]
    assert trigger["type"] == "prometheus"
    jsonschema.validate(trigger["metadata"], KEDA_SCHEMA["definitions"]["prometheusTriggerMetadata"])
    # Missing data must be an error for KEDA (its default reads an empty result as 0 and scales down).
    assert trigger["metadata"]["ignoreNullValues"] == "false"
    assert spec["fallback"]["behavior"] in ("currentReplicas", "currentReplicasIfHigher")
    check_promql([trigger["metadata"]["query"]], tmp_path)
    assert metric_names(trigger["metadata"]["query"]) == {"wva_desired_replicas"}
    variant = EXAMPLE_VARIANTS[(scaled["metadata"]["namespace"], spec["scaleTargetRef"]["name"])]
    assert variant["spec"]["scaleTargetRef"]["name"] == spec["scaleTargetRef"]["name"]


def test_keda_reads_the_prometheus_the_kustomization_sets(tmp_path: pathlib.Path) -> None:
    """The Prometheus address is one setting (PROMETHEUS_URL in deployments/autoscaling/Kustomization): what
    `kubectl apply -k` applies is the ScaledObject alone, every prometheus trigger reading that address."""
    copy = tmp_path / "autoscaling"
    shutil.copytree(AUTOSCALING, copy)
    kustomization = (copy / "Kustomization").read_text()
    default = "PROMETHEUS_URL=http://prometheus-operated.monitoring.svc:9090"
    assert default in kustomization
    (copy / "Kustomization").write_text(kustomization.replace(default, "PROMETHEUS_URL=https://prometheus.example.org"))
    done = subprocess.run(["kubectl", "kustomize", str(copy)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (scaled,) = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    jsonschema.validate(scaled, KEDA_SCHEMA)
    addresses = {t["metadata"]["serverAddress"] for t in scaled["spec"]["triggers"] if t["type"] == "prometheus"}
    assert addresses == {"https://prometheus.example.org"}


def test_the_keda_schema_rejects_what_keda_rejects() -> None:
    scaled = yaml.safe_load((AUTOSCALING / "keda-scaledobject.yaml").read_text())
    for breaks in (
        lambda s: s["spec"].pop("triggers"),
        lambda s: s["spec"].update(maxReplicaCount=0),
        lambda s: s["spec"].update(pollingIntervall=5),
        lambda s: s["spec"]["fallback"].update(behavior="sometimes"),
        lambda s: s["spec"]["triggers"][0]["metadata"].update(threshold=1),
    ):
        broken = json.loads(json.dumps(scaled))
        breaks(broken)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, KEDA_SCHEMA)


# ----------------------------------------------------------------------------------------- dashboard


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_every_dashboard_query_is_valid_promql(tmp_path: pathlib.Path) -> None:
    expressions = dashboard_expressions()
    assert len(expressions) >= 15
    check_promql([grafana_expr(e) for e in expressions], tmp_path)


def test_the_dashboard_names_only_metrics_modelplane_publishes() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    named: set[str] = set()
    for expr in dashboard_expressions():
        names = metric_names(grafana_expr(expr))
        assert names, expr
        named |= names
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["definition"])
            assert inner, variable["definition"]
            named |= metric_names(grafana_expr(inner.group(1)))
    assert named <= METRIC_NAMES, named - METRIC_NAMES
    # What the issue asks the dashboard to show.
    for required in (
        "wva_desired_replicas",
        "wva_current_replicas",
        "modelplane_variant_cost",
        "modelplane_model_arrival_rate_rps",
        "modelplane_solver_gap_ratio",
        "modelplane_cycle_duration_seconds",
        "modelplane_slo_attainment",
        "modelplane_slo_attainment_target",
        "modelplane_slo_burn_rate",
    ):
        assert required in named


def test_grafanas_import_asks_for_the_prometheus_data_source() -> None:
    """Grafana's import dialog asks for a data source only for an ``__inputs`` entry, and replaces ``${NAME}`` with
    the chosen one's uid: every data source the dashboard names (panels, their queries, query variables) is it."""
    dashboard = json.loads(DASHBOARD.read_text())
    (datasource,) = dashboard["__inputs"]
    assert (datasource["type"], datasource["pluginId"]) == ("datasource", "prometheus")
    expected = {"type": "prometheus", "uid": "${" + datasource["name"] + "}"}
    named = [
        *(panel["datasource"] for panel in dashboard["panels"] if "datasource" in panel),
        *(
            target["datasource"]
            for panel in dashboard["panels"]
            for target in panel.get("targets", [])
            if "datasource" in target
        ),
        *(variable["datasource"] for variable in dashboard["templating"]["list"] if "datasource" in variable),
    ]
    assert named and all(source == expected for source in named), [s for s in named if s != expected]
