"""The benchmark's fast Hugging Face server speaks the protocol the unmodified ``huggingface_hub`` client uses."""

from __future__ import annotations

import hashlib
import os
import pathlib
from collections.abc import Iterator

import pytest
import requests
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url, snapshot_download
from huggingface_hub.errors import RemoteEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile, RepoFolder

from tasks.downloader import Credentials, fill_cache, read_manifest
from tests.servers.hftest.fastserver import FastHfServer, start_fast_hf
from tests.servers.hftest.lfs import LFS_THRESHOLD
from tests.servers.processes import stop_process

FILES = {
    "config.json": b'{"model_type": "llama"}',
    "model.safetensors": os.urandom(300_000),  # above LFS_THRESHOLD: an LFS file
    "original/params.json": b'{"dim": 8}',
    "original/weights/consolidated.pth": os.urandom(LFS_THRESHOLD),
}
LARGE = "model.safetensors"


@pytest.fixture(scope="module")
def fast_hf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastHfServer]:
    """The server with a tree page of 2 entries, so every listing here is paginated."""
    process, server = start_fast_hf(tmp_path_factory.mktemp("fasthf"), page_size=2)
    try:
        yield server
    finally:
        stop_process(process)


@pytest.fixture(scope="module")
def repo(fast_hf: FastHfServer) -> tuple[str, str]:
    repo_id = fast_hf.new_repo_id("llama")
    return repo_id, fast_hf.write(repo_id, FILES)


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_model_info_and_paginated_tree(fast_hf: FastHfServer, repo: tuple[str, str]) -> None:
    repo_id, commit = repo
    api = HfApi(endpoint=fast_hf.endpoint, token=False)
    info = api.model_info(repo_id, revision="main")
    assert (info.id, info.sha) == (repo_id, commit)
    assert sorted(s.rfilename for s in info.siblings or []) == sorted(FILES)
    entries = list(api.list_repo_tree(repo_id, revision=commit, recursive=True))  # 6 entries in pages of 2
    files = {e.path: e for e in entries if isinstance(e, RepoFile)}
    assert sorted(e.path for e in entries if isinstance(e, RepoFolder)) == ["original", "original/weights"]
    assert set(files) == set(FILES)
    for name, content in FILES.items():
        entry = files[name]
        assert entry.size == len(content)
        if len(content) >= LFS_THRESHOLD:
            assert entry.lfs is not None and entry.lfs.sha256 == hashlib.sha256(content).hexdigest()
            assert entry.lfs.size == len(content)
        else:
            assert entry.lfs is None and entry.blob_id == git_blob_id(content)
    top = [e.path for e in api.list_repo_tree(repo_id, path_in_repo="original", revision="main")]
    assert top == ["original/params.json", "original/weights"]
    first_page = requests.get(f"{fast_hf.endpoint}/api/models/{repo_id}/tree/main", params={"recursive": "true"})
    assert len(first_page.json()) == 2 and "cursor=2" in first_page.links["next"]["url"]


def test_snapshot_download_is_byte_exact(fast_hf: FastHfServer, repo: tuple[str, str], tmp_path: pathlib.Path) -> None:
    repo_id, _commit = repo
    snapshot_download(repo_id, local_dir=str(tmp_path), endpoint=fast_hf.endpoint, token=False)
    for name, content in FILES.items():
        assert (tmp_path / name).read_bytes() == content, name


def test_file_metadata_headers(fast_hf: FastHfServer, repo: tuple[str, str]) -> None:
    repo_id, commit = repo
    large = get_hf_file_metadata(hf_hub_url(repo_id, LARGE, endpoint=fast_hf.endpoint), token=False)
    assert (large.commit_hash, large.etag, large.size) == (
        commit,
        hashlib.sha256(FILES[LARGE]).hexdigest(),
        len(FILES[LARGE]),
    )
    small = get_hf_file_metadata(
        hf_hub_url(repo_id, "config.json", revision=commit, endpoint=fast_hf.endpoint), token=False
    )
    assert (small.commit_hash, small.etag, small.size) == (
        commit,
        git_blob_id(FILES["config.json"]),
        len(FILES["config.json"]),
    )


def test_fill_cache_verifies(fast_hf: FastHfServer, repo: tuple[str, str], tmp_path: pathlib.Path) -> None:
    repo_id, commit = repo
    manifest = fill_cache(f"hf://{repo_id}", tmp_path, Credentials(hf_endpoint=fast_hf.endpoint))
    assert manifest.revision == commit
    assert read_manifest(tmp_path) == manifest
    assert {f.path: f.sha256 for f in manifest.files} == {n: hashlib.sha256(c).hexdigest() for n, c in FILES.items()}
    for name, content in FILES.items():
        assert (tmp_path / name).read_bytes() == content, name


def test_range_requests(fast_hf: FastHfServer, repo: tuple[str, str]) -> None:
    repo_id, _commit = repo
    url = hf_hub_url(repo_id, LARGE, endpoint=fast_hf.endpoint)
    content, size = FILES[LARGE], len(FILES[LARGE])
    with requests.Session() as session:
        for header, start, end in (
            ("bytes=1000-1999", 1000, 2000),
            ("bytes=299990-", 299990, size),
            ("bytes=-10", size - 10, size),
        ):
            response = session.get(url, headers={"Range": header})
            assert response.status_code == 206, header
            assert response.headers["Content-Range"] == f"bytes {start}-{end - 1}/{size}"
            assert response.content == content[start:end]
        past_end = session.get(url, headers={"Range": f"bytes={size}-"})
        assert past_end.status_code == 416 and past_end.headers["Content-Range"] == f"bytes */{size}"
        whole = session.get(url)
        assert (whole.status_code, whole.headers["Accept-Ranges"], whole.content) == (200, "bytes", content)


def test_errors_are_the_hubs(fast_hf: FastHfServer, repo: tuple[str, str], tmp_path: pathlib.Path) -> None:
    repo_id, _commit = repo
    download = dict(endpoint=fast_hf.endpoint, token=False, cache_dir=str(tmp_path))
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org-none/missing", "config.json", **download)  # type: ignore[arg-type]
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(repo_id, "config.json", revision="v9", **download)  # type: ignore[arg-type]
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(repo_id, "missing.json", **download)  # type: ignore[arg-type]
