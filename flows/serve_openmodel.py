"""The ``serve-openmodel`` flow: serve an llmaz OpenModel in a namespace (llmaz's Playground role).

Lifecycle, top to bottom:

1. read the OpenModel (one being deleted is refused), validate its source as llmaz's webhook does and its flavors (accelerator limits whole
   counts, ``TP``/``PP`` sizes) as the Deployment needs them (``Validated`` condition);
2. warm its weights once into the namespace's shared ModelCache, which every later rollout of the model
   reuses (``Cached`` condition); until the cache is Available nothing is served;
3. place it: the requested flavor or the first, falling back to the next while no Node matches a
   flavor's nodeSelector, saying which flavor and why;
4. write the vLLM Deployment + Service (served model name = the OpenModel's name; the flavor's limits as
   requests and limits; its nodeSelector on the pod), only what changed, once every rendered object's identity
   is one the API server accepts (else nothing is written).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from engine.api.llmaz import API_VERSION as LLMAZ_API_VERSION
from engine.api.registry import OPEN_MODEL
from engine.caches.lookup import model_cache_pvc
from engine.changes import being_deleted
from engine.rollout.openmodel import DEFAULT_IMAGE, check_flavor, choose_flavor, render_openmodel, validate_openmodel
from engine.rollout.workloads import identity_problems, stamp
from flows.exitcodes import flow_result
from flows.parameters import ClusterTarget, ImageRef, NamespaceName, ObjectName, Setting
from flows.runs import flow
from tasks.caches import mark_used
from tasks.clients.cluster import Cluster, Manifest, ObjectRef, connect
from tasks.clients.cluster.errors import NotFound
from tasks.clients.cluster.recorder import record_event
from tasks.clients.events import emit_change
from tasks.serve_openmodel import cache_condition, node_labels, read_openmodel, warm_cache, write_conditions
from tasks.tracking import markdown_artifact, run_logger, tracked
from tasks.workloads import WriteLog, read_live, write_object


@dataclass
class ServeReport:
    """What the run did: ``state`` is Serving, WaitingForCache or Failed, with a one-line message."""

    model: str
    namespace: str
    state: str
    message: str
    flavor: str | None = None
    cache: str | None = None
    writes: WriteLog = field(default_factory=WriteLog)

    @property
    def degraded(self) -> list[str]:
        """Why the run was degraded (exit 3, the ``Degraded`` run state): the OpenModel is not Serving (yet)."""
        return [] if self.state == "Serving" else [f"{self.model} in {self.namespace}: {self.state} - {self.message}"]


class ServeError(RuntimeError):
    """The OpenModel cannot be served as asked (missing, invalid, unknown flavor, no Node fits)."""


@flow(name="serve-openmodel", timeout_seconds=600, log_prints=True)
def serve_openmodel(
    model: ObjectName,
    namespace: NamespaceName,
    replicas: Annotated[int, Field(ge=0, le=1000)] = 1,
    flavor: Setting = "",
    cluster: ClusterTarget = "",
    image: ImageRef = DEFAULT_IMAGE,
) -> ServeReport:
    """Serve an llmaz OpenModel with vLLM from its shared cache, placed by its flavors.

    Args:
        model: Name of the OpenModel (cluster-scoped).
        namespace: Namespace to serve it in (its ModelCache lives there too).
        replicas: Number of vLLM replicas.
        flavor: Flavor to start from; empty = the first. The next flavors in order are the fallbacks.
        cluster: Empty = $MODELPLANE_CLUSTER, else kubeconfig or in-cluster; 'kubeconfig:PATH[#context]'; or a
            manifests directory/file.
        image: The vLLM image.

    Returns:
        The report: the state (Serving or not yet), the flavor chosen, the writes; not Serving yet ends the run
        Failed named Degraded (:func:`flows.exitcodes.flow_result`).

    Raises:
        ServeError: The OpenModel does not exist, its source or a flavor is invalid, no flavor fits a Node, or a
            rendered object would be refused (the reason is also a Warning Event on the OpenModel).
    """
    logger = run_logger()
    now = datetime.now(UTC).replace(microsecond=0)
    conn = connect(cluster)

    try:
        obj = read_openmodel(conn, model)
    except NotFound:
        raise ServeError(f"OpenModel {model!r} not found") from None
    if being_deleted(obj):  # a workload made for it now would outlive it
        raise ServeError(f"OpenModel {model!r} is being deleted: nothing is served for it")
    openmodel, source, errors = validate_openmodel(obj)
    if openmodel is None or source is None or errors:
        write_conditions(conn, obj, errors, None, now)
        raise refused(conn, obj, f"OpenModel {model}: " + "; ".join(str(e) for e in errors))
    try:
        check_flavor(openmodel, flavor)  # a flavor it does not have: nothing to cache or place
    except ValueError as exc:
        raise refused(conn, obj, f"OpenModel {model}: {exc}") from None

    cache = None
    if source.downloadable:
        try:
            cache = warm_cache(conn, namespace, source, requested_by=f"OpenModel/{model}")
        except NotFound as exc:  # most often the namespace itself does not exist
            message = f"OpenModel {model}: cannot keep its cache in namespace {namespace!r}: {exc}"
            raise refused(conn, obj, message) from None
        write_conditions(conn, obj, [], cache_condition(cache.model, namespace), now)
        if model_cache_pvc(cache.model) is None:
            report = ServeReport(
                model, namespace, "WaitingForCache", cache_condition(cache.model, namespace).message, cache=cache.name
            )
            record_event(conn, obj, "WaitingForCache", f"in {namespace}: {report.message}")
            publish(report)
            logger.warning("serve-openmodel: %s", report.message)
            return flow_result(report, report.degraded)
    else:
        write_conditions(conn, obj, [], None, now)

    try:
        placement = choose_flavor(openmodel, flavor or None, node_labels(conn))
    except ValueError as exc:
        raise refused(conn, obj, f"OpenModel {model}: {exc}") from None
    if placement.checked and placement.flavor is None and openmodel.spec.inference_config.flavors:
        raise refused(conn, obj, f"OpenModel {model}: {placement.message}")

    report = ServeReport(
        model,
        namespace,
        "Serving",
        placement.message,
        flavor=placement.flavor.name if placement.flavor else None,
        cache=cache.name if cache else None,
    )
    pvc = model_cache_pvc(cache.model) if cache else None
    rendered = [stamp(o) for o in render_openmodel(openmodel, source, pvc, namespace, replicas, placement, image)]
    problems = identity_problems(rendered)
    if problems:  # checked before the first write: a run never leaves half its objects behind
        raise refused(conn, obj, f"OpenModel {model}: cannot be served in {namespace}: " + "; ".join(problems))
    for desired in rendered:
        write_object(conn, desired, read_live(conn, desired), report.writes)
    if report.writes.created or report.writes.updated:
        record_event(conn, obj, "Served", f"in {namespace}: {report.writes.summary()}; {placement.message}")
        if cache is not None:
            mark_used(conn, cache, now)
        emit_change(
            ObjectRef(LLMAZ_API_VERSION, OPEN_MODEL, model),
            "served",
            {"namespace": namespace, "flavor": report.flavor, "reason": report.message},
        )
    publish(report)
    logger.info("serve-openmodel: %s in %s on %s", model, namespace, placement.message)
    return flow_result(report, report.degraded)


def refused(cluster: Cluster, obj: Manifest, message: str) -> ServeError:
    """The error ending the run, also recorded as a Warning Event on the OpenModel (what ``kubectl describe`` shows).

    Args:
        cluster: The cluster the OpenModel lives in.
        obj: The OpenModel as read.
        message: Why it cannot be served.

    Returns:
        The error to raise.
    """
    record_event(cluster, obj, "ServeFailed", message, "Warning")
    return ServeError(message)


def publish(report: ServeReport) -> None:
    """A markdown summary artifact (only inside a flow run).

    Args:
        report: The run's report.
    """
    if not tracked():
        return
    changes = ", ".join(report.writes.created + report.writes.updated) or "nothing changed"
    markdown_artifact(
        key="serve-openmodel",
        markdown=f"**{report.model}** in `{report.namespace}`: {report.state}\n\n- {report.message}\n- cache: {report.cache or '-'}\n- writes: {changes}\n",
        description=f"serve-openmodel {report.model}",
    )
