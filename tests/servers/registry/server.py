"""Start Debian's ``docker-registry`` on 127.0.0.1 and push images to it through the registry HTTP API.

Three modes: ``plain`` (anonymous), ``htpasswd`` (HTTP Basic: 401 without credentials) and ``token``
(the distribution token protocol most registries use: 401 ``Bearer realm=...``, a token service
that checks Basic credentials and issues an RS256 JWT with the signing certificate in ``x5c``, and
the registry verifying it against that certificate). :class:`Registry` pushes config blobs with
labels, image manifests and multi-arch indexes, and counts the requests the registry served by
reading its access log.

Usable outside pytest (benchmarks, the demo): :func:`start_registry` returns a handle whose
:meth:`Registry.stop` kills the process by PID.
"""

from __future__ import annotations

import atexit
import base64
import datetime
import hashlib
import http.server
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from typing import Any

import requests

from tests.servers.processes import stop_process
from tests.servers.quiet import QuietThreadingHTTPServer

USER, PASSWORD = "modelplane", "s3cret-pass"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
SERVICE, ISSUER = "modelplane-test-registry", "modelplane-test-issuer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    """The distribution token protocol's auth server: Basic credentials in, a signed pull JWT out."""

    def __init__(self, workdir: pathlib.Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelplane-test-token-signer")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_path = workdir / "token-signer.pem"
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
        self.issued = 0
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                service._answer(self)

            def log_message(self, *_: Any) -> None:
                return

        self._server = QuietThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.realm = f"http://127.0.0.1:{self.port}/token"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        from urllib.parse import parse_qs, urlparse

        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if handler.headers.get("Authorization") != expected:
            handler.send_response(401)
            handler.end_headers()
            return
        query = parse_qs(urlparse(handler.path).query)
        access = []
        for scope in query.get("scope", []):
            kind, _, rest = scope.partition(":")
            repo, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": repo, "actions": [a for a in actions.split(",") if a]})
        body = json.dumps({"token": self.sign(access)}).encode()
        self.issued += 1
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def sign(self, access: list[dict[str, Any]]) -> str:
        """A JWT the registry accepts for ``access``."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "x5c": [self._x5c]}
        claims = {
            "iss": ISSUER,
            "sub": USER,
            "aud": SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Registry:
    """A running ``docker-registry`` and a client that pushes to it."""

    def __init__(
        self, proc: subprocess.Popen[bytes], port: int, workdir: pathlib.Path, mode: str, tokens: TokenService | None
    ) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.port = port
        self.host = f"127.0.0.1:{port}"
        self.url = f"http://{self.host}"
        self.workdir = workdir
        self.mode = mode
        self.tokens = tokens
        self.log_path = workdir / "registry.log"
        self._log_offset = 0
        self.session = requests.Session()
        self.session.trust_env = False

    # ------------------------------------------------------------------------------------ auth

    def dockerconfigjson(self) -> str:
        """A ``.dockerconfigjson`` document with this registry's credentials."""
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        return json.dumps({"auths": {self.host: {"username": USER, "password": PASSWORD, "auth": auth}}})

    def _headers(self, repo: str, push: bool = True) -> dict[str, str]:
        if self.mode == "htpasswd":
            return {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
        if self.mode == "token" and self.tokens is not None:
            actions = ["pull", "push"] if push else ["pull"]
            return {
                "Authorization": "Bearer "
                + self.tokens.sign([{"type": "repository", "name": repo, "actions": actions}])
            }
        return {}

    # ------------------------------------------------------------------------------------ push

    def push_blob(self, repo: str, data: bytes) -> str:
        """Upload a blob (monolithic POST + PUT); returns its digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        headers = self._headers(repo)
        start = self.session.post(f"{self.url}/v2/{repo}/blobs/uploads/", headers=headers, timeout=30)
        start.raise_for_status()
        location = start.headers["Location"]
        if location.startswith("/"):
            location = self.url + location
        sep = "&" if "?" in location else "?"
        done = self.session.put(
            f"{location}{sep}digest={digest}",
            data=data,
            headers={**headers, "Content-Type": "application/octet-stream"},
            timeout=30,
        )
        if done.status_code != 201:
            raise RuntimeError(f"blob upload to {repo} -> {done.status_code}: {done.text}")
        return digest

    def push_manifest(self, repo: str, reference: str, manifest: dict[str, Any], media_type: str) -> str:
        """PUT a manifest under a tag (or digest); returns its digest."""
        body = json.dumps(manifest, separators=(",", ":")).encode()
        response = self.session.put(
            f"{self.url}/v2/{repo}/manifests/{reference}",
            data=body,
            headers={**self._headers(repo), "Content-Type": media_type},
            timeout=30,
        )
        if response.status_code != 201:
            raise RuntimeError(f"manifest {repo}:{reference} -> {response.status_code}: {response.text}")
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def push_image(
        self,
        repo: str,
        tag: str | None,
        labels: dict[str, str] | None,
        *,
        arch: str = "amd64",
        layer: bytes | None = None,
    ) -> str:
        """An image whose config carries ``labels`` (one small layer); returns the manifest digest.
        ``tag=None`` pushes it untagged (by digest, e.g. for an index)."""
        config = {
            "architecture": arch,
            "os": "linux",
            "config": {"Labels": labels} if labels is not None else {},
            "rootfs": {"type": "layers", "diff_ids": []},
        }
        config_bytes = json.dumps(config, sort_keys=True).encode()
        config_digest = self.push_blob(repo, config_bytes)
        layer = layer if layer is not None else f"layer of {repo} {arch} {uuid.uuid4().hex}".encode()
        layer_digest = self.push_blob(repo, layer)
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config_bytes)},
            "layers": [{"mediaType": OCI_LAYER, "digest": layer_digest, "size": len(layer)}],
        }
        body = json.dumps(manifest, separators=(",", ":")).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        return self.push_manifest(repo, tag or digest, manifest, OCI_MANIFEST)

    def push_index(self, repo: str, tag: str, per_arch_labels: dict[str, dict[str, str]]) -> str:
        """A multi-arch image index (one image per architecture, linux); returns the index digest."""
        entries = []
        for arch, labels in per_arch_labels.items():
            digest = self.push_image(repo, None, labels, arch=arch)
            size = len(
                self.session.get(
                    f"{self.url}/v2/{repo}/manifests/{digest}",
                    headers={**self._headers(repo), "Accept": OCI_MANIFEST},
                    timeout=30,
                ).content
            )
            entries.append(
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": size,
                    "platform": {"os": "linux", "architecture": arch},
                }
            )
        return self.push_manifest(
            repo, tag, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, OCI_INDEX
        )

    def image(self, repo: str, tag: str) -> str:
        """The image reference of ``repo:tag`` on this registry."""
        return f"{self.host}/{repo}:{tag}"

    # ------------------------------------------------------------------------------------ stats

    def mark(self) -> None:
        """Start counting requests from now (see :meth:`requests_since_mark`)."""
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0

    def requests_since_mark(self) -> Counter[str]:
        """Requests the registry answered since :meth:`mark`, by ``manifest``/``blob``/``other`` (from its access log)."""
        counts: Counter[str] = Counter()
        with open(self.log_path, "rb") as handle:
            handle.seek(self._log_offset)
            text = handle.read().decode(errors="replace")
        for match in re.finditer(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (/v2/\S*) HTTP', text):
            method, path = match.groups()
            kind = "manifest" if "/manifests/" in path else "blob" if "/blobs/" in path else "other"
            counts[f"{method} {kind}"] += 1
        return counts

    # ------------------------------------------------------------------------------------ lifecycle

    def alive(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        """Kill the registry (by PID) and the token service."""
        stop_process(self._proc)
        if self.tokens is not None:
            self.tokens.stop()
            self.tokens = None


def registry_available() -> bool:
    """Whether Debian's docker-registry is installed."""
    return shutil.which("docker-registry") is not None


def start_registry(
    workdir: str | os.PathLike[str] | None = None, mode: str = "plain", timeout: float = 15.0
) -> Registry:
    """Start ``docker-registry serve`` on a free 127.0.0.1 port in ``mode`` (plain, htpasswd, token)."""
    if mode not in ("plain", "htpasswd", "token"):
        raise ValueError(f"unknown registry mode {mode!r}")
    binary = shutil.which("docker-registry")
    if binary is None:
        raise RuntimeError("docker-registry is not installed (Debian package docker-registry; ./dev.sh installs it)")
    wd = pathlib.Path(workdir) if workdir is not None else pathlib.Path(tempfile.mkdtemp(prefix=f"registry-{mode}-"))
    wd.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    tokens: TokenService | None = None
    auth = ""
    if mode == "htpasswd":
        htpasswd = wd / "htpasswd"
        subprocess.run(["htpasswd", "-Bbc", str(htpasswd), USER, PASSWORD], check=True, capture_output=True)
        auth = f"auth:\n  htpasswd:\n    realm: modelplane-test\n    path: {htpasswd}\n"
    elif mode == "token":
        tokens = TokenService(wd)
        auth = (
            f"auth:\n  token:\n    realm: {tokens.realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n"
            f"    rootcertbundle: {tokens.cert_path}\n"
        )
    config = wd / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: info\n  accesslog:\n    disabled: false\n"
        f"storage:\n  filesystem:\n    rootdirectory: {wd / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: {uuid.uuid4().hex}\n" + auth
    )
    log = open(wd / "registry.log", "ab")
    proc = subprocess.Popen(
        [binary, "serve", str(config)],
        cwd=str(wd),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    log.close()
    registry = Registry(proc, port, wd, mode, tokens)
    atexit.register(registry.stop)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited with {proc.returncode}; see {wd / 'registry.log'}")
        try:
            response = registry.session.get(f"{registry.url}/v2/", timeout=1)
            if response.status_code in (200, 401):
                return registry
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            registry.stop()
            raise RuntimeError(f"docker-registry did not answer within {timeout}s; see {wd / 'registry.log'}")
        time.sleep(0.05)
