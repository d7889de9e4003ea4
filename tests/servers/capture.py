"""A captured listener: a plain socket server on 127.0.0.1 that records whatever connects to it.

Nothing is served (no HTTP): every connection is accepted, what the client sends in its first seconds is
kept, and the socket is closed. A test points something that must never be contacted at it (an endpoint
named in a source URI) and asserts afterwards that :attr:`CapturedListener.connections` is empty and that
no byte of a credential reached it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CapturedListener:
    """Accepts and records connections on ``url`` until :meth:`close`."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="captured-listener", daemon=True)
        self._thread.start()

    @property
    def received(self) -> bytes:
        """Everything every connection sent."""
        return b"".join(self.connections)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:  # timeout: look at the stop flag again
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                try:
                    while chunk := conn.recv(65536):
                        data += chunk
                        if b"\r\n\r\n" in data:
                            break
                except OSError:
                    pass
                self.connections.append(data)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()


@contextmanager
def captured_listener() -> Iterator[CapturedListener]:
    """A :class:`CapturedListener` for the block, closed after it."""
    listener = CapturedListener()
    try:
        yield listener
    finally:
        listener.close()
