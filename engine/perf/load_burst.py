"""Burst-aware load: the Poisson rate that explains the traffic's sub-minute peaks.

Why: the queueing model sizes for Poisson arrivals at a rate read per minute.  Bursty traffic (a code assistant's
requests after a build, a batch client's fan-out) brings dozens of requests within a second; averaged over the
minute they look like a modest rate, and a pool sized for it batches each cluster deep enough to miss the TTFT
target.  Prometheus sees sub-minute peaks at its scrape resolution: the most requests in one scrape interval over
the start-up horizon (``max_over_time(increase(vllm:request_success_total[15s])[3m:15s])``).

Poisson arrivals have peaks too, so a peak alone says nothing.  The *burst rate* is the Poisson rate whose
typical highest count over the same number of scrape intervals equals the observed peak::

    peak = m + z * sqrt(m)        (m: mean count per scrape interval; z: the normal quantile of 1 - 1/(bins + 1),
                                   the typical maximum of ``bins`` draws)
    burst rate = m / scrape_s

On Poisson traffic it is about the measured rate (so sizing is unchanged); on clustered traffic it is a multiple
of it, and the model then sizes a pool that spreads a cluster thin enough.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["burst_rate"]


def burst_rate(peak_count: float, scrape_s: float, bins: int) -> float:
    """The Poisson rate (req/s) whose typical highest count over ``bins`` scrape intervals of ``scrape_s`` is
    ``peak_count``; 0 for no arrivals."""
    if scrape_s <= 0 or bins < 1:
        raise ValueError("scrape interval must be > 0 and bins >= 1")
    if not peak_count > 0:
        return 0.0
    z = NormalDist().inv_cdf(1.0 - 1.0 / (bins + 1.0))
    root = (-z + math.sqrt(z * z + 4.0 * peak_count)) / 2.0
    return max(root, 0.0) ** 2 / scrape_s
