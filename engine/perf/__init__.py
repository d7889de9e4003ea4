"""Performance of one inference-server replica: the queueing model, tail-aware and start-up-aware sizing, saturation.

Decides how much load one replica of a variant carries within its latency objectives, and when a variant is
saturated.  Depends only on :mod:`engine.api` and :mod:`engine.units`.
"""
