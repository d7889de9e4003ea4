"""The credentials a Prometheus URL can carry (``https://user:password@host``): the address as messages show it,
without them, and the secrets they make, which the client redacts from whatever a server says back."""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit, urlunsplit


def without_userinfo(url: str) -> str:
    """The URL without ``user:password@``, as messages show it.

    Args:
        url: The Prometheus base URL as configured.

    Returns:
        The URL without its credentials (itself when it has none).
    """
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets the URL's ``user:password@`` carries: the password (as written, and decoded), and the Basic
    credentials requests sends of it (``base64(user:password)``), which a server may echo in its error.

    Args:
        url: The Prometheus base URL as configured.

    Returns:
        The secrets to redact; none without a password.
    """
    parts = urlsplit(url)
    if not parts.password:
        return ()
    user, password = unquote(parts.username or ""), unquote(parts.password)
    return parts.password, password, base64.b64encode(f"{user}:{password}".encode()).decode()
