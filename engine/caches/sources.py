"""One model of a model source, parsed from every form the seeds use (pure: no I/O).

Forms accepted:

- AIM ``ModelCache.spec.sourceUri`` and template ``status.modelSources``: ``hf://org/name[@revision]``
  (KServe's ``hf://org/name:revision`` too) and ``s3://bucket/prefix``;
- Kthena ``ModelBackend.modelURI`` (``hf://``, ``s3://``, ``pvc://claim/path``), ``cacheURI``
  (``hostpath://``, ``pvc://``) and ``LoraAdapter.artifactURL`` (``hf://``, ``s3://``, ``pvc://``);
- llmaz OpenModel ``source.modelHub`` (Huggingface or ModelScope hub, modelID, filename, revision, allow and
  ignore patterns) and ``source.uri`` (``oss://bucket.endpoint/path``, ``s3://``, ``gcs://``, ``host://path``,
  ``ollama://name``);
- ``https://huggingface.co/org/name[/tree/REV | /resolve/REV/FILE | /blob/REV/FILE]`` (normalised to ``hf://``).

Every source has one canonical ``uri`` that round-trips through :func:`parse_source`; hub patterns and a
single filename are carried as a query (``hf://org/name@rev?allow=*.json&ignore=*.bin`` or ``?filename=x``),
patterns sorted and de-duplicated so that equal sources have equal URIs (and so equal cache identities).
Rejections raise :class:`SourceError` (a ``ValueError``) whose message names the problem and, for
resource fields, the field path (``spec.source.modelHub.filename: ...``). The source fields of each kind
(llmaz ``spec.source``, Kthena ``modelURI``/``cacheURI``/``artifactURL``) are read by
:mod:`engine.caches.source_fields`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.api.identity import name_error
from engine.redaction import without_uri_credentials

SCHEMES: tuple[str, ...] = ("hf", "modelscope", "s3", "pvc", "hostpath", "oss", "gcs", "host", "ollama")
"""Every scheme a source can have."""
DOWNLOADABLE_SCHEMES: frozenset[str] = frozenset({"hf", "s3"})
"""Schemes Modelplane's downloader fetches into a cache."""
MOUNTED_SCHEMES: frozenset[str] = frozenset({"pvc", "hostpath", "host"})
"""Schemes whose weights are already on a volume: mounted directly, never copied."""
HUB_SCHEMES: frozenset[str] = frozenset({"hf", "modelscope"})
OBJECT_STORE_SCHEMES: frozenset[str] = frozenset({"s3", "oss", "gcs"})

DEFAULT_REVISION = "main"

HF_WEB_PREFIXES: tuple[str, ...] = ("https://huggingface.co/", "http://huggingface.co/", "https://www.huggingface.co/")

# Hugging Face repo ids: one or two parts of word characters, '-' and '.', each at most 96 long.
_HUB_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,95}$")
# Bucket names as S3-compatible stores accept them: 3-255 letters, digits, '.', '-' and '_', starting and
# ending with a letter or digit. That is S3's legacy (us-east-1) rule, which Ceph RGW and other S3-compatible
# stores still accept and Kthena's own examples use (``s3://aios_models``); a name that is not DNS-compatible
# (``_``, upper case, over 63 characters) is reached with path-style addressing. The store itself rejects a
# name it does not take (as AWS does for new buckets outside us-east-1), with a clear SourceNotFound.
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{1,253}[A-Za-z0-9]$")
_IPV4 = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_OLLAMA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*(:[A-Za-z0-9_.\-]+)?$")
_ENDPOINT = re.compile(r"^(https?://)?[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[^\s?#]*)?$")
_SCHEME_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://(.*)$", re.DOTALL)
_WHITESPACE = re.compile(r"\s")

QUERY_KEYS: dict[str, frozenset[str]] = {
    "hf": frozenset({"allow", "ignore", "filename"}),
    "modelscope": frozenset({"allow", "ignore"}),
    "s3": frozenset({"endpoint"}),
}


class SourceError(ValueError):
    """A model source that cannot be used; ``field`` is the resource field path when known. The message never
    holds the credentials a pasted URI may carry (:func:`engine.redaction.without_uri_credentials`): it reaches
    status conditions, Events and logs."""

    def __init__(self, message: str, field: str | None = None) -> None:
        message = without_uri_credentials(message)
        self.field = field
        self.reason = message
        super().__init__(f"{field}: {message}" if field else message)


@dataclass(frozen=True)
class ModelSource:
    """Where a model's weights come from.

    Fields by scheme: hub (hf, modelscope) ``repo`` ``revision`` ``filename`` ``allow_patterns``
    ``ignore_patterns``; object stores (s3, oss, gcs) ``bucket`` ``prefix`` ``endpoint``; ``pvc`` ``claim``
    ``path``; ``hostpath``/``host`` ``path``; ``ollama`` ``name``. Build one with :func:`parse_source` or an
    adapter; the constructor normalises (revision default, pattern order) but does not validate.
    """

    scheme: str
    repo: str | None = None
    revision: str | None = None
    filename: str | None = None
    allow_patterns: tuple[str, ...] = field(default_factory=tuple)
    ignore_patterns: tuple[str, ...] = field(default_factory=tuple)
    bucket: str | None = None
    prefix: str = ""
    endpoint: str | None = None
    claim: str | None = None
    path: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.scheme in HUB_SCHEMES and not self.revision:
            object.__setattr__(self, "revision", DEFAULT_REVISION)
        object.__setattr__(self, "allow_patterns", _pattern_set(self.allow_patterns))
        object.__setattr__(self, "ignore_patterns", _pattern_set(self.ignore_patterns))
        object.__setattr__(self, "prefix", (self.prefix or "").strip("/"))

    @property
    def downloadable(self) -> bool:
        """True when Modelplane's downloader can fetch this source into a cache (hf, s3)."""
        return self.scheme in DOWNLOADABLE_SCHEMES

    @property
    def mounted(self) -> bool:
        """True when the weights already sit on a volume that consumers mount directly (pvc, hostpath, host)."""
        return self.scheme in MOUNTED_SCHEMES

    @property
    def uri(self) -> str:
        """The canonical URI: ``parse_source(source.uri) == source``."""
        return _render_uri(self)

    @property
    def display_name(self) -> str:
        """A short human name (repo, bucket/prefix, claim/path, ...) for logs and resource names."""
        if self.scheme in HUB_SCHEMES:
            return self.repo or ""
        if self.scheme in OBJECT_STORE_SCHEMES:
            return "/".join(part for part in (self.bucket, self.prefix) if part)
        if self.scheme == "pvc":
            return "/".join(part for part in (self.claim, (self.path or "").strip("/")) if part)
        if self.scheme == "ollama":
            return self.name or ""
        return self.path or ""

    def __str__(self) -> str:
        return self.uri


def _pattern_set(patterns: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(sorted({p for p in (patterns or ()) if p}))


# --------------------------------------------------------------------------------------------------- parsing


def parse_source(text: str) -> ModelSource:
    """Parse any source URI form the seeds use into a validated :class:`ModelSource`.

    Raises :class:`SourceError` (a ``ValueError``) naming the problem: empty text, whitespace, an unknown
    scheme, a malformed repo, bucket, claim or path, an unknown query key, a filename with patterns.
    """
    if not isinstance(text, str):
        raise SourceError(f"a model source must be a string, not {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise SourceError("a model source must not be empty")
    if _WHITESPACE.search(stripped):
        raise SourceError(f"model source {stripped!r} contains whitespace")
    for prefix in HF_WEB_PREFIXES:
        if stripped.startswith(prefix):
            return _parse_hf_web(stripped[len(prefix) :], stripped)
    match = _SCHEME_PREFIX.match(stripped)
    if not match:
        raise SourceError(
            f"model source {stripped!r} is not a URI of the form scheme://...; expected one of {_scheme_list()}"
        )
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme not in SCHEMES:
        raise SourceError(f"unknown scheme {scheme!r} in model source {stripped!r}; expected one of {_scheme_list()}")
    body, query = _split_query(rest, stripped)
    allowed_keys = QUERY_KEYS.get(scheme, frozenset())
    for key in query:
        if key not in allowed_keys:
            hint = (
                f"; {scheme}:// accepts {', '.join(sorted(allowed_keys))}"
                if allowed_keys
                else f"; {scheme}:// takes no query"
            )
            raise SourceError(f"unknown query key {key!r} in model source {stripped!r}{hint}")
    parser = _PARSERS[scheme]
    source = parser(body, query, stripped)
    validate_source(source)
    return source


def _scheme_list() -> str:
    return ", ".join(f"{s}://" for s in SCHEMES)


def _split_query(rest: str, text: str) -> tuple[str, dict[str, list[str]]]:
    if "#" in rest:
        raise SourceError(f"model source {text!r} must not contain a fragment ('#')")
    body, sep, raw_query = rest.partition("?")
    query: dict[str, list[str]] = {}
    if sep and raw_query:
        for item in raw_query.split("&"):
            if not item:
                continue
            key, eq, value = item.partition("=")
            if not eq:
                raise SourceError(f"query item {item!r} in model source {text!r} has no '='")
            query.setdefault(_unquote(key, text), []).append(_unquote(value, text))
    elif sep:
        raise SourceError(f"model source {text!r} has an empty query after '?'")
    return body, query


def _single(query: Mapping[str, list[str]], key: str, text: str) -> str | None:
    values = query.get(key)
    if not values:
        return None
    if len(values) > 1:
        raise SourceError(f"query key {key!r} given {len(values)} times in model source {text!r}")
    return values[0]


def _parse_hub(scheme: str, body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    repo, revision = _split_revision(body, text)
    return ModelSource(
        scheme=scheme,
        repo=repo,
        revision=revision,
        filename=_single(query, "filename", text),
        allow_patterns=tuple(query.get("allow", ())),
        ignore_patterns=tuple(query.get("ignore", ())),
    )


def _split_revision(body: str, text: str) -> tuple[str, str | None]:
    """``org/name@rev`` (Modelplane, canonical) or ``org/name:rev`` (KServe's storage initializer)."""
    if "@" in body:
        repo, _, revision = body.partition("@")
        if not revision:
            raise SourceError(f"empty revision after '@' in model source {text!r}")
        return repo, _unquote(revision, text)
    if ":" in body:
        repo, _, revision = body.partition(":")
        if not revision:
            raise SourceError(f"empty revision after ':' in model source {text!r}")
        return repo, _unquote(revision, text)
    return body, None


def _parse_hf(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    return _parse_hub("hf", body, query, text)


def _parse_modelscope(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    return _parse_hub("modelscope", body, query, text)


def _parse_hf_web(rest: str, text: str) -> ModelSource:
    """``huggingface.co/org/name[/tree/REV | /resolve/REV/FILE | /blob/REV/FILE]``."""
    body = rest.split("?", 1)[0].split("#", 1)[0].strip("/")
    parts = body.split("/")
    for marker in ("tree", "resolve", "blob"):
        if marker in parts[1:3]:
            at = parts.index(marker, 1)
            repo, tail = "/".join(parts[:at]), parts[at + 1 :]
            if not tail or not tail[0]:
                raise SourceError(f"no revision after /{marker}/ in {text!r}")
            revision = _unquote(tail[0], text)
            filename = "/".join(tail[1:]) or None
            if marker == "tree":
                filename = None
            elif not filename:
                raise SourceError(f"no file after /{marker}/{tail[0]}/ in {text!r}")
            source = ModelSource(
                scheme="hf", repo=repo, revision=revision, filename=_unquote(filename, text) if filename else None
            )
            validate_source(source)
            return source
    source = ModelSource(scheme="hf", repo=body)
    validate_source(source)
    return source


def _parse_s3_like(scheme: str, body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    bucket, _, prefix = body.partition("/")
    endpoint = _single(query, "endpoint", text)
    return ModelSource(scheme=scheme, bucket=bucket, prefix=_unquote(prefix, text), endpoint=endpoint)


def _parse_s3(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    return _parse_s3_like("s3", body, query, text)


def _parse_gcs(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    return _parse_s3_like("gcs", body, query, text)


def _parse_oss(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    """llmaz ``oss://bucket.endpoint/path``: the host part is the bucket, a dot, then the endpoint."""
    host, slash, path = body.partition("/")
    bucket, dot, endpoint = host.partition(".")
    if not bucket or not dot or not endpoint:
        raise SourceError(f"oss source {text!r} needs a bucket and an endpoint: oss://<bucket>.<endpoint>/<path>")
    if not slash or not path.strip("/"):
        raise SourceError(f"oss source {text!r} needs a model path: oss://<bucket>.<endpoint>/<path>")
    return ModelSource(scheme="oss", bucket=bucket, endpoint=endpoint, prefix=_unquote(path, text))


def _parse_pvc(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    claim, _, path = body.partition("/")
    path = _unquote(path, text).strip("/")
    return ModelSource(scheme="pvc", claim=claim, path=path or None)


def _parse_path(scheme: str, body: str, text: str) -> ModelSource:
    path = _unquote(body, text)
    if not path.strip("/"):
        raise SourceError(f"{scheme} source {text!r} needs a path: {scheme}:///absolute/path")
    return ModelSource(scheme=scheme, path="/" + path.strip("/"))


def _parse_hostpath(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    return _parse_path("hostpath", body, text)


def _parse_host(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    return _parse_path("host", body, text)


def _parse_ollama(body: str, query: Mapping[str, list[str]], text: str) -> ModelSource:
    return ModelSource(scheme="ollama", name=body)


_PARSERS = {
    "hf": _parse_hf,
    "modelscope": _parse_modelscope,
    "s3": _parse_s3,
    "gcs": _parse_gcs,
    "oss": _parse_oss,
    "pvc": _parse_pvc,
    "hostpath": _parse_hostpath,
    "host": _parse_host,
    "ollama": _parse_ollama,
}


# ------------------------------------------------------------------------------------------------ validation


def validate_source(source: ModelSource, field: str | None = None) -> None:
    """Check a source's fields for its scheme; raise :class:`SourceError` (with ``field``) on the first problem."""
    if source.scheme not in SCHEMES:
        raise SourceError(f"unknown scheme {source.scheme!r}; expected one of {_scheme_list()}", field)
    if source.scheme in HUB_SCHEMES:
        _validate_hub(source, field)
    elif source.scheme in OBJECT_STORE_SCHEMES:
        _validate_object_store(source, field)
    elif source.scheme == "pvc":
        _validate_pvc(source, field)
    elif source.scheme in ("hostpath", "host"):
        _validate_path(source.path, source.scheme, field)
    elif source.scheme == "ollama":
        if not source.name or not _OLLAMA_NAME.match(source.name):
            raise SourceError(f"ollama model name {source.name!r} is not valid (expected ollama://name[:tag])", field)


def _validate_hub(source: ModelSource, field: str | None) -> None:
    repo = source.repo or ""
    if not repo:
        raise SourceError(f"{source.scheme} source needs a repository id such as org/name", field)
    parts = repo.split("/")
    if len(parts) > 2:
        raise SourceError(f"repository id {repo!r} has more than one '/': expected org/name", field)
    for part in parts:
        if not _HUB_PART.match(part) or part.endswith((".", "-")) or "--" in part or ".." in part:
            raise SourceError(
                f"repository id {repo!r} is not valid: use letters, digits, '-', '_' and '.', "
                "at most 96 characters per part, no '--' or '..'",
                field,
            )
    revision = source.revision or ""
    if not revision or revision.startswith("/") or ".." in revision.split("/") or _WHITESPACE.search(revision):
        raise SourceError(f"revision {revision!r} of {repo} is not a valid branch, tag or commit", field)
    if source.filename is not None:
        _validate_relative_file(source.filename, field)
        if source.scheme == "modelscope":
            raise SourceError("filename is only supported with the Huggingface hub, not ModelScope", field)
        if source.allow_patterns or source.ignore_patterns:
            raise SourceError("filename and allow/ignore patterns cannot be set at the same time", field)
    for pattern in source.allow_patterns + source.ignore_patterns:
        if _WHITESPACE.search(pattern):
            raise SourceError(f"pattern {pattern!r} contains whitespace", field)


def _validate_relative_file(name: str, field: str | None) -> None:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in name:
        raise SourceError(f"filename {name!r} must be a relative path inside the repository, without '..'", field)


def _validate_object_store(source: ModelSource, field: str | None) -> None:
    bucket = source.bucket or ""
    if not bucket:
        raise SourceError(f"{source.scheme} source needs a bucket: {source.scheme}://<bucket>/<prefix>", field)
    if not _BUCKET.match(bucket) or ".." in bucket or _IPV4.match(bucket):
        raise SourceError(
            f"bucket name {bucket!r} is not valid: 3-255 letters, digits, '.', '-' and '_', "
            "starting and ending with a letter or digit, not an IP address",
            field,
        )
    if any(part in (".", "..") for part in source.prefix.split("/")):
        raise SourceError(f"prefix {source.prefix!r} must not contain '.' or '..' segments", field)
    if source.endpoint is not None and not _ENDPOINT.match(source.endpoint):
        raise SourceError(f"endpoint {source.endpoint!r} is not a host[:port] or http(s) URL", field)


def endpoint_key(endpoint: str) -> tuple[str, str, int, str]:
    """An S3 endpoint (``host[:port]`` or an http(s) URL) as ``(scheme, host, port, path)``, for comparing two
    spellings of one endpoint: no scheme means https (as the downloader reads it), the port defaults to the
    scheme's, the host is case-insensitive, a trailing ``/`` does not count."""
    text = endpoint.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "https", text
    hostport, _, path = rest.partition("/")
    host, colon, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
    default = 443 if scheme.lower() == "https" else 80
    return scheme.lower(), host.lower(), int(port) if colon and port.isdigit() else default, path.strip("/")


def same_endpoint(first: str | None, second: str | None) -> bool:
    """Whether two S3 endpoints name the same server (:func:`endpoint_key`); two missing ones are the same."""
    if first is None or second is None:
        return first is None and second is None
    return endpoint_key(first) == endpoint_key(second)


def _validate_pvc(source: ModelSource, field: str | None) -> None:
    claim = source.claim or ""
    if not claim:
        raise SourceError("pvc source needs a claim name: pvc://<claim>[/path]", field)
    if name_error("v1", "PersistentVolumeClaim", claim):
        raise SourceError(f"claim name {claim!r} is not a valid Kubernetes name (lowercase DNS-1123 subdomain)", field)
    if source.path and any(part in (".", "..") for part in source.path.split("/")):
        raise SourceError(f"path {source.path!r} inside claim {claim} must not contain '.' or '..'", field)


def _validate_path(path: str | None, scheme: str, field: str | None) -> None:
    if not path or not path.startswith("/") or path == "/":
        raise SourceError(f"{scheme} source needs an absolute path below /: {scheme}:///path", field)
    if any(part in (".", "..") for part in path.split("/")):
        raise SourceError(f"path {path!r} must not contain '.' or '..' segments", field)


# ------------------------------------------------------------------------------------------------- rendering


def _render_uri(source: ModelSource) -> str:
    scheme = source.scheme
    if scheme in HUB_SCHEMES:
        text = f"{scheme}://{source.repo}"
        if source.revision and source.revision != DEFAULT_REVISION:
            text += "@" + _quote(source.revision, safe="/")
        query = [("allow", p) for p in source.allow_patterns] + [("ignore", p) for p in source.ignore_patterns]
        if source.filename:
            query.append(("filename", source.filename))
        return text + _render_query(query)
    if scheme == "oss":
        return f"oss://{source.bucket}.{source.endpoint}/{_quote(source.prefix, safe='/')}"
    if scheme in ("s3", "gcs"):
        text = f"{scheme}://{source.bucket}"
        if source.prefix:
            text += "/" + _quote(source.prefix, safe="/")
        return text + _render_query([("endpoint", source.endpoint)] if source.endpoint else [])
    if scheme == "pvc":
        text = f"pvc://{source.claim}"
        return text + ("/" + _quote(source.path.strip("/"), safe="/") if source.path and source.path.strip("/") else "")
    if scheme in ("hostpath", "host"):
        return f"{scheme}://{_quote(source.path or '', safe='/')}"
    if scheme == "ollama":
        return f"ollama://{source.name}"
    raise SourceError(f"unknown scheme {scheme!r}")


def _render_query(items: list[tuple[str, str]]) -> str:
    if not items:
        return ""
    return "?" + "&".join(f"{key}={_quote(value, safe='/*[]!')}" for key, value in items)


# Percent-encoding by hand: engine/ may not import urllib (the import-linter contract forbids I/O modules).
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = "0123456789ABCDEF"


def _quote(value: str, safe: str = "") -> str:
    allowed = _UNRESERVED | frozenset(safe)
    out: list[str] = []
    for char in value:
        if char in allowed:
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


def _unquote(value: str, text: str) -> str:
    if "%" not in value:
        return value
    raw = bytearray()
    i = 0
    while i < len(value):
        char = value[i]
        if char == "%":
            pair = value[i + 1 : i + 3]
            if len(pair) != 2 or any(c not in _HEX + _HEX.lower() for c in pair):
                raise SourceError(f"bad percent-escape {value[i : i + 3]!r} in model source {text!r}")
            raw.append(int(pair, 16))
            i += 3
        else:
            raw.extend(char.encode("utf-8"))
            i += 1
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"percent-escapes in model source {text!r} are not UTF-8") from exc
