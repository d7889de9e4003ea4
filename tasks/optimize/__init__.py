"""The optimize flow's I/O: read the cluster and the metrics, write the decisions back.

Split by direction, so a reader follows one cycle as read -> engine plan -> write:

- :mod:`tasks.optimize.read`: the cluster state (one LIST per kind), the scale targets' replicas, the
  cycle's one metrics collection, and the pre-checks of a CLI run;
- :mod:`tasks.optimize.bindings`: what one Kthena AutoscalingPolicyBinding's targets are now (replicas,
  serving groups, ready pods, policy metrics), its model and accelerators, and its actuation modes;
- :mod:`tasks.optimize.write`: scale, status and Events for every VariantAutoscaling and binding.

The decisions themselves are made in :mod:`engine.optimize`. Import from the module that defines a name;
this package re-exports nothing.
"""
