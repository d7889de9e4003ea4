"""Validation of a Kthena ``Model``, as Kthena's mutating and validating webhooks do it.

Decides whether a Model can be rolled out: the schema first (the CRD's own validation), then the webhook's
defaults (``scaleToZeroGracePeriod``, ``costExpansionRatePercent``) and rules, every failure naming the field
as people write it, so the Model's status says what to fix. Backends Modelplane cannot roll out (MindIE) are
reported separately: they fail the Model but do not stop its other backends.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.api.kthena import MAX_REPLICAS, Model, ModelBackend
from engine.api.meta import parse_duration
from engine.api.validate import ManifestInvalid, parse_object
from engine.caches.source_fields import from_kthena_uri, from_lora_url
from engine.caches.sources import SourceError
from engine.rollout.kthena import UNSUPPORTED_TYPES
from engine.rollout.kthena_weights import cache_mount
from engine.rollout.workloads import FieldError, is_credential_name, resource_errors, without_status

MAX_GRACE_PERIOD_S = 1800
DEFAULT_SCALE_TO_ZERO = "30s"
DEFAULT_COST_EXPANSION = 200

_SINGLE_SERVER_TYPES = ("vLLM", "SGLang", "MindIE")
_WORKER_TYPES = {
    "vLLM": ("server",),
    "SGLang": ("server",),
    "MindIE": ("server",),
    "vLLMDisaggregated": ("prefill", "decode"),
    "MindIEDisaggregated": ("prefill", "decode", "controller", "coordinator"),
}
# A container image reference: [registry[:port]/]path[:tag][@digest] (distribution's grammar, simplified).
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def validate_model(manifest: Mapping[str, Any]) -> tuple[Model | None, list[FieldError]]:
    """The Model parsed and defaulted as Kthena's mutating webhook does, and every rule it breaks.

    Schema errors (the CRD's own validation) come first; the webhook rules are only checked on a
    Model that parses. The status is not read: it is the rollout's output, and a malformed one (written by
    hand) is replaced by the next status write instead of stopping the spec's rollout.
    """
    try:
        model = parse_object(without_status(manifest))
    except ManifestInvalid as exc:
        return None, [FieldError(path, message) for path, message in exc.errors]
    assert isinstance(model, Model)
    model = apply_webhook_defaults(model)
    return model, webhook_errors(model)


def apply_webhook_defaults(model: Model) -> Model:
    """Kthena's mutating webhook: with a model-level policy, ``scaleToZeroGracePeriod`` defaults to
    30 s on every backend and ``costExpansionRatePercent`` to 200."""
    if model.spec.autoscaling_policy is None:
        return model
    spec = model.spec.model_copy(deep=True)
    if spec.cost_expansion_rate_percent is None:
        spec.cost_expansion_rate_percent = DEFAULT_COST_EXPANSION
    for backend in spec.backends:
        if backend.scale_to_zero_grace_period is None:
            backend.scale_to_zero_grace_period = DEFAULT_SCALE_TO_ZERO
    return model.model_copy(update={"spec": spec})


def webhook_errors(model: Model) -> list[FieldError]:
    """The validating webhook's rules, each failure naming its field."""
    errors: list[FieldError] = []
    spec = model.spec
    seen: set[str] = set()
    for index, backend in enumerate(spec.backends):
        path = f"spec.backends[{index}]"
        if backend.name in seen:
            errors.append(FieldError(f"{path}.name", f"duplicate backend name {backend.name!r}"))
        seen.add(backend.name)
        errors += _worker_errors(backend, path)
        errors += _replica_errors(backend, path)
        errors += _source_errors(backend, path)
    total_max = sum(b.max_replicas or 0 for b in spec.backends)
    if total_max > MAX_REPLICAS:
        errors.append(FieldError("spec.backends", f"the sum of maxReplicas ({total_max}) exceeds {MAX_REPLICAS}"))
    errors += _autoscaling_errors(model)
    return errors


def _worker_errors(backend: ModelBackend, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    allowed = _WORKER_TYPES[backend.type]
    if backend.type in _SINGLE_SERVER_TYPES and (len(backend.workers) != 1 or backend.workers[0].type != "server"):
        errors.append(
            FieldError(f"{path}.workers", f"a {backend.type} backend needs exactly one worker, of type server")
        )
    for w, worker in enumerate(backend.workers):
        if worker.type not in allowed:
            errors.append(
                FieldError(
                    f"{path}.workers[{w}].type",
                    f"{worker.type!r} is not a {backend.type} worker type (allowed: {', '.join(allowed)})",
                )
            )
        if worker.resources is not None:
            errors += resource_errors(worker.resources.limits, f"{path}.workers[{w}].resources.limits")
            errors += resource_errors(worker.resources.requests, f"{path}.workers[{w}].resources.requests")
        if not worker.image:
            errors.append(FieldError(f"{path}.workers[{w}].image", "required"))
        elif not _IMAGE.match(worker.image):
            errors.append(FieldError(f"{path}.workers[{w}].image", f"{worker.image!r} is not a valid image reference"))
    if backend.type == "vLLMDisaggregated":
        for role in ("prefill", "decode"):
            count = sum(1 for w in backend.workers if w.type == role)
            if count != 1:
                errors.append(
                    FieldError(
                        f"{path}.workers", f"a vLLMDisaggregated backend needs exactly one {role} worker, found {count}"
                    )
                )
    return errors


def _replica_errors(backend: ModelBackend, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    low, high = backend.min_replicas, backend.max_replicas
    if low is not None and high is not None and low > high:
        errors.append(FieldError(f"{path}.minReplicas", f"{low} is above maxReplicas {high}"))
    if backend.scale_to_zero_grace_period is not None:
        seconds = parse_duration(backend.scale_to_zero_grace_period)
        if not 0 <= seconds <= MAX_GRACE_PERIOD_S:
            errors.append(
                FieldError(f"{path}.scaleToZeroGracePeriod", f"{backend.scale_to_zero_grace_period} is outside 0s..30m")
            )
    return errors


def _source_errors(backend: ModelBackend, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not backend.model_uri:
        errors.append(FieldError(f"{path}.modelURI", "required: the weights to serve (hf://, s3:// or pvc://)"))
    else:
        try:
            from_kthena_uri(backend.model_uri, f"{path}.modelURI")
        except SourceError as exc:
            errors.append(FieldError(f"{path}.modelURI", exc.reason))
    if backend.cache_uri:
        try:
            from_kthena_uri(backend.cache_uri, f"{path}.cacheURI")
            cache_mount(backend.cache_uri)
        except SourceError as exc:
            errors.append(FieldError(f"{path}.cacheURI", exc.reason))
        except ValueError as exc:
            errors.append(FieldError(f"{path}.cacheURI", str(exc)))
    names: set[str] = set()
    for a, adapter in enumerate(backend.lora_adapters or []):
        if adapter.name in names:
            errors.append(FieldError(f"{path}.loraAdapters[{a}].name", f"duplicate adapter name {adapter.name!r}"))
        names.add(adapter.name)
        try:
            from_lora_url(adapter.artifact_url, f"{path}.loraAdapters[{a}].artifactURL")
        except SourceError as exc:
            errors.append(FieldError(f"{path}.loraAdapters[{a}].artifactURL", exc.reason))
    return errors


def _autoscaling_errors(model: Model) -> list[FieldError]:
    spec = model.spec
    errors: list[FieldError] = []
    model_level = spec.autoscaling_policy is not None
    for index, backend in enumerate(spec.backends):
        path = f"spec.backends[{index}]"
        if model_level:
            if backend.autoscaling_policy is not None:
                errors.append(
                    FieldError(
                        f"{path}.autoscalingPolicy", "cannot be set together with spec.autoscalingPolicy (model-level)"
                    )
                )
            if backend.scaling_cost is None:
                errors.append(FieldError(f"{path}.scalingCost", "required when spec.autoscalingPolicy is set"))
            if backend.min_replicas is None:
                errors.append(FieldError(f"{path}.minReplicas", "required (>= 0) when spec.autoscalingPolicy is set"))
        elif backend.autoscaling_policy is not None:
            if (backend.min_replicas or 0) < 1:
                errors.append(FieldError(f"{path}.minReplicas", "must be >= 1 with a backend-level autoscalingPolicy"))
        else:
            if backend.min_replicas != backend.max_replicas:
                errors.append(
                    FieldError(
                        f"{path}.minReplicas",
                        f"must equal maxReplicas without an autoscaling policy ({backend.min_replicas} != {backend.max_replicas})",
                    )
                )
            for field_name, value in (
                ("scalingCost", backend.scaling_cost),
                ("scaleToZeroGracePeriod", backend.scale_to_zero_grace_period),
            ):
                if value is not None:
                    errors.append(FieldError(f"{path}.{field_name}", "only allowed with spec.autoscalingPolicy"))
        if backend.max_replicas is None:
            errors.append(FieldError(f"{path}.maxReplicas", "required"))
    if model_level and sum(b.min_replicas or 0 for b in spec.backends) < 1:
        errors.append(FieldError("spec.backends", "the sum of minReplicas must be >= 1 with spec.autoscalingPolicy"))
    if not model_level and spec.cost_expansion_rate_percent is not None:
        errors.append(FieldError("spec.costExpansionRatePercent", "only allowed with spec.autoscalingPolicy"))
    return errors


def unsupported_backends(model: Model) -> list[FieldError]:
    """Backends Modelplane cannot roll out (MindIE variants), as Kthena reports them."""
    return [
        FieldError(
            f"spec.backends[{i}].type",
            f"backend {b.name!r}: {b.type} is not supported (vLLM, vLLMDisaggregated and SGLang are)",
        )
        for i, b in enumerate(model.spec.backends)
        if b.type in UNSUPPORTED_TYPES
    ]


PLAIN_CREDENTIAL_REASON = "PlainTextCredential"
"""The reason of the Warning Event a Model gets for a credential given as a plain env value."""


def plain_credentials(model: Model) -> list[FieldError]:
    """Each backend env entry that holds a credential (:func:`~engine.rollout.workloads.is_credential_name`) as a
    plain ``value``, naming the variable and never the value. It is rendered into the workload's env as Kthena
    does (annotations keep only its hash); the Model gets a warning to move it into a Secret."""
    return [
        FieldError(
            f"spec.backends[{i}].env[{j}]",
            f"{item.name} holds a credential as a plain value: put it in a Secret and use valueFrom.secretKeyRef",
        )
        for i, backend in enumerate(model.spec.backends)
        for j, item in enumerate(backend.env or [])
        if item.value and is_credential_name(item.name)
    ]
