"""HTTP front end: Kubernetes REST paths, discovery, watch streaming and the ``/_test/`` admin API."""

from __future__ import annotations

import json
import re
import select
import socket
import threading
from collections import Counter, deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from tests.servers.quiet import QuietThreadingHTTPServer

from . import openapi
from .resources import ResourceType
from .store import APPLY, RETURNS_DELETED_OBJECT, ApiError, Obj, Store

VERSION_INFO = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-kubeserver",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_DUMPS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
USER_TOKEN_PREFIX = (
    "kubeserver-as:"  # a bearer token naming the user its requests are logged as (jobs.service_account_token)
)


@dataclass
class Injection:
    """A scripted failure: the next ``times`` requests matching method and path fail with ``status``."""

    method: str
    path_regex: re.Pattern[str]
    status: int
    times: int
    message: str | None = None
    reason: str | None = None
    retry_after: int | None = None


class Controls:
    """Request statistics and failure injections, shared by all handler threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_verb: Counter[str] = Counter()
        self.by_resource: Counter[tuple[str, str, str]] = Counter()
        self.injections: list[Injection] = []
        self.log: deque[tuple[str, str, str, int, str]] = deque(maxlen=2000)  # method, path?query, verb, code, user

    def record(self, verb: str, resource: str, subresource: str) -> None:
        with self.lock:
            self.by_verb[verb] += 1
            self.by_resource[(verb, resource, subresource)] += 1

    def requests(self, limit: int) -> list[Obj]:
        """The most recent API requests (oldest first)."""
        with self.lock:
            entries = list(self.log)[-limit:] if limit else list(self.log)
        return [{"method": m, "path": p, "verb": v, "code": c, "user": u} for m, p, v, c, u in entries]

    def stats(self) -> Obj:
        with self.lock:
            return {
                "total": sum(self.by_verb.values()),
                "by_verb": dict(self.by_verb),
                "by_resource": [
                    {"verb": v, "resource": r, "subresource": s, "count": c}
                    for (v, r, s), c in sorted(self.by_resource.items())
                ],
                "by_key": {
                    (f"{v} {r}" + (f"/{s}" if s else "")).strip(): c
                    for (v, r, s), c in sorted(self.by_resource.items())
                },
            }

    def reset(self) -> None:
        with self.lock:
            self.by_verb.clear()
            self.by_resource.clear()
            self.log.clear()

    def take_injection(self, method: str, path: str) -> Injection | None:
        with self.lock:
            for inj in self.injections:
                if inj.times > 0 and inj.method in ("*", method) and inj.path_regex.search(path):
                    inj.times -= 1
                    if inj.times <= 0:
                        self.injections.remove(inj)
                    return inj
        return None


class KubeHTTPServer(QuietThreadingHTTPServer):
    """Threaded HTTP server holding the store and the test controls."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], store: Store | None = None) -> None:
        super().__init__(address, Handler)
        self.store = store or Store()
        self.controls = Controls()


@dataclass
class Route:
    """A parsed API path."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str


class Handler(BaseHTTPRequestHandler):
    """One connection; requests are dispatched by method and path."""

    protocol_version = "HTTP/1.1"
    server: KubeHTTPServer
    server_version = "kubeserver"

    def setup(self) -> None:
        super().setup()
        try:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Silence per-request logging."""

    # ------------------------------------------------------------------------------------ plumbing

    def _log_request(self) -> None:
        """Log the API request once, before its response leaves: a client that has its answer finds it logged."""
        if self._request_verb and not self._logged:
            self._logged = True
            with self.server.controls.lock:
                self.server.controls.log.append((self.command, self.path, self._request_verb, self._code, self._user()))

    def _user(self) -> str:
        """Who made the request, as the log names it: a bearer token ``kubeserver-as:<user>`` is ``<user>`` (the
        job runner's Pods use ``system:serviceaccount:<namespace>:<name>``); any other token is ``admin``.
        Nothing is authorized by it: every token may do everything."""
        auth = self.headers.get("Authorization") or ""
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        return token[len(USER_TOKEN_PREFIX) :] if token.startswith(USER_TOKEN_PREFIX) else "admin"

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._code = code
        self._log_request()
        data = body if isinstance(body, bytes) else _DUMPS(body).encode()
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Unknown"
        head = [
            f"HTTP/1.1 {code} {phrase}",
            "Content-Type: application/json",
            f"Content-Length: {len(data)}",
            "Cache-Control: no-cache, private",
        ]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)

    def _error(self, err: ApiError, headers: dict[str, str] | None = None) -> None:
        self._send(err.code, err.status(), headers)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "").lower()
        try:
            if "yaml" in ctype:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, f"the body of the request could not be decoded: {exc}") from None

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    # ------------------------------------------------------------------------------------ dispatch

    def _dispatch(self, method: str) -> None:
        self._request_verb, self._logged = "", False  # per request: a keep-alive connection reuses the handler
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        if path.startswith("/_test/"):
            try:
                self._admin(method, path, query)
            except ApiError as err:
                self._error(err)
            return
        self._code = 0
        verb = ""
        try:
            body = self._body()  # always consume the body, or a keep-alive connection desynchronises
            segs = [unquote(s) for s in path.strip("/").split("/")] if path != "/" else []
            if self._discovery(method, segs):
                return
            route = self._route(segs)
            verb = self._request_verb = self._verb(method, route, query)
            if verb == "watch":
                self._code = 200  # the stream is logged when it starts
            self.server.controls.record(verb, route.rt.plural, route.subresource)
            inj = self.server.controls.take_injection(method, split.path)
            if inj is not None:
                self._inject(inj, route)
                return
            self._serve(method, verb, route, query, body)
        except ApiError as err:
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # pragma: no cover - reported to the client as a 500
            import traceback

            traceback.print_exc()
            self._error(ApiError(500, f"internal error: {exc!r}"))
        finally:
            self._log_request()  # a request that got no response (the client went away)

    def _route(self, segs: list[str]) -> Route:
        store = self.server.store
        if len(segs) >= 2 and segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource")
        if not rest:
            raise ApiError(404, "the server could not find the requested resource")
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = store.resolve(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                ns, rest = rest[1], rest[2:]
        rt = store.resolve(group, version, rest[0])
        if rt is None or len(rest) > 3:
            raise ApiError(404, "the server could not find the requested resource")
        if ns is not None and not rt.namespaced:
            raise ApiError(404, "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and not ((sub == "status" and rt.has_status) or (sub == "scale" and rt.scale is not None)):
            raise ApiError(404, "the server could not find the requested resource")
        return Route(rt, ns, name, sub)

    @staticmethod
    def _verb(method: str, route: Route, query: dict[str, str]) -> str:
        if method == "GET":
            if route.name is None:
                return "watch" if query.get("watch") in ("true", "1") else "list"
            return "get"
        if method == "DELETE" and route.name is None:
            return "deletecollection"
        return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]

    def _inject(self, inj: Injection, route: Route) -> None:
        name = route.name or ""
        rt = route.rt
        message = inj.message
        if message is None:
            if inj.status == 409:
                message = (
                    f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again"
                )
            elif inj.status == 403:
                message = (
                    f'{rt.qualified} "{name}" is forbidden: User "system:serviceaccount:test:injected" cannot '
                    f'{self.command.lower()} resource "{rt.plural}" in API group "{rt.group}"'
                )
            elif inj.status == 404:
                message = f'{rt.qualified} "{name}" not found'
            else:
                message = f"injected failure ({inj.status})"
        details = {"name": name, "group": rt.group, "kind": rt.plural}
        err = ApiError(inj.status, message, inj.reason, details)
        headers = {"Retry-After": str(inj.retry_after)} if inj.retry_after is not None else None
        self._error(err, headers)

    def _serve(self, method: str, verb: str, route: Route, query: dict[str, str], body: Any) -> None:
        store = self.server.store
        rt, ns, name, sub = route.rt, route.namespace, route.name, route.subresource
        dry_run = bool(query.get("dryRun"))
        if rt.namespaced and ns is None and verb not in ("list", "watch"):
            if name is not None:  # no such route: /api/v1/configmaps/<name> is not a path the server serves
                raise ApiError(404, "the server could not find the requested resource")
            raise ApiError(405, "the server does not allow this method on the requested resource")
        if verb in ("get", "list"):
            store.wait_fresh(query.get("resourceVersion"))
        if verb == "get":
            if sub == "scale":
                self._send(200, store.get_scale(rt, ns, name))  # type: ignore[arg-type]
            else:
                self._send(200, store.get(rt, ns, name))  # type: ignore[arg-type]
        elif verb == "list":
            limit = int(query.get("limit") or 0)
            self._send(
                200,
                store.list(
                    rt, ns, query.get("labelSelector"), query.get("fieldSelector"), limit, query.get("continue") or None
                ),
            )
        elif verb == "watch":
            self._watch(rt, ns, query)
        elif verb == "create":
            if name is not None:
                raise ApiError(405, "the server does not allow this method on the requested resource")
            with store.field_validation(query.get("fieldValidation")) as warnings:
                created = store.create(rt, ns, body, dry_run)
            self._send(201, created, _warning_headers(warnings))
        elif verb == "update":
            if sub == "scale":
                self._send(200, store.update_scale(rt, ns, name, body, None, dry_run))  # type: ignore[arg-type]
            else:
                with store.field_validation(query.get("fieldValidation")) as warnings:
                    updated = store.update(rt, ns, name, body, sub, dry_run)  # type: ignore[arg-type]
                self._send(200, updated, _warning_headers(warnings))
        elif verb == "patch":
            ctype = self.headers.get("Content-Type") or ""
            if body is None:
                raise ApiError(400, "the body of the request was empty")
            if sub == "scale":
                self._send(200, store.update_scale(rt, ns, name, body, ctype, dry_run))  # type: ignore[arg-type]
            else:
                existed = True
                if ctype.startswith(APPLY):
                    try:
                        store.get(rt, ns, name)  # type: ignore[arg-type]
                    except ApiError:
                        existed = False
                with store.field_validation(query.get("fieldValidation")) as warnings:
                    obj = store.patch(rt, ns, name, ctype, body, sub, dry_run)  # type: ignore[arg-type]
                self._send(200 if existed else 201, obj, _warning_headers(warnings))
        elif verb == "delete":
            options = dict(body) if isinstance(body, dict) else {}
            if query.get("propagationPolicy"):
                options["propagationPolicy"] = query["propagationPolicy"]
            obj, gone = store.delete(rt, ns, name, options, dry_run)  # type: ignore[arg-type]
            if gone and (rt.group, rt.plural) not in RETURNS_DELETED_OBJECT:  # genericregistry's finalizeDelete
                meta = obj["metadata"]
                self._send(
                    200,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            k: v
                            for k, v in (
                                ("name", meta["name"]),
                                ("group", rt.group),
                                ("kind", rt.plural),
                                ("uid", meta.get("uid")),
                            )
                            if v
                        },
                    },
                )
            else:
                self._send(200, obj)
        elif verb == "deletecollection":
            self._send(
                200, store.delete_collection(rt, ns, query.get("labelSelector"), query.get("fieldSelector"), dry_run)
            )

    def _watch(self, rt: ResourceType, ns: str | None, query: dict[str, str]) -> None:
        timeout = float(query.get("timeoutSeconds") or 1800)
        events = self.server.store.watch(
            rt,
            ns,
            query.get("labelSelector"),
            query.get("fieldSelector"),
            query.get("resourceVersion"),
            timeout,
            bookmarks=query.get("allowWatchBookmarks") == "true",
            send_initial_events=query.get("sendInitialEvents") == "true",
        )
        self._log_request()  # the stream is logged when it starts
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Cache-Control: no-cache, private\r\n\r\n"
        )

        def chunk(ev: Obj) -> None:
            data = _DUMPS(ev).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        try:
            for ev in events:
                if ev is None:
                    if self._client_gone():
                        self.close_connection = True
                        return
                    continue
                chunk(ev)
            self.wfile.write(b"0\r\n\r\n")
        finally:
            events.close()

    def _client_gone(self) -> bool:
        """Whether the peer closed the connection (readable with nothing to read)."""
        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            if not ready:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # ----------------------------------------------------------------------------------- discovery

    def _discovery(self, method: str, segs: list[str]) -> bool:
        if method != "GET":
            return False
        store = self.server.store
        n = len(segs)
        if n == 1 and segs[0] == "version":
            self._send(200, VERSION_INFO)
        elif n == 1 and segs[0] in ("healthz", "readyz", "livez"):
            self._send(200, b"ok")
        elif n == 1 and segs[0] == "api":
            host = f"127.0.0.1:{self.server.server_address[1]}"
            self._send(
                200,
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
                },
            )
        elif n == 2 and segs[0] == "api" and segs[1] == "v1":
            self._send(200, self._resource_list("", "v1"))
        elif n == 1 and segs[0] == "apis":
            groups = [self._group(g, vs) for g, vs in sorted(store.groups().items()) if g]
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        elif n == 2 and segs[0] == "apis":
            versions = store.groups().get(segs[1])
            if not versions:
                raise ApiError(404, "the server could not find the requested resource")
            self._send(200, dict(self._group(segs[1], versions), kind="APIGroup", apiVersion="v1"))
        elif n == 3 and segs[0] == "apis":
            if not store.resources(segs[1], segs[2]):
                raise ApiError(404, "the server could not find the requested resource")
            self._send(200, self._resource_list(segs[1], segs[2]))
        elif segs[:1] == ["openapi"]:
            self._openapi(segs[1:])
        else:
            return False
        self.server.controls.record("discovery", "", "")
        return True

    def _openapi(self, segs: list[str]) -> None:
        """``/openapi/v2`` and ``/openapi/v3[/<group-version>]`` (tests/servers/kubeserver/openapi.py)."""
        store = self.server.store
        documents = {
            openapi.gv_path(group, version): openapi.v3_document(store.resources(group, version))
            for group, versions in store.groups().items()
            for version in versions
        }
        if segs == ["v2"]:
            accept = self.headers.get("Accept") or "application/json"
            if "json" not in accept and "*/*" not in accept:
                raise ApiError(406, "only application/json is served for /openapi/v2", reason="NotAcceptable")
            types = [
                rt for group, versions in store.groups().items() for v in versions for rt in store.resources(group, v)
            ]
            self._send(200, openapi.v2_document(types))
        elif segs == ["v3"]:
            self._send(200, openapi.v3_index(documents))
        elif segs[:1] == ["v3"] and "/".join(segs[1:]) in documents:
            self._send(200, documents["/".join(segs[1:])])
        else:
            raise ApiError(404, "the server could not find the requested resource")

    @staticmethod
    def _group(group: str, versions: list[str]) -> Obj:
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": vs, "preferredVersion": vs[0]}

    def _resource_list(self, group: str, version: str) -> Obj:
        resources = []
        for rt in sorted(self.server.store.resources(group, version), key=lambda r: r.plural):
            resources.extend(rt.discovery())
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    # --------------------------------------------------------------------------------------- admin

    def _admin(self, method: str, path: str, query: dict[str, str]) -> None:
        controls = self.server.controls
        body = self._body()
        action = path[len("/_test/") :]
        if action == "stats" and method == "GET":
            self._send(200, controls.stats())
        elif action == "reset-stats" and method == "POST":
            controls.reset()
            self._send(200, {"ok": True})
        elif action == "inject" and method == "POST":
            if not isinstance(body, dict) or "status" not in body:
                raise ApiError(400, "inject needs a JSON object with method, path_regex, status and times")
            inj = Injection(
                method=str(body.get("method") or "*").upper(),
                path_regex=re.compile(body.get("path_regex") or ".*"),
                status=int(body["status"]),
                times=int(body.get("times", 1)),
                message=body.get("message"),
                reason=body.get("reason"),
                retry_after=body.get("retry_after"),
            )
            with controls.lock:
                controls.injections.append(inj)
            self._send(200, {"ok": True})
        elif action == "clear-injections" and method == "POST":
            with controls.lock:
                controls.injections.clear()
            self._send(200, {"ok": True})
        elif action == "reset" and method == "POST":
            self.server.store.reset()
            self._send(200, {"ok": True})
        elif action == "requests" and method == "GET":
            self._send(200, controls.requests(int(query.get("limit") or 0)))
        elif action == "objects" and method == "GET":
            self._send(200, self.server.store.count())
        else:
            raise ApiError(404, f"unknown test control {method} {path}")


def serve(port: int = 0, host: str = "127.0.0.1") -> KubeHTTPServer:
    """Create (but do not start) a server bound to ``host:port``."""
    return KubeHTTPServer((host, port))


def _warning_headers(warnings: list[str]) -> dict[str, str] | None:
    """``Warning: 299 - "..."`` as the API server sends for unknown fields under fieldValidation=Warn."""
    if not warnings:
        return None
    return {"Warning": ", ".join("299 - " + json.dumps(w) for w in warnings)}
