"""Keeping credentials out of what Modelplane writes: messages, log lines, statuses, artifacts.

:func:`redact` is the one helper every output that might echo a credential passes through (the downloader's
errors, the Prometheus client's). It never rewrites ordinary text, and never gives a short secret away:

* A secret that is safe to search for (:func:`searchable`: at least 12 characters, or at least 8 that are not
  all letters) is replaced by ``***`` wherever it occurs, as before: such a string does not occur by chance in a
  bucket name, a path or a sentence.
* A shorter or letters-only secret (``demo``, ``password``, ``minioadmin``) does occur by chance: replacing it
  everywhere rewrote ordinary text (``s3://***-models/...`` for the secret ``demo``) and, by marking where it
  was, told the reader the secret. It is never used for substring replacement. Instead, an output holding it
  as a whole token (not inside a longer word: bounded by anything but a letter, digit, ``_`` or ``-``) is
  withheld as a whole (:data:`WITHHELD`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MASK", "WITHHELD", "redact", "searchable", "without_uri_credentials"]

MASK = "***"
"""What a searchable secret is replaced by."""
WITHHELD = "<message withheld: it contained a credential>"
"""What an output that holds a short or letters-only secret as a whole token becomes."""

SEARCHABLE_LENGTH = 12
"""A secret this long is searched for and replaced, whatever its characters."""
SEARCHABLE_MIXED_LENGTH = 8
"""A secret this long is searched for when it is not made of letters only (digits or symbols in it)."""

_WORD = "A-Za-z0-9_-"
"""The characters a token is made of: a short secret inside a longer run of them is another word."""

_USERINFO = re.compile(r"[^\s/?#@'\"]+:[^\s/?#@'\"]*@")
"""A URI's ``user:password@``: a password, whatever the scheme, ends at the ``@`` before the host."""
_SECRET_QUERY = re.compile(
    r"(?i)(?<=[?&])([^=&\s'\"#]*(?:signature|credential|token|secret|password|passwd|sig|key)[^=&\s'\"#]*=)[^&\s'\"#]*"
)
"""A query item whose key names a credential (a presigned URL's ``X-Amz-Signature``, ``X-Amz-Credential``,
``X-Amz-Security-Token``; ``sig``, ``token``, ``access_key``, ...)."""


def searchable(secret: str) -> bool:
    """Whether ``secret`` is long and varied enough to be searched for and replaced (see module docs)."""
    return len(secret) >= SEARCHABLE_LENGTH or (len(secret) >= SEARCHABLE_MIXED_LENGTH and not secret.isalpha())


def _as_token(secret: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![{_WORD}]){re.escape(secret)}(?![{_WORD}])")


def _spellings(secret: str) -> set[str]:
    """The ways an output can spell ``secret``: as is, escaped as Python shows it in a ``repr`` of the text or
    of its bytes (an HTTP library's ``Illegal header value b'Bearer ...\\n...'``), and, for a secret of several
    lines, each line alone."""
    spellings = {secret, repr(secret)[1:-1], repr(secret.encode())[2:-1], secret.encode("unicode_escape").decode()}
    lines = [line for line in secret.splitlines() if line.strip()]
    if len(lines) > 1:
        spellings.update(lines)
    return {spelling for spelling in spellings if spelling.strip()}


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every searchable secret replaced by :data:`MASK`; :data:`WITHHELD` instead of the whole of
    ``text`` when it holds any other secret as a whole token. Empty secrets are ignored. Every spelling of a
    secret counts (:func:`_spellings`)."""
    values = sorted({spelling for secret in secrets if secret and secret.strip() for spelling in _spellings(secret)})
    if any(not searchable(secret) and _as_token(secret).search(text) for secret in values):
        return WITHHELD
    for secret in sorted((s for s in values if searchable(s)), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def without_uri_credentials(text: str) -> str:
    """``text`` with the credentials a URI can carry replaced by :data:`MASK`: the ``user:password`` before a
    host's ``@`` and the values of query items named like credentials (``?X-Amz-Signature=***``).

    Model sources are written by people, who sometimes paste a URI with its credentials in it; a message that
    quotes such a URI back (an invalid bucket, an unknown query key) would put them in a status condition, an
    Event and the log. Those secrets are not known beforehand, so :func:`redact` cannot find them: this finds
    them by where a URI keeps them. A ``@`` without a ``:`` before it is left alone (``hf://gpt2@main`` is a
    revision, not a user).
    """
    return _SECRET_QUERY.sub(rf"\1{MASK}", _USERINFO.sub(f"{MASK}@", text))
