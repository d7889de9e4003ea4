"""Service-level objectives as operators state them: an attainment over a window, measured from vLLM.

An operator's SLO is a share of requests over a window ("90 % of requests within 500 ms TTFT and 24 ms
ITL, over an hour"). The latency thresholds come from the service classes (:mod:`engine.optimize.config`);
this package adds the rest:

* :mod:`~engine.slo.target` -- the attainment target and its evaluation window per model (annotations
  ``modelplane.io/slo-attainment`` and ``modelplane.io/slo-window``, the service class's ``slo-attainment``);
* :mod:`~engine.slo.measure` -- the attainment measured from vLLM's latency histograms (bucket increases
  over the window and over the last two minutes), the error budget and the burn rate.

Pure: no I/O, no clock.
"""
