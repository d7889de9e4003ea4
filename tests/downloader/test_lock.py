"""The cache lock: one filler at a time, heartbeat keeps it, stale locks of dead fillers are broken."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from tasks.downloader import CacheInUse, CacheLock
from tasks.downloader.lock import LOCK_NAME


def foreign_lock(dest: pathlib.Path, age: float) -> None:
    path = dest / LOCK_NAME
    path.write_text(json.dumps({"owner": "some-other-pod:1:abc", "since": time.time() - age}))
    os.utime(path, (time.time() - age, time.time() - age))


def test_second_filler_waits_until_the_first_releases(tmp_path: pathlib.Path) -> None:
    first = CacheLock(tmp_path, heartbeat=0.1, stale_after=1.0)
    first.acquire()
    waits: list[str] = []
    acquired = threading.Event()

    def second() -> None:
        with CacheLock(tmp_path, heartbeat=0.1, stale_after=1.0, poll=0.05, on_wait=waits.append):
            acquired.set()

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(1.5)  # longer than stale_after: only the heartbeat keeps the first lock alive
    assert not acquired.is_set() and waits == [first.token]
    first.release()
    thread.join(timeout=5)
    assert acquired.is_set()
    assert not (tmp_path / LOCK_NAME).exists()


def test_timeout_raises_cache_in_use(tmp_path: pathlib.Path) -> None:
    with CacheLock(tmp_path, heartbeat=0.1, stale_after=1.0):
        with pytest.raises(CacheInUse, match="holds the cache lock") as info:
            CacheLock(tmp_path, timeout=0.3, poll=0.05).acquire()
    assert info.value.reason == "CacheLocked"


def test_stale_lock_without_heartbeat_is_broken(tmp_path: pathlib.Path) -> None:
    foreign_lock(tmp_path, age=5)
    lock = CacheLock(tmp_path, heartbeat=0.1, stale_after=1.0, timeout=2)
    lock.acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["owner"] == lock.token
    lock.release()


def test_fresh_foreign_lock_is_respected(tmp_path: pathlib.Path) -> None:
    foreign_lock(tmp_path, age=0)
    with pytest.raises(CacheInUse):
        CacheLock(tmp_path, heartbeat=0.1, stale_after=1.0, timeout=0.3, poll=0.05).acquire()


def test_lock_of_a_dead_local_process_is_broken_at_once(tmp_path: pathlib.Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    import socket

    (tmp_path / LOCK_NAME).write_text(json.dumps({"owner": f"{socket.gethostname()}:{process.pid}:x"}))
    started = time.monotonic()
    with CacheLock(tmp_path, stale_after=60, timeout=5):
        assert time.monotonic() - started < 2


def test_a_lock_taken_over_is_reported_lost(tmp_path: pathlib.Path) -> None:
    lock = CacheLock(tmp_path, heartbeat=0.05, stale_after=1.0)
    lock.acquire()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"owner": "thief:1:x"}))
    assert lock.lost.wait(2)
    lock.release()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["owner"] == "thief:1:x"  # not ours: left alone
