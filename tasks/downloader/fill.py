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

import contextlib
import logging
import os
import pathlib
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from engine.caches.sources import ModelSource, parse_source
from tasks.clients.files import fsync_dir, fsync_file
from tasks.clients.sources.credentials import Credentials
from tasks.clients.sources.deadline import FillDeadline, covering
from tasks.clients.sources.errors import (
    CacheInUse,
    DestinationConflict,
    DownloadError,
    InsufficientSpace,
    UnsupportedSource,
)
from tasks.clients.sources.listing import Listing, RemoteFile
from tasks.downloader.hashing import MiB, checksum_problem, has_checksum, hash_file
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
    check_listing,
    directory_usage,
    unlink_planted_links,
)
from tasks.downloader.progress import ProgressCallback, ProgressTracker, human_bytes
from tasks.downloader.transfer import plan_transfer, run_transfers

if TYPE_CHECKING:
    from tasks.clients.sources.hf import HfBackend
    from tasks.clients.sources.s3 import S3Backend

log = logging.getLogger("modelplane.downloader")

DEFAULT_PART_SIZE = 16 * MiB
DEFAULT_CONCURRENCY = 8


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
    deadline: FillDeadline | None = None,
) -> CacheManifest:
    """Make ``dest`` a complete cache of ``source`` and return its manifest.

    ``credentials`` default to :meth:`Credentials.from_env`. ``capacity_bytes`` is the volume's size when the
    filesystem does not tell (a PVC request on a shared filesystem): the free space is the smaller of what
    the filesystem reports and the capacity minus what the cache already uses. A ``deadline`` bounds the whole
    fill, the wait for another filler's lock included: past it the fill stops (a read blocked on a server that
    sends a byte at a time too, :mod:`tasks.clients.sources.deadline`), writes no marker, keeps what it fetched
    and raises :class:`~tasks.clients.sources.errors.DeadlineExceeded`.

    Args:
        source: The model source (``hf://`` or ``s3://``), parsed or as its URI.
        dest: The cache directory (created when missing).
        credentials: The source's credentials, or None to read them from the environment.
        progress: Called with a snapshot as the fill advances, or None.
        capacity_bytes: The volume's size in bytes when the filesystem does not tell it, or None.
        concurrency: How many parts are downloaded at once.
        part_size: The size of one ranged part of a large file, in bytes.
        lock_timeout: How long to wait for another filler's lock, in seconds; None to wait as long as it takes.
        heartbeat: How often the held lock is renewed, in seconds.
        stale_after: How old another filler's lock may grow before it is taken over, in seconds.
        on_wait: Called with a message while another filler holds the lock, or None.
        deadline: How long the whole fill may take (started when it was made), or None for as long as it takes.

    Returns:
        The completion manifest of the cache (the existing one when the cache was already complete).

    Raises:
        UnsupportedSource: The source is not downloadable (``pvc://``, ``hostpath://``, ...).
        DownloadError: A :class:`~tasks.clients.sources.errors.DownloadError` subclass naming the failure
            (credentials, not found, no space, checksum, lock, ...), whose ``reason`` a flow puts in a condition; its
            message carries no secret; :class:`~tasks.clients.sources.errors.DeadlineExceeded` when the deadline
            passed.
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
    wait = lock_timeout  # the deadline bounds the wait for another filler too
    if deadline is not None:
        wait = deadline.remaining() if lock_timeout is None else min(lock_timeout, deadline.remaining())
    lock = CacheLock(root, timeout=wait, heartbeat=heartbeat, stale_after=stale_after, on_wait=on_wait)
    with contextlib.nullcontext() if deadline is None else deadline:
        try:
            with lock:
                existing = _complete_manifest(root, parsed)
                if existing is not None:
                    log.info("cache %s was completed by another filler while this one waited", root)
                    return existing
                try:
                    return _fill_locked(
                        parsed, root, creds, progress, lock, capacity_bytes, concurrency, part_size, deadline
                    )
                except DownloadError as exc:
                    exc.redacted(creds.secrets)  # its whole message, in place
                    raise
        except DownloadError:
            if deadline is not None and deadline.passed():  # what failed is what the deadline cut short
                raise deadline.error(f"the fill of {root}") from None
            raise


def source_size(source: ModelSource | str, credentials: Credentials | None = None) -> list[int]:
    """The sizes in bytes of the files a cache of ``source`` holds (for PVC sizing); lists, downloads nothing.

    Args:
        source: The downloadable model source, parsed or as its URI.
        credentials: The source's credentials, or None to read them from the environment.

    Returns:
        The size of every file of the source, in bytes.
    """
    return [f.size for f in list_source(source, credentials).files]


def list_source(source: ModelSource | str, credentials: Credentials | None = None) -> Listing:
    """The resolved revision and the files (paths, sizes, checksums) a cache of ``source`` would hold.

    Args:
        source: The downloadable model source, parsed or as its URI.
        credentials: The source's credentials, or None to read them from the environment.

    Returns:
        The listing: the resolved revision and every remote file.

    Raises:
        UnsupportedSource: The source is not downloadable.
    """
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


def _backend(source: ModelSource, creds: Credentials, concurrency: int) -> S3Backend | HfBackend:
    """The transport of ``source`` (imported on first use: botocore and huggingface_hub are slow to import)."""
    if source.scheme == "s3":
        from tasks.clients.sources.s3 import S3Backend

        return S3Backend(source, creds, max_connections=max(10, concurrency + 2))
    from tasks.clients.sources.hf import HfBackend

    return HfBackend(source, creds)


def _fill_locked(
    source: ModelSource,
    root: pathlib.Path,
    creds: Credentials,
    progress: ProgressCallback | None,
    lock: CacheLock,
    capacity_bytes: int | None,
    concurrency: int,
    part_size: int,
    deadline: FillDeadline | None,
) -> CacheManifest:
    for name in unlink_planted_links(root):
        log.warning("removed a symbolic link planted at %s in %s (the fill writes there itself)", name, root)
    if read_manifest(root) is not None:
        remove_manifest(root)  # a marker whose files went missing: the cache is incomplete again
    with covering(deadline):  # every connection of the fill, its client's own set-up's too (huggingface_hub's)
        backend = _backend(source, creds, concurrency)
        listing: Listing = backend.list()
    if deadline is not None:
        deadline.size_known(listing.total_bytes)
    check_listing(root, listing)  # raises PathTraversal before anything is written
    staging = root / STAGING_DIR
    journal = Journal(staging)
    complete, todo = _classify(root, listing, journal)
    transfers = [plan_transfer(remote, staging, part_size if source.scheme == "s3" else None) for remote in todo]
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
        run_transfers(backend, source, listing, transfers, root, journal, tracker, lock, concurrency, deadline)
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
        if on_disk == remote.size and has_checksum(remote):
            digests = hash_file(target, remote)
            if checksum_problem(remote, digests) is None:
                complete[remote.path] = JournalEntry(remote.path, remote.size, digests["sha256"], remote.etag)
                continue
        todo.append(remote)
    return complete, todo


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


def _make_durable(root: pathlib.Path, listing: Listing, complete: dict[str, JournalEntry]) -> None:
    """Before the marker: fsync the files kept from an earlier run and every directory holding a listed file.

    Files fetched by this run were fsynced right after verification. A directory fsync makes the renames
    and the creation of sub-directories durable, so the marker can never be on disk while a file it lists
    is not.
    """
    for path in complete:
        fsync_file(root / path)
    directories = {root}
    for remote in listing.files:
        parent = (root / remote.path).parent
        while parent != root and parent not in directories:
            directories.add(parent)
            parent = parent.parent
    for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
        fsync_dir(directory)
