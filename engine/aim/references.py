"""AIMService references, decided without I/O: its model, template (named or auto-selected) and namespace config.

An AIMService binds a canonical model (an AIMClusterModel's ``spec.name``) to an AIMServiceTemplate of
its namespace; the namespace's AIMNamespaceConfig (``configRef``, default ``default``) brings pull
secrets and routing. :func:`resolve_references` checks them in the order aim-engine/kaiwo do and
gives each missing or mismatched one its seed status and reason; :func:`select_template` chooses the
template of a service that names none, with aim-engine's filter and ranking.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from engine.aim.discovery import REASON_IMAGE_NOT_FOUND, is_auto_template
from engine.aim.gpus import GpuInventory, normalize_gpu_model
from engine.aim.templates import (
    METRIC_PREFERENCE,
    PRECISION_PREFERENCE,
    ModelCatalog,
    match_profile,
    models_named,
    preference_rank,
    record_of,
)
from engine.api.aim import AIMClusterModel, AIMNamespaceConfig, AIMService, AIMServiceSpec, AIMServiceTemplate
from engine.api.meta import Condition

STATUS_PENDING, STATUS_STARTING, STATUS_RUNNING, STATUS_FAILED, STATUS_DEGRADED = (
    "Pending",
    "Starting",
    "Running",
    "Failed",
    "Degraded",
)


@dataclass(frozen=True)
class Resolution:
    """A service's references: either all found (model, template, profile, config) or the status,
    reason and message that stop the rollout, and whether an existing workload is kept."""

    status: str | None = None
    reason: str = ""
    message: str = ""
    model: AIMClusterModel | None = None
    template: AIMServiceTemplate | None = None
    config: AIMNamespaceConfig | None = None
    deployment: Mapping[str, Any] | None = None
    sources: tuple[str, ...] = ()
    selected: str = ""
    """How the template was chosen when the service names none (empty with ``templateRef``)."""

    @property
    def blocked(self) -> bool:
        """Whether a reference stops the rollout."""
        return self.status is not None


class Typed(Protocol):
    """A status condition, typed (our kinds' ``Condition``, a view's ``ConditionView``)."""

    @property
    def type(self) -> str | None:
        """The condition's type."""
        ...


C = TypeVar("C", bound=Typed)


def condition_of(conditions: Iterable[C] | None, type_: str) -> C | None:
    """The condition of ``type_`` among a status's ``conditions``, or None."""
    return next((cond for cond in conditions or () if cond.type == type_), None)


def template_conditions(template: AIMServiceTemplate) -> list[Condition]:
    """The template's previous ``status.conditions`` (none when it has no status yet)."""
    return list(template.status.conditions or []) if template.status else []


def template_phase(template: AIMServiceTemplate) -> str | None:
    """The template's previous ``status.status`` (None when it has no status yet)."""
    return template.status.status if template.status else None


AMD_GPU_PREFERENCE = ("MI325X", "MI300X", "MI250X", "MI210")
"""aim-engine's GPU generation order for template selection, newest first (``internal/aimservice/selection.go``,
``gpuPreferenceOrder``)."""
NVIDIA_GPU_PREFERENCE = ("B300", "GB200", "B200", "H200", "GH200", "H100", "H800", "A100", "A800", "L40S", "L40", "L4")
"""NVIDIA data-centre GPUs, newest first, by the names :func:`engine.aim.templates.normalize_gpu_model` gives GPU
feature discovery's ``nvidia.com/gpu.product`` (``NVIDIA-H100-80GB-HBM3`` -> ``H100``). aim-engine has no NVIDIA
order (every NVIDIA GPU scores as unknown, so an A100 and an H100 template tie); Modelplane ranks them after AMD's,
where upstream ranks every unknown GPU, so AMD's choices stay upstream's."""
GPU_PREFERENCE = AMD_GPU_PREFERENCE + NVIDIA_GPU_PREFERENCE
"""The GPU order of template selection: AMD's (aim-engine's), then NVIDIA's; other models rank after."""
PROFILE_TYPE_PREFERENCE = ("optimized", "preview", "unoptimized")


@dataclass(frozen=True)
class Selection:
    """The outcome of choosing a template for a service without ``templateRef``: the template, or the
    status, reason and message that stop the rollout; ``ranked`` names the candidates in rank order."""

    template: AIMServiceTemplate | None = None
    status: str | None = None
    reason: str = ""
    message: str = ""
    ranked: tuple[str, ...] = ()


def _template_profile(template: AIMServiceTemplate, deployments: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The recommended deployment a template selects (its "status profile"), or ``{}``."""
    return match_profile(template.spec, deployments) or {}


def prefer_namespace_templates(
    candidates: list[tuple[AIMServiceTemplate, Mapping[str, Any]]],
) -> list[tuple[AIMServiceTemplate, Mapping[str, Any]]]:
    """A person's templates before discovery's: aim-engine's ``preferNamespaceTemplates``
    (``internal/aimservice/selection.go``) keeps only namespace-scoped candidates when there is one, and
    its auto-created templates are cluster-scoped; here they are the ones labelled
    ``aim.silogen.ai/origin=auto-generated``."""
    own = [c for c in candidates if not is_auto_template(c[0])]
    return own or candidates


def select_template(
    service_spec: AIMServiceSpec,
    templates: Mapping[str, AIMServiceTemplate],
    deployments: Sequence[Mapping[str, Any]],
    inventory: GpuInventory,
) -> Selection:
    """Choose the template of a service that names none, as aim-engine does.

    Filter (each step explains what it removed): the namespace's templates of ``spec.model``; status
    Available; profile type ``optimized`` unless ``spec.allowUnoptimized`` (a recommended deployment
    without a ``type`` is optimized: the image recommends it); its GPU present in the cluster (templates
    without a GPU pass); then, when a person's template is left, the auto-generated ones (label
    ``aim.silogen.ai/origin=auto-generated``) go: aim-engine creates those cluster-scoped and prefers
    namespace templates (``internal/aimservice/selection.go``, ``preferNamespaceTemplates``, stage 5, before
    ranking), and the seed has only namespaced templates, so the label marks what upstream's scope does.
    Rank, lexicographically (``choosePreferredTemplate``): profile type (optimized < preview < unoptimized),
    GPU (:data:`GPU_PREFERENCE`: AMD's MI325X < MI300X < MI250X < MI210, then NVIDIA's B300 < ... < H100 <
    A100 < ...), metric (latency < throughput), precision (fp4 < ... < fp32); unknown values rank last. A tie
    at the best rank is
    ambiguous: nothing is chosen (``TemplateSelectionAmbiguous``, Failed until ``templateRef`` is set
    or a template goes away). No template of the model yet, or none Available yet: Pending
    (``TemplateNotFound`` / ``TemplateNotReady``); all filtered out: Failed ``TemplateNotFound``.
    """
    canonical = service_spec.model
    candidates = sorted(
        (t for t in templates.values() if t.spec.model == canonical),
        key=lambda t: t.metadata.name or "",
    )
    if not candidates:
        return Selection(
            status=STATUS_PENDING,
            reason="TemplateNotFound",
            message=f"no AIMServiceTemplate in this namespace serves {canonical!r} yet (spec.templateRef is not set)",
        )
    ready = [t for t in candidates if template_phase(t) == "Available"]
    if not ready:
        names = ", ".join(t.metadata.name or "" for t in candidates)
        return Selection(
            status=STATUS_PENDING,
            reason="TemplateNotReady",
            message=f"templates of {canonical!r} exist but none is Available yet: {names}",
        )
    allow_unoptimized = service_spec.allow_unoptimized is True
    rejected: list[str] = []
    kept: list[tuple[AIMServiceTemplate, Mapping[str, Any]]] = []
    for template in ready:
        name, spec = template.metadata.name, template.spec
        profile = _template_profile(template, deployments)
        kind = str(profile.get("type") or "optimized") if profile else "unoptimized"
        if kind != "optimized" and not allow_unoptimized:
            rejected.append(f"{name}: UnoptimizedTemplateFiltered ({kind})")
            continue
        gpu = spec.gpu_model or profile.get("gpuModel")
        if gpu and not inventory.of(str(gpu)):
            rejected.append(f"{name}: RequiredGPUNotInCluster ({gpu})")
            continue
        kept.append((template, profile))
    if not kept:
        return Selection(
            status=STATUS_FAILED,
            reason="TemplateNotFound",
            message=f"no Available template of {canonical!r} can be used: {'; '.join(rejected)}",
        )
    kept = prefer_namespace_templates(kept)

    def rank(item: tuple[AIMServiceTemplate, Mapping[str, Any]]) -> tuple[int, int, int, int]:
        template, profile = item
        spec = template.spec
        gpu = normalize_gpu_model(str(spec.gpu_model or profile.get("gpuModel") or ""))
        precision = profile.get("precision") or (spec.precision if spec.precision != "auto" else None)
        return (
            preference_rank(str(profile.get("type") or "optimized"), PROFILE_TYPE_PREFERENCE),
            preference_rank(gpu, GPU_PREFERENCE),
            preference_rank(profile.get("metric") or spec.metric, METRIC_PREFERENCE),
            preference_rank(precision, PRECISION_PREFERENCE),
        )

    ordered = sorted(kept, key=lambda item: (rank(item), item[0].metadata.name or ""))
    ranked = tuple(str(t.metadata.name) for t, _ in ordered)
    best = rank(ordered[0])
    tied = [str(t.metadata.name) for t, p in ordered if rank((t, p)) == best]
    if len(tied) > 1:
        return Selection(
            status=STATUS_FAILED,
            reason="TemplateSelectionAmbiguous",
            message=f"{len(tied)} templates of {canonical!r} rank equally ({', '.join(tied)}); set spec.templateRef",
            ranked=ranked,
        )
    return Selection(
        template=ordered[0][0],
        reason="BestMatch",
        message=f"template {ranked[0]!r} selected (best of {len(ranked)})",
        ranked=ranked,
    )


def resolve_references(
    service: AIMService,
    models: Sequence[AIMClusterModel] | ModelCatalog,
    templates: Mapping[str, AIMServiceTemplate],
    configs: Mapping[str, AIMNamespaceConfig],
    inventory: GpuInventory | None = None,
) -> Resolution:
    """Model, template and namespace config of a service, checked in kaiwo's order.

    Missing model or template, or a template of another model: Failed (``ModelNotFound``,
    ``TemplateNotFound``, ``ValidationFailed``). Without ``templateRef`` the template is chosen by
    :func:`select_template` (needs ``inventory``). Missing namespace config: Failed
    ``RuntimeConfigMissing`` (as aim-engine reports a missing reference). Model image missing: Degraded
    ``ImageNotFound``. Template Failed: Failed; not yet Available: Pending ``TemplateNotAvailable``;
    Available without model sources: Degraded ``NoModelSources``. ``templates``/``configs`` are the
    service namespace's, by name (objects that do not parse never get here: the boundary reader marks
    them, so referring to one is ``TemplateNotFound`` / ``RuntimeConfigMissing``).
    """
    spec = service.spec
    canonical = spec.model
    named = models_named(models, canonical)
    if not named:
        return Resolution(
            STATUS_FAILED, "ModelNotFound", f"no AIMClusterModel has spec.name {canonical!r} (spec.model)"
        )
    if len(named) > 1:
        return Resolution(
            STATUS_FAILED, "ValidationFailed", f"several AIMClusterModels have spec.name {canonical!r} (spec.model)"
        )
    model = named[0]
    record = record_of(models, model)
    metadata = record.metadata if record is not None and record.ok else None
    template_ref = spec.template_ref or ""
    selection: Selection | None = None
    if not template_ref:
        selection = select_template(
            spec, templates, metadata.recommended_deployments if metadata else (), inventory or GpuInventory()
        )
        if selection.template is None:
            return Resolution(selection.status, selection.reason, selection.message, model=model)
        template_ref = str(selection.template.metadata.name)
    template = templates.get(template_ref)
    if template is None:
        return Resolution(
            STATUS_FAILED,
            "TemplateNotFound",
            f"AIMServiceTemplate {template_ref!r} not found (spec.templateRef)",
            model=model,
        )
    if template.spec.model != canonical:
        return Resolution(
            STATUS_FAILED,
            "ValidationFailed",
            f"template {template_ref!r} serves {template.spec.model!r}, not spec.model {canonical!r}",
            model=model,
            template=template,
        )
    config_ref = spec.config_ref or "default"
    config = configs.get(config_ref)
    if config is None:
        return Resolution(
            STATUS_FAILED,
            "RuntimeConfigMissing",
            f"AIMNamespaceConfig {config_ref!r} not found (spec.configRef)",
            model=model,
            template=template,
        )
    if record is not None and record.reason == REASON_IMAGE_NOT_FOUND and record.image == model.spec.image:
        return Resolution(
            STATUS_DEGRADED, REASON_IMAGE_NOT_FOUND, record.message, model=model, template=template, config=config
        )
    template_status = template_phase(template)
    if template_status == "Failed":
        failure = condition_of(template_conditions(template), "Failure")
        return Resolution(
            STATUS_FAILED,
            (failure.reason if failure else None) or "TemplateFailed",
            f"template {template_ref!r} failed: {failure.message if failure else ''}".rstrip(": "),
            model=model,
            template=template,
            config=config,
        )
    if template_status != "Available":
        ready = condition_of(template_conditions(template), "Ready")
        detail = (ready.message if ready else None) or f"status {template_status or 'Pending'}"
        return Resolution(
            STATUS_PENDING,
            "TemplateNotAvailable",
            f"waiting for template {template_ref!r}: {detail}",
            model=model,
            template=template,
            config=config,
        )
    sources = tuple((template.status.model_sources if template.status else None) or ())
    if not sources:
        return Resolution(
            STATUS_DEGRADED,
            "NoModelSources",
            f"template {template_ref!r} lists no model sources",
            model=model,
            template=template,
            config=config,
        )
    deployment = match_profile(template.spec, metadata.recommended_deployments) if metadata else None
    return Resolution(
        model=model,
        template=template,
        config=config,
        deployment=deployment or {},
        sources=sources,
        selected=selection.message if selection else "",
    )
