"""Pure, deterministic domain logic: API models, performance model, solvers and policies.

Nothing here touches the network, the file system or the clock; time is passed in as ``now``.
"""
