"""Push a flow run's metrics to a Prometheus Pushgateway.

Why push and not a scrape endpoint: a Prefect flow run is a batch job. Every scheduled cycle is a
fresh process (a Kubernetes Job with the work pool) that lives for seconds; a ``/metrics`` endpoint
would exist only while the run does, at an address that changes every run, and Prometheus would
catch it rarely or never. The Pushgateway is Prometheus' answer for exactly this ("service-level
batch jobs"): the run pushes its result once, the gateway keeps the last push of each group, and the
cluster's Prometheus scrapes the gateway (with ``honor_labels: true``) at its usual interval. So the
value an HPA or KEDA reads stays there between runs, and when Modelplane stops running it stays at
the last decision instead of vanishing (an HPA never sees a spurious drop).

Grouping key: ``job="modelplane"``, ``cluster`` (``$MODELPLANE_CLUSTER_NAME``, default ``default``)
and ``flow`` (e.g. ``optimize``), so several clusters or flows share one gateway without overwriting
each other. Each push is a PUT, which replaces the whole group: a series that is not in the push is
gone (a deleted variant's ``wva_desired_replicas`` disappears at the next cycle), and nothing from an
older run lingers.

Configuration: the flow parameter ``pushgateway_url`` / CLI ``--pushgateway``, else
``$MODELPLANE_PUSHGATEWAY_URL``; unset means off. ``$MODELPLANE_PUSHGATEWAY_TIMEOUT`` (seconds,
default 5). A failing gateway is an error string the flow reports as a degraded run; it never raises.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import urllib.error
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, push_to_gateway
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.cycle_metrics import HELP, MetricSet

log = logging.getLogger("modelplane.pushgateway")

JOB = "modelplane"
ENV_URL = "MODELPLANE_PUSHGATEWAY_URL"
ENV_CLUSTER = "MODELPLANE_CLUSTER_NAME"
ENV_TIMEOUT = "MODELPLANE_PUSHGATEWAY_TIMEOUT"
DEFAULT_CLUSTER = "default"
DEFAULT_TIMEOUT_S = 5.0
_CREDENTIALS = re.compile(r"//[^/@\s]*@")


@dataclass(frozen=True)
class Pushgateway:
    """Where to push and under which grouping key."""

    url: str
    cluster: str = DEFAULT_CLUSTER
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def configured(cls, url: str | None, environ: Mapping[str, str] | None = None) -> Pushgateway | None:
        """The gateway the parameter or ``$MODELPLANE_PUSHGATEWAY_URL`` names, or None when off."""
        env = os.environ if environ is None else environ
        url = url or env.get(ENV_URL) or None
        if not url:
            return None
        try:
            timeout = float(env.get(ENV_TIMEOUT) or DEFAULT_TIMEOUT_S)
        except ValueError:
            timeout = DEFAULT_TIMEOUT_S
        return cls(url=url.rstrip("/"), cluster=env.get(ENV_CLUSTER) or DEFAULT_CLUSTER, timeout_s=timeout)

    def grouping_key(self, flow: str) -> dict[str, str]:
        """The labels of this flow's group (besides ``job``)."""
        return {"cluster": self.cluster, "flow": flow}

    @property
    def safe_url(self) -> str:
        """The URL without credentials, for messages."""
        return _CREDENTIALS.sub("//", self.url)


class _MetricSetCollector(Collector):
    """Exposes a :class:`MetricSet` as gauge families, one per metric name (help text from HELP)."""

    def __init__(self, metrics: MetricSet) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        label_names: dict[str, list[str]] = {}
        for sample in self.metrics:
            names = [k for k, _ in sample.labels]
            if sample.name not in families:
                families[sample.name] = GaugeMetricFamily(sample.name, HELP[sample.name], labels=names)
                label_names[sample.name] = names
            labels = dict(sample.labels)
            families[sample.name].add_metric([labels.get(n, "") for n in label_names[sample.name]], sample.value)
        yield from families.values()


def registry_of(metrics: MetricSet) -> CollectorRegistry:
    """A registry exposing exactly ``metrics`` (nothing of the process itself).

    Args:
        metrics: The run's metric families and samples.

    Returns:
        The registry ``push_to_gateway`` reads.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_MetricSetCollector(metrics))
    return registry


PUSH_DEADLINE_TIMEOUTS = 2
"""A push must be answered whole within this many of its timeout (10 s at the default 5 s). urllib's timeout bounds
each socket read, so a gateway sending its answer a byte at a time held the cycle, and its writes, indefinitely."""


class _Overdue(Exception):
    """The push was not answered within its deadline."""


def _within(seconds: float, call: Callable[[], object]) -> None:
    """Run ``call`` on a daemon thread and wait at most ``seconds`` for it; its error is raised here. A call still
    running then is left behind (a daemon thread never holds the process's exit) and :class:`_Overdue` raised."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except Exception as exc:  # noqa: BLE001 - handed to the caller, which classifies it
            outcome.append(exc)

    worker = threading.Thread(target=run, name="pushgateway-push", daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        raise _Overdue
    if outcome[0] is not None:
        raise outcome[0]


def push(gateway: Pushgateway, flow: str, metrics: MetricSet) -> str | None:
    """PUT ``metrics`` as the group of ``flow`` (replacing what that group held); never raises.

    Args:
        gateway: Where to push, with the grouping labels and the timeout.
        flow: The flow whose group it is.
        metrics: The run's metrics.

    Returns:
        None on success, else why it failed (the gateway's URL without credentials).
    """
    deadline_s = PUSH_DEADLINE_TIMEOUTS * gateway.timeout_s
    try:
        _within(
            deadline_s,
            lambda: push_to_gateway(
                gateway.url,
                job=JOB,
                registry=registry_of(metrics),
                grouping_key=gateway.grouping_key(flow),
                timeout=gateway.timeout_s,
            ),
        )
    except _Overdue:
        return f"pushgateway {gateway.safe_url} did not answer within {deadline_s:g}s"
    except urllib.error.HTTPError as exc:
        return f"pushgateway {gateway.safe_url} answered HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"pushgateway {gateway.safe_url} unreachable: {_CREDENTIALS.sub('//', str(reason))}"
    log.debug("pushed %d series to %s for %s", len(metrics.samples), gateway.safe_url, flow)
    return None
