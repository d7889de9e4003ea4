"""The optimize flow's parameters: rate-window precedence and the summary line."""

from __future__ import annotations

import pathlib

import pytest
from prefect.exceptions import ParameterTypeError

from flows.optimize import metrics_source, optimize


@pytest.mark.parametrize(
    ("env", "param", "expected"), [(None, None, "1m"), ("30s", None, "30s"), ("30s", "2m", "2m"), (None, "5s", "5s")]
)
def test_rate_window_precedence(
    monkeypatch: pytest.MonkeyPatch, env: str | None, param: str | None, expected: str
) -> None:
    """The run's parameter wins; else $PROMETHEUS_RATE_WINDOW; else WVA's 1m (the default no longer overwrites the variable)."""
    if env is None:
        monkeypatch.delenv("PROMETHEUS_RATE_WINDOW", raising=False)
    else:
        monkeypatch.setenv("PROMETHEUS_RATE_WINDOW", env)
    source = metrics_source(None, "http://127.0.0.1:9", param)
    assert source is not None and source.rate_window == expected


def test_invalid_parameters_are_rejected_by_the_signature() -> None:
    """The flow's signature is the only place its rules live: Prefect checks them before the body runs."""
    for bad in ({"rate_window": "1 minute"}, {"solver_time_limit_s": 0}, {"namespaces": ["Not_A_Namespace"]}):
        with pytest.raises(ParameterTypeError, match=list(bad)[0]):
            optimize.validate_parameters({"dry_run": True, **bad})


def test_summary_counts_binding_targets(
    prefect_harness: None, example_cluster: pathlib.Path, example_metrics: pathlib.Path
) -> None:
    report = optimize(cluster=str(example_cluster), metrics_file=str(example_metrics), dry_run=True)
    assert "4 variants:" in report.summary and "1 binding targets:" in report.summary
    assert report.exit_code == 0 and not report.degraded


def test_binding_grace_period_comes_from_its_annotation_or_owning_model(tmp_path: pathlib.Path) -> None:
    from engine.api.meta import ObjectMeta
    from tasks.clients.cluster import LocalCluster
    from tasks.optimize.bindings import binding_grace_period

    cluster = LocalCluster(tmp_path)
    model = cluster.create(
        {
            "apiVersion": "registry.volcano.sh/v1alpha1",
            "kind": "Model",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {
                "backends": [
                    {
                        "name": "vllm",
                        "type": "vLLM",
                        "modelURI": "hf://org/model",
                        "minReplicas": 0,
                        "maxReplicas": 2,
                        "scaleToZeroGracePeriod": "90s",
                        "workers": [{"type": "server", "image": "vllm/vllm-openai:v0.10.1", "replicas": 1, "pods": 1}],
                    }
                ]
            },
        }
    )
    owned = {
        "metadata": {
            "name": "b",
            "namespace": "ns",
            "ownerReferences": [
                {
                    "apiVersion": "registry.volcano.sh/v1alpha1",
                    "kind": "Model",
                    "name": "m",
                    "uid": model["metadata"]["uid"],
                }
            ],
        }
    }
    assert binding_grace_period(cluster, ObjectMeta.model_validate(owned["metadata"])) == 90.0
    annotated = {
        "metadata": {"name": "b", "namespace": "ns", "annotations": {"modelplane.io/scale-to-zero-grace-period": "5m"}}
    }
    assert binding_grace_period(cluster, ObjectMeta.model_validate(annotated["metadata"])) == 300.0
    assert binding_grace_period(cluster, ObjectMeta(name="b", namespace="ns")) is None
    bad = {
        "metadata": {
            "name": "b",
            "namespace": "ns",
            "annotations": {"modelplane.io/scale-to-zero-grace-period": "soon"},
        }
    }
    assert binding_grace_period(cluster, ObjectMeta.model_validate(bad["metadata"])) is None
