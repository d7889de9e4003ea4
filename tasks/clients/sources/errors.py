"""Typed download failures: each carries a ``reason`` a flow copies into a ModelCache condition.

Messages are written for the person who reads the condition: what failed and what to do. They never
contain a secret: every message passes through :func:`engine.redaction.redact` with the credentials in use, and
exceptions from the client libraries are re-raised without their chain (their text could echo a header).
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.redaction import redact


class DownloadError(Exception):
    """A cache could not be filled; ``reason`` is a CamelCase condition reason."""

    reason = "DownloadFailed"
    retryable = True

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def redacted(self, secrets: Iterable[str | None]) -> DownloadError:
        """This error with its whole message passed through :func:`engine.redaction.redact` (returns itself)."""
        self.message = redact(self.message, secrets)
        self.args = (self.message,)
        return self


class AuthenticationFailed(DownloadError):
    """The source rejected the credentials (wrong or missing token or keys)."""

    reason = "AuthenticationFailed"
    retryable = False


class SourceNotFound(DownloadError):
    """The repository, revision, bucket, prefix or file does not exist (or is not visible to these credentials)."""

    reason = "SourceNotFound"
    retryable = False


class InsufficientSpace(DownloadError):
    """The volume cannot hold what is left to download; refused before any byte is fetched."""

    reason = "InsufficientSpace"
    retryable = False


class ChecksumMismatch(DownloadError):
    """A downloaded file's size or checksum differs from what the source lists; the file was discarded."""

    reason = "ChecksumMismatch"


class PathTraversal(DownloadError):
    """A remote file name would land outside the cache (``..``, absolute, or a reserved name)."""

    reason = "PathTraversal"
    retryable = False


class EndpointNotAllowed(DownloadError):
    """The source URI names an S3 endpoint other than the one the credentials in use are configured for:
    nothing is sent there (no connection, no access key id, no signed request)."""

    reason = "EndpointNotAllowed"
    retryable = False


class UnsupportedSource(DownloadError):
    """The source is not one the downloader fetches (only hf:// and s3:// are)."""

    reason = "UnsupportedSource"
    retryable = False


class CacheInUse(DownloadError):
    """Another filler holds the cache lock and did not finish within the wait time, or took the lock from us."""

    reason = "CacheLocked"


class DestinationConflict(DownloadError):
    """The destination already holds a complete cache of a different source."""

    reason = "DestinationConflict"
    retryable = False


class DeadlineExceeded(DownloadError):
    """The fill did not complete within its deadline and stopped; the files and parts it fetched are kept, and the
    next fill resumes them."""

    reason = "DeadlineExceeded"


class TransferFailed(DownloadError):
    """The source could not be reached or broke off (network, server error) after retries."""

    reason = "TransferFailed"
