"""engine.caches.plan (status machine, retries), engine.caches.fill (credentials env, manifests, fill reports) and
engine.caches.gc (GC verdicts)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from engine.api.aim import AIMNamespaceConfig, ModelCache, ModelCacheSpec, ModelCacheStatus
from engine.api.meta import EnvVar
from engine.api.views import Job, PersistentVolumeClaim, Pod
from engine.caches.fill import (
    JobSettings,
    download_env,
    fill_job_verdict,
    fill_report,
    job_state,
    pvc_request,
    pvc_size_for,
    read_fill_report,
    render_job,
    render_pvc,
    storage_class_for,
    volume_too_small,
)
from engine.caches.gc import gc_verdict
from engine.caches.plan import (
    REQUESTERS_MAX_BYTES,
    CacheEvent,
    Failure,
    FillState,
    Observation,
    RetryPolicy,
    Step,
    attempts_annotation,
    cache_status,
    failure_of,
    initial_observation,
    job_name,
    next_step,
    observe_fill,
    parse_attempts,
    pass_outcome,
    pvc_name,
    pvc_phase,
    source_of,
    storage_failure,
    with_requester,
)

NOW = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=3, backoff_s=60)
CACHE = {
    "apiVersion": "aim.silogen.ai/v1alpha1",
    "kind": "ModelCache",
    "metadata": {"name": "llama", "namespace": "ns", "uid": "u-1", "generation": 2},
    "spec": {"sourceUri": "hf://org/llama"},
}


def typed(cache: dict) -> ModelCache:
    """A ModelCache as the warm-caches flow hands it to the engine (the boundary's model, with its status)."""
    return ModelCache.model_validate(cache)


def previous(status: dict) -> ModelCacheStatus | None:
    """A status as the warm-caches flow hands it to the engine: read tolerantly by the boundary."""
    return typed({**CACHE, "status": status}).status


def obs(**changes: object) -> Observation:
    base = dict(generation=2, pvc_name="llama-cache", pvc_phase="Bound", fill=FillState.NONE, attempts=0)
    base.update(changes)
    return Observation(**base)  # type: ignore[arg-type]


def conditions(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_status_goes_pending_progressing_available() -> None:
    pending = cache_status(None, obs(pvc_phase=None), POLICY, NOW)
    assert pending["status"] == "Pending" and pending["persistentVolumeClaim"] == "llama-cache"
    assert pending["observedGeneration"] == 2
    assert conditions(pending)["StorageReady"] == ("False", "PVCPending")
    assert conditions(pending)["Failure"] == ("False", "NoFailure")

    running = cache_status(
        previous(pending), obs(fill=FillState.RUNNING, attempts=1), POLICY, NOW + timedelta(seconds=5)
    )
    assert running["status"] == "Progressing"
    assert conditions(running)["Ready"] == ("False", "Downloading")
    assert conditions(running)["StorageReady"] == ("True", "PVCBound")

    done = cache_status(
        previous({**running, "lastUsed": "2026-11-01T00:00:00Z"}),
        obs(fill=FillState.SUCCEEDED, attempts=1),
        POLICY,
        NOW,
    )
    assert done["status"] == "Available" and done["lastUsed"] == "2026-11-01T00:00:00Z"
    assert conditions(done)["Ready"] == ("True", "Warm")


def test_the_typed_previous_status_keeps_transition_times_and_last_used() -> None:
    """cache_status reads the previous status as the boundary parsed it: a condition whose status does not
    change keeps its lastTransitionTime (as written, to the second), the others move to now, lastUsed is
    kept; a condition that does not parse is read as absent (it is set anew), not a crash."""
    from engine.api.validate import with_status

    old = "2026-01-02T03:04:05Z"
    written = {
        "status": "Progressing",
        "lastUsed": "2026-11-01T00:00:00Z",
        "conditions": [
            {"type": "StorageReady", "status": "True", "reason": "PVCBound", "message": "m", "lastTransitionTime": old},
            {"type": "Ready", "status": "False", "reason": "Downloading", "message": "m", "lastTransitionTime": old},
            {
                "type": "Progressing",
                "status": "True",
                "reason": "Downloading",
                "message": "m",
                "lastTransitionTime": old,
            },
            {"type": "Failure", "status": "False", "reason": "NoFailure", "message": "m", "lastTransitionTime": old},
        ],
    }
    parsed, dropped = with_status(typed(CACHE), written)
    assert dropped == [] and isinstance(parsed, ModelCache)
    done = cache_status(parsed.status, obs(fill=FillState.SUCCEEDED, attempts=1), POLICY, NOW)
    times = {c["type"]: c["lastTransitionTime"] for c in done["conditions"]}
    assert times == {
        "StorageReady": old,
        "Ready": "2026-11-23T10:00:00Z",
        "Progressing": "2026-11-23T10:00:00Z",
        "Failure": old,
    }
    assert [c["type"] for c in done["conditions"]] == ["StorageReady", "Ready", "Progressing", "Failure"]
    assert done["lastUsed"] == "2026-11-01T00:00:00Z"

    broken = {**written, "conditions": [{**written["conditions"][0], "status": "Maybe"}, *written["conditions"][1:]]}
    parsed, dropped = with_status(typed(CACHE), broken)
    assert dropped == ["status.conditions[0]"] and isinstance(parsed, ModelCache)
    again = cache_status(parsed.status, obs(fill=FillState.SUCCEEDED, attempts=1), POLICY, NOW)
    assert {c["type"]: c["lastTransitionTime"] for c in again["conditions"]}["Failure"] == old
    assert {c["type"]: c["lastTransitionTime"] for c in again["conditions"]}["StorageReady"] == "2026-11-23T10:00:00Z"


def test_a_status_without_a_recorded_state_is_not_read_as_pending() -> None:
    """A status holding only lastUsed (a rollout wrote it before any pass) records no state: the first pass's
    Pending is a change (a Prefect event), not the API model's default ``Pending``."""
    first = pass_outcome(previous({"lastUsed": "2026-11-01T00:00:00Z"}), obs(pvc_phase=None), None, POLICY, NOW, "u")
    assert first.status["status"] == "Pending" and first.changed
    assert first.status["lastUsed"] == "2026-11-01T00:00:00Z"
    assert not pass_outcome(previous(first.status), obs(pvc_phase=None), None, POLICY, NOW, "u").changed
    assert pass_outcome(None, obs(pvc_phase=None), None, POLICY, NOW, "u").changed


def test_a_failure_is_retried_with_backoff_then_given_up() -> None:
    failed = obs(
        fill=FillState.FAILED, attempts=1, failure=Failure("AuthenticationFailed", "token rejected"), failed_at=NOW
    )
    assert next_step(failed, POLICY, NOW + timedelta(seconds=59)) == Step.WAIT
    assert next_step(failed, POLICY, NOW + timedelta(seconds=60)) == Step.START_FILL
    second = obs(fill=FillState.FAILED, attempts=2, failure=failed.failure, failed_at=NOW)
    assert next_step(second, POLICY, NOW + timedelta(seconds=119)) == Step.WAIT  # doubled
    status = cache_status(None, failed, POLICY, NOW)
    assert status["status"] == "Failed"
    assert conditions(status)["Failure"] == ("True", "AuthenticationFailed")
    assert conditions(status)["Progressing"] == ("False", "RetryBackoff")
    last = obs(fill=FillState.FAILED, attempts=3, failure=failed.failure, failed_at=NOW)
    assert next_step(last, POLICY, NOW + timedelta(days=1)) == Step.GIVE_UP
    assert (
        "gave up after 3 attempts"
        in {c["type"]: c for c in cache_status(None, last, POLICY, NOW)["conditions"]}["Progressing"]["message"]
    )


def test_terminal_failures_are_never_retried() -> None:
    small = obs(attempts=1, failure=Failure("InsufficientSpace", "too small"), failed_at=NOW)
    assert next_step(small, POLICY, NOW + timedelta(days=1)) == Step.GIVE_UP


def test_first_steps() -> None:
    assert next_step(obs(pvc_phase=None), POLICY, NOW) == Step.CREATE_PVC
    assert next_step(obs(), POLICY, NOW) == Step.START_FILL
    assert next_step(obs(fill=FillState.RUNNING, attempts=1), POLICY, NOW) == Step.WAIT
    assert next_step(obs(fill=FillState.SUCCEEDED, attempts=1), POLICY, NOW) == Step.DONE


def test_failure_of_reads_back_what_was_written() -> None:
    failed = obs(attempts=1, failure=Failure("SourceNotFound", "no such repo"), failed_at=NOW)
    status = cache_status(None, failed, POLICY, NOW)
    failure, when = failure_of(ModelCacheStatus.model_validate(status))
    assert failure == Failure("SourceNotFound", "no such repo") and when == NOW
    assert failure_of(ModelCacheStatus.model_validate(cache_status(None, obs(), POLICY, NOW))) == (None, None)


def test_attempts_are_per_generation() -> None:
    annotations = attempts_annotation(2, 3)
    assert parse_attempts(annotations, 2) == 3
    assert parse_attempts(annotations, 3) == 0
    assert parse_attempts({"modelplane.io/fill-attempts": "junk"}, 2) == 0
    assert parse_attempts({"modelplane.io/fill-attempts": 61}, 1) == 0  # "1:1" mangled by a YAML 1.1 reader
    assert annotations == {"modelplane.io/fill-attempts": "2/3"}


def test_credentials_come_from_the_namespace_config_and_spec_env_wins() -> None:
    config = {
        "metadata": {"name": "default"},
        "spec": {
            "credentials": {
                "huggingFaceToken": {"name": "hf", "key": "token"},
                "s3": [
                    {
                        "endpointUrl": "http://minio:9000",
                        "accessKeyId": {"name": "s3", "key": "id"},
                        "secretAccessKey": {"name": "s3", "key": "secret"},
                    },
                    {"region": "eu-west-1"},
                ],
            }
        },
    }
    env = download_env([EnvVar(name="HF_TOKEN", value="from-spec")], AIMNamespaceConfig.model_validate(config))
    by_name = {e["name"]: e for e in env.env}
    assert by_name["HF_TOKEN"] == {"name": "HF_TOKEN", "value": "from-spec"}
    assert by_name["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "s3", "key": "id"}
    assert by_name["AWS_ENDPOINT_URL"]["value"] == "http://minio:9000"
    assert "AWS_REGION" not in by_name
    assert env.notes == ["AIMNamespaceConfig default lists 2 S3 credentials; the first (http://minio:9000) is used"]
    region = download_env(
        None, AIMNamespaceConfig.model_validate({"spec": {"credentials": {"s3": [{"region": "eu-west-1"}]}}})
    )
    assert {e["name"]: e.get("value") for e in region.env} == {
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }


def test_storage_class_order() -> None:
    assert storage_class_for("fast", "standard") == "fast"
    assert storage_class_for(None, "standard") == "standard"
    assert storage_class_for("", None) is None


def test_pvc_and_job_manifests() -> None:
    pvc = render_pvc(typed(CACHE), "11Gi", None)
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "11Gi"}}}
    assert pvc["metadata"]["name"] == pvc_name("llama") == "llama-cache"
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
    job = render_job(
        typed(CACHE),
        "hf://org/llama",
        2,
        env,
        JobSettings(image="img:1", backoff_limit=1, ttl_seconds_after_finished=60),
    )
    assert job["metadata"]["name"] == job_name("llama", 2) == "llama-fill-2"
    assert job["spec"]["backoffLimit"] == 1 and job["spec"]["ttlSecondsAfterFinished"] == 60
    assert job["spec"]["activeDeadlineSeconds"] == 3600  # no capacity known: the floor
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "img:1"
    assert container["command"] == [
        "modelplane",
        "cache",
        "fill",
        "hf://org/llama",
        "/cache",
        "--termination-log",
        "/dev/termination-log",
    ]
    assert env[0] in container["env"]
    assert {"name": "cache", "persistentVolumeClaim": {"claimName": "llama-cache"}} in pod["volumes"]
    assert pod["restartPolicy"] == "Never"
    assert len(job_name("x" * 80, 12)) <= 63


@pytest.mark.parametrize(
    ("capacity", "deadline"),
    [(None, 3600), ("1Gi", 3600), ("16Gi", 16384), ("1Ti", 1048576), ("lots", 3600), (17 * 2**30 + 1, 17409)],
)
def test_a_fill_job_may_run_as_long_as_filling_its_volume_at_1_mib_per_second(
    capacity: str | int | None, deadline: int
) -> None:
    """A source that stalls, or sends a byte at a time, keeps every read under its timeout: the Job's deadline is
    what ends such a fill, so the cache is retried instead of Progressing forever."""
    job = render_job(typed(CACHE), "hf://org/llama", 1, [], JobSettings(image="img:1"), capacity)
    assert job["spec"]["activeDeadlineSeconds"] == deadline


def test_a_fill_job_stopped_at_its_deadline_says_so_whatever_its_log_ended_with() -> None:
    failed = {
        "metadata": {"name": "llama-fill-1"},
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "message": "Job was active longer than specified deadline",
                }
            ]
        },
    }
    pod = Pod.model_validate(
        {
            "metadata": {"name": "llama-fill-1-x", "labels": {"job-name": "llama-fill-1"}},
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {"name": "fill", "state": {"terminated": {"exitCode": 143, "message": "filling /cache from hf"}}}
                ],
            },
        }
    )
    state, failure = fill_job_verdict(Job.model_validate(failed), [pod], "hf://org/llama")
    assert state == FillState.FAILED and failure is not None and failure.reason == "DownloadFailed"
    assert "ran out of time (DeadlineExceeded: Job was active longer than specified deadline)" in failure.message


def test_job_state_follows_the_job_controller() -> None:
    assert job_state(None) == FillState.NONE
    assert job_state(Job.model_validate({"status": {"active": 1}})) == FillState.RUNNING
    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert job_state(Job.model_validate(complete)) == FillState.SUCCEEDED
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert job_state(Job.model_validate(failed)) == FillState.FAILED


def test_a_fill_jobs_verdict_is_its_pods_report() -> None:
    """Complete alone is not enough: the newest finished pod's termination message must be this source's marker."""
    job = Job.model_validate(
        {"metadata": {"name": "llama-fill-1"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    )

    def pod(name: str, created: str, message: str | None, phase: str = "Succeeded") -> Pod:
        terminated = {"terminated": {"message": message}} if message else {}
        return Pod.model_validate(
            {
                "metadata": {"name": name, "labels": {"job-name": "llama-fill-1"}, "creationTimestamp": created},
                "status": {"phase": phase, "containerStatuses": [{"state": terminated}]},
            }
        )

    report = fill_report({"source": "hf://org/llama", "files": []})
    older = pod("a", "2026-11-23T09:00:00Z", fill_report(reason="AuthenticationFailed", message="401"))
    newer = pod("b", "2026-11-23T09:30:00Z", report)
    assert fill_job_verdict(job, [older, newer], "hf://org/llama") == (FillState.SUCCEEDED, None)
    state, failure = fill_job_verdict(job, [newer], "hf://org/other")
    assert state == FillState.FAILED and failure is not None and failure.reason == "VerificationFailed"
    assert fill_job_verdict(job, [], "hf://org/llama")[0] == FillState.FAILED  # no report at all
    assert fill_job_verdict(None, [newer], "hf://org/llama") == (FillState.NONE, None)
    failed_job = Job.model_validate(
        {
            "metadata": {"name": "llama-fill-1"},
            "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]},
        }
    )
    gave_up = fill_job_verdict(failed_job, [pod("c", "2026-11-23T09:40:00Z", None, "Failed")], "hf://org/llama")
    assert gave_up == (FillState.FAILED, Failure("DownloadFailed", "the fill Job failed (BackoffLimitExceeded)"))


def test_fill_reports_round_trip_and_complete_alone_is_not_enough() -> None:
    marker = {"source": "hf://org/llama", "revision": "abc", "totalBytes": 10, "files": [{"path": "a", "size": 10}]}
    assert read_fill_report(fill_report(marker), "hf://org/llama") == (FillState.SUCCEEDED, None)
    state, failure = read_fill_report(fill_report(marker), "hf://org/other")
    assert state == FillState.FAILED and failure.reason == "VerificationFailed"
    state, failure = read_fill_report(
        fill_report(reason="AuthenticationFailed", message="token rejected"), "hf://org/llama"
    )
    assert failure == Failure("AuthenticationFailed", "token rejected")
    assert read_fill_report("", "hf://org/llama")[1].reason == "VerificationFailed"
    assert read_fill_report("Traceback\nboom", "hf://org/llama")[1] == Failure(
        "DownloadFailed", "the fill failed: boom"
    )
    assert read_fill_report("progress\ncache fill failed (SourceNotFound): no bucket b", "s3://b/m")[1] == Failure(
        "SourceNotFound", "no bucket b"
    )
    # The CLI's line is an ``error:`` line now; a Job of an earlier image still logs it without the prefix.
    assert read_fill_report("error: cache fill failed (SourceNotFound): no bucket b", "s3://b/m")[1] == Failure(
        "SourceNotFound", "no bucket b"
    )
    assert len(fill_report(reason="X", message="m" * 10000)) < 4096
    assert json.loads(fill_report(marker))["files"] == 1


def test_volume_too_small() -> None:
    assert volume_too_small("1Gi", 2 * 1024**3).reason == "InsufficientSpace"
    assert volume_too_small("11Gi", 10 * 1024**3) is None
    assert volume_too_small(None, 5) is None


def test_requesters_are_recorded_once() -> None:
    assert with_requester(None, "A/ns/a") == {"modelplane.io/requested-by": "A/ns/a"}
    assert with_requester({"modelplane.io/requested-by": "A/ns/a"}, "A/ns/a") is None
    assert with_requester({"modelplane.io/requested-by": "B/ns/b"}, "A/ns/a") == {
        "modelplane.io/requested-by": "B/ns/b,A/ns/a"
    }


def test_requesters_keep_the_newest_within_their_bound() -> None:
    """Consumers that come and go for months: the list stays within its bound, the newest kept. Before, it grew
    with each one until the API server refused the cache's annotations (256 KiB) and so every consumer's request."""
    annotations: dict[str, str] = {}
    for i in range(5000):
        annotations.update(with_requester(annotations, f"AIMService/previews/pr-{i:05d}-chat") or {})
    listed = annotations["modelplane.io/requested-by"]
    assert len(listed.encode()) <= REQUESTERS_MAX_BYTES and len(listed.split(",")) > 200  # was 170,000 bytes
    assert listed.endswith(",AIMService/previews/pr-04999-chat") and "pr-00000-" not in listed


def test_gc_deletes_only_unused_unmounted_settled_caches() -> None:
    def cache(status: dict, created: str = "2026-10-01T00:00:00Z") -> ModelCache:
        return typed(
            {
                **CACHE,
                "metadata": {"name": "llama", "namespace": "ns", "creationTimestamp": created},
                "status": status,
            }
        )

    week = timedelta(days=7)
    old = {"status": "Available", "persistentVolumeClaim": "llama-cache", "lastUsed": "2026-11-01T00:00:00Z"}
    assert gc_verdict(cache(old), set(), week, NOW).delete
    assert not gc_verdict(cache(old), {"llama-cache"}, week, NOW).delete
    assert not gc_verdict(cache({**old, "lastUsed": "2026-11-20T00:00:00Z"}), set(), week, NOW).delete
    assert not gc_verdict(cache({**old, "status": "Progressing"}), set(), week, NOW).delete
    never = gc_verdict(cache({"status": "Failed"}), set(), week, NOW)
    assert never.delete and "never used" in never.reason


def test_a_lost_pvc_fails_the_cache_until_a_person_deletes_it() -> None:
    decided, failure = storage_failure("Lost", "llama-cache", None)
    assert decided and failure.reason == "PVCLost" and "delete the PVC" in failure.message
    lost = obs(pvc_phase="Lost", attempts=1, fill=FillState.FAILED, failure=failure, failed_at=NOW)
    assert next_step(lost, POLICY, NOW + timedelta(days=1)) == Step.GIVE_UP
    assert conditions(cache_status(None, lost, POLICY, NOW))["StorageReady"] == ("False", "PVCLost")
    assert storage_failure(None, "llama-cache", failure) == (True, None)  # deleted: start over
    other = Failure("AuthenticationFailed", "x")
    assert storage_failure("Bound", "llama-cache", other) == (False, other)


def test_an_explicit_size_is_the_pvc_request_without_headroom() -> None:
    """Issue 22: spec.size 100Mi became 1Gi and 40Gi became 44Gi; the person's size is the request."""
    assert pvc_request("100Mi", None, 10) == "100Mi"
    assert pvc_request("40Gi", 123, 10) == "40Gi"
    assert pvc_request(None, 10 * 2**30, 10) == "11Gi"  # measured sources keep the headroom
    with pytest.raises(ValueError):
        pvc_request("-1Gi", None, 10)
    with pytest.raises(ValueError):
        pvc_request(None, None, 10)


def test_the_observation_starts_from_the_caches_record() -> None:
    """Attempts and the recorded failure count for the current generation only; no PVC means no phase."""
    failed = cache_status(
        None, obs(attempts=1, fill=FillState.FAILED, failure=Failure("SourceNotFound", "gone")), POLICY, NOW
    )
    cache = {**CACHE, "metadata": {**CACHE["metadata"], **{"annotations": attempts_annotation(2, 1)}}, "status": failed}
    start = initial_observation(typed(cache), PersistentVolumeClaim.model_validate({"status": {"phase": "Bound"}}))
    assert (start.pvc_name, start.pvc_phase, start.attempts) == ("llama-cache", "Bound", 1)
    assert start.failure == Failure("SourceNotFound", "gone") and start.fill == FillState.NONE
    newer = {**cache, "metadata": {**cache["metadata"], "generation": 3}}
    assert initial_observation(typed(newer), None) == Observation(3, "llama-cache", None, FillState.NONE, 0, None, None)
    assert pvc_phase(PersistentVolumeClaim()) == "Pending"


def test_observe_fill_reads_the_jobs_verdict_and_a_vanished_job() -> None:
    running = observe_fill(typed(CACHE), obs(attempts=1), False, (FillState.RUNNING, None), NOW)
    assert running.fill == FillState.RUNNING and running.failure is None
    verdict = Failure("AuthenticationFailed", "401")
    failed = observe_fill(typed(CACHE), obs(attempts=1), False, (FillState.FAILED, verdict), NOW)
    assert (failed.fill, failed.failure, failed.failed_at) == (FillState.FAILED, verdict, NOW)
    progressing = typed({**CACHE, "status": {"status": "Progressing"}})
    gone = observe_fill(progressing, obs(attempts=2), False, (FillState.NONE, None), NOW)
    assert (
        gone.failure is not None and gone.failure.reason == "FillJobMissing" and "llama-fill-2" in gone.failure.message
    )
    assert (
        observe_fill(typed(CACHE), obs(attempts=2), False, (FillState.NONE, None), NOW).failure is None
    )  # never started
    kept = observe_fill(typed(CACHE), obs(attempts=1, failure=verdict), True, (FillState.FAILED, verdict), NOW)
    assert kept.fill == FillState.SUCCEEDED and kept.failure is None  # an Available cache whose marker still holds
    lost = observe_fill(typed(CACHE), obs(pvc_phase="Lost"), False, None, NOW)
    assert lost.failure is not None and lost.failure.reason == "PVCLost"


def test_a_cache_source_must_be_downloadable() -> None:
    assert source_of(ModelCacheSpec(sourceUri="hf://org/llama"))[1] is None
    assert source_of(ModelCacheSpec(sourceUri="pvc://claim/m"))[1] == Failure(
        "InvalidSource",
        "spec.sourceUri: pvc://claim/m is mounted directly, not downloaded; a ModelCache needs hf:// or s3://",
    )
    bad = source_of(ModelCacheSpec(sourceUri="not a source"))[1]
    assert bad is not None and bad.reason == "InvalidSource" and bad.message.startswith("spec.sourceUri: ")


def test_pvc_size_for_names_the_field_at_fault() -> None:
    uri = "hf://org/llama"
    assert pvc_size_for(ModelCacheSpec(sourceUri=uri, size="100Mi"), None, 10) == ("100Mi", None)
    size, failure = pvc_size_for(ModelCacheSpec(sourceUri=uri, size="-1Gi"), None, 10)
    assert (
        size == ""
        and failure is not None
        and failure.reason == "InvalidSize"
        and failure.message.startswith("spec.size: ")
    )
    size, failure = pvc_size_for(ModelCacheSpec(sourceUri=uri), None, 10)
    assert failure is not None and failure.reason == "SizeUnknown"


def test_a_pass_ends_with_the_status_its_transition_events_and_its_row() -> None:
    """engine.caches.plan.pass_outcome decides what the warm-caches flow writes at the end of a pass."""
    broke = Failure("DownloadFailed", "403 from the hub")
    outcome = pass_outcome(previous({"status": "Progressing"}), obs(attempts=1), broke, POLICY, NOW, "hf://org/llama")
    assert outcome.changed and outcome.status["status"] == "Failed" and outcome.obs.failed_at == NOW
    assert outcome.events == (CacheEvent("DownloadFailed", "403 from the hub", warning=True),)
    assert (outcome.reason, outcome.message) == ("DownloadFailed", "403 from the hub")
    again = pass_outcome(
        previous(outcome.status), outcome.obs, broke, POLICY, NOW + timedelta(minutes=1), "hf://org/llama"
    )
    assert not again.changed and again.events == () and again.obs.failed_at == NOW  # the same failure: no new time
    warm = pass_outcome(
        previous(outcome.status),
        obs(attempts=1, fill=FillState.SUCCEEDED, pvc_phase="Bound"),
        None,
        POLICY,
        NOW,
        "hf://org/llama",
        "notes",
    )
    assert warm.changed and warm.status["status"] == "Available" and warm.message == "notes"
    assert warm.events == (CacheEvent("CacheAvailable", f"hf://org/llama is in PVC {warm.obs.pvc_name}"),)


def test_plan_cache_is_the_one_decision_of_a_pass() -> None:
    """engine.caches.reconcile.plan_cache: observation, source check, credentials and next step in one call."""
    from engine.caches.reconcile import CacheFacts, plan_cache

    bound = PersistentVolumeClaim.model_validate({"status": {"phase": "Bound", "capacity": {"storage": "11Gi"}}})
    fresh = plan_cache(typed(CACHE), CacheFacts(None, None), POLICY, NOW)
    assert (fresh.step, fresh.invalid, fresh.source.uri, fresh.obs.pvc_phase) == (
        Step.CREATE_PVC,
        None,
        "hf://org/llama",
        None,
    )
    started = typed({**CACHE, "metadata": {**CACHE["metadata"], "annotations": attempts_annotation(2, 1)}})
    job = Job.model_validate({"metadata": {"name": "llama-fill-1"}, "status": {"active": 1}})
    running = plan_cache(started, CacheFacts(bound, None, job=job), POLICY, NOW)
    assert (running.step, running.obs.attempts, running.obs.fill) == (Step.WAIT, 1, FillState.RUNNING)
    available = typed({**CACHE, "status": {"status": "Available"}})
    assert plan_cache(available, CacheFacts(bound, None), POLICY, NOW).step == Step.DONE
    gone = plan_cache(available, CacheFacts(bound, None, marker_ok=False), POLICY, NOW)
    assert gone.step == Step.START_FILL  # the marker vanished from the volume: fill again
    mounted = typed({**CACHE, "spec": {"sourceUri": "pvc://claim/llama"}})
    invalid = plan_cache(mounted, CacheFacts(None, None), POLICY, NOW)
    assert invalid.invalid is not None and invalid.invalid.message.startswith("spec.sourceUri")
