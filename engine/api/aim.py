"""``aim.silogen.ai/v1alpha1`` AIM kinds (seed 004).

AIMClusterModel (cluster-scoped catalog entry, discovered from its image), AIMNamespaceConfig
(credentials and routing of a namespace, no status), AIMServiceTemplate (runtime profile selection),
AIMService (a KServe InferenceService plus HTTPRoute) and ModelCache (a PVC filled by a download Job).

The seed has no ``Required`` marks; the identifying fields are required here (a catalog entry's name
and image, a service's model, a template's model, a cache's source URI). A service's ``templateRef``
is optional: without it the template is selected as aim-engine does. Integers and booleans are
strict (``"1"`` is not an integer, ``"no"`` not a boolean), as the API server's schema check is. Precision
takes the enum of the ``precision`` field itself (it contains the default ``auto``), not the shorter
list printed under the AIMPrecision type.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field, WithJsonSchema

from engine.api.identity import DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_PATTERN, name_error
from engine.api.meta import (
    Conditions,
    EnvVar,
    KubeModel,
    ParentReference,
    Quantity,
    Resource,
    ResourceWithStatus,
    SecretKeySelector,
    Time,
)
from engine.api.registry import AIM_API, AimApiVersion
from engine.api.secrets import SecretName
from engine.errors import shown

API_VERSION: Final[AimApiVersion] = AIM_API
"""The apiVersion of this module's kinds (spelled in :mod:`engine.api.registry`)."""

AIMMetric = Literal["latency", "throughput"]
AIMPrecision = Literal["auto", "fp4", "fp8", "fp16", "fp32", "bf16", "int4", "int8"]
AIMServiceStatusEnum = Literal["Pending", "Starting", "Running", "Failed", "Degraded"]
AIMTemplateStatusEnum = Literal["Pending", "Progressing", "Available", "Failed"]
ModelCacheStatusEnum = Literal["Pending", "Progressing", "Available", "Failed"]


def check_storage_class_name(value: str) -> str:
    """``value`` when a StorageClass can have it as its name (a DNS-1123 subdomain) or it is empty (a claim with
    no class, as Kubernetes reads ``storageClassName: ""``), else ``ValueError`` saying why.

    Args:
        value: The storage class's name.

    Returns:
        ``value``.

    Raises:
        ValueError: No StorageClass can be named so.
    """
    problem = value and name_error("storage.k8s.io/v1", "StorageClass", value)
    if problem:
        raise ValueError(f"{shown(value)} is not a valid StorageClass name: {problem}")
    return value


StorageClassName = Annotated[
    str,
    AfterValidator(check_storage_class_name),
    WithJsonSchema(
        {"type": "string", "maxLength": DNS1123_SUBDOMAIN_MAX, "pattern": f"^({DNS1123_SUBDOMAIN_PATTERN[1:-1]})?$"}
    ),
]
"""The name of a StorageClass, rendered into the cache's PersistentVolumeClaim: a name no StorageClass can have
(``../../Bad Class``) is refused where the object is read, with the field named, not by the API server at the
PVC's creation."""

MAX_REPLICAS: Final = 2_147_483_647
"""The largest AIMService ``spec.replicas``: the int32 maximum, what the API server enforces on the replica
counts the service is rendered into (the InferenceService's ``minReplicas``/``maxReplicas``, a Deployment's
``replicas``), so a count the cluster would refuse is refused where the service is read."""
MAX_GPUS_PER_REPLICA: Final = 1024
"""The most GPUs one replica of a template may name (``gpusPerReplica``, ``tensorParallelism``): a multi-node
replica of 128 nodes of 8 GPUs, the bound llm-d's ``acceleratorCount`` has (``engine.api.llmd``). A replica's
GPUs become its container's resource requests (a GPU count, 4 CPUs and 32 GiB of memory per GPU), so a larger
count is a typo or a hostile image label, never a replica a cluster schedules."""


# --------------------------------------------------------------------------------------------------
# AIMClusterModel
# --------------------------------------------------------------------------------------------------


class AIMClusterModelSpec(KubeModel):
    """AIMClusterModelSpec defines the desired state of AIMClusterModel."""

    name: str = Field(min_length=1)
    """Canonical model name including version/revision, e.g. meta/llama-3-8b:1.1+20240915."""
    image: str = Field(min_length=1)
    """Container image of this AIM model, inspected to discover its runtime profiles."""


class AIMClusterModelStatus(KubeModel):
    """AIMClusterModelStatus defines the observed state of AIMClusterModel."""

    observed_generation: int | None = Field(None, alias="observedGeneration")
    """ObservedGeneration is the most recent generation observed by the controller."""
    conditions: Conditions | None = None
    """Conditions represent the latest available observations of the model's state."""


class AIMClusterModel(ResourceWithStatus[AIMClusterModelSpec, AIMClusterModelStatus]):
    """AIMClusterModel is the Schema for cluster-scoped AIM model catalog entries."""

    api_version: AimApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["AIMClusterModel"] = "AIMClusterModel"


# --------------------------------------------------------------------------------------------------
# AIMNamespaceConfig
# --------------------------------------------------------------------------------------------------


class AIMS3Credential(KubeModel):
    """S3 credential references for a specific endpoint."""

    endpoint_url: str | None = Field(None, alias="endpointUrl")
    """EndpointURL (S3-compatible); wins over Region when both are set."""
    region: str | None = None
    """Region (AWS S3)."""
    access_key_id: SecretKeySelector | None = Field(None, alias="accessKeyId")
    """Secret key holding the access key id."""
    secret_access_key: SecretKeySelector | None = Field(None, alias="secretAccessKey")
    """Secret key holding the secret access key."""


class AIMNamespaceCredentials(KubeModel):
    """Optional credentials for model discovery and caching."""

    hugging_face_token: SecretKeySelector | None = Field(None, alias="huggingFaceToken")
    """The token used to access Hugging Face repositories."""
    s3: list[AIMS3Credential] | None = None
    """One or more S3 credential configurations."""


class AIMNamespaceImageConfig(KubeModel):
    """Image pull configuration for AIM workloads in the namespace."""

    image_pull_secrets: list[SecretName] | None = Field(None, alias="imagePullSecrets")
    """Secret names used for pulling AIM images."""


class AIMNamespaceRoutingConfig(KubeModel):
    """Automatic HTTPRoute provisioning in the namespace."""

    gateway: ParentReference | None = None
    """The Gateway listener routes attach to (as HTTPRoute.parentRefs[*])."""
    auto_create_route: bool | None = Field(True, alias="autoCreateRoute")
    """AutoCreateRoute enables automatic HTTPRoute creation for AIM services."""


class AIMNamespaceConfigSpec(KubeModel):
    """AIMNamespaceConfigSpec defines the desired configuration for an AIM-enabled namespace."""

    credentials: AIMNamespaceCredentials | None = None
    """Secret references used during model access and caching."""
    images: AIMNamespaceImageConfig | None = None
    """Image pull behavior for AIM images within this namespace."""
    routing: AIMNamespaceRoutingConfig | None = None
    """One HTTPRoute per service with path /<namespace>/<workload_id>/ on the referenced Gateway."""
    cache_storage_class_name: StorageClassName | None = Field(None, alias="cacheStorageClassName")
    """Storage class used for cached models."""


class AIMNamespaceConfig(Resource[AIMNamespaceConfigSpec]):
    """AIMNamespaceConfig configures credentials and routing for a namespace."""

    api_version: AimApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["AIMNamespaceConfig"] = "AIMNamespaceConfig"


# --------------------------------------------------------------------------------------------------
# AIMServiceTemplate
# --------------------------------------------------------------------------------------------------


class AIMServiceTemplateSpec(KubeModel):
    """A namespaced template selecting a runtime profile for an AIM model."""

    model: str = Field(min_length=1)
    """Canonical model name (exact match of an AIMClusterModel spec.name). Immutable."""
    metric: AIMMetric | None = None
    """Optimization goal: latency or throughput. Immutable."""
    precision: AIMPrecision | None = "auto"
    """Numeric precision used by the runtime. Immutable."""
    gpus_per_replica: int | None = Field(None, alias="gpusPerReplica", ge=1, le=MAX_GPUS_PER_REPLICA, strict=True)
    """Total number of GPUs for a single model replica. Immutable."""
    gpu_model: str | None = Field(None, alias="gpuModel", min_length=1)
    """Physical GPU card model targeted by this template, e.g. MI300X. Immutable."""
    tensor_parallelism: int | None = Field(None, alias="tensorParallelism", ge=1, le=MAX_GPUS_PER_REPLICA, strict=True)
    """Tensor parallel degree expected by the runtime. Immutable."""
    warm_cache: bool | None = Field(False, alias="warmCache", strict=True)
    """Warm the model cache in this namespace right after profile discovery."""


class AIMServiceTemplateStatus(KubeModel):
    """AIMServiceTemplateStatus defines the observed state of AIMServiceTemplate."""

    observed_generation: int | None = Field(None, alias="observedGeneration")
    """ObservedGeneration is the most recent generation observed by the controller."""
    conditions: Conditions | None = None
    """Conditions represent the latest observations of template state."""
    status: AIMTemplateStatusEnum | None = "Pending"
    """High-level status of the template lifecycle."""
    model_sources: list[str] | None = Field(None, alias="modelSources")
    """The models this template requires to run; cached when the template is cached."""


class AIMServiceTemplate(ResourceWithStatus[AIMServiceTemplateSpec, AIMServiceTemplateStatus]):
    """AIMServiceTemplate selects the runtime profile and GPU parameters of AIM services."""

    api_version: AimApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["AIMServiceTemplate"] = "AIMServiceTemplate"


# --------------------------------------------------------------------------------------------------
# AIMService
# --------------------------------------------------------------------------------------------------


class AIMServiceSpec(KubeModel):
    """Binds a canonical model to an AIMServiceTemplate and sets replicas and caching."""

    model: str = Field(min_length=1)
    """Canonical model name to deploy; matches spec.name of an AIMClusterModel."""
    template_ref: str | None = Field(None, alias="templateRef", min_length=1)
    """Name of the AIMServiceTemplate (same namespace) to use; omitted: the best Available template of the model."""
    allow_unoptimized: bool | None = Field(False, alias="allowUnoptimized", strict=True)
    """Let template selection pick a profile that is not of type optimized (Modelplane, from aim-engine)."""
    cache_model: bool | None = Field(True, alias="cacheModel", strict=True)
    """Cache the model sources before the service starts if the template does not warm the cache."""
    replicas: int | None = Field(1, ge=0, le=MAX_REPLICAS, strict=True)
    """Number of replicas of this service."""
    config_ref: str | None = Field("default", alias="configRef")
    """Name of the AIMNamespaceConfig (same namespace) used by this service."""


class AIMServiceStatus(KubeModel):
    """AIMServiceStatus defines the observed state of AIMService."""

    observed_generation: int | None = Field(None, alias="observedGeneration")
    """ObservedGeneration is the most recent generation observed by the controller."""
    conditions: Conditions | None = None
    """Conditions represent the latest observations of the service state."""
    status: AIMServiceStatusEnum | None = "Pending"
    """High-level status of the service lifecycle."""


class AIMService(ResourceWithStatus[AIMServiceSpec, AIMServiceStatus]):
    """AIMService manages a KServe-based AIM inference service for the selected model and template."""

    api_version: AimApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["AIMService"] = "AIMService"


# --------------------------------------------------------------------------------------------------
# ModelCache
# --------------------------------------------------------------------------------------------------


class ModelCacheSpec(KubeModel):
    """ModelCacheSpec defines the desired state of ModelCache."""

    source_uri: str = Field(alias="sourceUri", min_length=1)
    """The source of the model to be downloaded; the cache's only identifier."""
    storage_class_name: StorageClassName | None = Field(None, alias="storageClassName")
    """Storage class of the cache volume."""
    size: Quantity | None = None
    """Size of the cache volume."""
    env: list[EnvVar] | None = None
    """Environment variables needed to download the model into the cache."""


class ModelCacheStatus(KubeModel):
    """ModelCacheStatus defines the observed state of ModelCache."""

    observed_generation: int | None = Field(None, alias="observedGeneration")
    """The most recent generation observed."""
    conditions: Conditions | None = None
    """Conditions represent the latest available observations of the model cache's state."""
    status: ModelCacheStatusEnum | None = "Pending"
    """Status represents the current status of the model cache."""
    last_used: Time | None = Field(None, alias="lastUsed")
    """The last time a model was deployed that used this cache."""
    persistent_volume_claim: str | None = Field(None, alias="persistentVolumeClaim")
    """Name of the created PVC."""


class ModelCache(ResourceWithStatus[ModelCacheSpec, ModelCacheStatus]):
    """ModelCache is the Schema for the modelcaches API."""

    api_version: AimApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["ModelCache"] = "ModelCache"
