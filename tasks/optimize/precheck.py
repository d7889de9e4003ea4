"""What an optimize cycle needs of its cluster before it starts: checked by a command before the flow is even
imported (this module loads no more than the cluster backend), so a wrong path, no API access or a missing
configuration is one ``error:`` line within a second, not a flow crash."""

from __future__ import annotations

from engine.api.registry import LLMD_API, VARIANT_AUTOSCALING
from engine.optimize.config import ACCELERATOR_COSTS_CONFIGMAP
from tasks.clients.cluster import Cluster, local_path_problem
from tasks.clients.cluster.errors import ClusterError, NotFound


def missing_configuration(config_maps: set[str], has_variants: bool, config_namespace: str) -> str | None:
    """Why VariantAutoscalings cannot be optimized with the ConfigMaps found, or None.

    Without ``accelerator-unit-costs`` no variant can be priced: that is reported once, as what it is
    (usually a wrong ``--config-namespace``), rather than as an unknown accelerator on every resource.
    A cluster with only Kthena bindings needs no WVA configuration.

    Args:
        config_maps: The names of the ConfigMaps in the config namespace.
        has_variants: Whether the cluster holds valid VariantAutoscalings.
        config_namespace: The namespace the WVA ConfigMaps were looked for in.

    Returns:
        The problem as one sentence, or None when the configuration is sufficient.
    """
    if has_variants and ACCELERATOR_COSTS_CONFIGMAP not in config_maps:
        return (
            f"configuration ConfigMap {ACCELERATOR_COSTS_CONFIGMAP!r} not found in namespace {config_namespace!r} "
            "(is the config namespace right?)"
        )
    return None


def cannot_run_reason(cluster: Cluster, config_namespace: str) -> str | None:
    """Why an optimize cycle cannot run on ``cluster`` at all, or None.

    Args:
        cluster: The cluster the cycle would run on.
        config_namespace: The namespace of the WVA ConfigMaps.

    Returns:
        The problem as one sentence (an unusable manifests path, an unreadable cluster, missing configuration), or
        None when the cycle can run.
    """
    from tasks.boundary import accept

    problem = local_path_problem(cluster)
    if problem:
        return problem
    try:
        config_maps = {cm["metadata"]["name"] for cm in cluster.list("v1", "ConfigMap", namespace=config_namespace)}
        try:
            has_variants = bool(accept(cluster, cluster.list(LLMD_API, VARIANT_AUTOSCALING)))  # valid ones only
        except NotFound:  # the CRD is not installed: no VariantAutoscalings
            has_variants = False
    except ClusterError as exc:
        return f"cannot read the cluster: {exc.message}"
    return missing_configuration(config_maps, has_variants, config_namespace)
