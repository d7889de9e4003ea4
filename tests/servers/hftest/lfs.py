"""What makes a file of a test repository a Git LFS file, and its pointer: shared by both HF test servers.

The olah fixture (:mod:`tests.servers.hftest.fixture`) commits such files as pointers with their objects in the LFS
store; the benchmark's server (:mod:`tests.servers.hftest.fastserver`) serves the same files as LFS entries, with the
pointer's git blob id as their ``oid``.  Both must agree, so that a repository means the same on either.
"""

from __future__ import annotations

LFS_THRESHOLD = 100 * 1024
"""Files of this size or more are LFS files."""


def lfs_pointer(sha256: str, size: int) -> str:
    """The Git LFS pointer file of content with this SHA-256 and size."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n"
