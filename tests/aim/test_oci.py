"""tasks.clients.oci against the real docker-registry: manifests, indexes, auth challenges, error classes."""

from __future__ import annotations

import base64
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tasks.clients.oci import RegistryClient, RegistryError, credential_for, parse_dockerconfigjson, parse_reference


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
