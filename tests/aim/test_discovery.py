"""engine.aim.discovery: label parsing, the persisted record, derived names and auto-created templates."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from engine.aim.discovery import (
    MAX_LABEL_CHARS,
    DiscoveryRecord,
    ImageMetadata,
    LabelError,
    auto_templates,
    metadata_condition,
    needs_fetch,
    parse_image_labels,
    parse_recommended_deployments,
    ready_condition,
    retry_after,
    template_name,
)
from engine.aim.names import derived
from engine.api.aim import MAX_GPUS_PER_REPLICA, AIMClusterModel

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REAL = (
    "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'latency', 'description': 'Optimized for latency on MI300X'}, "
    "{'gpuModel': 'MI300X', 'gpuCount': 1, 'precision': 'fp8', 'metric': 'throughput', 'description': 'Optimized for throughput'}"
)


def test_comma_separated_single_quoted_objects_as_real_images_carry_them() -> None:
    assert parse_recommended_deployments(REAL) == [
        {
            "gpuModel": "MI300X",
            "gpuCount": 1,
            "precision": "fp8",
            "metric": "latency",
            "description": "Optimized for latency on MI300X",
        },
        {
            "gpuModel": "MI300X",
            "gpuCount": 1,
            "precision": "fp8",
            "metric": "throughput",
            "description": "Optimized for throughput",
        },
    ]


def test_json_array_absent_keys_omitted_unknown_dropped() -> None:
    text = '[{"gpuModel": "MI325X", "gpuCount": 8, "profileId": "p-1", "extra": 1, "metric": null}]'
    assert parse_recommended_deployments(text) == [{"gpuModel": "MI325X", "gpuCount": 8, "profileId": "p-1"}]
    assert parse_recommended_deployments("  ") == []
    assert parse_recommended_deployments("[]") == []


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "{'gpuCount': 'one'}",
        '"a string"',
        "[1, 2]",
        "{'a': 1}, 3",
        "{'gpuModel': 3}",
        "{'description': 'it's broken'}",
        '{"gpuCount": true}',
    ],
)
def test_text_that_is_not_a_list_of_objects_raises(text: str) -> None:
    with pytest.raises(ValueError):
        parse_recommended_deployments(text)


def test_labels_with_fallback_prefix_lists_and_bool() -> None:
    labels = {
        "org.amd.silogen.model.canonicalName": "meta/llama",
        "com.amd.aim.model.canonicalName": "",
        "com.amd.aim.model.source": "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct",
        "com.amd.aim.model.variants": "amd/Llama-3.1-8B-Instruct-FP8-KV, meta-llama/Llama-3.1-8B-Instruct,",
        "com.amd.aim.model.tags": "chat, ,text",
        "com.amd.aim.hfToken.required": "True",
        "org.amd.silogen.model.recommendedDeployments": REAL,
        "org.opencontainers.image.version": "0.8.4",
    }
    meta = parse_image_labels(labels)
    assert meta.canonical_name == "meta/llama"
    assert meta.variants == ("amd/Llama-3.1-8B-Instruct-FP8-KV", "meta-llama/Llama-3.1-8B-Instruct")
    assert meta.tags == ("chat", "text") and meta.hf_token_required is True
    assert len(meta.recommended_deployments) == 2 and meta.oci == {"version": "0.8.4"}
    assert parse_image_labels({"com.amd.aim.hfToken.required": "maybe"}).hf_token_required is None
    assert not parse_image_labels({}).labelled


def test_an_unparsable_label_is_named() -> None:
    with pytest.raises(LabelError) as info:
        parse_image_labels({"com.amd.aim.model.recommendedDeployments": "{broken"})
    assert info.value.label == "com.amd.aim.model.recommendedDeployments"
    assert "com.amd.aim.model.recommendedDeployments" in str(info.value)


def test_record_round_trips_and_decides_when_to_read_again() -> None:
    meta = parse_image_labels(
        {"com.amd.aim.model.recommendedDeployments": REAL, "com.amd.aim.model.source": "hf://a/b"}
    )
    record = DiscoveryRecord(image="r/x:1", read_at=NOW, digest="sha256:ab", metadata=meta)
    again = DiscoveryRecord.from_annotations({"aim.silogen.ai/image-metadata": record.to_json()})
    assert again == record
    day = timedelta(days=1)
    assert not needs_fetch(record, "r/x:1", NOW + timedelta(hours=1), day)
    assert needs_fetch(record, "r/x:2", NOW, day)  # spec.image changed
    assert needs_fetch(record, "r/x:1", NOW + day, day)  # resync
    assert needs_fetch(None, "r/x:1", NOW, day)
    missing = DiscoveryRecord(image="r/x:1", read_at=NOW, reason="ImageNotFound", message="404", attempts=1)
    assert not needs_fetch(missing, "r/x:1", NOW + timedelta(minutes=4), day)  # terminal, backing off
    refused = DiscoveryRecord(image="r/x:1", read_at=NOW, reason="ImagePullAuthFailure", message="401", attempts=1)
    assert needs_fetch(refused, "r/x:1", NOW, day)  # transient: every run
    assert DiscoveryRecord.from_annotations({"aim.silogen.ai/image-metadata": "{not json"}) is None


def test_a_missing_image_is_read_again_with_a_bounded_backoff() -> None:
    """A tag pushed after the first 404 is picked up within minutes, not at the daily resync; the wait
    doubles per consecutive miss and never exceeds the resync interval."""
    day = timedelta(days=1)

    def missing(attempts: int) -> DiscoveryRecord:
        return DiscoveryRecord(image="r/x:1", read_at=NOW, reason="ImageNotFound", message="404", attempts=attempts)

    assert retry_after(missing(1), day) == timedelta(minutes=5)
    assert retry_after(missing(3), day) == timedelta(minutes=20)
    assert retry_after(missing(40), day) == day
    assert retry_after(missing(1), timedelta(minutes=2)) == timedelta(minutes=2)
    assert needs_fetch(missing(1), "r/x:1", NOW + timedelta(minutes=5), day)
    assert not needs_fetch(missing(2), "r/x:1", NOW + timedelta(minutes=9), day)
    assert needs_fetch(missing(2), "r/x:1", NOW + timedelta(minutes=10), day)
    # A malformed label does not change without a push: it waits for the resync.
    malformed = DiscoveryRecord(
        image="r/x:1", read_at=NOW, reason="MetadataExtractionFailed", message="bad", attempts=1
    )
    assert not needs_fetch(malformed, "r/x:1", NOW + timedelta(hours=23), day)


def test_valid_json_with_an_apostrophe_in_a_description_is_accepted() -> None:
    text = '[{"gpuModel": "MI300X", "gpuCount": 1, "metric": "latency", "precision": "fp8", "description": "Meta\'s fastest profile"}]'
    assert parse_recommended_deployments(text)[0]["description"] == "Meta's fastest profile"
    unbracketed = (
        '{"gpuModel": "MI300X", "gpuCount": 1, "description": "it\'s quick"}, {"gpuModel": "MI300X", "gpuCount": 2}'
    )
    assert [d["gpuCount"] for d in parse_recommended_deployments(unbracketed)] == [1, 2]


def test_derived_names_match_aim_engine() -> None:
    image = "docker.io/amdenterpriseai/aim-meta-llama-llama-3-1-8b-instruct:0.8.4"
    deployment = {"gpuModel": "MI300X", "gpuCount": 1, "metric": "latency", "precision": "fp8"}
    assert (
        template_name("meta-llama-3-1-8b", image, deployment)
        == "docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-lat-fp8-5c23"
    )
    assert derived(["llama-chat"], ["team-a"], max_len=63 - 11 - len("team-a")) == "llama-chat-e204f50a"
    long = derived(["x" * 80, "Some_Part!"], ["h"], hash_len=8)
    assert len(long) == 63 and long.split("-")[1:3] == ["some", "part"] and set(long.split("-")[0]) == {"x"}
    # Two models on one image never collide.
    assert template_name("a", image, deployment) != template_name("b", image, deployment)


def test_auto_templates_one_per_deployment_and_namespace() -> None:
    model = AIMClusterModel.model_validate(
        {
            "apiVersion": "aim.silogen.ai/v1alpha1",
            "kind": "AIMClusterModel",
            "metadata": {"name": "llama", "uid": "u-1"},
            "spec": {"name": "meta/llama:1", "image": "r.io/llama:1"},
        }
    )
    meta = ImageMetadata(
        recommended_deployments=(
            {"gpuModel": "MI300X", "gpuCount": 1, "metric": "latency", "precision": "fp8", "profileId": "p1"},
            {"gpuModel": "MI300X", "gpuCount": 2, "metric": "throughput"},
            {"gpuModel": "MI300X", "gpuCount": 1, "metric": "speed"},
        )
    )
    plan = auto_templates(model, meta, ["b", "a"])
    assert [(t["metadata"]["namespace"], t["spec"].get("precision")) for t in plan.templates] == [
        ("a", "fp8"),
        ("b", "fp8"),
        ("a", "auto"),
        ("b", "auto"),
    ]
    first = plan.templates[0]
    assert first["metadata"]["labels"] == {"aim.silogen.ai/model": "llama", "aim.silogen.ai/origin": "auto-generated"}
    assert first["metadata"]["annotations"] == {"aim.silogen.ai/profile-id": "p1"}
    assert first["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert first["spec"] == {
        "model": "meta/llama:1",
        "metric": "latency",
        "precision": "fp8",
        "gpusPerReplica": 1,
        "gpuModel": "MI300X",
    }
    assert plan.skipped == ["recommendedDeployments[2]: metric 'speed' is not one of latency, throughput"]


def test_deployments_giving_one_template_name_are_one_template_the_first_ones() -> None:
    model = AIMClusterModel.model_validate(
        {
            "apiVersion": "aim.silogen.ai/v1alpha1",
            "kind": "AIMClusterModel",
            "metadata": {"name": "llama", "uid": "u-1"},
            "spec": {"name": "meta/llama:1", "image": "r.io/llama:1"},
        }
    )
    lat = {"gpuModel": "MI300X", "gpuCount": 1, "metric": "latency", "precision": "fp8"}
    meta = ImageMetadata(
        recommended_deployments=(
            {**lat, "profileId": "p1"},
            {},
            {**lat, "profileId": "p2", "description": "the same template, another profile"},
            {"metric": "speed"},
            *([lat] * 3),
            {},
        )
    )
    plan = auto_templates(model, meta, ["a"])
    assert [t["metadata"].get("annotations") for t in plan.templates] == [{"aim.silogen.ai/profile-id": "p1"}, None]
    assert plan.skipped == [
        "recommendedDeployments[3]: metric 'speed' is not one of latency, throughput",
        "5 recommendedDeployments entries repeat an earlier one's template: [2] as [0], [4] as [0], [5] as [0], …",
    ]


def test_model_conditions() -> None:
    ok = DiscoveryRecord(
        image="i",
        read_at=NOW,
        digest="sha256:1",
        metadata=parse_image_labels({"com.amd.aim.model.recommendedDeployments": REAL}),
    )
    assert metadata_condition(ok).reason == "MetadataExtracted"
    assert (
        metadata_condition(DiscoveryRecord(image="i", read_at=NOW, digest="d", metadata=ImageMetadata())).reason
        == "ImageFound"
    )
    failed = DiscoveryRecord(image="i", read_at=NOW, reason="ImageNotFound", message="gone")
    assert (metadata_condition(failed).status, metadata_condition(failed).reason) == ("False", "ImageNotFound")
    assert ready_condition(ok, [], True).reason == "CreatingTemplates"
    assert ready_condition(ok, ["Available", "Available"], True).reason == "AllTemplatesReady"
    assert ready_condition(ok, ["Available", "Pending"], True).reason == "SomeTemplatesReady"
    assert ready_condition(ok, ["Failed", "Pending"], True).reason == "SomeTemplatesDegraded"
    assert ready_condition(ok, ["Failed"], True).reason == "AllTemplatesFailed"
    assert ready_condition(None, [], False).reason == "AwaitingMetadata"


DEPLOYMENTS = "com.amd.aim.model.recommendedDeployments"


@pytest.mark.parametrize(
    "text",
    [
        # Deeper than the decoder's recursion limit on every supported Python (3.13's decoder holds 5,000 levels,
        # 10,000 it does not), within the label bound: a RecursionError before.
        "[" * 10_000 + "]" * 10_000,
        "{" + '"a":{' * 10_000 + "}" * 10_001,
        '[{"gpuCount": 1' + "0" * 5000 + "}]",  # more digits than int() converts
    ],
)
def test_a_label_the_decoder_cannot_hold_is_a_label_error(text: str) -> None:
    with pytest.raises(LabelError) as info:
        parse_image_labels({DEPLOYMENTS: text})
    assert info.value.label == DEPLOYMENTS


def test_a_label_longer_than_the_bound_is_refused_before_it_is_parsed() -> None:
    hostile = "[" * 50000 + "]" * 50000
    with pytest.raises(LabelError) as info:
        parse_image_labels({DEPLOYMENTS: hostile})
    assert f"longer than {MAX_LABEL_CHARS}" in str(info.value)
    with pytest.raises(LabelError) as long_text:
        parse_image_labels({"com.amd.aim.description.full": "x" * (MAX_LABEL_CHARS + 1)})
    assert long_text.value.label == "com.amd.aim.description.full"
    assert parse_image_labels({"com.amd.aim.description.full": "x" * MAX_LABEL_CHARS}).description


def test_a_gpu_count_above_the_templates_bound_is_refused() -> None:
    """10**30 GPUs would become AIMServiceTemplates (and a container's GPU request) the API server refuses."""
    with pytest.raises(LabelError) as info:
        parse_image_labels({DEPLOYMENTS: f'[{{"gpuModel": "MI300X", "gpuCount": {10**30}}}]'})
    assert f"above {MAX_GPUS_PER_REPLICA}" in str(info.value)
    at_bound = parse_recommended_deployments(f'[{{"gpuCount": {MAX_GPUS_PER_REPLICA}}}]')
    assert at_bound == [{"gpuCount": MAX_GPUS_PER_REPLICA}]
    model = AIMClusterModel.model_validate(
        {
            "apiVersion": "aim.silogen.ai/v1alpha1",
            "kind": "AIMClusterModel",
            "metadata": {"name": "llama", "uid": "u-1"},
            "spec": {"name": "meta/llama:1", "image": "r.io/llama:1"},
        }
    )
    built = ImageMetadata(recommended_deployments=({"gpuModel": "MI300X", "gpuCount": 10**30},))
    plan = auto_templates(model, built, ["a"])
    assert plan.templates == []
    assert plan.skipped == [f"recommendedDeployments[0]: gpuCount {10**30} is above {MAX_GPUS_PER_REPLICA}"]


def _annotation(record: dict[str, object]) -> dict[str, str]:
    return {"aim.silogen.ai/image-metadata": json.dumps(record)}


@pytest.mark.parametrize(
    "metadata",
    [
        {"recommendedDeployments": [{"gpuCount": "2", "gpuModel": "MI300X"}]},
        {"recommendedDeployments": [{"gpuCount": float("nan"), "gpuModel": "MI300X"}]},
        {"recommendedDeployments": [{"gpuCount": 10**30}]},
        {"recommendedDeployments": [[1]]},
        {"recommendedDeployments": {"gpuCount": 1}},
        {"canonicalName": ["x"]},
        {"tags": "a,b"},
        {"hfTokenRequired": "yes"},
        {"oci": {"title": 1}},
        [1],
    ],
)
def test_a_persisted_record_that_does_not_validate_is_ignored(metadata: object) -> None:
    """A hand-edited annotation is checked as the labels are: one that would not have come from an image is read
    again (before, a string gpuCount reached ``count < 1`` and stopped discovery with a TypeError)."""
    record = {"image": "r/x:1", "readAt": "2026-01-01T00:00:00Z", "metadata": metadata}
    assert DiscoveryRecord.from_annotations(_annotation(record)) is None


def test_a_persisted_record_nested_too_deeply_is_ignored() -> None:
    deep = '{"image": "r/x:1", "readAt": "2026-01-01T00:00:00Z", "metadata": ' + "[" * 5000 + "]" * 5000 + "}"
    assert DiscoveryRecord.from_annotations({"aim.silogen.ai/image-metadata": deep}) is None


def test_a_record_read_in_the_future_is_stale() -> None:
    """A readAt in 2099 would otherwise keep the registry from being asked until then."""
    day = timedelta(days=1)
    future = DiscoveryRecord(image="r/x:1", read_at=NOW + timedelta(days=365), metadata=ImageMetadata())
    assert needs_fetch(future, "r/x:1", NOW, day)
    failed = DiscoveryRecord(
        image="r/x:1", read_at=NOW + timedelta(days=365), reason="MetadataExtractionFailed", message="bad", attempts=1
    )
    assert needs_fetch(failed, "r/x:1", NOW, day)
    assert not needs_fetch(
        DiscoveryRecord(image="r/x:1", read_at=NOW, metadata=ImageMetadata()), "r/x:1", NOW + timedelta(hours=1), day
    )


def test_a_failed_reads_message_is_bounded_whatever_the_registry_sent() -> None:
    """An index of 200,000 entries made a message of 2.2 MB: written to the model's condition and its annotation,
    which no API server accepts (a condition message holds 32,768 characters, annotations 256 KiB together)."""
    from datetime import UTC, datetime

    from engine.aim.discovery import MAX_FAILURE_MESSAGE_CHARS, failed_record

    record = failed_record(
        "r/m:1", datetime(2026, 12, 1, tzinfo=UTC), "ImageNotFound", "offers " + "x" * 2_000_000, None
    )
    assert record.message is not None and len(record.message) == MAX_FAILURE_MESSAGE_CHARS
    assert record.message.startswith("offers xxx") and record.message.endswith("…")
    short = failed_record("r/m:1", datetime(2026, 12, 1, tzinfo=UTC), "ImageNotFound", "not found (HTTP 404)", None)
    assert short.message == "not found (HTTP 404)"
