"""tasks.clients.oci against the real docker-registry: manifests, indexes, auth challenges, error classes."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import pathlib
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tasks.clients.oci import (
    REF_NAME,
    Credential,
    RegistryClient,
    RegistryError,
    credential_for,
    parse_dockerconfigjson,
    parse_reference,
)


def test_references_are_parsed_as_docker_does() -> None:
    assert parse_reference("ubuntu").repository == "library/ubuntu"
    hub = parse_reference("docker.io/amdenterpriseai/aim-llama:0.8.4")
    assert (hub.host, hub.api_host, hub.repository, hub.reference) == (
        "docker.io",
        "registry-1.docker.io",
        "amdenterpriseai/aim-llama",
        "0.8.4",
    )
    local = parse_reference("127.0.0.1:5000/team/model@sha256:" + "a" * 64)
    assert (local.host, local.repository, local.reference) == ("127.0.0.1:5000", "team/model", "sha256:" + "a" * 64)
    assert parse_reference("team/model").host == "docker.io"
    for bad in ("", "UPPER/case", "a b", "x:"):
        with pytest.raises(RegistryError):
            parse_reference(bad)


def test_dockerconfigjson_forms_and_secrecy() -> None:
    auth = base64.b64encode(b"u:p").decode()
    keychain = parse_dockerconfigjson(
        json.dumps(
            {"auths": {"https://index.docker.io/v1/": {"auth": auth}, "r.io": {"username": "a", "password": "b"}}}
        )
    )
    assert credential_for(parse_reference("ubuntu"), keychain).username == "u"
    assert credential_for(parse_reference("r.io/x:1"), keychain).password == "b"
    assert "b" not in repr(keychain["r.io"]).replace("username='a'", "")
    with pytest.raises(ValueError) as info:
        parse_dockerconfigjson('{"auths": {"r.io": {"auth": "@@@"}}}')
    assert "@@@" not in str(info.value)


def test_index_resolves_to_linux_amd64_and_unchanged_digest_skips_the_config(oci_registry: Any) -> None:
    oci_registry.push_index("unit/multi", "1", {"arm64": {"arch": "arm"}, "amd64": {"arch": "amd"}})
    client = RegistryClient()
    oci_registry.mark()
    config = client.read_config(oci_registry.image("unit/multi", "1"))
    assert config.labels == {"arch": "amd"}
    assert oci_registry.requests_since_mark() == {"GET manifest": 2, "GET blob": 1}
    again = client.read_config(oci_registry.image("unit/multi", "1"), known_digest=config.digest)
    assert again.unchanged and again.labels is None
    oci_registry.push_index("unit/armonly", "1", {"arm64": {"arch": "arm"}})
    with pytest.raises(RegistryError) as info:
        client.read_config(oci_registry.image("unit/armonly", "1"))
    assert info.value.kind == "not-found" and "linux/amd64" in info.value.message


def test_unlabelled_image_and_wrong_credentials(private_registry: Any) -> None:
    private_registry.push_image("unit/plain", "1", None)
    keychain = parse_dockerconfigjson(private_registry.dockerconfigjson())
    image = private_registry.image("unit/plain", "1")
    assert RegistryClient().read_config(image, credential_for(parse_reference(image), keychain)).labels == {}
    wrong = parse_dockerconfigjson(
        json.dumps({"auths": {private_registry.host: {"username": "modelplane", "password": "nope"}}})
    )
    with pytest.raises(RegistryError) as info:
        RegistryClient().read_config(image, credential_for(parse_reference(image), wrong))
    assert info.value.kind == "auth" and "nope" not in info.value.message


@pytest.fixture()
def failing_registry() -> Iterator[tuple[str, list[int]]]:
    """A server answering 503 twice and then 404, recording the status codes it sent."""
    sent: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            code = 503 if len(sent) < 2 else 404
            sent.append(code)
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", sent
    server.shutdown()
    server.server_close()


def test_server_errors_are_retried_with_backoff_then_classified(failing_registry: tuple[str, list[int]]) -> None:
    host, sent = failing_registry
    delays: list[float] = []
    client = RegistryClient(attempts=3, backoff_s=0.5, sleep=delays.append)
    with pytest.raises(RegistryError) as info:
        client.read_config(f"{host}/x/y:1")
    assert sent == [503, 503, 404] and delays == [0.5, 1.0]
    assert info.value.kind == "not-found"
    with pytest.raises(RegistryError) as down:
        RegistryClient(attempts=2, sleep=lambda _: None, timeout=1).read_config("127.0.0.1:1/x/y:1")
    assert down.value.kind == "unavailable"


def test_example_layout_is_a_real_oci_layout_and_reads_like_the_registry_copy(oci_registry: Any) -> None:
    """skopeo copies the demo's OCI layout into the registry; the client reads the same labels from both,
    and they are what skopeo itself reports as the image config."""
    import pathlib
    import subprocess

    from tasks.clients.oci import read_layout_config

    layout_root = pathlib.Path(__file__).resolve().parents[2] / "deployments" / "example-images"
    repo = "amdenterpriseai/aim-meta-llama-llama-3-1-8b-instruct"
    source = f"oci:{layout_root / repo}:0.8.4"
    target = f"{oci_registry.host}/unit/example-llama:0.8.4"
    subprocess.run(
        ["skopeo", "--insecure-policy", "copy", "--dest-tls-verify=false", source, f"docker://{target}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    inspected = subprocess.run(
        ["skopeo", "--insecure-policy", "inspect", "--tls-verify=false", "--config", f"docker://{target}"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    from_registry = RegistryClient().read_config(target).labels
    from_layout = read_layout_config(layout_root, parse_reference(f"docker.io/{repo}:0.8.4"), repo).labels
    assert from_registry == from_layout == json.loads(inspected.stdout)["config"]["Labels"]
    assert from_layout["com.amd.aim.model.canonicalName"] == "meta-llama/Llama-3.1-8B-Instruct"


# --------------------------------------------------------------------------------------------------
# Malformed documents: a registry or layout that serves them makes that image's read fail, classified
# --------------------------------------------------------------------------------------------------

Document = Any
"""A manifest or config as served: bytes as they are, anything else as its JSON."""

CONFIG_OK = {"config": {"Labels": {"a": "b"}}}
DEEP = b"[" * 5000 + b"]" * 5000


def _bytes(document: Document) -> bytes:
    return document if isinstance(document, bytes) else json.dumps(document).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _image_documents(labels: dict[str, str] | None = None) -> tuple[bytes, bytes]:
    """An image's manifest and config blob, the config holding ``labels``."""
    config = json.dumps({"config": {"Labels": labels or {"a": "b"}}}).encode()
    return json.dumps(_manifest(_digest(config))).encode(), config


def _manifest(config_digest: str) -> dict[str, Any]:
    return {
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest},
    }


# (case, manifest given the config's digest, config, the error's kind or None for labels {"a": "b"}, a message part)
MALFORMED: list[tuple[str, Callable[[str], Document], Document, str | None, str]] = [
    ("manifest-not-json", lambda _: b"{not json", CONFIG_OK, "invalid", "the manifest is not JSON"),
    ("manifest-a-list", lambda _: [1], CONFIG_OK, "invalid", "the manifest is not a JSON object"),
    ("manifest-too-deep", lambda _: DEEP, CONFIG_OK, "invalid", "the manifest is not JSON"),
    ("config-descriptor-a-list", lambda _: {"config": [1]}, CONFIG_OK, "invalid", "no config descriptor"),
    ("config-digest-a-path", lambda _: _manifest("sha256:../../x"), CONFIG_OK, "invalid", "no config descriptor"),
    ("media-type-a-list", lambda d: {**_manifest(d), "mediaType": [1]}, CONFIG_OK, None, ""),
    ("manifests-an-int", lambda _: {"manifests": 5}, CONFIG_OK, "not-found", "no linux/amd64 manifest"),
    (
        "platform-a-string",
        lambda d: {"manifests": [{"digest": d, "platform": "linux"}, {"digest": d, "platform": [1]}]},
        CONFIG_OK,
        "not-found",
        "offers None/None, None/None",
    ),
    ("config-not-json", _manifest, b"\xff{", "invalid", "the config blob is not JSON"),
    ("config-too-deep", _manifest, DEEP, "invalid", "the config blob is not JSON"),
    ("config-a-list", _manifest, [1], "invalid", "the config blob is not a JSON object"),
    ("config-config-a-list", _manifest, {"config": [1]}, "invalid", "config or config.Labels is not an object"),
    ("labels-a-list", _manifest, {"config": {"Labels": ["a"]}}, "invalid", "config or config.Labels is not an object"),
]


def _expect(read: Callable[[], Any], kind: str | None, part: str) -> None:
    if kind is None:
        assert read().labels == {"a": "b"}
        return
    with pytest.raises(RegistryError) as info:
        read()
    assert (info.value.kind, part in info.value.message) == (kind, True), info.value.message


def _layout(root: pathlib.Path, repo: str, index: Document, blobs: list[bytes]) -> None:
    layout = root / repo
    (layout / "blobs" / "sha256").mkdir(parents=True)
    for blob in blobs:
        (layout / "blobs" / "sha256" / _digest(blob).split(":", 1)[1]).write_bytes(blob)
    (layout / "index.json").write_bytes(_bytes(index))


@pytest.mark.parametrize(("case", "manifest_of", "config", "kind", "part"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_a_malformed_layout_fails_that_image_classified(
    tmp_path: pathlib.Path,
    case: str,
    manifest_of: Callable[[str], Document],
    config: Document,
    kind: str | None,
    part: str,
) -> None:
    """Before, most of these raised AttributeError, KeyError, TypeError or JSONDecodeError out of the read (and
    stopped discover-models for every model)."""
    config_bytes = _bytes(config)
    manifest = _bytes(manifest_of(_digest(config_bytes)))
    index = {"manifests": [{"digest": _digest(manifest), "annotations": {REF_NAME: "1"}}]}
    _layout(tmp_path, "unit/x", index, [manifest, config_bytes])
    client = RegistryClient(mirrors={"docker.io": f"oci-layout:{tmp_path}"})
    _expect(lambda: client.read_config("unit/x:1"), kind, part)


@pytest.mark.parametrize(
    ("index", "kind", "part"),
    [
        ([{"digest": "sha256:" + "a" * 64}], "invalid", "index.json is not a JSON object but a list"),
        (b"{", "invalid", "index.json is not JSON"),
        ({"manifests": {"digest": "x"}}, "not-found", "1 is not in the image layout"),
        ({"manifests": [{"annotations": {REF_NAME: "1"}}]}, "invalid", "the image layout's entry for 1 has no digest"),
        ({"manifests": [{"annotations": "1", "digest": "sha256:0"}]}, "not-found", "1 is not in the image layout"),
        ({"manifests": [{"annotations": {REF_NAME: "1"}, "digest": "sha256:0"}]}, "invalid", "unsupported digest"),
    ],
)
def test_a_malformed_layout_index_fails_that_image_classified(
    tmp_path: pathlib.Path, index: Document, kind: str, part: str
) -> None:
    _layout(tmp_path, "unit/x", index, [])
    client = RegistryClient(mirrors={"docker.io": f"oci-layout:{tmp_path}"})
    _expect(lambda: client.read_config("unit/x:1"), kind, part)


def test_an_unreadable_layout_or_an_overlong_name_fails_that_image_classified(tmp_path: pathlib.Path) -> None:
    (tmp_path / "unit" / "dir" / "index.json").mkdir(parents=True)
    client = RegistryClient(mirrors={"docker.io": f"oci-layout:{tmp_path}"})
    _expect(lambda: client.read_config("unit/dir:1"), "invalid", "cannot be read")
    _expect(lambda: client.read_config("unit/missing:1"), "not-found", "no image layout")
    # A 5000-character repository was an OSError (file name too long); Docker refuses names over 255 characters.
    _expect(lambda: client.read_config("docker.io/" + "a" * 5000 + ":1"), "invalid", "not a valid image reference")
    assert parse_reference("r.io/" + "a" * 250).repository == "a" * 250


class StaticRegistry:
    """Serves fixed manifests and blobs under ``/v2/``, whatever they hold: a real registry refuses to store a
    malformed manifest, but a registry (or a proxy in front of one) may still serve one."""

    def __init__(self, address: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.scripts: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = {}
        """Path (without its query) -> what the server does instead of serving a file (a hostile answer)."""
        self.received: list[tuple[str, str | None]] = []
        """Every request: its path and its Authorization header."""
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                registry.received.append((self.path, self.headers.get("Authorization")))
                script = registry.scripts.get(self.path.split("?", 1)[0])
                if script is not None:
                    script(self)
                    return
                body = registry.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *_: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        if tls is not None:  # served over HTTPS
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.host = f"{address}:{self.server.server_address[1]}"

    def image(self, repo: str, manifest: bytes, config: bytes) -> str:
        """Serve an image's manifest under tag ``1`` and by digest, and its config blob; its reference."""
        self.files[f"/v2/{repo}/manifests/1"] = manifest
        self.files[f"/v2/{repo}/manifests/{_digest(manifest)}"] = manifest
        self.files[f"/v2/{repo}/blobs/{_digest(config)}"] = config
        return f"{self.host}/{repo}:1"


def _serving(address: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> Iterator[StaticRegistry]:
    """A :class:`StaticRegistry` serving until the test ends."""
    registry = StaticRegistry(address, tls)
    threading.Thread(target=registry.server.serve_forever, args=(0.05,), daemon=True).start()
    yield registry
    registry.server.shutdown()
    registry.server.server_close()


@pytest.fixture()
def static_registry() -> Iterator[StaticRegistry]:
    yield from _serving()


@pytest.mark.parametrize(("case", "manifest_of", "config", "kind", "part"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_a_malformed_registry_document_fails_that_image_classified(
    static_registry: StaticRegistry,
    case: str,
    manifest_of: Callable[[str], Document],
    config: Document,
    kind: str | None,
    part: str,
) -> None:
    """The registry path classifies the same documents the same way (a deep config blob was a RecursionError)."""
    config_bytes = _bytes(config)
    image = static_registry.image("unit/x", _bytes(manifest_of(_digest(config_bytes))), config_bytes)
    _expect(lambda: RegistryClient(attempts=1).read_config(image), kind, part)


# ----------------------------------------------------------------------------- a registry that misbehaves on purpose


def _answer(status: int, body: bytes = b"", **headers: str) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    """A scripted answer: ``status``, ``headers`` and ``body``."""

    def script(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.end_headers()
        handler.wfile.write(body)

    return script


@pytest.fixture()
def second_registry() -> Iterator[StaticRegistry]:
    """Another host: where a hostile registry redirects."""
    yield from _serving()


def test_a_challenge_from_a_host_the_registry_redirected_to_is_never_sent_the_pull_secret(
    static_registry: StaticRegistry, second_registry: StaticRegistry
) -> None:
    """The registry redirects the config blob to another host, which answers 401 with a token realm of its own.
    Before, the pull secret's Basic credentials went to that realm (the pattern of containerd's CVE-2020-15157)."""
    manifest, config = _image_documents()
    image = static_registry.image("team/model", manifest, config)
    blob = f"/v2/team/model/blobs/{_digest(config)}"
    static_registry.scripts[blob] = _answer(307, Location=f"http://{second_registry.host}{blob}")
    second_registry.scripts[blob] = _answer(
        401, WWW_Authenticate=f'Bearer realm="http://{second_registry.host}/token",service="other"'
    )
    credential = Credential("alice", "S3cretPassw0rd-XYZ")
    with pytest.raises(RegistryError, match="redirected to 127.0.0.1:[0-9]+, which asks for credentials") as raised:
        RegistryClient(attempts=1).read_config(image, credential)
    assert raised.value.kind == "auth"
    assert [path for path, _ in second_registry.received] == [blob]  # no token request
    assert all(header is None for _, header in second_registry.received)


def _certificate(directory: pathlib.Path, address: str) -> tuple[pathlib.Path, pathlib.Path]:
    """A self-signed certificate for the IP ``address`` and its key, as PEM files (the certificate is its own CA)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "registry.pem", directory / "registry.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


HTTPS_ADDRESS, ELSEWHERE = "127.0.0.2", "127.0.0.3"
"""Loopback addresses that are not the client's loopback hosts (127.0.0.1, localhost, [::1], spoken to over plain
HTTP): a registry there is reached over HTTPS, and a plain-HTTP token service there is another host's."""


@pytest.fixture()
def https_registry(tmp_path: pathlib.Path) -> Iterator[tuple[StaticRegistry, pathlib.Path]]:
    """A :class:`StaticRegistry` served over HTTPS at :data:`HTTPS_ADDRESS`, and the certificate to trust."""
    cert, key = _certificate(tmp_path, HTTPS_ADDRESS)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    for registry in _serving(HTTPS_ADDRESS, context):
        yield registry, cert


@pytest.fixture()
def plain_token_service() -> Iterator[StaticRegistry]:
    """A plain-HTTP server at :data:`ELSEWHERE`: a token service on another host than the registry."""
    yield from _serving(ELSEWHERE)


def _trusting(cert: pathlib.Path, **options: Any) -> RegistryClient:
    """A client that trusts ``cert`` (and nothing else)."""
    import requests

    session = requests.Session()
    session.verify = str(cert)
    return RegistryClient(attempts=1, session=session, **options)


def test_an_https_registry_naming_a_plain_http_token_service_is_never_sent_the_pull_secret(
    https_registry: tuple[StaticRegistry, pathlib.Path], plain_token_service: StaticRegistry
) -> None:
    """Before, the pull secret's Basic credentials went in clear to the ``http://`` realm an HTTPS registry named
    (as Docker sends them). Now the read fails as ``auth`` and the realm is never asked; anonymously (no pull
    secret) it is still asked, and a registry listed as insecure (plain HTTP) may name one."""
    registry, cert = https_registry
    manifest, config = _image_documents()
    image = registry.image("team/model", manifest, config)
    token = json.dumps({"token": "pull-token-123"}).encode()
    challenge = f'Bearer realm="http://{plain_token_service.host}/token",service="registry"'
    plain_token_service.scripts["/token"] = _answer(200, token, Content_Type="application/json")
    registry.scripts["/v2/team/model/manifests/1"] = _answer(401, WWW_Authenticate=challenge)
    credential = Credential("alice", "S3cretPassw0rd-XYZ")

    with pytest.raises(RegistryError, match="reached over HTTPS but names a token service over plain HTTP") as raised:
        _trusting(cert).read_config(image, credential)
    assert raised.value.kind == "auth"
    assert plain_token_service.host in raised.value.message and "S3cretPassw0rd" not in raised.value.message
    assert plain_token_service.received == []  # no request at all, so no credential in clear
    assert [path for path, _ in registry.received] == ["/v2/team/model/manifests/1"]

    # Anonymously nothing secret is sent: the token service is asked, without an Authorization header.
    with pytest.raises(RegistryError, match="refused the credentials"):  # the scripted registry keeps saying 401
        _trusting(cert).read_config(image)
    assert [(path.split("?")[0], header) for path, header in plain_token_service.received] == [("/token", None)]


def test_a_registry_over_plain_http_may_name_a_plain_http_token_service(
    static_registry: StaticRegistry, plain_token_service: StaticRegistry
) -> None:
    """A registry the client speaks plain HTTP to (listed as insecure, or on loopback) already gets the credentials
    in clear, and so does the token service it names."""
    manifest, config = _image_documents()
    image = static_registry.image("team/model", manifest, config)
    token = json.dumps({"token": "pull-token-123"}).encode()
    plain_token_service.scripts["/token"] = _answer(200, token, Content_Type="application/json")
    static_registry.scripts["/v2/team/model/manifests/1"] = _answer(
        401, WWW_Authenticate=f'Bearer realm="http://{plain_token_service.host}/token",service="registry"'
    )
    credential = Credential("alice", "S3cretPassw0rd-XYZ")
    with pytest.raises(RegistryError, match="refused the credentials"):  # the scripted registry keeps saying 401
        RegistryClient(attempts=1).read_config(image, credential)
    assert [header for _, header in plain_token_service.received] == [f"Basic {credential.basic}"]


@pytest.mark.parametrize(
    ("registry_url", "realm", "with_credentials", "refused"),
    [
        ("https://r.io/v2/x", "http://auth.example.com/token", True, "over plain HTTP (http://auth.example.com)"),
        ("https://r.io/v2/x", "http://user:pw@auth.example.com/token", True, "(http://auth.example.com)"),
        ("https://r.io/v2/x", "http://127.0.0.2:5001/token", True, "over plain HTTP (http://127.0.0.2:5001)"),
        ("https://r.io/v2/x", "https://auth.example.com/token", True, None),
        ("https://r.io/v2/x", "http://auth.example.com/token", False, None),
        ("http://r.io/v2/x", "http://auth.example.com/token", True, None),
        ("https://r.io/v2/x", "http://insecure.example.com:5000/token", True, None),
        ("https://r.io/v2/x", "http://127.0.0.1:5001/token", True, None),
        ("https://r.io/v2/x", "http://localhost/token", True, None),
        ("https://r.io/v2/x", "http://[::1]:5001/token", True, None),
        ("https://r.io/v2/x", "ftp://auth.example.com/token", False, "not an http(s) URL (ftp:)"),
        ("http://r.io/v2/x", "/token", True, "not an http(s) URL"),
        ("http://r.io/v2/x", "http://[::1/token", True, "not an http(s) URL"),
    ],
)
def test_which_token_services_are_asked_with_the_pull_secret(
    registry_url: str, realm: str, with_credentials: bool, refused: str | None
) -> None:
    """An HTTPS registry's credentials go over plain HTTP only to hosts the client speaks plain HTTP to anyway (listed
    insecure, or loopback as the client names it); a realm that is no http(s) URL is refused outright."""
    from tasks.clients.oci.registry import realm_refusal

    client = RegistryClient(insecure=("insecure.example.com",))
    refusal = realm_refusal(registry_url, realm, with_credentials, client.plain_http)
    assert (refusal is None) == (refused is None), refusal
    assert refused is None or (refusal is not None and refused in refusal and "pw" not in refusal), refusal


def test_a_manifest_that_is_not_the_one_its_digest_names_is_refused(static_registry: StaticRegistry) -> None:
    """Before, an image pinned by digest read whatever manifest the registry sent (and its labels)."""
    manifest, config = _image_documents()
    swapped, swapped_config = _image_documents(labels={"com.amd.aim.model.canonicalName": "evil/substituted:1"})
    static_registry.image("team/model", manifest, config)
    static_registry.image("team/other", swapped, swapped_config)
    static_registry.files[f"/v2/team/model/manifests/{_digest(manifest)}"] = swapped
    with pytest.raises(RegistryError, match="does not match its digest") as raised:
        RegistryClient(attempts=1).read_config(f"{static_registry.host}/team/model@{_digest(manifest)}")
    assert raised.value.kind == "invalid"


def test_a_config_digest_of_an_unknown_algorithm_is_refused(static_registry: StaticRegistry) -> None:
    config = json.dumps({"config": {"Labels": {}}}).encode()
    manifest = json.dumps(
        {"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "foo:aaa"}}
    ).encode()
    image = static_registry.image("team/model", manifest, config)
    static_registry.files["/v2/team/model/blobs/foo:aaa"] = config
    with pytest.raises(RegistryError, match="unsupported digest algorithm 'foo'"):
        RegistryClient(attempts=1).read_config(image)


@pytest.mark.parametrize(
    ("token_answer", "kind", "needle"),
    [
        (b'{"token": "' + b"t" * (2 << 20) + b'"}', "invalid", "larger than 1048576 bytes"),
        (b'["a"]', "auth", "not a JSON object"),
        (b"[" * 100_000, "auth", "not a JSON object"),
        ('{"token": "abc\u20ac"}'.encode(), "auth", "not printable ASCII"),
        (b'{"token": false}', "auth", "returned no token"),
    ],
    ids=["huge", "list", "deep", "not-ascii", "boolean"],
)
def test_a_token_service_answer_that_is_not_a_usable_token_is_an_auth_failure(
    static_registry: StaticRegistry, token_answer: bytes, kind: str, needle: str
) -> None:
    """Before, a list answer was an AttributeError, a deep one a RecursionError and a non-ASCII token a
    UnicodeEncodeError (each recorded as an unexpected, terminal failure), and a 300 MB token was held in memory
    and sent on as a header."""
    manifest, config = _image_documents()
    image = static_registry.image("team/model", manifest, config)
    static_registry.scripts["/v2/team/model/manifests/1"] = _answer(
        401, WWW_Authenticate=f'Bearer realm="http://{static_registry.host}/token",service="registry"'
    )
    static_registry.scripts["/token"] = _answer(200, token_answer, Content_Type="application/json")
    with pytest.raises(RegistryError, match=needle) as raised:
        RegistryClient(attempts=1).read_config(image)
    assert raised.value.kind == kind


def test_an_answer_that_trickles_in_ends_at_the_deadline(static_registry: StaticRegistry) -> None:
    """A byte every 0.2 s keeps every read under the socket timeout; before, a manifest sent that way held
    discover-models (every model) for as long as the server liked."""
    import time

    manifest, config = _image_documents()
    image = static_registry.image("team/model", manifest, config)

    def trickle(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(manifest)))
        handler.end_headers()
        for byte in manifest:
            try:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            except OSError:
                return
            time.sleep(0.2)

    static_registry.scripts["/v2/team/model/manifests/1"] = trickle
    started = time.monotonic()
    with pytest.raises(RegistryError, match="no complete answer within 1s") as raised:
        RegistryClient(attempts=1, body_deadline_s=1.0).read_config(image)
    assert raised.value.kind == "unavailable" and time.monotonic() - started < 5


def test_a_mirror_is_answered_with_its_own_pull_secret_never_the_registrys() -> None:
    client = RegistryClient(mirrors={"registry.example.com": "mirror.internal:5000"})
    keychain = {"registry.example.com": Credential("a", "registry-pw"), "mirror.internal:5000": Credential("b", "m")}
    source = client.source_of(parse_reference("registry.example.com/team/model:1"))
    assert source.host == "mirror.internal:5000"
    assert credential_for(source, keychain) == keychain["mirror.internal:5000"]
    assert credential_for(client.source_of(parse_reference("other.example.com/x:1")), keychain) is None


def test_a_mirror_given_with_credentials_is_refused_without_quoting_them() -> None:
    from tasks.clients.oci import parse_mirrors

    with pytest.raises(ValueError, match="mirror of registry.example.com names a user") as raised:
        parse_mirrors({"registry.example.com": "bob:MirrorPass@mirror.internal:5000"})
    assert "MirrorPass" not in str(raised.value)


def test_ipv6_localhost_with_a_port_is_spoken_to_over_http() -> None:
    client = RegistryClient()
    assert client._url(parse_reference("[::1]:5001/team/model:1"), "/manifests/1").startswith("http://[::1]:5001/")
