"""Registry credentials from the pull secrets AIMNamespaceConfigs name, and image reads: each image's labels
(or the confirmation that its digest is unchanged) as a :class:`~engine.aim.discovery.DiscoveryRecord`, a failed
read as the record of its reason.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from engine.aim.discovery import (
    REASON_AUTH_FAILED,
    REASON_EXTRACTION_FAILED,
    REASON_IMAGE_NOT_FOUND,
    REASON_INVALID_IMAGE,
    REASON_REGISTRY_UNAVAILABLE,
    REASON_SECRET_NOT_FOUND,
    DiscoveryRecord,
    LabelError,
    failed_record,
    parse_image_labels,
)
from engine.api.aim import AIMNamespaceConfig
from tasks.aim.writes import WORKERS
from tasks.clients.cluster import Cluster
from tasks.clients.cluster.errors import NotFound
from tasks.clients.oci import (
    Credential,
    RegistryClient,
    RegistryError,
    credential_for,
    parse_dockerconfigjson,
    parse_reference,
)
from tasks.tracking import map_in_threads, task

DOCKERCONFIG_TYPE = "kubernetes.io/dockerconfigjson"
UNEXPECTED_MESSAGE_CHARS = 300
"""How much of an unexpected error's text a model's condition carries."""

log = logging.getLogger("modelplane.aim")


@dataclass
class Keychain:
    """Registry credentials from the pull secrets AIMNamespaceConfigs name, and the secrets that are
    missing or unusable (``namespace/name: why``)."""

    credentials: dict[str, Credential] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@task(name="read-pull-secrets", retries=2, retry_delay_seconds=2)
def read_keychain(cluster: Cluster, configs: Sequence[AIMNamespaceConfig]) -> Keychain:
    """Credentials from every ``images.imagePullSecrets`` Secret (``kubernetes.io/dockerconfigjson``)
    named by an AIMNamespaceConfig, read from the config's namespace; the first one for a registry
    (by namespace and name order) wins.

    Args:
        cluster: The cluster the pull Secrets are read from.
        configs: The AIMNamespaceConfigs whose ``images.imagePullSecrets`` name the Secrets.

    Returns:
        The registry credentials by host, and in ``problems`` one line per Secret that is missing, of another type or
        unparsable (a failed read is reported later, when a registry refuses the image).
    """
    keychain = Keychain()
    wanted: list[tuple[str, str]] = []
    for config in sorted(configs, key=lambda c: (c.metadata.namespace or "", c.metadata.name or "")):
        namespace = config.metadata.namespace or "default"
        for name in pull_secrets(config):
            if (namespace, name) not in wanted:
                wanted.append((namespace, name))
    for namespace, name in wanted:
        try:
            secret = cluster.get("v1", "Secret", name, namespace)
        except NotFound:
            keychain.problems.append(f"{namespace}/{name}: Secret not found")
            continue
        if secret.get("type") != DOCKERCONFIG_TYPE:
            keychain.problems.append(f"{namespace}/{name}: type is {secret.get('type')!r}, not {DOCKERCONFIG_TYPE}")
            continue
        raw = (secret.get("data") or {}).get(".dockerconfigjson")
        try:
            found = parse_dockerconfigjson(base64.b64decode(raw or ""))
        except ValueError as exc:
            keychain.problems.append(f"{namespace}/{name}: {exc}")
            continue
        for host, credential in found.items():
            keychain.credentials.setdefault(host, credential)
    return keychain


def pull_secrets(config: AIMNamespaceConfig) -> list[str]:
    """The ``images.imagePullSecrets`` an AIMNamespaceConfig names.

    Args:
        config: An AIMNamespaceConfig.

    Returns:
        The Secret names, in the config's order; empty when it has no ``images`` section.
    """
    return list(config.spec.images.image_pull_secrets or []) if config.spec.images else []


def failure_reason(error: Exception, keychain: Keychain) -> tuple[str, str]:
    """The condition reason and message of a failed image read, from the error's class: 401/403 auth (or the pull
    secrets that were missing), 404 not found, an invalid reference, an unparsable label, else unavailable.

    Args:
        error: The exception an image read raised (a registry error, a label parse error or another).
        keychain: The credentials used, whose ``problems`` explain an authentication failure.

    Returns:
        The condition reason (one of the AIM discovery reasons) and a message for it.
    """
    if isinstance(error, LabelError):
        return REASON_EXTRACTION_FAILED, str(error)
    if isinstance(error, RegistryError) and error.kind == "not-found":
        return REASON_IMAGE_NOT_FOUND, error.message
    if isinstance(error, RegistryError) and error.kind == "auth":
        if keychain.problems:
            return REASON_SECRET_NOT_FOUND, f"{error.message}; pull secrets: {'; '.join(keychain.problems)}"
        return REASON_AUTH_FAILED, error.message
    if isinstance(error, RegistryError) and error.kind == "invalid" and "not a valid image reference" in error.message:
        return REASON_INVALID_IMAGE, f"spec.image: {error.message}"
    if isinstance(error, RegistryError) and error.kind == "invalid":
        return REASON_EXTRACTION_FAILED, error.message
    return REASON_REGISTRY_UNAVAILABLE, getattr(error, "message", None) or type(error).__name__


def inspect_image(
    client: RegistryClient, image: str, keychain: Keychain, previous: DiscoveryRecord | None, now: datetime
) -> DiscoveryRecord:
    """Read one image's labels (or confirm its digest is unchanged) into a :class:`DiscoveryRecord`.

    Args:
        client: The OCI registry client.
        image: The image reference the AIMClusterModel names.
        keychain: The pull credentials by registry host.
        previous: The record of the last read of this model, or None; when it read the same image successfully, its
            digest lets the registry answer "unchanged" without downloading the config again.
        now: The time stamped on the record as ``read_at``.

    Returns:
        The record of this read: digest and parsed labels, or a failure with its reason (no error is raised: the
        images of a run are read together, so one image's error would stop discovery of every model; an error of a
        kind neither the client nor the label parser classifies is logged with its traceback and recorded as
        ``MetadataExtractionFailed``, retried at the resync like an unparsable label).
    """
    try:
        credential = credential_for(client.source_of(parse_reference(image)), keychain.credentials)
        known = previous.digest if previous is not None and previous.ok and previous.image == image else None
        config = client.read_config(image, credential, known_digest=known)
        if config.unchanged and previous is not None:
            return DiscoveryRecord(image=image, read_at=now, digest=previous.digest, metadata=previous.metadata)
        return DiscoveryRecord(
            image=image, read_at=now, digest=config.digest, metadata=parse_image_labels(config.labels)
        )
    except (RegistryError, LabelError) as exc:
        reason, message = failure_reason(exc, keychain)
        return failed_record(image, now, reason, message, previous)
    except Exception as exc:  # noqa: BLE001 - one image's failure is its model's condition, never the run's stop
        log.warning("%s: unexpected %s while reading the image", image, type(exc).__name__, exc_info=True)
        message = f"unexpected {type(exc).__name__} while reading the image: {exc}"[:UNEXPECTED_MESSAGE_CHARS]
        return failed_record(image, now, REASON_EXTRACTION_FAILED, message, previous)


@task(name="inspect-images")
def inspect_images(
    client: RegistryClient,
    wanted: Mapping[str, DiscoveryRecord | None],
    keychain: Keychain,
    now: datetime,
) -> dict[str, DiscoveryRecord]:
    """Read every image in ``wanted`` (image -> previous record) once, in parallel.

    Args:
        client: The OCI registry client.
        wanted: Each image to read, mapped to its previous discovery record (None when there is none).
        keychain: The pull credentials by registry host.
        now: The time stamped on every record.

    Returns:
        The new record of every image in ``wanted``, by image.
    """
    images = sorted(wanted)
    records = map_in_threads(lambda image: inspect_image(client, image, keychain, wanted[image], now), images, WORKERS)
    return dict(zip(images, records))
