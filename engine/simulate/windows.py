"""What Prometheus would hold for a simulated run: vLLM's counters and histograms per window.

Why: the calibration and the policies read the simulator through the same series the optimize flow
reads from Prometheus (``vllm:time_to_first_token_seconds``, ``vllm:request_success_total``, ...), so
:func:`window_aggregates` turns the per-request records of a :class:`engine.simulate.records.SimResult`
into those increases per window, with vLLM's bucket boundaries.

Pure and deterministic: no I/O and no clock.
"""

from __future__ import annotations

import numpy as np

from engine.simulate.records import SimResult

__all__ = ["TTFT_BUCKETS_S", "ITL_BUCKETS_S", "PROMPT_TOKEN_BUCKETS", "window_aggregates"]

# vLLM's histogram buckets (seconds) for time to first token and for inter-token latency (vllm/v1/metrics/loggers.py:
# vllm:time_to_first_token_seconds; vllm:inter_token_latency_seconds, its older name
# vllm:time_per_output_token_seconds and the per-request vllm:request_time_per_output_token_seconds share ITL's).
TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)

# vLLM's buckets for vllm:request_prompt_tokens (build_1_2_5_buckets up to a 100k-token context), +Inf implied.
PROMPT_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)


def window_aggregates(
    result: SimResult, window_s: float, start_s: float = 0.0, by: str = "variant"
) -> dict[str, dict[str, np.ndarray]]:
    """Per variant (or per replica, ``by="replica"``, keyed by pod name) and window, what Prometheus would
    hold for those pods: increases of vLLM's counters and histograms over each window.

    Keys: ``start_s``, ``count`` (requests finished in the window), ``ttft_sum``, ``ttft_buckets``
    (cumulative counts per :data:`TTFT_BUCKETS_S`), ``queue_sum`` (``vllm:request_queue_time_seconds``),
    ``inference_sum`` (``vllm:request_inference_time_seconds``, admission to completion), ``itl_sum``,
    ``itl_count`` and ``itl_buckets`` (``vllm:time_per_output_token_seconds``: one observation per output
    token after the first, each at the request's mean inter-token latency, cumulative per
    :data:`ITL_BUCKETS_S`), ``prompt_sum`` and ``generation_sum`` (token histograms' sums), ``running_avg``
    (time average of ``num_requests_running``, as ``avg_over_time`` over fine scrapes), ``waiting_avg``.
    A request is attributed to the window it finished in (counters increase at completion), as vLLM
    does.  Only whole windows up to the horizon are returned: the drain after it is not a steady window.
    """
    if by not in ("variant", "replica"):
        raise ValueError(f"by must be 'variant' or 'replica', got {by!r}")
    done = result.done_s
    windows = max(int((result.horizon_s - start_s) // window_s), 0)
    edges = start_s + window_s * np.arange(windows + 1)
    last = edges[-1] if windows else start_s
    ok = ~np.isnan(done) & (result.variant_index >= 0) & (done < last)
    gaps = np.maximum(result.trace.out_tokens - 1, 0).astype(float)
    itl = result.itl_s
    if by == "variant":
        groups = [(v.key, result.variant_index == i) for i, v in enumerate(result.variants)]
    else:
        groups = [(pod, result.replica_index == i) for i, pod in enumerate(result.replica_pod)]
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, member in groups:
        mask = ok & member
        w = np.clip(((done[mask] - start_s) // window_s).astype(np.int64), 0, max(windows - 1, 0))

        def add(values: np.ndarray, w: np.ndarray = w) -> np.ndarray:
            return np.bincount(w, weights=values, minlength=windows)[:windows] if windows > 0 else np.zeros(0)

        def buckets(values: np.ndarray, bounds: tuple[float, ...], weights: np.ndarray) -> np.ndarray:
            if windows == 0:
                return np.zeros((0, len(bounds)))
            return np.stack([add((values <= b) * weights) for b in bounds], axis=1)

        ttft = (result.first_s - result.arrival_s)[mask]
        admit, first, fin = result.admit_s[mask], result.first_s[mask], done[mask]
        # Gauges count every request of the group, also those finishing after the last window.
        served = member & ~np.isnan(result.admit_s)
        admit_all = result.admit_s[served]
        done_all = np.minimum(np.nan_to_num(done[served], nan=last), last)
        out[name] = {
            "start_s": edges[:-1],
            "count": add(np.ones(int(mask.sum()))),
            "ttft_sum": add(ttft),
            "ttft_buckets": buckets(ttft, TTFT_BUCKETS_S, np.ones(int(mask.sum()))),
            "queue_sum": add(admit - result.arrival_s[mask]),
            "inference_sum": add(fin - admit),
            "itl_sum": add(fin - first),
            "itl_count": add(gaps[mask]),
            "itl_buckets": buckets(itl[mask], ITL_BUCKETS_S, gaps[mask]),
            "prompt_sum": add(result.trace.in_tokens[mask].astype(float)),
            "generation_sum": add(result.trace.out_tokens[mask].astype(float)),
            "running_avg": _occupancy(admit_all, done_all, edges) / window_s,
            "waiting_avg": _occupancy(result.arrival_s[served], admit_all, edges) / window_s,
        }
    return out


def _occupancy(begin: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Integral over each window of the number of intervals [begin, end) covering t (vectorised)."""
    b = np.sort(begin)
    e = np.sort(end)
    cb = np.concatenate([[0.0], np.cumsum(b)])
    ce = np.concatenate([[0.0], np.cumsum(e)])

    def area(t: np.ndarray) -> np.ndarray:
        kb = np.searchsorted(b, t, side="right")
        ke = np.searchsorted(e, t, side="right")
        return np.asarray((t * kb - cb[kb]) - (t * ke - ce[ke]), dtype=float)

    f = area(edges)
    return np.asarray(np.diff(f), dtype=float)
