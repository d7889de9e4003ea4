"""The follower bound: the least a load-following policy can cost against static provisioning, from the trace alone.

Why a module of its own: the benchmark's bar (cost <= 0.85x static peak's at equal attainment) is
reachable only on traces whose load varies enough, and this says which ones before any replay.

The estimate.  Per-interval SLO attainment falls about linearly with the load per replica (granite on
A100 on the conversation trace: 93.7 % at 0.20 req/s, 87.0 % at 0.35, 78.5 % at 0.50), so attainment
over a replay is ``a - b x (requests-weighted mean load per replica)``.  Static provisioning keeps ``S``
replicas: its weighted load is ``mean(r^2) / (mean(r) S)``, ``r`` the arrivals per interval.  A follower
that holds ``c`` requests per replica in every interval has weighted load ``c``, and at equal attainment
``c = mean(r^2) / (mean(r) S)``; its average replica count is ``mean(r) / c``, so its cost against
static's is ``mean(r)^2 / mean(r^2) = 1 / (1 + CV^2)``.  Ignored, each in the follower's favour: the
start-up delay (it knows each interval's arrivals in time), whole replicas (it may run 2.4), and
within-interval bursts.  A real policy therefore costs more than this; a trace whose bound is above
0.85 cannot meet the 0.85x bar with any load follower.  It is an estimate, not a proof: where attainment
is not linear in the load (or static provisioning sits at an unusually cheap point), a schedule can come
in slightly below it (docs/simulate.md measures it against the clairvoyant oracle).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import numpy as np

from engine.simulate.records import Trace

__all__ = ["arrival_counts", "follower_bound", "trace_follower_bound"]


def arrival_counts(arrival_s: np.ndarray, interval_s: float) -> np.ndarray:
    """Arrivals per whole interval from 0; requests in a last, partial interval are left out (a short bin
    would read as a lull and inflate the variation)."""
    if not interval_s > 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")
    arrivals = np.asarray(arrival_s, dtype=float)
    whole = int(float(arrivals.max(initial=0.0)) // interval_s)
    bins = max(whole, 1)
    inside = arrivals[arrivals < bins * interval_s]
    return np.bincount((inside // interval_s).astype(np.int64), minlength=bins)[:bins]


def follower_bound(counts: np.ndarray) -> float:
    """``mean(x)^2 / mean(x^2)`` of per-interval arrival counts: the cost of an ideal load follower as a
    share of static provisioning's at equal attainment (see the module docstring for the assumptions).
    1.0 for a flat load, lower the more it varies; 1.0 for no arrivals (nothing to follow)."""
    x = np.asarray(counts, dtype=float)
    second = float(np.mean(x * x)) if len(x) else 0.0
    return 1.0 if second == 0.0 else float(np.mean(x)) ** 2 / second


def trace_follower_bound(trace: Trace, interval_s: float) -> float:
    """The follower bound of a replayed trace at the policies' control interval (what the report and the
    benchmark print for it)."""
    return follower_bound(arrival_counts(trace.arrival_s, interval_s))
