"""The Kubernetes backend, through the official ``kubernetes`` client.

Every kind outside the core group (custom resources, ``apps``, ``batch``, KServe, Gateway API) goes
through ``CustomObjectsApi``, whose paths ``/apis/<group>/<version>/...`` fit them all and which
exposes the ``/status`` and ``/scale`` subresources. Core-group kinds (``/api/v1``) go through
``ApiClient.call_api`` with the same path scheme. Responses are never turned into client model
classes: bodies are JSON-decoded into plain dicts in API-server shape (camelCase), which is both what
the rest of Modelplane expects and much faster.

Writes are JSON merge-patches (``application/merge-patch+json``; CRDs reject strategic merge), status
only through ``/status``, and a given ``resourceVersion`` rides in the patch's metadata, where the
server enforces it as a precondition (409 -> ``Conflict``). Failures become the typed errors of
:mod:`tasks.clients.cluster.errors`; their messages name the operation and the server's reason but never
carry request headers or bodies (no tokens, no Secret data), and they are raised outside the client's
exception context so no traceback chain leaks those either. A 429/5xx becomes ``Unavailable`` with the
server's ``Retry-After`` kept as ``retry_after`` (used by :func:`tasks.clients.cluster.retry.retry_unavailable`);
note that the client library itself already retries GETs answered with ``Retry-After``, as client-go
does.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import urllib3
from kubernetes import client, config
from kubernetes import watch as kube_watch
from kubernetes.client.exceptions import ApiException

from engine.api.identity import address_error, identity_errors
from engine.api.views import Scale as ScaleView
from tasks.clients.cluster.base import Manifest, ObjectRef, Scale, WatchEvent
from tasks.clients.cluster.errors import ClusterError, Conflict, Forbidden, Invalid, NotFound, Unavailable
from tasks.clients.cluster.objects import apply_patch_of, json_shape
from tasks.clients.cluster.recorder import EventRecorder
from tasks.clients.cluster.resources import ResourceInfo, lookup, resource_for

Manifests: TypeAlias = list[Manifest]
"""Objects as a LIST answers them (spelled outside :class:`KubeCluster`, whose ``list`` method shadows the builtin)."""
Query: TypeAlias = list[tuple[str, Any]]
"""The query parameters of a raw request."""

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "modelplane"
_LIST_PAGE = 5000
_SERVER_OWNED = ("resourceVersion", "uid", "creationTimestamp", "generation", "deletionTimestamp", "managedFields")
"""Metadata the API server owns; dropped from a create, as the local backend does (a create carrying a
resourceVersion is answered 500 'resourceVersion should not be set on objects to be created')."""
_MAX_MESSAGE = 1000


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ``ApiClient`` from in-cluster config (inside a pod) or from a kubeconfig file and context.

    In-cluster config is used when neither a kubeconfig nor a context is given and
    ``KUBERNETES_SERVICE_HOST`` is set; otherwise ``kubeconfig`` (default: ``$KUBECONFIG`` or
    ``~/.kube/config``). The error never quotes the kubeconfig's content.

    Args:
        kubeconfig: The kubeconfig file, or None for ``$KUBECONFIG`` (else ``~/.kube/config``, else in-cluster).
        context: The kubeconfig context, or None for its current context.

    Returns:
        The configured API client.

    Raises:
        ClusterError: The configuration cannot be loaded (reason ``ConfigError``; the message names the file and
            context, never their content).
    """
    failure: ClusterError | None = None
    try:
        if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        # $KUBECONFIG is read now, not when the client library was imported; it may list several files.
        path = os.path.expanduser(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or None
        api: client.ApiClient = config.new_client_from_config(config_file=path, context=context, persist_config=False)
        return api
    except Exception as exc:  # noqa: BLE001 - the loader raises ConfigException, OSError, TypeError, KeyError,
        # yaml errors ... for a malformed kubeconfig; all mean "cannot load the configuration", in one line
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        failure = ClusterError(
            f"cannot load Kubernetes configuration ({type(exc).__name__}) from {where}"
            + (f" context {context!r}" if context else ""),
            reason="ConfigError",
        )
    raise failure


class KubeCluster:
    """A :class:`~tasks.clients.cluster.base.Cluster` talking to a Kubernetes API server."""

    runs_pods = True
    """Pods run on a real cluster: Jobs fill caches, provisioners bind PVCs."""
    validates_schemas = True
    """The API server validated every custom resource it serves against its CRD schema."""

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        request_timeout: float | tuple[float, float] = 30.0,
        dry_run: bool = False,
    ) -> None:
        """Use ``api_client`` if given, else load one (see :func:`load_api_client`). With ``dry_run`` every write
        is sent with ``dryRun=All``: the API server validates it and answers as if it were stored, and stores
        nothing (a flow's ``--dry-run``)."""
        self.api_client = api_client if api_client is not None else load_api_client(kubeconfig, context)
        self.request_timeout = request_timeout
        self.dry_run = dry_run
        self._custom = client.CustomObjectsApi(self.api_client)
        self._discovered: dict[tuple[str, str], ResourceInfo] = {}
        self._discovery_lock = threading.Lock()
        self.events = EventRecorder(self)

    # ------------------------------------------------------------------ Cluster API

    @property
    def unreadable(self) -> list[str]:
        """Nothing: the API server serves only what it validated."""
        return []

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Manifest:
        """Read one object."""
        info = self._resource(api_version, kind)
        return self._read(info, _ns(info, namespace), name)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Manifest]:
        """All objects of a kind (every page), each with ``apiVersion``/``kind`` filled in.

        A 410 Gone (the continue token expired while paging) restarts the listing once, as
        client-go's pager does.
        """
        info = self._resource(api_version, kind)
        namespace = namespace if info.namespaced else None
        try:
            return self._list_all(info, namespace, label_selector)
        except ClusterError as exc:
            if exc.status != 410:
                raise
        return self._list_all(info, namespace, label_selector)

    def watch(
        self, api_version: str, kind: str, namespace: str | None = None, timeout_s: float = 30.0
    ) -> Iterator[WatchEvent]:
        """A watch through ``kubernetes.watch.Watch`` with ``timeoutSeconds``: started without a
        resourceVersion, the server first sends every current object as ``ADDED``, then the changes,
        and ends the stream when the time is up. BOOKMARKs are skipped; an ERROR event (e.g. 410 Gone)
        and a failed request raise the typed errors of :mod:`tasks.clients.cluster.errors`."""
        info = self._resource(api_version, kind)
        namespace = namespace if info.namespaced else None
        what = f"watch {info.plural}" + (f" in {namespace}" if namespace else "")
        seconds = max(1, int(timeout_s))
        failure: ClusterError | None = None
        stream = kube_watch.Watch().stream(
            self._watch_request(info, namespace), timeout_seconds=seconds, _request_timeout=(10.0, seconds + 30.0)
        )
        try:
            for event in stream:
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    yield WatchEvent(
                        event["type"], {"apiVersion": info.api_version, "kind": info.kind, **event["raw_object"]}
                    )
        except ApiException as exc:
            failure = _from_api_exception(exc, what, info)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            failure = Unavailable(f"{what}: API server unreachable ({type(exc).__name__})", reason="Unreachable")
        finally:
            stream.close()
        if failure is not None:
            raise failure

    def _watch_request(self, info: ResourceInfo, namespace: str | None) -> Callable[..., Any]:
        """The list call ``Watch.stream`` drives (``watch=True`` and a timeout added by it), for every kind
        (core or not) on the same path scheme as the other requests; the response is left unread."""

        def request(
            *,
            watch: bool,
            _preload_content: bool,
            timeout_seconds: int,
            _request_timeout: Any,
            resource_version: str | None = None,
        ) -> Any:
            query: list[tuple[str, Any]] = [
                ("watch", "true" if watch else "false"),
                ("timeoutSeconds", timeout_seconds),
            ]
            if resource_version:
                query.append(("resourceVersion", resource_version))
            prepared = self.api_client.param_serialize(
                method="GET",
                resource_path=info.path(namespace),
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(*prepared, _request_timeout=_request_timeout)
            if not 200 <= response.status <= 299:
                response.read()
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            return response.response  # the urllib3 response: Watch reads it line by line as it streams

        return request

    def create(self, obj: Manifest) -> Manifest:
        """POST the object; ``Conflict`` if it exists. Returns the object as the server stored it."""
        info = self._resource(obj.get("apiVersion", ""), obj.get("kind", ""))
        obj = json_shape(obj)
        meta = obj.get("metadata") or {}
        for owned in _SERVER_OWNED:  # e.g. a manifest from a snapshot: the API server rejects these on create
            meta.pop(owned, None)
        namespace = _ns(info, meta.get("namespace"))
        errors = identity_errors({**obj, "metadata": {**meta, "namespace": namespace}})
        if errors:  # refused here as the API server would, and never put into a request path
            raise Invalid.value(errors[0])
        what = f"create {_describe(info, namespace, meta.get('name') or meta.get('generateName', ''))}"
        if info.is_core:
            return self._call(what, info, lambda: self._rest("POST", info.path(namespace), body=obj, query=self._fm()))
        args = _custom_args(info, namespace)
        method = "create_namespaced_custom_object" if info.namespaced else "create_cluster_custom_object"
        return self._call(
            what,
            info,
            lambda: getattr(self._custom, method)(*args, body=obj, field_manager=FIELD_MANAGER, **self._write()),
        )

    def apply(self, obj: Manifest) -> Manifest:
        """Merge-patch labels/annotations and the non-system fields, or create the object if missing."""
        ref = ObjectRef.of(obj)
        try:
            return self.patch_spec(ref, apply_patch_of(obj))
        except NotFound:
            pass
        try:
            return self.create(obj)
        except Conflict:  # created concurrently: patch what is there now
            return self.patch_spec(ref, apply_patch_of(obj))

    def patch_spec(self, ref: ObjectRef, patch: Manifest, resource_version: str | None = None) -> Manifest:
        """Merge-patch the main resource (``status`` is left out: the server ignores it there anyway)."""
        info = self._resource(ref.api_version, ref.kind)
        body = {k: v for k, v in json_shape(patch or {}).items() if not (info.has_status and k == "status")}
        body = _with_resource_version(body, resource_version)
        if not body:
            return self.get(ref.api_version, ref.kind, ref.name, ref.namespace)
        return self._patch(info, _ns(info, ref.namespace), ref.name, body, None)

    def patch_status(self, ref: ObjectRef, status: Manifest, resource_version: str | None = None) -> Manifest:
        """Merge-patch ``{"status": status}`` through the ``/status`` subresource."""
        info = self._resource(ref.api_version, ref.kind)
        info.require("status")
        body = _with_resource_version({"status": json_shape(status, "status")}, resource_version)
        return self._patch(info, _ns(info, ref.namespace), ref.name, body, "status")

    def get_scale(self, ref: ObjectRef) -> Scale:
        """Read the ``/scale`` subresource."""
        info = self._resource(ref.api_version, ref.kind)
        return _scale_from(self._read(info, _ns(info, ref.namespace), ref.name, "scale"))

    def set_scale(self, ref: ObjectRef, replicas: int) -> Scale:
        """Merge-patch ``spec.replicas`` through the ``/scale`` subresource."""
        info = self._resource(ref.api_version, ref.kind)
        body = {"spec": {"replicas": replicas}}
        return _scale_from(self._patch(info, _ns(info, ref.namespace), ref.name, body, "scale"))

    def delete(self, ref: ObjectRef) -> None:
        """DELETE the object (the server keeps it until its finalizers are gone)."""
        info = self._resource(ref.api_version, ref.kind)
        namespace = _ns(info, ref.namespace)
        _check_address(info, namespace, ref.name)
        what = f"delete {_describe(info, namespace, ref.name)}"
        if info.is_core:
            self._call(what, info, lambda: self._rest("DELETE", info.path(namespace, ref.name), query=self._dry()))
            return
        method = "delete_namespaced_custom_object" if info.namespaced else "delete_cluster_custom_object"
        self._call(
            what, info, lambda: getattr(self._custom, method)(*_custom_args(info, namespace), ref.name, **self._write())
        )

    def post_event(self, obj: Manifest, reason: str, message: str, event_type: str = "Normal") -> Manifest | None:
        """Record a core/v1 Event whose involvedObject is ``obj``, aggregated (:mod:`tasks.clients.cluster.recorder`)."""
        return self.events.record(obj, reason, message, event_type)

    # ------------------------------------------------------------------ requests

    def _read(self, info: ResourceInfo, namespace: str | None, name: str, sub: str | None = None) -> Manifest:
        _check_address(info, namespace, name)
        what = f"get {_describe(info, namespace, name)}{'/' + sub if sub else ''}"
        if info.is_core:
            return self._call(what, info, lambda: self._rest("GET", info.path(namespace, name, sub)))
        method = _custom_method("get", info, sub)
        return self._call(
            what, info, lambda: getattr(self._custom, method)(*_custom_args(info, namespace), name, **self._raw())
        )

    def _patch(self, info: ResourceInfo, namespace: str | None, name: str, body: Manifest, sub: str | None) -> Manifest:
        _check_address(info, namespace, name)
        what = f"patch {_describe(info, namespace, name)}{'/' + sub if sub else ''}"
        if info.is_core:
            return self._call(
                what,
                info,
                lambda: self._rest(
                    "PATCH", info.path(namespace, name, sub), body=body, content_type=MERGE_PATCH, query=self._fm()
                ),
            )
        method = _custom_method("patch", info, sub)
        return self._call(
            what,
            info,
            lambda: getattr(self._custom, method)(
                *_custom_args(info, namespace),
                name,
                body,
                field_manager=FIELD_MANAGER,
                _content_type=MERGE_PATCH,
                **self._write(),
            ),
        )

    def _list_all(self, info: ResourceInfo, namespace: str | None, selector: str | None) -> Manifests:
        items: Manifests = []
        token: str | None = None
        while True:
            page = self._list_page(info, namespace, selector, token)
            items.extend(
                {"apiVersion": info.api_version, "kind": info.kind, **item} for item in page.get("items") or []
            )
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _list_page(
        self, info: ResourceInfo, namespace: str | None, selector: str | None, token: str | None
    ) -> Manifest:
        what = f"list {info.plural}" + (f" in {namespace}" if namespace else "")
        if info.is_core:
            query = [("limit", _LIST_PAGE)] + [
                (k, v) for k, v in (("labelSelector", selector), ("continue", token)) if v
            ]
            return self._call(what, info, lambda: self._rest("GET", info.path(namespace), query=query))
        args: tuple[str, ...]
        if info.namespaced and namespace is None:
            method, args = "list_custom_object_for_all_namespaces", (info.group, info.version, info.plural)
        else:
            method = "list_namespaced_custom_object" if info.namespaced else "list_cluster_custom_object"
            args = _custom_args(info, namespace)
        return self._call(
            what,
            info,
            lambda: getattr(self._custom, method)(
                *args, label_selector=selector, limit=_LIST_PAGE, _continue=token, **self._raw()
            ),
        )

    def _raw(self) -> dict[str, Any]:
        """Options that make a typed call return the raw response, with our timeout."""
        return {"_preload_content": False, "_request_timeout": self.request_timeout}

    def _write(self) -> dict[str, Any]:
        """:meth:`_raw` for a typed write call, with ``dry_run="All"`` in a dry run."""
        return {**self._raw(), **({"dry_run": "All"} if self.dry_run else {})}

    def _dry(self) -> Query:
        """The query of a raw write: ``dryRun=All`` in a dry run."""
        return [("dryRun", "All")] if self.dry_run else []

    def _fm(self) -> Query:
        """The query of a raw create or patch: the field manager, and ``dryRun=All`` in a dry run."""
        return _FM + self._dry()

    def _rest(
        self,
        method: str,
        path: str,
        *,
        body: Manifest | None = None,
        query: Query | None = None,
        content_type: str | None = None,
    ) -> Any:
        """One request to an arbitrary API path; raises ``ApiException`` on a non-2xx answer."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*request, _request_timeout=self.request_timeout)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def _call(self, what: str, info: ResourceInfo | None, send: Callable[[], Any]) -> Manifest:
        """Run one request and decode its JSON body, translating every failure to a typed error."""
        failure: ClusterError | None = None
        try:
            response = send()
        except ApiException as exc:
            failure = _from_api_exception(exc, what, info)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            failure = Unavailable(f"{what}: API server unreachable ({type(exc).__name__})", reason="Unreachable")
        if failure is not None:
            raise failure
        try:
            return _decode(response)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:  # e.g. a proxy's HTML error page
            failure = Unavailable(f"{what}: malformed response ({type(exc).__name__})", reason="BadResponse")
        raise failure

    # ------------------------------------------------------------------ discovery

    def _resource(self, api_version: str, kind: str) -> ResourceInfo:
        """The resource for a kind: the static table first, then API discovery (cached)."""
        info = lookup(api_version, kind) or self._discovered.get((api_version, kind))
        if info is not None:
            return info
        with self._discovery_lock:
            self._discover(api_version)
        info = self._discovered.get((api_version, kind))
        return info if info is not None else resource_for(api_version, kind)

    def _discover(self, api_version: str) -> None:
        """Read ``/apis/<group>/<version>`` (or ``/api/v1``) and remember every kind it serves."""
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            listing = self._call(f"discover {api_version}", None, lambda: self._rest("GET", path))
        except (NotFound, Forbidden):
            return
        names = {r.get("name", "") for r in listing.get("resources") or []}
        for res in listing.get("resources") or []:
            name = res.get("name", "")
            if "/" in name or not res.get("kind"):
                continue
            self._discovered[(api_version, res["kind"])] = ResourceInfo(
                group,
                version,
                res["kind"],
                name,
                bool(res.get("namespaced")),
                has_status=f"{name}/status" in names,
                has_scale=f"{name}/scale" in names,
            )


_FM = [("fieldManager", FIELD_MANAGER)]


def _ns(info: ResourceInfo, namespace: str | None) -> str | None:
    """The namespace a request addresses: ``default`` for namespaced kinds, none for cluster ones."""
    return (namespace or "default") if info.namespaced else None


def _check_address(info: ResourceInfo, namespace: str | None, name: str) -> None:
    """``Invalid`` when ``name``/``namespace`` are not ones the API server accepts
    (:func:`engine.api.identity.address_error`): they never become part of a request path."""
    problem = address_error(info.api_version, info.kind, name, namespace)
    if problem:
        raise Invalid.value(problem)


def _describe(info: ResourceInfo, namespace: str | None, name: str) -> str:
    return f"{info.resource} {namespace + '/' if namespace else ''}{name}"


def _custom_args(info: ResourceInfo, namespace: str | None) -> tuple[str, ...]:
    """Leading positional arguments of ``CustomObjectsApi`` calls: group, version, [namespace], plural."""
    if info.namespaced:
        return (info.group, info.version, namespace or "default", info.plural)
    return (info.group, info.version, info.plural)


def _custom_method(verb: str, info: ResourceInfo, sub: str | None) -> str:
    scope = "namespaced" if info.namespaced else "cluster"
    return f"{verb}_{scope}_custom_object" + (f"_{sub}" if sub else "")


def _with_resource_version(body: Manifest, resource_version: str | None) -> Manifest:
    """``body`` with ``metadata.resourceVersion`` set: the server's optimistic-concurrency precondition."""
    if resource_version is None:
        return body
    meta = dict(body.get("metadata") or {})
    meta["resourceVersion"] = str(resource_version)
    return {**body, "metadata": meta}


def _decode(response: Any) -> Manifest:
    """JSON-decode a raw response body (``{}`` when empty)."""
    data = response.data
    if not data:
        return {}
    decoded: Manifest = json.loads(data)
    return decoded


def _scale_from(scale: Manifest) -> Scale:
    """An ``autoscaling/v1`` Scale object as a :class:`Scale`."""
    view = ScaleView.model_validate(scale)
    return Scale(
        replicas=int(view.spec.replicas or 0),
        status_replicas=view.status.replicas,
        selector=view.status.selector,
        resource_version=view.metadata.resource_version,
    )


def _from_api_exception(exc: ApiException, what: str, info: ResourceInfo | None) -> ClusterError:
    """Map an HTTP error to a typed error, keeping only the server's Status message and reason.

    For Secrets even the server message is dropped: validation messages may quote field values.
    """
    status = _status_body(exc)
    reason = status.get("reason") or (exc.reason if isinstance(exc.reason, str) else None)
    causes = (status.get("details") or {}).get("causes") or []
    field = causes[0].get("field") if causes and isinstance(causes[0], dict) else None
    if info is not None and info.kind == "Secret":
        detail = reason or ""
    else:
        detail = status.get("message") or reason or ""
    message = f"{what}: {detail}"[:_MAX_MESSAGE]
    code = exc.status or 0
    if code == 404:
        return NotFound(message, reason=reason)
    if code == 409:
        return Conflict(message, reason=reason)
    if code in (400, 422):
        return Invalid(message, field=field, reason=reason)
    if code in (401, 403):
        return Forbidden(message, reason=reason)
    if code == 429 or code >= 500 or code == 0:
        unavailable = Unavailable(message, reason=reason)
        unavailable.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
        return unavailable
    error = ClusterError(message, reason=reason)
    error.status = code
    return error


def _retry_after(exc: ApiException) -> float | None:
    """Seconds the server asked us to wait (``Retry-After`` on 429/503), if it said so."""
    value = (exc.headers or {}).get("Retry-After") if hasattr(exc.headers or {}, "get") else None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _status_body(exc: ApiException) -> dict[str, Any]:
    """The ``Status`` object of an error response, or ``{}``."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}
