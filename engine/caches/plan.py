"""What the warm-caches flow decides for one ModelCache, pure: names, the PVC and fill Job it needs,
the download credentials, the status it reports, when a failed fill is retried, what GC may delete.

The flow (``flows/warm_caches.py``) gathers an :class:`Observation` per cache (PVC phase, the fill's
state, the completion marker's verdict) and asks :func:`next_step` what to do and :func:`cache_status`
what to report. The status follows seed 004 and the first AIM ModelCache controller
(``Pending -> Progressing -> Available | Failed``; conditions ``StorageReady``, ``Ready``,
``Progressing``, ``Failure``), with Modelplane's completion marker: a cache is ``Available`` only when
the marker the downloader writes last was verified, never on "Job Complete" alone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from engine.api.meta import format_time, parse_time
from engine.api.registry import AIM_API
from engine.caches.identity import pvc_size
from engine.status import ConditionUpdate, set_conditions
from engine.units import parse_quantity

MODELCACHE_API_VERSION = AIM_API
CACHE_LABEL = "modelplane.io/cache"
"""On the PVC and fill Jobs: the name of the ModelCache they belong to."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "modelplane"}
ATTEMPTS_ANNOTATION = "modelplane.io/fill-attempts"
"""On the ModelCache: ``<generation>/<fills started for it>`` so retries survive between runs."""
REQUESTED_BY_ANNOTATION = "modelplane.io/requested-by"
"""On the ModelCache: the consumers (``Kind/namespace/name``) that asked for it, comma-separated."""
CACHE_MOUNT_PATH = "/cache"
TERMINATION_LOG = "/dev/termination-log"

# Condition types and reasons (seed 004 / the first AIM ModelCache controller; Modelplane additions marked).
STORAGE_READY = "StorageReady"
READY = "Ready"
PROGRESSING = "Progressing"
FAILURE = "Failure"

PVC_PENDING = "PVCPending"
PVC_BOUND = "PVCBound"
PVC_PROVISIONING = "PVCProvisioning"
PVC_LOST = "PVCLost"
WARM = "Warm"
WAITING_FOR_PVC = "WaitingForPVC"
DOWNLOADING = "Downloading"
RETRY_BACKOFF = "RetryBackoff"
NO_FAILURE = "NoFailure"
DOWNLOAD_FAILED = "DownloadFailed"
# Modelplane's more specific failure reasons (Failure condition, Ready=False).
INVALID_SOURCE = "InvalidSource"
INVALID_SIZE = "InvalidSize"
SIZE_UNKNOWN = "SizeUnknown"
VOLUME_TOO_SMALL = "InsufficientSpace"  # the downloader's reason for the same refusal
AUTHENTICATION_FAILED = "AuthenticationFailed"
SOURCE_NOT_FOUND = "SourceNotFound"
VERIFICATION_FAILED = "VerificationFailed"
CREDENTIALS_MISSING = "CredentialsMissing"
FILL_JOB_MISSING = "FillJobMissing"

TERMINAL_REASONS = frozenset(
    {
        INVALID_SOURCE,
        INVALID_SIZE,
        VOLUME_TOO_SMALL,
        PVC_LOST,
        "UnsupportedSource",
        "PathTraversal",
        "DestinationConflict",
    }
)
"""Failures a retry cannot fix: the spec must change (a new generation), the cache be re-created, or
(PVCLost) the lost PVC be deleted, after which the next pass creates and fills a new one."""

GiB = 1024**3


class FillState(str, Enum):
    """Where the fill of one cache stands."""

    NONE = "none"  # no fill started for the current attempt (or its Job is gone)
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # finished and the completion marker was verified
    FAILED = "failed"


class Step(str, Enum):
    """What the flow does next for one cache."""

    CREATE_PVC = "create-pvc"
    START_FILL = "start-fill"  # first attempt, or a retry whose backoff has passed
    WAIT = "wait"  # fill running, PVC provisioning, or backing off before a retry
    DONE = "done"  # Available
    GIVE_UP = "give-up"  # Failed for good (terminal reason or attempts exhausted)


@dataclass(frozen=True)
class Failure:
    """Why a step failed: a seed/Modelplane reason and a message a person can act on (no secrets)."""

    reason: str
    message: str


@dataclass(frozen=True)
class RetryPolicy:
    """Fills are retried with exponential backoff, ``max_attempts`` fills per cache generation."""

    max_attempts: int = 4
    backoff_s: float = 300.0
    max_backoff_s: float = 3600.0

    def delay(self, attempts: int) -> timedelta:
        """Wait after the ``attempts``-th failed fill before the next one."""
        return timedelta(seconds=min(self.max_backoff_s, self.backoff_s * (2 ** max(0, attempts - 1))))


@dataclass(frozen=True)
class Observation:
    """What the flow saw of one cache this pass."""

    generation: int | None
    pvc_name: str
    pvc_phase: str | None  # None: no PVC yet; "Bound", "Pending", "Lost"
    fill: FillState
    attempts: int  # fills started for this generation
    failure: Failure | None = None  # why the last step failed (fill, size, source, ...)
    failed_at: datetime | None = None  # when the failure was first reported


# ------------------------------------------------------------------------------------------ names


def _dns_label(text: str, limit: int) -> str:
    """``text`` lower-cased to DNS-1123 characters, cut to ``limit`` with a short hash when cut."""
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "cache"
    if len(clean) <= limit:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{clean[: limit - 9].rstrip('-')}-{digest}"


def pvc_name(cache_name: str) -> str:
    """The PVC of a ModelCache: ``<cache>-cache`` (the AIM controller's name), at most 63 characters."""
    return _dns_label(f"{cache_name}-cache", 63)


def job_name(cache_name: str, attempt: int) -> str:
    """The fill Job of one attempt: ``<cache>-fill-<n>``; a retry never reuses a failed Job's name."""
    return f"{_dns_label(cache_name, 63 - len(f'-fill-{attempt}'))}-fill-{attempt}"


# -------------------------------------------------------------------------------------- attempts


def parse_attempts(annotations: Mapping[str, Any] | None, generation: int | None) -> int:
    """Fills started for ``generation`` (0 when the annotation is missing, malformed, or for an older generation)."""
    raw = str((annotations or {}).get(ATTEMPTS_ANNOTATION, ""))
    gen, _, count = raw.replace(":", "/").partition("/")
    try:
        return int(count) if int(gen) == int(generation or 0) else 0
    except ValueError:
        return 0


def attempts_annotation(generation: int | None, attempts: int) -> dict[str, str]:
    """The annotation recording ``attempts`` fills for ``generation``: ``"<generation>/<attempts>"``
    (no colon: an unquoted ``1:1`` reads back from YAML 1.1 as the integer 61)."""
    return {ATTEMPTS_ANNOTATION: f"{int(generation or 0)}/{attempts}"}


def requested_by(annotations: Mapping[str, str] | None) -> list[str]:
    """The consumers recorded on a cache."""
    raw = (annotations or {}).get(REQUESTED_BY_ANNOTATION, "")
    return [item for item in (part.strip() for part in raw.split(",")) if item]


def with_requester(annotations: Mapping[str, str] | None, consumer: str) -> dict[str, str] | None:
    """The annotation patch adding ``consumer`` to the cache's requesters, or ``None`` if already listed."""
    current = requested_by(annotations)
    if consumer in current:
        return None
    return {REQUESTED_BY_ANNOTATION: ",".join(sorted([*current, consumer]))}


# ----------------------------------------------------------------------------------- storage, size


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


def _secret_env(name: str, selector: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not selector or not selector.get("name") or not selector.get("key"):
        return None
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": selector["name"], "key": selector["key"]}}}


def download_env(
    cache_env: Iterable[Mapping[str, Any]] | None, namespace_config: Mapping[str, Any] | None
) -> DownloadEnv:
    """The env of a cache's fill: the namespace's AIMNamespaceConfig credentials as ``secretKeyRef``s
    (``HF_TOKEN``; ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` with ``AWS_ENDPOINT_URL``, else
    ``AWS_REGION``/``AWS_DEFAULT_REGION``; the first S3 credential when several are listed), overridden
    by the cache's own ``spec.env`` (by name)."""
    notes: list[str] = []
    base: list[dict[str, Any]] = []
    spec = (namespace_config or {}).get("spec") or {}
    config_name = ((namespace_config or {}).get("metadata") or {}).get("name", "default")
    credentials = spec.get("credentials") or {}
    token = _secret_env("HF_TOKEN", credentials.get("huggingFaceToken"))
    if token:
        base.append(token)
    s3 = credentials.get("s3") or []
    if s3:
        chosen = s3[0] or {}
        if len(s3) > 1:
            where = chosen.get("endpointUrl") or chosen.get("region") or "no endpoint or region"
            notes.append(
                f"AIMNamespaceConfig {config_name} lists {len(s3)} S3 credentials; the first ({where}) is used"
            )
        for env_name, key in (("AWS_ACCESS_KEY_ID", "accessKeyId"), ("AWS_SECRET_ACCESS_KEY", "secretAccessKey")):
            ref = _secret_env(env_name, chosen.get(key))
            if ref:
                base.append(ref)
        if chosen.get("endpointUrl"):
            base.append({"name": "AWS_ENDPOINT_URL", "value": chosen["endpointUrl"]})
        elif chosen.get("region"):
            base.append({"name": "AWS_REGION", "value": chosen["region"]})
            base.append({"name": "AWS_DEFAULT_REGION", "value": chosen["region"]})
    own = [dict(item) for item in cache_env or [] if item.get("name")]
    overridden = {item["name"] for item in own}
    return DownloadEnv([item for item in base if item["name"] not in overridden] + own, notes)


# ------------------------------------------------------------------------------------- manifests


def owner_reference(cache: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to the ModelCache (PVC and Jobs go away with it)."""
    meta = cache["metadata"]
    return {
        "apiVersion": MODELCACHE_API_VERSION,
        "kind": "ModelCache",
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def render_pvc(cache: Mapping[str, Any], size: str, storage_class: str | None) -> dict[str, Any]:
    """The cache's PVC: ReadWriteMany, ``size``, the storage class or the cluster default (omitted)."""
    meta = cache["metadata"]
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    owner = [owner_reference(cache)] if meta.get("uid") else []
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": pvc_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": {CACHE_LABEL: meta["name"], **MANAGED_BY},
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


def fill_command(source_uri: str) -> list[str]:
    """The fill container's command: Modelplane's downloader into the mounted PVC, reporting its verdict
    (the completion marker's summary, or the typed error) through the termination message."""
    return ["modelplane", "cache", "fill", source_uri, CACHE_MOUNT_PATH, "--termination-log", TERMINATION_LOG]


def render_job(
    cache: Mapping[str, Any], source_uri: str, attempt: int, env: list[dict[str, Any]], settings: JobSettings
) -> dict[str, Any]:
    """The ``batch/v1`` Job filling the cache's PVC: one pod, ``restartPolicy: Never``, the PVC at
    :data:`CACHE_MOUNT_PATH`, an emptyDir ``/tmp``, owned by the ModelCache."""
    meta = cache["metadata"]
    labels = {CACHE_LABEL: meta["name"], **MANAGED_BY}
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
            {"name": "cache", "persistentVolumeClaim": {"claimName": pvc_name(meta["name"])}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    owner = [owner_reference(cache)] if meta.get("uid") else []
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(meta["name"], attempt),
            "namespace": meta["namespace"],
            "labels": {**labels, "modelplane.io/fill-attempt": str(attempt)},
            **({"ownerReferences": owner} if owner else {}),
        },
        "spec": {
            "backoffLimit": settings.backoff_limit,
            "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def job_state(job: Mapping[str, Any] | None) -> FillState:
    """A Job's state as a kubelet and the job controller report it (conditions first, then counters)."""
    if not job:
        return FillState.NONE
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return FillState.SUCCEEDED
        if condition.get("type") in ("Failed", "FailureTarget"):
            return FillState.FAILED
    return FillState.RUNNING


def job_failure_message(job: Mapping[str, Any]) -> str:
    """The Job's own Failed condition (e.g. ``BackoffLimitExceeded: Job has reached the specified backoff limit``)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return ": ".join(part for part in (condition.get("reason"), condition.get("message")) if part)
    return "the fill Job failed"


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


_TYPED_FAILURE_LINE = re.compile(r"^cache fill failed \(([A-Za-z]+)\): (.+)$")


# ---------------------------------------------------------------------------------------- decide


def storage_failure(pvc_phase: str | None, pvc: str, previous: Failure | None) -> tuple[bool, Failure | None]:
    """Whether the PVC decides the failure: a Lost claim is a :data:`PVC_LOST` failure; a PVCLost
    failure whose claim is gone (a person deleted it) is cleared, so the cache is created anew."""
    if pvc_phase == "Lost":
        return True, Failure(
            PVC_LOST, f"PVC {pvc} lost its volume; delete the PVC and warm-caches creates and fills a new one"
        )
    if previous is not None and previous.reason == PVC_LOST and pvc_phase is None:
        return True, None
    return False, previous


def retry_due(obs: Observation, policy: RetryPolicy, now: datetime) -> datetime | None:
    """When the failed fill may be retried (``None``: never, the failure is terminal or attempts are spent)."""
    if obs.failure is None or obs.failure.reason in TERMINAL_REASONS or obs.attempts >= policy.max_attempts:
        return None
    since = obs.failed_at or now
    return since + policy.delay(max(1, obs.attempts))


def next_step(obs: Observation, policy: RetryPolicy, now: datetime) -> Step:
    """The next action for one cache, from what was observed."""
    if obs.fill == FillState.SUCCEEDED:
        return Step.DONE
    if obs.failure is not None:
        due = retry_due(obs, policy, now)
        if due is None:
            return Step.GIVE_UP
        if now < due:
            return Step.WAIT
        return Step.CREATE_PVC if obs.pvc_phase in (None, "Lost") else Step.START_FILL
    if obs.pvc_phase is None:
        return Step.CREATE_PVC
    if obs.fill == FillState.RUNNING:
        return Step.WAIT
    if obs.attempts >= policy.max_attempts:
        return Step.GIVE_UP
    return Step.START_FILL


# ---------------------------------------------------------------------------------------- status


def _storage_condition(phase: str | None, pvc: str) -> ConditionUpdate:
    if phase is None:
        return ConditionUpdate(STORAGE_READY, "False", PVC_PENDING, f"PVC {pvc} not created yet")
    if phase == "Bound":
        return ConditionUpdate(STORAGE_READY, "True", PVC_BOUND, f"PVC {pvc} is bound")
    if phase == "Pending":
        return ConditionUpdate(STORAGE_READY, "False", PVC_PROVISIONING, f"PVC {pvc} is being provisioned")
    if phase == "Lost":
        return ConditionUpdate(STORAGE_READY, "False", PVC_LOST, f"PVC {pvc} lost its volume")
    return ConditionUpdate(STORAGE_READY, "Unknown", "PVCPhaseUnknown", f"PVC {pvc} is in phase {phase!r}")


def cache_status(
    previous: Mapping[str, Any] | None, obs: Observation, policy: RetryPolicy, now: datetime
) -> dict[str, Any]:
    """The ModelCache status for ``obs``: ``status`` enum, the four conditions, ``persistentVolumeClaim``
    and ``observedGeneration``; ``lastUsed`` is kept as it was."""
    previous = dict(previous or {})
    storage = _storage_condition(obs.pvc_phase, obs.pvc_name)
    if obs.fill == FillState.SUCCEEDED:
        state = "Available"
        ready = ConditionUpdate(READY, "True", WARM, "the model is in the cache and its completion marker was verified")
        progressing = ConditionUpdate(PROGRESSING, "False", WARM, "the cache is filled")
        failure = ConditionUpdate(FAILURE, "False", NO_FAILURE, "no failure")
    elif obs.failure is not None:
        state = "Failed"
        due = retry_due(obs, policy, now)
        if due is None:
            limit = (
                ""
                if obs.failure.reason in TERMINAL_REASONS
                else f" (gave up after {obs.attempts} attempts; change the ModelCache spec or delete it to retry)"
            )
            progressing = ConditionUpdate(PROGRESSING, "False", obs.failure.reason, f"not retried{limit}")
        else:
            progressing = ConditionUpdate(
                PROGRESSING,
                "False",
                RETRY_BACKOFF,
                f"attempt {obs.attempts + 1} of {policy.max_attempts} at {format_time(due)} or later",
            )
        ready = ConditionUpdate(READY, "False", obs.failure.reason, obs.failure.message)
        failure = ConditionUpdate(FAILURE, "True", obs.failure.reason, obs.failure.message)
    else:
        failure = ConditionUpdate(FAILURE, "False", NO_FAILURE, "no failure")
        if obs.pvc_phase in (None, "Lost"):
            state = "Pending" if obs.pvc_phase is None and obs.attempts == 0 else "Progressing"
            ready = ConditionUpdate(READY, "False", WAITING_FOR_PVC, "waiting for the cache volume")
            progressing = ConditionUpdate(PROGRESSING, "True", WAITING_FOR_PVC, "creating the cache volume")
        elif obs.fill == FillState.RUNNING or obs.attempts > 0 or obs.pvc_phase in ("Bound", "Pending"):
            state = "Progressing"
            ready = ConditionUpdate(READY, "False", DOWNLOADING, "the model is being downloaded into the cache")
            progressing = ConditionUpdate(
                PROGRESSING, "True", DOWNLOADING, f"fill attempt {max(1, obs.attempts)} of {policy.max_attempts}"
            )
        else:
            state = "Pending"
            ready = ConditionUpdate(READY, "False", WAITING_FOR_PVC, "waiting for the cache volume")
            progressing = ConditionUpdate(PROGRESSING, "True", WAITING_FOR_PVC, "the cache volume is not ready")
    conditions = set_conditions(
        previous.get("conditions") or [], [storage, ready, progressing, failure], now, obs.generation
    )
    status: dict[str, Any] = {
        "status": state,
        "conditions": conditions,
        "persistentVolumeClaim": obs.pvc_name,
        "observedGeneration": obs.generation,
    }
    if previous.get("lastUsed"):
        status["lastUsed"] = previous["lastUsed"]
    return status


def failure_of(status: Mapping[str, Any] | None) -> tuple[Failure | None, datetime | None]:
    """The failure a previous pass recorded (the ``Failure`` condition when True), with its time."""
    for condition in (status or {}).get("conditions") or []:
        if condition.get("type") == FAILURE and condition.get("status") == "True":
            when = condition.get("lastTransitionTime")
            return Failure(condition.get("reason") or DOWNLOAD_FAILED, condition.get("message") or ""), (
                parse_time(when) if when else None
            )
    return None, None


# -------------------------------------------------------------------------------------------- GC


def claims_mounted_by(obj: Mapping[str, Any]) -> set[str]:
    """PVC names a Pod, a workload's pod template or a KServe InferenceService's components mount."""
    spec = obj.get("spec") or {}
    pod_specs: list[Mapping[str, Any]] = []
    kind = obj.get("kind")
    if kind == "Pod":
        pod_specs.append(spec)
    elif kind == "InferenceService":
        pod_specs.extend(spec.get(part) or {} for part in ("predictor", "transformer", "explainer"))
    else:
        pod_specs.append(((spec.get("template") or {}).get("spec")) or {})
    claims: set[str] = set()
    for pod_spec in pod_specs:
        for volume in pod_spec.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                claims.add(claim)
    return claims


@dataclass(frozen=True)
class GcVerdict:
    """Whether a cache may be garbage-collected, and why (for the report)."""

    delete: bool
    reason: str


def gc_verdict(cache: Mapping[str, Any], mounted_claims: set[str], unused_after: timedelta, now: datetime) -> GcVerdict:
    """A cache is deleted when no workload used it for ``unused_after`` (``status.lastUsed``, else its
    creation time) and nothing mounts its PVC now; a fill in progress is never collected."""
    status = cache.get("status") or {}
    claim = status.get("persistentVolumeClaim") or pvc_name(cache["metadata"]["name"])
    if claim in mounted_claims:
        return GcVerdict(False, f"PVC {claim} is mounted")
    if status.get("status") == "Progressing":
        return GcVerdict(False, "being filled")
    stamp = status.get("lastUsed") or cache["metadata"].get("creationTimestamp")
    if not stamp:
        return GcVerdict(False, "no lastUsed or creation time")
    last = parse_time(stamp)
    if now - last < unused_after:
        return GcVerdict(False, f"used {format_time(last)}")
    what = "last used" if status.get("lastUsed") else "never used; created"
    return GcVerdict(True, f"{what} {format_time(last)}, not mounted")
