"""One optimization cycle: parse the VariantAutoscalings and ConfigMaps, plan replicas, write status.

Decides, for every variant, how many replicas on which accelerator (through :mod:`engine.allocation` and
:mod:`engine.perf`), how they are applied (actuation modes, Kthena-style scaling, policy bindings) and what the
status says.
"""
