"""Hugging Face (and HF-protocol mirrors via ``HF_ENDPOINT``) through ``huggingface_hub``.

The revision is resolved to a commit once (``model_info``), the file list with sizes and checksums comes
from one recursive tree listing at that commit, patterns are applied with the client's own
``filter_repo_objects`` (the same semantics as ``snapshot_download``), and each file is fetched with the
client's ``http_get`` from its ``resolve/<commit>/<path>`` URL, resuming a partial file with a Range
request (a server that ignores Range restarts it).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import build_hf_headers, filter_repo_objects

from engine.caches.sources import ModelSource
from engine.redaction import redact
from tasks.clients.sources.credentials import Credentials
from tasks.clients.sources.deadline import QUIET_AFTER_DEADLINE
from tasks.clients.sources.errors import (
    AuthenticationFailed,
    ChecksumMismatch,
    DownloadError,
    SourceNotFound,
    TransferFailed,
)
from tasks.clients.sources.listing import Listing, RemoteFile

DEFAULT_ENDPOINT = "https://huggingface.co"


class _SilentBar:
    """A progress bar that shows nothing: the downloader reports progress itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.n = kwargs.get("initial", 0)

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass

    def __enter__(self) -> _SilentBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _Overlong(Exception):
    """The server sent more bytes than the file's listed size (raised before they are written)."""


class _CountingFile:
    """A file wrapper that reports every write to ``on_write`` (http_get writes through it) and never lets the
    file grow past ``limit`` bytes: the listed size, which the free-space check counted on."""

    def __init__(self, handle: BinaryIO, on_write: Callable[[int], None], stop: threading.Event, limit: int) -> None:
        self._handle = handle
        self._on_write = on_write
        self._stop = stop
        self._limit = limit

    def write(self, data: bytes) -> int:
        if self._stop.is_set():
            raise InterruptedError("download stopped")
        if self._handle.tell() + len(data) > self._limit:
            raise _Overlong
        written = self._handle.write(data)
        self._on_write(len(data))
        return written

    def seek(self, *args: Any) -> int:
        before = self._handle.tell()
        position = self._handle.seek(*args)
        if position < before:
            self._on_write(position - before)  # the server ignored Range: the part on disk is dropped
        return position

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _once_each(tree: Iterable[object], where: str) -> list[RepoFile]:
    """The files of a repository tree as its pages list them. A path listed again means the pages loop (a
    ``Link: rel=next`` back to a page already read): the listing would never end, so it stops there."""
    files: list[RepoFile] = []
    seen: set[object] = set()
    for entry in tree:
        path = getattr(entry, "path", None)
        if path in seen:
            raise TransferFailed(f"the listing of {where} repeats {path!r}: its pages loop; stopped reading them")
        seen.add(path)
        if isinstance(entry, RepoFile):
            files.append(entry)
    return files


class HfBackend:
    """Lists and fetches the files of ``hf://org/name@revision`` (patterns or one filename applied)."""

    def __init__(self, source: ModelSource, credentials: Credentials) -> None:
        self.source = source
        self.credentials = credentials
        self.endpoint = (credentials.hf_endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.api = HfApi(endpoint=self.endpoint, token=credentials.hf_token or False)
        self.headers = build_hf_headers(token=credentials.hf_token or False, library_name="modelplane")
        logging.getLogger("huggingface_hub.file_download").addFilter(QUIET_AFTER_DEADLINE)  # no retry after it

    def list(self) -> Listing:
        """Resolve the revision to a commit and list the files to fetch with their sizes and checksums."""
        repo, revision = self.source.repo or "", self.source.revision or "main"
        where = f"hf://{repo}@{revision}"
        try:
            info = self.api.model_info(repo, revision=revision)
            commit = info.sha or revision
            entries = _once_each(self.api.list_repo_tree(repo, revision=commit, recursive=True), where)
        except DownloadError:
            raise
        except Exception as exc:  # noqa: BLE001 - every client error becomes a typed download error
            raise self.translate(exc, where) from None
        try:
            remotes = [self._remote(e) for e in entries]
        except (TypeError, ValueError) as exc:  # a path that is no path, a size that is no size
            raise TransferFailed(
                redact(f"the listing of {where} is malformed: {exc}", self.credentials.secrets)
            ) from None
        if self.source.filename:
            chosen = [r for r in remotes if r.path == self.source.filename]
            if not chosen:
                raise SourceNotFound(f"{where} has no file {self.source.filename!r}")
        else:
            chosen = list(
                filter_repo_objects(
                    remotes,
                    allow_patterns=list(self.source.allow_patterns) or None,
                    ignore_patterns=list(self.source.ignore_patterns) or None,
                    key=lambda r: r.path,
                )
            )
            if not chosen:
                raise SourceNotFound(f"no file of {where} matches the allow/ignore patterns")
        return Listing(commit, tuple(chosen))

    @staticmethod
    def _remote(entry: RepoFile) -> RemoteFile:
        lfs_sha = entry.lfs.sha256 if entry.lfs else None
        return RemoteFile(
            path=entry.path,
            size=entry.size,  # checked by RemoteFile: a listing's size is never coerced
            etag=lfs_sha or entry.blob_id,
            remote=entry.path,
            sha256=lfs_sha,
            git_sha1=None if lfs_sha else entry.blob_id,
        )

    def fetch_file(
        self,
        remote: RemoteFile,
        commit: str,
        handle: BinaryIO,
        resume: int,
        on_write: Callable[[int], None],
        stop: threading.Event,
    ) -> None:
        """Append the file (from byte ``resume``) to ``handle`` with the client's ``http_get``."""
        url = hf_hub_url(self.source.repo or "", remote.remote, revision=commit, endpoint=self.endpoint)
        where = f"hf://{self.source.repo}@{commit[:12]}/{remote.path}"
        try:
            http_get(
                url,
                _CountingFile(handle, on_write, stop, remote.size),  # type: ignore[arg-type]
                resume_size=resume,
                headers=dict(self.headers),
                expected_size=remote.size,
                tqdm_class=_SilentBar,
            )
        except InterruptedError:
            return
        except _Overlong:
            raise ChecksumMismatch(
                f"{remote.path}: {where} sent more than its listed {remote.size} bytes; what it sent past them was "
                "not written, run the fill again"
            ) from None
        except Exception as exc:  # noqa: BLE001
            raise self.translate(exc, where) from None

    def translate(self, exc: BaseException, where: str) -> DownloadError:
        """A client error as a typed download error; the token never appears in the message (redacted whole)."""
        return self._typed(exc, where).redacted(self.credentials.secrets)

    def _typed(self, exc: BaseException, where: str) -> DownloadError:
        text = self._first_line(exc)
        if isinstance(exc, (RepositoryNotFoundError, GatedRepoError)) and not isinstance(exc, RevisionNotFoundError):
            hint = (
                " (a token was sent: it may lack access)"
                if self.credentials.hf_token
                else " (no token was sent: set HF_TOKEN for private or gated repos)"
            )
            return SourceNotFound(f"{where}: repository or revision not found or not accessible{hint}")
        if isinstance(exc, RevisionNotFoundError):
            return SourceNotFound(f"{where}: revision not found")
        if isinstance(exc, RemoteEntryNotFoundError):
            return SourceNotFound(f"{where}: file not found")
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(exc, HfHubHTTPError) and status in (401, 403):
            sent = (
                "the token in HF_TOKEN was rejected"
                if self.credentials.hf_token
                else "no token was sent (set HF_TOKEN)"
            )
            return AuthenticationFailed(f"{where}: Hugging Face refused access ({status}): {sent}")
        if isinstance(exc, HfHubHTTPError) and status == 404:
            return SourceNotFound(f"{where}: not found (404)")
        return TransferFailed(f"{where}: {type(exc).__name__}: {text}")

    def _first_line(self, exc: BaseException) -> str:
        text = redact(str(exc), self.credentials.secrets)
        return (text.strip().splitlines() or [""])[0][:300]
