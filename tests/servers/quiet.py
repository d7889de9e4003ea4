"""The HTTP server class of the in-process test servers: a client that hangs up is not the server's error."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietThreadingHTTPServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` that lets a client go mid-response (Prometheus ending a scrape at its timeout,
    a closed watch, a killed subprocess) without a word.

    The standard server prints each such ``BrokenPipeError`` with its traceback to whatever ``sys.stderr`` is
    at that moment. The test servers run as threads of the pytest process, so inside a command run in-process
    (typer's ``CliRunner`` swaps ``sys.stderr``) the traceback landed in that command's output, and the fuzz
    harness, rightly, failed the command for it. Any other error still prints as before."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)
