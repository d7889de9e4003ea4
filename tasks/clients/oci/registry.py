"""The registry client: manifests and config blobs over the distribution API, with its authentication."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import pathlib
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3

from tasks.clients.oci.credentials import Credential
from tasks.clients.oci.documents import (
    ImageConfig,
    config_digest,
    config_labels,
    is_index,
    json_object,
    select_platform,
    verify_digest,
)
from tasks.clients.oci.layout import parse_mirrors, read_layout_config
from tasks.clients.oci.references import (
    DIGEST,
    LOCAL_HOSTS,
    MANIFEST_TYPES,
    MAX_CONFIG_BYTES,
    MAX_MANIFEST_BYTES,
    ImageReference,
    RegistryError,
    parse_reference,
)
from tasks.clients.streams import BodyOverdue, BodyTooLarge, read_bounded

log = logging.getLogger("tasks.clients.oci")

_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
MAX_TOKEN_BYTES = 1 << 20
"""The largest token-service answer read (1 MiB; registries' tokens are a few KiB): a larger one is refused before it
is held in memory or sent on as a header."""
BODY_DEADLINE_S = 120.0
"""How long one answer (a manifest, a config of up to 16 MiB, a token) may take to arrive whole."""


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
        body_deadline_s: float = BODY_DEADLINE_S,
    ) -> None:
        self.mirrors = parse_mirrors(mirrors or {})
        self.insecure = frozenset(h.lower() for h in insecure) | frozenset(LOCAL_HOSTS)
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.body_deadline_s = body_deadline_s
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
        ref = self.source_of(ref)
        manifest, digest = self._manifest(ref, ref.reference, credential)
        if known_digest and digest == known_digest:
            return ImageConfig(digest, None, unchanged=True)
        if is_index(manifest):
            child = select_platform(manifest, image)
            manifest, _ = self._manifest(ref, child, credential)
        config = config_digest(manifest, image)
        blob = self._get(ref, f"/blobs/{config}", credential, "config", MAX_CONFIG_BYTES, accept=None)
        verify_digest(blob, config, f"{image}: the config blob")
        return ImageConfig(digest, config_labels(blob, image))

    def source_of(self, ref: ImageReference) -> ImageReference:
        """Where ``ref`` is read from: its registry, or the registry mirror configured for that registry (whose
        own pull secret answers it: the image registry's credentials are never sent to a mirror).

        Args:
            ref: The image as its AIMClusterModel names it.

        Returns:
            ``ref`` with its host replaced by the mirror's, when a registry mirror (not a layout) is configured.
        """
        mirror = self.mirrors.get(ref.host)
        return dataclasses.replace(ref, host=mirror) if isinstance(mirror, str) else ref

    # ----------------------------------------------------------------------------------- requests

    def _manifest(
        self, ref: ImageReference, reference: str, credential: Credential | None
    ) -> tuple[dict[str, Any], str]:
        body = self._get(
            ref, f"/manifests/{reference}", credential, "manifest", MAX_MANIFEST_BYTES, accept=", ".join(MANIFEST_TYPES)
        )
        what = f"{ref.host}/{ref.repository}:{reference}: the manifest"
        if DIGEST.match(reference):  # asked for by digest (a pinned image, an index's entry): it must be that one
            verify_digest(body, reference, what)
        return json_object(body, what), "sha256:" + hashlib.sha256(body).hexdigest()

    def _url(self, ref: ImageReference, path: str) -> str:
        scheme = "http" if self.plain_http(ref.api_host) else "https"
        return f"{scheme}://{ref.api_host}/v2/{ref.repository}{path}"

    def plain_http(self, host: str) -> bool:
        """Whether ``host`` is spoken to over plain HTTP: a host listed as insecure (with or without its port), or
        loopback (:data:`~tasks.clients.oci.references.LOCAL_HOSTS`).

        Args:
            host: A host as a URL writes it, ``name[:port]`` (an IPv6 address in brackets).

        Returns:
            True when plain HTTP is allowed with it.
        """
        bare = host[: host.index("]") + 1] if host.startswith("[") and "]" in host else host.split(":")[0]
        return host.lower() in self.insecure or bare.lower() in self.insecure

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
            challenger = urlsplit(response.url).netloc
            if challenger.lower() != urlsplit(url).netloc.lower():  # a host the registry redirected to
                raise RegistryError(
                    "auth",
                    f"{ref.host}: the registry redirected to {challenger}, which asks for credentials; "
                    f"the pull secret's are sent only to {ref.host} and the token services it names",
                    401,
                )
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
            return self._read(response, limit, where)
        finally:
            response.close()

    def _read(self, response: requests.Response, limit: int, where: str) -> bytes:
        """The body, at most ``limit`` bytes (decompressed), arrived whole within :attr:`body_deadline_s`
        (:func:`tasks.clients.streams.read_bounded`), each failure as the registry error it is."""
        try:
            return read_bounded(response, limit, self.body_deadline_s)
        except BodyTooLarge as exc:
            raise RegistryError("invalid", f"{where}: {exc}") from None
        except BodyOverdue as exc:
            raise RegistryError("unavailable", f"{where}: {exc}") from None
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise RegistryError("unavailable", f"{where}: {type(exc).__name__} while reading") from None

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
        refusal = realm_refusal(self._url(ref, ""), params["realm"], credential is not None, self.plain_http)
        if refusal is not None:
            raise RegistryError("auth", f"{ref.host}: {refusal}", 401)
        headers = {"Authorization": f"Basic {credential.basic}"} if credential else {}
        self.requests_made["token"] += 1
        try:
            response = self.session.get(
                params["realm"], params=query, headers=headers, timeout=self.timeout, stream=True
            )
        except requests.RequestException as exc:
            raise RegistryError(
                "unavailable", f"{ref.host}: token service unreachable ({type(exc).__name__})"
            ) from None
        try:
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
            body = self._read(response, MAX_TOKEN_BYTES, f"{ref.host}: the token service's answer")
        finally:
            response.close()
        return _token_of(body, ref)


def realm_refusal(
    registry_url: str, realm: str, with_credentials: bool, plain_http: Callable[[str], bool]
) -> str | None:
    """Why the token service a registry's ``Bearer realm=...`` challenge names must not be asked, or None.

    A realm that is no http(s) URL is refused. The pull secret's credentials go over plain HTTP only where the
    client speaks plain HTTP anyway: to a realm of a registry itself reached over plain HTTP (a registry listed as
    insecure, or on loopback), or to a realm on such a host. A registry reached over HTTPS naming a plain-HTTP realm
    elsewhere would have them sent in clear (Docker sends them; this client does not); asked anonymously (no pull
    secret for the registry), such a realm is asked, as nothing secret is sent.

    Args:
        registry_url: A URL of the registry as this client reaches it (its scheme is what counts).
        realm: The challenge's ``realm``.
        with_credentials: Whether the token request would carry the pull secret's credentials.
        plain_http: Whether a host (``name[:port]``) is spoken to over plain HTTP
            (:meth:`RegistryClient.plain_http`).

    Returns:
        The refusal, naming the realm's scheme and host (never a credential), or None when the realm may be asked.
    """
    try:
        parts = urlsplit(realm)
        scheme, host = parts.scheme.lower(), parts.netloc.rpartition("@")[2]
        parts.port  # noqa: B018 - raises ValueError for a port that is no port
    except ValueError:
        scheme, host = "", ""
    if scheme not in ("http", "https") or not host:
        return "the registry names a token service that is not an http(s) URL" + (f" ({scheme}:)" if scheme else "")
    if scheme == "https" or not with_credentials or urlsplit(registry_url).scheme == "http" or plain_http(host):
        return None
    return (
        f"the registry is reached over HTTPS but names a token service over plain HTTP (http://{host}); refused: "
        "the pull secret's credentials would travel in clear (they go over plain HTTP only to hosts listed as "
        "insecure registries, and on loopback)"
    )


def _token_of(body: bytes, ref: ImageReference) -> str:
    """The token of a token service's answer; ``auth`` when there is none usable (not a JSON object, no
    ``token``/``access_token``, or one that cannot be sent as a header: not ASCII, or holding a line break)."""
    try:
        data = json_object(body, "the answer")
    except RegistryError:
        raise RegistryError("auth", f"{ref.host}: the token service's answer is not a JSON object") from None
    token = data.get("token") or data.get("access_token")
    if not isinstance(token, str | int) or isinstance(token, bool) or not str(token):
        raise RegistryError("auth", f"{ref.host}: the token service returned no token")
    text = str(token)
    if not text.isascii() or not text.isprintable():
        raise RegistryError("auth", f"{ref.host}: the token service returned a token that is not printable ASCII")
    return text
