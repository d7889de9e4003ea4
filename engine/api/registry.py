"""Every custom resource kind Modelplane serves, with the facts CRDs, backends, events and the CLI share.

This module is the only place an apiVersion of a Modelplane API group is spelled. Its table
(:data:`KINDS`) is the single source for plural names, scope, short names, subresources and printer
columns: the CRD generator (:mod:`engine.api.crds`), manifest validation (:mod:`engine.api.validate`,
which ``modelplane validate`` and the boundary reader use), the REST mapping and schema enforcement of
both cluster backends (``tasks.clients.cluster.resources``/``schema``) and the event ids (``tasks.clients.events``) all
read it through :func:`kinds` and :func:`kind_info`, so they cannot disagree and a new kind needs no
edit outside this table and its model (DESIGN.md, "Adding a custom resource kind").

Also here, as constants only: the apiVersions of Kthena's serving kinds Modelplane renders but whose
CRDs are Kthena's (``ModelServing``, ``ModelServer``, ``ModelRoute``). Built-in Kubernetes kinds and
third-party kinds with no Modelplane model (KServe, Gateway API) stay in ``tasks.clients.cluster.resources``.

Each apiVersion is a ``Final`` constant typed by a ``Literal`` alias: the models annotate their
``apiVersion`` field with the alias, and mypy checks that constant and alias agree.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, cast

from pydantic import Field, create_model

from engine.api.meta import KindList, KubeModel

__all__ = [
    "AIM_API",
    "AIM_GROUP",
    "AimApiVersion",
    "KINDS",
    "KTHENA_API",
    "KTHENA_GROUP",
    "KTHENA_NETWORKING_API",
    "KTHENA_NETWORKING_GROUP",
    "KTHENA_WORKLOAD_API",
    "KTHENA_WORKLOAD_GROUP",
    "KindInfo",
    "KthenaApiVersion",
    "LLMAZ_API",
    "LLMAZ_GROUP",
    "LLMD_API",
    "LLMD_GROUP",
    "LlmazApiVersion",
    "LlmdApiVersion",
    "PrinterColumn",
    "family_of",
    "group_of",
    "kind_info",
    "kinds",
    "registered",
]

LlmdApiVersion: TypeAlias = Literal["llmd.ai/v1alpha1"]
LLMD_API: Final[LlmdApiVersion] = "llmd.ai/v1alpha1"
LlmazApiVersion: TypeAlias = Literal["llmaz.io/v1alpha1"]
LLMAZ_API: Final[LlmazApiVersion] = "llmaz.io/v1alpha1"
KthenaApiVersion: TypeAlias = Literal["registry.volcano.sh/v1alpha1"]
KTHENA_API: Final[KthenaApiVersion] = "registry.volcano.sh/v1alpha1"
AimApiVersion: TypeAlias = Literal["aim.silogen.ai/v1alpha1"]
AIM_API: Final[AimApiVersion] = "aim.silogen.ai/v1alpha1"

KTHENA_WORKLOAD_API: Final = "workload.serving.volcano.sh/v1alpha1"
"""Kthena's ``ModelServing`` (a gang-scheduled workload); its CRD is Kthena's, not generated here."""
KTHENA_NETWORKING_API: Final = "networking.serving.volcano.sh/v1alpha1"
"""Kthena's ``ModelServer`` and ``ModelRoute``; their CRDs are Kthena's, not generated here."""


def group_of(api_version: str) -> str:
    """The API group of ``group/version`` (empty for the core group's ``v1``)."""
    return api_version.rpartition("/")[0]


LLMD_GROUP: Final = group_of(LLMD_API)
LLMAZ_GROUP: Final = group_of(LLMAZ_API)
KTHENA_GROUP: Final = group_of(KTHENA_API)
AIM_GROUP: Final = group_of(AIM_API)
KTHENA_WORKLOAD_GROUP: Final = group_of(KTHENA_WORKLOAD_API)
KTHENA_NETWORKING_GROUP: Final = group_of(KTHENA_NETWORKING_API)

# The kinds Modelplane serves: the one place each kind's name is spelled (the entries below use them).
VARIANT_AUTOSCALING: Final = "VariantAutoscaling"
OPEN_MODEL: Final = "OpenModel"
MODEL: Final = "Model"
AUTOSCALING_POLICY: Final = "AutoscalingPolicy"
AUTOSCALING_POLICY_BINDING: Final = "AutoscalingPolicyBinding"
AIM_CLUSTER_MODEL: Final = "AIMClusterModel"
AIM_NAMESPACE_CONFIG: Final = "AIMNamespaceConfig"
AIM_SERVICE_TEMPLATE: Final = "AIMServiceTemplate"
AIM_SERVICE: Final = "AIMService"
MODEL_CACHE: Final = "ModelCache"

_FAMILIES: Final[dict[str, str]] = {AIM_GROUP: "aim", KTHENA_GROUP: "kthena", LLMD_GROUP: "llmd", LLMAZ_GROUP: "llmaz"}


def family_of(group: str) -> str | None:
    """The short family name of a Modelplane API group (``aim``, ``kthena``, ...), as event ids use it."""
    return _FAMILIES.get(group)


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry of a CRD (what ``kubectl get`` shows)."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0

    def to_dict(self) -> dict[str, str | int]:
        """The CRD form; ``priority`` only when non-zero, as the apiserver stores it."""
        column: dict[str, str | int] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            column["priority"] = self.priority
        return column


def _condition(type_: str) -> str:
    return f'.status.conditions[?(@.type=="{type_}")].status'


_AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class KindInfo:
    """Static facts about one custom resource kind; ``module`` holds the pydantic model named ``kind``."""

    api_version: str
    kind: str
    plural: str
    module: str
    """Dotted module path of the model class (and of ``<kind>List``), e.g. ``engine.api.llmd``."""
    namespaced: bool = True
    has_status: bool = True
    has_scale: bool = False
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("modelplane",)
    printer_columns: tuple[PrinterColumn, ...] = ()
    event_name: str = ""
    """The kind in event resource ids (``modelplane.aim.template...``); the lower-case kind when empty."""
    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = None

    @property
    def group(self) -> str:
        """The API group, e.g. ``llmd.ai``."""
        return group_of(self.api_version)

    @property
    def version(self) -> str:
        """The API version within the group, e.g. ``v1alpha1``."""
        return self.api_version.rpartition("/")[2]

    @property
    def singular(self) -> str:
        """Lower-case singular name, as Kubernetes derives it."""
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        """``<plural>.<group>``, the CustomResourceDefinition's metadata.name."""
        return f"{self.plural}.{self.group}"

    @property
    def list_kind(self) -> str:
        """The List kind, e.g. ``VariantAutoscalingList``."""
        return f"{self.kind}List"

    @property
    def short_kind(self) -> str:
        """The kind as event ids spell it."""
        return self.event_name or self.kind.lower()

    def model(self) -> type[KubeModel]:
        """The pydantic model class for this kind."""
        return self._class(self.kind)

    def list_model(self) -> type[KindList[KubeModel]]:
        """The pydantic model class of this kind's List (:class:`~engine.api.meta.KindList` of :meth:`model`)."""
        return _list_model(self)

    def has_status_phase(self) -> bool:
        """Whether the status carries a ``status`` phase (Pending/.../Failed), read from the model."""
        status = self.model().model_fields.get("status")
        if status is None:
            return False
        return any(
            isinstance(arg, type) and issubclass(arg, KubeModel) and "status" in arg.model_fields
            for arg in (status.annotation, *getattr(status.annotation, "__args__", ()))
        )

    def _class(self, name: str) -> type[KubeModel]:
        return _model_class(self.module, name, self.kind)


@functools.cache
def _model_class(module: str, name: str, kind: str) -> type[KubeModel]:
    """The model class ``name`` of ``module`` (looked up once: validating a folder asks for it per document)."""
    found = getattr(importlib.import_module(module), name, None)
    if not (isinstance(found, type) and issubclass(found, KubeModel)):
        raise TypeError(f"{module}.{name} is not a KubeModel (kind registry entry {kind})")
    return found


@functools.cache
def _list_model(info: KindInfo) -> type[KindList[KubeModel]]:
    """``<Kind>List``: the generic List of the kind's model, its apiVersion and List kind as defaults (made once)."""
    # KindList[<the kind's model>], spelled as the call it is: the item model is known at run time only
    base = cast("type[KindList[KubeModel]]", KindList.__class_getitem__(info.model()))
    return create_model(
        info.list_kind,
        __base__=base,
        __module__=info.module,
        api_version=(str, Field(info.api_version, alias="apiVersion")),
        kind=(str, info.list_kind),
    )


KINDS: Final[tuple[KindInfo, ...]] = (
    KindInfo(
        LLMD_API,
        VARIANT_AUTOSCALING,
        "variantautoscalings",
        "engine.api.llmd",
        short_names=("va",),
        printer_columns=(
            PrinterColumn("Model", ".spec.modelID"),
            PrinterColumn("Accelerator", ".status.currentAlloc.accelerator"),
            PrinterColumn("CurrentReplicas", ".status.currentAlloc.numReplicas", "integer"),
            PrinterColumn("Optimized", ".status.desiredOptimizedAlloc.numReplicas", "integer"),
            PrinterColumn("MetricsReady", _condition("MetricsAvailable")),
            PrinterColumn("Attained", ".status.slo.attained", "number"),
            PrinterColumn("SLO", ".status.slo.target", "number"),
            _AGE,
            PrinterColumn("Variant", ".spec.variantID", priority=1),
            PrinterColumn("Target", ".spec.scaleTargetRef.name", priority=1),
            PrinterColumn("OptimizationReady", _condition("OptimizationReady"), priority=1),
        ),
    ),
    KindInfo(
        LLMAZ_API,
        OPEN_MODEL,
        "openmodels",
        "engine.api.llmaz",
        namespaced=False,
        short_names=("om",),
        printer_columns=(
            PrinterColumn("Family", ".spec.familyName"),
            PrinterColumn("ModelID", ".spec.source.modelHub.modelID"),
            PrinterColumn("URI", ".spec.source.uri", priority=1),
            _AGE,
        ),
    ),
    KindInfo(
        KTHENA_API,
        MODEL,
        "models",
        "engine.api.kthena",
        short_names=("km",),
        event_name="model",
        printer_columns=(
            PrinterColumn("ModelName", ".spec.name"),
            PrinterColumn("Backends", ".spec.backends[*].name"),
            PrinterColumn("Owner", ".spec.owner", priority=1),
            _AGE,
        ),
    ),
    KindInfo(
        KTHENA_API,
        AUTOSCALING_POLICY,
        "autoscalingpolicies",
        "engine.api.kthena",
        short_names=("asp",),
        event_name="policy",
        printer_columns=(
            PrinterColumn("Tolerance", ".spec.tolerancePercent", "integer"),
            PrinterColumn("Metrics", ".spec.metrics[*].metricName"),
            _AGE,
        ),
    ),
    KindInfo(
        KTHENA_API,
        AUTOSCALING_POLICY_BINDING,
        "autoscalingpolicybindings",
        "engine.api.kthena",
        short_names=("aspb",),
        event_name="binding",
        printer_columns=(
            PrinterColumn("Policy", ".spec.policyRef.name"),
            PrinterColumn("Target", ".spec.scalingConfiguration.target.targetRef.name"),
            PrinterColumn("Current", ".status.currentReplicas", "integer"),
            PrinterColumn("Desired", ".status.desiredReplicas", "integer"),
            PrinterColumn("LastScale", ".status.lastScaleTime", "date", priority=1),
            _AGE,
        ),
    ),
    KindInfo(
        AIM_API,
        AIM_CLUSTER_MODEL,
        "aimclustermodels",
        "engine.api.aim",
        namespaced=False,
        short_names=("aimcm",),
        event_name="model",
        printer_columns=(
            PrinterColumn("Name", ".spec.name"),
            PrinterColumn("Image", ".spec.image"),
            PrinterColumn("Ready", _condition("Ready")),
            _AGE,
        ),
    ),
    KindInfo(
        AIM_API,
        AIM_NAMESPACE_CONFIG,
        "aimnamespaceconfigs",
        "engine.api.aim",
        has_status=False,
        short_names=("aimnc",),
        event_name="namespaceconfig",
        printer_columns=(
            PrinterColumn("Gateway", ".spec.routing.gateway.name"),
            PrinterColumn("StorageClass", ".spec.cacheStorageClassName"),
            _AGE,
        ),
    ),
    KindInfo(
        AIM_API,
        AIM_SERVICE_TEMPLATE,
        "aimservicetemplates",
        "engine.api.aim",
        short_names=("aimst",),
        event_name="template",
        printer_columns=(
            PrinterColumn("Model", ".spec.model"),
            PrinterColumn("GPU", ".spec.gpuModel"),
            PrinterColumn("GPUs", ".spec.gpusPerReplica", "integer"),
            PrinterColumn("Metric", ".spec.metric"),
            PrinterColumn("Precision", ".spec.precision"),
            PrinterColumn("Status", ".status.status"),
            _AGE,
        ),
    ),
    KindInfo(
        AIM_API,
        AIM_SERVICE,
        "aimservices",
        "engine.api.aim",
        short_names=("aimsvc",),
        event_name="service",
        printer_columns=(
            PrinterColumn("Model", ".spec.model"),
            PrinterColumn("Template", ".spec.templateRef"),
            PrinterColumn("Replicas", ".spec.replicas", "integer", priority=1),
            PrinterColumn("Status", ".status.status"),
            _AGE,
        ),
    ),
    KindInfo(
        AIM_API,
        MODEL_CACHE,
        "modelcaches",
        "engine.api.aim",
        short_names=("mc",),
        event_name="cache",
        printer_columns=(
            PrinterColumn("Source", ".spec.sourceUri"),
            PrinterColumn("Size", ".spec.size", priority=1),
            PrinterColumn("Status", ".status.status"),
            PrinterColumn("PVC", ".status.persistentVolumeClaim"),
            _AGE,
        ),
    ),
)
"""The kinds Modelplane serves, in the order the CRDs are rendered."""


def _index(table: tuple[KindInfo, ...]) -> dict[tuple[str, str], KindInfo]:
    return {(k.api_version, k.kind): k for k in table}


_lock = threading.Lock()
_active: tuple[KindInfo, ...] = KINDS
_active_index: dict[tuple[str, str], KindInfo] = _index(KINDS)


def kinds() -> tuple[KindInfo, ...]:
    """Every kind currently served: :data:`KINDS`, plus any added by :func:`registered`."""
    return _active


def kind_info(api_version: str, kind: str) -> KindInfo | None:
    """The registry entry for ``apiVersion``/``kind``, or ``None`` if it is not one of ours."""
    return _active_index.get((api_version, kind))


@contextlib.contextmanager
def registered(*extra: KindInfo) -> Iterator[tuple[KindInfo, ...]]:
    """The registry with ``extra`` kinds added while the block runs (process-wide, every thread).

    Every consumer reads the registry through :func:`kinds`/:func:`kind_info`, so a kind added here
    gets its CRD, validation, REST mapping and local-backend schema with no other edit; the test of
    "Adding a custom resource kind" (DESIGN.md) proves that with a kind defined only in the test.
    """
    global _active, _active_index
    with _lock:
        previous = _active, _active_index
        _active = previous[0] + tuple(e for e in extra if (e.api_version, e.kind) not in previous[1])
        _active_index = _index(_active)
    try:
        yield _active
    finally:
        with _lock:
            _active, _active_index = previous
