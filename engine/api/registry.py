"""Every custom resource kind Modelplane serves, with the facts CRDs, backends and the CLI share.

This table is the single source for plural names, scope, short names and subresources: the CRD
generator, the cluster backends and the test server all read it, so they cannot disagree.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from typing import Any


@dataclass(frozen=True)
class KindInfo:
    """Static facts about one custom resource kind."""

    group: str
    version: str
    kind: str
    plural: str
    module: str  # module under engine.api holding the pydantic model named ``kind``
    namespaced: bool = True
    has_status: bool = True
    has_scale: bool = False
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("modelplane",)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def api_version(self) -> str:
        """``group/version`` as it appears in manifests."""
        return f"{self.group}/{self.version}"

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

    def model(self) -> type:
        """The pydantic model class for this kind."""
        return getattr(importlib.import_module(f"engine.api.{self.module}"), self.kind)


LLMD = "llmd.ai"
LLMAZ = "llmaz.io"
KTHENA = "registry.volcano.sh"
AIM = "aim.silogen.ai"

KINDS: tuple[KindInfo, ...] = (
    KindInfo(LLMD, "v1alpha1", "VariantAutoscaling", "variantautoscalings", "llmd", short_names=("va",)),
    KindInfo(LLMAZ, "v1alpha1", "OpenModel", "openmodels", "llmaz", namespaced=False, short_names=("om",)),
    KindInfo(KTHENA, "v1alpha1", "Model", "models", "kthena", short_names=("km",)),
    KindInfo(KTHENA, "v1alpha1", "AutoscalingPolicy", "autoscalingpolicies", "kthena", short_names=("asp",)),
    KindInfo(
        KTHENA, "v1alpha1", "AutoscalingPolicyBinding", "autoscalingpolicybindings", "kthena", short_names=("aspb",)
    ),
    KindInfo(AIM, "v1alpha1", "AIMClusterModel", "aimclustermodels", "aim", namespaced=False, short_names=("aimcm",)),
    KindInfo(
        AIM, "v1alpha1", "AIMNamespaceConfig", "aimnamespaceconfigs", "aim", has_status=False, short_names=("aimnc",)
    ),
    KindInfo(AIM, "v1alpha1", "AIMServiceTemplate", "aimservicetemplates", "aim", short_names=("aimst",)),
    KindInfo(AIM, "v1alpha1", "AIMService", "aimservices", "aim", short_names=("aimsvc",)),
    KindInfo(AIM, "v1alpha1", "ModelCache", "modelcaches", "aim", short_names=("mc",)),
)


@cache
def _index() -> dict[tuple[str, str], KindInfo]:
    return {(k.api_version, k.kind): k for k in KINDS}


def kind_info(api_version: str, kind: str) -> KindInfo | None:
    """The registry entry for ``apiVersion``/``kind``, or ``None`` if it is not one of ours."""
    return _index().get((api_version, kind))
