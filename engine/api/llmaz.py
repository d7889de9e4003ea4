"""``llmaz.io/v1alpha1`` OpenModel (seed 002): a cluster-scoped model catalog entry.

The seed's generator marks every non-``omitempty`` field ``[Required]``. Two of those marks are kept
out of the schema because the seed itself contradicts them and the real llmaz CRD has them optional:
``status`` (no object could be created without a status otherwise) and ``ModelHub.filename`` (its own
description says "once filename is set", i.e. it is optional).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from engine.api.meta import Conditions, KubeModel, Quantity, ResourceWithStatus, Time
from engine.api.registry import LLMAZ_API, LlmazApiVersion

API_VERSION: Final[LlmazApiVersion] = LLMAZ_API
"""The apiVersion of this module's kinds (spelled in :mod:`engine.api.registry`)."""

FAMILY_NAME_LABEL = "llmaz.io/model-family-name"

FlavorName = str
ModelName = str
ModelRole = str
URIProtocol = str


class Flavor(KubeModel):
    """Flavor defines the accelerator requirements for a model and the parameters used in autoscaling."""

    name: FlavorName
    """Name represents the flavor name, which will be used in model claim."""
    limits: dict[str, Quantity] | None = None
    """The accelerators required per replica, like nvidia.com/gpu: 8."""
    node_selector: dict[str, str] | None = Field(None, alias="nodeSelector")
    """Node candidates for pod placement; empty means every node."""
    params: dict[str, str] | None = None
    """Other parameters, e.g. TP, PP, INSTANCE-TYPE."""


class InferenceConfig(KubeModel):
    """InferenceConfig represents the inference configurations for the model."""

    flavors: list[Flavor] | None = None
    """Accelerator requirements to serve the model, fungible in priority order."""


class ModelHub(KubeModel):
    """ModelHub represents the model registry for model downloads."""

    name: str | None = None
    """Name refers to the model registry, such as huggingface."""
    model_id: str = Field(alias="modelID")
    """ModelID refers to the model identifier on model hub, such as meta-llama/Meta-Llama-3-8B."""
    filename: str | None = None
    """A specific model file rather than the whole repo (e.g. one GGUF file)."""
    revision: str | None = None
    """A Git revision: branch name, tag or commit hash."""
    allow_patterns: list[str] | None = Field(None, alias="allowPatterns")
    """Files matching at least one pattern are downloaded."""
    ignore_patterns: list[str] | None = Field(None, alias="ignorePatterns")
    """Files matching any pattern are not downloaded."""


class ModelRef(KubeModel):
    """ModelRef refers to a created Model with its role."""

    name: ModelName
    """Name represents the model name."""
    role: ModelRole | None = None
    """Role of the model once more than one model is required, e.g. draft."""


class ModelSource(KubeModel):
    """ModelSource represents the source of the model. Only one model source will be used."""

    model_hub: ModelHub | None = Field(None, alias="modelHub")
    """ModelHub represents the model registry for model downloads."""
    uri: URIProtocol | None = None
    """A model source URI: oss://bucket.endpoint/path, ollama://llama3.3, host://path, s3://..., hf://..."""


class ModelSpec(KubeModel):
    """ModelSpec defines the desired state of Model."""

    family_name: ModelName = Field(alias="familyName")
    """The model type, like llama2, injected as the label llmaz.io/model-family-name."""
    source: ModelSource
    """Where the model is loaded from."""
    inference_config: InferenceConfig = Field(alias="inferenceConfig")
    """InferenceConfig represents the inference configurations for the model."""
    owned_by: str | None = Field(None, alias="ownedBy")
    """Owner of the running models, reported as OwnedBy in the OpenAI /models API ("llmaz" if unset)."""
    created_at: Time | None = Field(None, alias="createdAt")
    """Creation time reported as Created in the OpenAI /models API (RFC 3339)."""


class ModelStatus(KubeModel):
    """ModelStatus defines the observed state of Model."""

    conditions: Conditions
    """Conditions represents the Inference condition."""


class OpenModel(ResourceWithStatus[ModelSpec, ModelStatus]):
    """OpenModel is the Schema for the open models API."""

    api_version: LlmazApiVersion = Field(API_VERSION, alias="apiVersion")
    kind: Literal["OpenModel"] = "OpenModel"
