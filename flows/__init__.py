"""Prefect flows, one file per lifecycle, and the ``modelplane`` command line."""

import logging


class _QuietTemporaryServer(logging.Filter):
    """Drop Prefect's "Starting temporary server on ... See https://docs.prefect.io/..." and "Stopping
    temporary server" lines: they interleave with every command's output, and the stop line is logged by an
    ``atexit`` hook after the console stream it was bound to may be closed (a ``--- Logging error ---``
    traceback at the end of a test session)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Starting temporary server", "Stopping temporary server"))


def _quiet_temporary_server() -> None:
    """Install the filter once on the ``prefect`` logger (Prefect's temporary server logs there directly)."""
    logger = logging.getLogger("prefect")
    if not any(isinstance(f, _QuietTemporaryServer) for f in logger.filters):
        logger.addFilter(_QuietTemporaryServer())


_quiet_temporary_server()
