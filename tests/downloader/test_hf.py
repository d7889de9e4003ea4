"""The downloader against a Hugging Face protocol server (olah, offline) through the real huggingface_hub client."""

from __future__ import annotations

import os
import pathlib

import pytest

from engine.caches.identity import CACHE_MARKER
from tasks.clients.sources.listing import RemoteFile
from tasks.downloader import (
    AuthenticationFailed,
    ChecksumMismatch,
    Credentials,
    SourceNotFound,
    fill_cache,
    list_source,
    read_manifest,
    source_size,
)
from tasks.downloader.plan import STAGING_DIR
from tests.downloader.conftest import sha256, tree

FILES_V1 = {
    "config.json": b'{"model_type": "llama", "v": 1}',
    "tokenizer.json": b'{"vocab": [1, 2, 3]}',
    "model.safetensors": os.urandom(300_000),  # above the LFS threshold: an LFS file with a sha256
    "original/consolidated.pth": os.urandom(150_000),
    "quant/model-q4.gguf": os.urandom(120_000),
}


@pytest.fixture(scope="module")
def repo(hf_server):  # type: ignore[no-untyped-def]
    """A repository with a v1 tag and a later commit on main that changes config.json."""
    repo_id = hf_server.repos.new_repo_id("llama")
    v1 = hf_server.repos.commit(repo_id, FILES_V1, tag="v1", message="v1")
    main = hf_server.repos.commit(repo_id, {"config.json": b'{"model_type": "llama", "v": 2}'}, message="v2")
    return repo_id, v1, main


def creds(hf_server, endpoint: str | None = None, token: str | None = None) -> Credentials:  # type: ignore[no-untyped-def]
    return Credentials(hf_endpoint=endpoint or hf_server.endpoint, hf_token=token)


def model_files(root: pathlib.Path) -> dict[str, bytes]:
    files = tree(root)
    files.pop(CACHE_MARKER)
    return files


@pytest.mark.parametrize("background_hash", [False, True], ids=["hashed-inline", "hashed-on-a-helper-thread"])
def test_full_download_at_main(hf_server, repo, tmp_path: pathlib.Path, monkeypatch, background_hash: bool) -> None:  # type: ignore[no-untyped-def]
    if background_hash:  # large files are hashed on a helper thread: make every file large
        monkeypatch.setattr("tasks.downloader.transfer.BACKGROUND_HASH_BYTES", 0)
    monkeypatch.setattr(
        "tasks.downloader.transfer.hash_file",
        lambda *a: pytest.fail("a file was read back: the streamed hash was lost"),
    )
    repo_id, _v1, main = repo
    snapshots = []
    manifest = fill_cache(f"hf://{repo_id}", tmp_path, creds(hf_server), snapshots.append)
    files = model_files(tmp_path)
    assert files.pop(".gitattributes").count(b"filter=lfs") == 3
    assert files == {**FILES_V1, "config.json": b'{"model_type": "llama", "v": 2}'}
    assert manifest.revision == main
    assert manifest.source == f"hf://{repo_id}"
    by_path = {f.path: f for f in manifest.files}
    assert by_path["model.safetensors"].sha256 == sha256(FILES_V1["model.safetensors"])
    assert by_path["model.safetensors"].etag == sha256(FILES_V1["model.safetensors"])  # LFS: the sha256 is the ETag
    assert read_manifest(tmp_path) == manifest
    assert snapshots[-1].bytes_done == manifest.total_bytes and snapshots[-1].files_done == len(manifest.files)


def test_revision_tag_and_commit(hf_server, repo, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    repo_id, v1, _main = repo
    by_tag = fill_cache(f"hf://{repo_id}@v1?allow=config.json", tmp_path / "tag", creds(hf_server))
    assert by_tag.revision == v1
    assert (tmp_path / "tag" / "config.json").read_bytes() == FILES_V1["config.json"]
    by_commit = fill_cache(f"hf://{repo_id}@{v1}?allow=config.json", tmp_path / "sha", creds(hf_server))
    assert by_commit.revision == v1 and (tmp_path / "sha" / "config.json").read_bytes() == FILES_V1["config.json"]


def test_allow_and_ignore_patterns(hf_server, repo, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    repo_id, _v1, _main = repo
    fill_cache(f"hf://{repo_id}?allow=*.json&allow=*.safetensors", tmp_path / "allow", creds(hf_server))
    assert sorted(model_files(tmp_path / "allow")) == ["config.json", "model.safetensors", "tokenizer.json"]
    fill_cache(
        f"hf://{repo_id}?ignore=original/*&ignore=*.gguf&ignore=.gitattributes", tmp_path / "ignore", creds(hf_server)
    )
    assert sorted(model_files(tmp_path / "ignore")) == ["config.json", "model.safetensors", "tokenizer.json"]


def test_single_filename(hf_server, repo, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    repo_id, _v1, _main = repo
    manifest = fill_cache(f"hf://{repo_id}?filename=quant/model-q4.gguf", tmp_path, creds(hf_server))
    assert [f.path for f in manifest.files] == ["quant/model-q4.gguf"]
    assert model_files(tmp_path) == {"quant/model-q4.gguf": FILES_V1["quant/model-q4.gguf"]}


def test_source_size_and_listing(hf_server, repo) -> None:  # type: ignore[no-untyped-def]
    repo_id, v1, _main = repo
    sizes = source_size(f"hf://{repo_id}@v1?ignore=.gitattributes", creds(hf_server))
    assert sorted(sizes) == sorted(len(v) for v in FILES_V1.values())
    listing = list_source(f"hf://{repo_id}@v1?filename=config.json", creds(hf_server))
    assert listing.revision == v1 and [f.size for f in listing.files] == [len(FILES_V1["config.json"])]


def test_wrong_token_fails_with_reason_and_no_secret(hf_server, repo, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    repo_id, _v1, _main = repo
    _counting, url = proxy(hf_server.endpoint, token="hf_right_token_abcdefghijklmnop")
    secret = "hf_wrong_token_zyxwvutsrqponmlk"
    with pytest.raises(AuthenticationFailed) as info:
        fill_cache(f"hf://{repo_id}", tmp_path, creds(hf_server, url, token=secret))
    assert info.value.reason == "AuthenticationFailed"
    assert "the token in HF_TOKEN was rejected" in str(info.value)
    assert secret not in str(info.value) and info.value.__cause__ is None
    with pytest.raises(AuthenticationFailed, match="no token was sent"):
        fill_cache(f"hf://{repo_id}", tmp_path, creds(hf_server, url))
    # With the right token the same gate lets the download through.
    manifest = fill_cache(
        f"hf://{repo_id}?allow=config.json", tmp_path, creds(hf_server, url, token="hf_right_token_abcdefghijklmnop")
    )
    assert [f.path for f in manifest.files] == ["config.json"]


def test_missing_repo_revision_or_file(hf_server, repo, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    repo_id, _v1, _main = repo
    with pytest.raises(SourceNotFound, match="not found") as info:
        fill_cache("hf://org-none/no-such-model", tmp_path, creds(hf_server))
    assert info.value.reason == "SourceNotFound"
    with pytest.raises(SourceNotFound):
        fill_cache(f"hf://{repo_id}@no-such-tag", tmp_path, creds(hf_server))
    with pytest.raises(SourceNotFound, match="has no file 'missing.bin'"):
        fill_cache(f"hf://{repo_id}?filename=missing.bin", tmp_path, creds(hf_server))
    with pytest.raises(SourceNotFound, match="matches the allow/ignore patterns"):
        fill_cache(f"hf://{repo_id}?allow=*.onnx", tmp_path, creds(hf_server))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("background_hash", [False, True], ids=["hashed-inline", "hashed-on-a-helper-thread"])
def test_checksum_mismatch_on_the_server_is_detected(
    hf_server, tmp_path: pathlib.Path, monkeypatch, background_hash: bool
) -> None:  # type: ignore[no-untyped-def]
    if background_hash:  # large files are hashed on a helper thread: make every file large
        monkeypatch.setattr("tasks.downloader.transfer.BACKGROUND_HASH_BYTES", 0)
    repo_id = hf_server.repos.new_repo_id("rotten")
    weights = os.urandom(200_000)
    hf_server.repos.commit(repo_id, {"config.json": b"{}", "model.safetensors": weights})
    hf_server.repos.corrupt_lfs_object(repo_id, weights)
    with pytest.raises(ChecksumMismatch, match="model.safetensors: sha256") as info:
        fill_cache(f"hf://{repo_id}", tmp_path, creds(hf_server), concurrency=1)
    assert info.value.reason == "ChecksumMismatch"
    assert not (tmp_path / "model.safetensors").exists()
    assert not (tmp_path / CACHE_MARKER).exists()


def test_a_server_sending_more_than_the_listed_size_is_stopped_at_that_size(hf_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    """Before, the whole body was written (60 MiB for a file listed at 12 bytes, past the free-space check)
    and refused only after; now the write that would pass the listed size is refused, and nothing is kept."""
    repo_id = hf_server.repos.new_repo_id("overlong")
    weights = os.urandom(200_000)
    hf_server.repos.commit(repo_id, {"config.json": b"{}", "model.safetensors": weights})
    hf_server.repos.grow_lfs_object(repo_id, weights, os.urandom(3_000_000))
    with pytest.raises(ChecksumMismatch, match="sent more than its listed 200000 bytes"):
        fill_cache(f"hf://{repo_id}", tmp_path, creds(hf_server), concurrency=1)
    assert not (tmp_path / CACHE_MARKER).exists()
    staged = [p for p in (tmp_path / STAGING_DIR).rglob("*.part")]
    assert all(p.stat().st_size <= 200_000 for p in staged), [p.stat().st_size for p in staged]


def test_links_planted_at_the_caches_own_names_are_removed_not_written_through(  # type: ignore[no-untyped-def]
    hf_server, repo, tmp_path: pathlib.Path
) -> None:
    """Before, a link at the marker's temporary name had the manifest written into its target, and a link at
    the staging directory took the partial files and the journal outside the cache."""
    repo_id, _v1, _main = repo
    outside, cache = tmp_path / "outside", tmp_path / "cache"
    outside.mkdir()
    cache.mkdir()
    (outside / "victim.txt").write_text("important")
    (outside / "stage").mkdir()
    (cache / f"{CACHE_MARKER}.tmp").symlink_to(outside / "victim.txt")
    (cache / STAGING_DIR).symlink_to(outside / "stage", target_is_directory=True)

    fill_cache(f"hf://{repo_id}", cache, creds(hf_server))

    assert (outside / "victim.txt").read_text() == "important"
    assert list((outside / "stage").iterdir()) == []
    assert read_manifest(cache) is not None and not (cache / CACHE_MARKER).is_symlink()


def record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the path of every file or directory ``os.fsync`` is called on, in order."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return synced


def test_marker_is_written_only_after_every_file_and_directory_is_durable(
    hf_server, repo, tmp_path: pathlib.Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Every file's data is fsynced (under its staging name) and every directory holding one is fsynced before the marker."""
    repo_id, _v1, _main = repo
    synced = record_fsyncs(monkeypatch)
    manifest = fill_cache(f"hf://{repo_id}", tmp_path, creds(hf_server))
    marker_at = synced.index(str(tmp_path / (CACHE_MARKER + ".tmp")))
    before = synced[:marker_at]
    staged = {str(tmp_path / STAGING_DIR / RemoteFile(f.path, f.size, f.etag).staging_name) for f in manifest.files}
    assert staged <= set(before), staged - set(before)
    assert {str(tmp_path), str(tmp_path / "original"), str(tmp_path / "quant")} <= set(before)


def test_files_kept_from_an_earlier_run_are_fsynced_before_the_marker(
    hf_server, repo, tmp_path: pathlib.Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A re-run that finds every file complete but no marker still makes them durable before writing it."""
    repo_id, _v1, _main = repo
    fill_cache(f"hf://{repo_id}", tmp_path, creds(hf_server))
    (tmp_path / CACHE_MARKER).unlink()
    synced = record_fsyncs(monkeypatch)
    manifest = fill_cache(f"hf://{repo_id}", tmp_path, creds(hf_server))
    assert manifest.stats["filesFetched"] == 0
    marker_at = synced.index(str(tmp_path / (CACHE_MARKER + ".tmp")))
    assert {str(tmp_path / f.path) for f in manifest.files} <= set(synced[:marker_at])
