"""Read an image's config labels from its OCI registry without pulling layers.

Two requests per image: the manifest (``GET /v2/<repo>/manifests/<ref>``; an image index resolves to
its linux/amd64 entry, which costs one more manifest request) and the config blob
(``GET /v2/<repo>/blobs/<digest>``), whose ``config.Labels`` hold the AIM metadata. Layers are never
fetched. A re-read that finds the manifest digest unchanged skips the config.

Authentication follows the distribution spec's challenge: a 401 with ``WWW-Authenticate: Basic``
is answered with the credentials of a ``kubernetes.io/dockerconfigjson`` Secret; ``Bearer
realm=...,service=...,scope=...`` (what most registries use) is answered by asking the realm for a
pull token with those credentials (or anonymously); credentials go to a plain-HTTP realm only where the client
speaks plain HTTP anyway (:func:`.registry.realm_refusal`). The scheme and token are
remembered per registry and repository for the rest of the run, so later requests send them up front.

Why not a client library: oras-py (the Python OCI client) was evaluated; its request loop retries
every failure with fixed sleeps of up to 83 s (so a 401 without credentials takes minutes), sets no
timeouts, reads ``~/.docker/config.json`` instead of the cluster's Secrets, does not resolve an index
to a platform, and answers every Basic challenge with an extra unauthenticated request. The subset of
the distribution API needed here is small and is implemented with ``requests`` (already a
dependency), with timeouts, bounded retries of transient failures and classified errors.
Credentials never appear in errors or logs.

The package: :mod:`.references` (image references, :class:`RegistryError`), :mod:`.credentials` (pull secrets),
:mod:`.documents` (manifests, indexes, configs), :mod:`.registry` (the client) and :mod:`.layout` (mirrors and OCI
image layouts).
"""

from tasks.clients.oci.credentials import Credential, credential_for, parse_dockerconfigjson
from tasks.clients.oci.documents import ImageConfig, select_platform
from tasks.clients.oci.layout import LAYOUT_PREFIX, REF_NAME, parse_mirrors, read_layout_config
from tasks.clients.oci.references import (
    MAX_CONFIG_BYTES,
    MAX_MANIFEST_BYTES,
    ImageReference,
    RegistryError,
    parse_reference,
)
from tasks.clients.oci.registry import RegistryClient

__all__ = [
    "LAYOUT_PREFIX",
    "MAX_CONFIG_BYTES",
    "MAX_MANIFEST_BYTES",
    "REF_NAME",
    "Credential",
    "ImageConfig",
    "ImageReference",
    "RegistryClient",
    "RegistryError",
    "credential_for",
    "parse_dockerconfigjson",
    "parse_mirrors",
    "parse_reference",
    "read_layout_config",
    "select_platform",
]
