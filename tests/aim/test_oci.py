"""tasks.clients.oci against the real docker-registry: manifests, indexes, auth challenges, error classes."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import pathlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tasks.clients.oci import (
    REF_NAME,
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

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = registry.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *_: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"

    def image(self, repo: str, manifest: bytes, config: bytes) -> str:
        """Serve an image's manifest under tag ``1`` and by digest, and its config blob; its reference."""
        self.files[f"/v2/{repo}/manifests/1"] = manifest
        self.files[f"/v2/{repo}/manifests/{_digest(manifest)}"] = manifest
        self.files[f"/v2/{repo}/blobs/{_digest(config)}"] = config
        return f"{self.host}/{repo}:1"


@pytest.fixture()
def static_registry() -> Iterator[StaticRegistry]:
    registry = StaticRegistry()
    threading.Thread(target=registry.server.serve_forever, args=(0.05,), daemon=True).start()
    yield registry
    registry.server.shutdown()
    registry.server.server_close()


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
