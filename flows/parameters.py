"""Constrained parameter types shared by every flow's signature: the ONLY place a flow's parameter rules live.

Prefect builds a deployment's parameter schema from the flow's signature (pydantic), so a constraint
written here ends up in the JSON schema the server stores: with ``enforce_parameter_schema: true`` the
UI form and ``prefect deployment run -p`` reject a bad value before a run is created, and a local call
(``modelplane ...``) fails the same check before the flow body runs. Use these in flow signatures
instead of bare ``str``/``float`` so every lifecycle shows the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

from engine.optimize.spec import MAX_SCALE_DOWN_WINDOW_S
from engine.units import PROMETHEUS_DURATION_PATTERN
from tasks.clients.oci.references import IMAGE_REFERENCE_PATTERN

KUBE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""An RFC 1123 label: a Namespace name (and the names of most namespaced objects)."""

PromDuration = Annotated[str, Field(pattern=PROMETHEUS_DURATION_PATTERN, examples=["1m", "30s"])]
"""A PromQL range such as ``1m``."""

PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A finite duration in seconds that must be above zero (time limits)."""

NonNegativeSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A finite duration in seconds, zero allowed (zero disables the behaviour it configures)."""

Seed = Annotated[int, Field(ge=0)]
"""The seed of a replay's random draws: a whole number from 0 (numpy's generators take no negative seed)."""

ScaleDownWindowSeconds = Annotated[float, Field(ge=0, le=MAX_SCALE_DOWN_WINDOW_S)]
"""A scale-down stabilization window in seconds, 0 (at once) to an hour: the bound of the per-resource annotation
(:data:`engine.optimize.spec.MAX_SCALE_DOWN_WINDOW_S`) and of the HPA's ``stabilizationWindowSeconds``."""

NamespaceName = Annotated[str, Field(pattern=KUBE_NAME_PATTERN, min_length=1, max_length=63)]
"""A Kubernetes Namespace name."""

MAX_IMAGE_REF_CHARS: Final = 1024
"""The longest image reference a flow takes: a 255-character name, a 128-character tag and a sha512 digest are 520."""

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
"""The name of a Kubernetes object (RFC 1123 subdomain)."""


def _image_reference(value: str) -> str:
    """``value`` when it is a container image reference Docker would pull (the distribution reference grammar,
    :func:`tasks.clients.oci.references.parse_reference`), else ``ValueError`` saying why: the image is written into
    the Deployments and Jobs a flow renders, where a newline or 100 KB of text was written as given."""
    from tasks.clients.oci.references import RegistryError, parse_reference

    if value != value.strip():
        raise ValueError(f"{value!r}: an image reference has no white space around it")
    try:
        parse_reference(value)
    except RegistryError as exc:
        raise ValueError(str(exc)) from None
    return value


ImageRef = Annotated[
    str,
    Field(min_length=1, max_length=MAX_IMAGE_REF_CHARS),
    AfterValidator(_image_reference),
    WithJsonSchema(
        {
            "type": "string",
            "format": "image-reference",
            "minLength": 1,
            "maxLength": MAX_IMAGE_REF_CHARS,
            "pattern": IMAGE_REFERENCE_PATTERN,
        }
    ),
]
"""A container image reference (``[host[:port]/]repository[:tag][@digest]``), checked as Docker parses one."""

NonEmpty = Annotated[str, Field(min_length=1)]
"""A string that must not be empty (a file path, a directory)."""


def absent_as(empty: Any) -> BeforeValidator:
    """A parameter's validation step reading None as ``empty``, the parameter's default.

    A parameter whose absence has a meaning (all namespaces, the environment's URL) defaults to that meaning's
    plain value (an empty list or string), so the schema Prefect builds has one type and the UI's run form a
    plain field with the default in it (an ``X | None`` parameter gets a str/None toggle there). None, as a CLI
    option left out or an older caller passes it, still means the same: it is read as the default. The schema
    is the inner type's (a before-validator does not change it).

    Args:
        empty: The parameter's default, what None stands for.

    Returns:
        The validator, for the parameter's ``Annotated`` type.
    """
    return BeforeValidator(lambda value: empty if value is None else value)


ClusterTarget = Annotated[str, absent_as("")]
"""The ``cluster`` parameter every flow takes (``tasks.clients.cluster.connect``): empty (the default) =
``$MODELPLANE_CLUSTER``, else kubeconfig or in-cluster; ``kubeconfig:PATH[#CONTEXT]``; or a manifests
directory/file. An empty value is never the working directory."""

Namespaces = Annotated[Sequence[NamespaceName], absent_as(())]
"""The namespaces a flow acts in; empty (the default) = all of them (each flow's description says which)."""

ObjectNames = Annotated[Sequence[ObjectName], absent_as(())]
"""Names of Kubernetes objects; empty (the default) = every object the flow covers."""

Setting = Annotated[str, absent_as("")]
"""A string parameter whose empty default means "not set here" (a URL from the environment, no file, no
selector): the parameter's description says what applies then."""

OptionalNamespace = Annotated[str, Field(pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$", max_length=63), absent_as("")]
"""A Kubernetes Namespace name, or empty (the default) for none: the description says what empty does."""

CLUSTER_HELP = (
    "A manifests directory or file, 'kubeconfig:PATH' or 'kubeconfig:PATH#CONTEXT'; absent or empty: "
    "$MODELPLANE_CLUSTER, else the current kubeconfig or in-cluster config (never the working directory)."
)
"""The ``cluster`` parameter's description (every ``--cluster`` option of the CLI says it)."""

# ----------------------------------------------------------------------------------------------- defaults
# Each default a flow signature and its CLI option share is written once, here: this module is light enough
# for the CLI to import at start-up (the flow modules import Prefect and the engine), and the flow signature
# that uses it is what Prefect turns into the deployment's parameter schema (its ``default``).

SYSTEM_NAMESPACE = "modelplane-system"
"""Modelplane's own namespace: the WVA ConfigMaps the optimizer, calibration and simulation read, the worker."""

IN_CLUSTER_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
"""The Prometheus of the prometheus-operator (kube-prometheus-stack) in namespace ``monitoring``: what the
Kubernetes work pool's runs and the install use when no ``PROMETHEUS_URL`` is set."""

DISCOVERY_RESYNC_S = 86400
"""discover-models reads an unchanged image's labels again after this many seconds (a day)."""

SCALE_DOWN_STABILIZATION_S = 180.0
"""How long the optimize deployment (deployments/prefect.yaml) and ``modelplane optimize`` hold a scale-down
(a replica's start-up plus one cycle: engine.optimize.stabilization.DEFAULT_SCALE_DOWN_WINDOW_S); the flow's own default
is 0, as WVA's."""

CALIBRATE_LOOKBACK = "24h"
"""How far back calibrate reads metrics (a day: gamma needs hours of varied load)."""

CALIBRATE_WINDOW = "5m"
"""The length of one metrics window calibrate fits on."""

CALIBRATE_MAX_LOOKBACK_S = 31 * 86400.0
"""The furthest back calibrate reads (31 days: Prometheus keeps 15 by default): its range queries are planned as a
whole before the first is sent, and a lookback of 100,000 years took all memory."""

SIMULATE_INTERVAL_S = 60.0
"""The simulated control interval (the optimize deployment's schedule)."""

MIN_CONTROL_INTERVAL_S = 1.0
MAX_CONTROL_INTERVAL_S = 3600.0
ControlInterval = Annotated[float, Field(ge=MIN_CONTROL_INTERVAL_S, le=MAX_CONTROL_INTERVAL_S, allow_inf_nan=False)]
"""A simulated control interval, 1 s to 1 h: a replay keeps state per interval and bins sub-minute peaks by it, so
an interval of 10^-6 s took 9 GiB and one of 10^10 s all memory (10^308 s an OverflowError)."""

MAX_RESYNC_S = 365 * 86400
"""The longest discovery waits before it reads an unchanged image again (a year; 10^30 s ended the run in an
OverflowError)."""

SIMULATE_STARTUP_DELAY_S = 120.0
"""Seconds a simulated new replica takes to become ready."""

SIMULATE_OUTPUT_DIR = "simulation-report"
"""The directory simulate writes its report into."""

WATCH_SECONDS = 45.0
"""How long watch-models keeps its watch open (within its one-minute schedule)."""

MAX_WATCH_S = 50
"""The longest watch-models watch: the run must end before the next scheduled one starts."""

MAX_FILL_ATTEMPTS = 4
"""Fills per cache generation before warm-caches leaves the cache Failed."""

FILL_RETRY_BACKOFF_S = 300.0
"""warm-caches waits this long after a first failed fill (doubling after each further one)."""

KTHENA_NETWORKING: Final = "auto"
"""rollout-models renders Kthena's networking objects when the cluster serves them (``off``: never)."""

ROLLOUT_WORKLOAD: Final = "Deployment"
"""The workload rollout-models renders a Model as (``ModelServing``: Kthena's gang-scheduled one)."""
