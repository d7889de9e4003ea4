"""A cache lock that works across processes and nodes sharing one volume (RWX PVC).

Protocol: the lock is the file ``.modelplane-cache.lock`` at the cache root, created with ``O_EXCL`` and
holding the owner's token (host, pid, random id). While it is held a heartbeat thread refreshes its mtime
every ``heartbeat`` seconds and checks the token is still ours. Another filler waits while the lock is
fresh; a lock whose mtime is older than ``stale_after`` belongs to a dead filler and is broken: the
breaker takes ``.modelplane-cache.lock.break`` (also ``O_EXCL``), checks the lock is still the same stale
one, removes it and retries. A lock whose owner ran on this host under a pid that no longer exists is
stale at once (a killed filler re-run in the same pod or on the same machine need not wait). If our own lock is taken from us (our heartbeat stalled for longer than
``stale_after``) ``lost`` is set and the filler stops before writing anything else.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import threading
import time
import uuid
from collections.abc import Callable

from tasks.clients.sources.errors import CacheInUse

LOCK_NAME = ".modelplane-cache.lock"
BREAK_NAME = LOCK_NAME + ".break"
DEFAULT_HEARTBEAT = 5.0
DEFAULT_STALE_AFTER = 30.0


class CacheLock:
    """Exclusive fill lock on one cache directory; use as a context manager."""

    def __init__(
        self,
        dest: str | os.PathLike[str],
        *,
        timeout: float | None = None,
        heartbeat: float = DEFAULT_HEARTBEAT,
        stale_after: float = DEFAULT_STALE_AFTER,
        poll: float = 0.5,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.path = pathlib.Path(dest) / LOCK_NAME
        self.break_path = pathlib.Path(dest) / BREAK_NAME
        self.timeout = timeout
        self.heartbeat = heartbeat
        self.stale_after = max(stale_after, 2 * heartbeat)
        self.poll = poll
        self.on_wait = on_wait
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self.lost = threading.Event()
        self.waited = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ acquire / release

    def acquire(self) -> None:
        """Take the lock, waiting while another live filler holds it; raises :class:`CacheInUse` on timeout."""
        started = time.monotonic()
        announced = False
        while True:
            if self._try_create():
                self.waited = time.monotonic() - started
                self._start_heartbeat()
                return
            holder, age = self._holder()
            if age is not None and (age > self.stale_after or _dead_local_owner(holder)):
                self._break_stale(holder)
                continue
            if not announced and self.on_wait is not None:
                self.on_wait(holder or "another filler")
                announced = True
            if self.timeout is not None and time.monotonic() - started > self.timeout:
                raise CacheInUse(
                    f"another filler ({holder or 'unknown'}) holds the cache lock {self.path}; "
                    f"gave up after waiting {self.timeout:.0f}s"
                )
            time.sleep(self.poll)

    def release(self) -> None:
        """Stop the heartbeat and remove the lock if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.heartbeat + 1)
        if self._read_token() == self.token:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> CacheLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------------ internals

    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            json.dump({"owner": self.token, "since": time.time()}, handle)
        return True

    def _read_token(self) -> str | None:
        try:
            owner = json.loads(self.path.read_text()).get("owner")
            return owner if isinstance(owner, str) else None
        except (OSError, ValueError, AttributeError):
            return None

    def _holder(self) -> tuple[str | None, float | None]:
        """The current owner token and the lock's age in seconds (None when it vanished)."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return None, None
        return self._read_token(), time.time() - mtime

    def _break_stale(self, holder: str | None) -> None:
        try:
            fd = os.open(self.break_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            # Another waiter is breaking it; a breaker that died leaves a stale break file behind.
            try:
                if time.time() - self.break_path.stat().st_mtime > self.stale_after:
                    self.break_path.unlink(missing_ok=True)
            except FileNotFoundError:
                pass
            time.sleep(self.poll)
            return
        os.close(fd)
        try:
            current, age = self._holder()
            if current == holder and age is not None and (age > self.stale_after or _dead_local_owner(current)):
                self.path.unlink(missing_ok=True)
        finally:
            self.break_path.unlink(missing_ok=True)

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="cache-lock-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            if self._read_token() != self.token:
                self.lost.set()
                return
            try:
                os.utime(self.path)
            except OSError:
                self.lost.set()
                return


def _dead_local_owner(token: str | None) -> bool:
    """True when ``token`` names a process on this host that no longer exists."""
    if not token:
        return False
    host, _, rest = token.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
