"""The environment variables the Prometheus client reads, declared once: :meth:`PrometheusMetrics.from_env
<tasks.clients.metrics.prometheus.PrometheusMetrics.from_env>` reads the numbers and windows through this table
(:func:`env_options`) and the address, token and TLS variables by the names it declares, and the reference page
docs/reference/prometheus.md is rendered from it (tests/cli_reference.py), so the page names every variable the
client reads, with the default the client has (tests/test_metrics.py checks each row reaches the client).

Every flow that reads Prometheus (optimize, tune, calibrate-profiles, the serving control loop) builds its client
from the environment: in a cluster, from the install's ConfigMap ``modelplane``, which every Modelplane container
and every flow-run Job reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PROMETHEUS_ENVIRONMENT", "EnvSetting", "env_options"]


@dataclass(frozen=True)
class EnvSetting:
    """One environment variable of the Prometheus client: its name, what it sets, and either the keyword of
    ``PrometheusMetrics`` it sets with that keyword's type (its default is the keyword's), or, for a variable
    ``from_env`` reads itself, how its default reads."""

    name: str
    meaning: str
    option: str | None = None
    kind: type = str
    unset: str = ""
    """What applies when the variable is not set, for a variable without an ``option``."""


PROMETHEUS_ENVIRONMENT: tuple[EnvSetting, ...] = (
    EnvSetting(
        "PROMETHEUS_URL",
        "The Prometheus HTTP API's base URL (Prometheus, Thanos Querier or any server of its query API). A flow's "
        "`prometheus_url` parameter takes precedence. Empty: no metrics, and optimize holds every variant and says so.",
        unset="none",
    ),
    EnvSetting(
        "PROMETHEUS_TOKEN",
        "A bearer token sent with every query. It never appears in a log line, a message or a status.",
        unset="none",
    ),
    EnvSetting(
        "PROMETHEUS_TOKEN_FILE",
        "A file holding the bearer token, read again before every query, so a projected service-account token "
        "that rotates keeps working. Give this or `PROMETHEUS_TOKEN`, not both.",
        unset="none",
    ),
    EnvSetting(
        "PROMETHEUS_CA_BUNDLE",
        "A CA bundle (PEM file) to verify Prometheus's TLS certificate with, instead of the system's.",
        unset="the system's CAs",
    ),
    EnvSetting(
        "PROMETHEUS_TLS_INSECURE",
        "`true` (or `1`, `yes`): do not verify Prometheus's TLS certificate.",
        unset="verify",
    ),
    EnvSetting("PROMETHEUS_TIMEOUT_S", "Seconds one query may take.", "timeout_s", float),
    EnvSetting(
        "PROMETHEUS_RETRIES",
        "Retries after a query that failed on a connection error, a timeout, a 5xx or a 429; then the cycle reports "
        "Prometheus unavailable (and scales nothing down).",
        "retries",
        int,
    ),
    EnvSetting(
        "PROMETHEUS_BACKOFF_S",
        "Seconds before the first retry; each later retry waits twice as long.",
        "backoff_s",
        float,
    ),
    EnvSetting(
        "PROMETHEUS_RATE_WINDOW",
        "The window of the arrival-rate `rate()` (WVA's). Shorter reacts faster and is noisier.",
        "rate_window",
    ),
    EnvSetting(
        "PROMETHEUS_FALLBACK_WINDOW",
        "The window of the token averages when the rate window saw no request, and of the prompt-length histogram.",
        "fallback_window",
    ),
    EnvSetting(
        "PROMETHEUS_PEAK_WINDOW",
        "How far back the recent peak rate reaches: sizing holds the highest rate of this window, about a replica's "
        "start-up, so capacity asked for during a peak is not given back before it is ready.",
        "peak_window",
    ),
    EnvSetting(
        "PROMETHEUS_CHANGE_WINDOW",
        "The window of the rate's recent changes: a fall in each of its intervals, larger than the noise, skips the "
        "scale-down stabilization window.",
        "change_window",
    ),
    EnvSetting(
        "PROMETHEUS_NOISE_WINDOW",
        "The window of the rate's usual interval-to-interval change (its noise).",
        "noise_window",
    ),
    EnvSetting(
        "PROMETHEUS_BURST_WINDOW",
        "The window whose busiest instance over the peak window gives the burst rate "
        "(`modelplane.io/burst-sizing`). At least two scrape intervals: `increase()` needs two samples in it.",
        "burst_window",
    ),
    EnvSetting(
        "PROMETHEUS_MAX_AGE_S",
        "The oldest sample still used, in seconds: an older one (a target that vanished) counts as missing.",
        "max_age_s",
        float,
    ),
)
"""Every environment variable the Prometheus client reads, in the order the reference page lists them."""


def env_options(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``PrometheusMetrics`` keywords that ``environ`` sets with a typed value (the numbers and the windows).

    Args:
        environ: The environment to read (``os.environ`` or a mapping standing in for it).

    Returns:
        Each keyword a set, non-empty variable of :data:`PROMETHEUS_ENVIRONMENT` names, with its typed value.

    Raises:
        ValueError: a number that does not parse, naming the variable.
    """
    options: dict[str, Any] = {}
    for setting in PROMETHEUS_ENVIRONMENT:
        raw = environ.get(setting.name)
        if setting.option is None or not raw:
            continue
        options[setting.option] = _typed(setting, raw)
    return options


def _typed(setting: EnvSetting, raw: str) -> Any:
    try:
        return setting.kind(raw)
    except ValueError:
        article = "an integer" if setting.kind is int else "a number"
        raise ValueError(f"{setting.name} must be {article}, got {raw!r}") from None
