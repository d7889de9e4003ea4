"""A fill's deadline (tasks/clients/sources/deadline.py): a read blocked on a server that sends its headers a byte at a
time ends when the deadline passes, in every HTTP client the downloader's transports use, and no socket outside the
fill is touched."""

from __future__ import annotations

import pathlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from engine.caches.fill import fill_deadline_s
from tasks.clients.sources.deadline import FillDeadline, covering
from tasks.downloader import CacheLock, DeadlineExceeded, fill_cache


class DripServer:
    """Answers every request with a status line, then a header a byte every 0.1 s, without end: every read of the
    client gets a byte long before any read timeout, so only the deadline ends the request. ``echo`` connections
    (the first bytes ``echo``) send back what they get instead."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/file"
        self.stopping = threading.Event()
        self.dripping = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                first = conn.recv(65536)
                if first.startswith(b"echo"):
                    conn.sendall(first)
                    while data := conn.recv(65536):
                        conn.sendall(data)
                    return
                self.dripping += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                while not self.stopping.wait(0.1):
                    conn.sendall(b"a")
            except OSError:
                return

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()


@pytest.fixture
def drip() -> Iterator[DripServer]:
    server = DripServer()
    yield server
    server.stop()


def _requests(url: str) -> Callable[[], object]:
    import requests

    session = requests.Session()
    session.trust_env = False
    return lambda: session.get(url, timeout=30)


def _botocore(url: str) -> Callable[[], object]:
    """botocore's own transport (urllib3), as the S3 client sends a request."""
    from botocore.awsrequest import AWSRequest
    from botocore.httpsession import URLLib3Session

    session = URLLib3Session(timeout=30)
    return lambda: session.send(AWSRequest("GET", url).prepare())


def _huggingface(url: str) -> Callable[[], object]:
    """huggingface_hub's shared client (httpx), as the Hugging Face transport lists and fetches."""
    from huggingface_hub.utils import get_session

    return lambda: get_session().get(url, timeout=30)


def _in_thread(call: Callable[[], object], deadline: FillDeadline) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` under ``deadline`` on a thread of its own; what it returned or raised lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        with covering(deadline):
            try:
                outcome.append(call())
            except Exception as exc:  # noqa: BLE001 - whatever the client raises is the outcome
                outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("client", [_requests, _botocore, _huggingface], ids=["requests", "botocore", "huggingface"])
def test_a_read_blocked_on_a_header_drip_ends_when_the_deadline_passes(
    drip: DripServer, client: Callable[[str], Callable[[], object]]
) -> None:
    """Before, nothing ended such a read: each byte arrives within the read timeout. Now the deadline's watcher shuts
    the fill's sockets down (the read ends at once), and a connection tried after it is refused."""
    call = client(drip.url)
    with FillDeadline(1.5) as deadline:
        started = time.monotonic()
        thread, outcome = _in_thread(call, deadline)
        thread.join(timeout=10)
        ended = time.monotonic() - started
        assert not thread.is_alive(), "the read is still blocked after the deadline"
        assert 1.0 < ended < 6.0, ended
        assert drip.dripping == 1 and deadline.expired.is_set()

        thread, outcome = _in_thread(call, deadline)  # a retry after the deadline: refused before it connects
        thread.join(timeout=10)
        assert not thread.is_alive() and drip.dripping == 1
        assert "did not complete within its deadline of 1.5s" in str(outcome[0]), outcome


def test_sockets_outside_the_fill_are_never_shut(drip: DripServer) -> None:
    """Only the sockets a thread under the deadline connected are shut, and one only while its descriptor is still
    that socket: a socket of another thread, and one that took over the descriptor of a closed socket of the
    fill, keep working past the deadline."""
    address = drip.listener.getsockname()
    with FillDeadline(1.0) as deadline:
        with covering(deadline):
            fills = socket.create_connection(address)
        noted = deadline._noted.pop(fills.fileno())
        fills.close()
        other = socket.create_connection(address)  # outside the fill
        deadline._noted[other.fileno()] = noted  # as if it took over the descriptor of the fill's closed socket
        elsewhere: list[socket.socket] = []
        helper = threading.Thread(target=lambda: elsewhere.append(socket.create_connection(address)))
        helper.start()
        helper.join()
        time.sleep(2.0)  # past the deadline, and a sweep after it
        assert deadline.expired.is_set()
        for sock in (other, *elsewhere):
            with sock:
                sock.sendall(b"echo still open")
                assert sock.recv(100) == b"echo still open"


def test_a_budget_given_by_the_source_size_is_set_once_the_size_is_known() -> None:
    deadline = FillDeadline(lambda size: 60 + size / 1000)
    assert deadline.seconds == 60 and not deadline.passed()
    deadline.size_known(3_600_000)
    assert deadline.seconds == 3660 and 3650 < deadline.remaining() <= 3660
    fixed = FillDeadline(5)
    fixed.size_known(10**12)
    assert fixed.seconds == 5
    as_a_job = FillDeadline(fill_deadline_s)  # fill-cache's default: what a fill Job of that size is given
    assert as_a_job.seconds == 3600
    as_a_job.size_known(16 * 1024**3)
    assert as_a_job.seconds == 16 * 1024


def test_the_wait_for_another_filler_ends_at_the_deadline(tmp_path: pathlib.Path) -> None:
    """A live filler holds the lock: the fill waits for it only until its deadline, and says it ran out of time."""
    with CacheLock(tmp_path, heartbeat=0.1, stale_after=5.0):
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="did not complete within its deadline of 1s") as raised:
            fill_cache("s3://bucket/model", tmp_path, deadline=FillDeadline(1))
        assert time.monotonic() - started < 5
    assert raised.value.reason == "DeadlineExceeded" and raised.value.retryable
