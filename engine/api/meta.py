"""Shared building blocks of the API models: the strict base class and the Kubernetes types.

Every custom resource model in ``engine.api`` derives from :class:`KubeModel`: Python attributes are
snake_case, the wire names are the exact camelCase names of the seeds (aliases), unknown fields are
rejected (a typo in a manifest is an error, not a silently dropped field) and attribute docstrings
become the descriptions of the JSON schema, so the generated CRDs carry them for ``kubectl explain``.

The docstrings are read from the source only when a JSON schema is generated (``modelplane crds``), never
when a model class is defined: pydantic's ``use_attribute_docstrings`` parses source with ``ast`` at class
creation, in whichever thread imports the module first, and CPython 3.11.7 (gh-106905) raises
``SystemError: AST constructor recursion depth mismatch`` when two threads build ASTs at once, which a
flow run importing models from task threads did.

Validation rules are written once, as pydantic ``Field`` constraints or ``Annotated`` metadata: the
model enforces them and :mod:`engine.api.crds` turns the same JSON schema into the CRD's
``openAPIV3Schema``. Kubernetes types that Modelplane does not need to look into (affinity, free-form
JSON configuration, ``valueFrom``) are ``x-kubernetes-preserve-unknown-fields`` objects.

Also here: Go durations (:func:`parse_duration`), RFC 3339 times and the condition helpers
(:func:`set_condition`, :func:`get_condition`). Everything is pure; the clock is passed in as ``now``.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from engine.api.secrets import SecretKey, SecretName, secret_key_ref_error
from engine.scopes import scoped

__all__ = [
    "Affinity",
    "Condition",
    "ConditionStatus",
    "Conditions",
    "ConfigMapKeySelector",
    "CrossVersionObjectReference",
    "DURATION_PATTERN",
    "Duration",
    "EnvFromSource",
    "EnvVar",
    "JSONObject",
    "KubeModel",
    "ListMeta",
    "LocalObjectReference",
    "ObjectMeta",
    "ObjectReference",
    "ParentReference",
    "QUANTITY_PATTERN",
    "Quantity",
    "ResourceRequirements",
    "SecretKeySelector",
    "Time",
    "format_time",
    "get_condition",
    "parse_duration",
    "parse_time",
    "set_condition",
]


class KubeModel(BaseModel):
    """Base of every API type: camelCase aliases, strict about unknown fields, docstrings as descriptions."""

    model_config = ConfigDict(
        populate_by_name=True,
        extra="forbid",
        validate_default=False,
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """The model's JSON schema with each field's attribute docstring as its description (the CRDs)."""
        schema = handler(core_schema)
        properties = handler.resolve_ref_schema(schema).get("properties", {})
        docs = attribute_docstrings(cls) if _WITH_DESCRIPTIONS.get() else {}
        for name, field in cls.model_fields.items():
            key = field.alias if field.alias in properties else name
            if key in properties and name in docs and field.description is None:
                properties[key].setdefault("description", docs[name])
        return schema

    def to_dict(self) -> dict[str, Any]:
        """The manifest form: camelCase keys, JSON-compatible values, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


_WITH_DESCRIPTIONS: contextvars.ContextVar[bool] = contextvars.ContextVar("_WITH_DESCRIPTIONS", default=True)


@contextlib.contextmanager
def schema_without_descriptions() -> Iterator[None]:
    """JSON schemas generated inside leave out the attribute docstrings: validating a manifest against its
    CRD schema needs no descriptions, and so never parses source while flows run (the module docs say why)."""
    with scoped(_WITH_DESCRIPTIONS, False):
        yield


_DOCSTRINGS: dict[type, dict[str, str]] = {}
_DOCSTRINGS_LOCK = threading.Lock()


def attribute_docstrings(cls: type[BaseModel]) -> dict[str, str]:
    """The docstrings under ``cls``'s field declarations and its bases' (a subclass's wins), by field name.

    Read from the source with pydantic's own extraction (``inspect``, not frames), once per class and under
    a lock, and only when a JSON schema is generated (see the module docs for why never at import).
    """
    from pydantic._internal._docs_extraction import extract_docstrings_from_cls

    with _DOCSTRINGS_LOCK:
        if cls not in _DOCSTRINGS:
            docs: dict[str, str] = {}
            for klass in reversed(cls.__mro__):
                if isinstance(klass, type) and issubclass(klass, BaseModel) and klass is not BaseModel:
                    docs.update(extract_docstrings_from_cls(klass, use_inspect=True))
            _DOCSTRINGS[cls] = docs
        return _DOCSTRINGS[cls]


# --------------------------------------------------------------------------------------------------
# Scalars: time, duration, quantity, free-form JSON
# --------------------------------------------------------------------------------------------------


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes ``metav1.Time``: ``2026-01-09T22:00:00Z``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | datetime) -> datetime:
    """An RFC 3339 timestamp as a tz-aware UTC datetime (a naive one is taken as UTC); ``ValueError`` if malformed."""
    if isinstance(text, datetime):
        moment = text
    else:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    return _aware(moment).astimezone(UTC)


def _aware(value: datetime) -> datetime:
    """Times without a zone are taken as UTC, so comparisons between times never fail."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


Time = Annotated[
    datetime,
    AfterValidator(_aware),
    PlainSerializer(format_time, return_type=str, when_used="json"),
]
"""A ``metav1.Time``: an RFC 3339 date-time, serialised in UTC with a ``Z`` suffix."""


DURATION_PATTERN = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"
"""A Go ``time.Duration`` string as ``metav1.Duration`` accepts it: ``15s``, ``1m30s``, ``0``, ``1.5h``."""

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(value: str) -> float:
    """Seconds in a Go duration string (``"1m30s"`` -> ``90.0``); raises ``ValueError`` if malformed.

    The scaling engine uses this for periods, stabilization windows and panic holds, which the seeds
    express as ``metav1.Duration`` strings.
    """
    text = value.strip()
    if text == "0":
        return 0.0
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"invalid duration {value!r}: expected a Go duration such as '15s' or '1m30s'")
    return sum(float(number) * _DURATION_UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))


MAX_DURATION_S = (2**63 - 1) / 1e9
"""The longest duration Go's ``time.Duration`` (an int64 of nanoseconds) holds, in seconds (about 292 years)."""


def _go_duration(value: str) -> str:
    if parse_duration(value) > MAX_DURATION_S:
        raise ValueError("longer than the longest Go duration (about 292 years)")
    return value


Duration = Annotated[str, Field(pattern=DURATION_PATTERN), AfterValidator(_go_duration)]
"""A ``metav1.Duration`` kept as its string form; use :func:`parse_duration` to get seconds. A duration that Go's
``time.ParseDuration`` refuses as too long is refused, as the upstream controllers' unmarshalling refuses it."""


QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""The pattern Kubernetes' own CRDs give a ``resource.Quantity``."""


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not re.match(QUANTITY_PATTERN, value):
        raise ValueError(f"String should match pattern '{QUANTITY_PATTERN}'")
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A ``resource.Quantity``: an integer or a string such as ``"100Gi"``, ``"500m"`` or ``"5"``."""


JSONObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""A free-form JSON object (``apiextensions.JSON`` or an unexpanded Kubernetes type)."""


# --------------------------------------------------------------------------------------------------
# Object metadata
# --------------------------------------------------------------------------------------------------


def _empty(value: Any) -> bool:
    return not value


class ObjectMeta(BaseModel):
    """The parts of ``metav1.ObjectMeta`` Modelplane reads; everything else is kept as it is.

    Labels, annotations, finalizers and owner references default to empty collections for easy
    reading and are left out of the manifest form while empty, so a round trip adds nothing.
    """

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    name: str | None = None
    generate_name: str | None = Field(None, alias="generateName")
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict, exclude_if=_empty)
    annotations: dict[str, str] = Field(default_factory=dict, exclude_if=_empty)
    generation: int | None = Field(None, ge=0)
    resource_version: str | None = Field(None, alias="resourceVersion")
    uid: str | None = None
    creation_timestamp: Time | None = Field(None, alias="creationTimestamp")
    deletion_timestamp: Time | None = Field(None, alias="deletionTimestamp")
    finalizers: list[str] = Field(default_factory=list, exclude_if=_empty)
    owner_references: list[dict[str, Any]] = Field(default_factory=list, alias="ownerReferences", exclude_if=_empty)


class ListMeta(BaseModel):
    """``metav1.ListMeta`` of a List response."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    resource_version: str | None = Field(None, alias="resourceVersion")
    continue_: str | None = Field(None, alias="continue")
    remaining_item_count: int | None = Field(None, alias="remainingItemCount")


Spec = TypeVar("Spec", bound=KubeModel)
Status = TypeVar("Status", bound=KubeModel)
Item = TypeVar("Item", bound=KubeModel)


class Resource(KubeModel, Generic[Spec]):
    """An object of a custom resource kind: ``apiVersion``, ``kind``, ``metadata`` and its ``spec``.

    One generic for every kind: a kind's model narrows ``api_version`` and ``kind`` to its own (a ``Literal``
    with the value as default) and names its spec model; :class:`ResourceWithStatus` adds the status.
    """

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: Spec


class ResourceWithStatus(Resource[Spec], Generic[Spec, Status]):
    """A :class:`Resource` whose kind has a status subresource: the status is absent until first written."""

    status: Status | None = None


class KindList(KubeModel, Generic[Item]):
    """A List of one kind, as a LIST answers: ``<Kind>List`` with the list's metadata and the items.

    One generic for every kind: :meth:`engine.api.registry.KindInfo.list_model` makes each kind's List model
    from it, with that kind's ``apiVersion`` and ``kind`` as defaults.
    """

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[Item] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Conditions
# --------------------------------------------------------------------------------------------------

ConditionStatus = Literal["True", "False", "Unknown"]

CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


CONDITION_MESSAGE_MAX = 32768
"""The most characters of a condition's message (``metav1.Condition``'s ``maxLength``)."""


class Condition(KubeModel):
    """A ``metav1.Condition``: one observation of an aspect of the object's state."""

    type: str = Field(max_length=316, pattern=CONDITION_TYPE_PATTERN)
    """Type of condition in CamelCase, e.g. ``MetricsAvailable``."""
    status: ConditionStatus
    """Status of the condition: True, False or Unknown."""
    observed_generation: int | None = Field(None, alias="observedGeneration", ge=0)
    """The ``metadata.generation`` the condition was set from."""
    last_transition_time: Time = Field(alias="lastTransitionTime")
    """When the condition last changed from one status to another."""
    reason: str = Field(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    """A programmatic identifier in CamelCase for the condition's last transition."""
    message: str = Field(max_length=CONDITION_MESSAGE_MAX)
    """A human-readable message with details about the transition."""


def one_line(text: object, limit: int) -> str:
    """``text`` on one line (each run of white space one space), cut to ``limit`` characters with ``...``."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def condition_message(text: str) -> str:
    """``text`` as a condition's message (:func:`one_line`, :data:`CONDITION_MESSAGE_MAX`): one that quotes a
    server's 40 kB error is still written, never refused by the API after the run acted, and shows whole."""
    return one_line(text, CONDITION_MESSAGE_MAX)


def _unique_types(conditions: list[Condition]) -> list[Condition]:
    seen: set[str] = set()
    for condition in conditions:
        if condition.type in seen:
            raise ValueError(f"duplicate condition type {condition.type!r}")
        seen.add(condition.type)
    return conditions


Conditions = Annotated[
    list[Condition],
    AfterValidator(_unique_types),
    Field(json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}),
]
"""A status condition list: at most one condition per type (a list-map keyed by ``type``)."""


def _as_condition(value: Condition | dict[str, Any]) -> Condition:
    return value if isinstance(value, Condition) else Condition.model_validate(value)


def get_condition(conditions: list[Condition | dict[str, Any]] | None, type: str) -> Condition | None:
    """The condition of the given type, or ``None`` if there is none."""
    for item in conditions or []:
        condition = _as_condition(item)
        if condition.type == type:
            return condition
    return None


def set_condition(
    conditions: list[Condition | dict[str, Any]] | None,
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> list[Condition]:
    """A new condition list with ``type`` set to the given status, reason and message.

    Follows the Kubernetes convention (``meta.SetStatusCondition``): ``lastTransitionTime`` moves to
    ``now`` only when the status changes (or the condition is new); a changed reason or message alone
    keeps the old transition time. Order is preserved, a new condition is appended, the input is not
    modified.
    """

    def updated(previous: Condition | None) -> Condition:
        if observed_generation is None and previous is not None:
            generation = previous.observed_generation
        else:
            generation = observed_generation
        return Condition(
            type=type,
            status=status,
            reason=reason,
            message=condition_message(message),
            last_transition_time=previous.last_transition_time
            if previous is not None and previous.status == status
            else now,
            observed_generation=generation,
        )

    result: list[Condition] = []
    found = False
    for item in conditions or []:
        current = _as_condition(item)
        if current.type == type:
            found = True
            result.append(updated(current))
        else:
            result.append(current.model_copy())
    if not found:
        result.append(updated(None))
    return result


# --------------------------------------------------------------------------------------------------
# References
# --------------------------------------------------------------------------------------------------


class LocalObjectReference(KubeModel):
    """A reference to an object in the same namespace, by name."""

    name: str = Field(min_length=1)
    """Name of the referent."""


class ConfigMapKeySelector(KubeModel):
    """A key of a ConfigMap (``corev1.ConfigMapKeySelector``)."""

    name: str
    """Name of the ConfigMap."""
    key: str
    """The key to select."""
    optional: bool | None = None
    """Whether the ConfigMap or its key may be missing."""


class SecretKeySelector(KubeModel):
    """A key of a Secret in the object's namespace (``corev1.SecretKeySelector``)."""

    name: SecretName
    """Name of the Secret."""
    key: SecretKey
    """The key of the Secret to select."""
    optional: bool | None = None
    """Whether the Secret or its key may be missing."""


class CrossVersionObjectReference(KubeModel):
    """``autoscaling/v1`` CrossVersionObjectReference: the scalable object, as an HPA names it."""

    kind: str = Field(min_length=1)
    """Kind of the referent, e.g. ``Deployment``."""
    name: str = Field(min_length=1)
    """Name of the referent, in the same namespace."""
    api_version: str | None = Field(None, alias="apiVersion")
    """API version of the referent, e.g. ``apps/v1``."""


class ObjectReference(KubeModel):
    """``corev1.ObjectReference``: a reference to any object."""

    api_version: str | None = Field(None, alias="apiVersion")
    """API version of the referent."""
    kind: str | None = None
    """Kind of the referent."""
    name: str | None = None
    """Name of the referent."""
    namespace: str | None = None
    """Namespace of the referent; the referring object's namespace when unset."""
    uid: str | None = None
    """UID of the referent."""
    resource_version: str | None = Field(None, alias="resourceVersion")
    """Specific resourceVersion the reference is made to."""
    field_path: str | None = Field(None, alias="fieldPath")
    """A piece of the object, e.g. a container, instead of the whole object."""


class ParentReference(KubeModel):
    """Gateway API ``ParentReference``: the Gateway (listener) an HTTPRoute attaches to."""

    group: str | None = Field(
        "gateway.networking.k8s.io",
        max_length=253,
        pattern=r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )
    """API group of the referent."""
    kind: str | None = Field("Gateway", min_length=1, max_length=63, pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")
    """Kind of the referent."""
    namespace: str | None = Field(None, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Namespace of the referent; the route's namespace when unset."""
    name: str = Field(min_length=1, max_length=253)
    """Name of the referent."""
    section_name: str | None = Field(
        None,
        alias="sectionName",
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )
    """Name of a section (listener) of the parent."""
    port: int | None = Field(None, ge=1, le=65535)
    """Network port of the parent the route targets."""


# --------------------------------------------------------------------------------------------------
# Container-level types
# --------------------------------------------------------------------------------------------------


class EnvVar(KubeModel):
    """``corev1.EnvVar``: a container environment variable; ``valueFrom`` is kept as given."""

    name: str = Field(min_length=1)
    """Name of the environment variable."""
    value: str | None = None
    """Literal value."""
    value_from: JSONObject | None = Field(None, alias="valueFrom")
    """Source of the value (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef)."""

    @field_validator("value_from")
    @classmethod
    def _secret_key_ref(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """A ``secretKeyRef`` is rendered into a Pod as written: one the API server would refuse is refused here."""
        if value is not None and "secretKeyRef" in value:
            problem = secret_key_ref_error(value["secretKeyRef"])
            if problem:
                raise ValueError(problem)
        return value


class EnvFromSourceRef(KubeModel):
    """A ConfigMap or Secret whose keys all become environment variables."""

    name: str
    """Name of the ConfigMap or Secret."""
    optional: bool | None = None
    """Whether the ConfigMap or Secret may be missing."""


class EnvFromSource(KubeModel):
    """``corev1.EnvFromSource``."""

    prefix: str | None = None
    """Prefix prepended to every key."""
    config_map_ref: EnvFromSourceRef | None = Field(None, alias="configMapRef")
    """The ConfigMap to read from."""
    secret_ref: EnvFromSourceRef | None = Field(None, alias="secretRef")
    """The Secret to read from."""


class ResourceRequirements(KubeModel):
    """``corev1.ResourceRequirements``: limits and requests by resource name (``nvidia.com/gpu``, ...)."""

    limits: dict[str, Quantity] | None = None
    """Maximum amount of each resource."""
    requests: dict[str, Quantity] | None = None
    """Minimum amount of each resource."""
    claims: list[JSONObject] | None = None
    """Dynamic resource claims used by the container."""


Affinity = JSONObject
"""``corev1.Affinity``, passed through to the pod spec unchanged."""
