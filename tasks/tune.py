"""The tune flow's I/O: what the cluster attained over the tuned window, and the write of the chosen candidate's
settings on every VariantAutoscaling of a model.

The choice itself is the engine's (:func:`engine.simulate.tune.choose`); the replays are :mod:`tasks.replay`.
"""

from __future__ import annotations

import json
from datetime import datetime

from engine.api.llmd import TuningStatus
from engine.api.registry import VARIANT_AUTOSCALING
from engine.simulate.scenario import ClusterDescription, Scenario, joined_key
from engine.simulate.tune import ANNOTATION_TUNED, ModelChoice, operator_settings, tuned_settings, window_attainment
from engine.slo.measure import MeasuredAttainment
from tasks.clients.cluster import ClusterError, ObjectRef, connect
from tasks.clients.metrics.snapshot import MetricsSource, ModelKey
from tasks.tracking import task


def measure_window(
    metrics: MetricsSource, description: ClusterDescription, window_s: float
) -> dict[str, MeasuredAttainment]:
    """What each model attained over the last ``window_s`` under the settings that ran, from vLLM's latency
    histograms (the attainment loop's measurement, over the tuned window): what the tune's calibration compares the
    replay of those settings with.

    Args:
        metrics: The metrics source the window's traffic was read from.
        description: The cluster (its VariantAutoscalings name the models; their service classes the targets).
        window_s: The tuned window, in seconds.

    Returns:
        Per model (``namespace/modelID``): the attainment measured over the window (unknown, with why, where the
        histograms or the latency targets are missing).

    Raises:
        MetricsUnavailable: the metrics source cannot be read.
    """
    keys = sorted({ModelKey(va.spec.model_id, va.metadata.namespace or "default") for va in description.variants})
    snapshot = metrics.collect(keys, latency_windows={key: window_s for key in keys})
    return window_attainment(
        description,
        {(key.namespace, key.model_id): found for key, found in snapshot.latency.items()},
        {(key.namespace, key.model_id): why for key, why in snapshot.latency_missing.items()},
    )


@task(name="write-choice")
def write_choice(
    cluster: str, scenario: Scenario, choice: ModelChoice, now: datetime, source: str
) -> tuple[list[str], list[str]]:
    """The chosen candidate's annotations and ``modelplane.io/tuned`` on every VariantAutoscaling of the model, and
    the same record as ``status.tuning``.

    Args:
        cluster: The cluster target the choice is written to.
        scenario: The replayed scenario (its description names the VariantAutoscalings).
        choice: What was chosen for one model.
        now: The time recorded with the choice.
        source: What traffic was replayed (``request log``, ``24h to 2026-11-30T06:00Z from Prometheus``).

    Returns:
        The VariantAutoscalings written (``namespace/name``) and the failed ones with why; one failed write
        does not stop the others.
    """
    backend = connect(cluster)
    offset = round(choice.calibration.offset, 4) if choice.calibration is not None else None
    status = TuningStatus.model_validate(
        {
            "candidate": choice.chosen.candidate.name,
            "attained": round(choice.chosen.attainment, 4),
            "target": choice.target,
            "met": choice.met,
            "cost": round(choice.chosen.cost, 2),
            "traffic": source,
            "calibration": offset,
            "tunedAt": now,
        }
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    written: list[str] = []
    failed: list[str] = []
    record = {
        "candidate": choice.chosen.candidate.name,
        "attainment": round(choice.chosen.attainment, 4),
        "cost": round(choice.chosen.cost, 2),
        "target": choice.target,
        "met": choice.met,
        "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if offset is not None:
        record["calibration"] = offset
    if choice.reachable is not None:
        record["reachable"] = round(choice.reachable, 4)
    for va in scenario.description.variants:
        namespace, name = va.metadata.namespace or "default", va.metadata.name or ""
        if joined_key((namespace, va.spec.model_id)) != choice.model:
            continue
        settings = tuned_settings(va.metadata.annotations, choice.chosen.candidate, joined_key((namespace, name)))
        settings[ANNOTATION_TUNED] = json.dumps(
            {**record, "replaced": operator_settings(va.metadata.annotations)}, sort_keys=True
        )
        ref = ObjectRef(va.api_version, VARIANT_AUTOSCALING, name, namespace)
        try:
            backend.patch_spec(ref, {"metadata": {"annotations": settings}})
            backend.patch_status(ref, {"tuning": status})
            written.append(f"{namespace}/{name}")
        except ClusterError as exc:
            failed.append(f"{namespace}/{name}: {exc.message}")
    return written, failed
