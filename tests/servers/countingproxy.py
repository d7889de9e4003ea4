"""A small HTTP forwarding proxy for tests: counts requests and body bytes, can demand a token and throttle.

It sits between a client and a real test server (moto, olah) on 127.0.0.1 so tests can assert what was
fetched (complete files are not fetched again after a kill), slow transfers down enough to kill a filler
mid-file, answer a request with headers that never end (a byte at a time), and stand in for the Hub's token
check (olah serves offline without authentication). The Host header is forwarded unchanged, so S3 signatures
stay valid.
"""

from __future__ import annotations

import http.client
import io
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from tests.servers.quiet import QuietThreadingHTTPServer

HOP_HEADERS = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
}


@dataclass
class Record:
    """One proxied request."""

    method: str
    path: str
    status: int
    body_bytes: int
    range: str | None


class CountingProxy:
    """Forward every request to ``upstream`` (``host:port``); start() returns the proxy's base URL."""

    def __init__(self, upstream: str, token: str | None = None, throttle_bytes_per_second: float | None = None) -> None:
        self.upstream = upstream
        self.token = token
        self.throttle = throttle_bytes_per_second
        self.records: list[Record] = []
        self.breaks: list[tuple[str, int]] = []
        self.drips: list[str] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._server: QuietThreadingHTTPServer | None = None

    def start(self) -> str:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                proxy._begin()
                try:
                    self._forward_counted()
                finally:
                    proxy._end()

            def _forward_counted(self) -> None:
                if proxy._take_drip(self.command, self.path):
                    self._drip()
                    return
                if proxy.token is not None and self.headers.get("Authorization") != f"Bearer {proxy.token}":
                    body = b'{"error":"Invalid credentials in Authorization header"}'
                    self.send_response(401)
                    self.send_header("X-Error-Message", "Invalid credentials in Authorization header")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(body)
                    proxy._record(self.command, self.path, 401, 0, self.headers.get("Range"))
                    return
                length = int(self.headers.get("Content-Length") or 0)
                payload = self.rfile.read(length) if length else None
                connection = http.client.HTTPConnection(proxy.upstream, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                connection.request(self.command, self.path, body=payload, headers=headers)
                response = connection.getresponse()
                upstream_length = response.getheader("Content-Length")
                data = None if upstream_length is not None or self.command == "HEAD" else response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in HOP_HEADERS and key.lower() != "content-length":
                        self.send_header(key, value)
                size = int(upstream_length) if upstream_length is not None else len(data or b"")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                sent = 0
                if self.command != "HEAD":
                    # A chunked upstream body (olah streams files so) was read whole to give it a length; it is
                    # sent on in the same chunks as a streamed one, so throttling and cuts apply to both.
                    body = io.BytesIO(data) if data is not None else response
                    started = time.monotonic()
                    cut = proxy._take_break(self.command, self.path)
                    try:
                        while chunk := body.read(64 * 1024):
                            if cut is not None and sent + len(chunk) > cut:
                                self.wfile.write(chunk[: cut - sent])
                                sent = cut
                                self.close_connection = True
                                self.wfile.flush()
                                self.connection.shutdown(2)
                                break
                            self.wfile.write(chunk)
                            sent += len(chunk)
                            if proxy.throttle:
                                ahead = sent / proxy.throttle - (time.monotonic() - started)
                                if ahead > 0:
                                    time.sleep(ahead)
                    except (BrokenPipeError, ConnectionResetError):
                        self.close_connection = True
                connection.close()
                proxy._record(self.command, self.path, response.status, sent, self.headers.get("Range"))

            def _drip(self) -> None:
                """A status line, then one header a byte every 0.1 s until the client goes or the proxy stops."""
                self.close_connection = True
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                    self.wfile.flush()
                    while not proxy._stopping.wait(0.1):
                        self.wfile.write(b"a")
                        self.wfile.flush()
                except OSError:
                    pass
                proxy._record(self.command, self.path, 0, 0, self.headers.get("Range"))

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self._server = QuietThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _record(self, method: str, path: str, status: int, sent: int, range_header: str | None) -> None:
        with self._lock:
            self.records.append(Record(method, path, status, sent, range_header))

    def _begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def _end(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._idle.notify_all()

    def settle(self, timeout: float = 30) -> None:
        """Wait until every request has been recorded.

        A request is recorded once its last body byte is written, which can be after the client already has
        every byte (and after a killed client's connection broke): counts read before that would miss it, or
        count a killed run's request as the next run's.
        """
        with self._idle:
            if not self._idle.wait_for(lambda: self._in_flight == 0, timeout):
                raise AssertionError(f"{self._in_flight} proxied request(s) still in flight after {timeout}s")

    def break_once(self, contains: str, after_bytes: int) -> None:
        """Cut the next GET whose path contains ``contains`` after ``after_bytes`` body bytes (a dropped connection)."""
        with self._lock:
            self.breaks.append((contains, after_bytes))

    def drip_once(self, contains: str) -> None:
        """Answer the next GET whose path contains ``contains`` with headers sent a byte every 0.1 s, never ending
        (recorded with status 0): every read of the client gets a byte well within its timeout."""
        with self._lock:
            self.drips.append(contains)

    def _take_drip(self, method: str, path: str) -> bool:
        with self._lock:
            for i, contains in enumerate(self.drips):
                if method == "GET" and contains in path:
                    del self.drips[i]
                    return True
        return False

    def _take_break(self, method: str, path: str) -> int | None:
        with self._lock:
            for i, (contains, after) in enumerate(self.breaks):
                if method == "GET" and contains in path:
                    del self.breaks[i]
                    return after
        return None

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def reset(self) -> None:
        self.settle()
        with self._lock:
            self.records.clear()

    def gets(self, contains: str = "") -> list[Record]:
        """The GET requests whose path contains ``contains`` (once every request in flight is recorded)."""
        self.settle()
        with self._lock:
            return [r for r in self.records if r.method == "GET" and contains in r.path]

    def body_bytes(self, contains: str = "") -> int:
        """Response body bytes sent for GETs whose path contains ``contains``."""
        return sum(r.body_bytes for r in self.gets(contains))
