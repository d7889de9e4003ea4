"""Kill ``modelplane fill-cache`` mid-file, run it again: the cache completes, intact, complete files not refetched.

The filler runs as the real CLI in a subprocess (as in a download Job) with env-only configuration, behind
a counting proxy that slows transfers down so the kill lands while a file is partly on disk.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from engine.caches.identity import CACHE_MARKER
from tasks.downloader import read_manifest
from tasks.downloader.plan import STAGING_DIR
from tests.downloader.conftest import tree

MiB = 1024 * 1024
CLI = [sys.executable, "-c", "from flows.cli import main; main()"]


def start_fill(source: str, dest: pathlib.Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "fill-cache", source, str(dest), *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def kill_when(process: subprocess.Popen, condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the filler ended before the kill: {process.communicate()}")
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError("the kill condition never held")
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def partial_bytes(dest: pathlib.Path) -> int:
    """Bytes in the staging directory's part files now; a part the filler completes and moves into place
    between the listing and its ``stat`` counts as none (a full run saw that race end a test)."""
    staging = dest / STAGING_DIR
    return sum(size_or_zero(p) for p in staging.glob("*.part")) if staging.exists() else 0


def size_or_zero(path: pathlib.Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def run_to_completion(source: str, dest: pathlib.Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*CLI, "fill-cache", source, str(dest), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result


def test_s3_kill_mid_file_resumes_parts_and_skips_complete_files(s3_server, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    bucket = s3_server.new_bucket()
    objects = {
        "m/a-config.json": b'{"a": 1}',
        "m/b-tokenizer.json": os.urandom(200_000),
        "m/model.safetensors": os.urandom(30 * MiB),
    }
    client = s3_server.client()
    for key, body in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    counting, url = proxy(s3_server.endpoint, throttle=6 * MiB)
    dest = tmp_path / "cache"
    source = f"s3://{bucket}/m"
    args = ("--part-size-mib", "5", "--concurrency", "2")

    process = start_fill(source, dest, s3_server.env(url), *args)
    kill_when(process, lambda: (dest / "b-tokenizer.json").exists() and partial_bytes(dest) > 12 * MiB)
    assert not (dest / CACHE_MARKER).exists()
    assert (dest / "a-config.json").read_bytes() == objects["m/a-config.json"]
    on_disk_before = partial_bytes(dest)
    fetched_before = counting.body_bytes("model.safetensors")

    counting.reset()
    counting.throttle = None
    run_to_completion(source, dest, s3_server.env(url), *args)
    files = tree(dest)
    assert files.pop(CACHE_MARKER)
    assert files == {k.removeprefix("m/"): v for k, v in objects.items()}  # every file intact
    assert counting.gets("a-config.json") == [] and counting.gets("b-tokenizer.json") == []  # not fetched again
    refetched = counting.body_bytes("model.safetensors") + fetched_before - len(objects["m/model.safetensors"])
    # Parts resume where they stopped: at most one part per part in flight (2) is fetched twice.
    assert 0 <= refetched <= 2 * 5 * MiB, refetched
    assert counting.body_bytes("model.safetensors") <= 30 * MiB - on_disk_before + 2 * 5 * MiB
    assert all(r.range for r in counting.gets("model.safetensors"))
    manifest = read_manifest(dest)
    assert manifest is not None and manifest.stats["filesSkipped"] == 2


def test_hf_kill_mid_file_completes_without_refetching_complete_files(hf_server, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    repo_id = hf_server.repos.new_repo_id("killme")
    files_in_repo = {
        "a-config.json": b'{"a": 1}',
        "b-tokenizer.json": os.urandom(50_000),
        "model.safetensors": os.urandom(12 * MiB),
    }
    hf_server.repos.commit(repo_id, files_in_repo)
    token = "hf_kill_test_token_0123456789"
    # 1 MiB/s: the 12 MiB file takes ~12 s. huggingface_hub writes it in 10 MiB chunks, so the partial file
    # is 10 MiB for ~2 s before it is whole: the kill lands in that window, mid-file, even on a loaded machine.
    large = len(files_in_repo["model.safetensors"])
    counting, url = proxy(hf_server.endpoint, token=token, throttle=1 * MiB)
    env = {"HF_ENDPOINT": url, "HF_TOKEN": token}
    dest = tmp_path / "cache"
    source = f"hf://{repo_id}?ignore=.gitattributes"

    process = start_fill(source, dest, env, "--concurrency", "1")
    kill_when(process, lambda: (dest / "b-tokenizer.json").exists() and 2 * MiB < partial_bytes(dest) < large)
    assert not (dest / CACHE_MARKER).exists()
    assert not (dest / "model.safetensors").exists(), "the kill came after the large file was complete"
    assert 0 < partial_bytes(dest) < large, "the kill did not land mid-file"

    counting.reset()
    counting.throttle = None
    result = run_to_completion(source, dest, env, "--concurrency", "1")
    assert token not in result.stdout + result.stderr
    files = tree(dest)
    assert files.pop(CACHE_MARKER)
    assert files == files_in_repo
    assert counting.gets("/resolve/") and all("model.safetensors" in r.path for r in counting.gets("/resolve/"))
    assert len(counting.gets("model.safetensors")) == 1
