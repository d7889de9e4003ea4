"""Image references as Docker parses them, and the error every part of the client raises."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEX_TYPES = frozenset({MANIFEST_TYPES[0], MANIFEST_TYPES[2]})
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_AUTH_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "registry-1.docker.io", "docker.io")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
MAX_MANIFEST_BYTES = 4 << 20
MAX_CONFIG_BYTES = 16 << 20
PLATFORM = ("linux", "amd64")
MAX_NAME_CHARS = 255
"""The longest image name (``[host/]repository``), as Docker's reference parser allows (``NameTotalLengthMax``)."""

_DOMAIN_COMPONENT = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
"""One label of a registry host name, as the distribution reference grammar writes it (``domain-component``): letters
and digits, with hyphens inside but never at either end; so never empty, never ``.`` or ``..``."""
_HOST = (
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"  # domain-name (or IPv4) | [IPv6]
    r"(?::(?P<port>[0-9]+))?"
)
"""A registry host (``domain`` in the grammar): dot-separated components or a bracketed IPv6 address, and an optional
port, whose range (:data:`MAX_PORT`) :func:`parse_reference` checks."""
MAX_PORT = 65535
"""The highest TCP port: the grammar takes any digits, a connection to a higher one fails on every attempt."""
MAX_LABEL_CHARS = 63
"""The longest label of a host name (RFC 1035)."""

_REFERENCE = re.compile(
    rf"^(?:(?P<host>{_HOST})/)?"
    r"(?P<repo>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}))?$"
)

IMAGE_REFERENCE_PATTERN = re.sub(r"\(\?P<\w+>", "(", _REFERENCE.pattern)
"""The reference grammar as a JSON schema ``pattern`` (no group names), for the Prefect form of an image
parameter; :func:`parse_reference` checks what a pattern cannot (the port's range, the IPv6 address)."""

_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
DIGEST = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")
"""A content digest as the OCI image spec writes it (``algorithm:encoded``): safe in a URL path."""


class RegistryError(Exception):
    """A registry read that failed. ``kind``: ``auth`` (401/403), ``not-found`` (404), ``unavailable``
    (5xx, 429, network, timeout) or ``invalid`` (a reference or response that makes no sense)."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ImageReference:
    """A parsed image reference: registry host (as written), API host, repository, tag or digest."""

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def api_host(self) -> str:
        """Where the registry API lives (Docker Hub's is not ``docker.io``)."""
        return DOCKER_HUB_API if self.host in (DOCKER_HUB, "index.docker.io") else self.host

    @property
    def reference(self) -> str:
        """The manifest reference: the digest when pinned, else the tag (default ``latest``)."""
        return self.digest or self.tag or "latest"


def _host_problem(host: str, port: str | None) -> str | None:
    """Why a registry host the grammar accepts can never be connected to (so retrying would never help), or None.

    The grammar takes any digits as a port, any length of label and any hex digits and colons in brackets; a port
    must be 1-65535, a DNS label at most 63 characters (urllib3 refuses a longer one before any lookup) and an
    IPv6 address one :mod:`ipaddress` reads.
    """
    if port is not None and not (len(port) <= len(str(MAX_PORT)) and 1 <= int(port) <= MAX_PORT):
        return f"port {port[:10]} is not between 1 and {MAX_PORT}"
    name = host.rpartition(":")[0] if port is not None else host
    if name.startswith("["):
        try:
            ipaddress.IPv6Address(name[1:-1])
        except ValueError:
            return f"{name} is not an IPv6 address"
        return None
    if any(len(label) > MAX_LABEL_CHARS for label in name.split(".")):
        return f"a label of the registry host is longer than {MAX_LABEL_CHARS} characters"
    return None


def parse_reference(image: str) -> ImageReference:
    """Parse ``[host[:port]/]repo[:tag][@digest]`` as Docker does.

    Args:
        image: The image reference (no host: Docker Hub, ``library/`` for one-part names).

    Returns:
        The registry host, repository, tag and digest.

    Raises:
        RegistryError: ``invalid``, naming the problem: the distribution reference grammar refuses it (a host such as
            ``..``, ``-x.io`` or ``a..b``), or its registry host could never be reached (a port outside 1-65535, a
            label over 63 characters, brackets around no IPv6 address); discovery keeps either as the model's
            terminal InvalidImageReference instead of retrying it.
    """
    text = image.strip()
    match = _REFERENCE.match(text)
    if not text or not match:
        raise RegistryError("invalid", f"{image!r} is not a valid image reference")
    if match.end("repo") > MAX_NAME_CHARS:
        raise RegistryError(
            "invalid", f"{text[:40]!r}... is not a valid image reference (the name is longer than {MAX_NAME_CHARS})"
        )
    host, repo = match["host"], match["repo"]
    if host and not ("." in host or ":" in host or host == "localhost" or host.startswith("[")):
        # "team/model": the first part is a Docker Hub namespace, not a registry.
        repo, host = f"{host}/{repo}", None
        if not _REPOSITORY.match(repo):
            raise RegistryError("invalid", f"{image!r} is not a valid image reference (repository names are lowercase)")
    problem = _host_problem(host, match["port"]) if host else None
    if problem:
        raise RegistryError("invalid", f"{image!r} is not a valid image reference ({problem})")
    host = host or DOCKER_HUB
    if host == DOCKER_HUB and "/" not in repo:
        repo = f"library/{repo}"
    return ImageReference(host, repo, match["tag"], match["digest"])
