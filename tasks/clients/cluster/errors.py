"""Typed errors every cluster backend raises, so flows can decide without knowing the backend."""

from __future__ import annotations


class ClusterError(Exception):
    """Base class for all cluster-interface failures."""

    status: int = 500

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or type(self).__name__


class NotFound(ClusterError):
    """The object (or its kind) does not exist."""

    status = 404


class Conflict(ClusterError):
    """Stale resourceVersion on a write, or create of an object that already exists."""

    status = 409


class Invalid(ClusterError):
    """The object was rejected by validation (HTTP 422); ``field`` names the offending path."""

    status = 422

    def __init__(self, message: str, *, field: str | None = None, reason: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.field = field

    @classmethod
    def value(cls, problem: tuple[str, str]) -> Invalid:
        """The API server's refusal of one field, ``<field>: Invalid value: <why>``, from ``(field, why)``."""
        field, why = problem
        return cls(f"{field}: Invalid value: {why}", field=field)


class Forbidden(ClusterError):
    """The caller may not perform this operation (HTTP 401/403)."""

    status = 403


class Unavailable(ClusterError):
    """The API server could not be reached or answered 5xx/429; the call may be retried."""

    status = 503
