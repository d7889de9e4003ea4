"""Checksums of downloaded files, computed while they stream in so verification need not read them back.

A file fetched front to back in one stream (every HF file, small S3 objects) is hashed write by write
(:class:`StreamHash`, fed through :class:`HashingFile`); from ``BACKGROUND_HASH_BYTES`` (64 MiB) up on a
helper thread (:class:`BackgroundHash`), so hashing a large file overlaps receiving it. Multi-part files
(written out of order) and files whose stream hash was lost (a rewind the client could not replay) are read
back once (:func:`hash_file`). SHA-256 is always computed (the manifest records it), plus the MD5 or git blob
SHA-1 the source publishes; :func:`checksum_problem` compares them with the listing.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import queue
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from tasks.clients.sources.errors import TransferFailed
from tasks.clients.sources.listing import RemoteFile

MiB = 1024 * 1024
HASH_BLOCK = 4 * MiB
BACKGROUND_HASH_QUEUE = 64
"""Writes the helper thread may lag behind (bounded: a slow hash slows the receive instead of piling up)."""


def has_checksum(remote: RemoteFile) -> bool:
    """Whether the source publishes a checksum a file on disk can be verified against.

    Args:
        remote: A file as the source lists it.

    Returns:
        True when the source gives its SHA-256, MD5 or git blob id.
    """
    return bool(remote.sha256 or remote.md5 or remote.git_sha1)


class StreamHash:
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
    def of_prefix(cls, path: pathlib.Path, remote: RemoteFile, length: int) -> StreamHash:
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


class BackgroundHash:
    """A :class:`StreamHash` fed on a helper thread, so hashing a large file overlaps receiving it.

    hashlib releases the GIL on large buffers, so on a second core the digest costs the stream nothing.
    Every call is queued as the same call of the inner hash, on one ordered queue (bounded, so the receive
    waits rather than memory growing); :meth:`digests` waits until the thread has run everything before it.
    The thread ends when the queue stays empty for a while (a transfer that failed leaves no thread behind)
    and starts again on the next call.
    """

    IDLE_SECONDS = 5.0

    def __init__(self, inner: StreamHash) -> None:
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
        """Wait for every queued write to be hashed, then the digests as :meth:`StreamHash.digests`."""
        done = threading.Event()
        self._submit(done.set)
        done.wait()
        return self._inner.digests(size)


class HashingFile:
    """A file handle (opened for appending) that feeds every write to a :class:`StreamHash`.

    A seek back (a server that ignored Range: the client rewinds and truncates) restarts the hash when it
    goes back to the start and invalidates it otherwise.
    """

    def __init__(self, handle: BinaryIO, hasher: StreamHash | BackgroundHash | None) -> None:
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


def hash_file(path: pathlib.Path, remote: RemoteFile) -> dict[str, str]:
    """SHA-256 always, plus the MD5 or git blob id the source can be checked against, in one read.

    Args:
        path: The downloaded file.
        remote: The file as the source lists it (which checksums it publishes).

    Returns:
        The hex digests by name (``sha256``, and ``md5`` or ``git_sha1`` when the source publishes it).

    Raises:
        TransferFailed: The file could not be read back.
    """
    hasher = StreamHash.of_prefix(path, remote, path.stat().st_size)
    digests = hasher.digests(hasher.position)
    if digests is None:
        raise TransferFailed(f"{remote.path}: the downloaded file could not be read back for verification")
    return digests


def checksum_problem(remote: RemoteFile, digests: dict[str, str]) -> str | None:
    """What does not match between ``digests`` and the checksums the source published, or None.

    Args:
        remote: The file as the source lists it.
        digests: The digests of the file on disk, by name.

    Returns:
        The first mismatch as a phrase, or None when every published checksum matches.
    """
    for name, expected in (("sha256", remote.sha256), ("md5", remote.md5), ("git_sha1", remote.git_sha1)):
        if expected and digests.get(name) != expected.lower():
            return f"{name} {digests.get(name)} does not match the source's {expected}"
    return None
