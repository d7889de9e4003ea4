"""The attainment loop inside an optimize cycle (engine.optimize.attainment): which percentile and hold each
model is sized with, where its state comes from, and when it holds."""

from __future__ import annotations

import dataclasses
import math

import pytest

from engine.api.validate import with_status
from engine.optimize.attainment import _already_acted_on
from engine.optimize.plan import plan_cycle
from engine.optimize.spec import ModelLoad
from engine.perf.tail_sizing import ANNOTATION_TTFT_PERCENTILE, PromptDistribution
from engine.slo.measure import LatencyHistograms, MeasuredAttainment, ModelAttainment
from engine.slo.target import ANNOTATION_SLO_ATTAINMENT, AttainmentTarget
from tests.engine.test_optimize import NS
from tests.engine.test_optimize import inputs as optimize_inputs
from tests.factories import variant_autoscaling

MODEL = "meta/llama-3.1-8b"
PROMPTS = PromptDistribution.from_buckets([(128.0, 300.0), (512.0, 700.0), (2048.0, 950.0), (math.inf, 1000.0)])
START = 100 * 0.9 / 0.95 - 2.0
"""The feed-forward start for a 0.9 target: 95 % of PROMPTS fit the H100's prefill within 500 ms (the ceiling), so
0.9 of all requests is 94.7 % of the achievable ones, less the plan's 2-point margin."""


def histograms(window_within: float, recent_within: float, requests: float = 1000.0) -> LatencyHistograms:
    """TTFT histograms with the given shares within 500 ms (every request's ITL within 10 ms)."""
    recent = requests / 10
    return LatencyHistograms(
        ttft_window=[(0.5, window_within * requests), (math.inf, requests)],
        ttft_recent=[(0.5, recent_within * recent), (math.inf, recent)],
        itl_window=[(0.01, requests), (math.inf, requests)],
        itl_recent=[(0.01, recent), (math.inf, recent)],
    )


def cycle(histogram: LatencyHistograms, *, status: dict | None = None, annotations: dict | None = None, **overrides):
    """One cycle of one H100 variant at 2 replicas (2 ready) serving 20 req/s with a prompt histogram."""
    va = variant_autoscaling(
        "h100",
        NS,
        MODEL,
        "H100",
        annotations={ANNOTATION_SLO_ATTAINMENT: "0.9", **(annotations or {})},
        sloClassRef={"name": "slo", "key": "premium"},
    )
    values = dict(
        latency={(NS, MODEL): histogram},
        loads={(NS, MODEL): ModelLoad(20.0, 700, 256, prompt_tokens=PROMPTS)},
        ready_replicas={(NS, "Deployment", "h100"): 2},
    )
    values.update(overrides)
    inputs = optimize_inputs([va], {"h100": 2}, **values)
    if status is not None:  # as the boundary reader hands it over: the previous status read into the model
        inputs = dataclasses.replace(inputs, variants=[with_status(inputs.variants[0], status)[0]])
    return plan_cycle(inputs).variants[0]


def test_a_shortfall_raises_the_percentile_and_a_surplus_lowers_it() -> None:
    """Target 0.9 stated by annotation: the loop starts at the feed-forward (the target's share of the ceiling)
    and moves with the measurement."""
    short = cycle(histograms(0.85, 0.80))
    ample = cycle(histograms(0.95, 0.99))
    assert short.sizing_percentile is not None and short.sizing_percentile > START
    assert ample.sizing_percentile is not None and ample.sizing_percentile < START
    assert "raised" in (short.loop_message or "") and "lowered" in (ample.loop_message or "")
    # The percentile is what tail sizing uses: the short model gets at least as many replicas.
    assert (short.desired or 0) >= (ample.desired or 0)


def test_a_pinned_percentile_turns_the_loop_off() -> None:
    decision = cycle(histograms(0.85, 0.80), annotations={ANNOTATION_TTFT_PERCENTILE: "90"})
    assert decision.sizing_percentile is None and decision.loop_message is None


def test_the_state_is_remembered_from_status_and_a_repeated_measurement_holds() -> None:
    """Each run is a fresh process: the last percentile and hold come from status.slo. The same window
    measurement as the status records (a snapshot read twice) moves nothing."""
    previous = {"slo": {"target": 0.9, "window": "1h", "sizingPercentile": 93.0, "peakHold": "10m"}}
    moved = cycle(histograms(0.85, 0.80), status=previous)
    assert moved.sizing_percentile is not None and moved.sizing_percentile > 93.0
    seen = {"slo": {**previous["slo"], "attained": 0.85, "requests": 1000}}
    held = cycle(histograms(0.85, 0.80), status=seen)
    assert held.sizing_percentile == pytest.approx(93.0) and not_moved(held.loop_message)


def not_moved(message: str | None) -> bool:
    return message is not None and message.startswith("sizing percentile held")


def test_missing_latency_histograms_hold_the_loop() -> None:
    decision = cycle(histograms(0.85, 0.80), latency_missing={(NS, MODEL): "no TTFT samples"}, **{"latency": {}})
    assert decision.sizing_percentile == pytest.approx(START) and "not measured" in (decision.loop_message or "")


def test_a_measurement_of_infinitely_many_requests_is_unknown_not_a_crash() -> None:
    """TTFT bucket increases of +Inf leave the attainment unknown (the loop holds as without histograms); and a
    measurement that still counts infinitely many requests is never "already acted on", rather than an
    OverflowError from making it a whole count."""
    requests = 1000.0
    broken = dataclasses.replace(
        histograms(0.85, 0.80), ttft_window=[(0.5, math.inf), (math.inf, math.inf)], ttft_recent=[(0.5, math.inf)]
    )
    seen = {"slo": {"target": 0.9, "window": "1h", "sizingPercentile": 93.0, "attained": 0.85, "requests": 1000}}
    decision = cycle(broken, status=seen)
    assert decision.sizing_percentile == pytest.approx(93.0) and "not measured" in (decision.loop_message or "")
    inputs = optimize_inputs([variant_autoscaling("h100", NS, MODEL, "H100")], {"h100": 2})
    target = AttainmentTarget(0.9, 3600.0, "annotation")
    for count in (math.inf, math.nan):
        infinite = MeasuredAttainment(0.85, 0.85, 1.0, count, "")
        measured = ModelAttainment(target, infinite, MeasuredAttainment(0.8, 0.8, 1.0, requests / 10, ""))
        assert not _already_acted_on(inputs, (NS, MODEL), measured)


def test_while_every_request_of_the_window_is_recent_the_loop_starts_no_lower_than_the_feed_forward() -> None:
    """The status holds p78 from the silent minutes before the model's first traffic (no ceiling was known then).
    While every request of the window is recent, the loop starts from the feed-forward the ceiling now gives
    (START), not lower; once the window holds older requests too, the same status is the loop's state."""
    first = LatencyHistograms(
        ttft_window=[(0.5, 95.0), (math.inf, 100.0)],
        ttft_recent=[(0.5, 95.0), (math.inf, 100.0)],
        itl_window=[(0.01, 100.0), (math.inf, 100.0)],
        itl_recent=[(0.01, 100.0), (math.inf, 100.0)],
    )
    silent = {"slo": {"target": 0.9, "window": "1h", "sizingPercentile": 78.0}}
    started = cycle(first, status=silent)
    later = cycle(histograms(0.95, 0.95), status=silent)
    assert started.sizing_percentile is not None and START - 1.0 < started.sizing_percentile <= START
    assert later.sizing_percentile is not None and later.sizing_percentile <= 78.0
    quiet = cycle(histograms(0.0, 0.0, requests=0.0), status={"slo": {**silent["slo"], "sizingPercentile": 96.0}})
    assert quiet.sizing_percentile == pytest.approx(96.0)  # never lowered by the rule: a floor, not a reset


def test_a_shortfall_while_replicas_start_lengthens_the_peak_hold_and_sizes_for_its_peak() -> None:
    """Two of four replicas still starting: the shortfall is capacity that came late, so the loop holds the
    peak longer (within the peaks the metrics read) and the plan sizes for the longer look-back's peak."""
    peaks = {180.0: 20.0, 600.0: 30.0, 3600.0: 45.0}
    load = ModelLoad(20.0, 700, 256, prompt_tokens=PROMPTS, recent_peak_rps=20.0, peaks_rps=peaks)
    status = {"slo": {"target": 0.9, "window": "1h", "sizingPercentile": 85.0, "peakHold": "3m"}}
    starting = cycle(
        histograms(0.80, 0.60),
        status=status,
        loads={(NS, MODEL): load},
        ready_replicas={(NS, "Deployment", "h100"): 1},
    )
    assert starting.peak_hold_s is not None and starting.peak_hold_s > 180.0
    assert starting.sizing_percentile == pytest.approx(85.0)
    assert "peak hold lengthened" in (starting.loop_message or "")
    steady = cycle(histograms(0.80, 0.60), status=status, loads={(NS, MODEL): load})
    assert (starting.desired or 0) > (steady.desired or 0)


def test_a_silent_minute_in_the_look_back_holds_the_hours_peak() -> None:
    """The rate fell to 0 for a minute within the hour (intermittent traffic): the hold restarts at the hour and
    the plan sizes for the hour's peak; the same load without the silent minute keeps the start-up window's."""
    peaks = {180.0: 20.0, 600.0: 30.0, 3600.0: 45.0}
    status = {"slo": {"target": 0.9, "window": "1h", "sizingPercentile": 85.0, "peakHold": "3m"}}

    def with_lowest(lowest: float) -> ModelLoad:
        return ModelLoad(
            20.0, 700, 256, prompt_tokens=PROMPTS, recent_peak_rps=20.0, peaks_rps=peaks, lowest_rps=lowest
        )

    silent = cycle(histograms(0.80, 0.60), status=status, loads={(NS, MODEL): with_lowest(0.0)})
    busy = cycle(histograms(0.80, 0.60), status=status, loads={(NS, MODEL): with_lowest(4.0)})
    assert silent.peak_hold_s == 3600.0 and "peak hold restarted at 60m" in (silent.loop_message or "")
    assert busy.peak_hold_s == 180.0 and "restarted" not in (busy.loop_message or "")
    assert (silent.desired or 0) > (busy.desired or 0)


def test_a_surplus_gives_a_long_hold_back_at_the_holds_gain_only_on_traffic_known_to_be_steady() -> None:
    """A 20-minute hold and a large surplus: traffic that had no silent minute (lowest rate 4 req/s) gives the hold
    back at the hold's gain; a silent minute, or a lowest rate Prometheus did not return, gives it back by one
    minute (the hold may span the lulls between bursts)."""
    peaks = {180.0: 20.0, 600.0: 30.0, 3600.0: 45.0}
    status = {"slo": {"target": 0.9, "window": "1h", "sizingPercentile": 85.0, "peakHold": "20m"}}

    def with_lowest(lowest: float | None) -> ModelLoad:
        return ModelLoad(
            20.0, 700, 256, prompt_tokens=PROMPTS, recent_peak_rps=20.0, peaks_rps=peaks, lowest_rps=lowest
        )

    steady, silent, unread = (
        cycle(histograms(0.99, 0.99), status=status, loads={(NS, MODEL): with_lowest(lowest)})
        for lowest in (4.0, 0.0, None)
    )
    assert steady.peak_hold_s is not None and steady.peak_hold_s < 1200.0 - 60.0
    assert silent.peak_hold_s == unread.peak_hold_s == 1200.0 - 60.0
    assert "restarted" not in (unread.loop_message or "")


def test_a_hold_reaching_back_to_no_higher_peak_does_not_stall_a_surplus() -> None:
    """A 20-minute hold on intermittent traffic and a large surplus: when the peak it reaches back to (30 req/s in
    the last 30 minutes) is above the start-up window's (20 req/s), only the hold is shortened; when the same hold
    reaches back to no higher peak, the percentile comes down in the same cycle."""
    status = {"slo": {"target": 0.9, "window": "1h", "sizingPercentile": 85.0, "peakHold": "20m"}}

    def with_peaks(peaks: dict[float, float]) -> ModelLoad:
        return ModelLoad(20.0, 700, 256, prompt_tokens=PROMPTS, recent_peak_rps=20.0, peaks_rps=peaks, lowest_rps=0.0)

    held = cycle(histograms(0.99, 0.99), status=status, loads={(NS, MODEL): with_peaks({180.0: 20.0, 1800.0: 30.0})})
    free = cycle(histograms(0.99, 0.99), status=status, loads={(NS, MODEL): with_peaks({180.0: 20.0, 1800.0: 20.5})})
    assert held.peak_hold_s == free.peak_hold_s == 1200.0 - 60.0
    assert held.sizing_percentile == pytest.approx(85.0)
    assert free.sizing_percentile is not None and free.sizing_percentile < 85.0
    assert "it holds no more load than the start-up window's peak" in (free.loop_message or "")


def test_a_target_above_the_ceiling_is_not_chased() -> None:
    """Half the prompts are too long for the TTFT target on any variant: the setpoint stays below the ceiling."""
    long_prompts = PromptDistribution.from_buckets([(1024.0, 500.0), (65536.0, 600.0), (math.inf, 1000.0)])
    decision = cycle(
        histograms(0.50, 0.45),
        annotations={ANNOTATION_SLO_ATTAINMENT: "0.95"},
        loads={(NS, MODEL): ModelLoad(20.0, 3000, 256, prompt_tokens=long_prompts)},
    )
    assert "below the ceiling" in (decision.loop_message or "")


def test_below_the_percentile_floor_the_model_is_sized_for_a_share_of_its_load() -> None:
    """At the lowest percentile with a surplus, the loop lowers the load factor; the factor is remembered from
    status.slo.loadFactor and the plan sizes for that share of the load (fewer replicas than at the whole load)."""
    heavy = {(NS, MODEL): ModelLoad(60.0, 700, 256, prompt_tokens=PROMPTS)}
    floor = {"slo": {"target": 0.8, "window": "1h", "sizingPercentile": 50.0}}
    annotations = {ANNOTATION_SLO_ATTAINMENT: "0.8"}
    lowered = cycle(histograms(0.95, 0.97), status=floor, annotations=annotations, loads=heavy)
    assert lowered.load_factor is not None and lowered.load_factor < 1.0
    assert (lowered.loop_message or "").startswith("load factor lowered")
    at_half = {"slo": {**floor["slo"], "loadFactor": 0.5}}
    held_half = cycle(histograms(0.85, 0.80), status=at_half, annotations=annotations, loads=heavy, latency={})
    held_whole = cycle(histograms(0.85, 0.80), status=floor, annotations=annotations, loads=heavy, latency={})
    assert held_half.load_factor == pytest.approx(0.5) and held_whole.load_factor == 1.0
    assert 0 < (held_half.desired or 0) < (held_whole.desired or 0)


def test_a_shortfall_the_inventory_cannot_serve_does_not_wind_the_percentile_up() -> None:
    """Two H100s for a load that needs more: the shortage ladder sizes the model for the mean request whatever the
    loop asks, so the loop holds its percentile instead of climbing to its bound while the plan stays capped (and
    sizing at that bound the moment the shortage ends). With the inventory free, the same shortfall raises it."""
    previous = {"slo": {"target": 0.9, "window": "1h", "sizingPercentile": 93.0}}
    short = cycle(histograms(0.85, 0.80), status=previous, inventory={"H100": 2})
    assert short.sizing_percentile == 93.0
    assert short.loop_message is not None and short.loop_message.startswith(
        "sizing percentile held at p93.0: the accelerator inventory and the variants' max-replicas hold the model"
        " at the mean request's TTFT"
    )
    assert "attained 80.0 % over the recent range" in short.loop_message
    assert "cannot hold the configured TTFT percentile" in short.message
    free = cycle(histograms(0.85, 0.80), status=previous)
    assert free.sizing_percentile is not None and free.sizing_percentile > 93.0
