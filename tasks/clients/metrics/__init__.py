"""Live load and saturation metrics for the optimizer: from Prometheus (vLLM metrics) or from a file.

The optimize flow reads, once per cycle, the arrival rate and mean tokens per request of every served model
and the KV-cache usage and queue length of its pods (plus the Kthena policies' per-pod metrics). Where
those numbers come from is split by concern:

- :mod:`tasks.clients.metrics.snapshot`: what a collection returns (:class:`~tasks.clients.metrics.snapshot.MetricsSnapshot`,
  :class:`~tasks.clients.metrics.snapshot.ModelKey`, ...), the :class:`~tasks.clients.metrics.snapshot.MetricsSource`
  protocol both sources implement, their errors, and the rule that missing data is explained, never zero;
- :mod:`engine.promql`: the PromQL asked (vLLM metric names, WVA conventions) and how its answers are
  taken apart, text only;
- :mod:`tasks.clients.metrics.prometheus`: :class:`~tasks.clients.metrics.prometheus.PrometheusMetrics`, the HTTP client
  (retries, bearer token, freshness) that runs those queries and assembles the loads and pods per model;
- :mod:`tasks.clients.metrics.file`: :class:`~tasks.clients.metrics.file.FileMetrics`, the same data from a YAML file for
  local and CI runs, and :func:`~tasks.clients.metrics.file.write_metrics_file` to capture a snapshot in that format.

Import from the module that defines a name; this package re-exports nothing.
"""
