"""What a model source holds: the files one listing names, with their sizes and the checksums they must match.

Both transports (:mod:`tasks.clients.sources.hf`, :mod:`tasks.clients.sources.s3`) answer a listing with these
types; the downloader (:mod:`tasks.downloader`) plans, fetches and verifies from them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class RemoteFile:
    """One file of the source: where it goes in the cache, its size, and what its content must hash to."""

    path: str
    """Relative path inside the cache (checked by :func:`safe_relative_path`)."""
    size: int
    etag: str | None = None
    """The source's version tag (S3 ETag, Hugging Face ETag/blob id): a changed tag means a changed file."""
    remote: str = ""
    """The object key or repository path to fetch."""
    sha256: str | None = None
    """Expected SHA-256 when the source publishes one (Hugging Face LFS files)."""
    git_sha1: str | None = None
    """Expected git blob id (Hugging Face non-LFS files)."""
    md5: str | None = None
    """Expected MD5 (S3 objects uploaded in one part: the ETag is the MD5)."""

    def __post_init__(self) -> None:
        """A listing is the remote side's word: a path that is not text or a size that is not a whole number of
        bytes >= 0 is refused here, before the free-space check sums the sizes or a path is built."""
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"a listed file's path must be a non-empty string, got {self.path!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"{self.path}: the listed size must be a whole number of bytes >= 0, got {self.size!r}")

    @property
    def staging_name(self) -> str:
        """Temporary file name: changes with the ETag, so a changed object never resumes an old partial file."""
        digest = hashlib.sha256(f"{self.path}\0{self.etag}\0{self.size}".encode()).hexdigest()[:24]
        return f"{digest}.part"


@dataclass(frozen=True)
class Listing:
    """Everything a source holds for this cache, and the revision it resolved to."""

    revision: str | None
    files: tuple[RemoteFile, ...]

    @property
    def total_bytes(self) -> int:
        """Sum of the file sizes."""
        return sum(f.size for f in self.files)
