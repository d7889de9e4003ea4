"""Read an image's config labels from its OCI registry without pulling layers.

Two requests per image: the manifest (``GET /v2/<repo>/manifests/<ref>``; an image index resolves to
its linux/amd64 entry, which costs one more manifest request) and the config blob
(``GET /v2/<repo>/blobs/<digest>``), whose ``config.Labels`` hold the AIM metadata. Layers are never
fetched. A re-read that finds the manifest digest unchanged skips the config.

Authentication follows the distribution spec's challenge: a 401 with ``WWW-Authenticate: Basic``
is answered with the credentials of a ``kubernetes.io/dockerconfigjson`` Secret; ``Bearer
realm=...,service=...,scope=...`` (what most registries use) is answered by asking the realm for a
pull token with those credentials (or anonymously). The scheme and token are remembered per
registry and repository for the rest of the run, so later requests send them up front.

Why not a client library: oras-py (the Python OCI client) was evaluated; its request loop retries
every failure with fixed sleeps of up to 83 s (so a 401 without credentials takes minutes), sets no
timeouts, reads ``~/.docker/config.json`` instead of the cluster's Secrets, does not resolve an index
to a platform, and answers every Basic challenge with an extra unauthenticated request. The subset of
the distribution API needed here is small and is implemented with ``requests`` (already a
dependency), with timeouts, bounded retries of transient failures and classified errors.
Credentials never appear in errors or logs.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import pathlib
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

log = logging.getLogger(__name__)

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

_REFERENCE = re.compile(
    r"^(?:(?P<host>[a-zA-Z0-9.-]+(?::[0-9]+)?|\[[0-9a-fA-F:]+\](?::[0-9]+)?)/)?"
    r"(?P<repo>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}))?$"
)

_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")
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


def parse_reference(image: str) -> ImageReference:
    """Parse ``[host[:port]/]repo[:tag][@digest]`` as Docker does.

    Args:
        image: The image reference (no host: Docker Hub, ``library/`` for one-part names).

    Returns:
        The registry host, repository, tag and digest.

    Raises:
        RegistryError: ``invalid``, naming the problem.
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
    host = host or DOCKER_HUB
    if host == DOCKER_HUB and "/" not in repo:
        repo = f"library/{repo}"
    return ImageReference(host, repo, match["tag"], match["digest"])


# --------------------------------------------------------------------------------------------------
# Credentials
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credential:
    """A username/password (or identity token) for one registry. ``repr`` hides the secret."""

    username: str
    password: str = field(repr=False)

    @property
    def basic(self) -> str:
        """The ``Authorization: Basic`` value."""
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def _registry_key(key: str) -> str:
    """A dockerconfigjson ``auths`` key as a bare host (scheme and path dropped)."""
    text = re.sub(r"^[a-z]+://", "", key.strip().lower())
    return text.split("/", 1)[0]


def parse_dockerconfigjson(text: str | bytes) -> dict[str, Credential]:
    """The credentials of a ``.dockerconfigjson`` document (a pull secret's).

    Args:
        text: The document.

    Returns:
        Registry host -> credential (``username``/``password``, ``auth`` or ``identitytoken``).

    Raises:
        ValueError: It is not a docker config; the message never quotes the content.
    """
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not a JSON docker config") from None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        raise ValueError("no 'auths' object in the docker config")
    result: dict[str, Credential] = {}
    for key, entry in auths.items():
        if not isinstance(entry, dict):
            continue
        user, password = entry.get("username"), entry.get("password")
        if entry.get("auth") and not (user and password):
            try:
                user, _, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise ValueError(f"the 'auth' of registry {_registry_key(key)} is not base64 user:password") from None
        if entry.get("identitytoken") and not password:
            user, password = user or "<token>", entry["identitytoken"]
        if user and password:
            result[_registry_key(key)] = Credential(str(user), str(password))
    return result


def credential_for(ref: ImageReference, keychain: Mapping[str, Credential]) -> Credential | None:
    """The keychain's credential for the image's registry (Docker Hub under any of its names).

    Args:
        ref: The image.
        keychain: Registry host -> credential, from the pull secrets.

    Returns:
        The credential, or None (the registry is asked anonymously).
    """
    keys = DOCKER_HUB_AUTH_KEYS if ref.host in (DOCKER_HUB, "index.docker.io") else (ref.host,)
    for key in keys:
        found = keychain.get(_registry_key(key))
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageConfig:
    """What one read returned: the manifest digest and, unless unchanged, the config labels."""

    digest: str
    labels: dict[str, str] | None
    unchanged: bool = False


_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class RegistryClient:
    """Reads manifests and config blobs; one instance per flow run (it remembers auth per registry).

    ``insecure`` hosts (and localhost) are spoken to over plain HTTP. Transient failures (5xx, 429,
    network, timeouts) are retried ``attempts`` times with exponential backoff; ``requests_made``
    counts requests by kind (``manifest``, ``config``, ``token``, and ``challenge`` for the 401s that
    start authentication) for reports and benchmarks.
    """

    def __init__(
        self,
        *,
        insecure: tuple[str, ...] = (),
        timeout: float = 10.0,
        attempts: int = 3,
        backoff_s: float = 0.5,
        mirrors: Mapping[str, str] | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.mirrors = parse_mirrors(mirrors or {})
        self.insecure = frozenset(h.lower() for h in insecure) | frozenset(LOCAL_HOSTS)
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.session = session or requests.Session()
        self.session.trust_env = False
        self._sleep = sleep
        self._auth: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self.requests_made: Counter[str] = Counter()

    # ------------------------------------------------------------------------------------ public

    def read_config(
        self, image: str, credential: Credential | None = None, known_digest: str | None = None
    ) -> ImageConfig:
        """The config labels of ``image`` (linux/amd64 for an index); when the manifest digest equals
        ``known_digest`` the config is not fetched and ``unchanged`` is set."""
        ref = parse_reference(image)
        mirror = self.mirrors.get(ref.host)
        if isinstance(mirror, pathlib.Path):
            return read_layout_config(mirror, ref, image, known_digest)
        if isinstance(mirror, str):
            ref = dataclasses.replace(ref, host=mirror)
        manifest, digest = self._manifest(ref, ref.reference, credential)
        if known_digest and digest == known_digest:
            return ImageConfig(digest, None, unchanged=True)
        if _is_index(manifest):
            child = select_platform(manifest, image)
            manifest, _ = self._manifest(ref, child, credential)
        config_digest = _config_digest(manifest, image)
        blob = self._get(ref, f"/blobs/{config_digest}", credential, "config", MAX_CONFIG_BYTES, accept=None)
        if config_digest.startswith("sha256:") and hashlib.sha256(blob).hexdigest() != config_digest.split(":", 1)[1]:
            raise RegistryError("invalid", f"{image}: the config blob does not match its digest {config_digest}")
        return ImageConfig(digest, _config_labels(blob, image))

    # ----------------------------------------------------------------------------------- requests

    def _manifest(
        self, ref: ImageReference, reference: str, credential: Credential | None
    ) -> tuple[dict[str, Any], str]:
        body = self._get(
            ref, f"/manifests/{reference}", credential, "manifest", MAX_MANIFEST_BYTES, accept=", ".join(MANIFEST_TYPES)
        )
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        return _json_object(body, f"{ref.host}/{ref.repository}:{reference}: the manifest"), digest

    def _url(self, ref: ImageReference, path: str) -> str:
        host = ref.api_host
        scheme = "http" if host.lower() in self.insecure or host.split(":")[0].lower() in self.insecure else "https"
        return f"{scheme}://{host}/v2/{ref.repository}{path}"

    def _get(
        self, ref: ImageReference, path: str, credential: Credential | None, kind: str, limit: int, accept: str | None
    ) -> bytes:
        """GET with auth and retries of transient failures; the body, at most ``limit`` bytes."""
        last: RegistryError | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                return self._get_once(ref, path, credential, kind, limit, accept)
            except RegistryError as exc:
                if exc.kind != "unavailable" or attempt == self.attempts:
                    raise
                last = exc
                delay = self.backoff_s * (2 ** (attempt - 1))
                log.info("%s/%s: %s; retrying in %.1fs", ref.host, ref.repository, exc.message, delay)
                self._sleep(delay)
        raise last or RegistryError("unavailable", "no attempt made")  # pragma: no cover

    def _get_once(
        self, ref: ImageReference, path: str, credential: Credential | None, kind: str, limit: int, accept: str | None
    ) -> bytes:
        url = self._url(ref, path)
        key = (ref.api_host, ref.repository)
        headers = {"Accept": accept} if accept else {}
        with self._lock:
            known = self._auth.get(key) or self._auth.get((ref.api_host, ""))
        if known:
            headers["Authorization"] = known
        response = self._request(url, headers, kind, ref)
        if response.status_code == 401:
            response.close()
            authorization = self._answer_challenge(ref, response.headers.get("WWW-Authenticate", ""), credential)
            headers["Authorization"] = authorization
            response = self._request(url, headers, kind, ref)
        return self._body(response, ref, path, limit)

    def _request(self, url: str, headers: dict[str, str], kind: str, ref: ImageReference) -> requests.Response:
        try:
            response = self.session.get(url, headers=headers, timeout=self.timeout, stream=True, allow_redirects=True)
        except requests.Timeout:
            self.requests_made[kind] += 1
            raise RegistryError("unavailable", f"{ref.host}: no answer within {self.timeout:g}s") from None
        except requests.RequestException as exc:
            self.requests_made[kind] += 1
            raise RegistryError("unavailable", f"{ref.host}: {type(exc).__name__} while connecting") from None
        # A 401 is the registry's authentication challenge, counted apart from the fetches.
        self.requests_made["challenge" if response.status_code == 401 else kind] += 1
        return response

    def _body(self, response: requests.Response, ref: ImageReference, path: str, limit: int) -> bytes:
        where = f"{ref.host}/{ref.repository}{path.replace('/manifests/', ':').replace('/blobs/', '@')}"
        status = response.status_code
        try:
            if status in (401, 403):
                raise RegistryError("auth", f"{where}: the registry refused the credentials (HTTP {status})", status)
            if status == 404:
                raise RegistryError("not-found", f"{where}: not found (HTTP 404)", status)
            if status == 429 or status >= 500:
                raise RegistryError("unavailable", f"{where}: registry error (HTTP {status})", status)
            if status != 200:
                raise RegistryError("invalid", f"{where}: unexpected HTTP {status}", status)
            chunks, size = [], 0
            for chunk in response.iter_content(65536):
                size += len(chunk)
                if size > limit:
                    raise RegistryError("invalid", f"{where}: larger than {limit} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
        except requests.RequestException as exc:
            raise RegistryError("unavailable", f"{where}: {type(exc).__name__} while reading") from None
        finally:
            response.close()

    def _answer_challenge(self, ref: ImageReference, challenge: str, credential: Credential | None) -> str:
        """The ``Authorization`` value answering a 401 challenge (remembered for the run)."""
        scheme = challenge.strip().split(" ", 1)[0].lower()
        params = dict(_CHALLENGE.findall(challenge))
        if scheme == "basic":
            if credential is None:
                raise RegistryError(
                    "auth", f"{ref.host}: the registry requires credentials and no pull secret has any for it", 401
                )
            value = f"Basic {credential.basic}"
            with self._lock:
                self._auth[(ref.api_host, "")] = value
            return value
        if scheme == "bearer" and params.get("realm"):
            token = self._token(ref, params, credential)
            value = f"Bearer {token}"
            with self._lock:
                self._auth[(ref.api_host, ref.repository)] = value
            return value
        raise RegistryError("auth", f"{ref.host}: unsupported authentication challenge {scheme or '(none)'!r}", 401)

    def _token(self, ref: ImageReference, params: Mapping[str, str], credential: Credential | None) -> str:
        query = {"scope": params.get("scope") or f"repository:{ref.repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        headers = {"Authorization": f"Basic {credential.basic}"} if credential else {}
        self.requests_made["token"] += 1
        try:
            response = self.session.get(params["realm"], params=query, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise RegistryError(
                "unavailable", f"{ref.host}: token service unreachable ({type(exc).__name__})"
            ) from None
        if response.status_code in (401, 403):
            raise RegistryError(
                "auth",
                f"{ref.host}: the token service refused the credentials (HTTP {response.status_code})",
                response.status_code,
            )
        if response.status_code != 200:
            raise RegistryError(
                "unavailable" if response.status_code >= 500 else "auth",
                f"{ref.host}: token service answered HTTP {response.status_code}",
                response.status_code,
            )
        try:
            data = response.json()
        except ValueError:
            raise RegistryError("auth", f"{ref.host}: the token service's answer is not JSON") from None
        token = data.get("token") or data.get("access_token")
        if not token:
            raise RegistryError("auth", f"{ref.host}: the token service returned no token")
        return str(token)


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    """A manifest, index or config as a JSON object; ``invalid`` naming ``what`` when it is not JSON (not UTF-8,
    nested deeper than the decoder's recursion limit, a number too long to convert) or not an object."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise RegistryError("invalid", f"{what} is not JSON") from None
    if not isinstance(document, dict):
        raise RegistryError("invalid", f"{what} is not a JSON object but a {type(document).__name__}")
    return document


def _is_index(manifest: Mapping[str, Any]) -> bool:
    media_type = manifest.get("mediaType")
    return (isinstance(media_type, str) and media_type in INDEX_TYPES) or "manifests" in manifest


def _config_digest(manifest: Mapping[str, Any], image: str) -> str:
    """The digest of a manifest's config blob, checked (it goes into a URL or a path); ``invalid`` without one."""
    config = manifest.get("config")
    digest = config.get("digest") if isinstance(config, dict) else None
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise RegistryError("invalid", f"{image}: the manifest has no config descriptor")
    return digest


def _config_labels(blob: bytes, image: str) -> dict[str, str]:
    """The ``config.Labels`` of a config blob (none when absent); ``invalid`` when either is not an object."""
    config = _json_object(blob, f"{image}: the config blob").get("config") or {}
    labels = (config.get("Labels") or {}) if isinstance(config, dict) else None
    if not isinstance(labels, dict):
        raise RegistryError("invalid", f"{image}: the config blob's config or config.Labels is not an object")
    return {str(k): str(v) for k, v in labels.items()}


def _descriptors(index: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries of an index's ``manifests`` that are objects (none when it is not a list)."""
    manifests = index.get("manifests")
    return [e for e in manifests if isinstance(e, dict)] if isinstance(manifests, list) else []


def _platform(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    platform = entry.get("platform")
    return platform if isinstance(platform, dict) else {}


def select_platform(index: Mapping[str, Any], image: str, platform: tuple[str, str] = PLATFORM) -> str:
    """The digest of an image index's entry for ``platform``; a one-entry index without platforms is taken as it is.

    Args:
        index: The image index (OCI) or manifest list (Docker).
        image: The image reference, for the error.
        platform: ``(os, architecture)``, linux/amd64 by default.

    Returns:
        The entry's manifest digest (entries whose digest is not one are left out).

    Raises:
        RegistryError: ``not-found``: the index offers no manifest for the platform (the message lists those it has).
    """
    entries = [e for e in _descriptors(index) if isinstance(e.get("digest"), str) and _DIGEST.match(e["digest"])]
    for entry in entries:
        plat = _platform(entry)
        if (plat.get("os"), plat.get("architecture")) == platform:
            return str(entry["digest"])
    if len(entries) == 1 and not entries[0].get("platform"):
        return str(entries[0]["digest"])
    offered = ", ".join(f"{_platform(e).get('os')}/{_platform(e).get('architecture')}" for e in entries) or "none"
    raise RegistryError(
        "not-found", f"{image}: the image index has no {platform[0]}/{platform[1]} manifest (offers {offered})"
    )


# --------------------------------------------------------------------------------------------------
# Mirrors and OCI image layouts (air-gapped clusters, the offline demo)
# --------------------------------------------------------------------------------------------------

LAYOUT_PREFIX = "oci-layout:"
REF_NAME = "org.opencontainers.image.ref.name"
_HEX_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def parse_mirrors(mirrors: Mapping[str, str]) -> dict[str, str | pathlib.Path]:
    """The registry mirrors a run reads images from instead of their registries.

    Args:
        mirrors: Registry host -> another registry host, or ``oci-layout:DIR`` (a directory holding one OCI image
            layout per repository, ``DIR/<repository>/index.json``); blank entries are left out.

    Returns:
        Registry host -> mirror host, or the layout directory as a path.
    """
    result: dict[str, str | pathlib.Path] = {}
    for host, target in mirrors.items():
        target = target.strip()
        if target.startswith(LAYOUT_PREFIX):
            result[host.strip()] = pathlib.Path(target[len(LAYOUT_PREFIX) :]).expanduser()
        elif target:
            result[host.strip()] = target
    return result


def _layout_file(path: pathlib.Path, image: str, limit: int, missing: str) -> bytes:
    """A layout file's bytes (at most ``limit``): ``not-found`` saying ``missing`` when it is not there, ``invalid``
    when it cannot be read (a directory, no permission, a name too long)."""
    try:
        if path.stat().st_size > limit:
            raise RegistryError("invalid", f"{image}: {path} is larger than {limit} bytes")
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise RegistryError("not-found", f"{image}: {missing}") from None
    except OSError as exc:
        raise RegistryError("invalid", f"{image}: {path} cannot be read ({exc.strerror})") from None


def _layout_blob(layout: pathlib.Path, digest: str, image: str, limit: int) -> bytes:
    if not _HEX_DIGEST.match(digest):
        raise RegistryError("invalid", f"{image}: unsupported digest {digest!r} in the image layout")
    path = layout / "blobs" / "sha256" / digest.split(":", 1)[1]
    data = _layout_file(path, image, limit, f"blob {digest} is missing from the image layout")
    if hashlib.sha256(data).hexdigest() != digest.split(":", 1)[1]:
        raise RegistryError("invalid", f"{image}: blob {digest} does not match its digest")
    return data


def _names(entry: Mapping[str, Any], wanted: str) -> bool:
    """Whether a layout index entry is ``wanted``: its digest, or its ``org.opencontainers.image.ref.name``."""
    annotations = entry.get("annotations")
    return entry.get("digest") == wanted or (isinstance(annotations, dict) and annotations.get(REF_NAME) == wanted)


def read_layout_config(
    root: pathlib.Path, ref: ImageReference, image: str, known_digest: str | None = None
) -> ImageConfig:
    """:meth:`RegistryClient.read_config` from an OCI image layout at ``root/<repository>``.

    Args:
        root: The layouts' directory (an ``oci-layout:`` mirror).
        ref: The image; its tag is the ``org.opencontainers.image.ref.name`` annotation of an ``index.json`` entry.
        image: The image reference, for errors.
        known_digest: The manifest digest read last time: when unchanged, the config is not read again.

    Returns:
        The manifest digest and the config's labels (None with ``unchanged`` when the digest was known).

    Raises:
        RegistryError: ``not-found`` (no layout, no such tag or blob) or ``invalid`` (a file that is not a JSON object
            or cannot be read, an entry or descriptor without a digest), as the registry path classifies them.
    """
    layout = root / ref.repository  # the repository was validated by parse_reference: no "..", no absolute path
    index_file = _layout_file(layout / "index.json", image, MAX_MANIFEST_BYTES, f"no image layout at {layout}")
    index = _json_object(index_file, f"{image}: {layout / 'index.json'}")
    wanted = ref.digest or ref.tag or "latest"
    entry = next((e for e in _descriptors(index) if _names(e, wanted)), None)
    if entry is None:
        raise RegistryError("not-found", f"{image}: {wanted} is not in the image layout at {layout}")
    digest = entry.get("digest")
    if not isinstance(digest, str) or not digest:
        raise RegistryError("invalid", f"{image}: the image layout's entry for {wanted} has no digest")
    if known_digest and digest == known_digest:
        return ImageConfig(digest, None, unchanged=True)
    manifest = _json_object(_layout_blob(layout, digest, image, MAX_MANIFEST_BYTES), f"{image}: the manifest")
    if _is_index(manifest):
        child = _layout_blob(layout, select_platform(manifest, image), image, MAX_MANIFEST_BYTES)
        manifest = _json_object(child, f"{image}: the manifest")
    blob = _layout_blob(layout, _config_digest(manifest, image), image, MAX_CONFIG_BYTES)
    return ImageConfig(digest, _config_labels(blob, image))
