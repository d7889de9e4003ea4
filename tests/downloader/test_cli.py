"""``modelplane fill-cache``: env-only configuration, JSON manifest on success, one clear line on failure."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

from engine.caches.identity import CACHE_MARKER

CLI = [sys.executable, "-c", "from flows.cli import main; main()"]


def fill(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "fill-cache", *args], env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=120
    )


def test_fill_from_env_prints_the_manifest(s3_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    bucket = s3_server.new_bucket()
    s3_server.client().put_object(Bucket=bucket, Key="m/config.json", Body=b"{}")
    result = fill(f"s3://{bucket}/m", str(tmp_path), "--json", env=s3_server.env())
    assert result.returncode == 0, result.stderr
    manifest = json.loads(result.stdout)
    assert manifest["source"] == f"s3://{bucket}/m" and [f["path"] for f in manifest["files"]] == ["config.json"]
    assert "100.0%" in result.stderr  # progress lines off a terminal (Job logs)


def test_wrong_token_is_one_line_without_the_secret(hf_server, tmp_path: pathlib.Path, proxy) -> None:  # type: ignore[no-untyped-def]
    repo_id = hf_server.repos.new_repo_id("cli")
    hf_server.repos.commit(repo_id, {"config.json": b"{}"})
    _counting, url = proxy(hf_server.endpoint, token="hf_the_right_one_123456")
    secret = "hf_a_wrong_one_6543210987"
    result = fill(f"hf://{repo_id}", str(tmp_path), env={"HF_ENDPOINT": url, "HF_TOKEN": secret})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cache fill failed (AuthenticationFailed): "), result.stderr
    assert secret not in result.stderr + result.stdout and "Traceback" not in result.stderr


def test_missing_bucket_and_bad_source_exit_codes(s3_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    result = fill("s3://no-such-bucket-cli/m", str(tmp_path), env=s3_server.env())
    assert result.returncode == 1 and result.stderr.startswith("error: cache fill failed (SourceNotFound): ")
    result = fill("hf://a/b/c", str(tmp_path))
    assert result.returncode == 2 and result.stderr.startswith("error: fill-cache: invalid source or capacity: ")
    assert len(result.stderr.strip().splitlines()) == 1


def _without_aws(env: dict[str, str]) -> dict[str, str]:
    """The process env minus every AWS_* variable, so only Kthena's names can point at the store."""
    return {k: v for k, v in env.items() if not k.startswith("AWS_")}


def test_fill_honours_kthenas_endpoint_and_keys(s3_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    """Seed 003: ``ENDPOINT`` (plus ``ACCESS_KEY``/``SECRET_KEY``) is what a Kthena user sets for s3://; the
    bucket name has an underscore, as in Kthena's own examples."""
    bucket = f"aios_models_{os.getpid()}"
    s3_server.client().create_bucket(Bucket=bucket)
    s3_server.client().put_object(Bucket=bucket, Key="x/config.json", Body=b'{"a": 1}')
    kthena = {"ENDPOINT": s3_server.endpoint, "ACCESS_KEY": s3_server.access_key, "SECRET_KEY": s3_server.secret_key}
    result = subprocess.run(
        [*CLI, "fill-cache", f"s3://{bucket}/x", str(tmp_path), "--json"],
        env={**_without_aws(dict(os.environ)), **kthena},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "config.json").read_bytes() == b'{"a": 1}'

    # A wrong secret: one line naming both spellings of the key variables, never the secret itself.
    wrong = {**kthena, "SECRET_KEY": "kthena-wrong-secret-0123456789"}
    result = subprocess.run(
        [*CLI, "fill-cache", f"s3://{bucket}/x", str(tmp_path / "again")],
        env={**_without_aws(dict(os.environ)), **wrong},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stderr.startswith("error: cache fill failed (AuthenticationFailed): ")
    assert "SECRET_KEY" in result.stderr and "kthena-wrong-secret-0123456789" not in result.stderr + result.stdout


def test_a_fill_past_its_deadline_stops_in_one_line_and_the_next_fill_resumes(  # type: ignore[no-untyped-def]
    hf_server, tmp_path: pathlib.Path, proxy
) -> None:
    """A server that sends one answer's headers a byte at a time keeps every read under its timeout: before, a fill
    run by hand waited for it without end. Now ``--deadline`` stops it: exit 1, one line, no marker, and the next
    fill fetches only what is missing."""
    repo_id = hf_server.repos.new_repo_id("drip")
    files = {"a-config.json": b'{"a": 1}', "b-tokenizer.json": b'{"vocab": [1, 2]}', "model.safetensors": b"w" * 300}
    hf_server.repos.commit(repo_id, files)
    counting, url = proxy(hf_server.endpoint)
    counting.drip_once("b-tokenizer.json")
    source, env = f"hf://{repo_id}?ignore=.gitattributes", {"HF_ENDPOINT": url}

    started = time.monotonic()
    result = fill(source, str(tmp_path), "--deadline", "5s", env=env)
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert 5 < took < 40, took  # the process starts in a few seconds; its fill stops at 5 s
    lines = result.stderr.strip().splitlines()
    assert all(line.startswith(source + ": ") for line in lines[:-1]), result.stderr  # progress lines, then it
    assert lines[-1].startswith(
        f"error: cache fill failed (DeadlineExceeded): the fill of {tmp_path} did not complete within its deadline "
        "of 5s: stopped, keeping the files and parts fetched so far for the next fill to resume"
    ), lines[-1]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / CACHE_MARKER).exists() and not (tmp_path / "b-tokenizer.json").exists()
    assert {path: (tmp_path / path).read_bytes() for path in ("a-config.json", "model.safetensors")} == {
        path: files[path] for path in ("a-config.json", "model.safetensors")
    }
    assert [r.status for r in counting.gets("b-tokenizer.json")] == [0]  # the dripped answer, no retry after it

    counting.reset()
    result = fill(source, str(tmp_path), "--json", env=env)
    assert result.returncode == 0, result.stderr
    manifest = json.loads(result.stdout)
    assert {f["path"] for f in manifest["files"]} == set(files) and manifest["stats"]["filesSkipped"] == 2
    assert {path: (tmp_path / path).read_bytes() for path in files} == files
    assert [r.path.rsplit("/", 1)[-1] for r in counting.gets("/resolve/")] == ["b-tokenizer.json"]
