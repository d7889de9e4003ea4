"""Rollout of model catalog entries to serving workloads: Kthena ``Model`` and llmaz ``OpenModel``.

Decides the workloads, autoscaling objects and status each entry renders, and the probes and drain every
inference server shares.
"""
