"""The downloader against a real S3 API (moto[server] with authentication on)."""

from __future__ import annotations

import os
import pathlib
import threading
import time
import uuid

import pytest
from botocore.loaders import JSONFileLoader

from engine.caches.identity import CACHE_MARKER
from tasks.clients.sources.listing import RemoteFile
from tasks.downloader import (
    AuthenticationFailed,
    ChecksumMismatch,
    DeadlineExceeded,
    EndpointNotAllowed,
    FillDeadline,
    InsufficientSpace,
    PathTraversal,
    SourceNotFound,
    fill_cache,
    is_complete,
    read_manifest,
    source_size,
)
from tasks.downloader.plan import STAGING_DIR
from tests.downloader.conftest import sha256, tree
from tests.servers.capture import captured_listener

MiB = 1024 * 1024


def upload(s3_server, bucket: str, objects: dict[str, bytes]) -> None:  # type: ignore[no-untyped-def]
    client = s3_server.client()
    for key, body in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)


@pytest.fixture
def model(s3_server):  # type: ignore[no-untyped-def]
    """A bucket with a model under ``llama/``: one multi-part-sized file, small files, a nested file, a neighbour."""
    bucket = s3_server.new_bucket()
    objects = {
        "llama/config.json": b'{"model_type": "llama"}',
        "llama/model.safetensors": os.urandom(12 * MiB + 12345),
        "llama/tokenizer/tokenizer.json": os.urandom(3000),
        "llama/empty.txt": b"",
        "llama2/other.bin": b"not part of the llama prefix",
    }
    upload(s3_server, bucket, objects)
    return bucket, {k.removeprefix("llama/"): v for k, v in objects.items() if k.startswith("llama/")}


def test_full_download_of_a_prefix_in_ranged_parts(s3_server, model, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    bucket, expected = model
    counting, url = proxy(s3_server.endpoint)
    snapshots = []
    manifest = fill_cache(
        f"s3://{bucket}/llama", tmp_path, s3_server.credentials(url), snapshots.append, part_size=5 * MiB
    )

    files = tree(tmp_path)
    marker = files.pop(CACHE_MARKER)
    assert files == expected  # every file intact, the llama2/ neighbour not included
    assert b'"source": "s3://' in marker
    assert {f.path: f.sha256 for f in manifest.files} == {k: sha256(v) for k, v in expected.items()}
    assert manifest.revision is None and manifest.total_bytes == sum(map(len, expected.values()))
    assert read_manifest(tmp_path) == manifest and is_complete(tmp_path, f"s3://{bucket}/llama")
    # 12 MiB + a bit in 5 MiB parts: three ranged GETs for the big object.
    ranges = [r.range for r in counting.gets("model.safetensors")]
    assert len(ranges) == 3 and all(r and r.startswith("bytes=") for r in ranges)
    assert snapshots[-1].bytes_done == snapshots[-1].bytes_total == manifest.total_bytes
    assert snapshots[-1].files_done == 4 and snapshots[-1].phase == "complete"
    assert not (tmp_path / STAGING_DIR).exists()

    # A second run finds the marker and fetches nothing.
    counting.reset()
    assert fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(url)) == manifest
    assert counting.gets() == []


def test_source_size_lists_without_downloading(s3_server, model) -> None:  # type: ignore[no-untyped-def]
    bucket, expected = model
    assert sorted(source_size(f"s3://{bucket}/llama", s3_server.credentials())) == sorted(
        len(v) for v in expected.values()
    )


def test_a_second_client_parses_no_botocore_data_again(s3_server, model, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Each S3 client has a botocore session of its own (its credentials) and they share the loaded service data:
    the S3 model and endpoint rules are parsed once per process, not once per client."""
    bucket, expected = model
    source_size(f"s3://{bucket}/llama", s3_server.credentials())
    read: list[str] = []
    original = JSONFileLoader.load_file

    def recording(self: JSONFileLoader, file_path: str) -> object:
        read.append(file_path)
        return original(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", recording)
    again = source_size(f"s3://{bucket}/llama", s3_server.credentials())
    assert sorted(again) == sorted(len(v) for v in expected.values())
    assert read == []


def test_single_object_source(s3_server, model, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    bucket, expected = model
    manifest = fill_cache(f"s3://{bucket}/llama/config.json", tmp_path, s3_server.credentials())
    assert [f.path for f in manifest.files] == ["config.json"]
    assert (tmp_path / "config.json").read_bytes() == expected["config.json"]


def test_missing_file_after_completion_is_refetched_alone(s3_server, model, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    bucket, expected = model
    counting, url = proxy(s3_server.endpoint)
    fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(url))
    (tmp_path / "config.json").unlink()
    assert not is_complete(tmp_path)
    counting.reset()
    fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(url))
    assert tree(tmp_path)["config.json"] == expected["config.json"]
    # The intact files were verified against their ETag (MD5) on disk, not fetched again.
    assert [r.path for r in counting.gets(f"/{bucket}/llama/")] == [f"/{bucket}/llama/config.json"]


def test_wrong_secret_fails_with_reason_and_no_secret(s3_server, model, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    bucket, _ = model
    secret = "wrong-secret-value-1234567890"
    with pytest.raises(AuthenticationFailed) as info:
        fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(aws_secret_access_key=secret))
    assert info.value.reason == "AuthenticationFailed"
    assert "SignatureDoesNotMatch" in str(info.value)
    assert secret not in str(info.value) and secret not in repr(info.value.args)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(AuthenticationFailed, match="InvalidAccessKeyId"):
        fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(aws_access_key_id="AKIANOSUCHKEY0000000"))
    assert not (tmp_path / CACHE_MARKER).exists()


def test_missing_bucket_or_prefix_is_source_not_found(s3_server, model, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    bucket, _ = model
    with pytest.raises(SourceNotFound, match="NoSuchBucket") as info:
        fill_cache("s3://no-such-bucket-here/llama", tmp_path, s3_server.credentials())
    assert info.value.reason == "SourceNotFound"
    with pytest.raises(SourceNotFound, match="no objects under"):
        fill_cache(f"s3://{bucket}/nothing-here", tmp_path, s3_server.credentials())


def test_remote_key_escaping_the_cache_is_rejected_before_writing(s3_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    bucket = s3_server.new_bucket()
    upload(s3_server, bucket, {"m/a.json": b"{}", "m/../../x": b"evil"})
    dest = tmp_path / "cache"
    with pytest.raises(PathTraversal, match=r"\.\./\.\./x") as info:
        fill_cache(f"s3://{bucket}/m", dest, s3_server.credentials())
    assert info.value.reason == "PathTraversal"
    assert [p.name for p in tmp_path.rglob("*")] == ["cache"]  # nothing outside, nothing inside


def test_volume_too_small_is_refused_before_downloading(s3_server, model, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    bucket, _ = model
    counting, url = proxy(s3_server.endpoint)
    with pytest.raises(InsufficientSpace, match="free; nothing was downloaded") as info:
        fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(url), capacity_bytes=4 * MiB)
    assert info.value.reason == "InsufficientSpace"
    assert counting.gets(f"/{bucket}/llama/") == []  # no object was fetched (only the listing)
    assert [p.name for p in tmp_path.iterdir()] == []


def test_two_fillers_at_once_one_waits(s3_server, model, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    bucket, expected = model
    counting, url = proxy(s3_server.endpoint, throttle=8 * MiB)
    waited: list[str] = []
    results: dict[str, object] = {}

    def first() -> None:
        results["first"] = fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(url), concurrency=2)

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / ".modelplane-cache.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    results["second"] = fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(url), on_wait=waited.append)
    thread.join()
    assert waited, "the second filler did not wait for the lock"
    assert results["first"] == results["second"]
    # Every object fetched by one filler only: the second found the cache complete after waiting.
    assert len(counting.gets("model.safetensors")) == 1  # one 16 MiB part
    assert len(counting.gets("config.json")) == 1
    assert {k: v for k, v in tree(tmp_path).items() if k != CACHE_MARKER} == expected


def test_corrupted_partial_file_is_detected_and_discarded(s3_server, model, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    bucket, expected = model
    body = expected["config.json"]
    etag = s3_server.client().head_object(Bucket=bucket, Key="llama/config.json")["ETag"].strip('"')
    remote = RemoteFile(path="config.json", size=len(body), etag=etag)
    staging = tmp_path / STAGING_DIR
    staging.mkdir()
    (staging / remote.staging_name).write_bytes(b"X" * 5)  # a partial file that rotted on disk

    with pytest.raises(ChecksumMismatch, match="config.json: md5") as info:
        fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials())
    assert info.value.reason == "ChecksumMismatch"
    assert not (tmp_path / "config.json").exists() and not (staging / remote.staging_name).exists()
    assert not (tmp_path / CACHE_MARKER).exists()
    # The next run fetches it anew and completes.
    fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials())
    assert (tmp_path / "config.json").read_bytes() == body


def test_a_dropped_connection_resumes_the_part(s3_server, model, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    bucket, expected = model
    counting, url = proxy(s3_server.endpoint)
    counting.break_once("model.safetensors", 3 * MiB)
    fill_cache(f"s3://{bucket}/llama", tmp_path, s3_server.credentials(url), part_size=5 * MiB, concurrency=1)
    assert (tmp_path / "model.safetensors").read_bytes() == expected["model.safetensors"]
    ranges = [r.range for r in counting.gets("model.safetensors")]
    # The first part broke off after 3 MiB and was asked again from there, not from 0.
    assert ranges[0] == f"bytes=0-{5 * MiB - 1}" and ranges[1] == f"bytes={3 * MiB}-{5 * MiB - 1}"
    assert len(ranges) == 4


def test_kthena_env_names_fill_from_a_non_default_endpoint(s3_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    """``ENDPOINT``/``ACCESS_KEY``/``SECRET_KEY`` (Kthena's downloader names) work alone; AWS names win when both are set."""
    from tasks.downloader import Credentials

    bucket = f"aios_models_{uuid.uuid4().hex[:8]}"
    s3_server.client().create_bucket(Bucket=bucket)
    upload(s3_server, bucket, {"m/config.json": b"{}"})
    kthena = {"ENDPOINT": s3_server.endpoint, "ACCESS_KEY": s3_server.access_key, "SECRET_KEY": s3_server.secret_key}
    creds = Credentials.from_env(kthena)
    assert (creds.aws_endpoint_url, creds.aws_access_key_id) == (s3_server.endpoint, s3_server.access_key)
    assert s3_server.secret_key not in repr(creds)
    fill_cache(f"s3://{bucket}/m", tmp_path, creds)
    assert (tmp_path / "config.json").read_bytes() == b"{}"
    both = Credentials.from_env({**kthena, "AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ACCESS_KEY_ID": "aws"})
    assert (both.aws_endpoint_url, both.aws_access_key_id, both.aws_secret_access_key) == (
        "http://127.0.0.1:1",
        "aws",
        s3_server.secret_key,
    )


def test_an_endpoint_in_the_uri_never_receives_the_configured_credentials(s3_server, model, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bucket, _ = model
    creds = s3_server.credentials()
    with captured_listener() as listener:
        uri = f"s3://{bucket}/llama?endpoint={listener.url}"
        with pytest.raises(EndpointNotAllowed, match=r"sourceUri: endpoint http://127\.0\.0\.1:\d+ is not where"):
            fill_cache(uri, tmp_path / "a", creds)
        with pytest.raises(EndpointNotAllowed):
            source_size(uri, creds)
    assert listener.connections == []  # no connection, so no access key id and no signed request
    assert creds.aws_access_key_id.encode() not in listener.received


def test_an_endpoint_in_the_uri_is_sent_no_credentials_botocore_would_find_by_itself(  # type: ignore[no-untyped-def]
    model, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no keys configured, an endpoint the URI names is an anonymous download: unsigned. Before, botocore
    signed it with its default chain (here a shared credentials file; in a cluster a pod's web identity or the
    instance metadata service), sending them to whatever server the ModelCache named."""
    from tasks.downloader import Credentials, DownloadError

    bucket, _ = model
    shared = tmp_path / "credentials"
    shared.write_text("[default]\naws_access_key_id = AKIAAMBIENTKEY000001\naws_secret_access_key = ambient-secret\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with captured_listener() as listener:
        with pytest.raises(DownloadError):  # the listener speaks no S3
            fill_cache(f"s3://{bucket}/llama?endpoint={listener.url}", tmp_path / "a", Credentials())
    assert listener.connections, "the anonymous download was not attempted"
    assert b"AKIAAMBIENTKEY000001" not in listener.received and b"Authorization" not in listener.received


def test_an_endpoint_in_the_uri_equal_to_the_configured_one_is_used(s3_server, model, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bucket, expected = model
    uri = f"s3://{bucket}/llama?endpoint={s3_server.endpoint}"
    manifest = fill_cache(uri, tmp_path, s3_server.credentials())
    assert sorted(f.path for f in manifest.files) == sorted(expected)


def test_a_short_key_does_not_mangle_the_message(s3_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    bucket = s3_server.new_bucket("demo")  # the example's old key, "demo", is part of the bucket's name
    upload(s3_server, bucket, {"tiny/config.json": b"{}"})
    with pytest.raises(AuthenticationFailed) as caught:
        fill_cache(f"s3://{bucket}/tiny", tmp_path, s3_server.credentials(aws_access_key_id="demo"))
    assert f"s3://{bucket}/tiny" in caught.value.message  # before: s3://***-.../tiny, which told the key away
    assert "***" not in caught.value.message


@pytest.mark.timeout(120)  # without the deadline's socket shutdown the drip holds the fill for good
def test_a_deadline_ends_a_header_drip_and_the_next_fill_resumes_the_parts(  # type: ignore[no-untyped-def]
    s3_server, model, tmp_path: pathlib.Path, proxy
) -> None:
    """One ranged GET's headers come a byte at a time while the other parts stream slowly: the deadline ends the fill
    (the blocked GET too, and botocore retries nothing after it), keeping each part's progress; the next fill asks
    only for the rest of each part."""
    bucket, expected = model
    counting, url = proxy(s3_server.endpoint, throttle=1 * MiB)
    counting.drip_once("tokenizer.json")
    source, credentials = f"s3://{bucket}/llama", s3_server.credentials(url)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="did not complete within its deadline of 3s") as raised:
        fill_cache(source, tmp_path, credentials, part_size=5 * MiB, deadline=FillDeadline(3))
    assert time.monotonic() - started < 15 and raised.value.reason == "DeadlineExceeded"
    assert not (tmp_path / CACHE_MARKER).exists() and not (tmp_path / "model.safetensors").exists()
    assert [r.status for r in counting.gets("tokenizer.json")] == [0]  # the dripped answer, no retry after it
    fetched = counting.body_bytes("model.safetensors")
    assert 0 < fetched < len(expected["model.safetensors"])

    counting.reset()
    counting.throttle = None
    fill_cache(source, tmp_path, credentials, part_size=5 * MiB)
    files = tree(tmp_path)
    files.pop(CACHE_MARKER)
    assert files == expected
    starts = [
        int((r.range or "bytes=0-").removeprefix("bytes=").split("-")[0]) for r in counting.gets("model.safetensors")
    ]
    assert any(start % (5 * MiB) for start in starts), starts  # a part resumed where it stopped
    assert counting.body_bytes("model.safetensors") < len(expected["model.safetensors"])
