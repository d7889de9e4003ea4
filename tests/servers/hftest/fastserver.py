"""A fast Hugging Face protocol server for the downloads benchmark: model repositories from a plain directory.

``bench/downloads.py`` compares the downloader with ``huggingface_hub.snapshot_download``. Against olah (the
tests' HF server, ``tests/servers/hftest/fixture.py``) the server set the pace: olah spends 40 to 50 ms of CPU on each
1 MiB GET (a GitPython lookup, 4 KiB chunks) in one process, so the benchmark measured olah rather than the
clients. This server exists so that the benchmark measures the clients; olah stays the server of the tests
(git repositories, tags, several commits), this one is only as complete as those two clients need.

It implements exactly what the unmodified ``huggingface_hub`` (2.4.0) uses for ``snapshot_download`` and for
``tasks.downloader`` (``model_info`` + ``list_repo_tree`` + one GET per file), for model repositories:

- ``GET /api/models/{org}/{name}[/revision/{revision}]``: ``model_info``/``repo_info`` (``id``, ``sha``,
  ``siblings``; with ``?blobs=true`` each sibling's ``size``, ``blobId`` and ``lfs``);
- ``GET /api/models/{org}/{name}/tree/{revision}[/{path}]?recursive=...``: the tree entries (``type``,
  ``path``, ``size``, ``oid`` and ``lfs: {oid, size, pointerSize}`` for LFS files), in pages of
  ``page_size`` entries (1,000, as the Hub) linked by a ``Link: <...>; rel="next"`` header as the client follows;
- ``HEAD``/``GET /{org}/{name}/resolve/{revision}/{path}``: the headers ``get_hf_file_metadata`` and ``http_get``
  read (``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag``, ``X-Linked-Size`` for LFS files, ``Content-Length``,
  ``Accept-Ranges``) and the body, honouring a single ``Range`` (206 + ``Content-Range``; 416 past the end);
- errors as the Hub sends them (404 with ``X-Error-Code: RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``),
  which the client turns into its typed errors;
- ``POST /_fastserver/repos/{org}/{name}``: (re-)register a repository after writing its files (not HF).

A repository is the directory ``<root>/<org>/<name>``; every file in it is a file of the repository. Files of
``LFS_THRESHOLD`` bytes or more are served as LFS files (``tests.servers.hftest.lfs``, as in the olah fixture), the others
as plain git blobs. All metadata (sizes, SHA-256 of LFS files, git blob SHA-1 of the others, the pointer
blob ids, a commit id derived from them) is computed once when a repository is registered (at start-up for
the repositories already there, then on the POST), never per request; the revisions are ``main`` and that
commit id. Bodies go out with ``socket.sendfile`` straight from the file on disk. The server is the stdlib's
``ThreadingHTTPServer`` (a thread per keep-alive HTTP/1.1 connection); it runs as its own process
(``python -m tests.servers.hftest.fastserver --root DIR --port N``, started by :func:`start_fast_hf`) so the benchmark
can read its CPU time from ``/proc``. No authentication, no xet, no datasets or spaces.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.servers.hftest.lfs import LFS_THRESHOLD, lfs_pointer

PAGE_SIZE = 1000
"""Tree entries per page (the Hub's page size without ``expand``)."""
REGISTER_PREFIX = "/_fastserver/repos/"
LAST_MODIFIED = "2024-01-01T00:00:00.000Z"
RANGE = re.compile(r"bytes=(\d*)-(\d*)")


# ------------------------------------------------------------------------------------------------ metadata


@dataclass(frozen=True)
class RepoEntry:
    """One file of a repository, with everything a response needs."""

    path: str
    file: str
    """Absolute path on disk."""
    size: int
    oid: str
    """Git blob id: of the content for a plain file, of the LFS pointer for an LFS file."""
    sha256: str | None = None
    pointer_size: int | None = None

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid

    def tree_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "oid": self.oid, "size": self.size, "path": self.path}
        if self.sha256 is not None:
            entry["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
        return entry


@dataclass
class Repo:
    """A registered repository: its files (sorted by path), directories and commit id."""

    repo_id: str
    commit: str
    files: dict[str, RepoEntry]
    tree: list[dict[str, Any]] = field(default_factory=list)
    """Every tree entry, directories before their contents, sorted by path (the recursive listing)."""


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def describe_file(root: pathlib.Path, path: pathlib.Path) -> RepoEntry:
    """Size and hashes of one file (read once)."""
    size = path.stat().st_size
    name = path.relative_to(root).as_posix()
    with open(path, "rb") as handle:
        if size >= LFS_THRESHOLD:
            sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
            pointer = lfs_pointer(sha256, size).encode()
            return RepoEntry(name, str(path), size, git_blob_id(pointer), sha256, len(pointer))
        return RepoEntry(name, str(path), size, git_blob_id(handle.read()))


def scan_repo(repo_id: str, directory: pathlib.Path) -> Repo:
    """Describe every regular file under ``directory`` (hashed on a few threads) and derive the commit id."""
    paths = sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        entries = list(pool.map(lambda p: describe_file(directory, p), paths))
    files = {e.path: e for e in entries}
    commit = hashlib.sha1("".join(f"{e.path}\0{e.oid}\n" for e in entries).encode()).hexdigest()
    tree: list[dict[str, Any]] = []
    seen_dirs: set[str] = set()
    for entry in entries:
        parts = entry.path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            if folder not in seen_dirs:
                seen_dirs.add(folder)
                oid = hashlib.sha1(f"tree {commit} {folder}".encode()).hexdigest()
                tree.append({"type": "directory", "oid": oid, "size": 0, "path": folder})
        tree.append(entry.tree_json())
    return Repo(repo_id, commit, files, tree)


class Registry:
    """The registered repositories of ``root`` (``<root>/<org>/<name>``)."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self._repos: dict[str, Repo] = {}
        self._lock = threading.Lock()

    def register(self, repo_id: str) -> Repo:
        directory = self.root / repo_id
        if not directory.is_dir():
            raise FileNotFoundError(repo_id)
        repo = scan_repo(repo_id, directory)
        with self._lock:
            self._repos[repo_id] = repo
        return repo

    def register_all(self) -> None:
        for directory in sorted(self.root.glob("*/*")):
            if directory.is_dir():
                self.register(directory.relative_to(self.root).as_posix())

    def get(self, repo_id: str) -> Repo | None:
        with self._lock:
            return self._repos.get(repo_id)


# ------------------------------------------------------------------------------------------------ HTTP


class HfError(Exception):
    """An error response the client reads as the Hub's (``X-Error-Code``)."""

    def __init__(self, status: int, code: str | None, message: str, commit: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.commit = commit


class Handler(BaseHTTPRequestHandler):
    """Routes the few HF endpoints; bodies of files are sent with ``sendfile``."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "modelplane-fasthf"
    sys_version = ""
    registry: Registry
    page_size: int = PAGE_SIZE

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        pass

    # -------------------------------------------------------------------------------------- dispatch

    def do_GET(self) -> None:  # noqa: N802 - BaseHTTPRequestHandler's naming
        self._dispatch(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch(head=True)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        path = urlsplit(self.path).path
        if not path.startswith(REGISTER_PREFIX):
            self._send_error(HfError(404, None, "not found"), head=False)
            return
        repo_id = unquote(path[len(REGISTER_PREFIX) :]).strip("/")
        try:
            repo = self.registry.register(repo_id)
        except FileNotFoundError:
            self._send_error(HfError(404, "RepoNotFound", f"no directory for {repo_id}"), head=False)
            return
        self._send_json({"id": repo.repo_id, "sha": repo.commit, "files": len(repo.files)}, head=False)

    def _dispatch(self, head: bool) -> None:
        url = urlsplit(self.path)
        segments = url.path.split("/")[1:]
        try:
            if len(segments) >= 3 and segments[0] == "api" and segments[1] == "models":
                self._api(segments[2:], parse_qs(url.query), head)
            elif len(segments) >= 5 and segments[2] == "resolve":
                self._resolve(segments, head)
            else:
                raise HfError(404, None, "not found")
        except HfError as error:
            self._send_error(error, head)

    # -------------------------------------------------------------------------------------- /api/models

    def _repo(self, org: str, name: str) -> Repo:
        repo = self.registry.get(f"{unquote(org)}/{unquote(name)}")
        if repo is None:
            raise HfError(404, "RepoNotFound", "Repository not found")
        return repo

    @staticmethod
    def _at(repo: Repo, revision: str) -> None:
        if unquote(revision) not in ("main", repo.commit):
            raise HfError(404, "RevisionNotFound", f"Invalid rev id: {unquote(revision)}")

    def _api(self, rest: list[str], query: dict[str, list[str]], head: bool) -> None:
        if len(rest) < 2:
            raise HfError(404, None, "not found")
        repo = self._repo(rest[0], rest[1])
        action = rest[2:]
        if not action or (len(action) == 2 and action[0] == "revision"):
            if action:
                self._at(repo, action[1])
            self._send_json(self._model_info(repo, blobs=_flag(query, "blobs")), head)
        elif len(action) >= 2 and action[0] == "tree":
            self._at(repo, action[1])
            folder = unquote("/".join(action[2:])).strip("/")
            self._tree(repo, folder, _flag(query, "recursive"), query, head)
        else:
            raise HfError(404, None, "not found")

    @staticmethod
    def _model_info(repo: Repo, blobs: bool) -> dict[str, Any]:
        siblings = []
        for entry in repo.files.values():
            sibling: dict[str, Any] = {"rfilename": entry.path}
            if blobs:
                sibling.update(size=entry.size, blobId=entry.oid)
                if entry.sha256 is not None:
                    sibling["lfs"] = {"size": entry.size, "sha256": entry.sha256, "pointerSize": entry.pointer_size}
            siblings.append(sibling)
        org = repo.repo_id.split("/", 1)[0]
        return {
            "_id": repo.commit[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": org,
            "sha": repo.commit,
            "lastModified": LAST_MODIFIED,
            "createdAt": LAST_MODIFIED,
            "private": False,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
        }

    def _tree(self, repo: Repo, folder: str, recursive: bool, query: dict[str, list[str]], head: bool) -> None:
        if folder and folder in repo.files:
            raise HfError(404, "EntryNotFound", f"{folder} is a file, not a directory", repo.commit)
        prefix = folder + "/" if folder else ""
        entries = [e for e in repo.tree if e["path"].startswith(prefix)]
        if folder and not entries:
            raise HfError(404, "EntryNotFound", f"no directory {folder}", repo.commit)
        if not recursive:
            entries = [e for e in entries if "/" not in e["path"][len(prefix) :]]
        try:
            start = max(0, int(query.get("cursor", ["0"])[0]))
        except ValueError:
            raise HfError(400, None, "bad cursor") from None
        page = entries[start : start + self.page_size]
        headers = {}
        if start + self.page_size < len(entries):
            host = self.headers.get("Host") or f"127.0.0.1:{self.server.server_address[1]}"
            params = {k: v[0] for k, v in query.items() if k != "cursor"}
            params["cursor"] = str(start + self.page_size)
            url = f"http://{host}{urlsplit(self.path).path}?" + "&".join(
                f"{k}={quote(v, safe='')}" for k, v in params.items()
            )
            headers["Link"] = f'<{url}>; rel="next"'
        self._send_json(page, head, headers)

    # -------------------------------------------------------------------------------------- resolve

    def _resolve(self, segments: list[str], head: bool) -> None:
        repo = self._repo(segments[0], segments[1])
        self._at(repo, segments[3])
        path = unquote("/".join(segments[4:]))
        entry = repo.files.get(path)
        if entry is None:
            raise HfError(404, "EntryNotFound", f"{path} does not exist at {repo.commit}", repo.commit)
        headers = {
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "ETag": f'"{entry.etag}"',
            "X-Repo-Commit": repo.commit,
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(path.rsplit('/', 1)[-1])}",
        }
        if entry.sha256 is not None:
            headers["X-Linked-Etag"] = f'"{entry.sha256}"'
            headers["X-Linked-Size"] = str(entry.size)
        start, end = 0, entry.size  # [start, end)
        status = 200
        wanted = _parse_range(self.headers.get("Range"), entry.size)
        if wanted == "unsatisfiable":
            self._send(416, {**headers, "Content-Range": f"bytes */{entry.size}", "Content-Length": "0"})
            return
        if wanted is not None:
            start, end = wanted
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{entry.size}"
        headers["Content-Length"] = str(end - start)
        if head or end == start:
            self._send(status, headers)
            return
        with open(entry.file, "rb") as handle:
            self._send(status, headers)
            self.connection.sendfile(handle, start, end - start)

    # -------------------------------------------------------------------------------------- responses

    def _send(self, status: int, headers: Mapping[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _send_json(self, data: Any, head: bool, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(data, separators=(",", ":")).encode()
        self._send(
            200,
            {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})},
            b"" if head else body,
        )

    def _send_error(self, error: HfError, head: bool) -> None:
        body = json.dumps({"error": error.message}).encode()
        headers = {
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            "X-Error-Message": error.message,
        }
        if error.code:
            headers["X-Error-Code"] = error.code
        if error.commit:
            headers["X-Repo-Commit"] = error.commit
        self._send(error.status, headers, b"" if head else body)


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return query.get(name, ["false"])[0].lower() in ("1", "true", "yes")


def _parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """``(start, end)`` (end exclusive) for one satisfiable byte range, ``"unsatisfiable"``, or None (ignore)."""
    if not header:
        return None
    match = RANGE.fullmatch(header.strip())
    if match is None or (not match.group(1) and not match.group(2)):
        return None  # several ranges or another unit: ignored, the whole file is sent (RFC 9110 allows it)
    first, last = match.group(1), match.group(2)
    if not first:  # a suffix: the last N bytes
        count = int(last)
        return (max(0, size - count), size) if count > 0 and size > 0 else "unsatisfiable"
    start = int(first)
    end = min(size, int(last) + 1) if last else size
    if start >= size or end <= start:
        return "unsatisfiable"
    return start, end


def serve(root: pathlib.Path, port: int, page_size: int = PAGE_SIZE, host: str = "127.0.0.1") -> None:
    """Register the repositories under ``root`` and serve them until the process is stopped."""
    registry = Registry(root)
    registry.register_all()
    handler = type("BoundHandler", (Handler,), {"registry": registry, "page_size": page_size})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.request_queue_size = 128
    server.serve_forever()


# ------------------------------------------------------------------------------------------------ launcher


@dataclass
class FastHfServer:
    """A running fast HF server: repositories are directories under ``root``, registered after writing."""

    endpoint: str
    root: pathlib.Path
    pid: int

    @staticmethod
    def new_repo_id(name: str = "model") -> str:
        return f"org-{uuid.uuid4().hex[:8]}/{name}"

    def repo_dir(self, repo_id: str) -> pathlib.Path:
        return self.root / repo_id

    def register(self, repo_id: str) -> str:
        """Have the server (re-)read ``repo_id``'s directory; returns the commit id it serves from now on."""
        request = urllib.request.Request(f"{self.endpoint}{REGISTER_PREFIX}{repo_id}", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=600) as response:
            return str(json.load(response)["sha"])

    def write(self, repo_id: str, files: Mapping[str, bytes]) -> str:
        """Write ``files`` (path -> content) into the repository and register it; returns the commit id."""
        for name, content in files.items():
            target = self.repo_dir(repo_id) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return self.register(repo_id)


def start_fast_hf(workdir: pathlib.Path, page_size: int = PAGE_SIZE) -> tuple[subprocess.Popen, FastHfServer]:
    """Start the server as its own process on a free 127.0.0.1 port, serving ``workdir/repos``; stop it with
    ``tests.servers.processes.stop_process``."""
    from tests.servers.s3test.fixture import free_port, wait_for_port

    root = workdir / "repos"
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(workdir / "fastserver.log", "wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.servers.hftest.fastserver",
            "--root",
            str(root),
            "--port",
            str(port),
            "--page-size",
            str(page_size),
        ],
        cwd=pathlib.Path(__file__).resolve().parents[3],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    wait_for_port(port, process)
    return process, FastHfServer(f"http://127.0.0.1:{port}", root, process.pid)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=pathlib.Path, required=True, help="the directory holding <org>/<name> repositories"
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--page-size", type=int, default=PAGE_SIZE)
    args = parser.parse_args(argv)
    serve(args.root, args.port, args.page_size)


if __name__ == "__main__":
    main()
