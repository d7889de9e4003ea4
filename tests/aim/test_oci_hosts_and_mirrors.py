"""What tasks.clients.oci refuses up front rather than retrying: a registry host no connection can reach (an invalid
reference, terminal for its model) and an ``oci-layout:`` mirror directory that is not there (a configuration error
of the whole run, never a model's ImageNotFound)."""

from __future__ import annotations

import pathlib

import pytest

from engine.aim.discovery import REASON_INVALID_IMAGE, TERMINAL_REASONS
from tasks.aim.images import Keychain, failure_reason
from tasks.clients.oci import RegistryClient, RegistryError, parse_mirrors, parse_reference

UNREACHABLE_HOSTS = [
    "../x",  # ".." is no host: before, it was requested (InvalidURL) and retried on every run
    "./x:1",
    "-/x:1",
    "-a.io/x:1",
    "a-.io/x:1",
    "a..io/x:1",
    ".a.io/x:1",
    "a.io./x:1",
    "localhost:99999/x:1",  # no such port: the same, "localhost:99999: InvalidURL while connecting"
    "localhost:0/x:1",
    "localhost:65536/x:1",
    "registry.example.com:123456/x:1",
    "[:]/x:1",  # brackets the grammar takes, but no IPv6 address
    "[1:2]:5000/x:1",
    "a" * 64 + ".io/x:1",  # a DNS label of 64 characters: urllib3 refuses it before any lookup
]


@pytest.mark.parametrize("image", UNREACHABLE_HOSTS)
def test_a_registry_host_no_connection_can_reach_is_an_invalid_reference_not_a_registry_outage(image: str) -> None:
    """Before, the host pattern took any run of letters, digits, dots and hyphens and any port: the read failed
    connecting, was classified RegistryUnavailable (temporary) and was fetched again on every run."""
    with pytest.raises(RegistryError) as raised:
        RegistryClient(attempts=1, timeout=1).read_config(image)
    assert raised.value.kind == "invalid" and "is not a valid image reference" in raised.value.message
    reason, message = failure_reason(raised.value, Keychain())
    assert reason == REASON_INVALID_IMAGE and reason in TERMINAL_REASONS
    assert message.startswith("spec.image: ")


@pytest.mark.parametrize(
    ("image", "host", "repository"),
    [
        ("localhost:65535/x:1", "localhost:65535", "x"),
        ("localhost:1/x:1", "localhost:1", "x"),
        ("r.io/x:1", "r.io", "x"),
        ("My-Registry.Example.COM/team/x:1", "My-Registry.Example.COM", "team/x"),
        ("10.0.0.1:5000/x:1", "10.0.0.1:5000", "x"),
        ("[::1]/x:1", "[::1]", "x"),
        ("[fe80::1:2]:5000/x:1", "[fe80::1:2]:5000", "x"),
        ("a" * 63 + ".io/x:1", "a" * 63 + ".io", "x"),
        ("a" * 64 + "/x:1", "docker.io", "a" * 64 + "/x"),  # a Docker Hub namespace, not a host: no label limit
        ("a-b--c.io/x:1", "a-b--c.io", "x"),
        ("team/x:1", "docker.io", "team/x"),
        ("localhost:99999", "docker.io", "library/localhost"),  # no '/': Docker Hub's localhost, tag 99999
    ],
)
def test_hosts_the_grammar_allows_are_parsed(image: str, host: str, repository: str) -> None:
    ref = parse_reference(image)
    assert (ref.host, ref.repository) == (host, repository)


def test_a_long_port_is_refused_without_converting_it() -> None:
    """The port is checked by length before ``int``, which refuses more than 4300 digits with a ValueError."""
    with pytest.raises(RegistryError, match="not a valid image reference"):
        parse_reference("localhost:" + "9" * 200 + "/x:1")


@pytest.mark.parametrize(
    ("target", "part"),
    [
        ("oci-layout:/nonexistent/modelplane-images", "directory /nonexistent/modelplane-images does not exist"),
        ("oci-layout:", "oci-layout:, names no directory"),  # before, "" became "." (the working directory)
        ("oci-layout:   ", "oci-layout:, names no directory"),
        ("oci-layout:~no-such-user-modelplane/images", "oci-layout:~no-such-user-modelplane/images"),
    ],
)
def test_an_oci_layout_mirror_without_its_directory_is_a_configuration_error(target: str, part: str) -> None:
    """Before, the client was made and every image of the mirrored registry failed ImageNotFound ("no image layout at
    ..."), a terminal verdict kept on each model until its backoff expired, even after the option was fixed."""
    with pytest.raises(ValueError, match="the registry mirror of docker.io") as raised:
        RegistryClient(mirrors={"docker.io": target})
    assert part in str(raised.value)
    with pytest.raises(ValueError):
        parse_mirrors({"docker.io": target})


def test_an_oci_layout_mirror_that_is_a_file_is_a_configuration_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "images").write_text("not a directory")
    with pytest.raises(ValueError, match=f"{tmp_path / 'images'} is not a directory"):
        parse_mirrors({"docker.io": f"oci-layout:{tmp_path / 'images'}"})


def test_a_layout_directory_without_the_repository_is_still_not_found(tmp_path: pathlib.Path) -> None:
    """The directory exists: a repository missing from it is a real not-found (ImageNotFound on that model)."""
    client = RegistryClient(mirrors={"docker.io": f"oci-layout:{tmp_path}"})
    assert client.mirrors == {"docker.io": tmp_path}
    with pytest.raises(RegistryError, match="no image layout at") as raised:
        client.read_config("docker.io/team/missing:1")
    assert raised.value.kind == "not-found"


def test_a_layout_directory_gone_since_the_run_started_is_temporary(tmp_path: pathlib.Path) -> None:
    """A mirror directory that was there when the client was made and is gone now (an unmounted volume) fails the
    read as unavailable, retried on the next run, never a terminal ImageNotFound on every model."""
    root = tmp_path / "images"
    root.mkdir()
    client = RegistryClient(mirrors={"docker.io": f"oci-layout:{root}"})
    root.rmdir()
    with pytest.raises(RegistryError, match=f"the image layout directory {root} is gone") as raised:
        client.read_config("docker.io/team/x:1")
    assert raised.value.kind == "unavailable"
