"""tasks.aim.images: one image's failed read is that image's record, never an error out of the run's reads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from engine.aim.discovery import REASON_EXTRACTION_FAILED
from tasks.aim.images import Keychain, inspect_image, inspect_images
from tasks.clients.oci import ImageConfig, RegistryClient

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEPLOYMENTS = "com.amd.aim.model.recommendedDeployments"
GOOD = {DEPLOYMENTS: '[{"gpuModel": "MI300X", "gpuCount": 1}]', "com.amd.aim.model.canonicalName": "m/good"}


class FakeRegistry(RegistryClient):
    """Answers each image from ``answers``: labels to return, or an exception to raise."""

    def __init__(self, answers: dict[str, dict[str, str] | BaseException]) -> None:
        super().__init__()
        self.answers = answers

    def read_config(self, image: str, credential: Any = None, known_digest: str | None = None) -> ImageConfig:
        answer = self.answers[image]
        if isinstance(answer, BaseException):
            raise answer
        return ImageConfig("sha256:" + "0" * 64, answer)


def test_a_hostile_label_fails_its_image_alone() -> None:
    """``[`` * 50000 ``]`` * 50000 in recommendedDeployments was a RecursionError that stopped discovery of every
    model; a shallower one the decoder still cannot hold too."""
    client = FakeRegistry(
        {
            "r.io/huge:1": {DEPLOYMENTS: "[" * 50000 + "]" * 50000},
            "r.io/deep:1": {DEPLOYMENTS: "[" * 5000 + "]" * 5000},
            "r.io/good:1": GOOD,
        }
    )
    records = inspect_images.fn(client, dict.fromkeys(client.answers), Keychain(), NOW)
    for image in ("r.io/huge:1", "r.io/deep:1"):
        assert (records[image].reason, records[image].ok) == (REASON_EXTRACTION_FAILED, False)
        assert DEPLOYMENTS in records[image].message
    assert records["r.io/good:1"].ok
    assert records["r.io/good:1"].metadata is not None and records["r.io/good:1"].metadata.canonical_name == "m/good"


def test_an_unexpected_error_is_that_images_extraction_failure() -> None:
    """An error neither the client nor the label parser classifies is recorded on its image, not raised."""
    for error in (RecursionError("maximum recursion depth exceeded"), KeyError("digest"), OSError(36, "too long")):
        record = inspect_image(FakeRegistry({"r.io/x:1": error}), "r.io/x:1", Keychain(), None, NOW)
        assert record.reason == REASON_EXTRACTION_FAILED
        assert record.message.startswith(f"unexpected {type(error).__name__} while reading the image")
        assert record.attempts == 1 and record.read_at == NOW
