"""The PVC and fill Job a ModelCache needs, pure: size, storage class, credentials, manifests, the fill's report.

Decides how large a cache's PVC is (an explicit ``spec.size`` as written, else the measured source plus
headroom), which storage class it uses, the download credentials a fill gets (secret references, never
values), the ``batch/v1`` Job running Modelplane's downloader into the PVC, how a Job's state reads, and
the one-line report a fill leaves as its termination message, so the flow learns whether the completion
marker was verified without reading the volume.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.api.aim import AIMNamespaceConfig, ModelCache, ModelCacheSpec
from engine.api.meta import EnvVar, SecretKeySelector
from engine.api.registry import MODEL_CACHE
from engine.api.views import ContainerStatus, Job, Pod
from engine.caches.identity import pvc_size
from engine.caches.plan import (
    CACHE_LABEL,
    DOWNLOAD_FAILED,
    INVALID_SIZE,
    MANAGED_BY,
    MODELCACHE_API_VERSION,
    SIZE_UNKNOWN,
    VERIFICATION_FAILED,
    VOLUME_TOO_SMALL,
    Failure,
    FillState,
    job_name,
    pvc_name,
)
from engine.caches.sources import ModelSource, same_endpoint
from engine.units import parse_quantity

CACHE_MOUNT_PATH = "/cache"
TERMINATION_LOG = "/dev/termination-log"
GiB = 1024**3


def storage_class_for(cache_class: str | None, namespace_config_class: str | None) -> str | None:
    """The cache's own class, else the namespace's AIMNamespaceConfig ``cacheStorageClassName``, else
    ``None`` (the cluster default: the PVC omits ``storageClassName``)."""
    return cache_class or namespace_config_class or None


def quantity_bytes(value: str | int | float) -> int:
    """Bytes in a Kubernetes quantity (``"40Gi"``); ``ValueError`` naming the value otherwise."""
    amount = parse_quantity(value)
    if amount <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return int(amount)


def pvc_request(spec_size: str | int | float | None, source_bytes: int | None, headroom_percent: float) -> str:
    """The storage a cache's PVC requests: an explicit ``spec.size`` exactly as written (the person
    chose it; adding headroom again turned 100Mi into 1Gi and 40Gi into 44Gi), else the measured
    source plus the headroom, rounded up to whole Gi (:func:`engine.caches.identity.pvc_size`).
    ``ValueError`` for a size that is not a positive quantity or an unknown source size."""
    if spec_size:
        quantity_bytes(spec_size)
        return str(spec_size)
    return pvc_size([source_bytes], headroom_percent)


def pvc_size_for(spec: ModelCacheSpec, source_bytes: int | None, headroom_percent: float) -> tuple[str, Failure | None]:
    """:func:`pvc_request` for a ModelCache ``spec``, or the failure naming what is wrong: an invalid
    ``spec.size`` (:data:`INVALID_SIZE`) or a source whose size is unknown (:data:`SIZE_UNKNOWN`)."""
    try:
        return pvc_request(spec.size, source_bytes, headroom_percent), None
    except ValueError as exc:
        if spec.size:
            return "", Failure(INVALID_SIZE, f"spec.size: {exc}")
        return "", Failure(SIZE_UNKNOWN, f"the source's size: {exc}")


def volume_too_small(capacity: str | None, source_bytes: int | None) -> Failure | None:
    """A :data:`VOLUME_TOO_SMALL` failure when the source does not fit the PVC's capacity."""
    if capacity is None or source_bytes is None:
        return None
    try:
        capacity_bytes = quantity_bytes(capacity)
    except ValueError:
        return None
    if source_bytes <= capacity_bytes:
        return None
    return Failure(
        VOLUME_TOO_SMALL,
        f"the source holds {_human(source_bytes)} but the cache volume has {capacity} ({_human(capacity_bytes)}); "
        "PVCs are never resized: delete this ModelCache and create it with a larger spec.size",
    )


def _human(size: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


# ------------------------------------------------------------------------------------ credentials


@dataclass(frozen=True)
class DownloadEnv:
    """The fill's environment: env vars in API shape (``secretKeyRef``s kept as references) and notes
    about choices a person should know of (e.g. which of several S3 credentials was used)."""

    env: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def _secret_env(name: str, selector: SecretKeySelector | None) -> dict[str, Any] | None:
    if selector is None:
        return None
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": selector.name, "key": selector.key}}}


def download_env(cache_env: Sequence[EnvVar] | None, namespace_config: AIMNamespaceConfig | None) -> DownloadEnv:
    """The env of a cache's fill: the namespace's AIMNamespaceConfig credentials as ``secretKeyRef``s
    (``HF_TOKEN``; ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` with ``AWS_ENDPOINT_URL``, else
    ``AWS_REGION``/``AWS_DEFAULT_REGION``; the first S3 credential when several are listed), overridden
    by the cache's own ``spec.env`` (by name)."""
    notes: list[str] = []
    base: list[dict[str, Any]] = []
    config_name = (namespace_config.metadata.name if namespace_config else None) or "default"
    credentials = namespace_config.spec.credentials if namespace_config else None
    token = _secret_env("HF_TOKEN", credentials.hugging_face_token if credentials else None)
    if token:
        base.append(token)
    s3 = (credentials.s3 if credentials else None) or []
    if s3:
        chosen = s3[0]
        if len(s3) > 1:
            where = chosen.endpoint_url or chosen.region or "no endpoint or region"
            notes.append(
                f"AIMNamespaceConfig {config_name} lists {len(s3)} S3 credentials; the first ({where}) is used"
            )
        for env_name, selector in (
            ("AWS_ACCESS_KEY_ID", chosen.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", chosen.secret_access_key),
        ):
            ref = _secret_env(env_name, selector)
            if ref:
                base.append(ref)
        if chosen.endpoint_url:
            base.append({"name": "AWS_ENDPOINT_URL", "value": chosen.endpoint_url})
        elif chosen.region:
            base.append({"name": "AWS_REGION", "value": chosen.region})
            base.append({"name": "AWS_DEFAULT_REGION", "value": chosen.region})
    own = [item.to_dict() for item in cache_env or []]
    overridden = {item["name"] for item in own}
    return DownloadEnv([item for item in base if item["name"] not in overridden] + own, notes)


S3_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "ACCESS_KEY", "SECRET_KEY")
"""The env names that carry S3 credentials (the AWS names and Kthena's)."""
S3_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "ENDPOINT")
"""The env names of the S3 endpoint those credentials are for, in the downloader's order of precedence."""


def endpoint_refusal(
    source: ModelSource, env: Sequence[Mapping[str, Any]], field: str = "spec.sourceUri"
) -> str | None:
    """Why ``source`` may not be filled with ``env``, naming ``field``, or None.

    An ``?endpoint=`` in a source URI overrides where the download goes. When S3 credentials apply (the
    namespace's, or the cache's own env), they must never be sent to a server the URI names: the endpoint is
    refused unless it is the one configured with them (an endpoint read from a Secret cannot be compared, so
    it refuses too). Without credentials an endpoint in the URI is an anonymous download and allowed."""
    if source.endpoint is None:
        return None
    names = {str(item.get("name")): item for item in env}
    if not any(name in names for name in S3_CREDENTIAL_ENV):
        return None
    configured = next((names[name] for name in S3_ENDPOINT_ENV if name in names), None)
    value = configured.get("value") if configured is not None else None
    if isinstance(value, str) and same_endpoint(source.endpoint, value):
        return None
    where = f"the configured endpoint {value}" if isinstance(value, str) else "no endpoint given in plain text"
    return (
        f"{field}: endpoint {source.endpoint} is not where the S3 credentials in use may be sent ({where}); "
        "remove ?endpoint= from the URI or make it equal the configured endpoint"
    )


# ------------------------------------------------------------------------------------- manifests


def owner_reference(cache: ModelCache) -> dict[str, Any]:
    """An ownerReference to the ModelCache (PVC and Jobs go away with it)."""
    return {
        "apiVersion": MODELCACHE_API_VERSION,
        "kind": MODEL_CACHE,
        "name": cache.metadata.name,
        "uid": cache.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def render_pvc(cache: ModelCache, size: str, storage_class: str | None) -> dict[str, Any]:
    """The cache's PVC: ReadWriteMany, ``size``, the storage class or the cluster default (omitted)."""
    name = cache.metadata.name or ""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    owner = [owner_reference(cache)] if cache.metadata.uid else []
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": pvc_name(name),
            "namespace": cache.metadata.namespace,
            "labels": {CACHE_LABEL: name, **MANAGED_BY},
            **({"ownerReferences": owner} if owner else {}),
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class JobSettings:
    """How fill Jobs run: Modelplane's image, retries inside Kubernetes, cleanup, pull secrets."""

    image: str
    backoff_limit: int = 2
    ttl_seconds_after_finished: int = 3600
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None


FILL_DEADLINE_FLOOR_S = 3600
"""The shortest time a fill Job may run before Kubernetes stops it (``activeDeadlineSeconds``)."""
FILL_DEADLINE_RATE = 1024 * 1024
"""Bytes per second a fill is given at the least: a Job may run as long as filling its whole PVC takes at this rate
(1 MiB/s, about 8 Mbit/s: 4.6 hours for a 16 GiB volume). A source that stalls or sends a byte at a time keeps every
read under its timeout, so without a deadline such a fill would hold its cache Progressing forever; past it, the
Job fails (``DeadlineExceeded``) and the next attempt resumes the partial files after the backoff."""


def fill_deadline_s(capacity: str | int | None) -> int:
    """How long a fill Job of a PVC of ``capacity`` may run: at least :data:`FILL_DEADLINE_FLOOR_S`, else the time
    to fill the volume at :data:`FILL_DEADLINE_RATE`. A capacity that is not a size gives the floor."""
    try:
        volume = quantity_bytes(capacity) if capacity is not None else 0
    except ValueError:
        volume = 0
    return max(FILL_DEADLINE_FLOOR_S, -(-volume // FILL_DEADLINE_RATE))


def fill_command(source_uri: str) -> list[str]:
    """The fill container's command: Modelplane's downloader into the mounted PVC, reporting its verdict
    (the completion marker's summary, or the typed error) through the termination message."""
    return ["modelplane", "cache", "fill", source_uri, CACHE_MOUNT_PATH, "--termination-log", TERMINATION_LOG]


def render_job(
    cache: ModelCache,
    source_uri: str,
    attempt: int,
    env: list[dict[str, Any]],
    settings: JobSettings,
    capacity: str | int | None = None,
) -> dict[str, Any]:
    """The ``batch/v1`` Job filling the cache's PVC of ``capacity``: one pod, ``restartPolicy: Never``, the PVC at
    :data:`CACHE_MOUNT_PATH`, an emptyDir ``/tmp``, owned by the ModelCache, stopped by Kubernetes after
    :func:`fill_deadline_s`."""
    name = cache.metadata.name or ""
    labels = {CACHE_LABEL: name, **MANAGED_BY}
    container: dict[str, Any] = {
        "name": "fill",
        "image": settings.image,
        "command": fill_command(source_uri),
        "env": [*env, {"name": "HOME", "value": "/tmp"}, {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}],
        "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT_PATH}, {"name": "tmp", "mountPath": "/tmp"}],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # Modelplane's image runs as uid 10001 (deployments/Dockerfile); fsGroup makes the PVC writable.
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
        "containers": [container],
        "volumes": [
            {"name": "cache", "persistentVolumeClaim": {"claimName": pvc_name(name)}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    owner = [owner_reference(cache)] if cache.metadata.uid else []
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(name, attempt),
            "namespace": cache.metadata.namespace,
            "labels": {**labels, "modelplane.io/fill-attempt": str(attempt)},
            **({"ownerReferences": owner} if owner else {}),
        },
        "spec": {
            "backoffLimit": settings.backoff_limit,
            "activeDeadlineSeconds": fill_deadline_s(capacity),
            "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def job_state(job: Job | None) -> FillState:
    """A Job's state as a kubelet and the job controller report it (conditions first, then counters)."""
    if job is None:
        return FillState.NONE
    for condition in job.status.conditions:
        if condition.status != "True":
            continue
        if condition.type in ("Complete", "SuccessCriteriaMet"):
            return FillState.SUCCEEDED
        if condition.type in ("Failed", "FailureTarget"):
            return FillState.FAILED
    return FillState.RUNNING


def job_failure_message(job: Job) -> str:
    """The Job's own Failed condition (e.g. ``BackoffLimitExceeded: Job has reached the specified backoff limit``)."""
    for condition in job.status.conditions:
        if condition.type == "Failed" and condition.status == "True":
            return ": ".join(part for part in (condition.reason, condition.message) if part)
    return "the fill Job failed"


def _failed_for(job: Job) -> str | None:
    """The reason of the Job's Failed condition, if it failed."""
    return next((c.reason for c in job.status.conditions if c.type == "Failed" and c.status == "True"), None)


def fill_job_verdict(job: Job | None, pods: Iterable[Pod], source_uri: str) -> tuple[FillState, Failure | None]:
    """A fill Job's outcome: running, or finished with the verdict its last pod's termination message reports
    (:func:`read_fill_report`). "Complete" alone is not enough: the report must be a verified completion
    marker of this source."""
    state = job_state(job)
    if state in (FillState.NONE, FillState.RUNNING) or job is None:
        return state, None
    if state == FillState.FAILED and _failed_for(job) == "DeadlineExceeded":  # stopped by Kubernetes mid-transfer
        return FillState.FAILED, Failure(
            DOWNLOAD_FAILED,
            f"the fill Job ran out of time ({job_failure_message(job)}): the source sent too little; "
            "the next attempt resumes the partial files",
        )
    mine = [p for p in pods if p.metadata.labels.get("job-name") == job.metadata.name]
    wanted_phase = "Succeeded" if state == FillState.SUCCEEDED else "Failed"
    finished = [p for p in mine if p.status.phase == wanted_phase] or mine
    message = None
    for pod in sorted(finished, key=lambda p: p.metadata.creation_timestamp or "", reverse=True):
        message = next(filter(None, (_termination_message(s) for s in pod.status.container_statuses)), None)
        if message:
            break
    verdict, failure = read_fill_report(message, source_uri)
    if state == FillState.FAILED and verdict == FillState.SUCCEEDED:  # a report without success of the Job
        return FillState.FAILED, Failure(DOWNLOAD_FAILED, "the fill Job failed after reporting a complete cache")
    if state == FillState.FAILED and failure is not None and failure.reason == VERIFICATION_FAILED:
        return FillState.FAILED, Failure(DOWNLOAD_FAILED, f"the fill Job failed ({job_failure_message(job)})")
    return verdict, failure


def _termination_message(status: ContainerStatus) -> str | None:
    """The message a container left when it ended, if any."""
    return status.state.terminated.message if status.state.terminated is not None else None


# ----------------------------------------------------------------------------------- fill report

REPORT_LIMIT = 4000
"""Kubernetes keeps at most 4096 bytes of a termination message."""


def fill_report(marker: Mapping[str, Any] | None = None, *, reason: str | None = None, message: str = "") -> str:
    """The one-line JSON a fill writes as its container's termination message: a summary of the
    completion marker it wrote (``complete``, ``source``, ``revision``, ``files``, ``bytes``), or the
    typed error (``reason``, ``message``) when it failed. The flow reads it from the Pod's status."""
    import json

    if marker is not None:
        files = marker.get("files") or []
        total = sum(int(f.get("size") or 0) for f in files if isinstance(f, Mapping))
        body: dict[str, Any] = {
            "complete": True,
            "source": marker.get("source"),
            "revision": marker.get("revision"),
            "files": len(files),
            "bytes": marker.get("totalBytes", total),
        }
    else:
        body = {"complete": False, "reason": reason or DOWNLOAD_FAILED, "message": message[: REPORT_LIMIT // 2]}
    return json.dumps(body, separators=(",", ":"))[:REPORT_LIMIT]


def read_fill_report(text: str | None, source_uri: str) -> tuple[FillState, Failure | None]:
    """What a finished fill reported: ``SUCCEEDED`` only for a complete marker of this very source;
    a typed failure as it was reported; anything else (no report, a log tail) as a failure naming it."""
    import json

    text = (text or "").strip()
    try:
        body = json.loads(text) if text.startswith("{") else None
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("complete") is True:
        if body.get("source") != source_uri:
            return FillState.FAILED, Failure(
                VERIFICATION_FAILED, f"the completion marker is for {body.get('source')!r}, not {source_uri!r}"
            )
        return FillState.SUCCEEDED, None
    if isinstance(body, dict) and body.get("reason"):
        return FillState.FAILED, Failure(str(body["reason"]), str(body.get("message") or "the fill failed"))
    if not text:
        return FillState.FAILED, Failure(
            VERIFICATION_FAILED, "the fill finished without reporting a verified completion marker"
        )
    last = text.splitlines()[-1][:500]
    typed = _TYPED_FAILURE_LINE.match(last)  # the CLI's one-line failure, from a log tail
    if typed:
        return FillState.FAILED, Failure(typed.group(1), typed.group(2))
    return FillState.FAILED, Failure(DOWNLOAD_FAILED, f"the fill failed: {last}")


_TYPED_FAILURE_LINE = re.compile(r"^(?:error: )?cache fill failed \(([A-Za-z]+)\): (.+)$")
