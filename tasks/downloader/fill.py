"""Fill a cache directory from a model source: locked, resumable, verified, completion marker last.

One run: take the lock (waiting while another live filler holds it); return at once when the cache is
already complete; list the source; check every remote path before anything is written; skip the files
an earlier run completed; check the free space against what is left; fetch the rest concurrently (ranged
parts for large S3 objects, each part resuming where a killed run stopped); verify each file's size and
checksum, make its data durable (fsync), record it in the journal and rename it into place; make every
directory entry durable; write the marker; drop the staging area.

Durability: the marker is the only thing that makes a cache count as complete, so it is written only after
every file's data was fsynced (each file in its worker, right after verification, overlapping other
downloads; files kept from an earlier run once more before the marker) and every directory holding a file
was fsynced (so the renames survive a crash). A power loss at any point leaves no marker or a marker whose
files are all on disk. Single-part files are hashed while they stream in, so verification does not read
them back (from 64 MiB up on a helper thread, so that hashing a large file overlaps receiving it);
multi-part files (written out of order) are read back once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import queue
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO

from engine.caches.sources import ModelSource, parse_source
from tasks.downloader.credentials import Credentials
from tasks.downloader.errors import (
    CacheInUse,
    ChecksumMismatch,
    DestinationConflict,
    DownloadError,
    InsufficientSpace,
    TransferFailed,
    UnsupportedSource,
    redact,
)
from tasks.downloader.lock import DEFAULT_HEARTBEAT, DEFAULT_STALE_AFTER, CacheLock
from tasks.downloader.manifest import (
    CacheManifest,
    ManifestFile,
    is_complete,
    read_manifest,
    remove_manifest,
    write_manifest,
)
from tasks.downloader.plan import (
    STAGING_DIR,
    Journal,
    JournalEntry,
    Listing,
    RemoteFile,
    check_listing,
    directory_usage,
)
from tasks.downloader.progress import ProgressCallback, ProgressTracker, human_bytes
from tasks.files import fsync_dir

log = logging.getLogger("modelplane.downloader")

MiB = 1024 * 1024
DEFAULT_PART_SIZE = 16 * MiB
DEFAULT_CONCURRENCY = 8
STATE_FLUSH_SECONDS = 0.2
HASH_BLOCK = 4 * MiB
BACKGROUND_HASH_BYTES = 64 * MiB
"""Files fetched in one stream from this size up are hashed on a helper thread, overlapping the receive."""
BACKGROUND_HASH_QUEUE = 64
"""Writes the helper thread may lag behind (bounded: a slow hash slows the receive instead of piling up)."""
PART_ATTEMPTS = 4


# --------------------------------------------------------------------------------------------- public entry


def fill_cache(
    source: ModelSource | str,
    dest: str | os.PathLike[str],
    credentials: Credentials | None = None,
    progress: ProgressCallback | None = None,
    *,
    capacity_bytes: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    part_size: int = DEFAULT_PART_SIZE,
    lock_timeout: float | None = None,
    heartbeat: float = DEFAULT_HEARTBEAT,
    stale_after: float = DEFAULT_STALE_AFTER,
    on_wait: Callable[[str], None] | None = None,
) -> CacheManifest:
    """Make ``dest`` a complete cache of ``source`` and return its manifest.

    ``credentials`` default to :meth:`Credentials.from_env`. ``capacity_bytes`` is the volume's size when the
    filesystem does not tell (a PVC request on a shared filesystem): the free space is the smaller of what
    the filesystem reports and the capacity minus what the cache already uses. Raises a
    :class:`~tasks.downloader.errors.DownloadError` subclass whose ``reason`` a flow puts in a condition.
    """
    parsed = parse_source(source) if isinstance(source, str) else source
    if not parsed.downloadable:
        raise UnsupportedSource(
            f"{parsed.uri} is not downloadable: only hf:// and s3:// sources are fetched into a cache"
        )
    creds = credentials if credentials is not None else Credentials.from_env()
    root = pathlib.Path(dest)
    root.mkdir(parents=True, exist_ok=True)
    existing = _complete_manifest(root, parsed)
    if existing is not None:
        return existing
    lock = CacheLock(root, timeout=lock_timeout, heartbeat=heartbeat, stale_after=stale_after, on_wait=on_wait)
    with lock:
        existing = _complete_manifest(root, parsed)
        if existing is not None:
            log.info("cache %s was completed by another filler while this one waited", root)
            return existing
        try:
            return _fill_locked(parsed, root, creds, progress, lock, capacity_bytes, concurrency, part_size)
        except DownloadError as exc:
            exc.message = redact(exc.message, creds.secrets)
            exc.args = (exc.message,)
            raise


def source_size(source: ModelSource | str, credentials: Credentials | None = None) -> list[int]:
    """The sizes in bytes of the files a cache of ``source`` holds (for PVC sizing); lists, downloads nothing."""
    return [f.size for f in list_source(source, credentials).files]


def list_source(source: ModelSource | str, credentials: Credentials | None = None) -> Listing:
    """The resolved revision and the files (paths, sizes, checksums) a cache of ``source`` would hold."""
    parsed = parse_source(source) if isinstance(source, str) else source
    if not parsed.downloadable:
        raise UnsupportedSource(f"{parsed.uri} is not downloadable: only hf:// and s3:// sources can be sized")
    creds = credentials if credentials is not None else Credentials.from_env()
    return _backend(parsed, creds, DEFAULT_CONCURRENCY).list()


# ------------------------------------------------------------------------------------------------ internals


def _complete_manifest(root: pathlib.Path, source: ModelSource) -> CacheManifest | None:
    manifest = read_manifest(root)
    if manifest is None:
        return None
    if manifest.source != source.uri:
        raise DestinationConflict(f"{root} already holds a complete cache of {manifest.source}, not {source.uri}")
    return manifest if is_complete(root, source.uri) else None


def _backend(source: ModelSource, creds: Credentials, concurrency: int):  # type: ignore[no-untyped-def]
    if source.scheme == "s3":
        from tasks.downloader.s3 import S3Backend

        return S3Backend(source, creds, max_connections=max(10, concurrency + 2))
    from tasks.downloader.hf import HfBackend

    return HfBackend(source, creds)


@dataclass
class _Transfer:
    """One file being fetched: its temporary file, its parts and their progress."""

    remote: RemoteFile
    tmp: pathlib.Path
    parts: list[tuple[int, int]]
    done: list[int]
    state_path: pathlib.Path | None
    remaining: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    fd: int | None = None
    last_flush: float = 0.0
    hasher: _StreamHash | _BackgroundHash | None = None
    """Digests of the bytes written front to back (single-part files); None for multi-part files."""

    @property
    def bytes_present(self) -> int:
        return sum(self.done)


def _fill_locked(
    source: ModelSource,
    root: pathlib.Path,
    creds: Credentials,
    progress: ProgressCallback | None,
    lock: CacheLock,
    capacity_bytes: int | None,
    concurrency: int,
    part_size: int,
) -> CacheManifest:
    if read_manifest(root) is not None:
        remove_manifest(root)  # a marker whose files went missing: the cache is incomplete again
    backend = _backend(source, creds, concurrency)
    listing: Listing = backend.list()
    check_listing(root, listing)  # raises PathTraversal before anything is written
    staging = root / STAGING_DIR
    journal = Journal(staging)
    complete, todo = _classify(root, listing, journal)
    transfers = [_plan_transfer(remote, staging, part_size if source.scheme == "s3" else None) for remote in todo]
    partial = sum(t.bytes_present for t in transfers)
    _check_space(root, listing, sum(t.remote.size for t in transfers) - partial, capacity_bytes)
    staging.mkdir(exist_ok=True)
    tracker = ProgressTracker(progress)
    tracker.start(
        listing.total_bytes,
        len(listing.files),
        bytes_done=sum(e.size for e in complete.values()) + partial,
        files_done=len(complete),
    )
    log.info(
        "filling %s from %s: %d files, %s (%d files already complete, %s partial)",
        root,
        source.uri,
        len(listing.files),
        human_bytes(listing.total_bytes),
        len(complete),
        human_bytes(partial),
    )
    try:
        _run(backend, source, listing, transfers, root, journal, tracker, lock, concurrency)
    finally:
        journal.close()
    if lock.lost.is_set():
        raise CacheInUse(f"the lock on {root} was taken over by another filler; stopped before writing the marker")
    _make_durable(root, listing, complete)  # every file's data and directory entry on disk before the marker
    hashes = {**{p: e for p, e in complete.items()}, **journal.entries}
    files = tuple(
        ManifestFile(path=f.path, size=f.size, sha256=hashes[f.path].sha256, etag=f.etag) for f in listing.files
    )
    manifest = CacheManifest(
        source=source.uri,
        revision=listing.revision,
        files=files,
        completed_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        stats={"bytesFetched": tracker.fetched, "filesSkipped": len(complete), "filesFetched": len(transfers)},
    )
    write_manifest(root, manifest)  # the completion point: written after every file is in place
    shutil.rmtree(staging, ignore_errors=True)
    tracker.finish()
    log.info("cache %s complete: %d files, %s fetched this run", root, len(files), human_bytes(tracker.fetched))
    return manifest


def _classify(
    root: pathlib.Path, listing: Listing, journal: Journal
) -> tuple[dict[str, JournalEntry], list[RemoteFile]]:
    """Split the listing into files already complete in ``root`` and files to fetch."""
    complete: dict[str, JournalEntry] = {}
    todo: list[RemoteFile] = []
    for remote in listing.files:
        target = root / remote.path
        try:
            on_disk = target.stat().st_size if target.is_file() else None
        except OSError:
            on_disk = None
        entry = journal.entries.get(remote.path)
        if on_disk == remote.size and entry is not None and entry.size == remote.size and entry.etag == remote.etag:
            complete[remote.path] = entry
            continue
        if on_disk == remote.size and _has_checksum(remote):
            digests = _hash_file(target, remote)
            if _checksum_problem(remote, digests) is None:
                complete[remote.path] = JournalEntry(remote.path, remote.size, digests["sha256"], remote.etag)
                continue
        todo.append(remote)
    return complete, todo


def _plan_transfer(remote: RemoteFile, staging: pathlib.Path, part_size: int | None) -> _Transfer:
    """Parts of one file and how much of each an earlier run left on disk."""
    tmp = staging / remote.staging_name
    if part_size is None or remote.size <= part_size:
        present = tmp.stat().st_size if tmp.exists() else 0
        if present > remote.size:
            tmp.unlink()
            present = 0
        return _Transfer(remote, tmp, [(0, remote.size)], [present], None)
    parts = [(start, min(start + part_size, remote.size)) for start in range(0, remote.size, part_size)]
    state_path = tmp.with_name(tmp.name + ".json")
    done = [0] * len(parts)
    try:
        state = json.loads(state_path.read_text())
        if (
            state.get("size") == remote.size
            and state.get("etag") == remote.etag
            and state.get("partSize") == part_size
            and tmp.exists()
        ):
            for index, count in (state.get("done") or {}).items():
                i = int(index)
                if 0 <= i < len(parts):
                    done[i] = max(0, min(int(count), parts[i][1] - parts[i][0]))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return _Transfer(remote, tmp, parts, done, state_path)


def _check_space(root: pathlib.Path, listing: Listing, needed: int, capacity_bytes: int | None) -> None:
    """Refuse before downloading when what is left does not fit."""
    free = shutil.disk_usage(root).free
    where = "the volume"
    if capacity_bytes is not None:
        left = capacity_bytes - directory_usage(root)
        if left < free:
            free, where = left, f"the volume ({human_bytes(capacity_bytes)} capacity)"
    if needed > free:
        raise InsufficientSpace(
            f"{root}: {human_bytes(needed)} left to download (of {human_bytes(listing.total_bytes)}) but {where} has "
            f"{human_bytes(max(free, 0))} free; nothing was downloaded"
        )


def _run(
    backend: object,
    source: ModelSource,
    listing: Listing,
    transfers: list[_Transfer],
    root: pathlib.Path,
    journal: Journal,
    tracker: ProgressTracker,
    lock: CacheLock,
    concurrency: int,
) -> None:
    """Fetch every part of every transfer on a thread pool; the first failure stops the rest."""
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_lock, args=(lock, stop), daemon=True)
    watcher.start()
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="cache-fill")
    futures: list[Future[None]] = []
    try:
        for transfer in transfers:
            transfer.remaining = len(transfer.parts)
            for index in range(len(transfer.parts)):
                futures.append(
                    pool.submit(_fetch_part, backend, source, listing, transfer, index, root, journal, tracker, stop)
                )
        finished, _pending = wait(futures, return_when=FIRST_EXCEPTION)
        failure = next((f.exception() for f in finished if f.exception() is not None), None)
        if failure is not None:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            for transfer in transfers:
                _close(transfer)
                _flush_state(transfer)
            if isinstance(failure, DownloadError):
                raise failure
            raise TransferFailed(f"download failed: {type(failure).__name__}: {failure}") from None
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)


def _watch_lock(lock: CacheLock, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        if lock.lost.is_set():
            stop.set()
            return


def _fetch_part(
    backend: object,
    source: ModelSource,
    listing: Listing,
    transfer: _Transfer,
    index: int,
    root: pathlib.Path,
    journal: Journal,
    tracker: ProgressTracker,
    stop: threading.Event,
) -> None:
    if stop.is_set():
        raise TransferFailed("stopped")
    start, end = transfer.parts[index]
    if len(transfer.parts) == 1:
        hasher = _StreamHash.of_prefix(transfer.tmp, transfer.remote, transfer.done[0])
        transfer.hasher = _BackgroundHash(hasher) if transfer.remote.size >= BACKGROUND_HASH_BYTES else hasher
    if source.scheme == "s3":
        fd = _open(transfer)

        def write(offset: int, data: bytes) -> None:
            os.pwrite(fd, data, offset)
            if transfer.hasher is not None:
                transfer.hasher.update(offset, data)
            with transfer.lock:
                transfer.done[index] = offset + len(data) - start
            tracker.add(len(data))
            _maybe_flush(transfer)

        for attempt in range(PART_ATTEMPTS):
            try:
                backend.fetch_range(transfer.remote, start + transfer.done[index], end, write, stop)  # type: ignore[attr-defined]
                break
            except TransferFailed as exc:
                if not getattr(exc, "transient", False) or attempt == PART_ATTEMPTS - 1 or stop.is_set():
                    raise
                log.warning("%s; retrying the part from byte %d", exc.message, start + transfer.done[index])
                stop.wait(2**attempt)
    else:
        with open(transfer.tmp, "ab") as handle:

            def count(n: int) -> None:
                with transfer.lock:
                    transfer.done[index] += n
                tracker.add(n)

            hashing = _HashingFile(handle, transfer.hasher)
            backend.fetch_file(transfer.remote, listing.revision or "", hashing, transfer.done[index], count, stop)  # type: ignore[attr-defined]
    if stop.is_set():
        raise TransferFailed("stopped")
    with transfer.lock:
        transfer.remaining -= 1
        last = transfer.remaining == 0
    if transfer.state_path is not None:
        _flush_state(transfer, force=True)
    if last:
        _finish_file(transfer, root, journal, tracker)


def _open(transfer: _Transfer) -> int:
    with transfer.lock:
        if transfer.fd is None:
            transfer.tmp.parent.mkdir(parents=True, exist_ok=True)
            transfer.fd = os.open(transfer.tmp, os.O_WRONLY | os.O_CREAT, 0o644)
        return transfer.fd


def _close(transfer: _Transfer) -> None:
    with transfer.lock:
        if transfer.fd is not None:
            os.close(transfer.fd)
            transfer.fd = None


def _maybe_flush(transfer: _Transfer) -> None:
    if transfer.state_path is not None and time.monotonic() - transfer.last_flush >= STATE_FLUSH_SECONDS:
        _flush_state(transfer)


def _flush_state(transfer: _Transfer, force: bool = False) -> None:
    """Record how far each part got (only what is already written to the temporary file)."""
    if transfer.state_path is None:
        return
    with transfer.lock:
        transfer.last_flush = time.monotonic()
        state = {
            "size": transfer.remote.size,
            "etag": transfer.remote.etag,
            "partSize": transfer.parts[0][1] - transfer.parts[0][0],
            "done": {str(i): n for i, n in enumerate(transfer.done) if n},
        }
        tmp = transfer.state_path.with_name(transfer.state_path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(state))
            os.replace(tmp, transfer.state_path)
        except OSError:
            pass


def _finish_file(transfer: _Transfer, root: pathlib.Path, journal: Journal, tracker: ProgressTracker) -> None:
    """Verify size and checksum, record the file in the journal, rename it into place."""
    _close(transfer)
    remote = transfer.remote
    if not transfer.tmp.exists():
        transfer.tmp.parent.mkdir(parents=True, exist_ok=True)
        transfer.tmp.touch()  # an empty file gets no write
    size = transfer.tmp.stat().st_size
    problem = None if size == remote.size else f"size {size} bytes, expected {remote.size}"
    streamed = transfer.hasher.digests(remote.size) if transfer.hasher is not None else None
    digests = (streamed or _hash_file(transfer.tmp, remote)) if problem is None else {}
    problem = problem or _checksum_problem(remote, digests)
    if problem is not None:
        transfer.tmp.unlink(missing_ok=True)
        if transfer.state_path is not None:
            transfer.state_path.unlink(missing_ok=True)
        tracker.add(-size)
        raise ChecksumMismatch(f"{remote.path}: {problem}; the file was discarded, run the fill again to fetch it anew")
    _fsync_file(transfer.tmp)  # data on disk before the journal vouches for it and before the rename
    journal.record(JournalEntry(remote.path, remote.size, digests["sha256"], remote.etag))
    target = root / remote.path
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(transfer.tmp, target)
    if transfer.state_path is not None:
        transfer.state_path.unlink(missing_ok=True)
    tracker.file_done()


def _has_checksum(remote: RemoteFile) -> bool:
    return bool(remote.sha256 or remote.md5 or remote.git_sha1)


class _StreamHash:
    """SHA-256 (plus the MD5 or git blob SHA-1 the source is checked against) of a file written front to back.

    Fed every write with its offset; a write that is not at the end of what was hashed (parts out of
    order, a rewind the caller could not replay) makes it give up, and the file is read back instead.
    """

    def __init__(self, remote: RemoteFile) -> None:
        self.remote = remote
        self._lock = threading.Lock()
        self.restart()

    def restart(self) -> None:
        """Start over from byte 0 (the file was truncated to nothing)."""
        remote = self.remote
        with self._lock:
            self.position = 0
            self.valid = True
            self._sha256 = hashlib.sha256()
            self._md5 = hashlib.md5(usedforsecurity=False) if remote.md5 else None
            self._git = (
                hashlib.sha1(f"blob {remote.size}\0".encode(), usedforsecurity=False) if remote.git_sha1 else None
            )

    @classmethod
    def of_prefix(cls, path: pathlib.Path, remote: RemoteFile, length: int) -> _StreamHash:
        """A hasher that has already seen the first ``length`` bytes of ``path`` (a partial file being resumed)."""
        hasher = cls(remote)
        if length > 0:
            try:
                with open(path, "rb") as handle:
                    while hasher.position < length and (
                        block := handle.read(min(HASH_BLOCK, length - hasher.position))
                    ):
                        hasher.update(hasher.position, block)
            except OSError:
                hasher.valid = False
            if hasher.position != length:
                hasher.valid = False
        return hasher

    def update(self, offset: int, data: bytes) -> None:
        """Hash ``data`` written at ``offset`` (only in order; anything else invalidates the stream hash)."""
        with self._lock:
            if not self.valid:
                return
            if offset != self.position:
                self.valid = False
                return
            self._sha256.update(data)
            if self._md5 is not None:
                self._md5.update(data)
            if self._git is not None:
                self._git.update(data)
            self.position += len(data)

    def invalidate(self) -> None:
        """Forget the stream hash (the file will be read back)."""
        with self._lock:
            self.valid = False

    def digests(self, size: int) -> dict[str, str] | None:
        """The digests when exactly ``size`` bytes were hashed in order, else None."""
        with self._lock:
            if not self.valid or self.position != size:
                return None
            digests = {"sha256": self._sha256.hexdigest()}
            if self._md5 is not None:
                digests["md5"] = self._md5.hexdigest()
            if self._git is not None:
                digests["git_sha1"] = self._git.hexdigest()
            return digests


class _BackgroundHash:
    """A :class:`_StreamHash` fed on a helper thread, so hashing a large file overlaps receiving it.

    hashlib releases the GIL on large buffers, so on a second core the digest costs the stream nothing.
    Every call is queued as the same call of the inner hash, on one ordered queue (bounded, so the receive
    waits rather than memory growing); :meth:`digests` waits until the thread has run everything before it.
    The thread ends when the queue stays empty for a while (a transfer that failed leaves no thread behind)
    and starts again on the next call.
    """

    IDLE_SECONDS = 5.0

    def __init__(self, inner: _StreamHash) -> None:
        self._inner = inner
        self._queue: queue.Queue[tuple[Callable[..., object], tuple[Any, ...]]] = queue.Queue(BACKGROUND_HASH_QUEUE)
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def _submit(self, call: Callable[..., object], *args: Any) -> None:
        # Under the lock, so the thread cannot decide to end between the check and the put (it takes the
        # lock only when the queue is empty, so a put here never waits on a full queue while holding it).
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="modelplane-hash", daemon=True)
                self._worker.start()
            self._queue.put((call, args))

    def _work(self) -> None:
        while True:
            try:
                call, args = self._queue.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._worker = None
                        return
                continue
            call(*args)

    def update(self, offset: int, data: bytes) -> None:
        """Queue ``data`` written at ``offset`` for hashing (copied if the caller may reuse its buffer)."""
        self._submit(self._inner.update, offset, data if isinstance(data, bytes) else bytes(data))

    def restart(self) -> None:
        """Start over from byte 0, after what is already queued."""
        self._submit(self._inner.restart)

    def invalidate(self) -> None:
        """Forget the stream hash, after what is already queued."""
        self._submit(self._inner.invalidate)

    def digests(self, size: int) -> dict[str, str] | None:
        """Wait for every queued write to be hashed, then the digests as :meth:`_StreamHash.digests`."""
        done = threading.Event()
        self._submit(done.set)
        done.wait()
        return self._inner.digests(size)


class _HashingFile:
    """A file handle (opened for appending) that feeds every write to a :class:`_StreamHash`.

    A seek back (a server that ignored Range: the client rewinds and truncates) restarts the hash when it
    goes back to the start and invalidates it otherwise.
    """

    def __init__(self, handle: BinaryIO, hasher: _StreamHash | _BackgroundHash | None) -> None:
        self._handle = handle
        self._hasher = hasher
        self._position = handle.seek(0, os.SEEK_END)

    def write(self, data: bytes) -> int:
        written = self._handle.write(data)
        if self._hasher is not None:
            self._hasher.update(self._position, data)
        self._position += written
        return written

    def seek(self, *args: int) -> int:
        position = self._handle.seek(*args)
        if position != self._position and self._hasher is not None:
            if position == 0:
                self._hasher.restart()
            else:
                self._hasher.invalidate()
        self._position = position
        return position

    def tell(self) -> int:
        return self._handle.tell()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _hash_file(path: pathlib.Path, remote: RemoteFile) -> dict[str, str]:
    """SHA-256 always, plus the MD5 or git blob id the source can be checked against, in one read."""
    hasher = _StreamHash.of_prefix(path, remote, path.stat().st_size)
    digests = hasher.digests(hasher.position)
    if digests is None:
        raise TransferFailed(f"{remote.path}: the downloaded file could not be read back for verification")
    return digests


def _fsync_file(path: pathlib.Path) -> None:
    """Force ``path``'s data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_durable(root: pathlib.Path, listing: Listing, complete: dict[str, JournalEntry]) -> None:
    """Before the marker: fsync the files kept from an earlier run and every directory holding a listed file.

    Files fetched by this run were fsynced right after verification. A directory fsync makes the renames
    and the creation of sub-directories durable, so the marker can never be on disk while a file it lists
    is not.
    """
    for path in complete:
        _fsync_file(root / path)
    directories = {root}
    for remote in listing.files:
        parent = (root / remote.path).parent
        while parent != root and parent not in directories:
            directories.add(parent)
            parent = parent.parent
    for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
        fsync_dir(directory)


def _checksum_problem(remote: RemoteFile, digests: dict[str, str]) -> str | None:
    for name, expected in (("sha256", remote.sha256), ("md5", remote.md5), ("git_sha1", remote.git_sha1)):
        if expected and digests.get(name) != expected.lower():
            return f"{name} {digests.get(name)} does not match the source's {expected}"
    return None
