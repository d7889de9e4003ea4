"""``hf_server``: a Hugging Face protocol server on 127.0.0.1 that the unmodified ``huggingface_hub`` client uses.

olah 0.5.4 in offline mode serves local git repositories (``<mirrors>/models/<org>/<repo>``, large files as
Git LFS pointers with their objects in ``.git/lfs/objects``), with no upstream at all. It runs from its
own virtualenv (``.venv-olah``, built by ``dev.sh``) because it needs a newer fastapi than Prefect allows.
Repositories are written by :class:`HfRepos` as plain git commits; olah reads them on every request, so a
test can add repositories and commits while the server runs.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import textwrap
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pytest

from tests.servers.hftest.lfs import LFS_THRESHOLD, lfs_pointer
from tests.servers.processes import stop_process
from tests.servers.s3test.fixture import free_port, wait_for_port

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "modelplane-tests",
    "GIT_AUTHOR_EMAIL": "tests@modelplane.invalid",
    "GIT_COMMITTER_NAME": "modelplane-tests",
    "GIT_COMMITTER_EMAIL": "tests@modelplane.invalid",
}


def olah_cli() -> pathlib.Path:
    """The olah executable from its own virtualenv (``MODELPLANE_OLAH_VENV`` or ``.venv-olah``)."""
    venv = pathlib.Path(os.environ.get("MODELPLANE_OLAH_VENV", REPO_ROOT / ".venv-olah"))
    cli = venv / "bin" / "olah-cli"
    if not cli.exists():
        pytest.fail(f"olah is not installed at {cli}: run ./dev.sh test (it builds the olah virtualenv)")
    return cli


class HfRepos:
    """Writes model repositories as git commits olah serves (files above ``LFS_THRESHOLD`` become LFS)."""

    def __init__(self, mirrors: pathlib.Path) -> None:
        self.mirrors = mirrors

    def path(self, repo_id: str) -> pathlib.Path:
        return self.mirrors / "models" / repo_id

    def new_repo_id(self, name: str = "model") -> str:
        return f"org-{uuid.uuid4().hex[:8]}/{name}"

    def commit(self, repo_id: str, files: Mapping[str, bytes], tag: str | None = None, message: str = "update") -> str:
        """Write ``files`` (path -> content) into the repo, commit, optionally tag; returns the commit SHA."""
        root = self.path(repo_id)
        if not (root / ".git").exists():
            root.mkdir(parents=True, exist_ok=True)
            self._git(root, "init", "-q", "-b", "main")
        lfs_patterns: set[str] = set()
        for name, content in files.items():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if len(content) >= LFS_THRESHOLD:
                oid = hashlib.sha256(content).hexdigest()
                obj = root / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
                obj.parent.mkdir(parents=True, exist_ok=True)
                obj.write_bytes(content)
                target.write_text(lfs_pointer(oid, len(content)))
                lfs_patterns.add(name)
            else:
                target.write_bytes(content)
        if lfs_patterns:
            attributes = root / ".gitattributes"
            known = set(attributes.read_text().splitlines()) if attributes.exists() else set()
            lines = known | {f"{p} filter=lfs diff=lfs merge=lfs -text" for p in lfs_patterns}
            attributes.write_text("\n".join(sorted(lines)) + "\n")
        self._git(root, "add", "-A")
        self._git(root, "commit", "-q", "--allow-empty", "-m", message)
        if tag:
            self._git(root, "tag", "-f", tag)
        return self._git(root, "rev-parse", "HEAD").strip()

    def corrupt_lfs_object(self, repo_id: str, content: bytes) -> None:
        """Flip a byte of the stored LFS object of ``content`` (bit rot on the server)."""
        oid = hashlib.sha256(content).hexdigest()
        obj = self.path(repo_id) / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
        data = bytearray(obj.read_bytes())
        data[len(data) // 2] ^= 0xFF
        obj.write_bytes(bytes(data))

    def grow_lfs_object(self, repo_id: str, content: bytes, extra: bytes) -> None:
        """Append ``extra`` to the stored LFS object of ``content``: the server then sends more bytes than the
        repository's tree lists for that file (a lying or broken server)."""
        oid = hashlib.sha256(content).hexdigest()
        obj = self.path(repo_id) / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
        obj.write_bytes(obj.read_bytes() + extra)

    @staticmethod
    def _git(root: pathlib.Path, *args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, env={**os.environ, **GIT_ENV}, check=True, capture_output=True, text=True
        ).stdout


@dataclass
class HfServer:
    """A running olah serving ``repos`` offline."""

    endpoint: str
    repos: HfRepos
    pid: int


def start_olah(workdir: pathlib.Path) -> tuple[subprocess.Popen, HfServer]:
    mirrors = workdir / "mirrors"
    (mirrors / "models").mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = workdir / "olah.toml"
    config.write_text(
        textwrap.dedent(
            f"""\
            [basic]
            host = "127.0.0.1"
            port = {port}
            mirrors-path = ["{mirrors}"]
            repos-path = "{workdir / "repos"}"
            hf-url = "https://huggingface.co"
            hf-lfs-url = "https://cdn-lfs.huggingface.co"
            mirror-url = "http://127.0.0.1:{port}"
            mirror-lfs-url = "http://127.0.0.1:{port}"

            [accessibility]
            offline = true
            """
        )
    )
    log = open(workdir / "olah.log", "wb")
    process = subprocess.Popen(
        [str(olah_cli()), "-c", str(config)], cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    wait_for_port(port, process, timeout=60)
    return process, HfServer(f"http://127.0.0.1:{port}", HfRepos(mirrors), process.pid)


@pytest.fixture(scope="session")
def hf_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HfServer]:
    """olah 0.5.4 offline on a random 127.0.0.1 port; stopped by PID at the end."""
    process, server = start_olah(tmp_path_factory.mktemp("olah"))
    try:
        yield server
    finally:
        stop_process(process, timeout=10, group=True)
