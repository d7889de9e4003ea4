"""Kthena-style metric autoscaling of an AutoscalingPolicyBinding's targets, as pure functions.

Why: Kthena's AutoscalingPolicy (seed 003) scales a model's backends from per-instance metrics the
way the Kubernetes HPA does, then smooths the result with a stable policy (stabilization windows and
rate limits) and a panic mode for sudden surges; with heterogeneous hardware the total is poured into
the backends cheapest-first. Three decisions, one module each:

* :mod:`~engine.optimize.scaling.recommendation` -- how many replicas the metrics ask for
  (``pkg/autoscaler/algorithm/recommendation.go``);
* :mod:`~engine.optimize.scaling.behavior` -- how far the replicas may move now given the history
  (stable windows, rate limits, panic mode, the scale-to-zero grace period), over explicit,
  serializable state kept in ``AutoscalingPolicyBinding.status``;
* :mod:`~engine.optimize.scaling.distribution` -- how a total splits over heterogeneous backends by cost.

No I/O and no clock: time is always passed in as ``now`` (a tz-aware UTC datetime).
"""
