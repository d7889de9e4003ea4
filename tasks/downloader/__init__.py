"""Modelplane's one downloader: fills a cache directory from a Hugging Face or S3 source.

Public API (what flows, Jobs and the CLI use)::

    fill_cache(source, dest, credentials=None, progress=None, *, capacity_bytes=None, concurrency=8,
               part_size=16 MiB, lock_timeout=None, heartbeat=5.0, stale_after=30.0, on_wait=None,
               deadline=None) -> CacheManifest
    FillDeadline(seconds)                               # a fill's overall deadline: seconds, or a function of its size
    read_manifest(dest) -> CacheManifest | None         # the completion marker, None while incomplete
    is_complete(dest, source_uri=None) -> bool
    source_size(source, credentials=None) -> list[int]  # file sizes for PVC sizing (lists, fetches nothing)
    list_source(source, credentials=None) -> Listing
    Credentials.from_env(env=None)                      # HF_TOKEN, HF_ENDPOINT, AWS_* variables
    prefect_progress(description) -> ProgressCallback   # a Prefect progress artifact
    errors: DownloadError (.reason, .retryable) and AuthenticationFailed, SourceNotFound, InsufficientSpace,
            ChecksumMismatch, PathTraversal, UnsupportedSource, CacheInUse, DestinationConflict, DeadlineExceeded,
            TransferFailed
"""

from tasks.clients.sources.credentials import Credentials
from tasks.clients.sources.deadline import FillDeadline
from tasks.clients.sources.errors import (
    AuthenticationFailed,
    CacheInUse,
    ChecksumMismatch,
    DeadlineExceeded,
    DestinationConflict,
    DownloadError,
    EndpointNotAllowed,
    InsufficientSpace,
    PathTraversal,
    SourceNotFound,
    TransferFailed,
    UnsupportedSource,
)
from tasks.clients.sources.listing import Listing, RemoteFile
from tasks.downloader.fill import DEFAULT_CONCURRENCY, DEFAULT_PART_SIZE, fill_cache, list_source, source_size
from tasks.downloader.lock import CacheLock
from tasks.downloader.manifest import CacheManifest, ManifestFile, is_complete, read_manifest
from tasks.downloader.plan import safe_relative_path
from tasks.downloader.progress import ProgressCallback, ProgressSnapshot, ProgressTracker, prefect_progress

__all__ = [
    "AuthenticationFailed",
    "CacheInUse",
    "CacheLock",
    "CacheManifest",
    "ChecksumMismatch",
    "Credentials",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_PART_SIZE",
    "DeadlineExceeded",
    "DestinationConflict",
    "DownloadError",
    "InsufficientSpace",
    "Listing",
    "ManifestFile",
    "PathTraversal",
    "ProgressCallback",
    "ProgressSnapshot",
    "ProgressTracker",
    "RemoteFile",
    "SourceNotFound",
    "TransferFailed",
    "EndpointNotAllowed",
    "FillDeadline",
    "UnsupportedSource",
    "fill_cache",
    "is_complete",
    "list_source",
    "prefect_progress",
    "read_manifest",
    "safe_relative_path",
    "source_size",
]
