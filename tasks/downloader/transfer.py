"""Fetching the files of a cache fill: concurrent, resumable parts, each file verified and renamed into place.

:func:`plan_transfer` splits a file into parts (ranged parts for large S3 objects, one stream otherwise) and
finds how much of each an earlier, killed run left in the staging area (a partial single-stream file, or the
``<file>.json`` part state flushed every ``STATE_FLUSH_SECONDS``). :func:`run_transfers` fetches every part on
a thread pool; the first failure stops the rest, and a lost cache lock stops everything. A transient S3 part
failure is retried from where it stopped. When a file's last part lands it is verified (size, then the
streamed or read-back checksum, :mod:`tasks.downloader.hashing`), its data fsynced, recorded in the journal
and renamed into place; a mismatch discards it.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from engine.caches.sources import ModelSource
from tasks.clients.files import fsync_file
from tasks.clients.sources.deadline import FillDeadline, cover_thread
from tasks.clients.sources.errors import ChecksumMismatch, DownloadError, TransferFailed
from tasks.clients.sources.listing import Listing, RemoteFile
from tasks.downloader.hashing import BackgroundHash, HashingFile, MiB, StreamHash, checksum_problem, hash_file
from tasks.downloader.lock import CacheLock
from tasks.downloader.plan import Journal, JournalEntry
from tasks.downloader.progress import ProgressTracker

log = logging.getLogger("modelplane.downloader")

STATE_FLUSH_SECONDS = 0.2
BACKGROUND_HASH_BYTES = 64 * MiB
"""Files fetched in one stream from this size up are hashed on a helper thread, overlapping the receive."""
PART_ATTEMPTS = 4


@dataclass
class Transfer:
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
    hasher: StreamHash | BackgroundHash | None = None
    """Digests of the bytes written front to back (single-part files); None for multi-part files."""

    @property
    def bytes_present(self) -> int:
        return sum(self.done)


def plan_transfer(remote: RemoteFile, staging: pathlib.Path, part_size: int | None) -> Transfer:
    """Parts of one file and how much of each an earlier run left on disk.

    Args:
        remote: The file as the source lists it.
        staging: The staging directory of the fill.
        part_size: The size of one ranged part in bytes, or None to fetch the file whole.

    Returns:
        The file's parts and the bytes of each already on disk (resumed only when size, etag and part size match).
    """
    tmp = staging / remote.staging_name
    if part_size is None or remote.size <= part_size:
        present = tmp.stat().st_size if tmp.exists() else 0
        if present > remote.size:
            tmp.unlink()
            present = 0
        return Transfer(remote, tmp, [(0, remote.size)], [present], None)
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
    return Transfer(remote, tmp, parts, done, state_path)


def run_transfers(
    backend: object,
    source: ModelSource,
    listing: Listing,
    transfers: list[Transfer],
    root: pathlib.Path,
    journal: Journal,
    tracker: ProgressTracker,
    lock: CacheLock,
    concurrency: int,
    deadline: FillDeadline | None = None,
) -> None:
    """Fetch every part of every transfer on a thread pool; the first failure stops the rest, and so does a lost
    lock or a passed deadline (each part's connections are the deadline's, :func:`~tasks.clients.sources.deadline.cover_thread`).

    Args:
        backend: The source's download backend.
        source: The model source.
        listing: The source's listing (its resolved revision).
        transfers: The files to fetch, with their parts.
        root: The cache directory.
        journal: The journal the finished files are recorded in.
        tracker: The progress tracker bytes are counted into.
        lock: The cache's lock; losing it stops the transfers.
        concurrency: How many parts are fetched at once.
        deadline: The fill's deadline, or None.

    Raises:
        DownloadError: The first part that failed with one (e.g. a lost lock or a checksum mismatch), re-raised.
        TransferFailed: The first part failed with another exception.
    """
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(lock, deadline, stop), daemon=True)
    watcher.start()
    pool = ThreadPoolExecutor(
        max_workers=max(1, concurrency), thread_name_prefix="cache-fill", initializer=cover_thread, initargs=(deadline,)
    )
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


def _watch(lock: CacheLock, deadline: FillDeadline | None, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        if lock.lost.is_set() or (deadline is not None and deadline.passed()):
            stop.set()
            return


def _fetch_part(
    backend: object,
    source: ModelSource,
    listing: Listing,
    transfer: Transfer,
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
        hasher = StreamHash.of_prefix(transfer.tmp, transfer.remote, transfer.done[0])
        transfer.hasher = BackgroundHash(hasher) if transfer.remote.size >= BACKGROUND_HASH_BYTES else hasher
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

            hashing = HashingFile(handle, transfer.hasher)
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


def _open(transfer: Transfer) -> int:
    with transfer.lock:
        if transfer.fd is None:
            transfer.tmp.parent.mkdir(parents=True, exist_ok=True)
            transfer.fd = os.open(transfer.tmp, os.O_WRONLY | os.O_CREAT, 0o644)
        return transfer.fd


def _close(transfer: Transfer) -> None:
    with transfer.lock:
        if transfer.fd is not None:
            os.close(transfer.fd)
            transfer.fd = None


def _maybe_flush(transfer: Transfer) -> None:
    if transfer.state_path is not None and time.monotonic() - transfer.last_flush >= STATE_FLUSH_SECONDS:
        _flush_state(transfer)


def _flush_state(transfer: Transfer, force: bool = False) -> None:
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


def _finish_file(transfer: Transfer, root: pathlib.Path, journal: Journal, tracker: ProgressTracker) -> None:
    """Verify size and checksum, record the file in the journal, rename it into place."""
    _close(transfer)
    remote = transfer.remote
    if not transfer.tmp.exists():
        transfer.tmp.parent.mkdir(parents=True, exist_ok=True)
        transfer.tmp.touch()  # an empty file gets no write
    size = transfer.tmp.stat().st_size
    problem = None if size == remote.size else f"size {size} bytes, expected {remote.size}"
    streamed = transfer.hasher.digests(remote.size) if transfer.hasher is not None else None
    digests = (streamed or hash_file(transfer.tmp, remote)) if problem is None else {}
    problem = problem or checksum_problem(remote, digests)
    if problem is not None:
        transfer.tmp.unlink(missing_ok=True)
        if transfer.state_path is not None:
            transfer.state_path.unlink(missing_ok=True)
        tracker.add(-size)
        raise ChecksumMismatch(f"{remote.path}: {problem}; the file was discarded, run the fill again to fetch it anew")
    fsync_file(transfer.tmp)  # data on disk before the journal vouches for it and before the rename
    journal.record(JournalEntry(remote.path, remote.size, digests["sha256"], remote.etag))
    target = root / remote.path
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(transfer.tmp, target)
    if transfer.state_path is not None:
        transfer.state_path.unlink(missing_ok=True)
    tracker.file_done()
