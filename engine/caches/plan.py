"""What the warm-caches flow decides for one ModelCache, pure: its names, the next step, and its status.

The flow (``flows/warm_caches.py``) gathers an :class:`Observation` per cache (PVC phase, the fill's
state, the completion marker's verdict) and asks :func:`next_step` what to do and :func:`cache_status`
what to report. The status follows seed 004 and the first AIM ModelCache controller
(``Pending -> Progressing -> Available | Failed``; conditions ``StorageReady``, ``Ready``,
``Progressing``, ``Failure``), with Modelplane's completion marker: a cache is ``Available`` only when
the marker the downloader writes last was verified, never on "Job Complete" alone. A failed fill is
retried with backoff (:class:`RetryPolicy`) unless its reason is terminal.

The PVC and fill Job a step creates are rendered by :mod:`engine.caches.fill`; which caches garbage
collection may delete is :mod:`engine.caches.gc`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from engine.api.aim import ModelCache, ModelCacheSpec, ModelCacheStatus
from engine.api.meta import format_time
from engine.api.registry import AIM_API
from engine.api.views import PersistentVolumeClaim
from engine.caches.lookup import recorded_state
from engine.caches.sources import ModelSource, parse_source
from engine.status import ConditionUpdate, set_conditions

MODELCACHE_API_VERSION = AIM_API
CACHE_LABEL = "modelplane.io/cache"
"""On the PVC and fill Jobs: the name of the ModelCache they belong to."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "modelplane"}
ATTEMPTS_ANNOTATION = "modelplane.io/fill-attempts"
"""On the ModelCache: ``<generation>/<fills started for it>`` so retries survive between runs."""
REQUESTED_BY_ANNOTATION = "modelplane.io/requested-by"
"""On the ModelCache: the consumers (``Kind/namespace/name``) that asked for it, comma-separated, oldest first."""
REQUESTERS_MAX_BYTES = 8 * 1024
"""The most of :data:`REQUESTED_BY_ANNOTATION` kept (the oldest consumers dropped first): a shared cache that
consumers come to and go from for months (CI previews) would otherwise grow it without end, until the API server
refused every write of the cache (256 KiB for all of an object's annotations) and so every consumer's request."""

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
ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"
"""A source URI names an S3 endpoint other than the one the credentials in use are configured for."""

TERMINAL_REASONS = frozenset(
    {
        INVALID_SOURCE,
        ENDPOINT_NOT_ALLOWED,
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


def dns_label(text: str, limit: int) -> str:
    """``text`` lower-cased to DNS-1123 characters, cut to ``limit`` with a short hash when cut."""
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "cache"
    if len(clean) <= limit:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{clean[: limit - 9].rstrip('-')}-{digest}"


def pvc_name(cache_name: str) -> str:
    """The PVC of a ModelCache: ``<cache>-cache`` (the AIM controller's name), at most 63 characters."""
    return dns_label(f"{cache_name}-cache", 63)


def job_name(cache_name: str, attempt: int) -> str:
    """The fill Job of one attempt: ``<cache>-fill-<n>``; a retry never reuses a failed Job's name."""
    return f"{dns_label(cache_name, 63 - len(f'-fill-{attempt}'))}-fill-{attempt}"


# -------------------------------------------------------------------------------------- attempts


def parse_attempts(annotations: Mapping[str, object] | None, generation: int | None) -> int:
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
    """The annotation patch adding ``consumer`` last to the cache's requesters, or ``None`` if already listed; the
    oldest are dropped while the list is longer than :data:`REQUESTERS_MAX_BYTES`."""
    current = requested_by(annotations)
    if consumer in current:
        return None
    kept = [*current, consumer]
    while len(kept) > 1 and len(",".join(kept).encode()) > REQUESTERS_MAX_BYTES:
        kept.pop(0)
    return {REQUESTED_BY_ANNOTATION: ",".join(kept)}


# ---------------------------------------------------------------------------------------- decide


def source_of(spec: ModelCacheSpec) -> tuple[ModelSource, Failure | None]:
    """The source a ModelCache holds (``spec.sourceUri``), or the :data:`INVALID_SOURCE` failure naming the field:
    unparseable, or a source that is mounted directly and never downloaded."""
    uri = spec.source_uri
    try:
        source = parse_source(uri)
    except ValueError as exc:
        return ModelSource(scheme="hf"), Failure(INVALID_SOURCE, f"spec.sourceUri: {exc}")
    if not source.downloadable:
        return source, Failure(
            INVALID_SOURCE,
            f"spec.sourceUri: {uri} is mounted directly, not downloaded; a ModelCache needs hf:// or s3://",
        )
    return source, None


def pvc_phase(pvc: PersistentVolumeClaim | None) -> str | None:
    """A PVC's phase (``Pending`` until the API server reports one); ``None`` without a PVC."""
    if pvc is None:
        return None
    return pvc.status.phase or "Pending"


def fill_attempts(cache: ModelCache) -> int:
    """Fills started for the cache's current generation (its :data:`ATTEMPTS_ANNOTATION`)."""
    return parse_attempts(cache.metadata.annotations, cache.metadata.generation)


def initial_observation(cache: ModelCache, pvc: PersistentVolumeClaim | None) -> Observation:
    """What a cache's own record says before this pass reads its fill: the PVC's phase, the fills started
    for this generation, and the failure recorded for it (a failure of an older generation is forgotten)."""
    generation, previous = cache.metadata.generation, cache.status
    current = previous is not None and previous.observed_generation == generation
    failure, failed_at = failure_of(previous) if current else (None, None)
    name = cache.metadata.name or ""
    return Observation(
        generation, pvc_name(name), pvc_phase(pvc), FillState.NONE, fill_attempts(cache), failure, failed_at
    )


def observe_fill(
    cache: ModelCache,
    obs: Observation,
    still_filled: bool,
    job: tuple[FillState, Failure | None] | None,
    now: datetime,
) -> Observation:
    """``obs`` with what the fill reported this pass, then what the PVC decides (:func:`storage_failure`).

    ``still_filled``: an Available cache whose volume still holds its verified marker; ``job``: the verdict
    of the current attempt's fill Job (cluster backend, once a fill was started). A Job gone before its
    result was read counts as a failed fill (:data:`FILL_JOB_MISSING`), so Jobs that keep vanishing
    cannot be recreated forever.
    """
    if still_filled:
        obs = replace(obs, fill=FillState.SUCCEEDED, failure=None)
    elif job is not None:
        state, reported = job
        if state == FillState.FAILED and reported is not None:
            same = obs.failure is not None and obs.failure.reason == reported.reason
            obs = replace(obs, fill=state, failure=reported, failed_at=obs.failed_at if same else now)
        elif state in (FillState.RUNNING, FillState.SUCCEEDED):
            obs = replace(obs, fill=state, failure=None)
        elif state == FillState.NONE and obs.failure is None and cache.status and cache.status.status == "Progressing":
            name = job_name(cache.metadata.name or "", obs.attempts)
            obs = replace(
                obs,
                fill=FillState.FAILED,
                failed_at=now,
                failure=Failure(
                    FILL_JOB_MISSING,
                    f"the fill Job {name} is gone before its result was read "
                    "(deleted, or ttlSecondsAfterFinished shorter than the warm-caches interval); it is retried",
                ),
            )
    decided, storage = storage_failure(obs.pvc_phase, obs.pvc_name, obs.failure)
    if decided:
        obs = replace(
            obs,
            failure=storage,
            fill=FillState.FAILED if storage else FillState.NONE,
            failed_at=(obs.failed_at or now) if storage else None,
        )
    return obs


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
    previous: ModelCacheStatus | None, obs: Observation, policy: RetryPolicy, now: datetime
) -> dict[str, Any]:
    """The ModelCache status to write for ``obs`` (API JSON shape): ``status`` enum, the four conditions,
    ``persistentVolumeClaim`` and ``observedGeneration``.

    ``previous`` is the status the cache carries (as the boundary read it): an unchanged condition keeps
    its ``lastTransitionTime`` and ``lastUsed`` is kept as it was."""
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
    held = (previous.conditions if previous is not None else None) or []
    conditions = set_conditions(held, [storage, ready, progressing, failure], now, obs.generation)
    status: dict[str, Any] = {
        "status": state,
        "conditions": conditions,
        "persistentVolumeClaim": obs.pvc_name,
        "observedGeneration": obs.generation,
    }
    if previous is not None and previous.last_used is not None:
        status["lastUsed"] = format_time(previous.last_used)
    return status


def failed(obs: Observation, failure: Failure, now: datetime) -> Observation:
    """``obs`` after a fill attempt that failed with ``failure`` at ``now``."""
    return replace(obs, fill=FillState.FAILED, failure=failure, failed_at=now)


@dataclass(frozen=True)
class CacheEvent:
    """A Kubernetes Event to post on the cache."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class PassOutcome:
    """What one pass concludes for a cache, for the flow to write: the status, the Events of its transition,
    whether its ``status`` changed (a Prefect event then), and the reason and message its report row shows."""

    obs: Observation
    status: dict[str, Any]
    events: tuple[CacheEvent, ...]
    changed: bool
    reason: str
    message: str


def pass_outcome(
    previous: ModelCacheStatus | None,
    obs: Observation,
    failure: Failure | None,
    policy: RetryPolicy,
    now: datetime,
    source_uri: str,
    notes: str = "",
) -> PassOutcome:
    """The end of a pass over one cache: ``obs`` (failed with ``failure`` unless it already failed for the
    same reason) as a status, an Event when the cache became Available or Failed (a change from the
    ``status`` recorded in ``previous``), and its row's reason (the ``Failure`` condition's when it failed,
    else the ``Progressing`` one's) and message."""
    if failure is not None and (obs.failure is None or obs.failure.reason != failure.reason):
        obs = failed(obs, failure, obs.failed_at or now)
    status = cache_status(previous, obs, policy, now)
    changed = status["status"] != recorded_state(previous)
    events: tuple[CacheEvent, ...] = ()
    if changed and status["status"] == "Available":
        events = (CacheEvent("CacheAvailable", f"{source_uri} is in PVC {obs.pvc_name}"),)
    elif changed and status["status"] == "Failed" and obs.failure is not None:
        events = (CacheEvent(obs.failure.reason, obs.failure.message, warning=True),)
    wanted = FAILURE if obs.failure else PROGRESSING
    reason = next((c["reason"] for c in status["conditions"] if c["type"] == wanted), DOWNLOADING)
    return PassOutcome(obs, status, events, changed, reason, obs.failure.message if obs.failure else notes)


def failure_of(status: ModelCacheStatus | None) -> tuple[Failure | None, datetime | None]:
    """The failure a previous pass recorded (the ``Failure`` condition when True), with its time."""
    for condition in (status.conditions if status is not None else None) or []:
        if condition.type == FAILURE and condition.status == "True":
            return Failure(condition.reason or DOWNLOAD_FAILED, condition.message or ""), condition.last_transition_time
    return None, None
