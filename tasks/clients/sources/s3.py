"""S3 (and S3-compatible stores) through botocore: paginated listing, ranged concurrent GETs pinned to the ETag."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from typing import Any

import botocore.session
from botocore import UNSIGNED
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError
from botocore.loaders import Loader

from engine.caches.sources import ModelSource, same_endpoint
from engine.redaction import redact
from tasks.clients.sources.credentials import Credentials
from tasks.clients.sources.deadline import refuse_after_deadline
from tasks.clients.sources.errors import (
    AuthenticationFailed,
    ChecksumMismatch,
    DownloadError,
    EndpointNotAllowed,
    SourceNotFound,
    TransferFailed,
)
from tasks.clients.sources.listing import Listing, RemoteFile

AUTH_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken", "403"}
)
NOT_FOUND_CODES = frozenset({"NoSuchBucket", "NoSuchKey", "404"})
_MD5 = re.compile(r"^[0-9a-f]{32}$")
CHUNK = 1024 * 1024


@functools.cache
def service_data() -> Loader:
    """botocore's loader of its packaged service data (the S3 model, endpoint rules, partitions), one per process.

    Every botocore session builds a loader of its own and parses those JSON files again: about 70 ms of CPU per
    client, and warm-caches makes two clients per S3 cache (sizing, then the fill). Sharing the loader between
    sessions is botocore's documented way to load them once (boto/botocore#3078); each client still gets a
    session of its own, so credentials and configuration are resolved per client as before.

    Returns:
        The loader, made on the first call.
    """
    return botocore.session.get_session().get_component("data_loader")


def s3_client(**kwargs: Any) -> BaseClient:
    """An S3 client on a new botocore session that shares :func:`service_data`.

    Args:
        **kwargs: ``create_client``'s options (endpoint, credentials, region, config).

    Returns:
        The client.
    """
    session = botocore.session.get_session()
    session.register_component("data_loader", service_data())
    return session.create_client("s3", **kwargs)


class StreamBroken(TransferFailed):
    """A ranged GET ended early (connection reset, timeout): the part is retried from where it stopped."""

    transient = True


class S3Backend:
    """Lists and fetches the objects under ``s3://bucket/prefix``."""

    def __init__(self, source: ModelSource, credentials: Credentials, max_connections: int = 16) -> None:
        self.source = source
        self.credentials = credentials
        _refuse_foreign_endpoint(source, credentials)
        endpoint = source.endpoint or credentials.aws_endpoint_url
        if endpoint and not endpoint.startswith(("http://", "https://")):
            endpoint = "https://" + endpoint
        anonymous = _anonymous(source, credentials)
        self.client = s3_client(
            endpoint_url=endpoint,
            region_name=credentials.aws_region or ("us-east-1" if endpoint else None),
            aws_access_key_id=None if anonymous else credentials.aws_access_key_id,
            aws_secret_access_key=None if anonymous else credentials.aws_secret_access_key,
            aws_session_token=None if anonymous else credentials.aws_session_token,
            config=Config(
                max_pool_connections=max_connections,
                retries={"max_attempts": 5, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
                s3={"addressing_style": "path"} if endpoint else None,
                signature_version=UNSIGNED if anonymous else None,
            ),
        )
        self.client.meta.events.register("before-send", refuse_after_deadline)  # a fill's deadline ends its retries

    # ------------------------------------------------------------------ listing

    def list(self) -> Listing:
        """Every object under the prefix (a key equal to the prefix is a single-file source)."""
        bucket, prefix = self.source.bucket or "", self.source.prefix
        where = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        files: list[RemoteFile] = []
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            list_prefix = f"{prefix}/" if prefix else ""
            for page in paginator.paginate(Bucket=bucket, Prefix=list_prefix):
                for obj in page.get("Contents", []) or []:
                    key = obj["Key"]
                    if key.endswith("/") and obj.get("Size", 0) == 0:
                        continue  # a "directory" marker object
                    files.append(self._remote(key[len(list_prefix) :], key, int(obj["Size"]), obj.get("ETag")))
            if not files and prefix:
                single = self._head(bucket, prefix)  # s3://bucket/path/model.gguf: one object
                if single is not None:
                    name = prefix.rsplit("/", 1)[-1]
                    return Listing(
                        None, (self._remote(name, prefix, int(single["ContentLength"]), single.get("ETag")),)
                    )
        except ClientError as exc:
            raise self.translate(exc, where) from None
        except (BotoCoreError, EndpointConnectionError) as exc:
            raise TransferFailed(self._redact(f"cannot list {where}: {exc}")) from None
        except (KeyError, TypeError, ValueError) as exc:  # an object without a key, a size that is no size
            raise TransferFailed(self._redact(f"the listing of {where} is malformed: {exc!r}")) from None
        if not files:
            raise SourceNotFound(f"no objects under {where}: check the bucket and prefix")
        return Listing(None, tuple(files))

    def _head(self, bucket: str, key: str) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = self.client.head_object(Bucket=bucket, Key=key)
            return head
        except ClientError as exc:
            code = _code(exc)
            if code in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    @staticmethod
    def _remote(path: str, key: str, size: int, etag: str | None) -> RemoteFile:
        clean = (etag or "").strip('"') or None
        md5 = clean.lower() if clean and _MD5.match(clean.lower()) else None  # stores differ in the case of hex
        return RemoteFile(path=path, size=size, etag=clean, remote=key, md5=md5)

    # ------------------------------------------------------------------ fetching

    def fetch_range(
        self, remote: RemoteFile, start: int, end: int, write: Callable[[int, bytes], None], stop: threading.Event
    ) -> None:
        """GET bytes ``start..end-1`` of the object, pinned to its ETag, passing each chunk to ``write(offset, data)``."""
        if end <= start:
            return
        kwargs: dict[str, Any] = {
            "Bucket": self.source.bucket,
            "Key": remote.remote,
            "Range": f"bytes={start}-{end - 1}",
        }
        if remote.etag:
            kwargs["IfMatch"] = f'"{remote.etag}"'
        where = f"s3://{self.source.bucket}/{remote.remote}"
        try:
            body = self.client.get_object(**kwargs)["Body"]
            offset = start
            try:
                for chunk in body.iter_chunks(CHUNK):
                    if stop.is_set():
                        return
                    if offset + len(chunk) > end:  # never into the next part's bytes, nor past the object
                        raise ChecksumMismatch(
                            f"{remote.path}: {where} sent more than the {end - start} bytes of the range "
                            f"{start}-{end - 1} asked for; the part was not written, run the fill again"
                        )
                    write(offset, chunk)
                    offset += len(chunk)
            finally:
                body.close()
        except ClientError as exc:
            if _code(exc) in ("PreconditionFailed", "412"):
                raise TransferFailed(
                    f"{where} changed while it was being downloaded (ETag no longer {remote.etag}); run again"
                ) from None
            raise self.translate(exc, where) from None
        except (BotoCoreError, EndpointConnectionError, OSError) as exc:
            raise StreamBroken(self._redact(f"download of {where} broke off: {exc}")) from None
        if offset != end:
            raise StreamBroken(f"download of {where} returned {offset - start} bytes for a {end - start}-byte range")

    # ------------------------------------------------------------------ errors

    def translate(self, exc: ClientError, where: str) -> DownloadError:
        """A boto error as a typed download error with a message that carries no secret."""
        code = _code(exc)
        message = str(exc.response.get("Error", {}).get("Message") or code)
        if code in AUTH_CODES:
            error: DownloadError = AuthenticationFailed(
                f"S3 rejected the credentials for {where} ({code}): {message}; "
                "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or ACCESS_KEY/SECRET_KEY)"
            )
        elif code in NOT_FOUND_CODES:
            error = SourceNotFound(f"{where} does not exist ({code})")
        else:
            error = TransferFailed(f"S3 error for {where} ({code}): {message}")
        return error.redacted(self.credentials.secrets)

    def _redact(self, text: str) -> str:
        return redact(text, self.credentials.secrets)


def _refuse_foreign_endpoint(source: ModelSource, credentials: Credentials) -> None:
    """:class:`EndpointNotAllowed` when the source URI's ``?endpoint=`` would take configured credentials to
    another server than the configured endpoint (the same rule as :func:`engine.caches.fill.endpoint_refusal`,
    checked again here, where requests are signed, whatever started the fill)."""
    keys = (credentials.aws_access_key_id, credentials.aws_secret_access_key, credentials.aws_session_token)
    if source.endpoint is None or not any(keys) or same_endpoint(source.endpoint, credentials.aws_endpoint_url):
        return
    configured = credentials.aws_endpoint_url or "none"
    raise EndpointNotAllowed(
        f"sourceUri: endpoint {source.endpoint} is not where the S3 credentials in use may be sent "
        f"(the configured endpoint is {configured}); remove ?endpoint= from the URI or make it equal the configured endpoint"
    )


def _anonymous(source: ModelSource, credentials: Credentials) -> bool:
    """Whether requests go unsigned: the source URI names an endpoint other than the configured one (with
    explicit keys :func:`_refuse_foreign_endpoint` has refused it already). Without this botocore would sign
    them with whatever its default chain finds (a shared credentials file, ``AWS_PROFILE``, a pod's web
    identity, the instance metadata service), so a ModelCache's URI could send a pod's own AWS credentials
    to a server it names."""
    return source.endpoint is not None and not same_endpoint(source.endpoint, credentials.aws_endpoint_url)


def _code(exc: ClientError) -> str:
    return str(
        exc.response.get("Error", {}).get("Code")
        or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        or ""
    )
