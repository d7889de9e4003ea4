"""AIM model discovery, decided without I/O: image labels, persisted metadata, derived names, templates.

An AIMClusterModel names a container image; the discover-models flow reads that image's config
labels from its registry (``tasks.clients.oci``) and everything after that is decided here:

* :func:`parse_image_labels` turns the labels into :class:`ImageMetadata` (``com.amd.aim.*`` with the
  ``org.amd.silogen.*`` fallback, as aim-engine reads them); :func:`parse_recommended_deployments`
  parses ``model.recommendedDeployments`` (a JSON array or comma-separated objects, single quotes
  allowed).
* What was read is persisted on the model itself, in the annotation :data:`METADATA_ANNOTATION`
  (the seed's status has only conditions): :class:`DiscoveryRecord` is its content, and
  :func:`needs_fetch` decides when the registry must be asked again (new ``spec.image``, a transient
  failure, or the resync interval).
* :func:`derived` is aim-engine's ``GenerateDerivedName`` (sanitised parts + sha256 of the Go-JSON of
  the hash sources, shortened to fit); :func:`template_name` and :func:`auto_template` build one
  AIMServiceTemplate per recommended deployment with upstream's deterministic names.
* :func:`model_conditions` gives the model's ``MetadataExtracted`` and ``Ready`` conditions from the
  discovery result and the states of its auto-created templates.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engine.aim.names import derived, owner_reference
from engine.api.aim import MAX_GPUS_PER_REPLICA, AIMClusterModel, AIMServiceTemplate
from engine.api.meta import format_time, parse_time
from engine.api.registry import AIM_API, AIM_GROUP, AIM_SERVICE_TEMPLATE
from engine.status import ConditionUpdate

API_VERSION = AIM_API
DOMAIN = AIM_GROUP
METADATA_ANNOTATION = f"{DOMAIN}/image-metadata"
"""Annotation on an AIMClusterModel holding the JSON :class:`DiscoveryRecord` of its image."""
MODEL_LABEL = f"{DOMAIN}/model"
ORIGIN_LABEL = f"{DOMAIN}/origin"
ORIGIN_AUTO = "auto-generated"
PROFILE_ANNOTATION = f"{DOMAIN}/profile-id"

LABEL_PREFIXES = ("com.amd.aim.", "org.amd.silogen.")
OCI_LABEL_PREFIX = "org.opencontainers.image."
OCI_LABEL_KEYS = (
    "title",
    "description",
    "licenses",
    "vendor",
    "authors",
    "source",
    "documentation",
    "created",
    "revision",
    "version",
)
DEPLOYMENT_KEYS = ("gpuModel", "gpuCount", "precision", "metric", "profileId", "type", "description")
METRIC_SHORT = {"latency": "lat", "throughput": "thr"}
TEMPLATE_METRICS = ("latency", "throughput")
TEMPLATE_PRECISIONS = ("auto", "fp4", "fp8", "fp16", "fp32", "bf16", "int4", "int8")
MAX_LABEL_CHARS = 64 * 1024
"""The longest AIM label value read (``com.amd.aim.*``, ``org.amd.silogen.*``); a longer one is a
:class:`LabelError`. Real values are a few hundred characters; the bound keeps the parse of
``model.recommendedDeployments`` short and the record persisted in :data:`METADATA_ANNOTATION` small
(Kubernetes allows 256 KiB of annotations per object)."""

# Condition types and reasons of an AIMClusterModel (aim-engine's, kept where the seed is silent).
COND_METADATA = "MetadataExtracted"
COND_READY = "Ready"
REASON_EXTRACTED = "MetadataExtracted"
REASON_EXTRACTION_FAILED = "MetadataExtractionFailed"
REASON_IMAGE_NOT_FOUND = "ImageNotFound"
REASON_AUTH_FAILED = "ImagePullAuthFailure"
REASON_SECRET_NOT_FOUND = "SecretNotFound"
REASON_REGISTRY_UNAVAILABLE = "RegistryUnavailable"
REASON_INVALID_IMAGE = "InvalidImageReference"
TERMINAL_REASONS = frozenset({REASON_IMAGE_NOT_FOUND, REASON_EXTRACTION_FAILED, REASON_INVALID_IMAGE})
"""Failures that asking the registry again cannot fix until ``spec.image`` (or the image) changes:
they are retried only on the resync interval. Every other failure is retried on the next run."""


# --------------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------------


class LabelError(ValueError):
    """A label that cannot be parsed; ``label`` is the full label key."""

    def __init__(self, label: str, problem: str) -> None:
        self.label = label
        super().__init__(f"label {label}: {problem}")


def _json_list(body: str) -> Any:
    """``body`` as JSON, wrapped in ``[...]`` when it does not start with ``[`` (comma-separated objects).

    ``ValueError`` for anything the decoder refuses, nesting deeper than its recursion limit included (a
    ``RecursionError`` would otherwise escape every handler of label errors and stop the whole run).
    """
    try:
        return json.loads(body if body.startswith("[") else f"[{body}]")
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _json_problem(exc: ValueError) -> str:
    """What the decoder said, with the position when it knows one."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at character {exc.pos}"
    return str(exc)


def parse_recommended_deployments(text: str) -> list[dict[str, Any]]:
    """The recommended deployments in a ``model.recommendedDeployments`` label value.

    Plain JSON is tried first (so a valid label whose description holds an apostrophe parses); only
    when that fails is every ``'`` turned into ``"``, as aim-engine does (single-quoted Python-style
    dicts). Text that does not start with ``[`` is wrapped in ``[...]`` (real labels are
    comma-separated objects). Each entry keeps ``gpuModel, gpuCount, precision, metric, profileId,
    type, description`` (absent or null ones omitted, others dropped). Raises ``ValueError`` naming the
    problem for text that is not a list of objects (nested too deeply, a number too long to convert), an
    entry whose field has the wrong type or a ``gpuCount`` above the bound. Blank text is no deployments.
    """
    body = text.strip()
    if not body:
        return []
    try:
        data = _json_list(body)
    except ValueError:
        try:
            data = _json_list(body.replace("'", '"'))
        except ValueError as exc:
            raise ValueError(f"not a JSON list of objects ({_json_problem(exc)})") from None
    if not isinstance(data, list):
        raise ValueError(f"not a list of objects but a {type(data).__name__}")
    return [_deployment(entry, index) for index, entry in enumerate(data)]


def _deployment(entry: Any, index: int) -> dict[str, Any]:
    """One recommended deployment, its known keys type-checked; ``ValueError`` naming the entry and field.

    A ``gpuCount`` above :data:`~engine.api.aim.MAX_GPUS_PER_REPLICA` is refused here, not only skipped when
    templates are made: resolve-templates matches a template without ``gpusPerReplica`` to any deployment, and
    the count would become a container's GPU request. A count below 1 parses (its template is skipped, named).
    """
    if not isinstance(entry, dict):
        raise ValueError(f"entry {index} is a {type(entry).__name__}, not an object")
    result: dict[str, Any] = {}
    for key in DEPLOYMENT_KEYS:
        value = entry.get(key)
        if value is None:
            continue
        if key == "gpuCount":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"entry {index}: gpuCount must be an integer, not {value!r}")
            if value > MAX_GPUS_PER_REPLICA:
                raise ValueError(f"entry {index}: gpuCount {value} is above {MAX_GPUS_PER_REPLICA}")
        elif not isinstance(value, str):
            raise ValueError(f"entry {index}: {key} must be a string, not {value!r}")
        result[key] = value
    return result


def _split_list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _parse_bool(value: str | None) -> bool | None:
    """Go's ``strconv.ParseBool``; ``None`` for anything else (ignored, as upstream)."""
    if value is None:
        return None
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


@dataclass(frozen=True)
class ImageMetadata:
    """What an AIM image's config labels say about the model it serves."""

    canonical_name: str | None = None
    source: str | None = None
    title: str | None = None
    description: str | None = None
    release_notes: str | None = None
    tags: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    hf_token_required: bool | None = None
    recommended_deployments: tuple[Mapping[str, Any], ...] = ()
    oci: Mapping[str, str] = field(default_factory=dict)

    @property
    def labelled(self) -> bool:
        """Whether the image carries AIM labels at all (an unlabelled image is valid, with no profiles)."""
        return bool(self.canonical_name or self.source or self.recommended_deployments)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (camelCase, empty fields left out) for the persisted record."""
        raw = {
            "canonicalName": self.canonical_name,
            "source": self.source,
            "title": self.title,
            "description": self.description,
            "releaseNotes": self.release_notes,
            "tags": list(self.tags),
            "versions": list(self.versions),
            "variants": list(self.variants),
            "hfTokenRequired": self.hf_token_required,
            "recommendedDeployments": [dict(d) for d in self.recommended_deployments],
            "oci": dict(self.oci),
        }
        return {key: value for key, value in raw.items() if value not in (None, [], {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ImageMetadata:
        """The inverse of :meth:`to_dict`, checked as the labels are: ``ValueError`` naming a field of the wrong
        type (the annotation can be edited by anyone who can edit the model, so it is never trusted further
        than what :func:`parse_image_labels` would have produced)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"metadata is a {type(data).__name__}, not an object")
        deployments = data.get("recommendedDeployments") or []
        if not isinstance(deployments, list):
            raise ValueError("recommendedDeployments is not a list")
        hf_token = data.get("hfTokenRequired")
        if hf_token is not None and not isinstance(hf_token, bool):
            raise ValueError(f"hfTokenRequired must be a boolean, not {hf_token!r}")
        oci = data.get("oci") or {}
        if not isinstance(oci, dict) or not all(isinstance(v, str) for v in oci.values()):
            raise ValueError("oci is not an object of strings")
        return cls(
            canonical_name=_record_text(data, "canonicalName"),
            source=_record_text(data, "source"),
            title=_record_text(data, "title"),
            description=_record_text(data, "description"),
            release_notes=_record_text(data, "releaseNotes"),
            tags=_record_texts(data, "tags"),
            versions=_record_texts(data, "versions"),
            variants=_record_texts(data, "variants"),
            hf_token_required=hf_token,
            recommended_deployments=tuple(_deployment(entry, index) for index, entry in enumerate(deployments)),
            oci=dict(oci),
        )


def _record_text(data: Mapping[str, Any], key: str) -> str | None:
    """A text field of a persisted record: a string or absent; ``ValueError`` otherwise."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {type(value).__name__}")
    return value


def _record_texts(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A list-of-strings field of a persisted record; ``ValueError`` when it is anything else."""
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{key} must be a list of strings")
    return tuple(value)


def aim_label(labels: Mapping[str, str], suffix: str) -> tuple[str, str] | None:
    """``(key, value)`` of ``com.amd.aim.<suffix>`` when non-empty, else of ``org.amd.silogen.<suffix>``;
    :class:`LabelError` when the value is longer than :data:`MAX_LABEL_CHARS`."""
    for prefix in LABEL_PREFIXES:
        value = labels.get(prefix + suffix)
        if value:
            if len(value) > MAX_LABEL_CHARS:
                raise LabelError(prefix + suffix, f"longer than {MAX_LABEL_CHARS} characters ({len(value)})")
            return prefix + suffix, value
    return None


def parse_image_labels(labels: Mapping[str, str] | None) -> ImageMetadata:
    """The metadata in an image's config labels; ``LabelError`` naming the label that does not parse."""
    labels = labels or {}

    def text(suffix: str) -> str | None:
        found = aim_label(labels, suffix)
        return found[1] if found else None

    deployments: list[dict[str, Any]] = []
    found = aim_label(labels, "model.recommendedDeployments")
    if found:
        key, value = found
        try:
            deployments = parse_recommended_deployments(value)
        except ValueError as exc:
            raise LabelError(key, str(exc)) from None
    oci = {key: labels[OCI_LABEL_PREFIX + key] for key in OCI_LABEL_KEYS if labels.get(OCI_LABEL_PREFIX + key)}
    return ImageMetadata(
        canonical_name=text("model.canonicalName"),
        source=text("model.source"),
        title=text("title"),
        description=text("description.full"),
        release_notes=text("release.notes"),
        tags=tuple(_split_list(text("model.tags"))),
        versions=tuple(_split_list(text("model.versions"))),
        variants=tuple(_split_list(text("model.variants"))),
        hf_token_required=_parse_bool(text("hfToken.required")),
        recommended_deployments=tuple(deployments),
        oci=oci,
    )


# --------------------------------------------------------------------------------------------------
# The persisted discovery record
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiscoveryRecord:
    """What discovery last read for one image, kept in the model's :data:`METADATA_ANNOTATION`.

    Either ``metadata`` (with the manifest ``digest`` it came from) or ``reason``/``message`` of the
    failure. ``read_at`` is when the registry was last asked; ``attempts`` counts consecutive failures.
    """

    image: str
    read_at: datetime
    digest: str | None = None
    metadata: ImageMetadata | None = None
    reason: str | None = None
    message: str = ""
    attempts: int = 0

    @property
    def ok(self) -> bool:
        """Whether the image's labels were read and parsed."""
        return self.metadata is not None and self.reason is None

    @property
    def terminal(self) -> bool:
        """A failure that only a new image (or the resync) can fix."""
        return self.reason in TERMINAL_REASONS

    def to_json(self) -> str:
        """The annotation value (compact, keys sorted so an unchanged record is byte-identical)."""
        data: dict[str, Any] = {"image": self.image, "readAt": format_time(self.read_at)}
        if self.digest:
            data["digest"] = self.digest
        if self.metadata is not None:
            data["metadata"] = self.metadata.to_dict()
        if self.reason:
            data["error"] = {"reason": self.reason, "message": self.message, "attempts": self.attempts}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str] | None) -> DiscoveryRecord | None:
        """The record on a model, or ``None`` when there is none or it does not parse (read again)."""
        text = (annotations or {}).get(METADATA_ANNOTATION)
        if not text:
            return None
        try:
            data = json.loads(text)
            error = data.get("error") or {}
            return cls(
                image=str(data["image"]),
                read_at=parse_time(data["readAt"]),
                digest=_record_text(data, "digest"),
                metadata=ImageMetadata.from_dict(data["metadata"]) if "metadata" in data else None,
                reason=_record_text(error, "reason"),
                message=str(error.get("message") or ""),
                attempts=int(error.get("attempts") or 0),
            )
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None


NOT_FOUND_RETRY = timedelta(minutes=5)
"""First re-read of an image that was not found; doubled per consecutive miss, up to the resync."""


MAX_FAILURE_MESSAGE_CHARS = 500
"""The longest message a failed read records: it goes into the model's condition (at most 32,768 characters) and
its image-metadata annotation (all annotations together at most 256 KiB); an index of 200,000 entries made one
of 2.2 MB, which no write could carry."""


def failed_record(
    image: str, now: datetime, reason: str, message: str, previous: DiscoveryRecord | None
) -> DiscoveryRecord:
    """The record of a failed read of ``image`` (``reason``: the condition reason the error gives), attempts counted
    up while the image stays the same and keeps failing (they space the retries, :func:`retry_after`)."""
    attempts = previous.attempts + 1 if previous is not None and previous.image == image and previous.reason else 1
    if len(message) > MAX_FAILURE_MESSAGE_CHARS:  # a registry's answer can make a message of megabytes
        message = message[: MAX_FAILURE_MESSAGE_CHARS - 1] + "…"
    return DiscoveryRecord(image=image, read_at=now, reason=reason, message=message, attempts=attempts)


def retry_after(record: DiscoveryRecord, resync: timedelta) -> timedelta:
    """How long a terminal failure waits before the registry is asked again.

    A missing image (404) backs off from :data:`NOT_FOUND_RETRY`, doubling per consecutive miss
    (5 min, 10, 20, ...), never longer than ``resync``: a tag pushed after the service was declared is
    picked up within minutes, and a tag that never comes costs a few requests a day. Other terminal
    failures (unparsable labels, an invalid reference) change only with a new push or ``spec.image``:
    they wait for the resync.
    """
    if record.reason != REASON_IMAGE_NOT_FOUND:
        return resync
    doublings = min(max(record.attempts, 1) - 1, 20)
    return min(resync, NOT_FOUND_RETRY * (1 << doublings))


def needs_fetch(record: DiscoveryRecord | None, image: str, now: datetime, resync: timedelta) -> bool:
    """Whether the registry must be asked about ``image`` in this run.

    Yes when nothing was read yet, ``spec.image`` changed, the last attempt failed transiently (auth,
    registry or network errors: retried every run), a missing image's backoff has passed
    (:func:`retry_after`), or the last read is older than ``resync`` (which also retries the other
    terminal failures). A record read "in the future" (a hand-written ``readAt``, a clock that ran ahead) is
    stale: trusting it would keep the registry from being asked until that time comes.
    """
    if record is None or record.image != image or record.read_at > now:
        return True
    if record.reason and not record.terminal:
        return True
    if record.reason:
        return now - record.read_at >= retry_after(record, resync)
    return now - record.read_at >= resync


def template_name(model_name: str, image: str, deployment: Mapping[str, Any]) -> str:
    """The auto-created template's name: ``derived([image, suffix], [H], 4)`` as aim-engine builds it.

    suffix = ``{count}x-{gpu}`` | ``{gpu}`` | ``x{count}``, the metric shorthand (``lat``/``thr``) and the
    precision, each when set. H = ``model-image`` plus ``-gpu``, ``-x{count}``, ``-metric``,
    ``-precision`` when set (the model name keeps two models on one image apart).
    """
    gpu, count = deployment.get("gpuModel"), deployment.get("gpuCount")
    metric, precision = deployment.get("metric"), deployment.get("precision")
    suffix: list[str] = []
    if gpu and count:
        suffix.append(f"{count}x-{gpu}")
    elif gpu:
        suffix.append(str(gpu))
    elif count:
        suffix.append(f"x{count}")
    if metric:
        suffix.append(METRIC_SHORT.get(metric, metric))
    if precision:
        suffix.append(precision)
    source = f"{model_name}-{image}"
    if gpu:
        source += f"-{gpu}"
    if count:
        source += f"-x{count}"
    if metric:
        source += f"-{metric}"
    if precision:
        source += f"-{precision}"
    return derived([image, "-".join(suffix)], [source], hash_len=4)


# --------------------------------------------------------------------------------------------------
# Auto-created templates
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TemplatePlan:
    """The templates discovery wants for one model: manifests to create and deployments it skipped."""

    templates: list[dict[str, Any]]
    skipped: list[str]


def template_spec_of(canonical_name: str, deployment: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The AIMServiceTemplate spec for one recommended deployment, or ``(None, why)`` when the
    deployment cannot be expressed by the seed's template (unknown metric or precision, a GPU count below 1
    or above :data:`~engine.api.aim.MAX_GPUS_PER_REPLICA`, which the template's schema refuses)."""
    metric, precision = deployment.get("metric"), deployment.get("precision")
    gpu, count = deployment.get("gpuModel"), deployment.get("gpuCount")
    if metric is not None and metric not in TEMPLATE_METRICS:
        return None, f"metric {metric!r} is not one of {', '.join(TEMPLATE_METRICS)}"
    if precision is not None and precision not in TEMPLATE_PRECISIONS:
        return None, f"precision {precision!r} is not one of {', '.join(TEMPLATE_PRECISIONS)}"
    if count is not None and count < 1:
        return None, f"gpuCount {count} is below 1"
    if count is not None and count > MAX_GPUS_PER_REPLICA:
        return None, f"gpuCount {count} is above {MAX_GPUS_PER_REPLICA}"
    spec: dict[str, Any] = {"model": canonical_name}
    if metric:
        spec["metric"] = metric
    spec["precision"] = precision or "auto"
    if count:
        spec["gpusPerReplica"] = count
    if gpu:
        spec["gpuModel"] = gpu
    return spec, None


def auto_templates(model: AIMClusterModel, metadata: ImageMetadata, namespaces: Iterable[str]) -> TemplatePlan:
    """One AIMServiceTemplate per distinct recommended deployment in each namespace, owned by the model and
    labelled ``aim.silogen.ai/origin=auto-generated``. The canonical name is the model's ``spec.name``.

    Deployments that give the same template name (it hashes everything the spec holds) are one template,
    the first one's (with its profile annotation); the repeats are named once in ``skipped``. Each would
    otherwise be created again (and refused as existing) and counted as a template that never comes."""
    name, image = str(model.metadata.name), model.spec.image
    canonical = model.spec.name
    templates: list[dict[str, Any]] = []
    skipped: list[str] = []
    first_of: dict[str, int] = {}
    repeats: list[tuple[int, int]] = []
    for index, deployment in enumerate(metadata.recommended_deployments):
        spec, problem = template_spec_of(canonical, deployment)
        if spec is None:
            skipped.append(f"recommendedDeployments[{index}]: {problem}")
            continue
        template = template_name(name, image, deployment)
        if template in first_of:
            repeats.append((index, first_of[template]))
            continue
        first_of[template] = index
        annotations = {PROFILE_ANNOTATION: deployment["profileId"]} if deployment.get("profileId") else {}
        for namespace in sorted(set(namespaces)):
            meta: dict[str, Any] = {
                "name": template,
                "namespace": namespace,
                "labels": {MODEL_LABEL: name, ORIGIN_LABEL: ORIGIN_AUTO},
                "ownerReferences": [owner_reference(model, controller=True)],
            }
            if annotations:
                meta["annotations"] = dict(annotations)
            templates.append({"apiVersion": API_VERSION, "kind": AIM_SERVICE_TEMPLATE, "metadata": meta, "spec": spec})
    if repeats:  # named once: a label may repeat one entry thousands of times
        shown = ", ".join(f"[{i}] as [{first}]" for i, first in repeats[:3]) + (", …" if len(repeats) > 3 else "")
        skipped.append(f"{len(repeats)} recommendedDeployments entries repeat an earlier one's template: {shown}")
    return TemplatePlan(templates, skipped)


def is_auto_template(template: AIMServiceTemplate) -> bool:
    """Whether discovery created this template (a person's template is never touched)."""
    return template.metadata.labels.get(ORIGIN_LABEL) == ORIGIN_AUTO


# --------------------------------------------------------------------------------------------------
# Model conditions
# --------------------------------------------------------------------------------------------------


def metadata_condition(record: DiscoveryRecord | None) -> ConditionUpdate:
    """``MetadataExtracted`` from the discovery record."""
    if record is None:
        return ConditionUpdate(COND_METADATA, "Unknown", "AwaitingMetadata", "the image has not been read yet")
    if record.ok:
        meta = record.metadata
        assert meta is not None
        if meta.labelled:
            count = len(meta.recommended_deployments)
            what = f"{meta.canonical_name or 'model'}: {count} recommended deployment{'s' if count != 1 else ''}"
            return ConditionUpdate(
                COND_METADATA, "True", REASON_EXTRACTED, f"{what} (image {record.digest or record.image})"
            )
        return ConditionUpdate(
            COND_METADATA,
            "True",
            "ImageFound",
            "the image is reachable but carries no AIM labels; no templates are created",
        )
    return ConditionUpdate(COND_METADATA, "False", record.reason or REASON_EXTRACTION_FAILED, record.message)


def ready_condition(record: DiscoveryRecord | None, template_states: Sequence[str], expected: bool) -> ConditionUpdate:
    """``Ready`` from the auto-created templates' ``status.status`` values (aim-engine's aggregate,
    with the seed's template states: Available = ready, Failed, Pending/Progressing = in progress)."""
    if record is None or not record.ok:
        reason = (
            "AwaitingMetadata" if record is None or not record.terminal else (record.reason or REASON_EXTRACTION_FAILED)
        )
        return ConditionUpdate(
            COND_READY, "False", reason, "the image's metadata is not known yet" if record is None else record.message
        )
    states = list(template_states)
    if not states:
        if expected:
            return ConditionUpdate(COND_READY, "False", "CreatingTemplates", "creating the recommended templates")
        return ConditionUpdate(COND_READY, "True", "NoTemplatesExpected", "the image recommends no deployments")
    total = len(states)
    available = states.count("Available")
    failed = states.count("Failed")
    if available == total:
        return ConditionUpdate(COND_READY, "True", "AllTemplatesReady", f"{total} templates available")
    if failed == total:
        return ConditionUpdate(COND_READY, "False", "AllTemplatesFailed", f"{total} templates failed")
    if failed:
        return ConditionUpdate(COND_READY, "False", "SomeTemplatesDegraded", f"{failed} of {total} templates failed")
    if available:
        return ConditionUpdate(COND_READY, "True", "SomeTemplatesReady", f"{available} of {total} templates available")
    return ConditionUpdate(COND_READY, "False", "TemplatesProgressing", f"{total} templates pending or progressing")
