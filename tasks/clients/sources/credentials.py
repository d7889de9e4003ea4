"""Credentials for the sources, read from the environment (a download Job gets them as env from Secrets)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Credentials:
    """What the downloader may use to reach a source. Secret fields never appear in ``repr``.

    Environment variables (the names the Hugging Face and AWS clients use, plus llmaz's token name):
    ``HF_TOKEN`` (or ``HUGGING_FACE_HUB_TOKEN``), ``HF_ENDPOINT``; ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``),
    ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``); and Kthena's downloader names (seed 003), used when the
    AWS name is unset: ``ENDPOINT`` (the S3 endpoint), ``ACCESS_KEY``, ``SECRET_KEY``.
    """

    hf_token: str | None = field(default=None, repr=False)
    hf_endpoint: str | None = None
    aws_access_key_id: str | None = field(default=None, repr=False)
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    aws_endpoint_url: str | None = None
    aws_region: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        """Read the credentials from ``env`` (default: the process environment); empty values count as unset."""
        env = os.environ if env is None else env

        def get(*names: str) -> str | None:
            for name in names:
                value = (env.get(name) or "").strip()
                if value:
                    return value
            return None

        return cls(
            hf_token=get("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"),
            hf_endpoint=get("HF_ENDPOINT"),
            aws_access_key_id=get("AWS_ACCESS_KEY_ID", "ACCESS_KEY"),
            aws_secret_access_key=get("AWS_SECRET_ACCESS_KEY", "SECRET_KEY"),
            aws_session_token=get("AWS_SESSION_TOKEN"),
            aws_endpoint_url=get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "ENDPOINT"),
            aws_region=get("AWS_REGION", "AWS_DEFAULT_REGION"),
        )

    @property
    def secrets(self) -> tuple[str | None, ...]:
        """The secret values, for :func:`tasks.clients.sources.errors.redact`."""
        return (self.hf_token, self.aws_secret_access_key, self.aws_session_token, self.aws_access_key_id)
