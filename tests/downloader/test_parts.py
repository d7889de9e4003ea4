"""Pieces of the downloader that need no server: path checks, credentials, redaction, manifest, progress."""

from __future__ import annotations

import hashlib
import pathlib

import pytest

from engine.caches.identity import CACHE_MARKER
from engine.redaction import WITHHELD, redact
from tasks.clients.sources.listing import Listing, RemoteFile
from tasks.downloader import Credentials, PathTraversal, ProgressTracker, is_complete, read_manifest, safe_relative_path
from tasks.downloader.manifest import CacheManifest, ManifestFile, write_manifest
from tasks.downloader.plan import check_listing


@pytest.mark.parametrize("name", ["config.json", "a/b/c.bin", "weird name (1).json", "..hidden", "x..y"])
def test_plain_relative_paths_pass(name: str) -> None:
    assert safe_relative_path(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/etc/passwd",
        "../x",
        "../../x",
        "a/../../x",
        "a/./b",
        "a//b",
        "a/",
        "a\\..\\b",
        "a\x00b",
        "..",
        ".",
        CACHE_MARKER,
        ".modelplane-cache.lock",
        ".modelplane-partial/journal.jsonl",
    ],
)
def test_escaping_or_reserved_paths_are_rejected(name: str) -> None:
    with pytest.raises(PathTraversal):
        safe_relative_path(name)


def test_listing_check_rejects_symlink_escape_duplicates_and_file_dir_clash(tmp_path: pathlib.Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "cache"
    dest.mkdir()
    (dest / "link").symlink_to(outside)
    with pytest.raises(PathTraversal, match="symlink"):
        check_listing(dest, Listing(None, (RemoteFile("link/x", 1),)))
    with pytest.raises(PathTraversal, match="twice"):
        check_listing(dest, Listing(None, (RemoteFile("a", 1), RemoteFile("a", 1))))
    with pytest.raises(PathTraversal, match="also a directory"):
        check_listing(dest, Listing(None, (RemoteFile("a", 1), RemoteFile("a/b", 1))))


def test_credentials_from_env_and_repr_hides_secrets() -> None:
    creds = Credentials.from_env(
        {
            "HUGGING_FACE_HUB_TOKEN": "hf_secret_token",
            "HF_ENDPOINT": "http://mirror",
            "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
            "AWS_ENDPOINT_URL": "http://minio:9000",
            "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_SESSION_TOKEN": "",
        }
    )
    assert (creds.hf_token, creds.hf_endpoint, creds.aws_region) == ("hf_secret_token", "http://mirror", "eu-west-1")
    assert creds.aws_session_token is None
    text = repr(creds)
    assert "hf_secret_token" not in text and "s3cr3t-value" not in text and "AKIAEXAMPLE" not in text
    assert "http://minio:9000" in text
    assert redact("token hf_secret_token and s3cr3t-value", creds.secrets) == "token *** and ***"


def test_manifest_round_trip_and_completeness(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"abc")
    manifest = CacheManifest("s3://bkt/m", None, (ManifestFile("a.bin", 3, "00" * 32, "etag"),), "2026-01-01T00:00:00Z")
    assert read_manifest(tmp_path) is None and not is_complete(tmp_path)
    write_manifest(tmp_path, manifest)
    assert read_manifest(tmp_path) == manifest
    assert is_complete(tmp_path) and is_complete(tmp_path, "s3://bkt/m") and not is_complete(tmp_path, "s3://bkt/other")
    (tmp_path / "a.bin").write_bytes(b"ab")  # a listed file shrank: no longer complete
    assert not is_complete(tmp_path)
    (tmp_path / CACHE_MARKER).write_text("{not json")
    assert read_manifest(tmp_path) is None


def test_progress_reports_rate_eta_and_final_state() -> None:
    seen = []
    tracker = ProgressTracker(seen.append, interval=0)
    tracker.start(bytes_total=1000, files_total=2, bytes_done=100, files_done=0)
    tracker.add(400)
    tracker.file_done()
    snapshot = tracker.snapshot()
    assert (snapshot.bytes_done, snapshot.files_done) == (500, 1)
    assert snapshot.fraction == 0.5 and snapshot.bytes_per_second > 0 and snapshot.eta_seconds is not None
    assert "50.0%" in snapshot.describe()
    tracker.finish()
    assert seen[-1].phase == "complete" and tracker.fetched == 400


def test_stream_hash_follows_a_rewind_to_the_start_and_gives_up_on_any_other(tmp_path: pathlib.Path) -> None:
    """A client that restarts a file (server ignored Range) is hashed afresh; a rewind elsewhere falls back to reading."""
    from tasks.downloader.hashing import HashingFile, StreamHash

    body = b"0123456789" * 1000
    remote = RemoteFile(path="a.bin", size=len(body), sha256=hashlib.sha256(body).hexdigest())
    path = tmp_path / "a.part"
    path.write_bytes(b"stale-prefix")
    hasher = StreamHash.of_prefix(path, remote, 12)
    with open(path, "ab") as handle:
        hashing = HashingFile(handle, hasher)
        hashing.write(b"more")
        hashing.seek(0)
        hashing.truncate()
        hashing.write(body[:4000])
        hashing.write(body[4000:])
    assert path.read_bytes() == body
    assert hasher.digests(len(body)) == {"sha256": remote.sha256}

    hasher = StreamHash(remote)
    with open(path, "ab") as handle:
        hashing = HashingFile(handle, hasher)
        hashing.seek(5)
        hashing.write(b"x")
    assert hasher.digests(hasher.position) is None


def test_background_hash_gives_the_stream_hash_digests_in_order_and_leaves_no_thread(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large single-stream files are hashed on a helper thread: same digests, same rewind rules, no thread left behind."""
    import threading
    import time

    from tasks.downloader.hashing import BackgroundHash, HashingFile, StreamHash

    monkeypatch.setattr(BackgroundHash, "IDLE_SECONDS", 0.05)
    body = bytes(range(256)) * 40_000
    remote = RemoteFile(path="a.bin", size=len(body), sha256=hashlib.sha256(body).hexdigest())
    path = tmp_path / "a.part"
    hasher = BackgroundHash(StreamHash(remote))
    with open(path, "ab") as handle:
        hashing = HashingFile(handle, hasher)
        hashing.write(b"wrong start")
        hashing.seek(0)  # a server that ignored Range: the client starts over
        hashing.truncate()
        for start in range(0, len(body), 65_536):
            hashing.write(memoryview(body)[start : start + 65_536])  # a buffer the caller could reuse: copied
    assert hasher.digests(len(body)) == {"sha256": remote.sha256}

    hasher = BackgroundHash(StreamHash(remote))
    hasher.update(0, body[:10])
    hasher.update(20, body[20:30])  # out of order: the file will be read back instead
    assert hasher.digests(30) is None

    deadline = time.monotonic() + 5
    while any(t.name == "modelplane-hash" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "modelplane-hash" for t in threading.enumerate())
    hasher2 = BackgroundHash(StreamHash(remote))  # and a hasher whose thread ended starts one again
    hasher2.update(0, body)
    assert hasher2.digests(len(body)) == {"sha256": remote.sha256}


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("fetching s3://demo-models/tiny-llama", "demo"),  # inside a longer word: ordinary text, kept
        ("fetching s3://bucket/demonstration", "demo"),
        ("the passwords field is empty", "password"),  # inside a longer word: kept
        ("minioadmin-bucket is missing", "minioadmin"),
    ],
)
def test_a_short_secret_never_rewrites_ordinary_text(text: str, secret: str) -> None:
    assert redact(text, [secret]) == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("access key demo was rejected", "demo"),
        ("http://user:demo@minio:9000/bucket", "demo"),
        ("token=demo&x=1", "demo"),
        ("wrong password: minioadmin.", "minioadmin"),
        ("key x9 refused", "x9"),
    ],
)
def test_a_short_secret_as_a_whole_token_withholds_the_whole_output(text: str, secret: str) -> None:
    assert redact(text, [secret, "a-long-secret-value-0123"]) == WITHHELD


def test_a_long_or_mixed_secret_is_replaced_where_it_occurs() -> None:
    text = "signed with wJalrXUtnFEMI/K7MDENG and s3cr3t99 in s3://bucket-wJalrXUtnFEMI/K7MDENG"
    assert redact(text, ["wJalrXUtnFEMI/K7MDENG", "s3cr3t99", None, ""]) == "signed with *** and *** in s3://bucket-***"


# ----------------------------------------------------------------------------- what a hostile listing can carry


@pytest.mark.parametrize(
    ("path", "size"), [("a.bin", -5), ("a.bin", "12"), ("a.bin", 12.5), ("a.bin", True), ("a.bin", None), (123, 1)]
)
def test_a_listed_file_needs_a_text_path_and_a_whole_size_of_at_least_zero(path: object, size: object) -> None:
    """Before, a negative size was summed into the free-space check (one huge file plus an equally negative one
    passed it) and a size or path of the wrong type ended in a traceback."""
    with pytest.raises(ValueError, match="path must be|listed size must be"):
        RemoteFile(path=path, size=size)  # type: ignore[arg-type]


def test_an_s3_etag_in_upper_case_hex_is_still_checked_as_the_md5() -> None:
    from tasks.clients.sources.s3 import S3Backend

    digest = hashlib.md5(b"hello world\n").hexdigest()  # noqa: S324 - S3's ETag is an MD5
    assert S3Backend._remote("config.json", "m/config.json", 12, f'"{digest.upper()}"').md5 == digest


def test_an_s3_range_answered_with_more_bytes_than_asked_is_refused_before_they_are_written() -> None:
    """No S3-compatible server here sends a longer range than asked for, so a stand-in for botocore's client
    does. Before, the extra bytes were written into the next part's place and the part counted as done: a
    multipart object (whose ETag is no MD5) was then marked complete with corrupt bytes."""
    import threading

    from engine.caches.sources import parse_source
    from tasks.clients.sources.s3 import S3Backend
    from tasks.downloader import ChecksumMismatch

    class Body:
        def iter_chunks(self, size: int) -> list[bytes]:
            return [b"x" * 6, b"y" * 6]

        def close(self) -> None:
            pass

    class Client:
        def get_object(self, **kwargs: object) -> dict[str, object]:
            return {"Body": Body()}

    backend = S3Backend.__new__(S3Backend)
    backend.source, backend.credentials, backend.client = parse_source("s3://bucket/m"), Credentials(), Client()
    written: list[tuple[int, bytes]] = []
    remote = RemoteFile(path="w.bin", size=20, etag="abc-2", remote="m/w.bin")
    with pytest.raises(ChecksumMismatch, match="sent more than the 10 bytes of the range 0-9"):
        backend.fetch_range(remote, 0, 10, lambda offset, data: written.append((offset, data)), threading.Event())
    assert written == [(0, b"x" * 6)]


@pytest.mark.parametrize(
    "shown",
    [
        "Illegal header value b'Bearer hf_TOPSECRETaaaa1111\\nbbbb2222SECRET'",
        "token 'hf_TOPSECRETaaaa1111\\nbbbb2222SECRET' refused",
        "first line hf_TOPSECRETaaaa1111 alone",
    ],
)
def test_a_secret_is_redacted_however_an_error_spells_it(shown: str) -> None:
    """A token with a newline inside reached the log, a ModelCache status and its Events as the HTTP library's
    bytes repr (``\\n`` escaped), which the plain search did not find."""
    redacted = redact(shown, ["hf_TOPSECRETaaaa1111\nbbbb2222SECRET"])
    assert "TOPSECRET" not in redacted and "2222SECRET" not in redacted, redacted


def test_a_repository_tree_whose_pages_loop_is_stopped_at_the_first_repeated_path() -> None:
    """A tree whose ``Link: rel=next`` points back at a page already read listed forever (443 requests in 20 s,
    the listing growing in memory); a path seen again ends it."""
    import itertools

    from huggingface_hub.hf_api import RepoFile

    from tasks.clients.sources.hf import _once_each
    from tasks.downloader import TransferFailed

    page = [RepoFile(path="config.json", size=2, oid="a"), RepoFile(path="model.bin", size=9, oid="b")]
    assert [f.path for f in _once_each(page, "hf://org/m@main")] == ["config.json", "model.bin"]
    with pytest.raises(TransferFailed, match="repeats 'config.json': its pages loop"):
        _once_each(itertools.cycle(page), "hf://org/m@main")
